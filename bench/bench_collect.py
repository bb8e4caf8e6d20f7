"""Benchmark: `optrace collect` against a decoder written like the legacy helper.

Workload: 8 ranks x 72 cores (24 AIC + 48 AIV) x ~1000 records, legacy layout
(``rank{NNN}.pt`` = ``[aic_tensor, aiv_tensor]``, 2048 int64 words per slot).

Measured, each in its own child process (wall time from process start to trace written;
peak memory below):

- ``optrace collect DIR -o trace.json`` — the real command line;
- the legacy loop as a fair engineer writes it: a Python loop over cores and records,
  each core's row taken once (``.tolist()``: Python ints, not two torch views and two
  ``.item()`` calls per record), a dict per record, a per-core stack to pair B/E, all
  events kept in a list and ``json.dump``-ed. Run twice when possible: on torch tensors
  from ``torch.load`` (what the legacy helper reads; needs an interpreter with torch:
  ``--torch-python`` or $OPTRACE_BENCH_TORCH_PYTHON), and on numpy arrays from optrace's
  reader (a stand-in that is always available);
- the seed helper's own algorithm, as the seed's documents describe it (our own code):
  ``torch.load``, two torch views and ``.item()`` per record word, each core from its own
  zero, B/E paired by a scan back over the open begins, then the quadratic nesting pass
  (every span of a core against every other, for its depth and parent), one
  ``json.dump``;
- the decode time of each without interpreter start-up and imports (in-process timer);
- peak memory in separate runs: the highest sum of PSS over the command's processes,
  sampled every millisecond (see MEMORY_RUNNER).

Every side is timed the same way: best of ``--runs`` (wall time, and the in-process
decode time), peak memory the highest of min(3, runs) sampled runs.

Usage: python bench/bench_collect.py [--ranks 8] [--cores 72] [--runs 5] [--torch-python PY]
       [--keep DIR]
Prints a markdown table. Target: <= 20 % of the peak memory. (The ">= 50x end to end" target
is retired: bench_floor.py measures what bounds the command — its floor, and decoding
alone against the fair loop.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
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
        for point, kind in ((b, "B"), (e, "E")):
            points[str(point)] = {"label": label, "file": "op_kernel/op.h", "line": point,
                                  "event_type": kind, "event_id": b}
    (directory / "point_map.json").write_text(json.dumps({"points": points}))
    return n


# ----------------------------------------------------------------------------- baseline


def _load(path: Path, loader: str) -> Any:
    if loader == "torch":
        import torch

        return torch.load(path, weights_only=True)
    from optrace.runtime.pt_reader import load_pt

    return load_pt(path)


def baseline_decode(directory: Path, output: Path, loader: str) -> int:
    """The legacy loop written fairly: each core's row once as Python ints, a dict per
    record, a per-label stack to pair B/E, one big list, json.dump."""
    point_map = json.loads((directory / "point_map.json").read_text())["points"]
    events: list[dict[str, Any]] = []
    for path in sorted(directory.glob("rank*.pt")):
        rank = int(path.stem[4:])
        tensors = _load(path, loader)
        core_types = ["AIC", "AIV"]
        for type_index, tensor in enumerate(tensors):
            for core in range(tensor.shape[0]):
                row = tensor[core].tolist()  # once per core: Python ints from here on
                counter = row[0]
                if counter == 0:
                    continue
                size = len(row)
                records = []
                for i in range(min(counter - 1, (size - 2) // 2)):
                    word = row[1 + i]
                    cycle = row[size - 2 - i]
                    point = word & 0xFFFFFFFF
                    high = (word >> 32) & 0xFFFFFFFF
                    records.append({"id": point, "extra": high & 0xFF, "index": high >> 8, "cycle": cycle})
                start = row[size - 1]  # each core from its own zero
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


def seed_decode(directory: Path, output: Path, loader: str) -> int:
    """The seed helper's algorithm: per record two tensor views and ``.item()`` calls,
    B/E paired by scanning the open begins back for the same label, then a nesting pass
    comparing every span of a core with every other one (quadratic in the spans of a
    core) for its depth and parent, written into the event's args."""
    point_map = json.loads((directory / "point_map.json").read_text())["points"]
    events: list[dict[str, Any]] = []
    for path in sorted(directory.glob("rank*.pt")):
        rank = int(path.stem[4:])
        tensors = _load(path, loader)
        for type_index, tensor in enumerate(tensors):
            for core in range(tensor.shape[0]):
                counter = int(tensor[core][0].item())
                if counter == 0:
                    continue
                size = tensor.shape[1]
                start = int(tensor[core][size - 1].item())
                open_begins: list[tuple[str, float, int, int, dict[str, Any]]] = []
                spans: list[dict[str, Any]] = []
                for i in range(min(counter - 1, (size - 2) // 2)):
                    word = int(tensor[core][1 + i].item())
                    cycle = int(tensor[core][size - 2 - i].item())
                    info = point_map.get(str(word & 0xFFFFFFFF))
                    if info is None:
                        continue
                    high = (word >> 32) & 0xFFFFFFFF
                    ts = (cycle - start) / 50.0
                    if info["event_type"] == "B":
                        open_begins.append((info["label"], ts, high >> 8, high & 0xFF, info))
                        continue
                    for j in range(len(open_begins) - 1, -1, -1):  # the latest open begin of this label
                        if open_begins[j][0] == info["label"]:
                            label, begin_ts, index, extra, begin_info = open_begins.pop(j)
                            spans.append({
                                "name": label, "ph": "X", "pid": rank,
                                "tid": f"{'AIC' if type_index == 0 else 'AIV'} {core}",
                                "ts": begin_ts, "dur": ts - begin_ts,
                                "args": {"index": index, "extraId": extra,
                                         "src": f"{begin_info['file']}:{begin_info['line']}"},
                            })
                            break
                for a, span in enumerate(spans):  # the nesting pass: every pair of spans
                    depth, parent, parent_dur = 0, None, None
                    end = span["ts"] + span["dur"]
                    for b, other in enumerate(spans):
                        if b == a:
                            continue
                        if other["ts"] <= span["ts"] and end <= other["ts"] + other["dur"] and (
                                other["dur"] > span["dur"] or (other["dur"] == span["dur"] and b < a)):
                            depth += 1
                            if parent_dur is None or other["dur"] < parent_dur:
                                parent, parent_dur = other["name"], other["dur"]
                    span["args"]["depth"] = depth
                    span["args"]["parent"] = parent
                events.extend(spans)
    with open(output, "w") as handle:
        json.dump({"traceEvents": events}, handle)
    return len(events)


BASELINES = {"legacy": baseline_decode, "seed": seed_decode}


def run_baseline(directory: Path, output: Path, loader: str, algorithm: str) -> None:
    """Child entry point: import first, then time only the decode (printed)."""
    if loader == "torch":
        import torch  # noqa: F401  (start-up cost kept out of the decode time)
    else:
        import optrace.runtime.pt_reader  # noqa: F401
    started = time.perf_counter()
    BASELINES[algorithm](directory, output, loader)
    print(time.perf_counter() - started)


OPTRACE_DECODE = (  # what `optrace collect` runs, timed after the imports
    "import sys, time\n"
    "from optrace.cli.start import prepare_collect_process\n"
    "prepare_collect_process()\n"
    "from pathlib import Path\n"
    "from optrace.runtime.collect import collect\n"
    "started = time.perf_counter()\n"
    "collect(Path(sys.argv[1]), Path(sys.argv[2]))\n"
    "print(time.perf_counter() - started)\n"
)


# ----------------------------------------------------------------------------- measuring


# Commands run from outside the source tree: there, `python -c` would import the tree's
# optrace/ folder instead of the installed package.
_NEUTRAL_DIR = tempfile.gettempdir()


def measure(command: list[str], output: Path | None = None) -> dict[str, Any]:
    """Run `command` in a child: wall time, peak RSS (it is the only child), its stdout.
    `output`, the file the command writes, is removed first (untimed), so every run, the
    baseline's and optrace's alike, writes a new file rather than replacing one (freeing
    the old file's 40 MB of page cache costs ~20 ms inside the rename)."""
    if output is not None:
        output.unlink(missing_ok=True)
    runner = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, text=True)\n"
        "wall = time.perf_counter() - t\n"
        "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps({'wall': wall, 'rss_kb': rss, 'rc': done.returncode, 'out': done.stdout}))\n"
    )
    done = subprocess.run([sys.executable, "-c", runner, *command],
                          capture_output=True, text=True, check=True, cwd=_NEUTRAL_DIR)
    result: dict[str, Any] = json.loads(done.stdout)
    if result["rc"] not in (0, 1):
        raise SystemExit(f"{command} failed with exit code {result['rc']}")
    return result


