"""Benchmark: the trace readers of two checkouts, interleaved — this tree against another
(`--before DIR`, e.g. a `git worktree` of an earlier commit), on the same data in the
same rounds, so that a shared machine's drift falls on both alike.

Per size (bench_collect's workload, 72 cores x 994 records a rank): each checkout's
`collect` of the rank directory to `.pftrace`, then `inspect`, `report` and `compare`
(a run against itself) of one `.pftrace`; every command of both checkouts runs once per
round, rounds repeated `--runs` times, best CPU (user + system of the process) and best
wall kept. Ratios are to the same checkout's collect (compare: twice it), as in
bench_readers.py's targets.

Usage: python bench/ab_readers.py --before /tmp/wt_before [--ranks 8,64] [--runs 5]
"""

from __future__ import annotations

import argparse
import compileall
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_collect import compile_bytecode, generate  # noqa: E402
from bench_perfetto import best_times  # noqa: E402

COMMANDS = ("collect", "inspect", "report", "compare")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="the other checkout's root")
    parser.add_argument("--ranks", default="8,64")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    before = args.before.resolve()
    compile_bytecode()  # this tree's bytecode, and the other's alike (no checkout compiles
    for sub in ("optrace", "optrace/cli", "optrace/runtime"):  # its modules at every start)
        compileall.compile_dir(before / sub, maxlevels=0, quiet=1)
    checkouts = {"before": ["env", f"PYTHONPATH={before}", sys.executable, "-m", "optrace"],
                 "after": ["env", f"PYTHONPATH={HERE.parent}", sys.executable, "-m", "optrace"]}
    print("| ranks | checkout | command | CPU s | wall s | × collect (CPU) | × collect (wall) |")
    print("|---|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="optrace-ab-readers-") as scratch:
        work = Path(scratch)
        for ranks in (int(x) for x in args.ranks.split(",")):
            data = work / f"r{ranks}"
            data.mkdir()
            generate(data, ranks, 72)
            trace = work / f"r{ranks}.pftrace"
            commands: dict[str, tuple[list[str], Path]] = {}
            for name, script in checkouts.items():
                out = work / f"{name}.pftrace"
                commands[f"{name} collect"] = ([*script, "collect", str(data), "-o", str(out)], out)
                commands[f"{name} inspect"] = ([*script, "inspect", str(trace)], work / "x")
                commands[f"{name} report"] = ([*script, "report", str(trace)], work / "x")
                commands[f"{name} compare"] = ([*script, "compare", str(trace), str(trace)], work / "x")
            if os.system(" ".join([*checkouts["after"], "collect", str(data), "-o", str(trace)])
                         + " >/dev/null") != 0:
                raise SystemExit("collect failed")
            best_times(1, commands)  # a first round unmeasured: bytecode, page cache
            times = best_times(args.runs, commands)
            for name in checkouts:
                base = times[f"{name} collect"]
                for command in COMMANDS:
                    t = times[f"{name} {command}"]
                    factor = 2 if command == "compare" else 1
                    cpu, wall = t["cpu"] / (factor * base["cpu"]), t["wall"] / (factor * base["wall"])
                    print(f"| {ranks} | {name} | {command} | {t['cpu']:.2f} | {t['wall']:.2f} | "
                          f"{cpu:.2f} | {wall:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
