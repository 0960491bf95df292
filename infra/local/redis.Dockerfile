# Stand-in for the official redis image: Debian's redis-server (7.0).
ARG BASE=recserve-local/python:3.11-bookworm
FROM ${BASE}
RUN apt-get update && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* && mkdir -p /data && chown redis:redis /data
COPY infra/local/redis-entrypoint.sh /usr/local/bin/redis-entrypoint
WORKDIR /data
USER redis
ENTRYPOINT ["redis-entrypoint"]
CMD ["redis-server"]
