"""Several operators in one call: a process pool, results in order, one broken operator
reported while the others proceed, exit code the worst of them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # plan and check of every fixture operator, in parallel and serially

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "optrace", *args], capture_output=True, text=True)


def test_plan_and_check_in_parallel_match_serial(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "umdk_style", tmp_path / "u")
    base = tmp_path / "u/src/cam/comm_operator/ascend_kernels"
    ops = [str(base / "moe_fused_gmm"), str(tmp_path / "missing_op"), str(base / "moe_gate_bias")]
    serial = run("plan", *ops, "--jobs", "1", "--format", "json")
    parallel = run("plan", *ops, "--jobs", "2", "--format", "json")
    assert serial.returncode == parallel.returncode == 2
    assert serial.stdout == parallel.stdout
    assert '"name": "moe_fused_gmm"' in parallel.stdout and '"name": "moe_gate_bias"' in parallel.stdout
    assert "missing_op: OT001" in parallel.stderr
    for op in (ops[0], ops[2]):
        assert run("apply", op, "--write").returncode == 0
    serial = run("check", *ops, "--jobs", "1", "--no-compile")
    parallel = run("check", *ops, "--jobs", "2", "--no-compile")
    assert serial.stdout == parallel.stdout and parallel.returncode == 2
    assert parallel.stdout.count("0 error(s)") == 2
