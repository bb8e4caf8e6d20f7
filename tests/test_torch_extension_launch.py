"""A torch extension in the operator's own folder (ops-nn layout): the adapter launches
through `ACLNN_CMD(aclnn<Op>, ...)` and pybind11 binds it with `m.def` (no schema)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from layer_snippets import make_repo
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.codemods.layer import EXAMPLE_INFER
from optrace.engine.host_compile import host_compile

runner = CliRunner()

ADAPTER = "ops/demo_op/torch_extension/csrc/demo_op.cpp"
ADAPTER_TEXT = """\
#include <torch/extension.h>
#include "aclnn_common.h"

at::Tensor demo_op(const at::Tensor &x, double scale)
{
    at::Tensor y = at::empty_like(x);
    float s = static_cast<float>(scale);
    ACLNN_CMD(aclnnDemoOp, x, y, s);
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("demo_op", &demo_op, "demo op");
}
"""
OPDEF = ("ops/demo_op/op_host/demo_op_def.cpp",
         'class DemoOp : public OpDef {\n    DemoOp(const char *n) : OpDef(n) {\n'
         '        this->Input("x").DataType({DT_FLOAT});\n'
         '        this->Output("y").DataType({DT_FLOAT});\n    }\n};\n')
# Its infer (an OpDef's required outputs are sized there: without one, mode B is refused).
INFER = ("ops/demo_op/op_host/demo_op_infershape.cpp", EXAMPLE_INFER)


def test_an_aclnn_cmd_adapter_and_a_pybind_binding_carry_the_buffer(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {ADAPTER: ADAPTER_TEXT, OPDEF[0]: OPDEF[1], INFER[0]: INFER[1]})
    root = op.parent.parent
    adapter = root / ADAPTER
    compiled_before = {e.message for e in host_compile([adapter], op).errors.get(adapter, [])}
    plan = json.loads(runner.invoke(app, ["plan", str(op), "--format", "json"]).stdout)["operators"][0]
    assert [h["file"] for h in plan["layers"]["torch_adapter"]] == [ADAPTER]
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    text = (root / ADAPTER).read_text()
    assert "ACLNN_CMD(aclnnDemoOp, x, y, s/*optrace<*/, profilingData/*>optrace*/);" in text
    # the tuple the adapter now returns comes with torch's headers (absent here: shimmed)
    assert "std::tuple</*>optrace*/at::Tensor" in text
    compiled_after = {e.message for e in host_compile([adapter], op).errors.get(adapter, [])}
    assert compiled_after <= compiled_before
    check = json.loads(runner.invoke(app, ["check", str(op), "--format", "json", "--no-compile"]).stdout)
    g2 = next(g for g in check["operators"][0]["gates"] if g["gate"] == "G2")
    assert g2["status"] == "pass", g2
    assert any("pybind11 binds `demo_op`" in e["note"] for e in g2["evidence"])
    assert runner.invoke(app, ["strip", str(op), "--write"]).exit_code == 0
    assert (root / ADAPTER).read_text() == ADAPTER_TEXT


def test_mode_a_adapter_compiles_against_absent_torch_headers_as_before(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {ADAPTER: ADAPTER_TEXT, OPDEF[0]: OPDEF[1], INFER[0]: INFER[1]})
    adapter = op.parent.parent / ADAPTER
    compiled_before = {e.message for e in host_compile([adapter], op).errors.get(adapter, [])}
    assert runner.invoke(app, ["apply", str(op), "--write", "--mode", "A"]).exit_code == 0
    text = adapter.read_text()
    assert "c10::optional<at::Tensor> profilingData" in text  # mode A: an optional buffer
    # c10::optional comes with torch's headers (absent here: shimmed), so nothing new
    assert {e.message for e in host_compile([adapter], op).errors.get(adapter, [])} <= compiled_before


# The schema and the Meta in Python beside the binding (an op builder, as ops-nn's
# torch_extension/ keeps them): nothing in optrace edits them.
BUILDER = ("ops/demo_op/torch_extension/demo_op.py", '''\
from torch.library import impl

from demo_ops.op_builder import OpBuilder, get_as_library


class DemoOpBuilder(OpBuilder):
    def __init__(self):
        super().__init__("demo_op")

    def schema(self):
        return (
            "demo_op(Tensor x, "
            "float scale=1.0) -> Tensor"
        )

    def register_meta(self):
        @impl(get_as_library(), self.name, "Meta")
        def demo_op_meta(x, scale=1.0):
            return x.new_empty(x.shape)
''')
# A test's golden script naming the schema is not the op's registration.
GOLDEN = ("ops/demo_op/tests/golden.py", 'SCHEMA = "demo_op(Tensor x, float scale=1.0) -> Tensor"\n')


@pytest.mark.parametrize("name", ["demo_op", "demo_backward"])
def test_a_schema_written_in_python_beside_the_binding_refuses_mode_b(tmp_path: Path, name: str) -> None:
    """The torch op is the kernel op's name, or the launching function's own (ops-nn's
    `swiglu_group_backward` launches `SwigluGroupGrad`, bound by pybind11 by that name)."""
    adapter = ADAPTER_TEXT.replace("demo_op(const", f"{name}(const").replace('"demo_op", &demo_op',
                                                                             f'"{name}", &{name}')
    builder = BUILDER[1].replace('"demo_op(Tensor', f'"{name}(Tensor')
    op = make_repo(tmp_path, dict([(ADAPTER, adapter), OPDEF, INFER, (BUILDER[0], builder)]))
    refused = runner.invoke(app, ["apply", str(op), "--mode", "B"])
    code, err = refused.exit_code, refused.stderr
    assert code == 2, (refused.stdout, err)
    assert f"torch_extension/demo_op.py:12: OT313 the schema of `{name}` is a Python string" in err, err
    res = runner.invoke(app, ["apply", str(op)])
    assert res.exit_code == 0, res.stderr
    assert f"mode A: mode B is refused here: OT313 the schema of `{name}`" in res.stderr, res.stderr
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    assert "c10::optional<at::Tensor> profilingData" in (op.parent.parent / ADAPTER).read_text()


def test_a_schema_string_in_a_test_folder_does_not_refuse_mode_b(tmp_path: Path) -> None:
    op = make_repo(tmp_path, dict([(ADAPTER, ADAPTER_TEXT), OPDEF, INFER, GOLDEN]))
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    assert "std::tuple</*>optrace*/at::Tensor" in (op.parent.parent / ADAPTER).read_text()
