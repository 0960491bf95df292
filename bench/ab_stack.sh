#!/bin/bash
# Side by side: the same build with a stack setting at two values, alternating
# (order swapped every other round so neither side always runs first).
#   bench/ab_stack.sh RECSERVE_STACK_UNIX_SOCKETS true false 8 cpu
#   bench/ab_stack.sh RECSERVE_STACK_ENVOY_WORKERS 1 2 3 load200
#   bench/ab_stack.sh RECSERVE_GATEWAY_USER_VECTOR_CACHE_SIZE 0 10000 2 cpu260   # cpu at 260/s
#   bench/ab_stack.sh RECSERVE_STACK_ONE_PROCESS false true 1 serving   # idle, bursts, rates, chaos
#   bench/ab_stack.sh RECSERVE_STACK_ONE_PROCESS false true 2 events5000   # bench events --rate 5000
# Writes build/bench/<what>-<variable>-<value>-<round>.json. Each stack idles
# RECSERVE_AB_SETTLE_S (default 45) after it is ready: the first half minute
# after a start costs more per request (the retriever's new generation is
# still being indexed), and a side measured then reads worse than it serves.
set -u
settle=${RECSERVE_AB_SETTLE_S:-45}
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
    sleep "$settle"
    $python -m bench load --rate 20 --duration 5 --out build/bench/ab-warm-up.json > /dev/null
    out=build/bench/$what-$variable-$mode-$round.json
    case $what in
      cpu) $python -m bench cpu --rate 50 --duration 20 --out "$out" > /dev/null ;;
      cpu[0-9]*) $python -m bench cpu --rate "${what#cpu}" --duration 20 --out "$out" > /dev/null ;;
      events[0-9]*) $python -m bench events --duration 20 --rate "${what#events}" --out "$out" > /dev/null ;;
      load200) $python -m bench load --rate 200 --duration 30 --out "$out" > /dev/null ;;
      serving)  # idle p50, bursts of 32, rates to 400/s (200/s for 60 s), SIGKILL of each process
        $python -m bench idle --out "${out%.json}-idle.json" > /dev/null
        $python -m bench burst --sizes 32 --out "${out%.json}-burst.json" > /dev/null
        $python -m bench sweep --rates 50,200,400 --duration 20 --long-rate 200 --long-duration 60 \
          --chart "${out%.json}-sweep.png" --out "${out%.json}-sweep.json" > /dev/null
        $python -m bench chaos --rate 50 --out "${out%.json}-chaos.json" > /dev/null ;;
      *) echo "unknown measurement: $what (cpu, cpuRATE, eventsRATE, load200, serving)" >&2; kill -INT $pid; exit 2 ;;
    esac
    kill -INT $pid
    wait $pid
    echo "round $round $variable=$mode: $out"
  done
done
