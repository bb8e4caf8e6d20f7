"""msopgen op_host: infer and tiling edits go only into the registered functions.

The functions come from the registrations (`IMPL_OP_INFERSHAPE(Op).InferShape(fn)
.InferDataType(fn2)`, `IMPL_OP_OPTILING(Op).Tiling(fn)`, `IMPL_OP(Op)...`, and the OpDef's
`this->SetInferShape(fn)` / `this->AICore().SetTiling(fn)`), never from a helper's name or
parameter type, never outside a function; the failure a tiling check returns matches the
function's return type.
"""

# ruff: noqa: E501  (inline before / after snippets are verbatim code)

from __future__ import annotations

from pathlib import Path

import pytest
from layer_snippets import dedent, make_repo, run

from optrace.codemods.infer import infer_edits
from optrace.codemods.op_host_registry import INFER_DTYPE, INFER_SHAPE, TILING, host_functions, unresolved
from optrace.codemods.tiling import tiling_edits
from optrace.engine.cpp import functions
from optrace.pipeline.plan import plan_operator

OPDEF = ("ops/demo_op/op_host/demo_op_def.cpp",
         'namespace ops {\nclass DemoOp : public OpDef {\npublic:\n    explicit DemoOp(const char *name) : OpDef(name)\n    {\n'
         '        this->Input("x").DataType({ge::DT_FLOAT});\n'
         '        this->Output("y").DataType({ge::DT_FLOAT});\n    }\n};\nOP_ADD(DemoOp);\n}  // namespace ops\n')
INFER = "ops/demo_op/op_host/demo_op_infershape.cpp"
TILING_CPP = "ops/demo_op/op_host/demo_op_tiling.cpp"

INFER_BEFORE = """\
#include "register/op_impl_registry.h"

namespace ops {
static bool IsPlatform910B(const gert::InferShapeContext *context)
{
    return context->GetOutputShape(0) != nullptr;
}

static bool CheckTensorDim(gert::InferShapeContext *context, size_t dim)
{
    OP_CHECK_IF(context->GetInputShape(0)->GetDimNum() != dim, OP_LOGE(context, "bad dim"), return false);
    return true;
}

static ge::graphStatus InferShape4DemoOp(gert::InferShapeContext *context)
{
    OP_CHECK_IF(!CheckTensorDim(context, 2), OP_LOGE(context, "dim"), return ge::GRAPH_FAILED);
    if (IsPlatform910B(context)) {
        *context->GetOutputShape(0) = *context->GetInputShape(0);
    }
    return ge::GRAPH_SUCCESS;
}

static ge::graphStatus InferDtype4DemoOp(gert::InferDataTypeContext *context)
{
    context->SetOutputDataType(0, context->GetInputDataType(0));
    return ge::GRAPH_SUCCESS;
}

static ge::graphStatus InferShape4OtherOp(gert::InferShapeContext *context)
{
    *context->GetOutputShape(0) = *context->GetInputShape(0);
    return ge::GRAPH_SUCCESS;
}

IMPL_OP_INFERSHAPE(DemoOp).InferShape(InferShape4DemoOp).InferDataType(InferDtype4DemoOp);
IMPL_OP_INFERSHAPE(OtherOp).InferShape(InferShape4OtherOp);
}  // namespace ops
"""

INFER_AFTER = """\
#include "register/op_impl_registry.h"
#include "optrace_demo_op_profiling.h"  // optrace

namespace ops {
static bool IsPlatform910B(const gert::InferShapeContext *context)
{
    return context->GetOutputShape(0) != nullptr;
}

static bool CheckTensorDim(gert::InferShapeContext *context, size_t dim)
{
    OP_CHECK_IF(context->GetInputShape(0)->GetDimNum() != dim, OP_LOGE(context, "bad dim"), return false);
    return true;
}

static ge::graphStatus InferShape4DemoOp(gert::InferShapeContext *context)
{
    OP_CHECK_IF(!CheckTensorDim(context, 2), OP_LOGE(context, "dim"), return ge::GRAPH_FAILED);
    if (IsPlatform910B(context)) {
        *context->GetOutputShape(0) = *context->GetInputShape(0);
    }
    constexpr uint32_t optraceProfilingDataIndex = 1;  // optrace
    gert::Shape *optraceProfilingShape = context->GetOutputShape(optraceProfilingDataIndex);  // optrace
    if (optraceProfilingShape != nullptr) {  // optrace
        optraceProfilingShape->SetDimNum(1);  // optrace
        optraceProfilingShape->SetDim(0, OPTRACE_PROFILING_NUMEL);  // optrace
    }  // optrace
    return ge::GRAPH_SUCCESS;
}

static ge::graphStatus InferDtype4DemoOp(gert::InferDataTypeContext *context)
{
    context->SetOutputDataType(0, context->GetInputDataType(0));
    constexpr uint32_t optraceProfilingDataIndex = 1;  // optrace
    context->SetOutputDataType(optraceProfilingDataIndex, ge::DT_INT64);  // optrace
    return ge::GRAPH_SUCCESS;
}

static ge::graphStatus InferShape4OtherOp(gert::InferShapeContext *context)
{
    *context->GetOutputShape(0) = *context->GetInputShape(0);
    return ge::GRAPH_SUCCESS;
}

IMPL_OP_INFERSHAPE(DemoOp).InferShape(InferShape4DemoOp).InferDataType(InferDtype4DemoOp);
IMPL_OP_INFERSHAPE(OtherOp).InferShape(InferShape4OtherOp);
}  // namespace ops
"""


