"""Where `optrace check OPDIR` spends its time after one kernel file changed (a miss of
check's user cache, the repository's index kept): wall and CPU by phase, no profiler
(cProfile weighs the many small calls of the stat passes far more than they cost). What
bench/results.md cites as what is left of the "after one kernel file changed <= 3x a
bare parse" target (issue #30: a cache so pre-commit stays fast).

OPDIR must be instrumented (`optrace apply OPDIR --write`) in a scratch copy: each round
appends a comment line to KERNEL (restored at the end), then runs the check in a fresh
process with timers around its phases. Phases nest: `check_operator` holds the analysis
(`analyse_operator`, of it `discover`: the search for the other layers), the gates
(`evaluate_gates`), the plan (`plan_from_analysis`) and the compile child's start and
wait; `_cached` is the cache lookup, `_keep` the entry written. `children_cpu`: the CPU of
libclang's child, which runs beside the gates and the plan.

Usage: python bench/phases_check.py OPDIR KERNEL [--rounds 5]   (in OPDIR's repository)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# One check in a fresh process, with timers around its phases.
ONE = r"""
import contextlib, io, json, resource, sys, time
started, cpu0 = time.perf_counter(), time.process_time()
import optrace.cli.check_fast as check_fast
import optrace.engine.analysis as analysis
import optrace.pipeline.check as check
spent = {}
def timed(owner, name):
    function = getattr(owner, name)
    def wrapper(*args, **kwargs):
        at = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - at
    setattr(owner, name, wrapper)
for owner, name in ((check_fast, "_cached"), (check_fast, "_keep"), (check, "check_operator"),
                    (check, "analyse_operator"), (analysis, "discover"), (check, "evaluate_gates"),
                    (check, "plan_from_analysis"), (check, "start_compile_check"),
                    (check.CompileCheck, "finish")):
    timed(owner, name)
imported, cpu1 = time.perf_counter(), time.process_time()
with contextlib.redirect_stdout(io.StringIO()):
    code = check_fast.fast_main([sys.argv[1]])
done = time.perf_counter()
child = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"imports": imported - started, "imports_cpu": cpu1 - cpu0, "run": done - imported,
                  "run_cpu": time.process_time() - cpu1, "children_cpu": child.ru_utime + child.ru_stime,
                  "code": code, **spent}))
"""

PHASES = ["imports", "imports_cpu", "run", "run_cpu", "children_cpu", "_cached", "check_operator",
          "analyse_operator", "discover", "evaluate_gates", "plan_from_analysis", "start_compile_check",
          "finish", "_keep"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("opdir")
    parser.add_argument("kernel", type=Path, help="the kernel file each round changes")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    original = args.kernel.read_bytes()
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="optrace-check-phases-") as cache:
        env = {**os.environ, "XDG_CACHE_HOME": cache}
        try:
            subprocess.run([sys.executable, "-m", "optrace", "check", args.opdir], env=env,
                           capture_output=True, check=False)  # the index and a first entry
            for k in range(args.rounds):
                args.kernel.write_bytes(original + f"\n// round {k}\n".encode())
                done = subprocess.run([sys.executable, "-c", ONE, args.opdir], env=env,
                                      capture_output=True, text=True, check=True)
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        finally:
            args.kernel.write_bytes(original)
    print(f"check of {args.opdir} after one change to {args.kernel} (a miss), {args.rounds} rounds; "
          "seconds (wall unless _cpu), each phase's median and range\n")
    print("| phase | median | range |")
    print("|---|---:|---|")
    for phase in PHASES:
        values = [row.get(phase, 0.0) for row in rows]
        print(f"| {phase} | {statistics.median(values):.3f} | {min(values):.3f}-{max(values):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
