"""The CLI at its edges, as a user meets them: check's failures first, a directory that is
no operator, `--graph` suffixes, help that describes every option, 1-based numbering in
gate evidence, paths relative to where optrace runs, the closing line of a run over
several operators."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine.diagnostics import shown_path
from optrace.engine.transaction import _unsafe_path
from optrace.pipeline.plan_text import wrap

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
UMDK_OPS = "src/cam/comm_operator/ascend_kernels"
runner = CliRunner()


def cli(*args: object) -> tuple[int, str, str]:
    res = runner.invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the UMDK-style repository with moe_fused_gmm instrumented (read only)."""
    repo = tmp_path_factory.mktemp("applied") / "umdk"
    shutil.copytree(FIXTURES / "umdk_style", repo)
    assert cli("apply", repo / UMDK_OPS / "moe_fused_gmm", "--write")[0] == 0
    return repo


def _broken_copy(applied: Path, tmp_path: Path) -> Path:
    """The applied repository with one begin point left without its end (OT404)."""
    repo = tmp_path / "umdk"
    shutil.copytree(applied, repo, symlinks=True)
    kernel = repo / UMDK_OPS / "moe_fused_gmm" / "op_kernel" / "moe_fused_gmm.cpp"
    lines = kernel.read_bytes().split(b"\n")
    guard = next(i for i, line in enumerate(lines) if b'TRACE_POINT("processing", "E")' in line)
    lines.insert(guard + 1, b'    MoeTracing(TRACE_POINT("unclosed", "B"));')
    kernel.write_bytes(b"\n".join(lines))
    return repo


# --- check: failures first ------------------------------------------------------------------


def test_check_prints_its_errors_first_then_one_line_per_gate(applied: Path, tmp_path: Path) -> None:
    repo = _broken_copy(applied, tmp_path)
    op = repo / UMDK_OPS / "moe_fused_gmm"
    # One pipe for both streams, as a terminal or a hook's log shows them.
    res = subprocess.run([sys.executable, "-m", "optrace", "check", str(op), "--no-compile"], cwd=repo,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert res.returncode == 1
    lines = res.stdout.decode().splitlines()
    assert re.fullmatch(r"src/cam/.*/moe_fused_gmm\.cpp:\d+: OT404 \"unclosed\" has a B and no E anywhere  "
                        r"\[error\]", lines[0]), lines[:3]
    summary = next(i for i, line in enumerate(lines) if line.startswith(f"{UMDK_OPS}/moe_fused_gmm: "))
    assert all("[error]" in line or "[warning]" in line for line in lines[:summary])
    gates = lines[summary + 1 : summary + 6]
    assert [g.split(":")[0].strip() for g in gates] == ["G1 preprocess", "G2 output order", "G3 compile",
                                                        "G4 run + post-process", "G5 paths"]
    assert lines[summary + 6].startswith("  1 error(s), 0 warning(s)") and len(lines) == summary + 7
    # The passing evidence only with -v; JSON holds it either way.
    code, out, _ = cli("check", op, "--no-compile")
    assert "hook block present" not in out
    code, verbose, _ = cli("check", op, "--no-compile", "-v")
    assert code == 1 and "hook block present" in verbose
    assert "OpDef: profiling_data is output 3 of 3" in verbose
    code, doc, _ = cli("check", op, "--no-compile", "--format", "json")
    report = json.loads(doc)["operators"][0]
    assert any(e["note"] == "hook block present" for g in report["gates"] for e in g["evidence"])
    assert [f["code"] for f in report["findings"] if f["severity"] == "error"] == ["OT404"]


def test_a_failing_gate_shows_the_evidence_that_fails_it(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "broken_output_order", tmp_path / "r")
    op = tmp_path / "r" / "ops" / "moe_mid_profile"
    code, out, err = cli("check", op, "--no-compile")
    assert code == 1 and "OT452" in err
    g2 = out.split("G2 output order: ✗")[1].split("\n  G3")[0]
    assert "OpDef: profiling_data is output 2 of 3; `" in g2 and "<- ✗" in g2
    assert all("<- ✗" in line for line in g2.splitlines()[1:])  # the passing facts wait for -v


def test_check_with_output_file_keeps_the_errors_in_it(applied: Path, tmp_path: Path) -> None:
    op = _broken_copy(applied, tmp_path) / UMDK_OPS / "moe_fused_gmm"
    report = tmp_path / "check.txt"
    code, out, err = cli("check", op, "--no-compile", "-o", report)
    assert code == 1 and out == "" and "OT404" in err
    text = report.read_text()
    assert text.splitlines()[0].endswith("[error]") and "OT404" in text and "G5 paths" in text


def test_the_plain_check_spelling_takes_verbose_as_the_full_cli_does(applied: Path) -> None:
    op = applied / UMDK_OPS / "moe_fused_gmm"
    fast = subprocess.run([sys.executable, "-m", "optrace", "check", str(op), "--no-compile", "-v"],
                          capture_output=True, check=False)
    full = runner.invoke(app, ["check", str(op), "--no-compile", "--verbose"])
    assert fast.returncode == full.exit_code == 0
    assert fast.stdout.decode() == full.stdout and "hook block present" in full.stdout


# --- a directory that is no operator ------------------------------------------------------------


@pytest.mark.parametrize("command", [["check"], ["check", "--format", "json"], ["strip"],
                                     ["strip", "--write"], ["apply"], ["plan"]])
def test_a_directory_without_a_kernel_entry_is_refused_by_every_command(tmp_path: Path,
                                                                       command: list[str]) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# not an operator\n")
    code, out, err = cli(command[0], docs, *command[1:])
    assert code == 2, out + err
    assert f"{docs}: OT010 no kernel entry" in err and "not instrumented" not in out
    assert sorted(p.name for p in docs.iterdir()) == ["index.md"]


@pytest.mark.parametrize("command", [["check"], ["strip"], ["strip", "--write"], ["apply"], ["plan"]])
def test_a_folder_of_operators_is_refused_and_left_alone(applied: Path, tmp_path: Path,
                                                         command: list[str]) -> None:
    repo = tmp_path / "umdk"
    shutil.copytree(applied, repo, symlinks=True)
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".optrace" not in p.parts}
    code, out, err = cli(command[0], repo / UMDK_OPS, *command[1:])
    assert code == 2 and out == "", out
    assert "OT015 not one operator directory: it holds 2 operator directories" in err
    assert {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".optrace" not in p.parts} == before


