"""One entry point for every benchmark: `python bench/run.py [--quick]`.

Runs each benchmark as its own process (same machine, same session, so ratios against
the in-run baselines are meaningful), collects their markdown tables into
`bench/results.md` between its `<!-- bench:start -->` / `<!-- bench:end -->` markers
(what follows them, the dated narrative of earlier runs, is kept). The README carries
one headline table, updated by hand from these.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True,
                          text=True, check=True)
    # Each benchmark ends with its markdown tables and their notes: keep them, from the
    # first table line on (what comes before is progress and raw numbers).
    lines = done.stdout.splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.startswith("|")), len(lines))
    return "\n".join(lines[first:]).strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = ap.parse_args()
    sections = []
    plan_args = ["--operators", "24"] if args.quick else []
    sections.append(("plan and apply", run("bench_plan.py", *plan_args)))
    if (HERE / "bench_collect.py").exists():
        collect_args = ["--ranks", "2"] if args.quick else []
        sections.append(("collect", run("bench_collect.py", *collect_args)))
    if (HERE / "bench_perfetto.py").exists():
        perfetto_args = ["--ranks", "2,4", "--runs", "2", "--no-encoders"] if args.quick else []
        sections.append(("collect: .pftrace and JSON", run("bench_perfetto.py", *perfetto_args)))
    floor_args = ["--rounds", "1", "--ranks", "2", "--parts", "floor,formats"] if args.quick else []
    sections.append(("collect: its floor, decoding, .pftrace against JSON",
                     run("bench_floor.py", *floor_args)))
    readers_args = ["--ranks", "2,4", "--runs", "1"] if args.quick else []
    sections.append(("readers: inspect, report, compare", run("bench_readers.py", *readers_args)))
    records_args = ["--rounds", "5"] if args.quick else []
    sections.append(("records: @dataclass against collect's start-up",
                     run("bench_records.py", *records_args)))
    compare_args = ["--seeds", "50"] if args.quick else []
    sections.append(("compare as a CI gate", run("bench_compare.py", *compare_args)))
    scaling_args = ["--operators", "5,10,20", "--ranks", "1,2,4"] if args.quick else []
    sections.append(("scaling", run("bench_scaling.py", *scaling_args)))
    linear_args = ["--scale", "0.2", "--rounds", "1"] if args.quick else []
    sections.append(("linear in the input", run("bench_linear.py", *linear_args)))
    stamp = datetime.date.today().isoformat()
    machine = f"{platform.machine()}, Python {platform.python_version()}"
    body = "\n\n".join(f"### {name}\n\n{table}" for name, table in sections)
    text = f"Measured {stamp} on {machine} by `python bench/run.py`.\n\n{body}\n"
    results = HERE / "results.md"
    block = f"<!-- bench:start -->\n{text}<!-- bench:end -->"
    old = results.read_text() if results.exists() else ""
    if "<!-- bench:start -->" not in old:
        old = "# Benchmark results\n\n<!-- bench:start --><!-- bench:end -->\n\n" + old
    results.write_text(re.sub(r"<!-- bench:start -->.*<!-- bench:end -->", lambda _: block, old, flags=re.S))
    print(text)


if __name__ == "__main__":
    main()
