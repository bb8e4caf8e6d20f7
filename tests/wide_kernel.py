"""A generated kernel larger and deeper than the fixtures, with names longer than any box:
for the tests of the call graph page (`plan --graph x.html`).

A class with long-named stages, each a tree of helpers several levels deep; helpers of
one stage call helpers of another (calls that are not tree edges); AIC and AIV bodies
meet at a cross-core flag; phase loops and barriers give the planner something to trace.
"""

from __future__ import annotations

from pathlib import Path

SCOPE = "GroupedMatmulSlicePerTokenDequantSwigluQuantMultiStageWorkspaceKernel"


def _helper(stage: int, path: tuple[int, ...]) -> str:
    return f"Stage{stage}ComputeTileOfTheExpertGroupWithAVeryLongDescriptiveName_" + "_".join(map(str, path))


def write_wide_kernel(root: Path, stages: int = 6, fanout: int = 3, depth: int = 4) -> Path:
    """An operator directory under ``root``: ``stages`` stages of ``fanout``-wide,
    ``depth``-deep helper trees (stages * (fanout ** depth - 1) / (fanout - 1) helpers)."""
    op = root / "wide_graph_op"
    kernel = op / "op_kernel"
    kernel.mkdir(parents=True)
    methods: list[str] = []
    decls: list[str] = []

    def tree(stage: int, path: tuple[int, ...]) -> None:
        name = _helper(stage, path)
        decls.append(f"    __aicore__ inline void {name}();")
        body = ["    AscendC::PipeBarrier<PIPE_V>();"]
        if len(path) < depth - 1:
            for k in range(fanout):
                body.append(f"    {_helper(stage, (*path, k))}();")
                tree(stage, (*path, k))
        elif stage > 0:  # a leaf calls into the stage before: an edge off the tree
            body.append(f"    {_helper(stage - 1, (0,) * len(path))}();")
        methods.append(f"__aicore__ inline void {SCOPE}::{name}() {{\n" + "\n".join(body) + "\n}\n")

    stage_calls = []
    for s in range(stages):
        tree(s, (0,))
        core = "AIC" if s % 2 == 0 else "AIV"
        step = f"Stage{s}ProcessEveryExpertGroupOfThisRankBeforeTheNextStageBegins"
        decls.append(f"    __aicore__ inline void {step}();")
        methods.append(
            f"__aicore__ inline void {SCOPE}::{step}() {{\n"
            f"    for (uint32_t groupIdx = 0; groupIdx < groupNum_; ++groupIdx) {{\n"
            f"        {_helper(s, (0,))}();\n"
            "    }\n    AscendC::SyncAll<true>();\n}\n")
        flag_wait = (f"AscendC::CrossCoreWaitFlag({s});" if core == "AIC"
                     else f"AscendC::CrossCoreSetFlag<0x2, PIPE_MTE3>({s});")
        stage_calls.append(f"    if ASCEND_IS_{core} {{\n        {step}();\n        {flag_wait}\n    }}")
    header = (
        "#pragma once\n#include \"kernel_operator.h\"\n\n"
        f"class {SCOPE} {{\npublic:\n    __aicore__ inline void Process();\n"
        + "\n".join(decls) + "\n    uint32_t groupNum_ = 4;\n};\n\n"
        + "\n".join(methods)
        + f"\n__aicore__ inline void {SCOPE}::Process() {{\n" + "\n".join(stage_calls) + "\n}\n"
    )
    (kernel / "wide_graph_op.h").write_text(header)
    (kernel / "wide_graph_op.cpp").write_text(
        '#include "wide_graph_op.h"\n\n'
        'extern "C" __global__ __aicore__ void wide_graph_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace) {\n'
        "    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);\n"
        f"    {SCOPE} op;\n    op.Process();\n}}\n")
    return op
