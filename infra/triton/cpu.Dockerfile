# Triton for CPU hosts: the tritonserver binary from the nvidia-pytriton
# wheel with only the Python backend, which runs our ONNX models in ONNX
# Runtime (infra/triton/onnx_model.py): the same server and repository as the
# local stack, about 1 GB instead of the NGC image's 15+.
#   docker build -f infra/triton/cpu.Dockerfile -t recserve/triton-cpu .
ARG PYTHON_IMAGE=python:3.11.7-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
RUN python -m venv /opt/venv
COPY requirements/triton.txt /tmp/requirements.txt
RUN /opt/venv/bin/pip install --no-cache-dir -r /tmp/requirements.txt
# The python backend directory: the shared library, its utils and the stub
# built for this Python (what recserve_stack/triton.py assembles locally).
RUN set -eu; wheel=/opt/venv/lib/python3.11/site-packages/pytriton/tritonserver; \
    mkdir -p /opt/backends/python; \
    cp "$wheel/backends/python/libtriton_python.so" "$wheel/backends/python/triton_python_backend_utils.py" \
       "$wheel/python_backend_stubs/3.11/triton_python_backend_stub" /opt/backends/python/

FROM ${PYTHON_IMAGE}
RUN useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin triton \
    && mkdir -p /data && chown 10001:10001 /data  # a new named volume takes this owner
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/backends /opt/backends
# The stub finds numpy and onnxruntime through the python3 first on PATH.
# Two malloc arenas, as the local runner sets (apps/recserve_stack/triton.py).
ENV PATH=/opt/venv/bin:$PATH \
    LD_LIBRARY_PATH=/usr/local/lib:/opt/venv/lib/python3.11/site-packages/nvidia_pytriton.libs \
    PYTHONDONTWRITEBYTECODE=1 \
    MALLOC_ARENA_MAX=2
COPY infra/triton/start.sh /usr/local/bin/start-triton
USER 10001:10001
# start-triton adds the stack's TLS and control restrictions from /data/tls,
# then TRITON_EXTRA_ARGS (e.g. the trace flags the observability layer adds).
CMD ["start-triton", "/opt/venv/lib/python3.11/site-packages/pytriton/tritonserver/bin/tritonserver", "--model-repository=/data/triton/repository", "--backend-directory=/opt/backends", "--model-control-mode=explicit", "--load-model=user_tower", "--load-model=ranker", "--load-model=item_tower", "--strict-readiness=true"]
