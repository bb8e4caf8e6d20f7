"""Is the work linear in the input? Each case at size N and 2N: doubling the input must
cost <= 2.3x the time.

The cases, each the shape of input that once blew up (a plan or check that took minutes):

- **repeated header**: `plan` of an operator whose kernel includes a ~75 KB header
  (include guard, macros, a class template of ~40 methods dispatched by tiling mode, loops,
  `if constexpr` arms, barriers — `kernel_header()` below, our own generator) written N
  times over into one file, as a bad merge or a generated file can leave it;
- **repeated instrumented header**: `check` of the same after `apply --write` (60 points),
  the instrumented header written N times over;
- **distinct header**: `plan` of one header holding N such classes, each renamed, all
  reached from the entry's tiling-key arms;
- **unpaired points**: `check` of a kernel with N hand-written B points and no E;
- **pairs with exits**: `check` of a kernel with N hand-written B / E pairs, a `return`
  between each (each is an OT407 finding);
- **nesting**: `plan` of a kernel calling 40 functions, each nesting `#if 1` N levels
  deep around its work (N near the planner's bound of 256 at 2N);
- **many includes**: `plan` of an entry including N headers, each including the next and
  a common one, each holding a step the entry calls.

Each measurement is a fresh process that imports optrace first and times only the work
(`plan_operator` / `check_operator`, compile safety on, in-process): the interpreter's
start-up would hide a blow-up at small sizes. Rounds interleave N and 2N (the machine is
shared), and each side's median is taken.

    python bench/bench_linear.py [--rounds 5] [--cases repeated,distinct,...] [--scale 1.0]

Prints a markdown table (bench/results.md keeps it, with this command).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TARGET = 2.3

# The child: import optrace, then time the one call (wall: check's compile safety runs
# libclang in a process of its own).
TIMED = r"""
import sys, time
from pathlib import Path
from optrace.cli.deferred import install
install()
from optrace.pipeline.check import check_operator
from optrace.pipeline.plan import plan_operator
command, op = sys.argv[1], Path(sys.argv[2])
t0 = time.perf_counter()
if command == "plan":
    plan_operator(op)
else:
    check_operator(op, compile_safety=True)
print(time.perf_counter() - t0)
"""

# --------------------------------------------------------------------------- generators


def _method(cls: str, mode: int, part: str) -> list[str]:
    """One of a kernel class's per-mode steps: a loop over tiles, typed arms, queues."""
    name = f"{part}Mode{mode}"
    lines = [f"    __aicore__ inline void {name}(uint64_t taskIdx)", "    {",
             f"        uint64_t offset = taskIdx * tiling_->blockLen{mode % 4} + CEIL_DIV(taskIdx, 8);",
             "        for (uint64_t tileIdx = 0; tileIdx < tiling_->tileNum; ++tileIdx) {",
             "            AscendC::LocalTensor<T> xLocal = inQueue_.AllocTensor<T>();",
             "            if constexpr (IsSameType<T, half>::value) {",
             "                AscendC::Cast(work_, xLocal, AscendC::RoundMode::CAST_NONE, tileLen_);",
             f"                AscendC::Muls(work_, work_, (float){mode + 1}.0f, tileLen_);",
             "            } else {",
             f"                AscendC::Adds(xLocal, xLocal, (T){mode}, tileLen_);",
             "            }"]
    if part == "Compute":
        lines += ["            AscendC::PipeBarrier<PIPE_V>();",
                  "            for (uint32_t groupIdx = 0; groupIdx < tiling_->groupNum; ++groupIdx) {",
                  "                AscendC::ReduceSum(sum_, work_[groupIdx * tileLen_], tmp_, tileLen_);",
                  "                AscendC::Sub(work_, work_, sum_, tileLen_);",
                  "            }"]
    if part == "CopyIn":
        lines += ["            AscendC::DataCopyPad(xLocal, xGm_[offset + tileIdx * tileLen_], copyParams_, "
                  "padParams_);",
                  "            inQueue_.EnQue(xLocal);"]
    if part == "CopyOut":
        lines += ["            AscendC::SetFlag<AscendC::HardEvent::V_MTE3>(EVENT_ID0);",
                  "            AscendC::WaitFlag<AscendC::HardEvent::V_MTE3>(EVENT_ID0);",
                  "            AscendC::DataCopyPad(yGm_[offset + tileIdx * tileLen_], xLocal, copyParams_);"]
    lines += ["            inQueue_.FreeTensor(xLocal);", "        }",
              f"        SCALAR_STEP(offset, {mode});  // {cls} mode {mode} {part.lower()}", "    }", ""]
    return lines


