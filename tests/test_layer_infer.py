"""Infer codemod: shape [OPTRACE_PROFILING_NUMEL] and dtype int64 at profiling_data's index."""

# ruff: noqa: E501  (inline before / after snippets are verbatim code)

from __future__ import annotations

import json
from pathlib import Path

import pytest
from layer_snippets import make_repo, run
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.codemods.infer import infer_edits
from optrace.codemods.layer_common import index_constants, output_uses, resolve_index
from optrace.engine.host_compile import host_compile

runner = CliRunner()

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
    so the statements go in front of the return as one fragment (strip takes them back);
    past 120 columns, a statement a line inside it (engine/layout.py), else on the line."""
    text = ("using namespace ge;\n"
            "static ge::graphStatus InferShapeDemo(gert::InferShapeContext* context) { return GRAPH_SUCCESS; }\n"
            "static ge::graphStatus InferDataTypeDemo(gert::InferDataTypeContext* context) { }\n"
            "IMPL_OP_INFERSHAPE(DemoOp).InferShape(InferShapeDemo).InferDataType(InferDataTypeDemo);\n")
    op = make_repo(tmp_path, {INFER: text, OPDEF[0]: OPDEF[1]})
    after = run(infer_edits, op)[INFER]
    assert ("(gert::InferShapeContext* context) { /*optrace<*/\n"
            "    constexpr uint32_t optraceProfilingDataIndex = 2;\n"
            "    gert::Shape *optraceProfilingShape = context->GetOutputShape(optraceProfilingDataIndex);\n"
            "    if (optraceProfilingShape != nullptr) {\n"
            "        optraceProfilingShape->SetDimNum(1);\n"
            "        optraceProfilingShape->SetDim(0, OPTRACE_PROFILING_NUMEL);\n"
            "    }\n"
            "    /*>optrace*/return GRAPH_SUCCESS; }\n") in after
    assert ("(gert::InferDataTypeContext* context) { /*optrace<*/\n"
            "    constexpr uint32_t optraceProfilingDataIndex = 2;\n"
            "    context->SetOutputDataType(optraceProfilingDataIndex, ge::DT_INT64);\n"
            "    /*>optrace*/}\n") in after


LIBRARY_INFER = """\
#include "elewise_util.h"

using namespace ge;
using namespace Ops::Base;

namespace ops {
IMPL_OP_INFERSHAPE(DemoOp).InferShape(InferShape4Elewise).InferDataType(Ops::Base::InferDataType4Elewise);
}  // namespace ops
"""
ELEWISE = ("ops/demo_op/op_host/elewise_util.h",
           "namespace Ops {\nnamespace Base {\n"
           "ge::graphStatus InferShape4Elewise(gert::InferShapeContext *context);\n"
           "ge::graphStatus InferDataType4Elewise(gert::InferDataTypeContext *context);\n"
           "}  // namespace Base\n}  // namespace Ops\n")


def test_an_infer_registered_from_a_library_is_wrapped_where_it_is_registered(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {INFER: LIBRARY_INFER, OPDEF[0]: OPDEF[1], ELEWISE[0]: ELEWISE[1]})
    after = run(infer_edits, op)[INFER]  # strips back to the original (run checks it)
    assert after == LIBRARY_INFER.replace('#include "elewise_util.h"\n', '#include "elewise_util.h"\n'
                                          '#include "optrace_demo_op_profiling.h"  // optrace\n').replace(
        "namespace ops {\n", """\
