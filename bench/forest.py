"""Generate a forest of synthetic AscendC operator trees for benchmarks.

Each operator looks like a UMDK-style 1C2V MoE operator: an entry .cpp, a kernel class
header, and gemm/ epilogue/ raw_distributed/ subtrees of headers with classes,
`operator()<AscendC::AIC/AIV>` specialisations, phase loops, tile loops, syncs and role
branches. Deterministic for a given seed.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

SUBDIRS = ("gemm/kernel", "gemm/block", "epilogue/block", "epilogue/tile", "raw_distributed")


def _helper(rng: random.Random, name: str, n_stmts: int) -> str:
    lines = [f"__aicore__ inline void {name}(GM_ADDR dst, GM_ADDR src, uint32_t len)", "{"]
    lines.append("    AscendC::LocalTensor<float> buf = queue_.AllocTensor<float>();")
    lines.append("    for (uint32_t tileIdx = 0; tileIdx < len; ++tileIdx) {")
    for i in range(n_stmts):
        op = rng.choice(["Add", "Mul", "Muls", "Exp", "Cast", "DataCopy"])
        lines.append(f"        AscendC::{op}(buf[{i}], buf[{i + 1}], tileLen_);  // step {i}")
    lines.append("    }")
    lines.append("    queue_.FreeTensor(buf);")
    lines.append("}")
    return "\n".join(lines)


def _header(rng: random.Random, op: str, idx: int, sub: str, callees: list[str]) -> tuple[str, str]:
    cls = f"{op.title().replace('_', '')}Part{idx}"
    helpers = [f"Compute{idx}x{k}" for k in range(6)]
    body: list[str] = [f"#ifndef {op.upper()}_PART{idx}_H", f"#define {op.upper()}_PART{idx}_H",
                       '#include "kernel_operator.h"', ""]
    for c in callees:
        body.append(f'#include "{c}"')
    body.append(f"namespace {op.title().replace('_', '')}Impl {{")
    body.append(f"class {cls} {{")
    body.append("public:")
    for h in helpers:
        body.append(_helper(rng, h, rng.randint(15, 40)).replace("\n", "\n    "))
    body.append("    template <int32_t CORE_TYPE = g_coreType>")
    body.append("    __aicore__ inline void operator()(GM_ADDR x);")
    for core in ("AIC", "AIV"):
        body.append("    template <>")
        body.append(f"    __aicore__ inline void operator()<AscendC::{core}>(GM_ADDR x)")
        body.append("    {")
        body.append("        for (uint32_t groupIdx = 0; groupIdx < groupNum_; ++groupIdx) {")
        body.append("            Arch::CrossCoreWaitFlag(flag_);")
        for h in rng.sample(helpers, 3):
            body.append(f"            {h}(x, x, 16);")
        body.append("        }")
        if core == "AIV":
            body.append("        if (isSendCore_) {")
            body.append(f"            SendTokens{idx}(x);")
            body.append("        } else {")
            body.append(f"            RecvTokens{idx}(x);")
            body.append("        }")
        body.append("        SyncAll();")
        body.append("    }")
    for kind in ("Send", "Recv"):
        body.append(f"    __aicore__ inline void {kind}Tokens{idx}(GM_ADDR x)")
        body.append("    {")
        body.append("        for (uint32_t tokenIdx = 0; tokenIdx < tokenNum_; ++tokenIdx) {")
        body.append(f"            {helpers[0]}(x, x, 8);")
        body.append("        }")
        body.append("        SyncAll();")
        body.append("    }")
    body.append("private:")
    body.append("    uint32_t groupNum_{0}, tokenNum_{0}; bool isSendCore_{false};")
    body.append("};")
    body.append("}")
    body.append("#endif")
    return f"{sub}/part_{idx}.h", "\n".join(body) + "\n"


def write_operator(root: Path, op: str, rng: random.Random, headers: int = 16) -> int:
    """Write one operator directory; returns its number of lines.

    The kernel header includes the first part; each part includes the next, so the
    include tree is a chain `headers` deep across the subdirectories.
    """
    kernel = root / op / "op_kernel"
    rels = [f"{op}/{SUBDIRS[i % len(SUBDIRS)]}/part_{i}.h" for i in range(headers)]
    files: list[tuple[str, str]] = []
    for i, rel in enumerate(rels):
        nxt = [os.path.relpath(rels[i + 1], os.path.dirname(rel))] if i + 1 < headers else []
        _, text = _header(rng, op, i, SUBDIRS[i % len(SUBDIRS)], nxt)
        files.append((rel, text))
    cls = op.title().replace("_", "")
    main = [f"#ifndef {op.upper()}_H", f"#define {op.upper()}_H", f'#include "{rels[0]}"']
    main += [f"class {cls} {{", "public:", "    __aicore__ inline void Init(GM_ADDR x) { x_ = x; }",
             "    __aicore__ inline void Process()", "    {"]
    for i in range(headers):
        main.append(f"        {cls}Impl::{cls}Part{i} part{i};")
        main.append(f"        part{i}(x_);")
        main.append("        AscendC::PipeBarrier<PIPE_ALL>();")
    main += ["    }", "private:", "    GM_ADDR x_;", "};", "#endif"]
    entry = [f'#include "{op}.h"',
             f'extern "C" __global__ __aicore__ void {op}(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
             "GM_ADDR tiling)",
             "{", "    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);", f"    {cls} op;",
             "    op.Init(x);", "    op.Process();", "}"]
    total = 0
    for rel, text in [*files, (f"{op}.h", "\n".join(main) + "\n"), (f"{op}.cpp", "\n".join(entry) + "\n")]:
        path = kernel / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        total += text.count("\n")
    return total


def write_forest(root: Path, operators: int, seed: int = 7) -> tuple[list[Path], int]:
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    (root / "optrace.toml").write_text("# benchmark forest\n")
    ops: list[Path] = []
    lines = 0
    for i in range(operators):
        name = f"moe_op_{i:04d}"
        lines += write_operator(root, name, rng)
        ops.append(root / name)
    return ops, lines