_HEAD = """/* Generated for bench/bench_linear.py: the shape of an AscendC kernel header. */
#ifndef {guard}
#define {guard}

#include "kernel_operator.h"
#include "kernel_tiling/kernel_tiling.h"

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define SCALAR_STEP(v, m) do {{ (v) += (m); }} while (0)

namespace MoeNorm {{
constexpr uint32_t BUFFER_NUM = 2;
constexpr uint32_t BLOCK = 32;
template <typename A, typename B> struct IsSameType {{ static constexpr bool value = false; }};
template <typename A> struct IsSameType<A, A> {{ static constexpr bool value = true; }};

template <typename T, bool DETERMINISTIC>
class {cls} {{
public:
    __aicore__ inline {cls}() {{}}
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, const TilingData *tiling)
    {{
        tiling_ = tiling;
        xGm_.SetGlobalBuffer((__gm__ T *)x);
        yGm_.SetGlobalBuffer((__gm__ T *)y);
        pipe_.InitBuffer(inQueue_, BUFFER_NUM, tiling->ubSize);
        InitBuffers();
    }}

    __aicore__ inline void Process()
    {{
        for (uint64_t taskIdx = GetBlockIdx(); taskIdx < tiling_->taskNum; taskIdx += GetBlockNum()) {{
"""

_DISPATCH = """            {head} (tiling_->mode == {mode}) {{
                CopyInMode{mode}(taskIdx);
                ComputeMode{mode}(taskIdx);
                CopyOutMode{mode}(taskIdx);
"""

_TAIL = """            }}
        }}
        if constexpr (DETERMINISTIC) {{
            AscendC::SyncAll();
            ReduceAcrossCores();
        }}
    }}

private:
{methods}
    __aicore__ inline void InitBuffers()
    {{
{buffers}
    }}
    __aicore__ inline void ReduceAcrossCores()
    {{
        for (uint32_t coreIdx = 0; coreIdx < GetBlockNum(); ++coreIdx) {{
            AscendC::DataCopy(work_, yGm_[coreIdx * BLOCK], BLOCK);
            AscendC::Add(sum_, sum_, work_, BLOCK);
        }}
    }}

    const TilingData *tiling_ = nullptr;
    AscendC::TPipe pipe_;
    AscendC::TQue<AscendC::QuePosition::VECIN, BUFFER_NUM> inQueue_;
    AscendC::GlobalTensor<T> xGm_, yGm_;
    AscendC::LocalTensor<float> work_, sum_, tmp_;
{buffer_fields}
    AscendC::DataCopyParams copyParams_;
    AscendC::DataCopyPadParams padParams_;
    uint32_t tileLen_ = 0;
}};
}}  // namespace MoeNorm
#endif  // {guard}
"""


def kernel_header(cls: str = "MoeNormGrad", modes: int = 24, guard: str = "MOE_NORM_GRAD_H") -> str:
    """A real-looking AscendC kernel header of ~75 KB (modes=24): a class template whose
    `Process` picks a tiling mode, each mode a CopyIn / Compute / CopyOut trio, plus the
    init helpers, macros and constants such headers carry."""
    dispatch = "".join(_DISPATCH.format(head="if" if mode == 0 else "} else if", mode=mode)
                       for mode in range(modes))
    methods = "\n".join(line for mode in range(modes) for part in ("CopyIn", "Compute", "CopyOut")
                        for line in _method(cls, mode, part))
    return (_HEAD.format(guard=guard, cls=cls) + dispatch
            + _TAIL.format(guard=guard, methods=methods,
                           buffers="\n".join(f"        pipe_.InitBuffer(buf{i}_, tiling_->ubSize / {i + 2});"
                                             for i in range(8)),
                           buffer_fields="\n".join(f"    AscendC::TBuf<AscendC::TPosition::VECCALC> buf{i}_;"
                                                   for i in range(8))))


def _entry(op: str, header: str, classes: list[str]) -> str:
    arms = []
    for i, cls in enumerate(classes):
        head = "if" if i == 0 else "} else if"
        for j, (t, det) in enumerate((("float", "false"), ("half", "true"))):
            key = 2 * i + j
            arms += [f"    {head if j == 0 else '} else if'} (TILING_KEY_IS({key})) {{",
                     f"        MoeNorm::{cls}<{t}, {det}> op{key};",
                     f"        op{key}.Init(x, y, workspace, &tilingData);", f"        op{key}.Process();"]
    return (f'#include "{header}"\n'
            f'extern "C" __global__ __aicore__ void {op}(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
            "GM_ADDR tiling)\n{\n    GET_TILING_DATA(tilingData, tiling);\n"
            + "\n".join(arms) + "\n    }\n}\n")


