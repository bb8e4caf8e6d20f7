"""Tiling codemod: where tiling describes outputs, profiling_data at the same index."""

# ruff: noqa: E501  (inline before / after snippets are verbatim code)

from __future__ import annotations

from pathlib import Path

from layer_snippets import make_repo, run

from optrace.codemods.tiling import tiling_edits

TILING = "ops/demo_op/op_host/demo_op_tiling.cpp"
OPDEF = ("ops/demo_op/op_host/demo_op_def.cpp",
         'class DemoOp : public OpDef {\n    DemoOp(const char *n) : OpDef(n) {\n'
         '        this->Output("y").DataType({DT_FLOAT});\n    }\n};\n')

BEFORE = """\
namespace optiling {
static ge::graphStatus DemoOpTilingFunc(gert::TilingContext *context)
{
    if (context->GetOutputDesc(0) == nullptr) {
        return ge::GRAPH_PARAM_INVALID;
    }
    context->SetBlockDim(8);
    return ge::GRAPH_SUCCESS;
}
}  // namespace optiling
"""

AFTER = """\
namespace optiling {
static ge::graphStatus DemoOpTilingFunc(gert::TilingContext *context)
{
    if (context->GetOutputDesc(0) == nullptr) {
        return ge::GRAPH_PARAM_INVALID;
    }
    context->SetBlockDim(8);
    constexpr uint32_t optraceProfilingDataIndex = 1;  // optrace
    const gert::CompileTimeTensorDesc *optraceDesc = context->GetOutputDesc(optraceProfilingDataIndex);  // optrace
    if (optraceDesc != nullptr && optraceDesc->GetDataType() != ge::DT_INT64) {  // optrace
        return ge::GRAPH_FAILED;  // optrace
    }  // optrace
    return ge::GRAPH_SUCCESS;
}
}  // namespace optiling
"""


def test_tiling_that_reads_outputs_describes_profiling_data_too(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {TILING: BEFORE, OPDEF[0]: OPDEF[1]})
    assert run(tiling_edits, op) == {TILING: AFTER}


def test_tiling_that_never_looks_at_outputs_is_left_alone(tmp_path: Path) -> None:
    text = BEFORE.replace("context->GetOutputDesc(0) == nullptr", "context->GetInputDesc(0) == nullptr")
    op = make_repo(tmp_path, {TILING: text, OPDEF[0]: OPDEF[1]})
    assert run(tiling_edits, op) == {}


def test_without_an_opdef_nothing_positions_the_output(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {TILING: BEFORE})
    assert run(tiling_edits, op) == {}


def test_a_tiling_registered_from_a_library_is_wrapped_where_it_is_registered(tmp_path: Path) -> None:
    text = ('#include "conv_tiling_lib.h"\nnamespace optiling {\n'
            "IMPL_OP_OPTILING(DemoOp).Tiling(ConvTilingFunc).TilingParse<ConvParseInfo>(ConvPrepare);\n"
            "}  // namespace optiling\n")
    op = make_repo(tmp_path, {TILING: text, OPDEF[0]: OPDEF[1]})
    after = run(tiling_edits, op)[TILING]  # strips back (run checks it)
    assert ("static ge::graphStatus OptraceTilingDemoOp(gert::TilingContext *context)  // optrace\n"
            "{  // optrace\n    constexpr uint32_t optraceProfilingDataIndex = 1;  // optrace\n"
            "    ge::graphStatus optraceStatus = ConvTilingFunc(context);  // optrace\n") in after
    assert ("IMPL_OP_OPTILING(DemoOp).Tiling(ConvTilingFunc/*optrace<*/).Tiling(OptraceTilingDemoOp/*>optrace*/)"
            ".TilingParse<ConvParseInfo>(ConvPrepare);\n") in after


def test_a_body_ending_in_an_if_chain_that_returns_everywhere_gets_the_check_before_it(tmp_path: Path) -> None:
    """ops-nn's avg_pool3_d tiling ends in `if (...) { return A(); } else if (...) { return
    B(); } else { ...; return C(); }`: before its closing brace the check never ran; it
    goes before the chain."""
    tiling = """\
#include "register/op_impl_registry.h"

namespace optiling {
ge::graphStatus TilingDemoOp(gert::TilingContext *context)
{
    auto info = context->GetCompileInfo();
    if (info->regbase) {
        return TilingRegbase(context);
    } else if (info->vec) {
        return TilingVec(context);
    } else {
        const auto y = context->GetOutputShape(0);
        return TilingCube(context, y);
    }
}
IMPL_OP_OPTILING(DemoOp).Tiling(TilingDemoOp);
}  // namespace optiling
"""
    opdef = ('class DemoOp : public OpDef {\n    DemoOp(const char *n) : OpDef(n) {\n'
             '        this->Output("y").DataType({DT_FLOAT});\n    }\n};\n')
    op = make_repo(tmp_path, {"ops/demo_op/op_host/demo_op_tiling.cpp": tiling,
                              "ops/demo_op/op_host/demo_op_def.cpp": opdef})
    after = run(tiling_edits, op)["ops/demo_op/op_host/demo_op_tiling.cpp"]
    assert after.index("optraceDesc") < after.index("    if (info->regbase) {"), after
