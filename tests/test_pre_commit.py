"""The `optrace-check` pre-commit hook: an optrace subcommand
given the staged files as arguments — no shell, so no file name can break it or run
anything — that checks the operators those files belong to, host-layer files included."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.pipeline.pre_commit import operators_for_files

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "direct_launch"
OP_REL = "csrc/ops/moe_gating_topk"
runner = CliRunner()

# Names a shell would split, expand, run or take as an option.
HOSTILE = [
    "has space.h",
    "it's \"quoted\".h",
    "$HOME.h",
    "$(touch PWNED).h",
    "`touch PWNED`;.h",
    "new\nline.h",
    "-rf.h",
    "--help.h",
    "a*b?[c].h",
]


def _hook() -> dict[str, object]:
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (pre-commit, in the [test] extra, "
                               "brings it)")
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    hook: dict[str, object] = next(h for h in hooks if h["id"] == "optrace-check")
    return hook


def test_the_hook_is_a_subcommand_not_inline_shell() -> None:
    hook = _hook()
    entry = str(hook["entry"])
    assert shlex.split(entry) == ["optrace", "pre-commit", "--"]
    assert hook["pass_filenames"] is True and hook["language"] == "python"
    for shell_syntax in ("bash", "sh -c", "$", ";", "|", "&&"):
        assert shell_syntax not in entry


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)
    return repo


def _run(repo: Path, *files: str) -> tuple[int, str, str]:
    """The hook as pre-commit runs it: its entry plus the file names, one argv each."""
    old = Path.cwd()
    os.chdir(repo)
    try:
        res = runner.invoke(app, ["pre-commit", "--no-compile", "--", *files])
    finally:
        os.chdir(old)
    return res.exit_code, res.stdout, res.stderr


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_staged_name_inside_the_operator_checks_it(tmp_path: Path, name: str) -> None:
    repo = _repo(tmp_path)
    staged = repo / OP_REL / "op_kernel" / name
    staged.write_text("// a header\n")
    code, out, err = _run(repo, f"{OP_REL}/op_kernel/{name}")
    assert code == 0, err
    assert out.count(f"{OP_REL}: not instrumented") == 1
    assert not (repo / "PWNED").exists() and not (Path.cwd() / "PWNED").exists()


@pytest.mark.parametrize("name", ["-x $(touch PWNED) ;.py", "sample 'quoted'.py", "-.py", "new\nline.py"])
def test_a_hostile_sample_name_at_the_top_maps_back_to_its_operator(tmp_path: Path, name: str) -> None:
    repo = _repo(tmp_path)
    # A sample calling the op, named to break a shell or an option parser; relative to the
    # repository root, as pre-commit passes it (so a leading `-` is the first character).
    sample = (repo / "examples" / "run_moe_gating_topk.py").read_text()
    (repo / name).write_text(sample)
    code, out, err = _run(repo, name)
    assert code == 0, err
    assert out.count(f"{OP_REL}: not instrumented") == 1
    assert not (repo / "PWNED").exists()


def test_host_layer_files_map_back_to_the_operators_whose_plans_list_them(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    for rel in ("csrc/torch_binding.cpp", "CMakeLists.txt", "tests/test_moe_gating_topk.py",
                "examples/run_moe_gating_topk.py", "python/fused_ops/abstract_impls.py"):
        staged = operators_for_files([Path(rel)], repo.resolve(), repo)
        assert staged.sorted_operators() == [(repo / OP_REL).resolve()], rel
    # Files that are no operator's layer: nothing to check, and no output at all.
    (repo / "unrelated.py").write_text("print('hello')\n")
    (repo / "notes with space.txt").write_text("x\n")
    for rel in ("README.md", "unrelated.py", "notes with space.txt", "csrc/absent.cpp"):
        assert operators_for_files([Path(rel)], repo.resolve(), repo).sorted_operators() == []
    assert _run(repo, "README.md", "unrelated.py") == (0, "", "")
    # Two files of one operator: it is checked once.
    code, out, _ = _run(repo, f"{OP_REL}/op_kernel/moe_gating_topk.cpp", "csrc/torch_binding.cpp")
    assert code == 0 and out.count(f"{OP_REL}:") == 1


def test_a_failing_operator_blocks_the_commit(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    kernel = repo / OP_REL / "op_kernel" / "moe_gating_topk.cpp"
    # A begin without its end: an error finding, so exit 1.
    kernel.write_text(kernel.read_text().replace(
        "{", "{\n    MoeTracing(TRACE_POINT(\"processing\", \"B\"));", 1))
    code, out, _ = _run(repo, "CMakeLists.txt")
    assert code == 1, out
    assert f"{OP_REL}:" in out


def test_the_installed_hook_runs_without_a_shell_on_hostile_names(tmp_path: Path) -> None:
    entry = shlex.split(str(_hook()["entry"]))
    script = Path(sys.executable).parent / entry[0]
    if not script.exists():
        pytest.skip("the optrace console script is not installed beside this Python")
    repo = _repo(tmp_path)
    names = [f"{OP_REL}/op_kernel/{n}" for n in ("-rf.h", "$(touch PWNED).h", "new\nline.h")]
    for rel in names:
        (repo / rel).write_text("// header\n")
    res = subprocess.run([str(script), *entry[1:], "--no-compile", *names, "README.md"], cwd=repo,
                         capture_output=True, text=True, check=False)
    # `--no-compile` after `--` is a file name like any other (and names no operator).
    assert res.returncode == 0, res.stderr
    assert res.stdout.count(f"{OP_REL}: not instrumented") == 1
    assert not (repo / "PWNED").exists()


# --- the README's configurations, run by pre-commit itself ----------------------------------------

README = ROOT / "README.md"


def _readme_configs() -> list[str]:
    section = README.read_text().split("### Pre-commit", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```yaml\n(.*?)```", section, re.S)


def _pre_commit() -> str:
    found = shutil.which("pre-commit", path=str(Path(sys.executable).parent)) or shutil.which("pre-commit")
    if found is None:
        pytest.skip("pre-commit is not installed (the [test] extra brings it)")
    return found


def _committed_repo(tmp_path: Path, config: str) -> Path:
    """The fixture as a git repository with `config` as its .pre-commit-config.yaml."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = _repo(tmp_path)
    (repo / ".pre-commit-config.yaml").write_text(config)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-qm", "fixture"], check=True)
    return repo