def _operator(root: Path, files: dict[str, str]) -> Path:
    op = root / "demo_op"
    for rel, text in files.items():
        path = op / "op_kernel" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / ".git").mkdir(exist_ok=True)
    return op


def repeated_header(root: Path, n: int) -> Path:
    return _operator(root, {"moe_norm_grad.h": kernel_header() * n,
                            "demo_op.cpp": _entry("demo_op", "moe_norm_grad.h", ["MoeNormGrad"])})


def instrumented_header(root: Path, n: int) -> Path:
    """The header of `repeated_header` instrumented by `optrace apply --write` (60 points),
    then written N times over: what `check` reads when the paste comes after apply."""
    one = repeated_header(root.parent / f"{root.name}-one", 1)
    subprocess.run([sys.executable, "-m", "optrace", "apply", str(one), "--write"], check=True,
                   capture_output=True)
    header = (one / "op_kernel" / "moe_norm_grad.h").read_text(encoding="utf-8")
    return _operator(root, {"moe_norm_grad.h": header * n,
                            "demo_op.cpp": (one / "op_kernel" / "demo_op.cpp").read_text(encoding="utf-8")})


def distinct_header(root: Path, n: int) -> Path:
    classes = [f"MoeNormGrad{i}" for i in range(n)]
    text = "".join(kernel_header(cls, guard=f"MOE_NORM_GRAD_{i}_H") for i, cls in enumerate(classes))
    entry = _entry("demo_op", "moe_norm_grad.h", classes)
    return _operator(root, {"moe_norm_grad.h": text, "demo_op.cpp": entry})


def _flat_kernel(body: str) -> str:
    return 'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x)\n{\n' + body + "}\n"


def unpaired_points(root: Path, n: int) -> Path:
    body = "".join(f'    MoeTracing(TRACE_POINT("step{i}", "B"));\n    DataCopy(x, x, {i});\n'
                   for i in range(n))
    return _operator(root, {"demo_op.cpp": _flat_kernel(body)})


def pairs_with_exits(root: Path, n: int) -> Path:
    body = "".join(f'    MoeTracing(TRACE_POINT("step{i}", "B"));\n    if (x == nullptr) {{ return; }}\n'
                   f'    MoeTracing(TRACE_POINT("step{i}", "E"));\n' for i in range(n))
    return _operator(root, {"demo_op.cpp": _flat_kernel(body)})


NESTED_FUNCTIONS = 40


def nesting(root: Path, depth: int) -> Path:
    functions = []
    for f in range(NESTED_FUNCTIONS):
        inner = (f"    for (uint32_t expertIdx = 0; expertIdx < 8; ++expertIdx) {{\n"
                 f"        AscendC::DataCopy(x, x, {f});\n    }}\n    AscendC::SyncAll();\n")
        functions.append(f"__aicore__ inline void Step{f}(GM_ADDR x)\n{{\n" + "#if 1\n" * depth + inner
                         + "#endif\n" * depth + "}\n")
    calls = "".join(f"    Step{f}(x);\n" for f in range(NESTED_FUNCTIONS))
    return _operator(root, {"demo_op.cpp": "".join(functions) + _flat_kernel(calls)})


def many_includes(root: Path, n: int) -> Path:
    files = {"common.h": "#pragma once\n#define COMMON_STEP 1\n"}
    for i in range(n):
        nxt = f'#include "inc/step_{i + 1}.h"\n' if i + 1 < n else ""
        files[f"inc/step_{i}.h"] = (
            f'#pragma once\n#include "../common.h"\n{nxt}'
            f"__aicore__ inline void Step{i}(GM_ADDR x)\n{{\n"
            f"    for (uint32_t tokenIdx = 0; tokenIdx < {i + 2}; ++tokenIdx) {{\n"
            f"        AscendC::DataCopy(x, x, COMMON_STEP);\n    }}\n}}\n")
    includes = "".join(f'#include "inc/step_{i}.h"\n' for i in range(n))
    files["demo_op.cpp"] = includes + _flat_kernel("".join(f"    Step{i}(x);\n" for i in range(n)))
    return _operator(root, files)


@dataclass(frozen=True)
class Case:
    name: str
    command: str  # plan | check
    build: Callable[[Path, int], Path]
    n: int  # the smaller size; the other is 2n
    unit: str