namespace ops {
static ge::graphStatus OptraceInferShapeDemoOp(gert::InferShapeContext *context)  // optrace
{  // optrace
    constexpr uint32_t optraceProfilingDataIndex = 2;  // optrace
    ge::graphStatus optraceStatus = InferShape4Elewise(context);  // optrace
    if (optraceStatus != ge::GRAPH_SUCCESS) {  // optrace
        return optraceStatus;  // optrace
    }  // optrace
    gert::Shape *optraceProfilingShape = context->GetOutputShape(optraceProfilingDataIndex);  // optrace
    if (optraceProfilingShape != nullptr) {  // optrace
        optraceProfilingShape->SetDimNum(1);  // optrace
        optraceProfilingShape->SetDim(0, OPTRACE_PROFILING_NUMEL);  // optrace
    }  // optrace
    return optraceStatus;  // optrace
}  // optrace
static ge::graphStatus OptraceInferDataTypeDemoOp(gert::InferDataTypeContext *context)  // optrace
{  // optrace
    constexpr uint32_t optraceProfilingDataIndex = 2;  // optrace
    ge::graphStatus optraceStatus = Ops::Base::InferDataType4Elewise(context);  // optrace
    if (optraceStatus != ge::GRAPH_SUCCESS) {  // optrace
        return optraceStatus;  // optrace
    }  // optrace
    context->SetOutputDataType(optraceProfilingDataIndex, ge::DT_INT64);  // optrace
    return optraceStatus;  // optrace
}  // optrace
""").replace(".InferShape(InferShape4Elewise).InferDataType(Ops::Base::InferDataType4Elewise);",
             ".InferShape(InferShape4Elewise/*optrace<*/).InferShape(OptraceInferShapeDemoOp/*>optrace*/)"
             ".InferDataType(Ops::Base::InferDataType4Elewise/*optrace<*/)"
             ".InferDataType(OptraceInferDataTypeDemoOp/*>optrace*/);")


def test_the_wrapped_library_infer_compiles_and_check_sees_g2_through_it(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {INFER: LIBRARY_INFER, OPDEF[0]: OPDEF[1], ELEWISE[0]: ELEWISE[1]})
    root = op.parent.parent
    infer = root / INFER
    before = host_compile([infer], op).errors.get(infer, [])
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    assert "OptraceInferShapeDemoOp" in infer.read_text()
    # no error the wrapper brings (the sizes header it includes is written by apply)
    assert host_compile([infer], op).errors.get(infer, []) == before
    check = runner.invoke(app, ["check", str(op), "--format", "json"])
    gates = {g["gate"]: g for g in json.loads(check.stdout)["operators"][0]["gates"]}
    assert gates["G2"]["status"] == "pass", gates["G2"]
    assert runner.invoke(app, ["strip", str(op), "--write"]).exit_code == 0
    assert infer.read_text() == LIBRARY_INFER


def test_infer_registered_under_a_misspelt_name_is_a_warning_naming_it(tmp_path: Path) -> None:
    """ops-nn's masked_scatter registers its infer functions for `MskedScatter`: the op has
    none at run time, for any output. apply leaves the file alone (nothing is registered
    for the op) and check says so at the registration, as a warning (OT456: a defect
    optrace's output did not cause), not as a G2 failure or "infer not read"; `--strict`
    makes it an error."""
    text = BEFORE.replace("}  // namespace ge\n", "IMPL_OP_INFERSHAPE(DemOp).InferShape(InferShapeDemoOp)"
                          ".InferDataType(InferDataTypeDemoOp);\n}  // namespace ge\n")
    tiling = ("ops/demo_op/op_host/demo_op_tiling.cpp",  # the op's own registrations are spelt right
              "static ge::graphStatus TilingDemoOp(gert::TilingContext *ctx) { return ge::GRAPH_SUCCESS; }\n"
              "IMPL_OP_OPTILING(DemoOp).Tiling(TilingDemoOp);\n")
    op = make_repo(tmp_path, {INFER: text, OPDEF[0]: OPDEF[1], tiling[0]: tiling[1]})
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    assert (op.parent.parent / INFER).read_text() == text
    res = runner.invoke(app, ["check", str(op), "--format", "json", "--no-compile"])
    report = json.loads(res.stdout)["operators"][0]
    g2 = next(g for g in report["gates"] if g["gate"] == "G2")
    warned = [e for e in g2["evidence"] if e["warning"]]
    assert g2["status"] == "pass" and all(e["ok"] for e in g2["evidence"]) and len(warned) == 1, g2
    line = text.count("\n") - 1
    assert warned[0]["path"].endswith("demo_op_infer.cpp") and warned[0]["line"] == line
    assert "`DemOp`, not the op `DemoOp` (a misspelling?)" in warned[0]["note"]
    found = [f for f in report["findings"] if f["code"] == "OT456"]
    assert [(f["severity"], f["line"]) for f in found] == [("warning", line)], report["findings"]
    assert res.exit_code == 0, res.stdout
    text = runner.invoke(app, ["check", str(op), "--no-compile"])
    assert "OT456" in text.stderr and "(a misspelling?)" in text.stderr and "(a misspelling?)" not in text.stdout
    verbose = runner.invoke(app, ["check", str(op), "--no-compile", "-v"]).stdout
    assert "(a misspelling?)" in verbose and "<- warning" in verbose
    assert runner.invoke(app, ["check", str(op), "--no-compile", "--strict"]).exit_code == 1


@pytest.mark.parametrize("case", ["sibling-version", "macro-registered", "another-op"])
def test_a_near_name_that_is_something_else_stays_a_g2_failure(tmp_path: Path, case: str) -> None:
    """The warning is for a misspelling only. A sibling op's registration (`DemoOpV2`),
    or a near name that is another op of the repository (its own OpDef), leaves the op's
    infer unread: G2 fails, as it must when optrace cannot show the infer sets
    profiling_data. Beside the op's own registration made through a project macro (read
    by expanding it) the near name changes nothing: G2 passes, no warning."""
    regs = {
        "sibling-version": "IMPL_OP_INFERSHAPE(DemoOpV2).InferShape(InferShapeDemoOp);\n",
        "macro-registered": ("#define REG_INFER(op, s, d) IMPL_OP_INFERSHAPE(op).InferShape(s).InferDataType(d)\n"
                             "REG_INFER(DemoOp, InferShapeDemoOp, InferDataTypeDemoOp);\n"
                             "IMPL_OP_INFERSHAPE(DemOp).InferShape(InferShapeDemoOp);\n"),
        "another-op": "IMPL_OP_INFERSHAPE(DemOp).InferShape(InferShapeDemoOp);\n",
    }
    text = BEFORE.replace("}  // namespace ge\n", regs[case] + "}  // namespace ge\n")
    tiling = ("ops/demo_op/op_host/demo_op_tiling.cpp",  # the op registers its tiling by name
              "static ge::graphStatus TilingDemoOp(gert::TilingContext *ctx) { return ge::GRAPH_SUCCESS; }\n"
              "IMPL_OP_OPTILING(DemoOp).Tiling(TilingDemoOp);\n")
    files = {INFER: text, OPDEF[0]: OPDEF[1], tiling[0]: tiling[1]}
    if case == "another-op":
        files["ops/dem_op/op_host/dem_op_def.cpp"] = OPDEF[1].replace("DemoOp", "DemOp")
    op = make_repo(tmp_path, files)
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    res = runner.invoke(app, ["check", str(op), "--format", "json", "--no-compile"])
    report = json.loads(res.stdout)["operators"][0]
    g2 = next(g for g in report["gates"] if g["gate"] == "G2")
    assert not [f for f in report["findings"] if f["code"] == "OT456"]
    if case == "macro-registered":
        # The project macro is expanded: `REG_INFER(DemoOp, ...)` is the op's own
        # registration, read and edited; the near name beside it is not warned about.
        assert g2["status"] == "pass", g2
        assert res.exit_code == 0
        return
    assert g2["status"] == "fail", g2
    assert res.exit_code == 1


def test_an_opdef_without_an_infer_in_the_op_s_host_files_is_mode_a(tmp_path: Path) -> None:
    """ops-nn's conv2d_v2 registers its infer shape in a shared folder (conv/common/):
    mode B made profiling_data a required output nothing sizes, and still said "every
    layer can carry it", G2 passing. B is refused with the reason (the default mode is A,
    `--mode B` is refused naming the OpDef); applied by hand in B (its infer then gone),
    G2 fails."""
    shared = "ops/common/op_host/shared_infershape.cpp"
    op = make_repo(tmp_path, {OPDEF[0]: OPDEF[1], shared: "// the infer of several ops, registered elsewhere\n"})
    plan = runner.invoke(app, ["plan", str(op), "--format", "json"])
    assert plan.exit_code in (0, 1), plan.output
    doc = json.loads(plan.stdout)["operators"][0]
    assert doc["mode"] == "A", doc["mode"]
    assert "no infer shape / dtype function of the op is registered in its host files" in doc["mode_reason"]
    forced = runner.invoke(app, ["apply", str(op), "--mode", "B"])
    assert forced.exit_code == 2 and "[layers] infer" in forced.stderr, forced.output
    # instrumented in mode B while an infer existed, which was then moved away: G2 fails
    root = op.parent.parent
    (root / INFER).parent.mkdir(parents=True, exist_ok=True)
    (root / INFER).write_text(BEFORE)
    assert runner.invoke(app, ["apply", str(op), "--mode", "B", "--write"]).exit_code == 0
    (root / INFER).unlink()
    check = runner.invoke(app, ["check", str(op), "--format", "json", "--no-compile"])
    gates = {g["gate"]: g for g in json.loads(check.stdout)["operators"][0]["gates"]}
    assert gates["G2"]["status"] == "fail", gates["G2"]


def test_a_success_return_inside_an_if_gets_the_shape_when_the_final_return_fails(tmp_path: Path) -> None:
    """ops-nn's avg_pool3_d: `if (<shape computed>) { ...; return ge::GRAPH_SUCCESS; }`
    then `return ge::GRAPH_FAILED;`. Set before the final return, the shape was set on the
    failure path only; it goes before the success return."""
    body = """\