def test_strip_still_cleans_an_operator_whose_kernel_entry_was_deleted(applied: Path, tmp_path: Path) -> None:
    """No entry, but files optrace wrote: strip takes them out (only an empty-handed strip
    of a directory without an entry is refused)."""
    repo = tmp_path / "umdk"
    shutil.copytree(applied, repo, symlinks=True)
    op = repo / UMDK_OPS / "moe_fused_gmm"
    (op / "op_kernel" / "moe_fused_gmm.cpp").unlink()
    code, out, err = cli("strip", op, "--write")
    assert code == 0, err
    assert "file(s) written" in out
    assert cli("strip", op, "--write")[0] == 2  # now nothing of optrace's is left: not an operator


# --- --graph ---------------------------------------------------------------------------------


@pytest.fixture
def no_dot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A PATH with no Graphviz on it (python stays reachable by its full path)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.fixture
def fake_dot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A `dot` on PATH that records its arguments and answers with fixed bytes."""
    bin_dir = tmp_path / "dot-bin"
    bin_dir.mkdir()
    dot = bin_dir / "dot"
    dot.write_text(f"#!{sys.executable}\nimport sys\nsys.stdin.buffer.read()\n"
                   f"open({str(tmp_path / 'dot-args')!r}, 'w').write(' '.join(sys.argv[1:]))\n"
                   "sys.stdout.buffer.write(b'DRAWN BY DOT')\n")
    dot.chmod(dot.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return tmp_path / "dot-args"


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_a_drawn_graph_without_graphviz_is_refused_before_any_work(tmp_path: Path, no_dot: None,
                                                                   suffix: str) -> None:
    op = FIXTURES / "umdk_style" / UMDK_OPS / "moe_fused_gmm"
    target = tmp_path / f"g{suffix}"
    code, out, err = cli("plan", op, "--graph", target)
    assert code == 2 and out == "", out  # no plan printed before the refusal
    assert f"{target}: OT030 {suffix} is drawn by Graphviz's `dot`, which is not on PATH; " \
           "without it: .dot, .gv, .html, .htm" in err
    assert not target.exists()


def test_an_unknown_graph_suffix_is_refused_naming_those_that_work(tmp_path: Path, no_dot: None) -> None:
    op = FIXTURES / "umdk_style" / UMDK_OPS / "moe_fused_gmm"
    code, out, err = cli("plan", op, "--graph", tmp_path / "g.txt")
    assert code == 2 and out == ""
    assert "OT030 the graph's format is chosen by its suffix (.txt): use .dot, .gv, .html, .htm " \
           "(.svg, .png with Graphviz installed)" in err
    assert not (tmp_path / "g.txt").exists()


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_a_drawn_graph_goes_through_dot(tmp_path: Path, fake_dot: Path, suffix: str) -> None:
    op = FIXTURES / "umdk_style" / UMDK_OPS / "moe_fused_gmm"
    target = tmp_path / f"g{suffix}"
    code, _, err = cli("plan", op, "--graph", target)
    assert code == 0, err
    assert target.read_bytes() == b"DRAWN BY DOT" and fake_dot.read_text() == f"-T{suffix[1:]}"


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's `dot` is not installed "
                    "(Debian: apt-get install graphviz)")
def test_a_png_graph_is_a_png(tmp_path: Path) -> None:
    op = FIXTURES / "umdk_style" / UMDK_OPS / "moe_fused_gmm"
    code, _, err = cli("plan", op, "--graph", tmp_path / "g.png")
    assert code == 0, err
    assert (tmp_path / "g.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


# --- help ------------------------------------------------------------------------------------


def _commands() -> dict[str, Any]:
    """Every command of `optrace`, by name (typer's click objects)."""
    commands: dict[str, Any] = getattr(typer.main.get_command(app), "commands")  # noqa: B009
    return commands


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_option_and_argument_of_every_command_has_a_description(name: str) -> None:
    command = _commands()[name]
    res = runner.invoke(app, [name, "--help"], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    assert command.help and " ".join(command.help.split())[:40] in " ".join(res.stdout.split())
    for param in command.params:
        text = getattr(param, "help", None) or ""
        assert len(text.split()) >= 2, f"{name}: {param.name} has no description"
        assert " ".join(text.split())[:30] in " ".join(res.stdout.split()), (name, param.name)
    # Typer's renderings of a flag without its positive form: never shown.
    assert "[default: True]" not in res.stdout and "[default: False]" not in res.stdout
    assert not re.search(r"^\s+/ --", res.stdout, re.M), res.stdout


def _help(name: str) -> str:
    res = runner.invoke(app, [name, "--help"], env={"COLUMNS": "200"})
    return " ".join(res.stdout.split())


def test_help_says_what_the_commands_do() -> None:
    assert "B (default)" not in _help("apply") and "chosen per operator" in _help("apply")
    for name in ("report", "inspect", "compare"):
        assert ".pftrace" in _help(name), name
    check = _help("check")
    assert all(gate in check for gate in ("G1 preprocess", "G2 output order", "G3 compile",
                                          "G4 run + post-process", "G5 paths")), check
    assert "--no-compile Skip the compile-safety pass" in check and "-v, --verbose" in check
    assert "--clock-mhz FLOAT For a profiling directory" in _help("report").replace("<float>", "FLOAT")
    assert ".png" in _help("plan") and "Graphviz" in _help("plan")


# --- evidence, paths, summaries -----------------------------------------------------------------


def test_gate_evidence_counts_from_one(applied: Path) -> None:
    """`output N of M` and `(N of M outputs)` side by side count alike: 1 <= N <= M."""
    _, doc, _ = cli("check", applied / UMDK_OPS / "moe_fused_gmm", "--no-compile", "--format", "json")
    notes = [e["note"] for g in json.loads(doc)["operators"][0]["gates"] for e in g["evidence"]]
    counted = [(int(n), int(m)) for note in notes for n, m in re.findall(r"(\d+) of (\d+)", note)]
    assert counted and all(1 <= n <= m for n, m in counted), notes
    assert "OpDef: profiling_data is output 3 of 3" in notes
    assert "infer shape: profiling_data is output 3 (index 2)" in notes
    assert any(re.fullmatch(r"kernel entry: `profiling_data` is parameter \d+, the last tensor output", n)
               for n in notes)


def test_shown_paths_are_relative_to_the_working_directory(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / "a" / "b.h") == "a/b.h"
    assert shown_path(Path("a/b.h")) == "a/b.h"
    assert shown_path(tmp_path) == "."
    assert shown_path(tmp_path.parent / "elsewhere.h") == f"{tmp_path.parent}/elsewhere.h"
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    monkeypatch.chdir(tmp_path / "link")  # entered through a link: resolved paths are inside too
    assert shown_path(real / "x.h") == "x.h"


def test_every_command_names_files_relative_to_where_it_runs(applied: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    repo = _broken_copy(applied, tmp_path)
    op = repo / UMDK_OPS / "moe_fused_gmm"
    rel = f"{UMDK_OPS}/moe_fused_gmm"
    monkeypatch.chdir(repo / "src")  # inside the repository, below its root
    inner = "cam/comm_operator/ascend_kernels/moe_fused_gmm"
    code, out, err = cli("check", op.resolve(), "--no-compile")
    assert err.startswith(f"{inner}/op_kernel/moe_fused_gmm.cpp:") and out.startswith(f"{inner}: ")
    # Outside the working directory (though inside the repository): absolute.
    build = repo.resolve() / "build/cam/comm_operator/compile_ascend_proj.sh"
    code, out, err = cli("check", op, "--no-compile", "-v")
    assert f"\n      {build}:45: hook block present\n" in out
    code, _, err = cli("strip", op, "--check")
    assert code == 1 and f"{build}: OT300 would change" in err
    assert all(line.startswith(("cam/", f"{repo.resolve()}/build/", f"{repo.resolve()}/test/"))
               for line in err.splitlines()), err
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # outside the repository: absolute
    code, out, err = cli("check", op, "--no-compile")
    assert err.startswith(f"{op.resolve()}/op_kernel/moe_fused_gmm.cpp:")
    monkeypatch.chdir(repo)
    docs = repo / "docs-here"
    docs.mkdir()
    for command in ("plan", "check", "strip", "apply"):
        code, _, err = cli(command, docs.resolve())
        assert code == 2 and err.startswith("docs-here: OT010"), (command, err)
    assert cli("plan", rel, "--graph", repo / "g.txt")[2].startswith("g.txt: OT030")
    # The plan's root and a write refused outside it, as the other paths: from the root, "."
    assert "\n  repository root: .\n" in cli("plan", rel)[1]
    monkeypatch.chdir(repo.parent)
    assert _unsafe_path(tmp_path / "x.h", repo.resolve()) == f"outside the repository root {repo.name}"


def test_a_run_over_several_operators_ends_on_its_count(applied: Path, tmp_path: Path) -> None:
    repo = _broken_copy(applied, tmp_path)
    gmm, bias = repo / UMDK_OPS / "moe_fused_gmm", repo / UMDK_OPS / "moe_gate_bias"
    nothing = tmp_path / "nothing"
    nothing.mkdir()
    code, _, err = cli("plan", gmm, bias, nothing)
    assert code == 2 and err.splitlines()[-1] == "3 operators: 2 planned, 1 failed"
    code, _, err = cli("check", gmm, bias, nothing, "--no-compile")
    assert code == 2 and err.splitlines()[-1] == "3 operators: 1 passed, 1 with errors, 1 not checked"
    clean = applied / UMDK_OPS / "moe_fused_gmm", applied / UMDK_OPS / "moe_gate_bias"
    code, _, err = cli("apply", *clean, nothing)
    assert code == 2 and err.splitlines()[-1] == "3 operators: 1 with changes, 1 unchanged, 1 failed"
    code, _, err = cli("strip", gmm, bias, "--check")
    assert code == 1 and err.splitlines()[-1] == "2 operators: 1 would change, 1 unchanged, 0 failed"
    code, out, err = cli("apply", bias, "--write")
    assert code == 0 and "operators:" not in out + err  # one operator: no count


# --- the plan at 120 columns ------------------------------------------------------------------


def test_the_plan_reads_at_120_columns_with_the_toolkits_headers_counted(tmp_path: Path) -> None:
    repo = tmp_path / "umdk"
    shutil.copytree(FIXTURES / "umdk_style", repo)
    op = repo / UMDK_OPS / "moe_fused_gmm"
    # A long name, as real kernels have them (UMDK's fused_deep_moe has this one).
    long_dir = op / "op_kernel" / "moe_fused_gmm" / "gemm" / "kernel"
    long_name = "grouped_matmul_slice_m_per_token_dequant_swiglu_quant_multistage_workspace.h"
    (long_dir / "grouped_matmul_dequant_swiglu_quant.h").rename(long_dir / long_name)
    for path in op.rglob("*.h"):
        text = path.read_bytes()
        path.write_bytes(text.replace(b"grouped_matmul_dequant_swiglu_quant.h", long_name.encode()))
    code, before, _ = cli("plan", op)
    assert code == 0
    assert 'not found: "catlass/catlass.hpp"' in before  # no submodule says catlass is the toolkit's
    (repo / ".gitmodules").write_text('[submodule "third_party/catlass"]\n\tpath = third_party/catlass\n'
                                      "\turl = https://example.invalid/catlass.git\n")
    code, out, err = cli("plan", op)
    assert code == 0, err
    long = [line for line in out.splitlines() if len(line) > 120]
    assert not long, long
    assert "not found: 4 header(s) of the toolkit, 2 in a submodule not checked out, 2 under CANN's " \
           "include roots (as expected here; --format json lists them)" in " ".join(out.split())
    assert "not found: \"" not in out
    _, doc, _ = cli("plan", op, "--format", "json")
    missing = json.loads(doc)["operators"][0]["includes"]["missing"]
    assert sorted(m["header"] for m in missing) == ["catlass/arch/arch.hpp", "catlass/catlass.hpp",
                                                   "lib/matmul_intf.h", "lib/matmul_intf.h"]
    tree = out.split("trace tree:")[1].split("\nlabels per core type")[0].splitlines()[1:]
    assert "hot=" not in out and tree
    classes = {"root", "phase", "setup", "wait", "notify", "barrier", "existing"}
    for line in tree:
        if line.startswith("      "):  # a continuation of a wrapped line
            continue
        m = re.match(r"\s*(\S.*?) \[[A-Z+]+\] (\w+): (.+?)  @ ", line)
        assert m and m.group(2) in classes, line
    for expected in ("group [AIC] phase: loop over `groupIdx`  @ ", "barrier: SyncAll  @ ",
                     "wait: CrossCoreWaitFlag `dispatchDone`  @ ",
                     "notify: CrossCoreSetFlag `dispatchDone`  @ ",
                     "setup: call `Init`  @ ", "phase: tile loop over `loopIdx`, whole  @ ",
                     "processing [AIC+AIV] root: kernel entry  @ [1]:"):
        assert expected in out, expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=" ab/[]:", max_size=60), max_size=12), st.integers(0, 12))