# Peak memory of a command that may fork (optrace collect does, one process per CPU): the
# largest sum over its processes of their proportional set size (a page shared by k
# processes counts 1/k in each, so what a fork shares with its parent counts once),
# sampled every millisecond. ru_maxrss would give the largest single process only, and a
# sum of RSS would count the shared numpy / Python pages once per process. Run apart from
# the timed runs (the sampling takes a core).
MEMORY_RUNNER = r"""
import json, os, subprocess, sys, time

def kb(path, key):
    try:
        with open(path) as handle:
            for line in handle:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:  # gone meanwhile
        pass
    return 0

def group(pgid, first):
    # No /proc/PID/task/TID/children on every kernel: the command runs in its own
    # session, so its processes are those whose process group is its pid (pids newer
    # than it, barring a wrap of the pid counter).
    found = [first]
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) > first:
            try:
                with open(f"/proc/{name}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                found.append(int(name))
    return found

proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, start_new_session=True)
peak_pss = peak_rss = most = 0
while proc.poll() is None:
    pids = group(proc.pid, proc.pid)
    peak_pss = max(peak_pss, sum(kb(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids))
    peak_rss = max(peak_rss, sum(kb(f"/proc/{p}/status", "VmRSS:") for p in pids))
    most = max(most, len(pids))
    time.sleep(0.001)
print(json.dumps({"pss_kb": peak_pss, "rss_sum_kb": peak_rss, "processes": most, "rc": proc.returncode}))
"""


