#!/usr/bin/env bash
# The Compose stack on this machine, needing no container registry: Debian's
# docker.io engine and docker-compose 1.29, stand-in bases (bases.sh),
# compose.yaml plus compose.local.yaml. Used by `make compose-up|compose-down|compose-test`.
#   compose.sh engine install and start the Docker engine (exit 1 if it cannot run)
#   compose.sh up     the engine, build every image, start, wait healthy
#                     (DATASET=DIR: a team's dataset instead of the demo)
#   compose.sh down   remove the containers, network and volumes (and the engine if we started it)
#   compose.sh test   up, the e2e suite through Envoy on :8080; a generated
#                     shop's stack from DATASET and its test; then down
#   compose.sh sizes  every recserve image's size
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
PROJECT=recserve
COMPOSE=(docker-compose -p "$PROJECT" -f compose.yaml -f compose.local.yaml)
ENGINE_PID=build/dockerd.pid

engine() {
  if ! command -v dockerd >/dev/null || ! command -v docker-compose >/dev/null \
    || ! command -v mmdebstrap >/dev/null; then
    echo "installing Debian's docker.io, docker-compose and mmdebstrap"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      docker.io docker-compose mmdebstrap) >/dev/null || {
      echo "could not install docker.io, docker-compose and mmdebstrap" >&2
      return 1
    }
  fi
  if ! docker info >/dev/null 2>&1; then
    # No systemd on these machines: the daemon is started by hand.
    mkdir -p build
    nohup dockerd >build/dockerd.log 2>&1 &
    echo $! >"$ENGINE_PID"
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || {
      echo "dockerd did not start:" >&2
      tail -20 build/dockerd.log >&2
      return 1
    }
  fi
}

wheels() {
  # torch's +cpu wheel is on PyTorch's index, which a build container may not
  # reach; the host's pip finds it (its index or find-links) for the build.
  local pin
  pin=$(grep -i '^torch==' requirements/services/pipelines.txt)
  mkdir -p build/wheels
  ls build/wheels/torch-* >/dev/null 2>&1 \
    || "$PY" -m pip download -q --no-deps --dest build/wheels "$pin"
}

wait_healthy() {
  local service=$1 limit=${2:-300} id status
  id=$("${COMPOSE[@]}" ps -q "$service")
  for _ in $(seq "$limit"); do
    status=$(docker inspect -f '{{.State.Health.Status}}' "$id")
    [ "$status" = healthy ] && return 0
    sleep 1
  done
  echo "$service is $status after ${limit}s" >&2
  "${COMPOSE[@]}" ps >&2
  return 1
}

PROBE_USER=42  # a MovieLens user; with DATASET, the dataset's busiest

your_dataset() {
  # DATASET=DIR: a team's dataset, validated here first (a failing one starts
  # nothing), mounted at /data/dataset for the build (compose.yaml), whose
  # container gets the memory validate estimates for it.
  [ -n "${DATASET:-}" ] || return 0
  local dir report
  dir=$(realpath "$DATASET")
  if ! report=$("$PY" -m pipelines validate --json "$dir"); then
    "$PY" -m pipelines validate "$dir" >&2 || true
    echo "DATASET=$DATASET fails validation: nothing was started" >&2
    return 1
  fi
  export RECSERVE_DATASET=$dir
  RECSERVE_BUILD_MEMORY=$("$PY" -c 'import json, sys
print(json.load(sys.stdin)["build_memory_limit_gib"])' <<<"$report")G
  export RECSERVE_BUILD_MEMORY
  PROBE_USER=$("$PY" -c 'import sys, pathlib
from recserve_data import load
print(load(pathlib.Path(sys.argv[1])).interactions["user_id"].value_counts().index[0])' "$dir")
  echo "dataset $dir (validated); the build's memory limit: $RECSERVE_BUILD_MEMORY"
}

up() {
  engine
  your_dataset
  local start=$SECONDS
  infra/local/bases.sh
  wheels
  # In parallel: the init image alone takes as long as the other six
  # (measured here: 5.5 min instead of 9.5 from cold).
  "${COMPOSE[@]}" build --parallel
  local built=$SECONDS
  "${COMPOSE[@]}" up -d "$@" || { show_failure; return 1; }
  wait_healthy envoy || { show_failure; return 1; }
  local healthy=$SECONDS
  first_full_answer || { show_failure; return 1; }
  echo "built in $((built - start)) s; up to healthy in $((healthy - built)) s," \
    "to the first full answer in $((SECONDS - built)) s"
  "${COMPOSE[@]}" ps
}

show_failure() {
  # What CI needs to see before `down` removes it: every container's state and
  # the last lines of each one that is not running healthy.
  docker ps -a --filter "label=com.docker.compose.project=$PROJECT" \
    --format '{{.Names}}\t{{.Status}}' >&2
  local name
  for name in $(docker ps -a --filter "label=com.docker.compose.project=$PROJECT" \
    --format '{{.Names}} {{.Status}}' | grep -v '(healthy)' | cut -d' ' -f1); do
    echo "--- $name (last 30 lines)" >&2
    docker logs --tail 30 "$name" >&2 2>&1 || true
  done
}

first_full_answer() {
  # A Recommend through Envoy, as a client would, until one is not degraded.
  local reply
  for _ in $(seq 120); do
    reply=$(curl -s -m 2 -d "{\"user_id\":\"$PROBE_USER\",\"k\":5}" \
      http://127.0.0.1:8080/v1/recommend || true)
    case $reply in *'"degraded":false'*) echo "$reply" | cut -c1-300; return 0 ;; esac
    sleep 0.5
  done
  echo "no full answer within 60 s: $reply" >&2
  return 1
}

remove() {
  if docker info >/dev/null 2>&1; then
    "${COMPOSE[@]}" --profile canary --profile nightly --profile metrics \
      down --volumes --remove-orphans
  fi
}

down() {
  remove
  if [ -f "$ENGINE_PID" ]; then
    kill "$(cat "$ENGINE_PID")" 2>/dev/null || true
    rm -f "$ENGINE_PID"
  fi
}

sizes() {
  docker images --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' | grep '^recserve' | sort
}

case ${1:-} in
  engine) engine ;;
  up) up "${@:2}" ;;
  down) down ;;
  sizes) sizes ;;
  test)
    trap down EXIT
    # Two gateways, as the local stack runs: a killed one is covered by Envoy's
    # retry on the other (tests/e2e).
    # and Prometheus (profile metrics), which the suite checks scrapes them.
    export COMPOSE_PROFILES=metrics
    up --scale gateway=2
    RECSERVE_E2E_STACK=compose "$PY" -m pytest -q -p no:cacheprovider tests/e2e "${@:2}"
    # Then a team's dataset: a generated shop (staples bought again: its
    # list passes the gate) from DATASET, built and served by a fresh stack.
    remove
    unset COMPOSE_PROFILES
    rm -rf build/compose-shop
    "$PY" -m pipelines generate-shop --out build/compose-shop --items 400 --users 300 \
      --events 60000 --seed 3 --repeat >/dev/null
    DATASET=build/compose-shop up
    RECSERVE_COMPOSE_DATASET=$(realpath build/compose-shop) "$PY" -m pytest -q \
      -p no:cacheprovider tests/compose/test_your_dataset.py
    ;;
  *) echo "usage: $0 engine|up|down|test|sizes" >&2; exit 2 ;;
esac
