"""apply / strip on every fixture operator: idempotent, reversible to the byte, valid C++."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine.cpp import new_parser, parse_file
from optrace.engine.source import DEFAULT_QUALIFIERS, SourceFile, normalise

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OPERATORS = {
    "umdk_style": "src/cam/comm_operator/ascend_kernels/moe_fused_gmm",
    "umdk_style/gate": "src/cam/comm_operator/ascend_kernels/moe_gate_bias",
    "msopgen_style": "moe_token_permute",
    "direct_launch": "csrc/ops/moe_gating_topk",
    "l0op_style": "norm/moe_norm_grad",
    "graph_only": "pooling/moe_pool_grad_argmax",
}
runner = CliRunner()


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def copy_repo(tmp: Path, name: str) -> tuple[Path, Path]:
    repo_name = name.split("/")[0]
    repo = tmp / repo_name
    shutil.copytree(FIXTURES / repo_name, repo)
    return repo, repo / OPERATORS[name]


def repository(root: Path) -> dict[str, bytes]:
    """The repository's files, without optrace's own (`.optrace/`: journal locks)."""
    return {k: v for k, v in snapshot(root).items() if not k.startswith(".optrace/")}


def cli(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def error_count(path: Path) -> int:
    src = SourceFile(path, path.read_bytes())
    src.text = normalise(src.raw, (*DEFAULT_QUALIFIERS, "CATLASS_DEVICE"))
    return len(parse_file(new_parser(), src).error_lines)


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_apply_is_idempotent_and_strip_restores_every_byte(tmp_path: Path, name: str) -> None:
    repo, op = copy_repo(tmp_path, name)
    before = snapshot(repo)
    code, diff, err = cli("apply", str(op))
    assert code == 0, err
    assert diff.startswith("diff --git") and snapshot(repo) == before  # default: diff only
    code, _, err = cli("apply", str(op), "--check")
    assert code == 1 and "OT300" in err
    code, _out, err = cli("apply", str(op), "--write")
    assert code == 0, err
    after = snapshot(repo)
    assert after != before
    changed = [k for k in after if after[k] != before.get(k)]
    assert any("op_kernel" in k for k in changed)
    # Inserted code parses: no file gains tree-sitter errors.
    for rel in changed:
        if rel.endswith((".h", ".cpp")) and rel in before:
            orig = tmp_path / "orig.h"
            orig.write_bytes(before[rel])
            assert error_count(repo / rel) <= error_count(orig), rel
    # A second apply changes nothing.
    code, _, err = cli("apply", str(op), "--check")
    assert code == 0, err
    assert cli("apply", str(op))[1] == ""
    # strip gives back the original bytes (and deletes what apply created).
    code, _, err = cli("strip", str(op), "--check")
    assert code == 1
    code, _, err = cli("strip", str(op), "--write")
    assert code == 0, err
    restored = {k: v for k, v in snapshot(repo).items() if not k.startswith(".optrace")}
    assert restored == before
    assert cli("strip", str(op), "--check")[0] == 0


def test_patch_applies_with_git_and_equals_write(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    repo, op = copy_repo(tmp_path / "a", "umdk_style")
    patch = tmp_path / "apply.patch"
    code, _, err = cli("apply", str(op), "--patch", str(patch))
    assert code == 0, err
    before = snapshot(repo)
    assert snapshot(repo) == before  # --patch writes only the patch
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "apply", "--check", str(patch)], cwd=repo, check=True)
    subprocess.run(["git", "apply", str(patch)], cwd=repo, check=True)
    by_patch = {k: v for k, v in snapshot(repo).items() if not k.startswith(".git")}
    repo2, op2 = copy_repo(tmp_path / "b", "umdk_style")
    assert cli("apply", str(op2), "--write")[0] == 0
    by_write = {k: v for k, v in snapshot(repo2).items() if not k.startswith(".optrace")}
    assert by_patch == by_write


def test_hand_written_points_survive_strip(tmp_path: Path) -> None:
    _repo, op = copy_repo(tmp_path, "direct_launch")
    kernel = op / "op_kernel" / "moe_gating_topk_kernel.h"
    text = kernel.read_text()
    marker = "    __aicore__ inline void Process()\n    {\n"
    assert marker in text
    hand = text.replace(marker, marker + '        MoeTracing(TRACE_POINT("hand-made", "B"));\n'
                        '        MoeTracing(TRACE_POINT("hand-made", "E"));\n', 1)
    kernel.write_text(hand)
    assert cli("apply", str(op), "--write")[0] == 0
    assert cli("strip", str(op), "--write")[0] == 0
    assert kernel.read_text() == hand



@pytest.mark.parametrize("name", ["kernel header", "python caller"])
def test_a_line_of_the_users_own_ending_in_the_mark_is_refused_not_stripped(tmp_path: Path,
                                                                              name: str) -> None:
    """A line someone wrote that ends in optrace's mark (`  // optrace`, `  # optrace`)
    would pass apply's proof (strip of the output equals strip of the tree as it is) and
    be deleted by the next strip. apply refuses it on an operator not instrumented yet,
    naming the line, and writes nothing; on an instrumented tree the marks are optrace's."""
    repo, op = copy_repo(tmp_path, "direct_launch")
    if name == "python caller":
        target = next(p for p in sorted(repo.rglob("*.py")) if "moe_gating_topk" in p.read_text())
        lines = target.read_text().splitlines(keepends=True)
        at = next(i for i, ln in enumerate(lines) if ln.strip().startswith("import "))
        lines[at] = lines[at].rstrip("\n") + "  # optrace\n"
    else:
        target = op / "op_kernel" / "moe_gating_topk_kernel.h"
        lines = target.read_text().splitlines(keepends=True)
        at = next(i for i, ln in enumerate(lines) if ln.rstrip().endswith(";"))
        lines[at] = lines[at].rstrip("\n") + "  // optrace\n"
    target.write_text("".join(lines))
    before = snapshot(repo)
    code, _, err = cli("apply", str(op), "--write")
    assert code == 2, err
    assert f"{target.name}:{at + 1}: OT048" in err and "strip would delete it" in err, err
    assert snapshot(repo) == before
    # Changed to a comment of its own, the line is the user's and stays through both.
    target.write_text("".join(lines).replace("  // optrace\n", "  // optrace: seen\n")
                      .replace("  # optrace\n", "  # optrace: seen\n"))
    kept = target.read_bytes()
    assert cli("apply", str(op), "--write")[0] == 0
    assert cli("strip", str(op), "--write")[0] == 0
    assert target.read_bytes() == kept


