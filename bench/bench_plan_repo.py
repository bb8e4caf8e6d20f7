"""`optrace plan` of every operator of a repository in one run, against a bare parse.

    python bench/bench_plan_repo.py REPO [--jobs 2] [--limit N] [--rounds 1]

The operators are what bench/corpus.py takes (`find_operator_dirs`, test folders left
out). The floor is computed here, not from plan's output: for each operator, its C / C++
files (every file under its folder with a C / C++ suffix) and the closure of their quoted
includes (`#include "x"` found beside the includer, in the operator's folder or its
`op_kernel/`, or at the repository root; angle-bracket includes are the toolkit's and
left out), parsed by tree-sitter in one process (interpreter start and tree-sitter's
import once, as one plan run has them once); a header two operators include is parsed
for each, as plan parses it for each.

Then `plan --jobs N` of all the operators in one run with an empty user cache (cold: a
first run over the repository) and again (warm: the repository unchanged, every plan
taken from the cache). For each: CPU seconds (user + system of the command and its
workers), wall seconds, and the peak of the resident memory summed over the command and
its workers (sampled from /proc every 20 ms). Targets (issue #30): cold <= 3x the floor,
warm <= 1.5x, memory <= 1 GiB. With `--rounds`, the floor and both plans run in turn that
many times and the minimum of each is kept.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from optrace.engine.discovery import CPP_EXTS, find_operator_dirs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_collect import compile_bytecode
from bench_plan_ops import BARE_PARSE  # the same bare parse as the per-operator bench

_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.M)



def operators(repo: Path) -> list[Path]:
    found = find_operator_dirs(repo)
    return [p for p in found if not {"tests", "test"} & set(p.relative_to(repo).parts)]


def closure(op: Path, repo: Path) -> list[Path]:
    """The operator's C / C++ files and what their quoted includes reach (see above)."""
    todo = sorted(p for p in op.rglob("*") if p.suffix.lower() in CPP_EXTS and p.is_file())
    seen = set(todo)
    bases = (op, op / "op_kernel", repo)
    while todo:
        path = todo.pop()
        try:
            data = path.read_bytes()
        except OSError:
            continue
        for m in _INCLUDE.finditer(data):
            name = os.fsdecode(m.group(1))
            for base in (path.parent, *bases):
                cand = Path(os.path.normpath(base / name))
                if cand.is_file():
                    if cand not in seen:
                        seen.add(cand)
                        todo.append(cand)
                    break
    return sorted(seen)


class PeakRss:
    """The peak of the resident memory summed over a process and its descendants."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry))
        out, stack = [], [self.pid]
        while stack:
            pid = stack.pop()
            out.append(pid)
            stack.extend(children.get(pid, []))
        return out

    def _rss(self, pid: int) -> int:
        try:
            with open(f"/proc/{pid}/statm", "rb") as handle:
                return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            return 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, sum(self._rss(p) for p in self._tree()))
            self._stop.wait(0.02)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def measured(cmd: list[str], env: dict[str, str], data: bytes = b"",
             cwd: Path | None = None) -> tuple[float, float, int]:
    """(CPU seconds of the command and its descendants, wall seconds, peak summed RSS)."""
    before = os.times()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, cwd=cwd)
    peak = PeakRss(proc.pid)
    proc.communicate(data)
    wall = time.perf_counter() - t0
    rss = peak.stop()
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return cpu, wall, rss


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("repo", type=Path)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=int, help="the first N operators only (a quick try)")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args(argv)
    compile_bytecode()  # as an installed copy has it (PYTHONDONTWRITEBYTECODE: from source)
    repo = args.repo.resolve()
    ops = operators(repo)[: args.limit]
    started = time.perf_counter()
    files = [f for op in ops for f in closure(op, repo)]
    listing = "\n".join(os.fspath(f) for f in files).encode()
    print(f"{len(ops)} operators, {len(files)} files to parse (with repeats), "
          f"{sum(f.stat().st_size for f in files) / 1e6:.1f} MB; closures found in "
          f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="optrace-bench-repo-") as tmp:
        cache = Path(tmp) / "cache"
        env = dict(os.environ, XDG_CACHE_HOME=str(cache))
        plan = [sys.executable, "-m", "optrace", "plan", "--jobs", str(args.jobs), *map(os.fspath, ops)]
        cols: dict[str, list[tuple[float, float, int]]] = {"floor": [], "cold": [], "warm": []}
        for r in range(args.rounds):
            cols["floor"].append(measured([sys.executable, "-c", BARE_PARSE], env, listing, Path(tmp)))
            shutil.rmtree(cache, ignore_errors=True)
            cols["cold"].append(measured(plan, env, cwd=Path(tmp)))
            cols["warm"].append(measured(plan, env, cwd=Path(tmp)))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1][0]:.1f} s CPU / {v[-1][1]:.1f} s wall"
                                                  for k, v in cols.items()), file=sys.stderr)
    best = {k: (min(c for c, _, _ in v), min(w for _, w, _ in v), max(m for _, _, m in v))
            for k, v in cols.items()}
    fc, fw, _ = best["floor"]
    print(f"`python bench/bench_plan_repo.py {args.repo} --jobs {args.jobs}"
          + (f" --limit {args.limit}" if args.limit else "") + f" --rounds {args.rounds}`: "
          f"{len(ops)} operators, {len(files)} files parsed by the floor\n")
    print("| run | CPU s | wall s | x floor (CPU) | x floor (wall) | peak RSS, summed | target |")
    print("|---|---:|---:|---:|---:|---:|---|")
    print(f"| floor: bare parse, one process | {fc:.1f} | {fw:.1f} | 1.00x | 1.00x | | |")
    for key, title, bound in (("cold", f"plan --jobs {args.jobs}, empty user cache", 3.0),
                              ("warm", "plan again, repository unchanged", 1.5)):
        c, w, m = best[key]
        ok = c / fc <= bound and w / fw <= bound
        memory = "" if key == "warm" else f"; memory {'met' if m <= 1 << 30 else 'NOT met'} (<= 1 GiB)"
        print(f"| {title} | {c:.1f} | {w:.1f} | {c / fc:.2f}x | {w / fw:.2f}x | {m / 2**20:.0f} MiB | "
              f"{'met' if ok else 'NOT met'} (<= {bound}x){memory} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
