#!/bin/bash
# A / B of `optrace plan` over a generated forest, cold user cache, one checkout per call:
# the CPU (user+system, workers included) of one plan of every operator.
#   python -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path; \
#              from forest import write_forest; write_forest(Path('/tmp/forest60'), 60)"
#   git -C /tmp/forest60 init -q
#   JOBS=1 bench/ab_forest.sh /tmp/forest60 <checkout A>; JOBS=1 bench/ab_forest.sh /tmp/forest60 <checkout B>
# (alternate the checkouts, several rounds; JOBS=2 for the pool). Session 31's figures in
# bench/results.md came from this, with /work/main/.venv's Python.
set -euo pipefail
forest=$1 checkout=$2
cache=$(mktemp -d)
cd "$forest"
XDG_CACHE_HOME=$cache /usr/bin/time -f "$checkout %U+%S s CPU" env PYTHONPATH="$checkout" \
  "${PYTHON:-python3}" -m optrace plan moe_op_* --jobs "${JOBS:-1}" >/dev/null 2>"$cache/err" || true
tail -1 "$cache/err"
rm -rf "$cache"
