"""`optrace plan` and `optrace apply` over a generated forest vs a bare tree-sitter parse
of the same files.

All run as fresh processes in the same session (same machine, same load), so the ratios
are meaningful even on a shared, noisy machine; absolute seconds are not. Targets (issues
#2, #6, #30): plan <= 2x the parse time, plan + apply <= 2.5x (#30; #2 and #6 asked 2x),
peak memory <= 1 GiB. `apply
--write` runs on a fresh copy of the forest (the copy is not timed) and includes its
plan; `apply` without `--write` (the diff) is measured too. The forest's operators have
op_host, torch adapter and Python sample layers and share one pybind.cpp, sample and
build script (`forest.py`), so apply does its cross-layer work and its reconciliation of
shared files. Peak memory is the largest single process (the CLI or one pool worker).

Beside the wall-time ratio with both cores (the default), each of plan and plan + `apply
--write` is also given with `--jobs 1` (one process, so the ratio does not lean on the
second core: the parse baseline is one process) and as a CPU ratio (user + system
seconds of all the command's processes over the parse's: the work done, whatever the
cores and the other jobs on the machine).

The user cache (`$XDG_CACHE_HOME/optrace`: the repository index and each operator's
plan) points into the forest's temporary directory: plan with `--jobs 1` and with both
cores each start from an empty cache (cold, as a first run), and a second plan over the
unchanged forest (warm: every operator's plan taken from the cache) gives the second-run
row (target <= 1.5x the parse).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_collect import compile_bytecode
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


# Runs the command and prints the peak RSS of its largest process and the CPU seconds of
# all of its processes: ru_maxrss of a process's children is the max over all of them
# so far, so each measurement gets its own parent, and one command's peak never hides
# behind another's; ru_utime / ru_stime sum over every waited-for descendant (pool
# workers are waited for by the CLI, the CLI by this parent).
PEAK = r"""
import resource, subprocess, sys
subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(usage.ru_maxrss, usage.ru_utime + usage.ru_stime)
"""

#: CPU seconds of the last run_measured command
last_cpu = [0.0]


def run_measured(cmd: list[str], cache: Path | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one command (its largest process); its CPU
    seconds in ``last_cpu[0]``. `cache`: the user cache directory it uses, emptied first
    (cold) unless its name says warm."""
    env = dict(os.environ)
    if cache is not None:
        if not cache.name.startswith("warm"):
            shutil.rmtree(cache, ignore_errors=True)
        env["XDG_CACHE_HOME"] = str(cache)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PEAK, *cmd], check=True, capture_output=True, text=True,
                          env=env)
    wall = time.perf_counter() - t0
    rss_kb, cpu = done.stdout.split()[-2:]
    last_cpu[0] = float(cpu)
    return wall, int(rss_kb) / 1024


