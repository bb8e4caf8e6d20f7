"""Issue 14 §1: `[rules] modules` in a repository's config are code execution.

A cloned repository names a module (one it ships itself, or one installed on the
machine) in `optrace.toml` or `pyproject.toml`; each module records that it was imported
by writing a marker file. Without the user's trust nothing is imported and the plan says
what it skipped (OT005, `path:line`); `--trust-config` or the user-level config listing
the repository trusts it; a module the current directory holds is never imported under
`python -m optrace`; a trusted module that is missing or has no rules is `OT004` at
`path:line`, exit 2, no traceback; a repository cannot trust itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine.config import config_trust_flag, load_config, trusting_config, user_config_path

KERNEL = (
    'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling)\n'
    "{\n    AscendC::SyncAll();\n}\n"
)
RULE_MODULE = '''
import pathlib
pathlib.Path({marker!r}).write_text("imported")
from optrace.engine.diagnostics import Severity
from optrace.rules.base import Rule


class TeamRule(Rule):
    code = "OT950"
    name = "team-rule"

    def apply(self, ctx):
        ctx.report("the team rule ran", None, Severity.WARNING)


RULES = [TeamRule]
'''


def cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.stderr
    return res.exit_code, res.stdout, res.stderr


def make_repo(tmp: Path, config: str, name: str = "clone", pyproject: bool = False) -> tuple[Path, Path]:
    repo = tmp / name
    (repo / "demo_op" / "op_kernel").mkdir(parents=True)
    (repo / "demo_op" / "op_kernel" / "demo_op.cpp").write_text(KERNEL)
    if pyproject:
        (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.optrace.rules]\n" + config)
        (repo / ".git").mkdir()
    else:
        (repo / "optrace.toml").write_text("# the clone's config\n[rules]\n" + config)
    return repo.resolve(), (repo / "demo_op").resolve()


def module(directory: Path, name: str, marker: Path, text: str | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(text if text is not None else RULE_MODULE.format(marker=str(marker)))
    sys.modules.pop(name, None)
    return path


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state_home: Path) -> Path:
    """A directory on sys.path standing for the installed packages (outside any repo)."""
    directory = tmp_path / "site-packages"
    directory.mkdir()
    monkeypatch.syspath_prepend(str(directory))
    return directory


def test_an_untrusted_config_imports_nothing_and_the_plan_says_what_it_skipped(
    tmp_path: Path, site: Path
) -> None:
    marker = tmp_path / "imported"
    module(site, "team_rules_a", marker)  # installed, and named by the clone
    _repo, op = make_repo(tmp_path, 'modules = ["team_rules_a"]\n')
    code, out, err = cli("plan", str(op))
    assert code == 0, err
    assert "optrace.toml:3: OT005 rule modules not loaded: team_rules_a" in err
    assert "--trust-config" in err and str(user_config_path()) in err
    assert "OT005" in out  # in the plan itself too
    assert not marker.exists() and "the team rule ran" not in err
    # apply, strip and check import nothing either, with or without --write.
    for args in (("apply", str(op)), ("apply", str(op), "--write"), ("check", str(op), "--no-compile"),
                 ("strip", str(op), "--write")):
        assert cli(*args)[0] in (0, 1)
        assert not marker.exists(), args


def test_trust_config_imports_it_for_that_command_only(tmp_path: Path, site: Path) -> None:
    marker = tmp_path / "imported"
    module(site, "team_rules_b", marker)
    _repo, op = make_repo(tmp_path, 'modules = ["team_rules_b"]\n')
    code, _, err = cli("plan", str(op), "--trust-config")
    assert code == 0 and "OT950 the team rule ran" in err and marker.exists()
    assert not config_trust_flag()  # off again once the command ended
    code, _, err = cli("plan", str(op))
    assert "OT005" in err and "the team rule ran" not in err


def test_trust_config_reaches_the_worker_processes(tmp_path: Path, site: Path) -> None:
    module(site, "team_rules_c", tmp_path / "imported")
    ops = [make_repo(tmp_path, 'modules = ["team_rules_c"]\n', name=f"clone{i}")[1] for i in range(2)]
    code, _, err = cli("plan", *map(str, ops), "--trust-config", "-j", "2")
    assert code == 0 and err.count("OT950 the team rule ran") == 2, err


@pytest.mark.parametrize("where", ["listed", "parent-listed", "other-listed", "config-inside-repo"])
def test_the_user_level_config_trusts_listed_repositories(
    tmp_path: Path, site: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    marker = tmp_path / "imported"
    module(site, "team_rules_d", marker)
    repo, op = make_repo(tmp_path, 'modules = ["team_rules_d"]\n')
    listed = {"listed": repo, "parent-listed": tmp_path, "other-listed": tmp_path / "elsewhere",
              "config-inside-repo": repo}[where]
    if where == "config-inside-repo":  # the clone points the user config into itself
        monkeypatch.setenv("XDG_CONFIG_HOME", str(repo / ".config"))
    user = user_config_path()
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text(f'[trust]\nrepositories = ["{listed}"]\n')
    code, _, err = cli("plan", str(op))
    trusted = where in ("listed", "parent-listed")
    assert code == 0, err
    assert ("the team rule ran" in err) == trusted and marker.exists() == trusted
    assert ("OT005" in err) != trusted


def test_a_repository_cannot_trust_itself(tmp_path: Path, site: Path) -> None:
    repo, op = make_repo(tmp_path, 'modules = ["team_rules_e"]\n')
    with open(repo / "optrace.toml", "a") as handle:
        handle.write(f'[trust]\nrepositories = ["{repo}"]\n')
    code, _, err = cli("plan", str(op))
    assert code == 2 and "optrace.toml:4: OT003 `trust` is the user's to set" in err


def test_pyproject_modules_are_skipped_with_their_line(tmp_path: Path, site: Path) -> None:
    marker = tmp_path / "imported"
    module(site, "team_rules_f", marker)
    _repo, op = make_repo(tmp_path, 'modules = ["team_rules_f"]\n', pyproject=True)
    code, _, err = cli("plan", str(op))
    assert code == 0 and "pyproject.toml:5: OT005" in err and not marker.exists()


BROKEN = {
    "missing": (None, "no such module on the installed path"),
    "no-rules": ("X = 1\n", "has no RULES list"),
    "empty-rules": ("RULES = []\n", "has no RULES list"),
    "not-rules": ("RULES = ['OT999']\n", "RULES holds something that is not an optrace Rule class"),
    "raises": ("raise RuntimeError('boom at import')\n", "cannot be imported (RuntimeError: boom at import)"),
    "syntax": ("def (:\n", "cannot be imported (SyntaxError"),
    "dotted-missing": (None, "cannot be imported (ModuleNotFoundError"),
}


@pytest.mark.parametrize("kind", list(BROKEN))
def test_a_trusted_module_that_cannot_give_rules_is_ot004_with_its_line(
    tmp_path: Path, site: Path, kind: str
) -> None:
    text, why = BROKEN[kind]
    name = f"team_rules_{kind.replace('-', '_')}"
    if text is not None:
        module(site, name, tmp_path / "imported", text)
    if kind == "dotted-missing":
        name = "no_such_package.rules"
    repo, op = make_repo(tmp_path, f'disable = []\nmodules = ["{name}"]\n')
    for args in (("plan", str(op)), ("apply", str(op), "--write")):
        code, out, err = cli(*args, "--trust-config")
        assert code == 2, out + err
        assert f"{repo / 'optrace.toml'}:4: OT004 rule module `{name}`: {why}" in err
    assert not (repo / ".optrace").exists()  # nothing written


def test_load_config_skips_without_trust_and_checks_with_it(tmp_path: Path, site: Path) -> None:
    marker = tmp_path / "imported"
    module(site, "team_rules_g", marker)
    repo, op = make_repo(tmp_path, 'modules = ["team_rules_g"]\n')
    cfg = load_config(repo, op)
    assert cfg.rule_modules == () and cfg.skipped_rule_modules == ("team_rules_g",)
    assert [d.code for d in cfg.diagnostics] == ["OT005"] and not marker.exists()
    with trusting_config():
        cfg = load_config(repo, op)
    assert cfg.rule_modules == ("team_rules_g",) and marker.exists() and not config_trust_flag()


# --- the current directory under `python -m optrace` -------------------------------------------


def run_module(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "optrace", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300, check=False)


def test_python_m_optrace_never_imports_from_the_current_directory(tmp_path: Path, state_home: Path) -> None:
    """The clone ships `evil_rules.py` (named by its config) and a `typer.py` shadowing a
    dependency; the user runs `python -m optrace` inside it, even with --trust-config."""
    marker = tmp_path / "imported"
    repo, _op = make_repo(tmp_path, 'modules = ["evil_rules"]\n')
    module(repo, "evil_rules", marker)
    (repo / "typer.py").write_text(f"import pathlib; pathlib.Path({str(marker)!r}).write_text('typer')\n")
    done = run_module(repo, "plan", "demo_op")
    assert done.returncode == 0, done.stderr
    assert "OT005 rule modules not loaded: evil_rules" in done.stderr
    done = run_module(repo, "plan", "demo_op", "--trust-config")
    assert done.returncode == 2 and "OT004 rule module `evil_rules`: no such module" in done.stderr
    assert "Traceback" not in done.stderr
    assert not marker.exists()


def test_the_console_script_skips_a_module_the_clone_ships(tmp_path: Path, state_home: Path) -> None:
    script = Path(sys.executable).with_name("optrace")
    if not script.exists():
        pytest.skip("the optrace console script is not installed")
    marker = tmp_path / "imported"
    repo, _op = make_repo(tmp_path, 'modules = ["evil_rules"]\n')
    module(repo, "evil_rules", marker)
    done = subprocess.run([str(script), "plan", "demo_op"], cwd=repo, capture_output=True, text=True,
                          timeout=300, check=False, env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0 and "OT005" in done.stderr, done.stderr
    assert not marker.exists()
