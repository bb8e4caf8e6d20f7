"""The runtime block is versioned: apply upgrades an older block in place, and only it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli import app
from optrace.codemods.runtime_block import template
from optrace.pipeline.plan import plan_operator

runner = CliRunner()

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_older_block_is_upgraded_in_place(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "msopgen_style", tmp_path / "m")
    op = tmp_path / "m" / "moe_token_permute"
    runner = CliRunner()
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    base = op / "op_kernel" / "moe_token_permute_base.h"
    current = base.read_bytes()
    block = template()
    assert block in current
    # An "older optrace" left a v0 block with different content.
    old_block = block.replace(b"optrace-runtime-block v2", b"optrace-runtime-block v0", 1).replace(
        b"#define PROF_SIZE_PER_CORE 2048", b"#define PROF_SIZE_PER_CORE 1024")
    base.write_bytes(current.replace(block, old_block))
    res = runner.invoke(app, ["apply", str(op)])
    assert res.exit_code == 0
    assert "-// optrace-runtime-block v0" in res.stdout and "+// optrace-runtime-block v2" in res.stdout
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    assert base.read_bytes() == current  # exactly the current block, the rest untouched
    assert runner.invoke(app, ["apply", str(op), "--check"]).exit_code == 0


def test_the_block_is_included_before_the_first_point_not_after_a_trailing_include(tmp_path: Path) -> None:
    """A header that includes its variant's implementation at its end (code above it, the
    points in that code): the runtime block's include goes with the head includes,
    unconditionally (not into the `#if` around the last one), so every point compiles."""
    kernel = tmp_path / "norm_grad" / "op_kernel"
    kernel.mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    (kernel / "norm_grad.cpp").write_text(
        '#include "norm_grad.h"\n'
        'extern "C" __global__ __aicore__ void norm_grad(GM_ADDR x, GM_ADDR y, GM_ADDR workspace,\n'
        "                                                GM_ADDR tiling)\n"
        "{\n    NormGrad op;\n    op.Init(x, y, workspace);\n    op.Process();\n}\n")
    loop_body = "".join(f"            Step{i}(c);\n" for i in range(4))
    steps = "".join(f"    __aicore__ inline void Step{i}(int c)\n    {{\n" + "        acc += c;\n" * 9
                    + "    }\n" for i in range(4))
    (kernel / "norm_grad.h").write_text(
        "/* licence\n   #include \"not_an_include.h\" */\n#ifndef NORM_GRAD_H\n#define NORM_GRAD_H\n"
        '#include "kernel_operator.h"\n#if defined(HAS_TILING)\n#include "norm_grad_tiling.h"\n#endif\n'
        "class NormGrad {\npublic:\n"
        "    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR workspace) {}\n"
        "    __aicore__ inline void Process()\n    {\n"
        "        for (int groupIdx = 0; groupIdx < n; ++groupIdx) {\n"
        + loop_body + "        }\n    }\n" + steps + "    int acc = 0;\n    int n = 4;\n};\n"
        '#if defined(BF16)\n#include "norm_grad_bf16.h"\n#endif\n#endif\n')
    before = (kernel / "norm_grad.h").read_bytes()
    assert runner.invoke(app, ["apply", str(tmp_path / "norm_grad"), "--write"]).exit_code == 0
    text = (kernel / "norm_grad.h").read_text()
    include = text.index('#include "norm_grad_base.h"  // optrace\n')
    assert text.index("MoeTracing(") > include
    assert text[:include].endswith('#include "kernel_operator.h"\n')
    res = runner.invoke(app, ["check", str(tmp_path / "norm_grad"), "--format", "json"])
    assert "OT420" not in res.stdout and '"compile_checked_files": 0' not in res.stdout
    assert runner.invoke(app, ["strip", str(tmp_path / "norm_grad"), "--write"]).exit_code == 0
    assert (kernel / "norm_grad.h").read_bytes() == before


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".optrace" not in p.parts}


@pytest.mark.parametrize(("declaration", "mix", "slots"), [
    ("KERNEL_TYPE_AIV_ONLY", "OPTRACE_CORES_AIV_ONLY", "(OPTRACE_MAX_AIV_CORES)"),
    ("KERNEL_TYPE_AIC_ONLY", "OPTRACE_CORES_AIC_ONLY", "(OPTRACE_MAX_AIC_CORES)"),
    ("KERNEL_TYPE_MIX_AIC_1_2", "OPTRACE_CORES_MIXED", "(OPTRACE_MAX_AIC_CORES + OPTRACE_MAX_AIV_CORES)"),
    (None, "OPTRACE_CORES_MIXED", "(OPTRACE_MAX_AIC_CORES + OPTRACE_MAX_AIV_CORES)"),
])
def test_the_declared_core_mix_sizes_and_lays_out_the_buffer(tmp_path: Path, declaration: str | None,
                                                           mix: str, slots: str) -> None:
    """KERNEL_TASK_TYPE decides the buffer: a single-type kernel's scaffold passes its mix
    to the write-back and its sizes header counts that type's slots only; a mixed kernel,
    or one declaring nothing (its core type would be a guess), keeps both. Strip takes
    every byte back."""
    root = tmp_path / "repo"
    shutil.copytree(FIXTURES / "direct_launch", root)
    op = root / "csrc" / "ops" / "moe_gating_topk"
    entry = op / "op_kernel" / "moe_gating_topk.cpp"
    line = "    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);\n"
    assert line in entry.read_text()
    entry.write_text(entry.read_text().replace(
        line, f"    KERNEL_TASK_TYPE_DEFAULT({declaration});\n" if declaration else ""))
    if declaration in ("KERNEL_TYPE_AIV_ONLY", "KERNEL_TYPE_AIC_ONLY"):
        # a single-type kernel plans labels for its own core type only
        plan = plan_operator(op)
        core = declaration.split("_")[2]
        assert set(plan.per_core) == {core} and [e.core for e in plan.capacity] == [core]
    before = _snapshot(root)
    res = runner.invoke(app, ["apply", str(op), "--write"])
    assert res.exit_code == 0, res.output
    text = entry.read_text()
    assert f"profiling_data, moeProfPtr, {mix});" in text
    header = op / "op_host" / "optrace_moe_gating_topk_profiling.h"
    assert f"#define OPTRACE_PROFILING_SLOTS {slots}\n" in header.read_text()
    numel = {"(OPTRACE_MAX_AIV_CORES)": "64 * 2048", "(OPTRACE_MAX_AIC_CORES)": "32 * 2048"}.get(
        slots, "(32 + 64) * 2048")
    fakes = (root / "python" / "fused_ops" / "abstract_impls.py").read_text()
    assert f"_OPTRACE_PROFILING_NUMEL = {numel}  # optrace" in fakes  # the Python fake agrees
    check = runner.invoke(app, ["check", str(op), "--format", "json"])
    # the scaffold compiles against the block (libclang, on the files it checked)
    assert "OT420" not in check.stdout and '"compile_checked_files": 0' not in check.stdout
    assert runner.invoke(app, ["strip", str(op), "--write"]).exit_code == 0
    assert _snapshot(root) == before


# The scaffold optrace v1 wrote (runtime block v1): the pointer set whatever the output,
# no core mix passed.
V1_SCAFFOLD = """\
// optrace-scaffold begin mode=B
#if ENABLE_MOE_PROFILING
    int64_t moeProfBuf[PROF_SIZE_PER_CORE];
    moeProfBuf[0] = 1;
    moeProfBuf[PROF_SIZE_PER_CORE - 1] = static_cast<int64_t>(AscendC::GetSystemCycle());
    SetMoeProfilePtr(moeProfBuf);
    MoeTracingFingerprint();
    MoeTracing(TRACE_POINT("processing", "B"));
    OptraceEntryEnd optraceEntryEnd(TRACE_POINT("processing", "E"), profiling_data, moeProfBuf);
