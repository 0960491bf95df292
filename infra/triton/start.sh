#!/bin/sh
# Starts tritonserver in the Compose stack with the stack's security settings
# so only the stack's own components get in: gRPC takes only certificates of
# the stack's CA, model control needs the ranker's secret header, and HTTP
# answers health alone (the healthcheck's; no TLS there, so nothing else). The
# same flags as the local runner's apps/recserve_stack/triton.py (tests/integration/
# test_compose.py compares them), except that the local stack turns HTTP off:
# there any local user can read the secret from the process list.
# Usage: start.sh TRITONSERVER [ARGS...]; TRITON_EXTRA_ARGS are appended.
# TRITON_TLS_DIR and TRITON_SHM_DIR move /data/tls and /dev/shm (tests).
set -eu
tls=${TRITON_TLS_DIR:-/data/tls}
# The python backend's tensor regions: Triton removes them when it stops, but
# one that was killed (OOM, a failed liveness probe) leaves them, and the
# pod's /dev/shm volume outlives the container; nothing else here uses it.
rm -f "${TRITON_SHM_DIR:-/dev/shm}"/triton_python_backend_shm_region_*
if [ ! -f "$tls/triton.pem" ] || [ ! -f "$tls/triton-control.secret" ]; then
  echo "no certificates in $tls: the init step makes them (python -m recserve_stack keys)" >&2
  exit 1
fi
restriction="recserve-triton-control=$(cat "$tls/triton-control.secret")"
server=$1
shift
# shellcheck disable=SC2086  # TRITON_EXTRA_ARGS is a list of flags
exec "$server" "$@" \
  --grpc-use-ssl-mutual=true \
  --grpc-server-cert="$tls/triton.pem" \
  --grpc-server-key="$tls/triton.key" \
  --grpc-root-cert="$tls/ca.pem" \
  --grpc-restricted-protocol="model-repository,shared-memory,trace,logging:$restriction" \
  --http-restricted-api="metadata,inference,shared-memory,model-config,model-repository,statistics,trace,logging:$restriction" \
  --grpc-keepalive-permit-without-calls=1 \
  --grpc-http2-min-recv-ping-interval-without-data=5000 \
  --grpc-http2-max-ping-strikes=0 \
  ${TRITON_EXTRA_ARGS:-}
