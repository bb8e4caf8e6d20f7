"""Infer codemod: shape [OPTRACE_PROFILING_NUMEL] and dtype int64 at profiling_data's index."""

# ruff: noqa: E501  (inline before / after snippets are verbatim code)

from __future__ import annotations

from pathlib import Path

import pytest
from layer_snippets import make_repo, run

from optrace.codemods.infer import infer_edits
from optrace.codemods.layer_common import index_constants, output_uses, resolve_index

INFER = "ops/demo_op/op_host/demo_op_infer.cpp"
OPDEF = ("ops/demo_op/op_host/demo_op_def.cpp",
         'class DemoOp : public OpDef {\n    DemoOp(const char *n) : OpDef(n) {\n'
         '        this->Output("y").DataType({DT_FLOAT});\n'
         '        this->Output("n").DataType({DT_INT64});\n    }\n};\n')

BEFORE = """\
#include "register/op_def_registry.h"

namespace ge {
constexpr uint32_t OUTPUT_Y_INDEX = 0;
constexpr uint32_t OUTPUT_N_INDEX = 1;

static ge::graphStatus InferShapeDemoOp(gert::InferShapeContext *ctx)
{
    gert::Shape *y = ctx->GetOutputShape(OUTPUT_Y_INDEX);
    if (y == nullptr) {
        return ge::GRAPH_FAILED;
    }
    *y = *ctx->GetInputShape(0);
    return ge::GRAPH_SUCCESS;
}

static ge::graphStatus InferDataTypeDemoOp(gert::InferDataTypeContext *ctx)
{
    ctx->SetOutputDataType(OUTPUT_Y_INDEX, ge::DT_FLOAT);
    ctx->SetOutputDataType(OUTPUT_N_INDEX, ge::DT_INT64);
    return ge::GRAPH_SUCCESS;
}
}  // namespace ge
"""

AFTER = """\
#include "register/op_def_registry.h"
#include "optrace_demo_op_profiling.h"  // optrace

namespace ge {
constexpr uint32_t OUTPUT_Y_INDEX = 0;
constexpr uint32_t OUTPUT_N_INDEX = 1;

static ge::graphStatus InferShapeDemoOp(gert::InferShapeContext *ctx)
{
    gert::Shape *y = ctx->GetOutputShape(OUTPUT_Y_INDEX);
    if (y == nullptr) {
        return ge::GRAPH_FAILED;
    }
    *y = *ctx->GetInputShape(0);
    constexpr uint32_t optraceProfilingDataIndex = 2;  // optrace
    gert::Shape *optraceProfilingShape = ctx->GetOutputShape(optraceProfilingDataIndex);  // optrace
    if (optraceProfilingShape != nullptr) {  // optrace
        optraceProfilingShape->SetDimNum(1);  // optrace
        optraceProfilingShape->SetDim(0, OPTRACE_PROFILING_NUMEL);  // optrace
    }  // optrace
    return ge::GRAPH_SUCCESS;
}

static ge::graphStatus InferDataTypeDemoOp(gert::InferDataTypeContext *ctx)
{
    ctx->SetOutputDataType(OUTPUT_Y_INDEX, ge::DT_FLOAT);
    ctx->SetOutputDataType(OUTPUT_N_INDEX, ge::DT_INT64);
    constexpr uint32_t optraceProfilingDataIndex = 2;  // optrace
    ctx->SetOutputDataType(optraceProfilingDataIndex, ge::DT_INT64);  // optrace
    return ge::GRAPH_SUCCESS;
}
}  // namespace ge
"""


def test_shape_and_dtype_at_the_opdef_index(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {INFER: BEFORE, OPDEF[0]: OPDEF[1]})
    assert run(infer_edits, op) == {INFER: AFTER}


def test_sizes_come_from_named_upper_bounds_not_a_core_count(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {INFER: BEFORE, OPDEF[0]: OPDEF[1]})
    inserted = [ln for ln in run(infer_edits, op)[INFER].splitlines() if ln.endswith("// optrace")]
    assert any("OPTRACE_PROFILING_NUMEL" in ln for ln in inserted)
    assert not any(n in ln for ln in inserted for n in ("24", "48", "2048"))


