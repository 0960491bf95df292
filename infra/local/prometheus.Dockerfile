# Stand-in for prom/prometheus: Debian's prometheus (2.42) and wget for the
# healthcheck compose.observability.yaml defines.
ARG BASE=recserve-local/python:3.11-bookworm
FROM ${BASE}
RUN apt-get update && apt-get install -y --no-install-recommends prometheus wget \
    && rm -rf /var/lib/apt/lists/* && mkdir -p /prometheus && chown prometheus:prometheus /prometheus
USER prometheus
ENTRYPOINT ["prometheus"]
