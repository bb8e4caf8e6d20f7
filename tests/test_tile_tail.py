"""A function a tile loop runs gets no point inside, even where it is called again after
the loop (fixtures/tile_tail: `for (...) SubProcess(i, full); SubProcess(last, tail);`, as
ops-nn's rms_norm and inplace_apply_adagrad_v2 do). Planned from the tail call, its steps
used to get regions in their own bodies, which the loop then ran once per tile: the
records grew with the data and overflowed the per-core slot. And a loop that is a phase
only by what it holds is not a second level of per-iteration points inside a phase loop
(ops-nn's deformable_conv2d: slides x output columns x groups records)."""

from __future__ import annotations

import shutil
from pathlib import Path

from test_host_layers import cli, snapshot

from optrace.engine.model import Region
from optrace.pipeline.plan import plan_operator

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OP = FIXTURES / "tile_tail" / "norm" / "moe_row_norm"
KERNEL = OP / "op_kernel" / "moe_row_norm.cpp"


# The functions the row-tile loop runs, directly or through SubProcess.
PER_TILE = ("SubProcess", "CopyIn", "ComputeRstd", "ComputeScale", "CopyOut")


def _function_lines(name: str, text: str | None = None) -> range:
    """The lines (1-based) of a member function's definition in the kernel's text, its
    signature to its closing brace."""
    lines = (KERNEL.read_text() if text is None else text).splitlines()
    start = next(i for i, line in enumerate(lines, 1) if f"inline void {name}(" in line)
    end = next(i for i, line in enumerate(lines, 1) if i > start and line == "    }")
    return range(start, end + 1)


def _all(region: Region) -> list[Region]:
    return [region, *(r for child in region.children for r in _all(child))]


def test_no_region_in_what_the_tile_loop_runs() -> None:
    plan = plan_operator(OP)
    per_tile = [_function_lines(n) for n in PER_TILE]
    stack = [plan.root]
    tail = None
    while stack:
        region = stack.pop()
        stack += region.children
        anchor = region.anchor
        assert anchor is not None
        assert not any(anchor.line in lines for lines in per_tile), (region.label, anchor.line)
        if anchor.line == 42:
            tail = region
    assert tail is not None and not tail.children
    parts = [r for r in _all(plan.root) if r.label == "reduce-scales expert sum-part"]
    assert len(parts) == 1 and parts[0].anchor is not None and not parts[0].anchor.inside, parts
    assert parts[0].index_var is None
    assert any(loop.classification == "tile" and loop.var == "part"
               and "inside the phase loop over `expertIdx`" in loop.reason
               for loop in plan.loops), plan.loops
    assert any("also runs in the tile loop over `tileIdx` of KernelRowNorm::Process (moe_row_norm.cpp:39)"
               in note for note in tail.notes), tail.notes


def test_applied_the_functions_the_loop_runs_are_unchanged(tmp_path: Path) -> None:
    repo = tmp_path / "tile_tail"
    shutil.copytree(FIXTURES / "tile_tail", repo)
    before = snapshot(repo)
    assert cli("apply", str(repo / "norm/moe_row_norm"), "--write")[0] == 0
    text = (repo / "norm/moe_row_norm/op_kernel/moe_row_norm.cpp").read_text()
    lines = text.splitlines()
    for name in PER_TILE:
        span = _function_lines(name, text)
        assert not any("optrace" in lines[i - 1] for i in span), name
    assert cli("strip", str(repo / "norm/moe_row_norm"), "--write")[0] == 0
    assert snapshot(repo) == before


def test_the_same_through_a_macro_that_runs_the_class(tmp_path: Path) -> None:
    """The entry runs the class through a macro (`INVOKE_ROW_NORM(Kernel, DTYPE_X);`, as ops-nn's
    rms_norm does with `GENERAL_OP_IMPL`): the call graph learns those calls only as the
    walk expands the macro, so what a tile loop runs is read from the code itself."""
    repo = tmp_path / "tile_tail"
    shutil.copytree(FIXTURES / "tile_tail", repo)
    kernel = repo / "norm/moe_row_norm/op_kernel/moe_row_norm.cpp"
    text = kernel.read_text()
    direct = ("    MoeRowNormImpl::KernelRowNorm<DTYPE_X> op;\n    op.Init(x, y, scale, &tilingData);\n"
              "    op.Process();\n")
    assert direct in text
    macro = ("#define INVOKE_ROW_NORM(Class, type)                         \\\n"
             "    do {                                                     \\\n"
             "        Class<type> op;                                      \\\n"
             "        op.Init(x, y, scale, &tilingData);                   \\\n"
             "        op.Process();                                        \\\n"
             "    } while (0)\n\n")
    # A class run directly first: the walk asks what tile loops run before it meets the macro.
    clear = ("namespace MoeRowNormImpl {\nclass ScaleClear {\npublic:\n"
             "    __aicore__ inline void Init(GM_ADDR scale)\n"
             "    {\n        scaleGm_.SetGlobalBuffer((__gm__ float *)scale);\n    }\n"
             "    __aicore__ inline void Process()\n    {\n"
             "        for (uint32_t expertIdx = 0; expertIdx < 8; ++expertIdx) {\n"
             "            scaleGm_.SetValue(expertIdx, 0.0f);\n            AscendC::PipeBarrier<PIPE_S>();\n"
             "            scaleGm_.SetValue(expertIdx + 8, 0.0f);\n        }\n"
             "        AscendC::SyncAll();\n    }\n\n"
             "private:\n    AscendC::GlobalTensor<float> scaleGm_;\n};\n}  // namespace MoeRowNormImpl\n\n")
    run = ("    MoeRowNormImpl::ScaleClear clear;\n    clear.Init(scale);\n    clear.Process();\n"
           "    INVOKE_ROW_NORM(MoeRowNormImpl::KernelRowNorm, DTYPE_X);\n")
    text = text.replace('extern "C"', clear + macro + 'extern "C"', 1).replace(direct, run)
    kernel.write_text(text)
    plan = plan_operator(repo / "norm/moe_row_norm")
    per_tile = [_function_lines(name, text) for name in PER_TILE]
    labels = [r.label for r in _all(plan.root)]
    assert "sub" in labels and "sub-tile" in labels, labels
    for region in _all(plan.root):
        assert region.anchor is not None
        assert not any(region.anchor.line in span for span in per_tile), (region.label, region.anchor.line)