def measure_memory(runs: int, command: list[str], output: Path | None = None) -> dict[str, Any]:
    """The highest of ``runs`` sampled peaks (a sample can only miss a peak, never
    invent one), with the most processes seen at once."""
    results = []
    for _ in range(runs):
        if output is not None:
            output.unlink(missing_ok=True)
        done = subprocess.run([sys.executable, "-c", MEMORY_RUNNER, *command],
                              capture_output=True, text=True, check=True, cwd=_NEUTRAL_DIR)
        results.append(json.loads(done.stdout))
        if results[-1]["rc"] not in (0, 1):
            raise SystemExit(f"{command} failed with exit code {results[-1]['rc']}")
    return {key: max(r[key] for r in results) for key in ("pss_kb", "rss_sum_kb", "processes")}


def best_of(runs: int, command: list[str], output: Path | None = None) -> dict[str, Any]:
    results = [measure(command, output) for _ in range(runs)]
    def number(text: str) -> float | None:
        try:
            return float(text)
        except ValueError:
            return None  # a command's own output (optrace's summary), not a timing

    timings = [t for t in (number(r["out"]) for r in results) if t is not None]
    return {"wall": min(r["wall"] for r in results), "rss_kb": min(r["rss_kb"] for r in results),
            "out": min(timings, default=float("nan"))}


# collect -j 2 with its fallback switched off (worth_processes: no idle CPU, or a small
# input, makes -j N one process by itself): what the processes cost when they do run.
FORCED_JOBS = (
    "import sys\n"
    "from pathlib import Path\n"
    "from optrace.runtime import collect as c\n"
    "c.idle_cpus = lambda: 64.0\n"
    "c.MIN_PARALLEL_BYTES = 0\n"
    "c.collect(Path(sys.argv[1]), Path(sys.argv[2]), c.CollectOptions(jobs=int(sys.argv[3])))\n"
)


def jobs_rows(work: Path, python: str, script: list[str], rank_counts: list[int], cores: int,
              runs: int) -> list[str]:
    """`collect -j 1` against `-j 2` (as users run it, fallback included) and `-j 2` forced
    to two processes, at each rank count: wall best of ``runs``, peak PSS."""
    lines = []
    for ranks in rank_counts:
        data = work / f"jobs{ranks}"
        data.mkdir(exist_ok=True)
        generate(data, ranks, cores)
        out = work / f"jobs{ranks}.json"
        sides = {
            "-j 1": [*script, "collect", str(data), "-o", str(out), "-j", "1"],
            "-j 2": [*script, "collect", str(data), "-o", str(out), "-j", "2"],
            "-j 2, two processes forced": [python, "-c", FORCED_JOBS, str(data), str(out), "2"],
        }
        got = {}
        for name, command in sides.items():
            got[name] = best_of(runs, command, out)
            got[name].update(measure_memory(1, command, out))
        one = got["-j 1"]
        cells = [f"{v['wall']:.2f} s, {v['pss_kb'] / 1024:.0f} MiB ({v['processes']} proc.)"
                 for v in got.values()]
        ratios = [f"{got[n]['wall'] / one['wall']:.2f}x / {got[n]['pss_kb'] / one['pss_kb']:.2f}x"
                  for n in ("-j 2", "-j 2, two processes forced")]
        lines.append(f"| {ranks} | {' | '.join(cells)} | {' | '.join(ratios)} |")
        shutil.rmtree(data, ignore_errors=True)
        out.unlink(missing_ok=True)
    return lines