#include "register/op_def_registry.h"

namespace ge {
static ge::graphStatus InferShapeDemoOp(gert::InferShapeContext *ctx)
{
    gert::Shape *y = ctx->GetOutputShape(0);
    if (y != nullptr && Compute(ctx, y)) {
        Log(y);
        return ge::GRAPH_SUCCESS;
    }

    Error("failed to infer shape");
    return ge::GRAPH_FAILED;
}
IMPL_OP_INFERSHAPE(DemoOp).InferShape(InferShapeDemoOp);
}  // namespace ge
"""
    op = make_repo(tmp_path, {INFER: body, OPDEF[0]: OPDEF[1]})
    after = run(infer_edits, op)[INFER]
    success = after.index("        return ge::GRAPH_SUCCESS;")
    shape = after.index("optraceProfilingShape->SetDim(0, OPTRACE_PROFILING_NUMEL);")
    assert shape < success, after
    assert after.count("SetDim(0, OPTRACE_PROFILING_NUMEL)") == 1, after
    assert "        constexpr uint32_t optraceProfilingDataIndex = 2;  // optrace\n" in after, after


# The infer dtype function defined twice, each file registering its own: op_host's with the
# shape, and op_graph's graph infer (`IMPL_OP(...).InferDataType`), as ops-nn writes them.
HOST_INFER = ("ops/demo_op/op_host/demo_op_infershape.cpp", """\
#include "register/op_impl_registry.h"

