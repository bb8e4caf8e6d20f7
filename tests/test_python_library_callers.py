"""A production module is not a sample: Python callers under tests/,
examples/, samples/, named test_*.py / *_sample.py, or matched by the config's `samples`
globs sync and save the buffer; library code calling the op gets the unpack only — its
callers keep the op's old outputs, and it never writes profiling files. Fixture
`scattered_torch` (`python/fused_ops/router.py` is library code, `bench/` a configured
sample) plus snippets."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from layer_snippets import make_repo, run
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.codemods import python_fakes, python_files
from optrace.codemods.python_callers_cst import python_caller_edits
from optrace.engine.discovery import is_sample_caller

REG = ("torch/reg.cpp",
       'TORCH_LIBRARY(lib, m)\n{\n    m.def("demo_op(Tensor x, int k) -> (Tensor, Tensor)");\n}\n')

runner = CliRunner()
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "scattered_torch"
OP_REL = "csrc/ops/moe_gating_topk"
ROUTER = "python/fused_ops/router.py"


@pytest.mark.parametrize(("rel", "sample"), [
    ("tests/unit/helpers.py", True),
    ("test/cam/ut/check.py", True),
    ("src/cam/examples/moe.py", True),
    ("samples/run.py", True),
    ("Examples/run.py", True),
    ("pkg/test_router.py", True),
    ("pkg/router_test.py", True),
    ("tools/fused_moe_sample.py", True),
    ("pkg/router.py", False),
    ("pkg/testing_utils.py", False),  # a name starting with "test" is not test_*.py
    ("pkg/latest/router.py", False),  # a folder containing "test" is not tests/
    ("bench/bench_x.py", False),  # not without the config's glob
])
def test_what_is_a_sample(tmp_path: Path, rel: str, sample: bool) -> None:
    root = tmp_path / "tests" / "repo"  # the repository's own place never counts
    path = root / rel
    path.parent.mkdir(parents=True)
    path.write_text("")
    assert is_sample_caller(path, root) is sample
    glob = f"{root.as_posix()}/bench/*.py"
    assert is_sample_caller(path, root, [glob]) is (sample or rel.startswith("bench/"))


LIBRARY = '''\
    import torch


    def route(x, k):
        a, b = torch.ops.lib.demo_op(x, k)
        return a, b


    def route_one(x, k):
        out = torch.ops.lib.demo_op(x, k)
        return out


    def first(x, k):
        return torch.ops.lib.demo_op(x, k)[0]
    '''


def test_library_code_gets_the_unpack_only(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {REG[0]: REG[1], "pkg/model/router.py": LIBRARY,
                              "examples/demo_sample.py": LIBRARY})
    out = run(python_caller_edits, op, "B")  # also checks that strip gives the bytes back
    lib = out["pkg/model/router.py"]
    assert "    a, b, profiling_data = torch.ops.lib.demo_op(x, k)\n" in lib
    assert "    out, profiling_data = out[:-1], out[-1]  # optrace\n" in lib
    assert "    *_optrace_outputs, profiling_data = torch.ops.lib.demo_op(x, k)\n" in lib
    for sample_only in ("_optrace_save", "synchronize", "argparse", "OPTRACE_PROFILING_DIR", "import os"):
        assert sample_only not in lib
    # The same code as a sample saves the buffer.
    assert "_optrace_save(profiling_data" in out["examples/demo_sample.py"]


def test_a_samples_glob_in_the_config_makes_a_file_a_sample(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {REG[0]: REG[1], "bench/run_demo.py": LIBRARY})
    assert "_optrace_save" not in run(python_caller_edits, op, "B")["bench/run_demo.py"]
    (op.parent.parent / "optrace.toml").write_text('samples = ["bench/*.py"]\n')
    assert "_optrace_save(profiling_data" in run(python_caller_edits, op, "B")["bench/run_demo.py"]


def _check(op: Path) -> dict[str, dict[str, object]]:
    res = runner.invoke(app, ["check", str(op), "--no-compile", "--format", "json"])
    return {g["gate"]: g for g in json.loads(res.stdout)["operators"][0]["gates"]}


def test_fixture_library_module_apply_check_strip(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    op = repo / OP_REL
    plan = json.loads(runner.invoke(app, ["plan", str(op), "--format", "json"]).stdout)["operators"][0]
    details = {f["file"]: f["detail"] for f in plan["layers"]["python_callers"]}
    assert details[ROUTER] == "library code calling the op: unpack only"
    assert details["bench/bench_gating.py"] == "calls the op"  # a sample by the config
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    router = (repo / ROUTER).read_text()
    assert "    weights, ids, profiling_data = torch.ops._C.npu_gating_topk(gating, bias, k)\n" in router
    assert "        out, profiling_data = out[:-1], out[-1]  # optrace\n" in router
    assert "_optrace_save" not in router and "synchronize" not in router
    assert "_optrace_save(profiling_data" in (repo / "bench" / "bench_gating.py").read_text()
    gates = _check(op)
    g2 = gates["G2"]
    assert g2["status"] == "pass"
    lib_ev = [e for e in g2["evidence"] if e["path"] == ROUTER]  # type: ignore[union-attr]
    assert [(e["line"], e["ok"]) for e in lib_ev] == [(13, True), (24, True)]
    assert all("library code: unpacks profiling_data" in e["note"] for e in lib_ev)
    g4_files = {e["path"] for e in gates["G4"]["evidence"]}  # type: ignore[union-attr]
    assert ROUTER not in g4_files and "bench/bench_gating.py" in g4_files
    assert gates["G4"]["status"] == "pass"
    assert runner.invoke(app, ["strip", str(op), "--write"]).exit_code == 0
    assert {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".optrace" not in p.parts} == before


def test_a_library_call_left_at_the_old_arity_fails_g2(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)
    op = repo / OP_REL
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    router = repo / ROUTER
    text = router.read_text()
    router.write_text(text.replace("        out, profiling_data = out[:-1], out[-1]  # optrace\n", ""))
    g2 = _check(op)["G2"]
    assert g2["status"] == "fail"
    bad = [e for e in g2["evidence"] if not e["ok"]]  # type: ignore[union-attr]
    assert [(e["path"], e["line"]) for e in bad] == [(ROUTER, 24)]  # `out = ...` in forward
    assert "not unpacked" in bad[0]["note"]


def test_library_code_alone_is_g2s_and_g4_g5_do_not_apply(tmp_path: Path) -> None:
    """Without a sample or test calling the op, G4 / G5 are n/a; the library module's
    unpacks are still G2's evidence (the callers layer speaks for G2 and G4 / G5)."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)
    for samples in ("bench", "examples", "tests"):
        shutil.rmtree(repo / samples)
    op = repo / OP_REL
    assert runner.invoke(app, ["apply", str(op), "--write", "--mode", "B"]).exit_code == 0
    gates = _check(op)
    for gate in ("G4", "G5"):
        assert gates[gate]["status"] == "n/a"
        assert gates[gate]["summary"] == "no Python samples / tests call the op"
    assert gates["G2"]["status"] == "pass"
    lib_ev = [e for e in gates["G2"]["evidence"] if e["path"] == ROUTER]  # type: ignore[union-attr]
    assert lib_ev and all(e["ok"] and "library code" in e["note"] for e in lib_ev)


