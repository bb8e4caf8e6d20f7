"""What a new user meets first: `--version`,
`plan FILE`, help that wraps between words, and an `optrace --help` that imports none of
the heavy parsing / graph / numeric libraries."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace import __version__
from optrace.cli.app import app
from optrace.cli.check_fast import parse_fast
from optrace.cli.plan_fast import parse_fast as parse_plan

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

runner = CliRunner()


def _words(text: str) -> str:
    return " ".join(text.split())


def test_version_prints_the_package_version_and_exits_0() -> None:
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0
    assert res.stdout.strip() == f"optrace {__version__}"


def test_plan_of_a_file_says_it_is_not_a_directory(tmp_path: Path) -> None:
    source = tmp_path / "kernel.cpp"
    source.write_text("int x;\n")
    res = runner.invoke(app, ["plan", str(source)])
    assert res.exit_code == 2
    assert f"{source}: OT001 not a directory" in res.stderr
    assert "does not exist" not in res.stderr
    res = runner.invoke(app, ["plan", str(tmp_path / "absent")])
    assert res.exit_code == 2 and "OT001 operator directory does not exist" in res.stderr


def _help(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    res = subprocess.run([sys.executable, "-m", "optrace", *args, "--help"], capture_output=True,
                         text=True, env=env, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.parametrize("command", ["plan", "apply", "strip", "check", "preprocess", "pre-commit"])
def test_help_wraps_between_words_at_80_columns(command: str) -> None:
    from optrace.cli.app import app

    out = _help(command)
    assert all(len(line) <= 80 for line in out.splitlines()), out
    # Every sentence of the docstring comes out whole: the lines break only where a space
    # was (no line break kept from the source mid-sentence, no word cut).
    names = (command, command.replace("-", "_"))
    fn = next(c.callback for c in app.registered_commands
              if c.callback is not None and (c.name or c.callback.__name__) in names)
    assert _words(fn.__doc__) in _words(out)
    # Square brackets are text, not markup that swallows them.
    if command in ("plan", "apply", "check"):
        assert "([rules] modules)" in _words(out)


def test_the_command_list_breaks_no_line_mid_sentence() -> None:
    out = _help()
    commands = out.split("Commands:\n", 1)[1].splitlines()
    # One line per command: a summary never continues on a line of its own.
    assert all(re.match(r"  [a-z-]+ +\S", line) for line in commands if line.strip()), out


def test_help_imports_no_heavy_library() -> None:
    env = {**os.environ, "COLUMNS": "80"}
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "optrace", "--help"],
                         capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0
    imported = {line.rsplit("|", 1)[1].strip() for line in res.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "optrace.cli" in imported  # the measurement saw the CLI itself
    heavy = ("libcst", "networkx", "numpy", "tree_sitter", "clang", "rich.markdown", "duckdb")
    found = sorted(m for m in imported if m.split(".")[0] in heavy or m == "rich.markdown"
                   or m.startswith("rich.markdown."))
    assert found == []


README = Path(__file__).resolve().parent.parent / "README.md"


def _try_it_block() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), re.S)
    block = next(b for b in blocks if "apply $OP --write" in b)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_the_readme_try_it_writes_to_a_scratch_copy_only() -> None:
    lines = _try_it_block()
    copy = next(i for i, line in enumerate(lines) if line.startswith("cp -r fixtures/"))
    write = next(i for i, line in enumerate(lines) if "--write" in line)
    assert copy < write
    scratch = lines[copy].split()[-1]
    op = next(line for line in lines if line.startswith("OP="))
    assert op.startswith(f"OP={scratch}/") and "fixtures/" not in op
    text = README.read_text()
    assert 'pytest -m "not slow"' in text and "minutes" in text  # how long, and the quick suite


@pytest.mark.slow
def test_the_readme_try_it_runs_as_written(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parent.parent
    scratch_of = {line.split()[-1] for line in _try_it_block() if line.startswith("cp -r ")}
    script = "\n".join(_try_it_block())
    for scratch in scratch_of:
        script = script.replace(scratch, str(tmp_path / "try"))
    script = script.replace(".venv/bin/optrace", f"{sys.executable} -m optrace")
    before = {p: p.read_bytes() for p in (repo / "fixtures").rglob("*") if p.is_file()}
    res = subprocess.run(["sh", "-e", "-c", script], cwd=repo, capture_output=True, check=False)
    assert res.returncode == 0, res.stderr  # the diff carries the fixture's GBK bytes: not text
    assert "G2 output order: ✓".encode() in res.stdout
    assert {p: p.read_bytes() for p in (repo / "fixtures").rglob("*") if p.is_file()} == before


def _check_process(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "optrace", "check", *args], capture_output=True,
                          check=False, timeout=120)


def test_a_check_process_reports_in_full_and_exits_with_its_code(tmp_path: Path) -> None:
    """`check` leaves its process without the interpreter's teardown (optrace/entry.py):
    the report still reaches a pipe and a file whole, and the exit code is check's."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "msopgen_style", repo)
    op = repo / "moe_token_permute"
    assert subprocess.run([sys.executable, "-m", "optrace", "apply", str(op), "--write"],
                          capture_output=True, check=False).returncode == 0
    clean = _check_process(str(op))
    assert clean.returncode == 0, clean.stderr
    assert clean.stdout.decode().rstrip().endswith("0 error(s), 0 warning(s)")
    out = tmp_path / "report.json"
    assert _check_process(str(op), "--format", "json", "-o", str(out)).returncode == 0
    report = json.loads(out.read_text())["operators"][0]
    assert report["instrumented"] and report["points"] > 0 and report["findings"] == []
    kernel = op / "op_kernel" / "moe_token_permute.cpp"
    text = kernel.read_text()
    end = text.rindex('TRACE_POINT("processing", "E")')
    kernel.write_text(text[:end] + 'TRACE_POINT("unclosed", "B"); ' + text[end:])  # a B with no E
    broken = _check_process(str(op))
    assert broken.returncode == 1 and b"OT404" in broken.stderr, broken.stderr
    usage = _check_process()  # no operator: a usage error
    assert usage.returncode == 2 and b"Usage" in usage.stderr


