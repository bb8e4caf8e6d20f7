"""Benchmark: `optrace plan` of two checkouts on the generated forest, interleaved — this
tree against another (`--before DIR`, e.g. a `git worktree` of an earlier commit, run
through PYTHONPATH), with a bare tree-sitter parse of the same files in every round.

On a shared machine one run's speed can differ from the next by half: a before / after
pair measured minutes apart says little. Here each round runs the parse, then each
checkout's plan (`--jobs 1`, `--no-cache`, JSON to a file), so a round's drift falls on
all three alike; the table gives each side's median CPU seconds over the rounds and its
ratio to the parse's median, and says whether the two plans' JSON is byte-identical.

Usage: python bench/ab_plan.py --before /tmp/wt_before [--operators 240] [--take 100:160]
       [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_collect import compile_tree  # noqa: E402
from bench_plan import PEAK  # noqa: E402
from forest import write_forest  # noqa: E402

# bench_plan's bare parse, over the planned operators' folders only.
BARE_PARSE = r"""
import sys
from pathlib import Path
import tree_sitter_cpp
from tree_sitter import Language, Parser
parser = Parser(Language(tree_sitter_cpp.language()))
n = 0
for folder in sys.argv[1:]:
    for path in sorted(Path(folder).rglob("*")):
        if path.suffix in (".h", ".cpp"):
            n += len(parser.parse(path.read_bytes()).root_node.children)
print(n)
"""


def cpu_of(command: list[str], env: dict[str, str], cwd: Path) -> float:
    """User + system seconds of `command` and its children (its own parent, as bench_plan).
    Run from `cwd` outside both checkouts: `python -m` puts the working directory first on
    the module path, and from a checkout's root its optrace/ would win over PYTHONPATH."""
    out = subprocess.run([sys.executable, "-c", PEAK, *command], check=True, capture_output=True,
                         text=True, env=env, cwd=cwd).stdout.split()
    return float(out[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="the other checkout's root")
    parser.add_argument("--operators", type=int, default=240, help="operators in the forest")
    parser.add_argument("--take", default="", help="plan only these, as a slice START:STOP")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="optrace-ab-plan-") as tmp:
        root = Path(tmp) / "forest"
        ops, lines = write_forest(root, args.operators)
        if args.take:
            start, _, stop = args.take.partition(":")
            ops = ops[int(start or 0): int(stop) if stop else None]
        sides = {"before": str(args.before.resolve()), "after": str(HERE.parent)}
        for checkout in sides.values():  # each as an installed copy has it: bytecode written
            compile_tree(Path(checkout) / "optrace")
        cpu: dict[str, list[float]] = {"parse": [], "before": [], "after": []}
        outputs = {name: Path(tmp) / f"{name}.json" for name in sides}
        for _ in range(args.rounds):
            parse = [sys.executable, "-c", BARE_PARSE, *map(str, ops)]
            cpu["parse"].append(cpu_of(parse, dict(os.environ), Path(tmp)))
            for name, checkout in sides.items():
                env = {**os.environ, "PYTHONPATH": checkout, "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
                plan = [sys.executable, "-m", "optrace", "plan", *map(str, ops), "--jobs", "1", "--no-cache",
                        "--format", "json", "-o", str(outputs[name])]
                cpu[name].append(cpu_of(plan, env, Path(tmp)))
        floor = statistics.median(cpu["parse"])
        same = outputs["before"].read_bytes() == outputs["after"].read_bytes()
        print(f"{len(ops)} operators of a {args.operators}-operator forest ({lines:,} lines in all), "
              f"{args.rounds} interleaved rounds, CPU seconds (median; every round in brackets)")
        print()
        print("| checkout | CPU s | x parse | rounds |")
        print("|---|---:|---:|---|")
        for name in ("parse", "before", "after"):
            median = statistics.median(cpu[name])
            rounds = ", ".join(f"{t:.1f}" for t in cpu[name])
            print(f"| {name} | {median:.2f} | {median / floor:.2f}x | {rounds} |")
        print()
        print(f"plan JSON before and after: {'byte-identical' if same else 'DIFFERENT'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
