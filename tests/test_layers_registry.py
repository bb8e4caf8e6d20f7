"""The layer registry (codemods/registry.py): one ordered list of layers, each with the one
contract, and gates that never pass a layer they did not read.

Per layer, an instrumented fixture copy where that layer alone is left as it was before
`apply` (not edited): its gate fails, with the evidence in that layer's files. The test is
parametrised over the registry, so a layer added to it cannot skip the test.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.codemods.layer import Layer
from optrace.codemods.registry import HOST_LAYERS, KERNEL_LAYERS, LAYERS
from optrace.engine.analysis import analyse_operator
from optrace.engine.edits import resolve
from optrace.pipeline.layers import kernel_side, owned_files
from optrace.pipeline.plan import plan_operator

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
REPO = "umdk_style"  # the fixture with every layer
OP = "src/cam/comm_operator/ascend_kernels/moe_fused_gmm"
runner = CliRunner()

# The order of the data, from the kernel to the Python caller.
ORDER = ["entry", "base_header", "op_def", "infer", "tiling", "l0op", "aclnn", "cpp_callers", "torch_adapter",
         "registration", "autograd_wrappers", "build_hook", "python_callers", "python_fakes",
         "graph_converters"]
# Layers the fixture with every other layer lacks: the fixture that has them.
OWN_FIXTURE = {"l0op": ("l0op_style", "norm/moe_norm_grad"),
               "cpp_callers": ("l0op_style", "norm/moe_norm_grad")}
# Files of another operator left out of a fixture so that mode B applies: `norm_common`'s
# legacy API calls l0op_style's l0 function, which refuses mode B (tests/test_layer_l0op.py).
WITHOUT = {"l0op_style": ("norm/norm_common/op_api/aclnn_moe_norm_legacy.cpp",)}
# The gate each layer's `verify` speaks for, and the gate that fails without it.
FAILS = {"G2": "G2", "G1": "G1", "G4/G5": "G4"}


def cli(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def check_json(op: Path) -> dict[str, object]:
    code, out, err = cli("check", str(op), "--format", "json", "--no-compile")
    assert code in (0, 1), out + err
    doc: dict[str, object] = json.loads(out)["operators"][0]
    return doc


def gates(op: Path) -> dict[str, dict[str, object]]:
    return {g["gate"]: g for g in check_json(op)["gates"]}  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture instrumented in mode B, once for the module (copied per test)."""
    root = tmp_path_factory.mktemp("applied")
    shutil.copytree(FIXTURES / REPO, root / REPO)
    assert cli("apply", str(root / REPO / OP), "--write", "--mode", "B")[0] == 0
    return root / REPO


def fresh(applied: Path, tmp: Path) -> Path:
    shutil.copytree(applied, tmp / REPO)
    return tmp / REPO


def test_the_registry_is_ordered_and_covers_discovery() -> None:
    assert [lay.NAME for lay in LAYERS] == ORDER
    assert LAYERS == (*KERNEL_LAYERS, *HOST_LAYERS)
    names = {lay.NAME for lay in LAYERS}
    # Every kind of file discovery classifies belongs to a layer (the build script is the hook's).
    keys = [lay.FOUND_KEY for lay in LAYERS if lay.FOUND_KEY is not None]
    assert {"build_hook" if key == "build_script" else key for key in keys} <= names


@pytest.mark.parametrize("lay", LAYERS, ids=lambda lay: lay.NAME)
def test_every_layer_has_the_contract(lay: Layer) -> None:
    assert lay.NAME and lay.DESCRIPTION and lay.GATE in FAILS
    for method in ("find", "read", "edits", "verify"):
        assert callable(getattr(lay, method)), f"{lay.NAME} has no {method}"


@pytest.mark.parametrize("lay", LAYERS, ids=lambda lay: lay.NAME)
def test_a_layer_left_unedited_fails_its_gate(applied: Path, tmp_path: Path, lay: Layer) -> None:
    name, op_rel = OWN_FIXTURE.get(lay.NAME, (REPO, OP))
    if name == REPO:
        repo = fresh(applied, tmp_path)
    else:
        repo = tmp_path / name
        shutil.copytree(FIXTURES / name, repo)
        for rel in WITHOUT.get(name, ()):
            (repo / rel).unlink()
        assert cli("apply", str(repo / op_rel), "--write", "--mode", "B")[0] == 0
    op = repo / op_rel
    assert gates(op)[FAILS[lay.GATE]]["status"] == "pass"
    files = lay.find(analyse_operator(op, None, LAYERS).layers)
    assert files, f"the fixture has no {lay.NAME} layer: the test would prove nothing"
    restored = set()
    for path in files:
        original = FIXTURES / name / path.resolve().relative_to(repo.resolve())
        if original.is_file() and original.read_bytes() != path.read_bytes():
            path.write_bytes(original.read_bytes())
            restored.add(path.resolve().relative_to(repo.resolve()).as_posix())
    assert restored, f"apply changed none of the {lay.NAME} files"
    gate = gates(op)[FAILS[lay.GATE]]
    assert gate["status"] == "fail", json.dumps(gate, indent=1)
    bad = {e["path"] for e in gate["evidence"] if not e["ok"]}  # type: ignore[attr-defined]
    assert any(str(b).endswith(tuple(restored)) for b in bad), (restored, bad)


