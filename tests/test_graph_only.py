"""A graph-only operator (fixtures/graph_only): its build makes no aclnn API
(`ACLNNTYPE aclnn_exclude`), nothing else calls it, and graphs run it through an IR
(`REG_OP`) that does not declare profiling_data. Mode B's required output would be one no
graph gives the kernel and no caller can take: apply chooses mode A and says why, `--mode
B` is refused with the CMakeLists line, and the same operator with a generated API (or a
Python caller) is mode B again."""

from __future__ import annotations

import shutil
from pathlib import Path

from test_host_layers import cli, gates, snapshot

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OP = "pooling/moe_pool_grad_argmax"


def copy(tmp: Path) -> Path:
    repo = tmp / "graph_only"
    shutil.copytree(FIXTURES / "graph_only", repo)
    return repo


def first_line(err: str) -> str:
    """The mode line of apply's summary, its wrapped lines joined."""
    lines = err.splitlines()
    out = lines[0]
    for line in lines[1:]:
        if not line.startswith("    "):
            break
        out += " " + line.strip()
    return out


def test_mode_a_is_chosen_and_said(tmp_path: Path) -> None:
    repo = copy(tmp_path)
    code, out, err = cli("apply", str(repo / OP))
    assert code == 0, out + err
    said = first_line(err)
    assert said.startswith("moe_pool_grad_argmax: mode A: mode B is refused here: OT313 no caller can "
                           "take"), said
    assert "(`ACLNNTYPE aclnn_exclude`)" in said, said
    assert "(`REG_OP(MoePoolGradArgmax)`, op_graph/moe_pool_grad_argmax_proto.h:14)" in said, said
    assert 'this->Output("profiling_data")' in out and "ParamType(OPTIONAL)" in out, out
    assert "ParamType(REQUIRED).DataType({ge::DT_INT64})" not in out, out


def test_mode_b_asked_is_refused_with_its_place(tmp_path: Path) -> None:
    repo = copy(tmp_path)
    before = snapshot(repo)
    code, out, err = cli("apply", str(repo / OP), "--mode", "B", "--write")
    assert code == 2, out + err
    assert f"{OP}/CMakeLists.txt:6: OT313 no caller can take profiling_data" in err, err
    assert err.rstrip().endswith("; use --mode A"), err
    assert snapshot(repo) == before  # nothing written


def test_written_checked_and_stripped_to_the_byte(tmp_path: Path) -> None:
    repo = copy(tmp_path)
    before = snapshot(repo)
    assert cli("apply", str(repo / OP), "--write")[0] == 0
    assert "optrace-scaffold begin mode=A" in (repo / OP / "op_kernel/moe_pool_grad_argmax.cpp").read_text()
    assert cli("apply", str(repo / OP))[0] == 0  # nothing left to change
    assert gates(repo / OP)["G2"]["status"] == "pass"
    assert cli("strip", str(repo / OP), "--write")[0] == 0
    assert snapshot(repo) == before


def test_a_generated_api_is_mode_b(tmp_path: Path) -> None:
    """`ACLNNTYPE aclnn`: the build makes the OpDef an aclnn API, which hands the output
    out. Planned once before the change: the plan's cache must not keep the old mode."""
    repo = copy(tmp_path)
    assert "  mode: A — mode B is refused here: OT313" in cli("plan", str(repo / OP))[1]
    cmake = repo / OP / "CMakeLists.txt"
    cmake.write_text(cmake.read_text().replace("ACLNNTYPE aclnn_exclude", "ACLNNTYPE aclnn"))
    assert "  mode: B — every layer can carry it" in cli("plan", str(repo / OP))[1]
    _, _, err = cli("apply", str(repo / OP))
    assert first_line(err).startswith("moe_pool_grad_argmax: mode B: every layer can carry it"), err


def test_a_python_caller_is_mode_b(tmp_path: Path) -> None:
    """A test of the repository calling the op through torch: a caller that takes the new
    output."""
    repo = copy(tmp_path)
    tests = repo / "tests"
    tests.mkdir()
    (tests / "test_moe_pool_grad_argmax.py").write_text(
        "import torch\n\n\ndef test_it(x, grad, argmax):\n"
        "    y = torch.ops.npu.moe_pool_grad_argmax(x, grad, argmax, [2, 2])\n    assert y is not None\n")
    _, _, err = cli("apply", str(repo / OP))
    assert first_line(err).startswith("moe_pool_grad_argmax: mode B: every layer can carry it"), err
