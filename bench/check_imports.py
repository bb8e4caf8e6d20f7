"""What a `check` that misses its cache pays before it reads a file, against the bare parse.

bench_check.py's targets compare a whole `optrace check OPDIR` process with a process that
parses the operator's C / C++ files with tree-sitter and nothing else. This script splits
out what the check's process pays only to start: the interpreter, the imports a check
that runs (a cache miss) makes — networkx first among them, which the design asks the
include and call graphs to be built with — and tree-sitter's compile of the one query
the analysis indexes every file with. Each figure is the best CPU (user + system) of
``--rounds`` fresh processes, interleaved, and is printed as a ratio of the bare parse of
the same operator measured in the same run.

Usage: python bench/check_imports.py OPDIR [--repo-root ROOT] [--rounds 9]
(OPDIR: an operator directory, instrumented or not; its include closure as bench_check.py
takes it)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_check import BARE_PARSE_LIST, cpu_of, include_closure

# What each row's process runs (each its own process, start-up included); the bare parse
# is added with the operator's file list.
STEPS = [
    ("interpreter start-up (python -c pass)", "pass"),
    ("tree-sitter's import (what the bare parse imports)", "import tree_sitter, tree_sitter_cpp"),
    ("networkx's import", "import networkx"),
    ("every import of a check that runs (optrace.pipeline.check, networkx, libclang's bindings)",
     "from optrace.cli.deferred import install; install(); import optrace.pipeline.check"),
    ("the same and one more tree-sitter query compiled (engine/cpp.py compiles one at import)",
     "import optrace.pipeline.check, optrace.engine.cpp as c; c.Query(c._LANGUAGE, '(call_expression) @n')"),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("opdir", type=Path)
    ap.add_argument("--repo-root", type=Path, help="where its includes are looked for besides it (default: "
                    "its grandparent)")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    op = args.opdir.resolve()
    root = (args.repo_root or op.parent.parent).resolve()
    files = include_closure(op, root)
    with tempfile.TemporaryDirectory(prefix="optrace-check-imports-") as tmp:
        listing = Path(tmp) / "files.txt"
        listing.write_text("".join(f"{p}\n" for p in files), encoding="utf-8")
        commands = [(label, [sys.executable, "-c", code]) for label, code in STEPS]
        commands.append((f"bare tree-sitter parse of the operator ({len(files)} files with their "
                         "include closure)", [sys.executable, "-c", BARE_PARSE_LIST, str(listing)]))
        for _, cmd in commands:
            cpu_of(cmd)  # warm-up: bytecode and the page cache
        best = [float("inf")] * len(commands)
        for _ in range(args.rounds):
            for k, (_, cmd) in enumerate(commands):
                best[k] = min(best[k], cpu_of(cmd))
    parse = best[-1]
    print(f"{op.name}: best CPU of {args.rounds} interleaved rounds, and as a ratio of the bare parse")
    for (label, _), cpu in zip(commands, best, strict=True):
        print(f"  {cpu:6.3f} s  {cpu / parse:5.2f}x  {label}")
    start = best[0]
    networkx, imports = best[2] - start, best[3] - start
    query = best[4] - best[3]
    print(f"  beyond the interpreter's start-up: networkx {networkx:.3f} s = {networkx / parse:.2f}x the "
          f"parse; a check's imports {imports:.3f} s = {imports / parse:.2f}x; a query compile {query:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
