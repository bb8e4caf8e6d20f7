"""Operator names compare by one normal form: case-, underscore- and acronym-insensitive."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from layer_snippets import make_repo

from optrace.codemods.registry import LAYERS
from optrace.engine.config import Config
from optrace.engine.discovery import discover
from optrace.engine.names import op_key, op_name_pattern, op_name_re, same_op


@pytest.mark.parametrize(("a", "b", "same"), [
    ("MoeGmmFFNGate", "MoeGmmFfnGate", True),
    ("MoeGmmFFNGate", "moe_gmm_ffn_gate", True),
    ("moe_gmm_ffn_gate", "MOE_GMM_FFN_GATE", True),
    ("Conv3DBackpropV2", "conv3d_backprop_v2", True),
    ("moe_gmm_ffn_gate", "moe_gmm_ffn_gate_v2", False),
    ("add", "add_", False),  # torch's in-place variant is another op
    ("add", "_add", False),
    ("DemoOp", "demo_op", True),
])
def test_the_normal_form(a: str, b: str, same: bool) -> None:
    assert same_op(a, b) is same
    assert (op_key(a) == op_key(b)) is same


@pytest.mark.parametrize(("text", "hit"), [
    (b"aclnnMoeGmmFFNGateGetWorkspaceSize", "MoeGmmFFNGate"),
    (b"EXEC_NPU_CMD(aclnnMoeGmmFfnGate, x)", "MoeGmmFfnGate"),
    (b"torch.ops.lib.moe_gmm_ffn_gate(x)", "moe_gmm_ffn_gate"),
    (b"class MOEGMMFFNGATE : public OpDef", "MOEGMMFFNGATE"),
    (b"MoeGmmFfnGateV2 other;", None),
    (b"moe_gmm_ffn_gates", None),
])
def test_one_pattern_finds_every_spelling(text: bytes, hit: str | None) -> None:
    inside = re.search(op_name_pattern("moe_gmm_ffn_gate"), text)
    whole = op_name_re("moe_gmm_ffn_gate").search(text)
    if hit is None:
        assert whole is None
    else:
        assert inside is not None and inside.group(0).decode() == hit
        if not text.startswith(b"aclnn") and b"(aclnn" not in text:
            assert whole is not None


def test_discovery_finds_layers_spelled_with_an_acronym(tmp_path: Path) -> None:
    # The op directory says demo_op; the code says DemoOP (an acronym), as MoeGmmFFNGate
    # does for moe_gmm_ffn_gate.
    op = make_repo(tmp_path, {
        "ops/demo_op/op_host/demo_op_def.cpp":
            'class DemoOP : public OpDef {\n    DemoOP(const char *n) : OpDef(n) {\n'
            '        this->Output("y").DataType({DT_FLOAT});\n    }\n};\n',
        "torch/demo_op.cpp": "at::Tensor demo(const at::Tensor &x)\n{\n"
                             "    EXEC_NPU_CMD(aclnnDemoOP, x, x);\n    return x;\n}\n",
        "torch/reg.cpp": 'TORCH_LIBRARY(lib, m)\n{\n    m.def("DemoOP(Tensor x) -> Tensor");\n}\n',
        "api/wrap.cpp": "aclnnStatus aclnnInnerDemoOPGetWorkspaceSize(const aclTensor *x, "
                        "uint64_t *workspaceSize, aclOpExecutor **executor);\n",
    })
    layers = discover(op, op.parent.parent, Config(), LAYERS)
    root = op.parent.parent
    found = {k: sorted(p.path.relative_to(root).as_posix() for p in v) for k, v in layers.found.items()}
    assert found["torch_adapter"] == ["torch/demo_op.cpp"]
    assert found["registration"] == ["torch/reg.cpp"]
    assert found["aclnn"] == ["api/wrap.cpp"]
    assert found["op_def"] == ["ops/demo_op/op_host/demo_op_def.cpp"]
