"""Where a first `optrace plan OPDIR` spends its wall time in a repository already indexed:
what bench/results.md cites as what is left of the per-operator plan target (issue #30:
median <= 3x a bare parse).

A scratch user cache; one plan of ``--warm`` (another operator) fills the repository's
index and keeps its state; then each OPDIR is planned once, each in its own process (its
first plan: a miss of plan's cache, the index's state taken back from the signatures), with
wall-clock timers around the phases (no profiler: cProfile weighs the many small calls of
the stat passes and the store far more than they cost). Phases nest: `discover` holds
`mentioning` (the search for the other layers, of which `_contents`, of which
`_load_values`) and `build_script_words`; `plan_operator` holds `discover`; `cache lookup`
holds `state` (the index's state taken back), `cache store` holds `state_holds` (every
file stat-ed again before the entry is kept); `_plan_mode` is the mode probe;
`operators_including` (who else includes the operator's headers, inside `plan_operator`)
holds `_naming` (the sources naming those headers: the user cache's table of include names,
or every source asked).

Usage: python bench/phases_first_plan.py REPO OPDIR... --warm OPDIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# In the operator's repository, its first plan with timers around the phases.
ONE = r"""
import contextlib, io, json, sys, time
started = time.perf_counter()
import optrace.cli.plan_cache as plan_cache
import optrace.cli.plan_fast as plan_fast
import optrace.engine.analysis as analysis
import optrace.engine.discovery as discovery
import optrace.engine.index_cache as index_cache
import optrace.engine.sharing as sharing
import optrace.pipeline.plan as plan
spent = {}
def timed(owner, name, key):
    function = getattr(owner, name)
    def wrapper(*args, **kwargs):
        at = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[key] = spent.get(key, 0.0) + time.perf_counter() - at
    setattr(owner, name, wrapper)
for owner, name in ((discovery.RepoIndex, "state"), (discovery.RepoIndex, "state_holds"),
                    (discovery.RepoIndex, "mentioning"), (discovery.RepoIndex, "_contents"),
                    (index_cache.ContentStore, "_load_values"),
                    (discovery.RepoIndex, "build_script_words"), (analysis, "discover"),
                    (plan, "plan_operator"), (plan_fast, "_index_once"), (plan_cache, "lookup"),
                    (plan_fast, "_plan_mode"), (plan_cache, "store"),
                    (sharing, "operators_including"), (sharing, "_naming")):
    timed(owner, name, name if owner is not plan_cache else f"cache {name}")
imported = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    code = plan_fast.fast_main([sys.argv[1]])
done = time.perf_counter()
print(json.dumps({"imports": imported - started, "run": done - imported, "code": code, **spent}))
"""

PHASES = ["imports", "run", "_index_once", "cache lookup", "state", "plan_operator", "discover", "mentioning",
          "_contents", "_load_values", "build_script_words", "_plan_mode", "cache store", "state_holds",
          "operators_including", "_naming"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repo", type=Path)
    parser.add_argument("ops", nargs="+")
    parser.add_argument("--warm", required=True, help="an operator planned first, untimed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="optrace-first-plan-") as cache:
        env = {**os.environ, "XDG_CACHE_HOME": cache}
        subprocess.run([sys.executable, "-m", "optrace", "plan", args.warm], cwd=args.repo, env=env,
                       capture_output=True, check=False)
        rows = []
        for op in args.ops:
            done = subprocess.run([sys.executable, "-c", ONE, op], cwd=args.repo, env=env,
                                  capture_output=True, text=True, check=True)
            rows.append((op, json.loads(done.stdout.strip().splitlines()[-1])))
    print(f"first plan of each operator in {args.repo} (its index kept by a plan of {args.warm}); wall "
          "seconds of each phase (phases nest: see the docstring)\n")
    print("| operator | " + " | ".join(PHASES) + " |")
    print("|---|" + "---:|" * len(PHASES))
    for op, spent in rows:
        print(f"| {op} | " + " | ".join(f"{spent.get(p, 0.0):.3f}" for p in PHASES) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
