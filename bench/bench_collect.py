"""Benchmark: `optrace collect` against a decoder written like the legacy helper.

Workload (issue 5): 8 ranks x 72 cores (24 AIC + 48 AIV) x ~1000 records, legacy layout
(``rank{NNN}.pt`` = ``[aic_tensor, aiv_tensor]``, 2048 int64 words per slot).

Measured, each in its own child process (wall time from process start to trace written;
peak memory = the child's ``ru_maxrss``):

- ``optrace collect DIR -o trace.json`` — the real command line;
- the baseline: the same files read by the same numpy .pt reader (torch is not needed
  here), then decoded the way the legacy collector does it: a Python loop over cores and
  records, ``.item()`` per word, a dict per record, a per-core stack to pair B/E (kinder
  than the legacy quadratic pass), all events kept in a list and ``json.dump``-ed;
- the decode time of both without interpreter start-up and imports (in-process timer).

Usage: python bench/bench_collect.py [--ranks 8] [--cores 72] [--keep DIR]
Prints a markdown table. Targets: >= 50x faster end to end, <= 20 % of the peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

WORDS = 2048
CAP = (WORDS - 2) // 2

# label -> (B id, E id), numbered like the legacy preprocessor (1, 2, 3... in walk order)
LABELS = [
    "processing",
    "processing setup",
    "processing dispatch",
    "processing dispatch wait",
    "processing dispatch copy",
    "processing compute",
    "processing combine",
]
IDS = {label: (2 * i + 1, 2 * i + 2) for i, label in enumerate(LABELS)}


def core_program(groups: int = 99) -> tuple[np.ndarray, np.ndarray]:
    """Event words and cycle increments of one core: 6 + 10 * groups records (996)."""
    words: list[int] = []
    steps: list[int] = []

    def rec(label: str, kind: int, index: int = 0, step: int = 5) -> None:
        point = IDS[label][kind]
        words.append(((index << 8) << 32) | point)
        steps.append(step)

    rec("processing", 0)
    rec("processing setup", 0)
    rec("processing setup", 1, step=200)
    for g in range(groups):
        rec("processing dispatch", 0, g)
        rec("processing dispatch wait", 0)
        rec("processing dispatch wait", 1, step=40)
        rec("processing dispatch copy", 0)
        rec("processing dispatch copy", 1, step=60)
        rec("processing dispatch", 1, g)
        rec("processing compute", 0, g)
        rec("processing compute", 1, g, step=150)
        rec("processing combine", 0, g)
        rec("processing combine", 1, g, step=30)
    rec("processing", 1)
    return np.array(words, dtype=np.int64), np.array(steps, dtype=np.int64)


def generate(directory: Path, ranks: int, cores: int) -> int:
    """Write the legacy rank files and point map; returns records per core."""
    from optrace.runtime.pt_writer import write_pt

    words, steps = core_program()
    n = words.size
    assert n <= CAP
    rng = np.random.default_rng(5)
    aic = cores // 3
    for rank in range(ranks):
        data = np.zeros((cores, WORDS), dtype=np.int64)
        starts = 10**12 + rank * 10**9 + rng.integers(0, 500, cores)
        jitter = rng.integers(0, 4, (cores, n))
        cycles = starts[:, None] + np.cumsum(steps[None, :] + jitter, axis=1)
        data[:, 0] = 1 + n
        data[:, 1 : 1 + n] = words[None, :]
        data[:, WORDS - 2 - np.arange(n)] = cycles
        data[:, WORDS - 1] = starts
        write_pt([data[:aic], data[aic:]], directory / f"rank{rank:03d}.pt")
    points = {}
    for label, (b, e) in IDS.items():
        points[str(b)] = {"label": label, "file": "op_kernel/op.h", "line": b, "event_type": "B", "event_id": b}
        points[str(e)] = {"label": label, "file": "op_kernel/op.h", "line": e, "event_type": "E", "event_id": b}
    (directory / "point_map.json").write_text(json.dumps({"points": points}))
    return n


# ----------------------------------------------------------------------------- baseline


def baseline_decode(directory: Path, output: Path) -> int:
    """The legacy way: per-word .item(), a dict per record, one big list, json.dump."""
    from optrace.runtime.pt_reader import load_pt

    point_map = json.loads((directory / "point_map.json").read_text())["points"]
    events: list[dict[str, Any]] = []
    for path in sorted(directory.glob("rank*.pt")):
        rank = int(path.stem[4:])
        tensors = load_pt(path)
        core_types = ["AIC", "AIV"]
        for type_index, tensor in enumerate(tensors):
            for core in range(tensor.shape[0]):
                counter = tensor[core][0].item()
                if counter == 0:
                    continue
                size = tensor.shape[1]
                records = []
                for i in range(min(counter - 1, (size - 2) // 2)):
                    word = tensor[core][1 + i].item()
                    cycle = tensor[core][size - 2 - i].item()
                    point = word & 0xFFFFFFFF
                    high = (word >> 32) & 0xFFFFFFFF
                    records.append({"id": point, "extra": high & 0xFF, "index": high >> 8, "cycle": cycle})
                start = tensor[core][size - 1].item()  # each core from its own zero
                stacks: dict[str, list[dict[str, Any]]] = {}
                tid = f"{core_types[type_index]} {core}"
                for record in records:
                    info = point_map.get(str(record["id"]))
                    if info is None:
                        continue
                    ts = (record["cycle"] - start) / 50.0
                    if info["event_type"] == "B":
                        stacks.setdefault(info["label"], []).append({**record, "ts": ts, "info": info})
                    elif stacks.get(info["label"]):
                        begin = stacks[info["label"]].pop()
                        events.append({
                            "name": info["label"], "ph": "X", "pid": rank, "tid": tid,
                            "ts": begin["ts"], "dur": ts - begin["ts"],
                            "args": {"index": begin["index"], "extraId": begin["extra"],
                                     "src": f"{begin['info']['file']}:{begin['info']['line']}"},
                        })
    with open(output, "w") as handle:
        json.dump({"traceEvents": events}, handle)
    return len(events)


# ----------------------------------------------------------------------------- measuring


def measure(command: list[str]) -> dict[str, float]:
    """Run `command` in a child and report its wall time and peak RSS (only child)."""
    runner = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
        "wall = time.perf_counter() - t\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps({'wall': wall, 'rss_kb': rss, 'rc': done.returncode}))\n"
    )
    done = subprocess.run([sys.executable, "-c", runner, *command], capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(done.stdout)
    if result["rc"] not in (0, 1):
        raise SystemExit(f"{command} failed with exit code {result['rc']}")
    return result


def in_process(kind: str, directory: Path, output: Path) -> float:
    """Decode time without interpreter start-up or imports."""
    code = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "import bench_collect\n"
        "from pathlib import Path\n"
        "from optrace.runtime.collect import collect\n"
        "from optrace.runtime import pt_reader\n"
        "t = time.perf_counter()\n"
        + ("bench_collect.baseline_decode(Path(sys.argv[1]), Path(sys.argv[2]))\n" if kind == "baseline"
           else "collect(Path(sys.argv[1]), Path(sys.argv[2]))\n")
        + "print(time.perf_counter() - t)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(directory), str(output)],
                          capture_output=True, text=True, check=True)
    return float(done.stdout.strip())


def best_of(runs: int, command: list[str]) -> dict[str, float]:
    results = [measure(command) for _ in range(runs)]
    return {"wall": min(r["wall"] for r in results), "rss_kb": min(r["rss_kb"] for r in results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--cores", type=int, default=72)
    parser.add_argument("--runs", type=int, default=3, help="best of N for optrace (baseline runs once)")
    parser.add_argument("--keep", type=Path, help="keep the generated data and traces here")
    parser.add_argument("--baseline", nargs=2, type=Path, metavar=("DIR", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline:
        baseline_decode(*args.baseline)
        return

    work = args.keep or Path(tempfile.mkdtemp(prefix="optrace-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "profiling"
    data.mkdir(exist_ok=True)
    try:
        records = generate(data, args.ranks, args.cores)
        total = records * args.ranks * args.cores
        python_start = best_of(args.runs, [sys.executable, "-c", "pass"])
        optrace = best_of(args.runs, [sys.executable, "-m", "optrace", "collect", str(data),
                                      "-o", str(work / "optrace.json")])
        baseline = best_of(1, [sys.executable, __file__, "--baseline", str(data), str(work / "baseline.json")])
        optrace_decode = min(in_process("optrace", data, work / "optrace2.json") for _ in range(args.runs))
        baseline_decode_s = in_process("baseline", data, work / "baseline2.json")
        spans_optrace = sum(1 for e in json.loads((work / "optrace.json").read_text())["traceEvents"]
                            if e["ph"] == "X")
        spans_baseline = len(json.loads((work / "baseline.json").read_text())["traceEvents"])
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    mb = 1024.0
    print(f"workload: {args.ranks} ranks x {args.cores} cores x {records} records = {total} records, "
          f"legacy layout; spans written: optrace {spans_optrace}, baseline {spans_baseline}")
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, numpy {np.__version__}")
    print()
    print("| measure | baseline (legacy-style) | optrace collect | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| end to end, process start to file written | {baseline['wall']:.2f} s | {optrace['wall']:.3f} s "
          f"| **{baseline['wall'] / optrace['wall']:.0f}x faster** |")
    print(f"| decode + write only (no start-up, no imports) | {baseline_decode_s:.2f} s | {optrace_decode:.3f} s "
          f"| {baseline_decode_s / optrace_decode:.0f}x faster |")
    print(f"| peak memory (max RSS) | {baseline['rss_kb'] / mb:.0f} MB | {optrace['rss_kb'] / mb:.0f} MB "
          f"| **{100 * optrace['rss_kb'] / baseline['rss_kb']:.0f} %** |")
    print(f"| bare `python -c pass` for reference | {python_start['wall']:.3f} s, "
          f"{python_start['rss_kb'] / mb:.0f} MB | | |")
    ok_speed = baseline["wall"] / optrace["wall"] >= 50
    ok_memory = optrace["rss_kb"] <= 0.2 * baseline["rss_kb"]
    print()
    print(f"targets: >= 50x faster: {'met' if ok_speed else 'NOT met'}; "
          f"<= 20 % memory: {'met' if ok_memory else 'NOT met'}")


if __name__ == "__main__":
    main()
