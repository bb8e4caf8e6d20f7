"""Benchmark: collect's decoding of two checkouts, interleaved — this tree against another
(`--before DIR`, e.g. a `git worktree` of an earlier commit, run through PYTHONPATH).

What bench_floor.py's decoding figure times (the 8-rank workload of bench_collect, 72
cores x 994 records a rank, to a JSON trace): `collect` in-process after its imports, CPU
seconds of the process, its first call (and the page faults it took) — and, in the
same process, the best of ``--calls`` more calls (warm: the code paths and the memory
already touched). Each round runs one process of each checkout in turn, so a shared
machine's drift falls on both alike; the table gives the medians over the rounds, and
whether the two traces are byte-identical. (The fair loop's time, which bench_floor
divides by these, moves by ~10 % between runs of the same code on this machine: a change
of a few percent in decoding is seen here, not there.)

`--format pftrace` times the same collect to a `.pftrace` (Perfetto's encoding instead of
the JSON rows).

Usage: python bench/ab_decode.py --before /tmp/wt_before [--rounds 8] [--calls 6]
       [--ranks 8] [--format json|pftrace]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_collect import compile_tree, generate  # noqa: E402

# The first call, as bench_floor's OPTRACE_DECODE_CPU times it, then warm calls; each call
# writes a new file (the old one removed first, untimed, as bench_collect.measure does).
DECODE = (
    "import os, resource, sys, time\n"
    "from optrace.cli.start import prepare_collect_process\n"
    "prepare_collect_process()\n"
    "from pathlib import Path\n"
    "from optrace.runtime.collect import collect\n"
    "times = []\n"
    "faults = []\n"
    "for _ in range(1 + int(sys.argv[3])):\n"
    "    if os.path.exists(sys.argv[2]):\n"
    "        os.unlink(sys.argv[2])\n"
    "    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "    started = time.process_time()\n"
    "    collect(Path(sys.argv[1]), Path(sys.argv[2]))\n"
    "    times.append(time.process_time() - started)\n"
    "    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n"
    "print(times[0], min(times[1:] or times), faults[0])\n"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="the other checkout (its top folder)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=6, help="warm calls after the first, per process")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--format", choices=("json", "pftrace"), default="json", help="the trace written")
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": HERE.parent}
    for top in sides.values():
        compile_tree(top / "optrace")  # as an installed copy has it (PYTHONDONTWRITEBYTECODE)
    with tempfile.TemporaryDirectory(prefix="optrace-ab-decode-") as tmp:
        work = Path(tmp)
        data = work / "data"
        data.mkdir()
        records = generate(data, args.ranks, 72)
        seen: dict[str, dict[str, list[float]]] = {name: {"first": [], "warm": [], "faults": []}
                                                   for name in sides}
        for _ in range(args.rounds):
            for name, top in sides.items():
                env = {**os.environ, "PYTHONPATH": str(top)}
                trace = work / f"{name}.{args.format}"
                done = subprocess.run([sys.executable, "-c", DECODE, str(data), str(trace), str(args.calls)],
                                      env=env, cwd=tmp, check=True, capture_output=True, text=True)
                first, warm, faults = (float(x) for x in done.stdout.split())
                seen[name]["first"].append(first)
                seen[name]["warm"].append(warm)
                seen[name]["faults"].append(faults)
        same = (work / f"before.{args.format}").read_bytes() == (work / f"after.{args.format}").read_bytes()
    print(f"collect's decoding, {args.ranks} ranks x 72 cores x {records} records, to {args.format}; "
          f"{args.rounds} interleaved rounds, CPU seconds (median)\n")
    print("| checkout | first call | warm (best of the process's next calls) | page faults, first call |")
    print("|---|---:|---:|---:|")
    for name, times in seen.items():
        print(f"| {name} ({sides[name]}) | {statistics.median(times['first']):.4f} | "
              f"{statistics.median(times['warm']):.4f} | {statistics.median(times['faults']):.0f} |")
    first = statistics.median(seen["after"]["first"]) / statistics.median(seen["before"]["first"])
    warm = statistics.median(seen["after"]["warm"]) / statistics.median(seen["before"]["warm"])
    print(f"\nafter / before: first call {first:.3f}, warm {warm:.3f}; "
          f"traces {'byte-identical' if same else 'DIFFERENT'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
