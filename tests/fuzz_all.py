"""Every fuzzer at N times its CI size, and its figures for docs/input-matrix.md.

    nice -n 10 python tests/fuzz_all.py --scale 10 [--jobs 2]

Runs, each as its own process (`--jobs` at a time):

- the source fuzzer (`tests/source_fuzz.py`, seed 14 as CI runs it, compile safety on
  every 40th case): its CI size (200 cases) times N, split over the jobs with `--start`;
- the runtime fuzzers, under pytest with `OPTRACE_FUZZ_SCALE=N`: rank-file buffers, .pt
  archives, metadata, the CLI on mutated profiling directories, damaged zip archives,
  random buffers, generated ranks collected to both formats (`tests/runtime/test_fuzz.py`,
  `test_pt_zip.py`, `test_decode.py`, `test_perfetto.py`) and the trace fuzzers (JSON
  traces, .pftrace files, framework traces for `--merge`: `test_trace_fuzz.py`).

Each fuzzer's tally (tests/fuzz_tally.py: inputs, exits by code, crashes, hangs) is
summed over its processes and written to `tests/data/fuzz_figures.json` with the commit
and the command; `python tests/test_input_matrix.py --write-doc` renders it. Exit 1 when
any fuzzer found a crash or a hang (its test's output says which input).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "tests" / "data" / "fuzz_figures.json"
SOURCE_CI_CASES = 200  # tests/test_source_fuzz.py
SOURCE_SEED = 14
RUNTIME_TESTS = [
    "tests/runtime/test_fuzz.py::test_decoder_survives_10000_mutated_buffers",
    "tests/runtime/test_fuzz.py::test_readers_survive_10000_mutated_pt_files",
    "tests/runtime/test_fuzz.py::test_metadata_of_any_shape_is_read_or_refused",
    "tests/runtime/test_fuzz.py::test_fuzzed_profiling_directories_through_the_cli",
    "tests/runtime/test_pt_zip.py::test_mutated_archives_read_as_zipfile_or_fall_back",
    "tests/runtime/test_decode.py::test_random_buffers_decode_or_raise_our_error",
    "tests/runtime/test_perfetto.py::test_any_decoded_rank_round_trips",
    "tests/runtime/test_trace_fuzz.py::test_mutated_json_traces_are_read_or_refused",
    "tests/runtime/test_trace_fuzz.py::test_mutated_pftrace_files_are_read_or_refused",
    "tests/runtime/test_trace_fuzz.py::test_mutated_framework_traces_are_merged_or_refused",
]


def _run(command: list[str], env: dict[str, str], log: Path) -> int:
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        code = subprocess.run(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                              check=False).returncode
    print(f"  exit {code} after {time.monotonic() - started:.0f} s: {' '.join(command[1:])[:120]} "
          f"(log {log})", file=sys.stderr, flush=True)
    return code


def merged(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tallies of one fuzzer from several processes, summed (seconds: the longest)."""
    out: dict[str, dict[str, Any]] = {}
    for line in lines:
        into = out.setdefault(line["fuzzer"], {**line, "inputs": 0, "exits": {}, "crashes": 0, "hangs": 0,
                                               "seconds": 0})
        for key in ("inputs", "crashes", "hangs"):
            into[key] += line[key]
        for code, n in line["exits"].items():
            into["exits"][code] = into["exits"].get(code, 0) + n
        into["exits"] = dict(sorted(into["exits"].items()))
        into["seconds"] = max(into["seconds"], line["seconds"])
    return list(out.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, default=10, help="times each fuzzer's CI size")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=FIGURES)
    ap.add_argument("--logs", type=Path, help="keep the processes' output here (default: a temporary folder)")
    args = ap.parse_args()
    logs = args.logs or Path(tempfile.mkdtemp(prefix="optrace-fuzz-all-"))
    logs.mkdir(parents=True, exist_ok=True)
    tallies = logs / "tallies.jsonl"
    tallies.unlink(missing_ok=True)
    env = {**os.environ, "OPTRACE_FUZZ_SCALE": str(args.scale), "OPTRACE_FUZZ_TALLY": str(tallies)}
    cases = SOURCE_CI_CASES * args.scale
    per_job = -(-cases // args.jobs)
    commands: list[tuple[list[str], Path]] = []
    for job in range(args.jobs):
        start = job * per_job
        count = min(per_job, cases - start)
        commands.append(([sys.executable, "tests/source_fuzz.py", "--seed", str(SOURCE_SEED), "--start",
                          str(start), "--count", str(count), "--compile-every", "40",
                          "--log", str(logs / f"source-{job}.jsonl")], logs / f"source-{job}.out"))
    for i, test in enumerate(RUNTIME_TESTS):
        commands.append(([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                          test], logs / f"runtime-{i}.out"))
    revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=False).stdout.strip()  # the code the run starts with
    started = time.monotonic()
    with ThreadPoolExecutor(args.jobs) as pool:
        codes = list(pool.map(lambda c: _run(c[0], env, c[1]), commands))
    lines = [json.loads(line) for line in tallies.read_text(encoding="utf-8").splitlines() if line.strip()]
    figures = merged(lines)
    report = {
        "commit": revision, "date": datetime.date.today().isoformat(), "scale": args.scale, "jobs": args.jobs,
        "command": f"nice -n 10 python tests/fuzz_all.py --scale {args.scale} --jobs {args.jobs}",
        "minutes": round((time.monotonic() - started) / 60), "fuzzers": figures,
        "failed_processes": sum(1 for c in codes if c != 0),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=1, ensure_ascii=False))
    bad = any(f["crashes"] or f["hangs"] for f in figures)
    return 1 if bad or any(codes) else 0


if __name__ == "__main__":
    sys.exit(main())