def _hook_run(repo: Path, tmp_path: Path, *files: str) -> subprocess.CompletedProcess[str]:
    """`pre-commit run --files ...` as a user runs it, optrace on PATH as installed."""
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([_pre_commit(), "run", "--files", *files], cwd=repo, env=env, capture_output=True,
                          text=True, check=False, timeout=600)


def _break(repo: Path) -> str:
    """An instrumented operator with a begin left without its end: the hook must block."""
    assert runner.invoke(app, ["apply", str(repo / OP_REL), "--write"]).exit_code == 0
    rel = f"{OP_REL}/op_kernel/moe_gating_topk.cpp"
    kernel = repo / rel
    kernel.write_text(kernel.read_text().replace("{", '{\n    MoeTracing(TRACE_POINT("unclosed", "B"));', 1))
    return rel


def test_the_readme_shows_a_config_that_runs_as_written_and_one_pinned_to_a_commit() -> None:
    local, pinned = _readme_configs()
    assert "repo: local" in local and "<" not in local
    assert re.search(r"^\s+rev: [0-9a-f]{40}$", pinned, re.M) and "<tag>" not in README.read_text()
    hook = _hook()
    for key in ("entry", "pass_filenames", "require_serial"):
        assert f"{key}: {str(hook[key]).lower() if isinstance(hook[key], bool) else hook[key]}" in local


@pytest.mark.slow
def test_the_readmes_local_config_runs_as_written(tmp_path: Path) -> None:
    repo = _committed_repo(tmp_path, _readme_configs()[0])
    kernel = f"{OP_REL}/op_kernel/moe_gating_topk.cpp"
    passed = _hook_run(repo, tmp_path, kernel)
    assert passed.returncode == 0 and "optrace check" in passed.stdout and "Passed" in passed.stdout, \
        passed.stdout + passed.stderr
    broken = _break(repo)
    blocked = _hook_run(repo, tmp_path, broken)
    assert blocked.returncode == 1, blocked.stdout
    output = blocked.stdout.split("- exit code: 1", 1)[1].strip().splitlines()
    # The error is the first line of what the hook says.
    assert output[0].startswith(f"{broken}:") and 'OT404 "unclosed" has a B and no E' in output[0], output


@pytest.mark.slow
def test_the_readmes_pinned_config_installs_this_repository_and_runs(tmp_path: Path) -> None:
    """The second form, with this checkout as the repository and its HEAD as `rev`:
    pre-commit builds its own environment from .pre-commit-hooks.yaml (pip, from the
    package index)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("this checkout is not a git repository (the pinned form needs a commit)")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    config = re.sub(r"(?m)^(\s+)rev: [0-9a-f]{40}$", rf"\g<1>rev: {head}", _readme_configs()[1])
    config = re.sub(r"(?m)^(\s+- repo: ).*$", rf"\g<1>{ROOT}", config)
    repo = _committed_repo(tmp_path, config)
    broken = _break(repo)
    blocked = _hook_run(repo, tmp_path, broken)
    assert blocked.returncode == 1 and 'OT404 "unclosed" has a B and no E' in blocked.stdout, \
        blocked.stdout + blocked.stderr
