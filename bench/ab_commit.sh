#!/bin/bash
# Side by side: an earlier commit's stack and this working tree's, alternating
# (the earlier one first in odd rounds), each started fresh on the same data dir.
#   bench/ab_commit.sh 47bd53d 2 "events:400 events:1000 events:0"   # bench events --rate R (0: closed loop)
#   bench/ab_commit.sh 6935dd2 2 cpu                                  # bench cpu at 50/s
#   bench/ab_commit.sh 6935dd2 2 chaos                                # SIGKILL of the one process at 50/s
#   bench/ab_commit.sh 6935dd2 2 chaos:one-process-2                  # ... of the second, where it runs
#   bench/ab_commit.sh 6935dd2 2 freeze:one-process                   # SIGSTOP of it for 4 s instead
#   bench/ab_commit.sh 6935dd2 2 "burst load:200 load:400"            # bursts of 32; bench load 60 s
#   bench/ab_commit.sh 3b40be8 6 start                                # only the start and the stop, timed
# The earlier commit is checked out in a worktree under build/ (its own code,
# this tree's environments and generated stubs). Writes
# build/bench/<measurement>-<before|after>-<round>.json.
set -u
commit=$1 rounds=$2 measurements=$3
cd "$(dirname "$0")/.."
here=$(pwd) python=$(pwd)/.venv/bin/python
data=${RECSERVE_STACK_DATA_DIR:-$here/data}
before=$here/build/ab-$commit
[ -d "$before" ] || git worktree add -q "$before" "$commit"
for link in .venv .venv-triton build gen; do [ -e "$before/$link" ] || ln -s "$here/$link" "$before/$link"; done
mkdir -p build/bench
since() { awk -v from="$1" -v now="$(date +%s.%N)" 'BEGIN { printf "%.2f", now - from }'; }
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 1 ]; then sides="before after"; else sides="after before"; fi
  for side in $sides; do
    if [ $side = before ]; then tree=$before; else tree=$here; fi
    log=build/bench/ab-$side.log started=$(date +%s.%N)
    : > "$log"  # emptied here: the last stack's "ready" line must not count for this one
    (cd "$tree" && RECSERVE_STACK_DATA_DIR=$data PYTHONPATH=$tree:$tree/libs:$tree/apps:$here/gen/python \
      $python -m recserve_stack up > "$here/$log" 2>&1) &
    pid=$!
    for _ in $(seq 1800); do grep -q "recserve stack ready" "$log" && break; sleep 0.1; done
    echo "round $round $side: ready after $(since "$started") s"
    for what in $measurements; do
      out=build/bench/${what/:/-}-$side-$round.json
      case $what in
        cpu) $python -m bench load --rate 20 --duration 5 > /dev/null
             RECSERVE_STACK_DATA_DIR=$data $python -m bench cpu --rate 50 --duration 20 --out "$out" > /dev/null ;;
        events:*) RECSERVE_STACK_DATA_DIR=$data $python -m bench events --duration 20 \
                    --rate "${what#events:}" --out "$out" > /dev/null ;;
        chaos|chaos:*) kill=${what#chaos}; kill=${kill#:}
               RECSERVE_STACK_DATA_DIR=$data $python -m bench chaos --kill "${kill:-one-process}" \
                 --rate 50 --duration 20 --out "$out" > /dev/null ;;
        freeze:*) RECSERVE_STACK_DATA_DIR=$data $python -m bench chaos --kill "${what#freeze:}" \
                    --freeze 4 --rate 50 --duration 20 --out "$out" > /dev/null ;;
        burst) $python -m bench load --rate 20 --duration 5 > /dev/null
               $python -m bench burst --sizes 32 --repeats 5 --out "$out" > /dev/null ;;
        load:*) $python -m bench load --rate "${what#load:}" --duration 60 --out "$out" > /dev/null ;;
        start) sleep 2; continue ;;  # the stack idle a moment, then stopped
        *) echo "unknown measurement: $what (cpu, events:RATE, chaos[:NAME], freeze:NAME, burst, load:RATE, start)" >&2 ;;
      esac
      echo "round $round $side $what: $out"
    done
    stopping=$(date +%s.%N)
    pkill -INT -f "recserve_stack up"
    wait $pid
    echo "round $round $side: stopped after $(since "$stopping") s"
    sleep 5
  done
done