def test_wrapping_keeps_every_word_and_ends(words: list[str], indent: int) -> None:
    """Any line: wrapped within the width unless one word is longer, every word kept in
    order, and it terminates (a continuation never breaks inside its own indent)."""
    line = " " * indent + "  ".join(words)
    out = wrap([line], 30)
    assert " ".join(" ".join(out).split()) == " ".join(line.split())
    assert all(len(o) <= 30 or " " not in o.strip() for o in out), out
    # Continuations sit four deeper than the line they continue.
    assert all(o.startswith(" " * (indent + 4)) for o in out[1:] if o.strip()), out


# --- the README's walk-through ------------------------------------------------------------------


def _demo_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "demo-data" in b)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_the_readme_demo_writes_outside_the_clone() -> None:
    lines = _demo_block()
    scratch = next(line for line in lines if line.startswith("D="))[2:]
    assert Path(scratch).is_absolute() and not Path(scratch).is_relative_to(ROOT)
    for line in lines[1:]:
        paths = [w for w in line.split()[2:] if "/" in w]
        assert paths and all(p.startswith("$D/") for p in paths), line


@pytest.mark.slow
def test_the_readme_demo_runs_as_written(tmp_path: Path) -> None:
    script = "\n".join(_demo_block()).replace(".venv/bin/optrace", f"{sys.executable} -m optrace")
    script = re.sub(r"^D=.*$", f"D={tmp_path / 'demo'}", script, flags=re.M)
    res = subprocess.run(["sh", "-e", "-c", script], cwd=ROOT, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "achieved" in res.stdout
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == ["after", "before", "before.json",
                                                                    "report.html"]