def compile_bytecode() -> None:
    """Byte-compile optrace's modules, as `pip install` does for a wheel. An editable
    install under PYTHONDONTWRITEBYTECODE=1 (set on some machines) otherwise compiles
    every module from source in every run: ~20 ms of collect, ~0.15 s of a plan (its
    imports take 0.33 s CPU from source, 0.19 s from bytecode), that no installed copy pays."""
    import importlib.util

    spec = importlib.util.find_spec("optrace")
    for location in (spec.submodule_search_locations or []) if spec else []:
        compile_tree(Path(location))


def compile_tree(package: Path) -> None:
    """Byte-compile an optrace package folder and each subpackage in it: a checkout's
    subpackages are links to its top-level folders, which compileall does not follow."""
    import compileall

    for folder in [package, *sorted(p for p in package.iterdir() if p.is_dir() and p.name != "__pycache__")]:
        compileall.compile_dir(folder.resolve(), maxlevels=0, quiet=1)


def installed_copy(work: Path) -> tuple[str, str] | None:
    """A virtual environment with optrace installed from a wheel of this tree, as a user
    has it, and this interpreter's numpy version; returns (python, optrace script).

    Timing the development checkout instead would charge collect for the editable
    install's import hook, which every interpreter start loads (~10 ms of ~0.14 s: the
    `python -c pass` of this environment against that of the wheel's). None, with the
    reason on stderr, when the environment cannot be built (no network for numpy, say)."""
    venv = work / "venv"
    wheels = work / "wheels"
    root = Path(__file__).resolve().parent.parent
    steps = [
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(root)],
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
         f"numpy=={np.__version__}"],
    ]
    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True)
        wheel = next(wheels.glob("*.whl"))
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                        "--no-deps", str(wheel)], check=True, capture_output=True)
    except (subprocess.CalledProcessError, StopIteration) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        print(f"installed copy not built ({exc}; {detail.decode(errors='replace').strip()[-300:]}): "
              "timing the development checkout", file=sys.stderr)
        return None
    return str(venv / "bin" / "python"), str(venv / "bin" / "optrace")


