"""The runtime block is versioned: apply upgrades an older block in place, and only it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.codemods.runtime_block import runtime_header_content, template
from optrace.pipeline.plan import plan_operator

runner = CliRunner()

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_an_older_runtime_header_is_rewritten_whole(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "msopgen_style", tmp_path / "m")
    op = tmp_path / "m" / "moe_token_permute"
    runner = CliRunner()
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    header = op / "op_kernel" / "optrace_runtime.h"
    current = header.read_bytes()
    assert current == runtime_header_content()
    # An "older optrace" wrote a v0 header with different content.
    header.write_bytes(current.replace(b"optrace-runtime-block v3", b"optrace-runtime-block v0", 1).replace(
        b"#define PROF_SIZE_PER_CORE 2048", b"#define PROF_SIZE_PER_CORE 1024"))
    res = runner.invoke(app, ["apply", str(op)])
    assert res.exit_code == 0
    assert "-// optrace-runtime-block v0" in res.stdout and "+// optrace-runtime-block v3" in res.stdout
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    assert header.read_bytes() == current
    assert runner.invoke(app, ["apply", str(op), "--check"]).exit_code == 0


def test_a_pasted_block_of_an_older_optrace_becomes_the_include(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "msopgen_style", tmp_path / "m")
    op = tmp_path / "m" / "moe_token_permute"
    base = op / "op_kernel" / "moe_token_permute_base.h"
    before = base.read_bytes()
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    applied = base.read_bytes()
    include = b'#include "optrace_runtime.h"  // optrace\n'
    assert include in applied
    old_block = template().replace(b"optrace-runtime-block v3", b"optrace-runtime-block v2", 1)
    base.write_bytes(applied.replace(include, old_block))
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    assert base.read_bytes() == applied
    assert runner.invoke(app, ["strip", str(op), "--write"]).exit_code == 0
    assert base.read_bytes() == before


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
    include = text.index('#include "optrace_runtime.h"  // optrace\n')
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


# Where the kernel declares nothing, its build says (engine/core_config.py): the compiled
# kernels' metadata beside their binaries, else the OpDef's coreType config.
AIVEC = "RT_DEV_BINARY_MAGIC_ELF_AIVEC"


def _metadata(name: str, **fields: object) -> str:
    return json.dumps({"binFileName": name, "binFileSuffix": ".o", "blockDim": -1,
                       "kernelName": name + "_1a2b3c", **fields})


TOKEN_OP = "moe_token_permute"
BUILT = f"{TOKEN_OP}/build_out/op_kernel/binary/ascend910b/{TOKEN_OP}"


@pytest.mark.parametrize(("files", "mix", "source"), [
    ({f"{BUILT}/MoeTokenPermute_fp16.json": _metadata("MoeTokenPermute_fp16",
                                                      magic=AIVEC,
                                                      coreType="VectorCore")},
     "OPTRACE_CORES_AIV_ONLY", "binary metadata"),
    ({f"{BUILT}/MoeTokenPermute_fp16.json": _metadata("MoeTokenPermute_fp16",
                                                      magic="RT_DEV_BINARY_MAGIC_ELF_AICUBE")},
     "OPTRACE_CORES_AIC_ONLY", "binary metadata"),
    # a mixed launch: declared mixed, not a guess (the code has no core-type test)
    ({f"{BUILT}/MoeTokenPermute_fp16.json": _metadata("MoeTokenPermute_fp16", magic="RT_DEV_BINARY_MAGIC_ELF",
                                                      coreType="MIX", taskRation="1:2", intercoreSync=1)},
     "OPTRACE_CORES_MIXED", "binary metadata"),
    # two binaries of one op, both vector-only; another op's binary beside them is not read
    ({f"{BUILT}/MoeTokenPermute_fp16.json": _metadata("MoeTokenPermute_fp16", magic=AIVEC),
      f"{BUILT}/MoeTokenPermute_bf16.json": _metadata("MoeTokenPermute_bf16", magic=AIVEC),
      f"{BUILT}/../other/GroupedMatmul_fp16.json": _metadata("GroupedMatmul_fp16",
                                                             magic="RT_DEV_BINARY_MAGIC_ELF")},
     "OPTRACE_CORES_AIV_ONLY", "binary metadata"),
    # one binary that does not say (a plain AI Core binary): no decision, laid out mixed
    ({f"{BUILT}/MoeTokenPermute_fp16.json": _metadata("MoeTokenPermute_fp16", magic=AIVEC),
      f"{BUILT}/MoeTokenPermute_fp32.json": _metadata("MoeTokenPermute_fp32", magic="RT_DEV_BINARY_MAGIC_ELF",
                                                      coreType="AiCore")},
     "OPTRACE_CORES_MIXED", None),
    # the OpDef: every config VectorCore
    ({"op_host_vector": "VectorCore VectorCore"}, "OPTRACE_CORES_AIV_ONLY", "op_host config"),
    # one config that may start either kind: no decision
    ({"op_host_vector": "VectorCore AiCore"}, "OPTRACE_CORES_MIXED", None),
])
def test_the_build_declares_the_core_mix_when_the_kernel_does_not(
        tmp_path: Path, files: dict[str, str], mix: str, source: str | None) -> None:
    root = tmp_path / "m"
    shutil.copytree(FIXTURES / "msopgen_style", root)
    op = root / TOKEN_OP
    entry = op / "op_kernel" / f"{TOKEN_OP}.cpp"
    entry.write_text(entry.read_text().replace("    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);\n", ""))
    for rel, text in files.items():
        if rel == "op_host_vector":
            op_def = op / "op_host" / f"{TOKEN_OP}_def.cpp"
            first, second = text.split()
            op_def.write_text(op_def.read_text().replace(
                '        this->AICore().AddConfig("ascend910b");\n'
                '        this->AICore().AddConfig("ascend310p");\n',
                "        OpAICoreConfig a2;\n"
                f'        a2.DynamicCompileStaticFlag(true).ExtendCfgInfo("coreType.value", "{first}");\n'
                '        this->AICore().AddConfig("ascend910b", a2);\n'
                "        OpAICoreConfig p3;\n"
                f'        p3.ExtendCfgInfo("coreType.value", "{second}");\n'
                '        this->AICore().AddConfig("ascend310p", p3);\n'))
            continue
        path = (root / rel).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    plan = plan_operator(op)
    declared = plan.analysis.core_declaration
    assert (declared.source if declared else None) == source
    cores = {"OPTRACE_CORES_AIV_ONLY": {"AIV"}, "OPTRACE_CORES_AIC_ONLY": {"AIC"}}.get(mix, {"AIC", "AIV"})
    if source is not None:
        assert set(plan.analysis.kernel_cores) == cores
        shown = runner.invoke(app, ["plan", str(op)]).stdout
        assert f"declared by the {source}" in shown, shown
    before = _snapshot(root)
    res = runner.invoke(app, ["apply", str(op), "--write"])
    assert res.exit_code == 0, res.output
    assert f"profiling_data, moeProfPtr, {mix});" in entry.read_text()
    # the point map records the mix, so save / collect lay the buffer out by it
    res = runner.invoke(app, ["preprocess", str(op / "op_kernel"), "--out", str(tmp_path / "map")])
    assert res.exit_code == 0, res.output
    recorded = json.loads((tmp_path / "map" / "point_map.json").read_text()).get("cores")
    assert recorded == sorted(cores)
    assert runner.invoke(app, ["strip", str(op), "--write"]).exit_code == 0
    assert _snapshot(root) == before


def test_a_kernel_declaration_wins_over_its_build_output(tmp_path: Path) -> None:
    """The build output may be stale; the kernel's own KERNEL_TASK_TYPE is what the next
    build compiles."""
    root = tmp_path / "m"
    shutil.copytree(FIXTURES / "msopgen_style", root)
    meta = root / BUILT / "MoeTokenPermute_fp16.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(_metadata("MoeTokenPermute_fp16", magic="RT_DEV_BINARY_MAGIC_ELF", coreType="MIX",
                              taskRation="1:2"))
    declared = plan_operator(root / TOKEN_OP).analysis.core_declaration
    assert declared is not None and declared.source == "kernel" and declared.cores == {"AIV"}


def test_metadata_linked_from_outside_the_operator_is_not_read(tmp_path: Path) -> None:
    root = tmp_path / "m"
    shutil.copytree(FIXTURES / "msopgen_style", root)
    entry = root / TOKEN_OP / "op_kernel" / f"{TOKEN_OP}.cpp"
    entry.write_text(entry.read_text().replace("    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);\n", ""))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "MoeTokenPermute_fp16.json").write_text(
        _metadata("MoeTokenPermute_fp16", magic=AIVEC))
    built = root / BUILT
    built.parent.mkdir(parents=True)
    built.symlink_to(outside, target_is_directory=True)  # a linked directory
    linked = root / TOKEN_OP / "MoeTokenPermute_x.json"  # a linked file
    linked.symlink_to(outside / "MoeTokenPermute_fp16.json")
    assert plan_operator(root / TOKEN_OP).analysis.core_declaration is None


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


ARMS_KERNEL = """\
#if defined(__CCE_AICORE__) && __CCE_AICORE__ < 220
#include "arms_op_v1.h"
#else
#include "kernel_operator.h"

