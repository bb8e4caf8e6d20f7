"""Benchmark: records as a dataset — `collect --format parquet`, then `report` and the
straggler `query` on it, at cluster sizes.

The workload is `demo-data`'s (4 AIC + 8 AIV cores a rank, 10 launches a rank, 50 spans
a rank file), written for N simulated ranks (the demo's own generator, past the CLI's
64-rank cap). Per size, each command runs as its own process (the console script, as a
user runs it): wall time and peak RSS (the process's high-water mark, from wait4).
Targets (the dataset issue): peak RSS <= 1 GiB for each command at 4,096 ranks, and time
per rank at the largest size <= 1.2x that at the smallest.

Usage: python bench/bench_dataset.py [--ranks 1024,4096] [--launches 10] [--runs 1] [--keep DIR]
Prints a markdown table (bench/results.md keeps it, with this command).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from optrace.runtime.demo import _write_files

GIB = 1 << 30
AIC = 4


def run(command: list[str]) -> dict[str, Any]:
    """Wall seconds and peak RSS (bytes) of one run of ``command``."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    error = process.stderr.read().decode(errors="replace") if process.stderr else ""
    if process.returncode not in (0, 1):
        raise SystemExit(f"{command} failed ({process.returncode}): {error[-500:]}")
    return {"wall": wall, "rss": usage.ru_maxrss * 1024, "cpu": usage.ru_utime + usage.ru_stime}


def best(runs: int, command: list[str], before: Any = None) -> dict[str, Any]:
    results = []
    for _ in range(runs):
        if before is not None:
            before()
        results.append(run(command))
    return {"wall": min(r["wall"] for r in results), "cpu": min(r["cpu"] for r in results),
            "rss": max(r["rss"] for r in results)}


def measure(work: Path, ranks: int, launches: int, runs: int, script: list[str],
            readers_only: bool = False) -> dict[str, Any]:
    data = work / f"r{ranks}"
    if not (data / "point_map.json").exists():
        data.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        _write_files(data, ranks, launches, AIC, 0, 0.0)
        print(f"  {ranks} ranks x {launches} launches generated in {time.perf_counter() - started:.0f} s",
              file=sys.stderr, flush=True)
    out = work / f"r{ranks}.ds"

    def clear() -> None:
        shutil.rmtree(out, ignore_errors=True)

    row: dict[str, Any] = {"ranks": ranks, "launches": launches, "runs": runs,
                           "input_mb": sum(p.stat().st_size for p in data.iterdir()) / 1e6}
    if not (readers_only and out.exists()):
        row["collect"] = best(runs, [*script, "collect", str(data), "-o", str(out), "--format", "parquet"],
                              clear)
    row["dataset_mb"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 1e6
    row["report"] = best(runs, [*script, "report", str(out)])
    row["straggler"] = best(runs, [*script, "query", str(out), "--preset", "straggler"])
    print(f"  {ranks} ranks done", file=sys.stderr, flush=True)
    return row


COMMANDS = (("collect", "collect --format parquet"), ("report", "report DIR"),
            ("straggler", "query DIR --preset straggler"))


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| ranks × launches | rank files MB | dataset MB | command | wall s | CPU s "
             "| ms per rank (wall) | peak RSS MiB |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        for key, name in COMMANDS:
            if key not in row:
                continue
            t = row[key]
            per_rank = 1000 * t["wall"] / row["ranks"]
            lines.append(f"| {row['ranks']:,} × {row['launches']} | {row['input_mb']:.0f} "
                         f"| {row['dataset_mb']:.1f} | `{name}` | {t['wall']:.1f} | {t['cpu']:.1f} "
                         f"| {per_rank:.1f} | {t['rss'] / (1 << 20):.0f} |")
    first, last = rows[0], rows[-1]
    lines.append("")
    for key, name in COMMANDS:
        if key not in last or key not in first:
            continue
        wall = (last[key]["wall"] / last["ranks"]) / (first[key]["wall"] / first["ranks"])
        cpu = (last[key]["cpu"] / last["ranks"]) / (first[key]["cpu"] / first["ranks"])
        rss_ok = "≤" if last[key]["rss"] <= GIB else ">"
        lines.append(f"- `{name}`: time per rank at {last['ranks']:,} over {first['ranks']:,} ranks: "
                     f"{wall:.2f}× wall, {cpu:.2f}× CPU (target ≤ 1.2×); peak RSS "
                     f"{last[key]['rss'] / (1 << 20):.0f} MiB {rss_ok} 1 GiB")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="1024,4096")
    parser.add_argument("--launches", type=int, default=10)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--readers-only", action="store_true",
                        help="with --keep: time report and query on the datasets already there")
    parser.add_argument("--keep", type=Path,
                        help="generate the rank files here and keep them (reruns skip it)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.ranks.split(",")]
    script = [sys.executable, "-m", "optrace"]
    with tempfile.TemporaryDirectory(prefix="optrace-dataset-") as scratch:
        work = args.keep or Path(scratch)
        rows = [measure(work, ranks, args.launches, args.runs, script, args.readers_only) for ranks in sizes]
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
