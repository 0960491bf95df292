#!/bin/sh
# The official image builds Redis with protected mode off, so other containers
# on the network may connect; Debian's build keeps it on. Same default here.
if [ "${1:-}" = redis-server ]; then
  shift
  exec redis-server "$@" --protected-mode no
fi
exec "$@"
