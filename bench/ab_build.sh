#!/bin/bash
# Side by side: an earlier commit's build and this working tree's, alternating
# (the earlier one first in odd rounds), each from nothing into its own data dir.
#   bench/ab_build.sh 6935dd2 2                      # MovieLens-100K
#   bench/ab_build.sh 6935dd2 2 /tmp/shop/dataset    # a dataset directory of yours
# Prints each build's step lines and wall, user and system seconds, peak RSS;
# writes build/bench/build-<before|after>-<round>.log.
set -u
commit=$1 rounds=$2 dataset=${3:-}
cd "$(dirname "$0")/.."
here=$(pwd) python=$(pwd)/.venv/bin/python
before=$here/build/ab-$commit
[ -d "$before" ] || git worktree add -q "$before" "$commit"
for link in .venv .venv-triton build gen; do [ -e "$before/$link" ] || ln -s "$here/$link" "$before/$link"; done
mkdir -p build/bench
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 1 ]; then sides="before after"; else sides="after before"; fi
  for side in $sides; do
    if [ $side = before ]; then tree=$before; else tree=$here; fi
    log=$here/build/bench/build-$side-$round.log
    (cd "$tree" && PYTHONPATH=$tree:$tree/libs:$tree/apps:$here/gen/python /usr/bin/time \
      -f "wall %e s, user %U s, system %S s, peak RSS %M KB" $python -m pipelines build \
      --data-dir "$scratch/$side-$round" ${dataset:+--dataset "$dataset"} --publish-over-the-gate \
      > "$log" 2>&1)
    echo "round $round $side: $(grep -E '^step .*: [0-9.]+ s$' "$log" | sed 's/^step //' | paste -sd ';')"
    echo "round $round $side: $(tail -1 "$log")"
    rm -rf "${scratch:?}/$side-$round"
  done
done