def test_check_reads_callers_without_importing_libcst(tmp_path: Path) -> None:
    """`check` (pre-commit runs it on every commit) reads Python callers with `ast`: an
    operator without Python fakes / converters is checked without importing LibCST."""
    fixtures = FIXTURE.parent
    repo = tmp_path / "repo"
    shutil.copytree(fixtures / "direct_launch", repo)
    op = repo / "csrc" / "ops" / "moe_gating_topk"
    (repo / "python" / "fused_ops" / "abstract_impls.py").unlink()  # the fakes
    assert runner.invoke(app, ["apply", str(op), "--write", "--mode", "B"]).exit_code == 0
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "optrace", "check", str(op),
                          "--no-compile", "--format", "json"], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    gates = {g["gate"]: g for g in json.loads(res.stdout)["operators"][0]["gates"]}
    assert gates["G4"]["status"] == "pass" and gates["G4"]["evidence"]  # the callers were read
    imported = {line.rsplit("|", 1)[1].strip() for line in res.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "optrace.pipeline.gates" in imported
    assert not [m for m in imported if m.split(".")[0] == "libcst"]


def test_check_reads_fakes_through_the_backend_the_cli_installs(tmp_path: Path) -> None:
    """With Python fakes, the optrace command (a process of its own, not the test suite's
    install) imports the LibCST half at first use and reads them: G2 evidence of the fake."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE.parent / "direct_launch", repo)
    op = repo / "csrc" / "ops" / "moe_gating_topk"
    assert runner.invoke(app, ["apply", str(op), "--write", "--mode", "B"]).exit_code == 0
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "optrace", "check", str(op),
                          "--no-compile", "--format", "json"], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    gates = {g["gate"]: g for g in json.loads(res.stdout)["operators"][0]["gates"]}
    fakes = [e for e in gates["G2"]["evidence"] if e["path"].endswith("abstract_impls.py")]  # type: ignore[union-attr]
    assert fakes and all(e["ok"] and "returns profiling_data last" in e["note"] for e in fakes), fakes
    imported = {line.rsplit("|", 1)[1].strip() for line in res.stderr.splitlines()
                if line.startswith("import time:") and "|" in line}
    # importlib.import_module bypasses -X importtime's report of the half itself; what it
    # imports with `import` statements shows, and the evidence above is its reading.
    assert "libcst" in imported and "optrace.codemods.python_callers_cst" in imported


def test_without_the_libcst_half_a_python_layer_says_what_to_install() -> None:
    """The pipeline does not import LibCST itself: run without the backend the CLI hands
    it, a Python layer that needs it is an error naming the call that installs it."""
    saved = list(python_files._loader)
    python_files._loader.clear()
    try:
        with pytest.raises(RuntimeError, match=r"optrace\.cli\.deferred\.install\(\)"):
            python_fakes.PythonFakesLayer().edits(None, "B", None)  # type: ignore[arg-type]
    finally:
        python_files._loader[:] = saved
