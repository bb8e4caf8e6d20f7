"""Cross-layer apply / check / strip on whole fixture repositories.

On each fixture: `apply --write` changes every layer the operator has; `check` shows G1,
G2, G4, G5 ✓ where the layers exist (n/a otherwise) and G3 "not verifiable here"; a
second apply changes nothing; `strip` gives every byte back; the two deliberately broken
fixtures fail G2; bad input is a `file:line` message, exit 2 and nothing written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
runner = CliRunner()

# fixture -> (operator directory, files apply must change outside op_kernel, gates G1..G5)
UMDK_OP = "src/cam/comm_operator/ascend_kernels/moe_fused_gmm"
CASES = {
    "umdk_style": (UMDK_OP, [
        f"{UMDK_OP}/op_host/moe_fused_gmm.cpp",  # OpDef
        f"{UMDK_OP}/op_host/moe_fused_gmm_infer.cpp",
        f"{UMDK_OP}/op_host/moe_fused_gmm_tiling.cpp",
        f"{UMDK_OP}/op_host/optrace_moe_fused_gmm_profiling.h",  # created: sizes shared with torch
        f"{UMDK_OP}/op_api/aclnn_moe_fused_gmm.cpp",
        f"{UMDK_OP}/op_api/aclnn_moe_fused_gmm.h",
        "src/cam/comm_operator/pybind/moe_fused_gmm.cpp",  # torch adapter
        "src/cam/comm_operator/pybind/pybind.cpp",  # TORCH_LIBRARY schema
        "src/cam/comm_operator/pybind/functions.h",  # the adapter's declaration
        "build/cam/comm_operator/compile_ascend_proj.sh",
        "src/cam/examples/moe_fused_gmm_sample.py",
        "test/cam/ut/moe_fused_gmm/test_moe_fused_gmm.py",
    ], ["pass", "pass", "not verifiable here", "pass", "pass"]),
    "msopgen_style": ("moe_token_permute", [
        "moe_token_permute/op_host/moe_token_permute_def.cpp",
        "moe_token_permute/op_host/moe_token_permute_infershape.cpp",
        "moe_token_permute/op_host/optrace_moe_token_permute_profiling.h",
        "moe_token_permute/op_tiling/moe_token_permute_tiling.cpp",
        "moe_token_permute/op_api/aclnn_moe_token_permute.cpp",
        "moe_token_permute/op_api/aclnn_moe_token_permute.h",
        "build.sh",
    ], ["pass", "pass", "not verifiable here", "n/a", "n/a"]),
    "direct_launch": ("csrc/ops/moe_gating_topk", [
        "csrc/ops/moe_gating_topk/op_host/moe_gating_topk.cpp",  # EXEC_KERNEL_CMD launcher
        "csrc/ops/moe_gating_topk/op_host/optrace_moe_gating_topk_profiling.h",
        "csrc/torch_binding.cpp",  # TORCH_LIBRARY_FRAGMENT schema
        "csrc/ops.h",  # declaration
        "build.sh",
        "examples/run_moe_gating_topk.py",
        "tests/test_moe_gating_topk.py",
    ], ["pass", "pass", "not verifiable here", "pass", "pass"]),
    "l0op_style": ("norm/moe_norm_grad", [
        "norm/moe_norm_grad/op_host/moe_norm_grad_def.cpp",
        "norm/moe_norm_grad/op_host/moe_norm_grad_infershape.cpp",
        "norm/moe_norm_grad/op_host/optrace_moe_norm_grad_profiling.h",
        "norm/moe_norm_grad/op_api/moe_norm_grad.cpp",  # the l0 launch and its function
        "norm/moe_norm_grad/op_api/moe_norm_grad.h",  # the l0 prototype (defaulted)
        "norm/moe_norm_grad/op_api/aclnn_moe_norm_backward.cpp",
        "norm/moe_norm_grad/op_api/aclnn_moe_norm_backward.h",
        "build.sh",
    ], ["pass", "pass", "not verifiable here", "n/a", "n/a"]),
}


def cli(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".optrace" not in p.relative_to(root).parts}


def copy(tmp: Path, name: str) -> Path:
    repo = tmp / name
    shutil.copytree(FIXTURES / name, repo)
    return repo


def gates(op: Path) -> dict[str, dict[str, object]]:
    _, out, _ = cli("check", str(op), "--format", "json", "--no-compile")
    doc = json.loads(out)
    return {g["gate"]: g for g in doc["operators"][0]["gates"]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_apply_changes_every_layer_check_passes_and_strip_restores(tmp_path: Path, name: str) -> None:
    op_rel, layer_files, statuses = CASES[name]
    repo = copy(tmp_path, name)
    op = repo / op_rel
    before = snapshot(repo)
    code, _, err = cli("apply", str(op), "--write")
    assert code == 0, err
    after = snapshot(repo)
    changed = {k for k in after if after[k] != before.get(k)}
    missing = [f for f in layer_files if f not in changed]
    assert not missing, f"layers not changed: {missing}"
    code, out, err = cli("check", str(op))
    assert code == 0, out + err
    got = gates(op)
    assert [got[g]["status"] for g in ("G1", "G2", "G3", "G4", "G5")] == statuses, json.dumps(got, indent=1)
    assert all(e["path"] for e in got["G2"]["evidence"])  # every G2 claim has a file:line
    # A second apply changes nothing; strip gives back every byte.
    assert cli("apply", str(op), "--check")[0] == 0
    assert cli("apply", str(op))[1] == ""
    assert cli("strip", str(op), "--write")[0] == 0
    assert snapshot(repo) == before


@pytest.mark.slow  # every fixture applied in A, B and A again
@pytest.mark.parametrize("name", ["umdk_style", "direct_launch"])
def test_mode_switches_rewrite_only_what_depends_on_the_mode(tmp_path: Path, name: str) -> None:
    op_rel = CASES[name][0]
    a_repo, b_repo = copy(tmp_path / "a", name), copy(tmp_path / "b", name)
    before = snapshot(a_repo)
    assert cli("apply", str(a_repo / op_rel), "--mode", "A", "--write")[0] == 0
    fresh_a = snapshot(a_repo)
    assert cli("apply", str(b_repo / op_rel), "--write")[0] == 0  # B, then switch to A
    assert cli("apply", str(b_repo / op_rel), "--mode", "A", "--write")[0] == 0
    assert snapshot(b_repo) == fresh_a
    g = gates(b_repo / op_rel)
    assert g["G2"]["status"] == "pass" and g["G4"]["status"] == "n/a"
    assert cli("apply", str(b_repo / op_rel), "--check")[0] == 0  # A is recorded
    assert cli("apply", str(b_repo / op_rel), "--mode", "B", "--write")[0] == 0
    assert cli("strip", str(b_repo / op_rel), "--write")[0] == 0
    assert snapshot(b_repo) == before


def test_profiling_data_in_the_middle_fails_g2(tmp_path: Path) -> None:
    op = copy(tmp_path, "broken_output_order") / "ops" / "moe_mid_profile"
    code, out, err = cli("check", str(op), "--no-compile")
    assert code == 1
    # The failing evidence under its gate; the finding first, on stderr.
    assert "ops/moe_mid_profile/op_host/moe_mid_profile.cpp:35: OpDef: profiling_data is output 2 of 3" in out
    assert "OT452" in err and "OT452" not in out
    assert gates(op)["G2"]["status"] == "fail"


def test_a_stale_aclnn_wrapper_fails_g2_and_apply_repairs_it(tmp_path: Path) -> None:
    op = copy(tmp_path, "stale_aclnn") / "ops" / "moe_stale_wrapper"
    code, out, _ = cli("check", str(op), "--no-compile")
    assert code == 1
    assert "op_api/aclnn_moe_stale_wrapper.cpp:13: aclnnInnerMoeStaleWrapperGetWorkspaceSize call has no " \
           "profiling output" in out
    assert "op_api/aclnn_moe_stale_wrapper.h:10:" in out
    assert cli("apply", str(op), "--write")[0] == 0
    assert gates(op)["G2"]["status"] == "pass"


def test_sarif_carries_every_gate_with_its_kind(tmp_path: Path) -> None:
    op = copy(tmp_path, "stale_aclnn") / "ops" / "moe_stale_wrapper"
    code, out, _ = cli("check", str(op), "--no-compile", "--format", "sarif")
    assert code == 1
    results = json.loads(out)["runs"][0]["results"]
    kinds = {r["properties"]["gate"]: r["kind"] for r in results if "properties" in r}
    assert kinds == {"G1": "notApplicable", "G2": "fail", "G3": "review", "G4": "notApplicable",
                     "G5": "notApplicable"}
    g2 = next(r for r in results if r.get("properties", {}).get("gate") == "G2")
    assert g2["level"] == "error" and g2["locations"][0]["physicalLocation"]["region"]["startLine"] >= 1


def test_an_operator_that_is_not_instrumented_has_only_na_gates(tmp_path: Path) -> None:
    op = copy(tmp_path, "direct_launch") / CASES["direct_launch"][0]
    code, out, _ = cli("check", str(op))
    assert code == 0 and "not instrumented" in out
    assert {g["status"] for g in gates(op).values()} == {"n/a"}


# --- bad input: file:line, exit 2, nothing written in any layer -------------------------------


@pytest.mark.parametrize(("rel", "old", "new", "code", "line"), [
    (f"{UMDK_OP}/op_host/moe_fused_gmm.cpp", 'this->Output("output")', "this->Output(kOutputName)",
     "OT310", 47),
    ("src/cam/comm_operator/pybind/pybind.cpp", "int global_bs=0) -> (Tensor, Tensor)",
     "int global_bs=0 -> (Tensor, Tensor)", "OT311", 15),
    ("src/cam/examples/moe_fused_gmm_sample.py", "def make_inputs(rank, args):",
     "def make_inputs(rank, args)", "OT312", 29),
])
def test_bad_input_is_reported_and_nothing_is_written(tmp_path: Path, rel: str, old: str, new: str, code: str,
                                                      line: int) -> None:
    repo = copy(tmp_path, "umdk_style")
    path = repo / rel
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    before = snapshot(repo)
    exit_code, _, err = cli("apply", str(repo / UMDK_OP), "--write")
    assert exit_code == 2
    assert f"{rel}:{line}: {code} " in err.replace(str(repo) + "/", "")
    assert snapshot(repo) == before


# --- a registration file shared by two operators ------------------------------------------------


def _two_ops(tmp: Path) -> Path:
    root = tmp / "repo"
    (root / "optrace.toml").parent.mkdir(parents=True)
    (root / "optrace.toml").write_text("")
    for op in ("op_one", "op_two"):
        kdir = root / "ops" / op / "op_kernel"
        kdir.mkdir(parents=True)
        (kdir / f"{op}.cpp").write_text(
            f'extern "C" __global__ __aicore__ void {op}(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
            "GM_ADDR tiling)\n{\n    AscendC::SyncAll();\n}\n")
        (root / "torch" / f"{op}.cpp").parent.mkdir(exist_ok=True)
        (root / "torch" / f"{op}.cpp").write_text(
            f"std::tuple<at::Tensor, at::Tensor> {op}_impl(const at::Tensor &x)\n{{\n"
            f"    EXEC_KERNEL_CMD({op}, 8, x, x, workspace, tiling);\n    return {{x, x}};\n}}\n")
    (root / "torch" / "reg.cpp").write_text(
        'TORCH_LIBRARY(lib, m)\n{\n    m.def("op_one(Tensor x) -> (Tensor, Tensor)");\n'
        '    m.def("op_two(Tensor x) -> (Tensor, Tensor)");\n}\n')
    (root / "sample.py").write_text("import torch\n\n\ndef run(x, rank):\n"
                                    "    a, b = torch.ops.lib.op_one(x)\n"
                                    "    c, d = torch.ops.lib.op_two(a)\n    return d\n")
    return root


def test_operators_sharing_files_keep_each_others_changes(tmp_path: Path) -> None:
    root = _two_ops(tmp_path)
    before = snapshot(root)
    reg, sample = root / "torch" / "reg.cpp", root / "sample.py"
    one, two = root / "ops" / "op_one", root / "ops" / "op_two"
    assert cli("apply", str(one), "--write")[0] == 0
    assert cli("apply", str(two), "--write")[0] == 0
    assert reg.read_text().count("optrace-str") == 4
    text = sample.read_text()
    assert "a, b, profiling_data = torch.ops.lib.op_one(x)" in text
    assert "c, d, profiling_data = torch.ops.lib.op_two(a)" in text
    assert text.count("import os as _optrace_os") == 1
    assert cli("apply", str(one), "--check")[0] == 0 and cli("apply", str(two), "--check")[0] == 0
    assert gates(one)["G4"]["status"] == "pass" and gates(two)["G4"]["status"] == "pass"
    assert cli("apply", str(one), "--mode", "A", "--write")[0] == 0  # op_one's parts only
    assert 'm.def("op_one(Tensor x) -> (Tensor, Tensor)");' in reg.read_text()
    assert reg.read_text().count("optrace-str") == 2
    assert "c, d, profiling_data = torch.ops.lib.op_two(a)" in sample.read_text()
    assert "a, b = torch.ops.lib.op_one(x)" in sample.read_text()
    assert cli("apply", str(two), "--check")[0] == 0
    assert cli("strip", str(two), "--write")[0] == 0
    assert "profiling_data" not in sample.read_text()
    assert cli("strip", str(one), "--write")[0] == 0
    assert snapshot(root) == before


def test_one_torch_op_launching_two_instrumented_kernels_is_refused(tmp_path: Path) -> None:
    root = _two_ops(tmp_path)
    (root / "torch" / "op_two.cpp").unlink()
    (root / "torch" / "op_one.cpp").write_text(
        "std::tuple<at::Tensor, at::Tensor> op_one_impl(const at::Tensor &x)\n{\n"
        "    EXEC_KERNEL_CMD(op_one, 8, x, x, workspace, tiling);\n"
        "    EXEC_KERNEL_CMD(op_two, 8, x, x, workspace, tiling);\n    return {x, x};\n}\n")
    assert cli("apply", str(root / "ops" / "op_one"), "--write")[0] == 0
    before = snapshot(root)
    code, _, err = cli("apply", str(root / "ops" / "op_two"), "--write")
    assert code == 2 and "torch/op_one.cpp:4: OT313 `op_one_impl` also launches `op_one`" in err
    assert snapshot(root) == before


def test_a_registered_wrapper_grows_and_fails_g2_when_it_keeps_the_old_arity(tmp_path: Path) -> None:
    root = _two_ops(tmp_path)
    adapter = root / "torch" / "op_one.cpp"
    adapter.write_text(adapter.read_text() + (
        "std::tuple<at::Tensor, at::Tensor> op_one_autograd(const at::Tensor &x)\n{\n"
        "    return op_one_impl(x);\n}\n"
        "TORCH_LIBRARY_IMPL(lib, AutogradPrivateUse1, m)\n{\n    m.impl(\"op_one\", &op_one_autograd);\n}\n"))
    op = root / "ops" / "op_one"
    assert cli("apply", str(op), "--write")[0] == 0
    g2 = gates(op)["G2"]
    assert g2["status"] == "pass"  # apply grew the wrapper (codemods/autograd_wrappers.py)
    grown_note = "`op_one_autograd` (registered for the op) returns 3 tensor(s)"
    assert any(e["note"] == grown_note for e in g2["evidence"])
    grown = "std::tuple<at::Tensor, at::Tensor/*optrace<*/, at::Tensor/*>optrace*/> op_one_autograd"
    old = "std::tuple<at::Tensor, at::Tensor> op_one_autograd"
    adapter.write_text(adapter.read_text().replace(grown, old))  # reverted by hand
    g2 = gates(op)["G2"]
    assert g2["status"] == "fail"
    note = "`op_one_autograd` (registered for the op) returns 2 tensor(s), the launcher returns 3"
    assert any(note in str(e["note"]) for e in g2["evidence"])