@pytest.mark.parametrize(("argv", "parsed"), [
    (["a", "b"], {"op_dirs": [Path("a"), Path("b")], "fmt": "text", "jobs": None, "compile_safety": True}),
    (["a", "--format", "json", "-j", "2", "--no-compile", "--strict"],
     {"fmt": "json", "jobs": 2, "compile_safety": False, "strict": True}),
    (["--format=sarif", "--output=r.sarif", "--repo-root", "r", "a"],
     {"fmt": "sarif", "output": Path("r.sarif"), "repo_root": Path("r"), "op_dirs": [Path("a")]}),
    (["a", "--trust-config"], {"trust_config": True}),
    (["a", "--help"], None), (["a", "--format", "xml"], None), (["a", "-j", "0"], None),
    (["a", "-j", "\u00b2"], None),  # a digit int() refuses: the full CLI's usage error, not exit 3
    (["a", "-j"], None), ([], None), (["--", "a"], None), (["a", "--bogus"], None), (["a", "-oX"], None),
])
def test_check_fast_parser_takes_the_plain_spellings_only(argv: list[str],
                                                          parsed: dict[str, object] | None) -> None:
    """What the fast path does not take the full CLI parses (help, usage errors)."""
    got = parse_fast(argv)
    if parsed is None:
        assert got is None
        return
    assert got is not None
    for key, value in parsed.items():
        assert getattr(got, key) == value, key


