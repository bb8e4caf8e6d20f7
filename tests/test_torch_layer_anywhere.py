"""The torch layer is found wherever it lives: fixture `scattered_torch` —
the launcher in a sibling operator's directory, the torch op named apart from the kernel
(`npu_gating_topk` launching `moe_gating_topk`), its schema in `torch_binding.cpp` and its
Meta kernel registered in `torch_binding_meta.cpp`. Not "no torch layer": every piece is
found, edited, checked (G2 / G4 with evidence in each file) and stripped."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from optrace.cli.app import app

runner = CliRunner()
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "scattered_torch"
OP_REL = "csrc/ops/moe_gating_topk"
LAUNCHER = "csrc/ops/moe_token_count/op_host/gating_topk_launch.cpp"


def _copy(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)
    return repo


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".optrace" not in p.parts}


def _gates(op: Path) -> dict[str, dict[str, object]]:
    res = runner.invoke(app, ["check", str(op), "--no-compile", "--format", "json"])
    return {g["gate"]: g for g in json.loads(res.stdout)["operators"][0]["gates"]}


def test_the_plan_finds_every_piece_under_the_torch_name() -> None:
    res = runner.invoke(app, ["plan", str(FIXTURE / OP_REL), "--format", "json"])
    assert res.exit_code == 0, res.stderr
    op = json.loads(res.stdout)["operators"][0]
    files = {key: [f["file"] for f in found] for key, found in op["layers"].items()}
    assert files["torch_adapter"] == [LAUNCHER]  # in the sibling operator's op_host/
    assert files["registration"] == ["csrc/torch_binding.cpp", "csrc/torch_binding_meta.cpp"]
    assert files["python_callers"] == ["bench/bench_gating.py", "examples/run_moe_gating_topk.py",
                                       "python/fused_ops/router.py", "tests/test_moe_gating_topk.py"]
    assert files["python_fakes"] == ["python/fused_ops/abstract_impls.py"]
    assert op["mode"] == "B"
    # The sibling operator's own launcher is not this operator's.
    assert all("moe_token_count.cpp" not in f for fs in files.values() for f in fs)


def test_apply_check_strip_reach_every_file_of_the_torch_layer(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    before = _tree(repo)
    op = repo / OP_REL
    res = runner.invoke(app, ["apply", str(op), "--write"])
    assert res.exit_code == 0, res.stderr
    after = _tree(repo)
    changed = {k for k in before if after.get(k) != before[k]}
    assert {LAUNCHER, "csrc/torch_binding.cpp", "csrc/torch_binding_meta.cpp", "csrc/ops.h",
            "examples/run_moe_gating_topk.py", "tests/test_moe_gating_topk.py",
            "python/fused_ops/abstract_impls.py"} <= changed
    # The sibling operator's own files and registrations are left alone.
    assert after["csrc/ops/moe_token_count/op_host/moe_token_count.cpp"] == \
        before["csrc/ops/moe_token_count/op_host/moe_token_count.cpp"]
    schema = after["csrc/torch_binding.cpp"].decode()
    assert '-> (Tensor, Tensor"/*optrace-str<*/", Tensor"/*>optrace-str*/")");' in schema
    assert "npu_token_count(Tensor expert_ids, int expert_num) -> Tensor\")" in schema
    meta = after["csrc/torch_binding_meta.cpp"].decode()
    assert ".device(at::kMeta));  // optrace" in meta
    assert "at::Tensor NpuTokenCountMeta(" in meta  # the other op's Meta kernel: unchanged
    gates = _gates(op)
    assert gates["G2"]["status"] == "pass"
    g2_files = {e["path"] for e in gates["G2"]["evidence"]}  # type: ignore[union-attr]
    assert {LAUNCHER, "csrc/torch_binding.cpp", "csrc/torch_binding_meta.cpp"} <= g2_files
    assert gates["G4"]["status"] == "pass" and gates["G5"]["status"] == "pass"
    assert runner.invoke(app, ["apply", str(op), "--check"]).exit_code == 0
    assert runner.invoke(app, ["strip", str(op), "--write"]).exit_code == 0
    assert _tree(repo) == before


def test_a_meta_kernel_left_at_the_old_arity_fails_g2(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    op = repo / OP_REL
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    meta = repo / "csrc" / "torch_binding_meta.cpp"
    text = meta.read_text()
    # the grown type, wherever the review width breaks it
    grown = re.compile(r"std::tuple<at::Tensor, at::Tensor/\*optrace<\*/,\s*at::Tensor/\*>optrace\*/>"
                       r" NpuGatingTopkMeta")
    assert grown.search(text)
    meta.write_text(grown.sub("std::tuple<at::Tensor, at::Tensor> NpuGatingTopkMeta", text))
    g2 = _gates(op)["G2"]
    assert g2["status"] == "fail"
    bad = [e for e in g2["evidence"] if not e["ok"]]  # type: ignore[union-attr]
    assert [e["path"] for e in bad] == ["csrc/torch_binding_meta.cpp"]
    assert "`NpuGatingTopkMeta` (registered for the op) returns 2 tensor(s)" in bad[0]["note"]