CASES = [
    Case("repeated header", "plan", repeated_header, 10, "copies of a 75 KB header"),
    Case("repeated instrumented header", "check", instrumented_header, 10,
         "copies of the 75 KB header, instrumented"),
    Case("distinct header", "plan", distinct_header, 10, "75 KB classes, all reached"),
    Case("unpaired points", "check", unpaired_points, 2000, "B points without E"),
    Case("pairs with exits", "check", pairs_with_exits, 2000, "B / E pairs, a return inside"),
    Case("nesting", "plan", nesting, 120, f"`#if` levels in each of {NESTED_FUNCTIONS} functions"),
    Case("many includes", "plan", many_includes, 250, "headers, chained"),
]


def timed(command: str, op: Path, source: Path | None = None, limit: float | None = None) -> float:
    """Seconds of the work; `limit` (a run cut short) when it runs past it."""
    env = {**os.environ, "PYTHONPATH": str(source)} if source is not None else None
    try:
        done = subprocess.run([sys.executable, "-c", TIMED, command, str(op)], capture_output=True, text=True,
                              check=True, env=env, timeout=limit)
    except subprocess.TimeoutExpired:
        assert limit is not None
        return limit
    return float(done.stdout.strip().splitlines()[-1])


def measure(case: Case, rounds: int, scale: float, work: Path, source: Path | None = None,
            limit: float | None = None) -> dict[str, object]:
    small = max(1, round(case.n * scale))
    sizes = (small, 2 * small)
    ops = [case.build(work / f"{case.name.replace(' ', '-')}-{n}", n) for n in sizes]
    size_bytes = [sum(p.stat().st_size for p in op.rglob("*") if p.is_file()) for op in ops]
    for op in ops:  # warm: page cache, bytecode
        timed(case.command, op, source, limit)
    times: list[list[float]] = [[], []]
    for r in range(rounds):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        for i in order:
            times[i].append(timed(case.command, ops[i], source, limit))
    medians = [statistics.median(t) for t in times]
    cut = limit is not None and any(t >= limit for t in medians)  # a lower bound only: no ratio
    ratio = medians[1] / medians[0]
    print(f"  {case.name}: {sizes[0]} -> {medians[0]:.2f} s, {sizes[1]} -> {medians[1]:.2f} s, "
          f"ratio {ratio:.2f}", file=sys.stderr, flush=True)
    return {"case": case.name, "command": case.command, "unit": case.unit, "sizes": sizes,
            "bytes": size_bytes, "seconds": medians, "all": times, "ratio": ratio,
            "met": ratio <= TARGET and not cut, "cut": cut}


def table(rows: list[dict[str, object]], rounds: int) -> str:
    lines = [f"| case | command | N | input at N / 2N | seconds at N / 2N (median of {rounds}) | 2N / N "
             f"| target <= {TARGET}x |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        sizes, size_bytes, seconds = row["sizes"], row["bytes"], row["seconds"]
        assert isinstance(sizes, tuple) and isinstance(size_bytes, list) and isinstance(seconds, list)
        shown = " / ".join(f"> {t:.0f}" if row["cut"] and t == max(seconds) else f"{t:.2f}" for t in seconds)
        ratio = "n/a (cut at the limit)" if row["cut"] else f"{row['ratio']:.2f}x"
        lines.append(f"| {row['case']} | `{row['command']}` | {sizes[0]:,} {row['unit']} | "
                     f"{size_bytes[0] / 1e6:.2f} / {size_bytes[1] / 1e6:.2f} MB | {shown} | {ratio} | "
                     f"{'met' if row['met'] else '**NOT met**'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cases", default=",".join(c.name.replace(" ", "-") for c in CASES))
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every N (0.1: a smoke run)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--source", type=Path, help="run optrace from this source tree (an exported older "
                    "commit, `git archive REV | tar -x -C DIR`) instead of the installed one")
    ap.add_argument("--limit", type=float, help="cut a run short after this many seconds (its time is "
                    "then the limit: a lower bound)")
    args = ap.parse_args(argv)
    wanted = set(args.cases.split(","))
    rows = []
    with tempfile.TemporaryDirectory(prefix="optrace-linear-") as tmp:
        for case in CASES:
            if case.name.replace(" ", "-") in wanted:
                rows.append(measure(case, args.rounds, args.scale, Path(tmp), args.source, args.limit))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows, args.rounds))
    return 0  # the table says which targets are met (bench/run.py collects it either way)


if __name__ == "__main__":
    sys.exit(main())