@pytest.mark.parametrize("style", ["constants", "enum", "literals", "define"])
def test_without_an_opdef_the_index_follows_the_infer_outputs(tmp_path: Path, style: str) -> None:
    decl = {
        "constants": "constexpr uint32_t OUT_A = 0;\nconstexpr uint32_t OUT_B = 1;\n",
        "enum": "enum OutputIndex : uint32_t { OUT_A, OUT_B };\n",
        "literals": "",
        "define": "#define OUT_A 0\n#define OUT_B (1)\n",
    }[style]
    a, b = ("0", "1") if style == "literals" else ("OUT_A", "OUT_B")
    text = (f"{decl}static ge::graphStatus Infer(gert::InferShapeContext *context)\n{{\n"
            f"    context->GetOutputShape({a})->SetDimNum(1);\n"
            f"    context->GetOutputShape({b})->SetDimNum(1);\n    return ge::GRAPH_SUCCESS;\n}}\n")
    op = make_repo(tmp_path, {INFER: text})
    assert "optraceProfilingDataIndex = 2;  // optrace" in run(infer_edits, op)[INFER]


def test_index_resolution_reads_constants_enums_and_literals() -> None:
    data = (b"enum class Out { Y = 3, N, M = 7, K };\nconstexpr size_t Z{5};\n#define W 9\n"
            b"void f() { c->GetOutputShape(Out::N); c->GetOutputShape(K); c->GetOutputShape(2u); "
            b"c->GetOutputDesc(static_cast<uint32_t>(Z)); c->SetOutputDataType(W, x); }\n")
    consts = index_constants(data)
    assert (consts["Y"], consts["N"], consts["M"], consts["K"], consts["Z"], consts["W"]) == (3, 4, 7, 8, 5, 9)
    assert [u.index for u in output_uses(data)] == [4, 8, 2, 5, 9]
    assert resolve_index(b"UNKNOWN", consts) is None


def test_a_function_without_final_return_gets_the_lines_before_its_brace(tmp_path: Path) -> None:
    text = ("void Infer(gert::InferShapeContext *context)\n{\n\tcontext->GetOutputShape(0);\n"
            "\tif (x) {\n\t\treturn;\n\t}\n}\n")
    op = make_repo(tmp_path, {INFER: text})
    after = run(infer_edits, op)[INFER]
    assert "\t}\n\tconstexpr uint32_t optraceProfilingDataIndex = 1;  // optrace\n" in after
    assert "\t\toptraceProfilingShape->SetDimNum(1);  // optrace\n" in after


def test_an_infer_that_already_sets_the_output_is_left_alone(tmp_path: Path) -> None:
    text = ("void Infer(gert::InferShapeContext *context)\n{\n    context->GetOutputShape(0);\n"
            "    context->GetOutputShape(2)->SetDimNum(1);\n    return;\n}\n")
    op = make_repo(tmp_path, {INFER: text, OPDEF[0]: OPDEF[1]})
    assert run(infer_edits, op) == {}


def test_one_line_bodies_get_the_lines_as_one_fragment(tmp_path: Path) -> None:
    """`{ return GRAPH_SUCCESS; }` on the function's own line: no line to insert before,
    so the statements go in front of the return on that line (strip takes them back)."""
    text = ("using namespace ge;\n"
            "static ge::graphStatus InferShapeDemo(gert::InferShapeContext* context) { return GRAPH_SUCCESS; }\n"
            "static ge::graphStatus InferDataTypeDemo(gert::InferDataTypeContext* context) { }\n"
            "IMPL_OP_INFERSHAPE(DemoOp).InferShape(InferShapeDemo).InferDataType(InferDataTypeDemo);\n")
    op = make_repo(tmp_path, {INFER: text, OPDEF[0]: OPDEF[1]})
    after = run(infer_edits, op)[INFER]
    assert ("(gert::InferShapeContext* context) { /*optrace<*/constexpr uint32_t optraceProfilingDataIndex = 2; "
            "gert::Shape *optraceProfilingShape = context->GetOutputShape(optraceProfilingDataIndex); "
            "if (optraceProfilingShape != nullptr) { optraceProfilingShape->SetDimNum(1); "
            "optraceProfilingShape->SetDim(0, OPTRACE_PROFILING_NUMEL); } /*>optrace*/return GRAPH_SUCCESS; }\n"
            ) in after
    assert ("(gert::InferDataTypeContext* context) { /*optrace<*/ constexpr uint32_t optraceProfilingDataIndex = 2; "
            "context->SetOutputDataType(optraceProfilingDataIndex, ge::DT_INT64); /*>optrace*/}\n") in after