#else
    (void)profiling_data;
#endif
// optrace-scaffold end
"""


def test_an_older_scaffold_is_upgraded_in_place(tmp_path: Path) -> None:
    """Re-applying an operator instrumented by an older optrace replaces its scaffold with
    the current one (the runtime switch, the core mix), and strip still takes it all back."""
    root = tmp_path / "repo"
    shutil.copytree(FIXTURES / "direct_launch", root)
    op = root / "csrc" / "ops" / "moe_gating_topk"
    before = _snapshot(root)
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    entry = op / "op_kernel" / "moe_gating_topk.cpp"
    current = entry.read_text()
    begin = current.index("// optrace-scaffold begin")
    end = current.index("// optrace-scaffold end\n") + len("// optrace-scaffold end\n")
    entry.write_text(current[:begin] + V1_SCAFFOLD + current[end:])
    res = runner.invoke(app, ["apply", str(op)])
    assert res.exit_code == 0, res.output
    assert "+    int64_t* moeProfPtr = OptraceEntryBegin(profiling_data, moeProfBuf);" in res.stdout
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    assert entry.read_text() == current  # exactly the current scaffold, the rest untouched
    assert runner.invoke(app, ["apply", str(op), "--check"]).exit_code == 0
    entry.write_text(current[:begin] + V1_SCAFFOLD + current[end:])
    assert runner.invoke(app, ["strip", str(op), "--write"]).exit_code == 0
    assert _snapshot(root) == before  # an old scaffold is stripped as well
