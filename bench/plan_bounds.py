"""What a per-operator `plan` cannot go below, against the corpus's bare parse.

Issue #30's per-operator targets (bench/corpus.py: plan <= 3x a bare parse, plan again
<= 1.5x) are ratios of one `optrace plan` process to one bare tree-sitter parse process of
the operator's files. Two costs sit under every plan whatever optrace does, and this
script measures them as processes, in the same rounds as the bare parse:

- **the walk**: a plan answered from the cache must know that no file of the repository
  changed (an existing file edited to call the op, or to register it, changes the plan),
  so it looks at every file and folder once: here a bare `os.scandir` walk with one
  `lstat` each, `.git` left out (optrace's own walk looks at these and more, so this is
  below it);
- **networkx's import**: the design builds the include and call graphs with networkx, so
  a plan that is not answered from the cache imports it (with the walk).

Each row prints the median over ``--rounds`` interleaved rounds (each process once per
round) and its ratio to the bare parse of each operator; a ratio above a target means the
target cannot be met by a plan that keeps the cache's check of every file (the walk), or
the networkx graphs (the import). The operators' files are what `optrace plan --format
json` lists (its includes and layers' C / C++ files), as bench/corpus.py reads them.

Usage: python bench/plan_bounds.py REPO OP [OP ...] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from corpus import BARE_PARSE, optrace_cmd  # noqa: E402

from optrace.engine.discovery import CPP_EXTS  # noqa: E402

WALK = r"""
import os, sys
stack, seen = [sys.argv[1]], 0
while stack:
    with os.scandir(stack.pop()) as entries:
        for entry in entries:
            if entry.name == ".git":
                continue
            entry.stat(follow_symlinks=False)
            seen += 1
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
print(seen)
"""
NETWORKX_AND_WALK = "import networkx\n" + WALK
NOTHING = "pass\n"


def timed(command: list[str], cwd: Path, data: str | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, input=data, capture_output=True, text=True, check=True)
    return time.perf_counter() - started, done.stdout


def operator_files(repo: Path, op: str) -> list[str]:
    """The C / C++ files a plan of ``op`` reads, as bench/corpus.py gives its bare parse."""
    _, out = timed([*optrace_cmd(), "plan", op, "--format", "json"], repo)
    doc = json.loads(out)["operators"][0]
    files = {*doc.get("includes", {}).get("files", []),
             *(h["file"] for hits in doc.get("layers", {}).values() for h in hits)}
    return sorted(str(repo / f) for f in files if Path(f).suffix.lower() in CPP_EXTS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", type=Path)
    ap.add_argument("ops", nargs="+")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    repo = args.repo.resolve()
    files = {op: "\n".join(operator_files(repo, op)) for op in args.ops}
    py = sys.executable
    seen: dict[str, list[float]] = {"interpreter": [], "walk": [], "networkx + walk": []}
    seen.update({f"bare parse {op}": [] for op in args.ops})
    entries = ""
    for _ in range(args.rounds):
        seen["interpreter"].append(timed([py, "-c", NOTHING], repo)[0])
        secs, entries = timed([py, "-c", WALK, str(repo)], repo)
        seen["walk"].append(secs)
        seen["networkx + walk"].append(timed([py, "-c", NETWORKX_AND_WALK, str(repo)], repo)[0])
        for op in args.ops:
            seen[f"bare parse {op}"].append(timed([py, "-c", BARE_PARSE], repo, files[op])[0])
    med = {name: statistics.median(values) for name, values in seen.items()}
    print(f"{repo}: {entries.strip()} files and folders walked; median of {args.rounds} rounds, wall s\n")
    print("| operator | bare parse s | walk s (x bare) | networkx + walk s (x bare) | plan again <= 1.5x | "
          "plan <= 3x |")
    print("|---|---:|---:|---:|---|---|")
    for op in args.ops:
        bare = med[f"bare parse {op}"]
        walk, cold = med["walk"] / bare, med["networkx + walk"] / bare
        print(f"| {op} | {bare:.3f} | {med['walk']:.3f} ({walk:.2f}x) | {med['networkx + walk']:.3f} "
              f"({cold:.2f}x) | {'below the walk' if walk > 1.5 else 'room'} | "
              f"{'below the import and walk' if cold > 3 else 'room'} |")
    walks = [med["walk"] / med[f"bare parse {op}"] for op in args.ops]
    colds = [med["networkx + walk"] / med[f"bare parse {op}"] for op in args.ops]
    walk, cold = statistics.median(walks), statistics.median(colds)
    print(f"| median of {len(args.ops)} | | {walk:.2f}x | {cold:.2f}x | "
          f"{'below the walk' if walk > 1.5 else 'room'} | "
          f"{'below the import and walk' if cold > 3 else 'room'} |")
    print(f"\ninterpreter alone (`python -c pass`): {med['interpreter']:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