def torch_python(explicit: str | None) -> str | None:
    """An interpreter with torch for the faithful baseline (the legacy helper uses torch)."""
    candidates = [explicit, os.environ.get("OPTRACE_BENCH_TORCH_PYTHON"), sys.executable]
    for candidate in candidates:
        if candidate and subprocess.run([candidate, "-c", "import torch, numpy"],
                                        capture_output=True).returncode == 0:
            return candidate
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--cores", type=int, default=72)
    parser.add_argument("--runs", type=int, default=5,
                        help="best of N, for every side alike (peak memory: the highest of min(3, N))")
    parser.add_argument("--torch-python", help="interpreter with torch for the legacy baseline "
                        "(default: $OPTRACE_BENCH_TORCH_PYTHON, or this one if it has torch)")
    parser.add_argument("--keep", type=Path, help="keep the generated data and traces here")
    parser.add_argument("--checkout", action="store_true",
                        help="time the development checkout (`python -m optrace`) instead of a "
                        "wheel installed into a fresh virtual environment")
    parser.add_argument("--jobs-ranks", default="128,512",
                        help="rank counts at which collect -j 2 is measured against -j 1 ('' to skip)")
    parser.add_argument("--no-seed", action="store_true",
                        help="leave out the seed helper's algorithm (its nesting pass takes minutes)")
    parser.add_argument("--baseline", nargs=4, metavar=("DIR", "OUT", "LOADER", "ALGORITHM"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline:
        run_baseline(Path(args.baseline[0]), Path(args.baseline[1]), args.baseline[2], args.baseline[3])
        return

    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="optrace-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "profiling"
    data.mkdir(exist_ok=True)
    this = str(Path(__file__).resolve())
    rows: list[tuple[str, dict[str, Any]]] = []
    try:
        records = generate(data, args.ranks, args.cores)
        total = records * args.ranks * args.cores
        installed = None if args.checkout else installed_copy(work)
        if installed is None:
            compile_bytecode()
            python, script = sys.executable, [sys.executable, "-m", "optrace"]
        else:
            python, script = installed[0], [installed[1]]
        python_start = best_of(args.runs, [python, "-c", "pass"])
        command = [*script, "collect", str(data), "-o", str(work / "optrace.json")]
        memory_runs = min(3, args.runs)
        optrace = best_of(args.runs, command, work / "optrace.json")
        optrace.update(measure_memory(memory_runs, command, work / "optrace.json"))
        optrace["out"] = best_of(args.runs, [python, "-c", OPTRACE_DECODE, str(data),
                                             str(work / "optrace-inproc.json")],
                                 work / "optrace-inproc.json")["out"]
        with_torch = torch_python(args.torch_python)
        baselines = []
        if with_torch:
            baselines.append(("legacy loop, fair (torch tensors, a row per core)", with_torch, "torch",
                              "legacy"))
        baselines.append(("same loop on numpy arrays", sys.executable, "numpy", "legacy"))
        if not args.no_seed:
            seed_python, seed_loader = (with_torch, "torch") if with_torch else (sys.executable, "numpy")
            baselines.append(("seed helper's algorithm (.item() per word, quadratic nesting pass"
                              + ("" if with_torch else "; numpy arrays, no torch here") + ")",
                              seed_python, seed_loader, "seed"))
        for name, python, loader, algorithm in baselines:
            out = work / f"{algorithm}-{loader}.json"
            command = [python, this, "--baseline", str(data), str(out), loader, algorithm]
            base = best_of(args.runs, command, out)
            base.update(measure_memory(memory_runs, command, out))
            rows.append((name, base))
        spans_optrace = sum(1 for e in json.loads((work / "optrace.json").read_text())["traceEvents"]
                            if e["ph"] == "X")
        spans_baseline = len(json.loads((work / "legacy-numpy.json").read_text())["traceEvents"])
        trace_mb = (work / "optrace.json").stat().st_size / 1e6
        rank_counts = [int(n) for n in args.jobs_ranks.split(",") if n.strip()]
        jobs = jobs_rows(work, python, script, rank_counts, args.cores, min(3, args.runs))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    mb = 1024.0
    print(f"workload: {args.ranks} ranks x {args.cores} cores x {records} records = {total} records, "
          f"legacy layout; spans: optrace {spans_optrace}, baseline {spans_baseline}; "
          f"trace {trace_mb:.0f} MB")
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, numpy {np.__version__}; "
          f"optrace {'from a wheel in a fresh venv' if installed else 'from the checkout'}; "
          f"its bare `python -c pass`: {python_start['wall']:.3f} s, {python_start['rss_kb'] / mb:.0f} MB; "
          f"every side best of {args.runs}, peak memory the highest of {memory_runs}")
    if not with_torch:
        print("torch not found (--torch-python): the baselines ran on numpy arrays")
    print()
    print("| baseline | end to end: baseline / optrace | speed-up | decode only: baseline / optrace "
          "| speed-up | peak memory: baseline / optrace | optrace memory |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    verdicts = []
    for name, base in rows:
        speed = base["wall"] / optrace["wall"]
        decode_speed = base["out"] / optrace["out"]
        memory = optrace["pss_kb"] / base["pss_kb"]
        print(f"| {name} | {base['wall']:.2f} s / {optrace['wall']:.3f} s | **{speed:.0f}x** "
              f"| {base['out']:.2f} s / {optrace['out']:.3f} s | {decode_speed:.0f}x "
              f"| {base['pss_kb'] / mb:.0f} MB / {optrace['pss_kb'] / mb:.0f} MB "
              f"| **{100 * memory:.0f} %** |")
        verdicts.append(f"{name}: <= 20 % memory {'met' if memory <= 0.2 else 'NOT met'} (end to end "
                        f"{speed:.0f}x: no target; bench_floor.py has collect's floor and the decoding)")
    print()
    print(f"peak memory = the highest sum of PSS over a command's processes, sampled every ms "
          f"(optrace: up to {optrace['processes']} processes, largest alone "
          f"{optrace['rss_kb'] / mb:.0f} MB RSS, RSS summed {optrace['rss_sum_kb'] / mb:.0f} MB; "
          + ", ".join(f"{name.split(' (')[0]}: {base['rss_kb'] / mb:.0f} MB RSS" for name, base in rows)
          + ")")
    print()
    for verdict in verdicts:
        print(f"targets vs {verdict}")
    if jobs:
        print()
        print(f"`collect -j N` against one process ({os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f} at the end; best of {min(3, args.runs)}, peak PSS of one run; "
              "the forced row switches the fallback off):")
        print()
        print("| ranks | -j 1 | -j 2 (as run) | -j 2, two processes forced | -j 2 / -j 1: wall / PSS "
              "| forced / -j 1: wall / PSS |")
        print("|---:|---|---|---|---:|---:|")
        for line in jobs:
            print(line)


if __name__ == "__main__":
    main()
