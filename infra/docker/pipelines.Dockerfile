# The init and batch image: builds the artifacts, publishes them (Feast +
# Redis, the Qdrant collection, the Triton repository, fallback lists, admin
# keys) into the shared volume, and runs the nightly Spark re-scoring.
#   docker build -f infra/docker/pipelines.Dockerfile -t recserve/pipelines .
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# torch's CPU build (the pin says +cpu) lives on PyTorch's own index; where
# that is not reachable, point this at a mirror that holds the same wheel
# (for hosts that cannot reach it): --build-arg TORCH_INDEX_URL=https://mirror/whl/cpu
# Empty: no extra index; the wheel comes from build/wheels, which the local
# path (infra/local/compose.sh) fills with `pip download` on the host.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
# build/wheel[s]: the folder's wheels if it exists, nothing otherwise.
COPY requirements/services/pipelines.txt build/wheel[s] /tmp/pip/
RUN /opt/venv/bin/pip install --find-links /tmp/pip \
    ${TORCH_INDEX_URL:+--extra-index-url "${TORCH_INDEX_URL}"} -r /tmp/pip/pipelines.txt
WORKDIR /src
COPY requirements/main.txt requirements/main.txt
COPY protos protos
COPY third_party third_party
COPY scripts/gen_protos.py scripts/gen_protos.py
RUN /opt/venv/bin/pip install "$(grep -i '^grpcio-tools==' requirements/main.txt)" \
    && /opt/venv/bin/python scripts/gen_protos.py

FROM ${PYTHON_IMAGE}
# Spark needs a Java runtime.
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin recserve \
    && mkdir -p /data && chown 10001:10001 /data  # a new named volume takes this owner
COPY --from=build /opt/venv /opt/venv
COPY --from=build /src/gen/python /app/gen/python
COPY libs /app/libs
COPY apps /app/apps
COPY pipelines /app/pipelines
COPY infra/triton /app/infra/triton
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app:/app/libs:/app/apps:/app/gen/python \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
WORKDIR /app
USER 10001:10001
ENTRYPOINT ["python", "-m", "pipelines"]
CMD ["--help"]