def test_another_operators_file_in_this_ones_folder_keeps_its_edits(tmp_path: Path) -> None:
    """fixtures/scattered_torch keeps `moe_gating_topk`'s launch file in `moe_token_count`'s
    op_host. With the first instrumented, stripping the second (not instrumented) changes
    nothing, and applying it is not refused for the first one's marks; both stripped, the
    repository is its bytes again."""
    repo = tmp_path / "scattered_torch"
    shutil.copytree(FIXTURES / "scattered_torch", repo)

    first, second = repo / "csrc/ops/moe_gating_topk", repo / "csrc/ops/moe_token_count"
    original = repository(repo)
    assert cli("apply", str(first), "--write")[0] == 0
    launch = second / "op_host" / "gating_topk_launch.cpp"
    assert b"  // optrace" in launch.read_bytes()
    instrumented = repository(repo)
    code, diff, err = cli("strip", str(second), "--write")
    assert code == 0 and repository(repo) == instrumented, (diff, err)
    code, _, err = cli("apply", str(second), "--write")
    assert code == 0, err
    assert cli("strip", str(second), "--write")[0] == 0
    assert repository(repo) == instrumented
    assert cli("strip", str(first), "--write")[0] == 0
    assert repository(repo) == original

def test_modes_are_exclusive_and_recorded(tmp_path: Path) -> None:
    _repo, op = copy_repo(tmp_path, "direct_launch")
    code, _, err = cli("apply", str(op), "--write", "--check")
    assert code == 2 and "mutually exclusive" in err
    assert cli("apply", str(op), "--mode", "A", "--write")[0] == 0
    entry = op / "op_kernel" / "moe_gating_topk.cpp"
    assert "optrace-scaffold begin mode=A" in entry.read_text()
    assert cli("apply", str(op), "--check")[0] == 0  # re-apply without --mode keeps A
    code, diff, _ = cli("apply", str(op), "--mode", "B")
    assert code == 0 and "+// optrace-scaffold begin mode=B" in diff


def test_a_statement_that_does_not_parse_moves_its_region_to_the_parent(tmp_path: Path) -> None:
    """The call region at the broken statement cannot be placed: its time is counted in
    the kernel entry's (OT025, naming both lines), the other call's region is placed, and
    apply, check and strip go through."""
    repo = tmp_path / "repo"
    kernel = repo / "demo_op" / "op_kernel"
    kernel.mkdir(parents=True)
    (repo / "optrace.toml").touch()
    src = kernel / "demo_op.cpp"
    src.write_text(
        "__aicore__ inline void SendTokens(int n) {\n"
        "    for (uint32_t tokenIdx = 0; tokenIdx < n; ++tokenIdx) { SyncAll(); }\n"
        "}\n"
        'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR workspace) {\n'
        "    SendTokens(((1 + );\n"
        "    SendTokens(2);\n"
        "}\n"
    )
    before = repository(repo)
    code, out, err = cli("plan", str(repo / "demo_op"))
    assert code == 0, err
    assert "demo_op.cpp:5: OT025" in " ".join((out + err).split()), out + err
    code, _, err = cli("apply", str(repo / "demo_op"), "--write")
    assert code == 0 and "OT302" not in err, err
    code, out, err = cli("check", str(repo / "demo_op"), "--no-compile")
    assert code == 0, out + err
    code, _, err = cli("strip", str(repo / "demo_op"), "--write")
    assert code == 0, err
    assert {k: v for k, v in repository(repo).items() if not k.startswith(".optrace/")} == before
