"""inspect, report and compare run without the CLI framework (cli/readers_fast.py) for
their plain spellings: the same stdout, stderr, exit code and files as the typer
commands, typer never imported; everything else goes to typer as before."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rt_helpers import run_entry
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.cli.collect_fast import run_collect
from optrace.cli.readers_fast import parse_fast
from optrace.runtime.demo import write_demo


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("readers")
    for name, speedup in (("before", 0.0), ("after", 25.0)):
        write_demo(root / name, ranks=2, launches=4, aic=2, seed=3, speedup=speedup)
        assert run_collect(root / name, root / f"{name}.pftrace") == 0
        assert run_collect(root / name, root / f"{name}.json") == 0
    return root


FAST_CASES = [
    ["inspect", "before.pftrace"],
    ["inspect", "before.json", "--format", "json"],
    ["inspect", "before"],                                   # a profiling directory
    ["report", "before.pftrace", "--top=3"],
    ["report", "before", "--format", "json", "--clock-mhz", "50"],
    ["report", "before.json", "--html", "page.html"],
    ["compare", "before.pftrace", "after.pftrace", "--expect", "10"],
    ["compare", "before.json", "after", "--label", "gmm", "--fail-on-regression", "5", "--format=json"],
    ["report", "before.pftrace", "--format", "xml"],         # our usage errors, exit 2
    ["report", "before.pftrace", "--top", "0"],
    ["compare", "before.pftrace", "after.pftrace", "--expect", "-5"],
    ["inspect", "missing.pftrace"],                          # bad input, exit 2
    ["report", "before.pftrace", "--html", "before.pftrace"],  # an output that is an input
]


@pytest.mark.parametrize("argv", FAST_CASES, ids=lambda a: "-".join(a).replace("/", "_"))
def test_a_plain_spelling_runs_without_typer_as_the_typer_command_does(
        data: Path, argv: list[str], tmp_path: Path) -> None:
    code, typer_loaded, out, err = run_entry(argv, data)
    assert not typer_loaded
    page = data / "page.html"
    fast_page = page.read_bytes() if page.exists() else None
    page.unlink(missing_ok=True)
    here = os.getcwd()
    os.chdir(data)
    try:
        slow = CliRunner().invoke(app, argv)
    finally:
        os.chdir(here)
    assert (code, out, err) == (slow.exit_code, slow.stdout, slow.stderr)
    assert "Traceback" not in err
    if fast_page is not None:
        assert page.read_bytes() == fast_page
        page.unlink()


@pytest.mark.parametrize("argv, exit_code", [
    (["report", "--help"], 0),                       # help is the full CLI's
    (["inspect", "-h"], 2),                          # an option the fast parser does not know
    (["report", "before.pftrace", "--top", "many"], 2),  # typer reports the invalid number
    (["compare", "before.pftrace"], 2),              # a missing argument: typer's usage error
    (["report", "before.pftrace", "--top"], 2),      # a missing value
])
def test_what_the_fast_parser_does_not_know_goes_to_typer(data: Path, argv: list[str],
                                                          exit_code: int) -> None:
    code, typer_loaded, out, err = run_entry(argv, data)
    assert (typer_loaded, code) == (True, exit_code)
    if "--help" in argv:
        assert "--html" in out and "--top" in out
    else:
        assert err.strip() and "Traceback" not in err


def test_parse_fast_spellings() -> None:
    assert parse_fast("report", ["t.json", "--top=4", "--point-map", "m.json", "--clock-mhz", "100"]) == {
        "path": Path("t.json"), "top": 4, "point_map": Path("m.json"), "clock_mhz": 100.0}
    assert parse_fast("compare", ["a", "b", "--expect", "12.5", "--label", "gmm"]) == {
        "before": Path("a"), "after": Path("b"), "expect": 12.5, "label": "gmm"}
    assert parse_fast("inspect", ["a", "b"]) is None     # two paths: typer says so
    assert parse_fast("inspect", ["a", "--top", "3"]) is None  # not inspect's option
    assert parse_fast("report", ["a", "--", "b"]) is None


def test_the_console_script_exits_with_the_readers_code_and_output(data: Path) -> None:
    """The real entry leaves by os._exit: the exit code and the flushed output survive."""
    done = subprocess.run([sys.executable, "-m", "optrace", "compare", "before.pftrace", "after.pftrace",
                           "--expect", "90"], capture_output=True, text=True, cwd=data)
    assert done.returncode == 1, done.stderr
    assert "gmm" in done.stdout and done.stdout.endswith("\n")