def main(argv: list[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--operators", type=int, default=240)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-apply", action="store_true", help="plan only")
    args = ap.parse_args(argv)
    compile_bytecode()  # as an installed copy has it (PYTHONDONTWRITEBYTECODE: from source)
    with tempfile.TemporaryDirectory(prefix="optrace-forest-") as tmp:
        root = Path(tmp)
        ops, lines = write_forest(root, args.operators)
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        parse_t, plan_t = [], []
        parse_cpu, plan_cpu, apply_cpu = [], [], []
        parse_mem = plan_mem = 0.0
        for _ in range(args.repeat):
            t, parse_mem = run_measured([sys.executable, "-c", BARE_PARSE, str(root)])
            parse_t.append(t)
            parse_cpu.append(last_cpu[0])
        serial_t, serial_cpu, warm_t, warm_cpu = [], [], [], []
        cold = Path(tmp) / "cache"
        warm = Path(tmp) / "warm-cache"
        plan_cmd = [sys.executable, "-m", "optrace", "plan", *map(str, ops), "--format", "json",
                    "-o", str(root / "plan.json")]
        for _ in range(args.repeat):
            t, _mem = run_measured([*plan_cmd, "--jobs", "1"], cold)
            serial_t.append(t)
            serial_cpu.append(last_cpu[0])
        for _ in range(args.repeat):
            t, plan_mem = run_measured(plan_cmd, cold)
            plan_t.append(t)
            plan_cpu.append(last_cpu[0])
        shutil.rmtree(warm, ignore_errors=True)
        # To standard output (run_measured discards it), not `-o`: with an output file
        # plan plans every operator (it must not replace a file a plan reads, which only a
        # plan that ran has read), so `-o` would time the index cache alone.
        warm_cmd = plan_cmd[:plan_cmd.index("-o")]
        run_measured(warm_cmd, warm)  # fills the cache: a first run
        for _ in range(args.repeat):
            t, _mem = run_measured(warm_cmd, warm)
            warm_t.append(t)
            warm_cpu.append(last_cpu[0])
        planned = len(json.loads((root / "plan.json").read_text())["operators"])
        (root / "plan.json").unlink()
        apply_t, apply_serial_t, diff_t, written = [], [], [], 0
        apply_mem = diff_mem = 0.0
        for i in range(0 if args.no_apply else args.repeat):
            t, diff_mem = run_measured([sys.executable, "-m", "optrace", "apply", *map(str, ops)], cold)
            diff_t.append(t)
            for jobs in ([], ["--jobs", "1"]):
                copy = Path(tmp) / f"copy{i}"
                shutil.copytree(root, copy)
                t, mem = run_measured([sys.executable, "-m", "optrace", "apply",
                                       *(str(copy / op.name) for op in ops), "--write", *jobs], cold)
                if jobs:
                    apply_serial_t.append(t)
                else:
                    apply_t.append(t)
                    apply_cpu.append(last_cpu[0])
                    apply_mem = mem
                written = sum(1 for op in ops
                              if (copy / op.name / "op_kernel" / "optrace_runtime.h").is_file())
                shutil.rmtree(copy)
    result = {
        "operators": args.operators, "planned": planned, "lines": lines, "bytes": size,
        "parse_s": min(parse_t), "plan_s": min(plan_t), "ratio": min(plan_t) / min(parse_t),
        "plan_serial_s": min(serial_t), "ratio_serial": min(serial_t) / min(parse_t),
        "plan_serial_cpu_s": min(serial_cpu), "ratio_serial_cpu": min(serial_cpu) / min(parse_cpu),
        "plan_warm_s": min(warm_t), "ratio_warm": min(warm_t) / min(parse_t),
        "plan_warm_cpu_s": min(warm_cpu), "ratio_warm_cpu": min(warm_cpu) / min(parse_cpu),
        "parse_cpu_s": min(parse_cpu), "plan_cpu_s": min(plan_cpu),
        "ratio_cpu": min(plan_cpu) / min(parse_cpu),
        "cores": os.cpu_count(),
        "parse_peak_mib": parse_mem, "plan_peak_mib": plan_mem,
    }
    if apply_t:
        result.update({
            "apply_s": min(apply_t), "apply_ratio": min(apply_t) / min(parse_t), "apply_peak_mib": apply_mem,
            "apply_serial_s": min(apply_serial_t), "apply_ratio_serial": min(apply_serial_t) / min(parse_t),
            "apply_cpu_s": min(apply_cpu), "apply_ratio_cpu": min(apply_cpu) / min(parse_cpu),
            "applied": written,
            "diff_s": min(diff_t), "diff_ratio": min(diff_t) / min(parse_t), "diff_peak_mib": diff_mem,
        })
    return result


def table(r: dict[str, object]) -> str:
    return "\n".join([
        "| benchmark | baseline | optrace | ratio: wall, all cores | `--jobs 1` | CPU | target |",
        "|---|---|---|---|---|---|---|",
        f"| plan {r['operators']} operators, {int(r['lines']):,} lines, all {r['cores']} cores "  # type: ignore[call-overload]
        f"| bare tree-sitter parse {r['parse_s']:.1f} s (CPU {r['parse_cpu_s']:.1f} s) | {r['plan_s']:.1f} s "
        f"(`--jobs 1` {r['plan_serial_s']:.1f} s, CPU {r['plan_cpu_s']:.1f} s), peak "
        f"{r['plan_peak_mib']:.0f} MiB | {r['ratio']:.2f}x | {r['ratio_serial']:.2f}x "
        f"| {r['ratio_cpu']:.2f}x (`--jobs 1` {r['ratio_serial_cpu']:.2f}x) | <= 2x, <= 1024 MiB |",
        "| plan again, the forest unchanged (warm user cache: the index and each plan) | (same) "
        f"| {r['plan_warm_s']:.1f} s "
        f"(CPU {r['plan_warm_cpu_s']:.1f} s) | {r['ratio_warm']:.2f}x | | {r['ratio_warm_cpu']:.2f}x "
        "| <= 1.5x |",
        *([
            f"| plan + `apply --write`, same forest ({r['applied']} operators instrumented, "
            f"shared pybind / sample / build script), all {r['cores']} cores | (same) | "
            f"{r['apply_s']:.1f} s (`--jobs 1` {r['apply_serial_s']:.1f} s, CPU {r['apply_cpu_s']:.1f} s), "
            f"peak {r['apply_peak_mib']:.0f} MiB | {r['apply_ratio']:.2f}x | {r['apply_ratio_serial']:.2f}x "
            f"| {r['apply_ratio_cpu']:.2f}x | <= 2.5x (#30; 2x in #2, #6), <= 1024 MiB |",
            f"| plan + `apply` (the diff, nothing written) | (same) | {r['diff_s']:.1f} s, peak "
            f"{r['diff_peak_mib']:.0f} MiB | {r['diff_ratio']:.2f}x | | | |",
        ] if "apply_s" in r else []),
    ])


if __name__ == "__main__":
    res = main()
    print(json.dumps(res, indent=2))
    print(table(res))