def test_infer_edits_only_the_registered_functions(tmp_path: Path) -> None:
    # Not the helpers taking the same context (CheckTensorDim, IsPlatform910B), not another
    # op's infer registered in the same file.
    op = make_repo(tmp_path, {INFER: INFER_BEFORE, OPDEF[0]: OPDEF[1]})
    assert run(infer_edits, op) == {INFER: INFER_AFTER}


TILING_BEFORE = """\
namespace optiling {
static bool CheckOutputs(const gert::TilingContext *context)
{
    auto desc = context->GetOutputDesc(0);
    OP_CHECK_IF(desc == nullptr, OP_LOGE(context, "no y"), return false);
    return true;
}

static ge::graphStatus DemoOpTiling(gert::TilingContext *context)
{
    OP_CHECK_IF(!CheckOutputs(context), OP_LOGE(context, "outputs"), return ge::GRAPH_PARAM_INVALID);
    for (uint32_t i = 0; i < 4; ++i) {
        OP_CHECK_IF(i > 8, OP_LOGE(context, "i"), break);
    }
    context->SetBlockDim(8);
    return ge::GRAPH_SUCCESS;
}

static ge::graphStatus DemoOpTilingParse(gert::TilingParseContext *context)
{
    return ge::GRAPH_SUCCESS;
}

IMPL_OP_OPTILING(DemoOp)
    .Tiling(DemoOpTiling)
    .TilingParse<DemoCompileInfo>(DemoOpTilingParse);
}  // namespace optiling
"""

TILING_AFTER = TILING_BEFORE.replace("""\
    context->SetBlockDim(8);
    return ge::GRAPH_SUCCESS;
""", """\
    context->SetBlockDim(8);
    constexpr uint32_t optraceProfilingDataIndex = 1;  // optrace
    const gert::CompileTimeTensorDesc *optraceDesc = context->GetOutputDesc(optraceProfilingDataIndex);  // optrace
    if (optraceDesc != nullptr && optraceDesc->GetDataType() != ge::DT_INT64) {  // optrace
        return ge::GRAPH_FAILED;  // optrace
    }  // optrace
    return ge::GRAPH_SUCCESS;
""")


def test_tiling_edits_only_the_registered_function_inside_its_body(tmp_path: Path) -> None:
    # The registered function reads outputs through its helper; the helper (bool, where
    # GRAPH_FAILED would convert to true) is left alone, and nothing lands after
    # IMPL_OP_OPTILING (macro arguments holding `return` / `break` do not end the body).
    op = make_repo(tmp_path, {TILING_CPP: TILING_BEFORE, OPDEF[0]: OPDEF[1]})
    assert run(tiling_edits, op) == {TILING_CPP: TILING_AFTER}


def test_the_function_model_survives_statements_in_macro_arguments() -> None:
    fns = {f.name: f for f in functions(TILING_BEFORE.encode())}
    body = TILING_BEFORE.encode()[fns["DemoOpTiling"].body_open : fns["DemoOpTiling"].body_close + 1]
    assert body.startswith(b"{\n    OP_CHECK_IF(!CheckOutputs") and body.endswith(b"return ge::GRAPH_SUCCESS;\n}")
    assert sorted(fns) == ["CheckOutputs", "DemoOpTiling", "DemoOpTilingParse"]


@pytest.mark.parametrize(("rtype", "body_return", "failure"), [
    ("bool", "return true;", "return false;"),
    ("void", "return;", "return;"),
    ("ge::graphStatus", "return ge::GRAPH_SUCCESS;", "return ge::GRAPH_FAILED;"),
    ("uint32_t", "return 0;", "return ge::GRAPH_FAILED;"),
])
def test_the_returned_failure_matches_the_return_type(tmp_path: Path, rtype: str, body_return: str,
                                                      failure: str) -> None:
    text = (f"{rtype} DemoTiling(gert::TilingContext *context)\n{{\n    context->GetOutputDesc(0);\n"
            f"    {body_return}\n}}\nIMPL_OP_OPTILING(DemoOp).Tiling(DemoTiling);\n")
    op = make_repo(tmp_path, {TILING_CPP: text, OPDEF[0]: OPDEF[1]})
    after = run(tiling_edits, op)[TILING_CPP]
    assert f"        {failure}  // optrace\n" in after