def test_an_adapter_found_but_not_read_fails_g2_naming_the_layer(applied: Path, tmp_path: Path) -> None:
    """The repository's config names the adapter, which launches through a project macro:
    the layer is there and nothing reads a launch in it. G2 used to pass (it never looked
    at it); now it fails with OT452 naming the layer."""
    repo = fresh(applied, tmp_path)
    rel = "src/cam/comm_operator/pybind/moe_fused_gmm.cpp"
    adapter = repo / rel
    text = adapter.read_text()
    assert "EXEC_NPU_CMD(" in text
    wrapped = text.replace("EXEC_NPU_CMD(", "MY_EXEC_NPU_CMD(")
    adapter.write_text("#define MY_EXEC_NPU_CMD EXEC_NPU_CMD\n" + wrapped)
    config = repo / "optrace.toml"
    config.write_text(config.read_text() + f'\n[layers]\ntorch_adapter = ["{rel}"]\n')
    doc = check_json(repo / OP)
    g2 = {g["gate"]: g for g in doc["gates"]}["G2"]  # type: ignore[attr-defined]
    assert g2["status"] == "fail"
    unread = [e for e in g2["evidence"] if not e["ok"]]
    assert unread and unread[0]["path"].endswith("pybind/moe_fused_gmm.cpp")
    assert unread[0]["note"].startswith("torch_adapter not read")
    findings = [f for f in doc["findings"] if f["code"] == "OT452"]  # type: ignore[attr-defined]
    assert findings and "torch_adapter not read" in findings[0]["message"]


def test_a_layer_its_reader_refuses_fails_g2_instead_of_stopping_check(applied: Path, tmp_path: Path) -> None:
    repo = fresh(applied, tmp_path)
    adapter = repo / "src/cam/comm_operator/pybind/moe_fused_gmm.cpp"
    text = adapter.read_text()
    assert "EXEC_NPU_CMD(aclnnMoeFusedGmm," in text
    adapter.write_text(text.replace("EXEC_NPU_CMD(aclnnMoeFusedGmm,", "EXEC_NPU_CMD(aclnnMoeFusedGmm, (", 1))
    g2 = gates(repo / OP)["G2"]
    assert g2["status"] == "fail"
    bad = [e for e in g2["evidence"] if not e["ok"]]  # type: ignore[attr-defined]
    # The adapter's own fact first, at its place; the layers that find their files through
    # the launcher (wrappers, fakes, converters, callers) say they could not.
    assert bad[0]["path"].endswith("pybind/moe_fused_gmm.cpp") and "unbalanced parentheses" in bad[0]["note"]
    assert any(e["note"].startswith("graph_converters not found: OT313") for e in bad), bad


def test_mode_a_says_which_layers_the_buffer_does_not_reach(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / REPO, tmp_path / REPO)
    op = tmp_path / REPO / OP
    assert cli("apply", str(op), "--write", "--mode", "A")[0] == 0
    g2 = gates(op)["G2"]
    assert g2["status"] == "pass"
    notes = [e["note"] for e in g2["evidence"]]  # type: ignore[attr-defined]
    skipped = {lay.NAME for lay in LAYERS if lay.MODE_B_ONLY and lay.GATE == "G2"}
    assert {n.split(":")[0] for n in notes if "mode A" in n} == skipped


@pytest.mark.parametrize(("repo", "op"), [
    ("umdk_style", OP), ("msopgen_style", "moe_token_permute"), ("direct_launch", "csrc/ops/moe_gating_topk"),
])
def test_every_host_edit_lands_in_a_file_strip_visits(repo: str, op: str) -> None:
    """What a host layer edits, `owned_files` (the files strip and the rebuild from clean
    bytes visit) includes: a layer editing a file it does not own could not be stripped."""
    plan = plan_operator(FIXTURES / repo / op)
    owned = owned_files(plan)
    for lay in HOST_LAYERS:
        stray = {resolve(e.path) for e in lay.edits(plan, "B", None)} - owned
        assert not stray, f"{lay.NAME} edits files no layer owns: {sorted(map(str, stray))}"
    kernel = kernel_side(plan, "B")
    assert kernel.entry and kernel.base  # the points and scaffold, the runtime block
