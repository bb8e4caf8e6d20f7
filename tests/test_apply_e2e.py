"""What `optrace apply` writes, proven on the host: apply -> preprocess --modify -> g++ ->
run as 2 AIC + 4 AIV cores -> save_profiling_data -> collect -> the planned trace.
And the zero-cost promise: compiled with ENABLE_MOE_PROFILING 0, every instrumented
function except the entry and Init has the same object code as before apply."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.pipeline.plan import plan_operator
from optrace.runtime import save_profiling_data

DATA = Path(__file__).resolve().parent / "data"
STUB = Path(str(resources.files("optrace.runtime").joinpath("stub/ascendc_host_stub.h")))
pytestmark = [
    pytest.mark.slow,  # compiles and runs the instrumented kernel on the host
    pytest.mark.skipif(shutil.which("g++") is None or shutil.which("objdump") is None,
                       reason="needs g++ and objdump"),
]
runner = CliRunner()


def cli(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout + res.stderr


def gxx(*args: str) -> None:
    done = subprocess.run(["g++", "-std=c++17", "-Wall", "-Wno-unused-function", *args],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    shutil.copytree(DATA / "host_repo", tmp_path / "repo")
    # The stub stands in for CANN's kernel_operator.h.
    shutil.copy(STUB, tmp_path / "repo" / "demo_moe" / "op_kernel" / "kernel_operator.h")
    return tmp_path / "repo"


def test_applied_kernel_runs_and_collects_to_the_planned_trace(repo: Path, tmp_path: Path) -> None:
    op = repo / "demo_moe"
    planned = {r.label for r in plan_operator(op).root.walk()}
    assert cli("apply", str(op), "--write")[0] == 0
    assert cli("check", str(op))[0] == 0
    build = tmp_path / "build"
    shutil.copytree(op / "op_kernel", build)
    code, out = cli("preprocess", str(build), "--out", str(build), "--modify")
    assert code == 0, out
    binary = tmp_path / "demo"
    gxx("-O2", f"-I{build}", str(DATA / "host_harness" / "harness.cpp"), "-o", str(binary))
    subprocess.run([str(binary), str(tmp_path / "gm.bin")], check=True)
    buffer = np.fromfile(tmp_path / "gm.bin", dtype=np.int64).reshape(6, -1)
    profiling = tmp_path / "profiling"
    save_profiling_data(buffer, 0, profiling, aic_cores=2, point_map=build / "point_map.json")
    code, out = cli("collect", str(profiling), "-o", str(tmp_path / "trace.json"))
    assert code == 0, out
    trace = json.loads((tmp_path / "trace.json").read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X" and e.get("cat") != "optrace.launch"]
    seen = {e["name"] for e in spans}
    assert seen == planned  # every planned region was recorded, nothing else
    tracks = {(e["pid"], e["tid"]) for e in spans}
    assert len(tracks) == 6  # one track per core
    groups = sorted(e["args"]["index"] for e in spans if e["name"] == "compute-groups aic group"
                    and e["tid"] == min(t for _, t in tracks))
    assert groups == [0, 1, 2, 3]
    aic_only = {e["name"] for e in spans if "aic" in e["name"].split()}
    aiv_only = {e["name"] for e in spans if "aiv" in e["name"].split()}
    assert aic_only and aiv_only and not (aic_only & aiv_only)


def _functions(obj: Path) -> dict[str, str]:
    """Disassembly per function section (-ffunction-sections), addresses stripped."""
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", str(obj)], capture_output=True,
                          text=True, check=True).stdout
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if head:
            current = head.group(1)
            out[current] = []
        elif current and re.match(r"^\s+[0-9a-f]+:", line):
            out[current].append(re.sub(r"^\s+[0-9a-f]+:\s*", "", line))
    return {k: "\n".join(v) for k, v in out.items()}


def test_profiling_compiled_out_is_the_same_code(repo: Path, tmp_path: Path) -> None:
    op = repo / "demo_moe"
    flags = ["-O2", "-c", "-ffunction-sections", "-include", str(STUB), f"-I{op / 'op_kernel'}"]
    gxx(*flags, str(op / "op_kernel" / "demo_moe.cpp"), "-o", str(tmp_path / "before.o"))
    assert cli("apply", str(op), "--write")[0] == 0
    gxx(*flags, "-DENABLE_MOE_PROFILING=0", str(op / "op_kernel" / "demo_moe.cpp"),
        "-o", str(tmp_path / "after.o"))
    before, after = _functions(tmp_path / "before.o"), _functions(tmp_path / "after.o")
    instrumented = [name for name in before if name.startswith("DemoMoe::")]
    assert len(instrumented) >= 6
    for name in instrumented:
        if name.startswith("DemoMoe::Init"):
            assert name not in after  # Init gained the profiling_data parameter
            continue
        assert after.get(name) == before[name], f"{name} changed with profiling compiled out"
    # And with profiling on, the traced functions really do change.
    gxx(*flags, str(op / "op_kernel" / "demo_moe.cpp"), "-o", str(tmp_path / "on.o"))
    on = _functions(tmp_path / "on.o")
    assert on["DemoMoe::ComputeGroups()"] != before["DemoMoe::ComputeGroups()"]