def test_check_without_typer_reports_as_the_full_cli(tmp_path: Path) -> None:
    """`optrace check OP` runs without importing typer / click, and says what the full
    CLI says, in every format."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "msopgen_style", repo)
    op = repo / "moe_token_permute"
    assert CliRunner().invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    imports = subprocess.run([sys.executable, "-X", "importtime", "-m", "optrace", "check", str(op)],
                             capture_output=True, text=True, check=False)
    assert imports.returncode == 0
    assert not re.findall(r"\| +(typer|click)(\.|$)", imports.stderr, re.M)
    for fmt in ("text", "json", "sarif"):
        fast = _check_process(str(op), "--format", fmt, "--strict")
        full = CliRunner().invoke(app, ["check", str(op), "--format", fmt, "--strict"])
        assert fast.returncode == full.exit_code
        assert fast.stdout.decode() == full.stdout, fmt


@pytest.mark.parametrize(("argv", "parsed"), [
    (["a", "b"], {"op_dirs": [Path("a"), Path("b")], "as_json": False, "jobs": None, "no_cache": False}),
    (["a", "--format", "json", "-j", "2", "--no-cache"], {"as_json": True, "jobs": 2, "no_cache": True}),
    (["--format=text", "--repo-root", "r", "a", "--trust-config"],
     {"as_json": False, "repo_root": Path("r"), "op_dirs": [Path("a")], "trust_config": True}),
    (["a", "--help"], None), (["a", "--format", "xml"], None), (["a", "-j", "0"], None), (["a", "-j"], None),
    (["a", "-j", "\u00b2"], None),
    ([], None), (["--", "a"], None), (["a", "--bogus"], None),
    (["a", "-o", "plan.txt"], None), (["a", "--graph", "g.dot"], None),  # they always plan: the full CLI
])
def test_plan_fast_parser_takes_the_plain_spellings_only(argv: list[str],
                                                         parsed: dict[str, object] | None) -> None:
    got = parse_plan(argv)
    if parsed is None:
        assert got is None
        return
    assert got is not None
    for key, value in parsed.items():
        assert getattr(got, key) == value, key


def test_plan_without_typer_prints_as_the_full_cli(tmp_path: Path) -> None:
    """`optrace plan OP` runs without importing typer / click — planned or answered from
    the user cache — and prints what the full CLI prints, stdout, stderr and exit code,
    for one operator and several, text and JSON; a usage error is the full CLI's."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "shared_norm", repo)
    (repo / ".git").mkdir()
    ops = [str(p.parent.parent) for p in sorted(repo.glob("norm/*/op_kernel/*.cpp"))]
    assert len(ops) == 2
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def fast(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-X", "importtime", "-m", "optrace", "plan", *args],
                              capture_output=True, text=True, check=False, timeout=300, env=env)

    for args in ([ops[0]], [ops[0], "--format", "json"], [*ops, "--format=json"], [*ops]):
        for _ in range(2):  # planned, then from the cache
            got = fast(*args)
            assert not re.findall(r"\| +(typer|click)(\.|$)", got.stderr, re.M), args
            full = CliRunner().invoke(app, ["plan", *args, "--no-cache"])
            assert got.returncode == full.exit_code, args
            assert got.stdout == full.stdout, args
            messages = [line for line in got.stderr.splitlines() if not line.startswith("import time:")]
            assert messages == full.stderr.splitlines(), args
    usage = fast()
    assert usage.returncode == 2 and "Usage" in usage.stderr


@pytest.mark.parametrize("command", ["check", "plan"])
def test_ctrl_c_on_the_fast_path_is_reported_as_the_full_cli_does(
        command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C in `check` / `plan` without typer: "Aborted!" and exit 1, as click says it
    in the full CLI, not a traceback."""
    from optrace.cli import check_fast, plan_fast, start

    def interrupted(argv: list[str]) -> int | None:
        raise KeyboardInterrupt

    codes: list[int] = []
    monkeypatch.setattr(start, "finish", codes.append)
    monkeypatch.setattr(check_fast if command == "check" else plan_fast, "fast_main", interrupted)
    monkeypatch.setattr(sys, "argv", ["optrace", command, "op"])
    (start.check_main if command == "check" else start.plan_main)()
    assert codes == [1] and capsys.readouterr().err == "\nAborted!\n"