__aicore__ inline void CopyTiles(GM_ADDR x, uint32_t n)
{
    for (uint32_t i = 0; i < n; ++i) {
        AscendC::DataCopy(x, x, i);
    }
}
#endif

extern "C" __global__ __aicore__ void arms_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)
{
#if defined(__CCE_AICORE__) && __CCE_AICORE__ < 220
    CopyTilesV1(x, 8U);
#else
    CopyTiles(x, 8U);
    AscendC::SyncAll();
#endif
}
"""

ARMS_V1 = """\
#pragma once
#include "kernel_operator.h"

__aicore__ inline void CopyTilesV1(GM_ADDR x, uint32_t n)
{
    for (uint32_t i = 0; i < n; ++i) {
        AscendC::DataCopy(x, x, i);
    }
    AscendC::SyncAll();
}
"""


def test_an_include_only_an_arm_can_hold_counts_on_the_second_apply(tmp_path: Path) -> None:
    """Every include of the kernel in `#if` / `#else` arms whose `#endif` comes after code
    (helper functions): the runtime's include goes after the last one, inside its arm.
    A second apply once took it for missing (not outside every `#if`) and wrote it again."""
    kernel_dir = tmp_path / "arms_op" / "op_kernel"
    kernel_dir.mkdir(parents=True)
    (kernel_dir / "arms_op.cpp").write_text(ARMS_KERNEL)
    (kernel_dir / "arms_op_v1.h").write_text(ARMS_V1)
    (tmp_path / "optrace.toml").write_text("")
    op = kernel_dir.parent
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    text = (kernel_dir / "arms_op.cpp").read_text()
    assert text.count('#include "optrace_runtime.h"') == 1
    assert text.index('#include "optrace_runtime.h"') < text.index("__aicore__ inline void CopyTiles")
    again = runner.invoke(app, ["apply", str(op), "--check"])
    assert again.exit_code == 0, again.stdout
    check = runner.invoke(app, ["check", str(op), "--no-compile", "--no-cache"])
    assert check.exit_code == 0, check.stdout + check.stderr
