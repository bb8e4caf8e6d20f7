#!/bin/bash
# A / B of `optrace apply --write` over a generated forest, cold user cache, one checkout per
# call: the CPU (user+system, workers included) of applying every operator to a fresh copy
# (the copy is not timed). As bench/ab_forest.sh for plan:
#   JOBS=1 bench/ab_apply.sh /tmp/forest40 <checkout A>; JOBS=1 bench/ab_apply.sh /tmp/forest40 <checkout B>
# (alternate the checkouts, several rounds). Session 38's apply rows in bench/results.md.
set -euo pipefail
forest=$1 checkout=$2
scratch=$(mktemp -d)
cp -r "$forest" "$scratch/forest"
cd "$scratch/forest"
XDG_CACHE_HOME=$scratch/cache /usr/bin/time -f "$checkout %U+%S s CPU" env PYTHONPATH="$checkout" \
  "${PYTHON:-python3}" -m optrace apply moe_op_* --write --jobs "${JOBS:-1}" >/dev/null 2>"$scratch/err" || true
tail -1 "$scratch/err"
rm -rf "$scratch"