def test_the_opdef_registers_the_old_way_and_lookup_follows_namespaces(tmp_path: Path) -> None:
    # `this->SetInferShape(ge::InferShape)` / `this->AICore().SetTiling(optiling::TilingFunc)`:
    # the msopgen template. A same-named function in another namespace is not the one.
    opdef = OPDEF[1].replace("        this->Output(\"y\").DataType({ge::DT_FLOAT});\n",
                             "        this->Output(\"y\").DataType({ge::DT_FLOAT});\n"
                             "        this->SetInferShape(ge::InferShape).SetInferDataType(ge::InferDataType);\n"
                             "        this->AICore().SetTiling(optiling::TilingFunc);\n")
    infer = dedent("""\
        namespace ge {
        static graphStatus InferShape(gert::InferShapeContext *context)
        {
            *context->GetOutputShape(0) = *context->GetInputShape(0);
            return GRAPH_SUCCESS;
        }
        static graphStatus InferDataType(gert::InferDataTypeContext *context)
        {
            context->SetOutputDataType(0, ge::DT_FLOAT);
            return GRAPH_SUCCESS;
        }
        }  // namespace ge
        """)
    tiling = dedent("""\
        namespace optiling {
        namespace arch35 {
        static ge::graphStatus TilingFunc(gert::TilingContext *context)
        {
            context->GetOutputDesc(0);
            return ge::GRAPH_SUCCESS;
        }
        }  // namespace arch35
        static ge::graphStatus TilingFunc(gert::TilingContext *context)
        {
            context->GetOutputShape(0);
            return ge::GRAPH_SUCCESS;
        }
        }  // namespace optiling
        """)
    op = make_repo(tmp_path, {OPDEF[0]: opdef, INFER: infer, TILING_CPP: tiling})
    layers = plan_operator(op).analysis.layers
    assert [(f.function.name, f.function.line) for f in host_functions(layers, INFER_SHAPE)] == [("InferShape", 2)]
    assert [(f.function.name, f.function.line) for f in host_functions(layers, INFER_DTYPE)] == [("InferDataType", 7)]
    assert [(f.function.name, f.function.line) for f in host_functions(layers, TILING)] == [("TilingFunc", 9)]
    after = run(tiling_edits, op)[TILING_CPP]
    assert after.index("optraceDesc") > after.index("}  // namespace arch35")


def test_impl_op_chains_and_unresolved_registrations(tmp_path: Path) -> None:
    text = dedent("""\
        static ge::graphStatus InferDemo(gert::InferShapeContext *context) { return ge::GRAPH_SUCCESS; }
        IMPL_OP(DemoOp).InferShape(InferDemo).InferOutDataTypeSameWithFirstInput().InferDataType(Ops::Base::InferDtypeSame);
        """)
    op = make_repo(tmp_path, {INFER: text, OPDEF[0]: OPDEF[1]})
    layers = plan_operator(op).analysis.layers
    assert [f.function.name for f in host_functions(layers, INFER_SHAPE)] == ["InferDemo"]
    assert host_functions(layers, INFER_DTYPE) == []
    assert [r.function for r in unresolved(layers, INFER_DTYPE)] == ["Ops::Base::InferDtypeSame"]


def test_acronym_spelled_registrations_are_the_ops(tmp_path: Path) -> None:
    text = INFER_BEFORE.replace("IMPL_OP_INFERSHAPE(DemoOp)", "IMPL_OP_INFERSHAPE(DemoOP)")
    op = make_repo(tmp_path, {INFER: text, OPDEF[0]: OPDEF[1]})
    assert run(infer_edits, op) == {INFER: INFER_AFTER.replace("IMPL_OP_INFERSHAPE(DemoOp)",
                                                               "IMPL_OP_INFERSHAPE(DemoOP)")}


def test_without_registrations_the_uncalled_context_functions_are_the_ops(tmp_path: Path) -> None:
    # A hand-written project that registers nothing optrace can read: the infer function
    # is the one no other function calls; its helper with the same context is not.
    text = INFER_BEFORE.split("IMPL_OP_INFERSHAPE")[0] + "}  // namespace ops\n"
    text = text.replace(INFER_BEFORE[INFER_BEFORE.index("static ge::graphStatus InferShape4OtherOp"):
                                     INFER_BEFORE.index("IMPL_OP_INFERSHAPE")], "")
    op = make_repo(tmp_path, {INFER: text, OPDEF[0]: OPDEF[1]})
    layers = plan_operator(op).analysis.layers
    assert [f.function.name for f in host_functions(layers, INFER_SHAPE)] == ["InferShape4DemoOp"]
    assert [f.function.name for f in host_functions(layers, INFER_DTYPE)] == ["InferDtype4DemoOp"]
