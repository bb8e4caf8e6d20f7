"""`optrace plan` of real operators against a bare tree-sitter parse of their files, cold
and warm index cache, and against another optrace tree (the "before" column).

    python bench/bench_plan_ops.py OPDIR... [--base SRC] [--rounds N] [--jobs-run]

For each operator, in interleaved rounds (so every column sees the same load): the bare
parse of the C / C++ files the plan read (the include closure and the layer files its
JSON lists; interpreter start and tree-sitter import included, as plan's time includes
its own), `plan` with an empty user cache (cold: a first run), `plan` again (warm: the
repository unchanged), and — with `--base`, a source tree of another optrace version run
with PYTHONPATH — that version's `plan`. Each figure is the minimum over the rounds of
the CPU seconds (user + system, children included) and of the wall seconds. With
`--jobs-run`, one more row: all the operators in one `plan --jobs 2` run (cold), against
the sum of their bare parses. Local evidence: the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from optrace.engine.discovery import CPP_EXTS

BARE_PARSE = r"""
import sys
import tree_sitter_cpp
from tree_sitter import Language, Parser
parser = Parser(Language(tree_sitter_cpp.language()))
n = 0
for name in sys.stdin.read().splitlines():
    try:
        data = open(name, "rb").read()
    except OSError:
        continue
    n += len(parser.parse(data).root_node.children)
print(n)
"""

# The command's CPU seconds (user + system of every waited-for descendant) on stdout's last line.
CPU = r"""
import resource, subprocess, sys
data = sys.stdin.buffer.read()
subprocess.run(sys.argv[1:], input=data, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(u.ru_utime + u.ru_stime)
"""


def measured(cmd: list[str], env: dict[str, str], data: bytes = b"") -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one command."""
    t0 = time.perf_counter()
    # Run from the cache's folder: `python -m optrace` puts its working directory first on
    # the path, so run from a checkout it would import that checkout's optrace, not --base's.
    done = subprocess.run([sys.executable, "-c", CPU, *cmd], input=data, env=env, check=True,
                          capture_output=True, cwd=env["XDG_CACHE_HOME"].rsplit("/", 1)[0])
    return float(done.stdout.split()[-1]), time.perf_counter() - t0


def plan_files(op: Path, env: dict[str, str]) -> list[str]:
    """The C / C++ files the plan read, from its JSON (as bench/corpus.py takes them)."""
    out = subprocess.run([sys.executable, "-m", "optrace", "plan", str(op), "--format", "json"],
                         env=env, capture_output=True, text=True, cwd=env["XDG_CACHE_HOME"].rsplit("/", 1)[0])
    doc = json.loads(out.stdout)["operators"][0]
    root = Path(doc["repo_root"])
    files = {*doc.get("includes", {}).get("files", []),
             *(h["file"] for hits in doc.get("layers", {}).values() for h in hits)}
    return sorted(str(root / f) for f in files if Path(f).suffix.lower() in CPP_EXTS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ops", nargs="+", type=Path)
    ap.add_argument("--base", type=Path, help="another optrace source tree (the before column)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs-run", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="optrace-bench-cache-") as tmp:
        env = dict(os.environ, XDG_CACHE_HOME=str(Path(tmp) / "cache"))
        base_env = dict(env, PYTHONPATH=str(args.base), PYTHONDONTWRITEBYTECODE="1",
                        XDG_CACHE_HOME=str(Path(tmp) / "base-cache")) if args.base else None
        cache = Path(tmp) / "cache"
        rows = []
        for op in args.ops:
            files = "\n".join(plan_files(op, env)).encode()
            plan = [sys.executable, "-m", "optrace", "plan", str(op)]
            cols: dict[str, list[tuple[float, float]]] = {"parse": [], "cold": [], "warm": [], "base": []}
            for _ in range(args.rounds):
                cols["parse"].append(measured([sys.executable, "-c", BARE_PARSE], env, files))
                shutil.rmtree(cache, ignore_errors=True)
                cols["cold"].append(measured(plan, env))
                cols["warm"].append(measured(plan, env))
                if base_env is not None:
                    cols["base"].append(measured(plan, base_env))
            best = {k: (min(c for c, _ in v), min(w for _, w in v)) for k, v in cols.items() if v}
            rows.append((op, best))
        print("| operator | bare parse CPU / wall | plan cold CPU (ratio) | plan warm CPU (ratio) "
              + ("| before CPU (ratio) " if args.base else "") + "| wall ratio cold / warm |")
        print("|---|---|---|---|" + ("---|" if args.base else "") + "---|")
        ratios: dict[str, list[float]] = {"cold": [], "warm": [], "base": []}
        for op, best in rows:
            p = best["parse"][0]
            for k in ratios:
                if k in best:
                    ratios[k].append(best[k][0] / p)
            line = (f"| {op.name} | {p:.2f} s / {best['parse'][1]:.2f} s | {best['cold'][0]:.2f} s "
                    f"({best['cold'][0] / p:.2f}x) | {best['warm'][0]:.2f} s ({best['warm'][0] / p:.2f}x) ")
            if "base" in best:
                line += f"| {best['base'][0]:.2f} s ({best['base'][0] / p:.2f}x) "
            wall = best["parse"][1]
            line += f"| {best['cold'][1] / wall:.2f}x / {best['warm'][1] / wall:.2f}x |"
            print(line)
        for k, v in ratios.items():
            if v:
                print(f"median CPU ratio {k}: {statistics.median(v):.2f}x over {len(v)} operators")
        if args.jobs_run:
            parse = sum(best["parse"][0] for _, best in rows)
            shutil.rmtree(cache, ignore_errors=True)
            cpu, wall = measured([sys.executable, "-m", "optrace", "plan", "--jobs", "2",
                                  *map(str, args.ops)], env)
            print(f"all {len(rows)} in one `plan --jobs 2` (cold): CPU {cpu:.2f} s, wall {wall:.2f} s; "
                  f"CPU ratio to the summed bare parses ({parse:.2f} s): {cpu / parse:.2f}x")
            if base_env is not None:
                cpu_b, wall_b = measured([sys.executable, "-m", "optrace", "plan", "--jobs", "2",
                                          *map(str, args.ops)], base_env)
                print(f"  before: CPU {cpu_b:.2f} s, wall {wall_b:.2f} s: {cpu_b / parse:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
