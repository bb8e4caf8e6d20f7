"""`optrace plan` over a generated forest vs a bare tree-sitter parse of the same files.

Both run as fresh processes in the same session (same machine, same load), so the ratio
is meaningful even on a shared, noisy machine; absolute seconds are not. Targets (issue
#2): plan time <= 2x the parse time, peak memory <= 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest import write_forest

BARE_PARSE = r"""
import sys
from pathlib import Path
import tree_sitter_cpp
from tree_sitter import Language, Parser
parser = Parser(Language(tree_sitter_cpp.language()))
n = 0
for path in sorted(Path(sys.argv[1]).rglob("*")):
    if path.suffix in (".h", ".cpp"):
        n += len(parser.parse(path.read_bytes()).root_node.children)
print(n)
"""


def run_measured(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of children is the max over all children so far: run the larger last.
    return wall, max(peak, before) / 1024


def main(argv: list[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--operators", type=int, default=240)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="optrace-forest-") as tmp:
        root = Path(tmp)
        ops, lines = write_forest(root, args.operators)
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        parse_t, plan_t = [], []
        parse_mem = plan_mem = 0.0
        for _ in range(args.repeat):
            t, parse_mem = run_measured([sys.executable, "-c", BARE_PARSE, str(root)])
            parse_t.append(t)
        serial_t = []
        for _ in range(args.repeat):
            t, _mem = run_measured([sys.executable, "-m", "optrace", "plan", *map(str, ops),
                                    "--format", "json", "-o", str(root / "plan.json"), "--jobs", "1"])
            serial_t.append(t)
        for _ in range(args.repeat):
            t, plan_mem = run_measured([sys.executable, "-m", "optrace", "plan", *map(str, ops),
                                        "--format", "json", "-o", str(root / "plan.json")])
            plan_t.append(t)
        planned = len(json.loads((root / "plan.json").read_text())["operators"])
    result = {
        "operators": args.operators, "planned": planned, "lines": lines, "bytes": size,
        "parse_s": min(parse_t), "plan_s": min(plan_t), "ratio": min(plan_t) / min(parse_t),
        "plan_serial_s": min(serial_t), "ratio_serial": min(serial_t) / min(parse_t),
        "cores": os.cpu_count(),
        "parse_peak_mib": parse_mem, "plan_peak_mib": plan_mem,
    }
    return result


def table(r: dict[str, object]) -> str:
    return "\n".join([
        "| benchmark | baseline | optrace | ratio | target |",
        "|---|---|---|---|---|",
        f"| plan {r['operators']} operators, {int(r['lines']):,} lines, all {r['cores']} cores "  # type: ignore[call-overload]
        f"| bare tree-sitter parse {r['parse_s']:.1f} s | {r['plan_s']:.1f} s, peak "
        f"{r['plan_peak_mib']:.0f} MiB | {r['ratio']:.2f}x | <= 2x, <= 1024 MiB |",
        f"| same, `--jobs 1` | (same) | {r['plan_serial_s']:.1f} s | {r['ratio_serial']:.2f}x | |",
    ])


if __name__ == "__main__":
    res = main()
    print(json.dumps(res, indent=2))
    print(table(res))
