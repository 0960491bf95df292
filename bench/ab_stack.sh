#!/bin/bash
# Side by side: the same build with a stack setting at two values, alternating
# (order swapped every other round so neither side always runs first).
#   bench/ab_stack.sh RECSERVE_STACK_UNIX_SOCKETS true false 8 cpu
#   bench/ab_stack.sh RECSERVE_STACK_ENVOY_WORKERS 1 2 3 load200
#   bench/ab_stack.sh RECSERVE_RANKER_COALESCE_IN_FLIGHT 0 1 2 cpu260   # cpu at 260/s
# Writes build/bench/<what>-<variable>-<value>-<round>.json.
set -u
variable=$1 first=$2 second=$3 rounds=$4 what=$5
cd "$(dirname "$0")/.."
python=.venv/bin/python
mkdir -p build/bench
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 0 ]; then modes="$second $first"; else modes="$first $second"; fi
  for mode in $modes; do
    log=build/bench/ab-stack-$mode.log
    env "$variable=$mode" $python -m recserve_stack up > "$log" 2>&1 &
    pid=$!
    for _ in $(seq 180); do grep -q "recserve stack ready" "$log" && break; sleep 1; done
    $python -m bench load --rate 20 --duration 5 --out build/bench/ab-warm-up.json > /dev/null
    out=build/bench/$what-$variable-$mode-$round.json
    case $what in
      cpu) $python -m bench cpu --rate 50 --duration 20 --out "$out" > /dev/null ;;
      cpu[0-9]*) $python -m bench cpu --rate "${what#cpu}" --duration 20 --out "$out" > /dev/null ;;
      load200) $python -m bench load --rate 200 --duration 30 --out "$out" > /dev/null ;;
      *) echo "unknown measurement: $what (cpu, cpuRATE, load200)" >&2; kill -INT $pid; exit 2 ;;
    esac
    kill -INT $pid
    wait $pid
    echo "round $round $variable=$mode: $out"
  done
done
