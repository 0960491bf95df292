#!/bin/bash
# Side by side: `bench events` on the stack of an earlier commit and of this
# working tree, alternating, each stack started fresh on the same data dir.
#   bench/ab_events.sh 47bd53d 2 "400 1000 0"    # rounds, then the rates (0: closed loop)
# The earlier commit is checked out in a worktree beside this one (its own
# code, this tree's environments and generated stubs). Writes
# build/bench/events-<before|after>-<round>-<rate>.json.
set -u
commit=$1 rounds=$2 rates=$3
cd "$(dirname "$0")/.."
here=$(pwd) python=$(pwd)/.venv/bin/python
data=${RECSERVE_STACK_DATA_DIR:-$here/data}
before=$here/build/ab-events-$commit
[ -d "$before" ] || git worktree add -q "$before" "$commit"
for link in .venv .venv-triton build gen; do [ -e "$before/$link" ] || ln -s "$here/$link" "$before/$link"; done
mkdir -p build/bench
for round in $(seq "$rounds"); do
  for side in before after; do
    if [ $side = before ]; then tree=$before; else tree=$here; fi
    log=build/bench/ab-events-$side.log
    (cd "$tree" && RECSERVE_STACK_DATA_DIR=$data PYTHONPATH=$tree:$tree/libs:$tree/apps:$here/gen/python \
      $python -m recserve_stack up > "$here/$log" 2>&1) &
    pid=$!
    for _ in $(seq 180); do grep -q "recserve stack ready" "$log" && break; sleep 1; done
    for rate in $rates; do
      out=build/bench/events-$side-$round-$rate.json
      RECSERVE_STACK_DATA_DIR=$data $python -m bench events --duration 20 --rate "$rate" --out "$out" > /dev/null
      echo "round $round $side at $rate/s: $out"
    done
    pkill -INT -f "recserve_stack up"
    wait $pid
  done
done
