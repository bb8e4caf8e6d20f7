"""Host files an operator does not own, met on real repositories, and apply / check agreeing
on them: `check` passes on what `apply` wrote, and the plan says what it left.

- an aclnn file elsewhere named with the op's name among other words (`aclnn_add_demo_op.h`
  for `demo_op`) is another operator's: a near miss (OT024), not taken;
- aclnn files in the operator's folder that declare no wrapper of the op and reach no launch
  of it (public APIs reaching it through shared code): mode B would stop short of the
  public API, so apply chooses mode A and says why, and check's G2 says so too;
- another operator's infer kept in the folder, a graph fusion pass that calls InferShape,
  tiling code that reads no output: nothing of this op to order, said and passing.
"""

# ruff: noqa: E501  (inline snippets are verbatim code)

from __future__ import annotations

import json
from pathlib import Path

from test_host_layers import ACLNN, ACLNN_H, OP, TILING, cli, evidence, gates, make, snapshot


def _plan(op: Path) -> dict[str, object]:
    code, out, err = cli("plan", str(op), "--format", "json")
    assert code == 0, err
    operator: dict[str, object] = json.loads(out)["operators"][0]
    return operator


def _apply_then_check(op: Path) -> dict[str, dict[str, object]]:
    code, _, err = cli("apply", str(op), "--write")
    assert code == 0, err
    code, out, err = cli("check", str(op), "--no-compile")
    assert code == 0, out + err
    return gates(op)


def test_an_aclnn_file_named_with_more_words_is_another_operators(tmp_path: Path) -> None:
    op = make(tmp_path)
    root = op.parent.parent
    other = root / "ops/add_demo_op/op_api/aclnn_add_demo_op.h"
    other.parent.mkdir(parents=True)
    other.write_text("#pragma once\n#include \"aclnn_demo_op.h\"\n"
                     "aclnnStatus aclnnAddDemoOpGetWorkspaceSize(const aclTensor *x, const aclTensor *y,\n"
                     "                                           uint64_t *workspaceSize, aclOpExecutor **executor);\n")
    before = other.read_bytes()
    plan = _plan(op)
    layers = plan["layers"]
    assert isinstance(layers, dict)
    assert all("add_demo_op" not in f["file"] for f in layers["aclnn"])
    near = [d for d in plan["diagnostics"] if d["code"] == "OT024"]  # type: ignore[union-attr]
    assert [Path(d["path"]).name for d in near] == ["aclnn_add_demo_op.h"]
    g = _apply_then_check(op)
    assert other.read_bytes() == before
    assert g["G2"]["status"] == "pass"


PUBLIC_ACLNN = """\
#include "aclnn_demo_public.h"
aclnnStatus aclnnDemoPublicGetWorkspaceSize(const aclTensor *x, const aclTensor *y, uint64_t *workspaceSize,
                                            aclOpExecutor **executor)
{
    auto out = l0op::SharedMatmul(x, y, *executor);
    return out == nullptr ? ACLNN_ERR_INNER : ACLNN_SUCCESS;
}
"""
PUBLIC_ACLNN_H = """\
#pragma once
aclnnStatus aclnnDemoPublicGetWorkspaceSize(const aclTensor *x, const aclTensor *y, uint64_t *workspaceSize,
                                            aclOpExecutor **executor);
"""


def test_aclnn_files_that_are_no_wrapper_of_the_op_choose_mode_a(tmp_path: Path) -> None:
    op = make(tmp_path, a=(f"{OP}/op_host/op_api/aclnn_demo_op.cpp", ACLNN, PUBLIC_ACLNN),
              h=(f"{OP}/op_host/op_api/aclnn_demo_op.h", ACLNN_H, PUBLIC_ACLNN_H))
    plan = _plan(op)
    assert plan["mode"] == "A"
    assert "OT313 no aclnn wrapper of this op in aclnn_demo_op.cpp" in str(plan["mode_reason"])
    root = op.parent.parent
    before = snapshot(root)
    g = _apply_then_check(op)
    assert g["G2"]["status"] == "pass", json.dumps(g["G2"], indent=1)
    notes = [note for path, _line, note, ok in evidence(g["G2"]) if path.endswith("aclnn_demo_op.cpp")]
    assert notes and all("mode A: no wrapper of this op here" in n for n in notes), notes
    assert snapshot(root)[f"{OP}/op_host/op_api/aclnn_demo_op.cpp"] == before[f"{OP}/op_host/op_api/aclnn_demo_op.cpp"]
    code, _, err = cli("strip", str(op), "--write")
    assert code == 0, err
    assert snapshot(root) == before


def test_another_operators_infer_in_the_folder_is_said_and_passes(tmp_path: Path) -> None:
    op = make(tmp_path, i=(f"{OP}/op_host/demo_op_infershape.cpp", "IMPL_OP_INFERSHAPE(DemoOP)",
                           "IMPL_OP_INFERSHAPE(DemoBase)"))
    base = op.parent / "demo_base/op_host/demo_base_def.cpp"
    base.parent.mkdir(parents=True)
    base.write_text("namespace ops {\nclass DemoBase : public OpDef {};\nOP_ADD(DemoBase);\n}\n")
    infer = op / "op_host/demo_op_infershape.cpp"
    before = infer.read_bytes()
    g = _apply_then_check(op)
    assert infer.read_bytes() == before  # not this op's: never edited
    assert g["G2"]["status"] == "pass"
    assert any("registers the infer functions of `DemoBase`, another operator" in note and ok
               for _p, _l, note, ok in evidence(g["G2"]))


def test_a_graph_fusion_pass_is_no_infer(tmp_path: Path) -> None:
    op = make(tmp_path)
    fusion = op / "op_graph/fusion_pass/demo_fusion_pass.cpp"
    fusion.parent.mkdir(parents=True)
    fusion.write_text("Status DemoFusionPass::Run(ge::ComputeGraph &graph)\n{\n"
                      "    auto node = graph.AddNode(\"DemoOP\");\n    return node->InferShapeAndType();\n}\n")
    layers = _plan(op)["layers"]
    assert isinstance(layers, dict)
    assert [Path(f["file"]).name for f in layers["infer"]] == ["demo_op_infershape.cpp"]
    assert _apply_then_check(op)["G2"]["status"] == "pass"


def test_tiling_code_that_reads_no_output_has_no_order_to_keep(tmp_path: Path) -> None:
    # Registered by a shared template elsewhere; this file only computes.
    op = make(tmp_path, t=(f"{OP}/op_host/demo_op_tiling.cpp", TILING,
                           "namespace optiling {\nge::graphStatus DemoRegBase::DoOpTiling()\n{\n"
                           "    blockDim_ = 8;\n    return ge::GRAPH_SUCCESS;\n}\n}  // namespace optiling\n"))
    g = _apply_then_check(op)
    assert g["G2"]["status"] == "pass"
    assert any(note == "tiling code that reads no output: no order to keep" for _p, _l, note, _ok in evidence(g["G2"]))


def test_the_op_own_infer_stays_read(tmp_path: Path) -> None:
    """The unchanged operator: its own infer is still what G2 reads (the new rules take nothing away)."""
    op = make(tmp_path)
    g = _apply_then_check(op)
    assert any(note.startswith("infer shape: profiling_data is output 3 (index 2)") for _p, _l, note, _ok in evidence(g["G2"]))
