# Triton for GPU hosts, lean: the -min image plus only what our repository
# uses (the server and the onnxruntime backend, which also runs TensorRT as
# its execution provider). The full NGC image carries every backend
# (PyTorch, TensorFlow, Python, vLLM, ...): over 15 GB; this keeps the server,
# CUDA runtime libraries and one backend (expected 6-8 GB, most of it CUDA,
# cuDNN and TensorRT). Image size is cold-start time on a new node.
#   docker build -f infra/triton/gpu.Dockerfile -t recserve/triton-gpu .
# 24.10 ships Triton 2.51.0, the server in the nvidia-pytriton wheel the CPU stack runs.
ARG TRITON_VERSION=24.10

FROM nvcr.io/nvidia/tritonserver:${TRITON_VERSION}-py3 AS full

FROM nvcr.io/nvidia/tritonserver:${TRITON_VERSION}-py3-min
COPY --from=full /opt/tritonserver/bin /opt/tritonserver/bin
COPY --from=full /opt/tritonserver/lib /opt/tritonserver/lib
COPY --from=full /opt/tritonserver/backends/onnxruntime /opt/tritonserver/backends/onnxruntime
ENV PATH=/opt/tritonserver/bin:$PATH \
    LD_LIBRARY_PATH=/opt/tritonserver/lib:$LD_LIBRARY_PATH
RUN useradd --system --uid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin triton
COPY infra/triton/start.sh /usr/local/bin/start-triton
USER 10001:10001
# The repository comes from the init service's volume; the GPU config files
# (configs/gpu.pbtxt) sit beside the CPU ones. start-triton adds the stack's
# TLS and control restrictions from /data/tls, then TRITON_EXTRA_ARGS (e.g.
# the trace flags the observability layer adds).
CMD ["start-triton", "tritonserver", "--model-repository=/data/triton/repository", "--model-config-name=gpu", "--model-control-mode=explicit", "--load-model=user_tower", "--load-model=ranker", "--load-model=item_tower", "--strict-readiness=true"]
