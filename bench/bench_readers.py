"""Benchmark: the trace readers (`inspect`, `report`, `compare`) against `collect` of the
same data, at 8, 64 and 512 ranks, on each input kind.

The workload is bench_collect's (72 cores x 994 records a rank, legacy layout). Per size:
`collect` to `.json` and to `.pftrace` (best of N wall and CPU, the formats alternating),
then `inspect`, `report` and `compare` (a run against itself) on the `.pftrace`, on the
rank directory and on the `.json` (read a process at a time since session 24; up to
--json-up-to ranks); each reader's time as a ratio of the `collect` that wrote
its input (compare: of two collects), and its peak memory (PSS summed over its
processes, sampled every ms). Targets (the cluster-traces issue): inspect and report each
within 2x collect, compare within 2x the collect of both inputs, peak memory at 512 ranks
<= 1.5x the 8-rank figure.

Usage: python bench/bench_readers.py [--ranks 8,64,512] [--runs 3] [--kinds pftrace,directory,json]
       [--json-up-to 512] [--checkout]
Prints markdown tables (bench/results.md keeps them, with this command).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_collect import compile_bytecode, generate, installed_copy, measure_memory  # noqa: E402
from bench_perfetto import best_times  # noqa: E402

#: Above this many ranks a JSON trace is left out of the readers' rows by default (at
#: 512 ranks it is ~2.9 GB on disk): said in the table.
JSON_READERS_UP_TO = 512


def readers(work: Path, ranks: int, runs: int, script: list[str], kinds: list[str],
            json_up_to: int = JSON_READERS_UP_TO) -> dict[str, Any]:
    data = work / f"r{ranks}"
    data.mkdir(exist_ok=True)
    records = generate(data, ranks, 72) * ranks * 72
    traces = {"json": work / f"r{ranks}.json", "pftrace": work / f"r{ranks}.pftrace"}
    collects = {f"collect {k}": ([*script, "collect", str(data), "-o", str(p)], p)
                for k, p in traces.items()}
    n = runs if ranks <= 64 else max(1, runs // 2)
    timings = best_times(n, collects)
    for name, (command, path) in collects.items():
        timings[name]["pss_kb"] = measure_memory(1, command, path)["pss_kb"]
    inputs: dict[str, Path] = {"pftrace": traces["pftrace"], "directory": data}
    if ranks <= json_up_to:
        inputs["json"] = traces["json"]
    inputs = {kind: path for kind, path in inputs.items() if kind in kinds}
    out = work / "reader.out"
    row: dict[str, Any] = {"ranks": ranks, "records": records, "runs": n, "collect": timings, "readers": {},
                           "json_up_to": json_up_to}
    for kind, source in inputs.items():
        commands = {
            "inspect": ([*script, "inspect", str(source)], out),
            "report": ([*script, "report", str(source)], out),
            "compare": ([*script, "compare", str(source), str(source)], out),
        }
        times = best_times(n, commands)
        for name, (command, _) in commands.items():
            memory = measure_memory(1, command, None)
            row["readers"][(kind, name)] = {**times[name], "pss_kb": memory["pss_kb"]}
        print(f"  {ranks} ranks, {kind} done", file=sys.stderr, flush=True)
    for path in traces.values():
        path.unlink(missing_ok=True)
    shutil.rmtree(data)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| ranks | input | command | wall s | CPU s | × collect (wall) | × collect (CPU) "
             "| peak PSS MB |", "|---|---|---|---|---|---|---|---|"]
    verdicts: list[str] = []
    for row in rows:
        for name, t in row["collect"].items():
            lines.append(f"| {row['ranks']} | rank directory | {name} | {t['wall']:.2f} | {t['cpu']:.2f} "
                         f"| 1 | 1 | {t['pss_kb'] / 1024:.0f} |")
        for (kind, name), t in row["readers"].items():
            base = row["collect"]["collect pftrace" if kind == "pftrace" else "collect json"]
            factor = 2 if name == "compare" else 1  # compare reads two inputs
            lines.append(
                f"| {row['ranks']} | {kind} | {name} | {t['wall']:.2f} | {t['cpu']:.2f} | "
                f"{t['wall'] / (factor * base['wall']):.2f} | {t['cpu'] / (factor * base['cpu']):.2f} | "
                f"{t['pss_kb'] / 1024:.0f} |")
            worst = max(t["wall"] / (factor * base["wall"]), t["cpu"] / (factor * base["cpu"]))
            target = "2x the collect of both inputs" if name == "compare" else "2x collect"
            verdict = "met" if worst <= 2 else "NOT met"
            verdicts.append(f"- {row['ranks']} ranks, {name} on {kind}: {worst:.2f}x "
                            f"({verdict}; target {target}, the worse of wall and CPU)")
    lines += ["", "targets:", *verdicts]
    first, last = rows[0], rows[-1]
    lines += ["", f"peak memory, {last['ranks']} ranks over {first['ranks']} ranks:"]
    for key in last["readers"]:
        if key in first["readers"]:
            ratio = last['readers'][key]['pss_kb'] / first['readers'][key]['pss_kb']
            lines.append(f"- {key[0]} {key[1]}: {ratio:.2f}× ({'met' if ratio <= 1.5 else 'NOT met'}: "
                         "target <= 1.5x)")
    if any(r["ranks"] > r["json_up_to"] for r in rows):
        lines.append(f"\nJSON inputs are read only up to {rows[0]['json_up_to']} ranks here (--json-up-to).")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="8,64,512")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kinds", default="pftrace,directory,json", help="inputs the readers are timed on")
    parser.add_argument("--json-up-to", type=int, default=JSON_READERS_UP_TO,
                        help="the most ranks whose JSON trace the readers are timed on")
    parser.add_argument("--checkout", action="store_true", help="run the source tree, not an installed wheel")
    args = parser.parse_args()
    sizes = [int(x) for x in args.ranks.split(",")]
    with tempfile.TemporaryDirectory(prefix="optrace-readers-") as scratch:
        work = Path(scratch)
        installed = None if args.checkout else installed_copy(work)
        if installed is None:
            compile_bytecode()
            script = [sys.executable, "-m", "optrace"]
        else:
            script = [installed[1]]
        rows = []
        for ranks in sizes:  # each size's table as soon as it is measured (a run takes long)
            rows.append(readers(work, ranks, args.runs, script, args.kinds.split(","), args.json_up_to))
            print(table(rows[-1:]), "\n", flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
