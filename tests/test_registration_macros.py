"""Registrations written through a macro of the file (ops-nn's
`#define IMPL_OP_OPTILING_LEGACY(op_type, tiling, parse, info) IMPL_OP_OPTILING(op_type)
.Tiling(tiling).TilingParse<info>(parse)`, used as `IMPL_OP_OPTILING_LEGACY(Op, Fn, ...)`):
the macro is expanded with the use's arguments and read like a written chain, so the
registered tiling is found and edited as it is when written out (check used to say
"tiling not read" on pooling/max_pool_grad_grad_with_argmax)."""

# ruff: noqa: E501  (inline snippets are verbatim code)

from __future__ import annotations

import shutil
from pathlib import Path

from test_host_layers import cli, gates, snapshot

from optrace.codemods.op_host_registry import TILING, registrations
from optrace.pipeline.plan import plan_operator

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "umdk_style"
OP = "src/cam/comm_operator/ascend_kernels/moe_fused_gmm"
TILING_FILE = f"{OP}/op_host/moe_fused_gmm_tiling.cpp"
WRITTEN = """IMPL_OP_OPTILING(MoeFusedGmm)
    .Tiling(MoeFusedGmmTilingFunc)
    .TilingParse<MoeFusedGmmCompileInfo>(TilingParseForMoeFusedGmm);"""
THROUGH_MACRO = """#define IMPL_OP_OPTILING_LEGACY(op_type, tiling_func_name, tiling_parse_func_name, compile_info_type) \\
    IMPL_OP_OPTILING(op_type).Tiling(tiling_func_name).TilingParse<compile_info_type>(tiling_parse_func_name)

IMPL_OP_OPTILING_LEGACY(MoeFusedGmm, MoeFusedGmmTilingFunc, TilingParseForMoeFusedGmm,
                        MoeFusedGmmCompileInfo);"""


def _applied(tmp: Path, macro: bool) -> tuple[Path, bytes, bytes, dict[str, dict[str, object]]]:
    repo = tmp / ("macro" if macro else "written") / FIXTURE.name
    shutil.copytree(FIXTURE, repo)
    tiling = repo / TILING_FILE
    if macro:
        text = tiling.read_text()
        assert WRITTEN in text
        tiling.write_text(text.replace(WRITTEN, THROUGH_MACRO))
    before = snapshot(repo)
    original = tiling.read_bytes()
    code, _, err = cli("apply", str(repo / OP), "--write")
    assert code == 0, err
    edited = tiling.read_bytes()
    code, out, err = cli("check", str(repo / OP), "--no-compile")
    assert code == 0, out + err
    g = gates(repo / OP)
    code, _, err = cli("strip", str(repo / OP), "--write")
    assert code == 0, err
    assert snapshot(repo) == before
    return repo, original, edited, g


def test_a_tiling_registered_through_a_macro_is_edited_as_a_written_one(tmp_path: Path) -> None:
    _, written_before, written_after, _ = _applied(tmp_path, macro=False)
    _, macro_before, macro_after, g = _applied(tmp_path, macro=True)
    assert g["G2"]["status"] == "pass"
    assert written_after != written_before and macro_after != macro_before
    # the same lines added to the tiling function either way
    added = {ln for ln in written_after.splitlines() if b"// optrace" in ln}
    assert added and added == {ln for ln in macro_after.splitlines() if b"// optrace" in ln}


def test_the_macro_use_is_the_registration(tmp_path: Path) -> None:
    repo = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, repo)
    tiling = repo / TILING_FILE
    tiling.write_text(tiling.read_text().replace(WRITTEN, THROUGH_MACRO))
    regs = [r for r in registrations(plan_operator(repo / OP).analysis.layers) if r.role == TILING]
    assert [(r.function, r.path.name) for r in regs] == [("MoeFusedGmmTilingFunc", "moe_fused_gmm_tiling.cpp")]
    line = tiling.read_text().splitlines()[regs[0].line - 1]
    assert line.startswith("IMPL_OP_OPTILING_LEGACY(MoeFusedGmm,")
