# One slim image per service, built from the repository root:
#   docker build -f infra/docker/service.Dockerfile --build-arg SERVICE=gateway -t recserve/gateway .
# SERVICE is gateway, features, retriever or ranker. Each image installs only
# requirements/services/$SERVICE.txt (that service's pinned dependency closure).
# Base images are pinned to exact versions; scripts/pin-image-digests.sh turns
# every FROM into tag@sha256 on a machine that can reach the registry.
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

# Stubs are generated as `make proto` does, with the pinned protoc plugin; a
# stage of its own, before SERVICE is known, so the four images share it.
FROM ${PYTHON_IMAGE} AS protos
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements/main.txt requirements/main.txt
RUN python -m venv /opt/protoc \
    && /opt/protoc/bin/pip install "$(grep -i '^grpcio-tools==' requirements/main.txt)"
COPY protos protos
COPY third_party third_party
COPY scripts/gen_protos.py scripts/gen_protos.py
RUN /opt/protoc/bin/python scripts/gen_protos.py

FROM ${PYTHON_IMAGE} AS build
ARG SERVICE
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
COPY requirements/services/${SERVICE}.txt /tmp/requirements.txt
RUN /opt/venv/bin/pip install -r /tmp/requirements.txt

FROM ${PYTHON_IMAGE}
ARG SERVICE
RUN useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin recserve \
    && mkdir -p /data && chown 10001:10001 /data  # a new named volume takes this owner
COPY --from=build /opt/venv /opt/venv
COPY --from=protos /src/gen/python /app/gen/python
# Every library: each is small, and a service imports only what it uses.
COPY libs /app/libs
COPY services/__init__.py /app/services/__init__.py
COPY services/${SERVICE} /app/services/${SERVICE}
# No .pyc writes and nothing outside /data and /tmp: runs with read_only: true.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app:/app/libs:/app/gen/python \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RECSERVE_SERVICE=${SERVICE}
WORKDIR /app
USER 10001:10001
# exec: the service is PID 1's only child-free process and gets SIGTERM itself.
CMD ["sh", "-c", "exec python -m services.${RECSERVE_SERVICE}"]