namespace ops {
static ge::graphStatus InferDataTypeForDemoOp(gert::InferDataTypeContext *context)
{
    context->SetOutputDataType(0, context->GetInputDataType(0));
    return ge::GRAPH_SUCCESS;
}

static ge::graphStatus InferShapeForDemoOp(gert::InferShapeContext *context)
{
    *context->GetOutputShape(0) = *context->GetInputShape(0);
    return ge::GRAPH_SUCCESS;
}

IMPL_OP_INFERSHAPE(DemoOp)
    .InferShape(InferShapeForDemoOp)
    .InferDataType(InferDataTypeForDemoOp);
}  // namespace ops
""")
GRAPH_INFER = ("ops/demo_op/op_graph/demo_op_graph_infer.cpp", """\
#include "register/op_impl_registry.h"

namespace ops {
static ge::graphStatus InferDataTypeForDemoOp(gert::InferDataTypeContext *context)
{
    context->SetOutputDataType(0, context->GetInputDataType(0));
    return ge::GRAPH_SUCCESS;
}

IMPL_OP(DemoOp).InferDataType(InferDataTypeForDemoOp);
}  // namespace ops
""")


def test_a_dtype_function_defined_in_op_host_and_op_graph_is_edited_in_each_not_wrapped(tmp_path: Path) -> None:
    """Each registration names the function its own file defines: both definitions get
    the line, and neither registration a wrapper that sets the dtype a second time. The
    sizes header goes beside op_host's code (it went to op_graph/, included as `../op_graph/`)."""
    op = make_repo(tmp_path, {HOST_INFER[0]: HOST_INFER[1], GRAPH_INFER[0]: GRAPH_INFER[1],
                              OPDEF[0]: OPDEF[1]})
    after = run(infer_edits, op)
    assert "Optrace" not in "".join(after.values()), after
    for path in (HOST_INFER[0], GRAPH_INFER[0]):
        assert "context->SetOutputDataType(optraceProfilingDataIndex, ge::DT_INT64);  // optrace" in after[path]
    assert '#include "optrace_demo_op_profiling.h"  // optrace' in after[HOST_INFER[0]]
    assert "op_graph" not in after[HOST_INFER[0]]
