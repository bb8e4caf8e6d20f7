"""A file whose name is not UTF-8 (bytes `\\xff\\xfe`, as a GBK or Latin-1 checkout on a
UTF-8 system gives) is a file like any other: an include finds it, its points are planned
and written, check (libclang included), pre-commit and preprocess read it, strip gives it
back byte for byte, and its name prints escaped."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app

runner = CliRunner()
NAME = b"evil\xff\xfe.h"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="names as bytes: a Linux file system")


def _op(tmp_path: Path) -> tuple[Path, dict[Path, bytes]]:
    repo = tmp_path / "repo"
    kernel = repo / "demo_op" / "op_kernel"
    kernel.mkdir(parents=True)
    (repo / ".git").mkdir()
    header = Path(os.fsdecode(os.fsencode(kernel) + b"/" + NAME))
    header.write_bytes(b"#pragma once\n__aicore__ inline void Step(GM_ADDR x)\n{\n"
                       b"    for (int expertIdx = 0; expertIdx < 8; ++expertIdx) {\n"
                       b"        DataCopy(x, x, 8);\n    }\n    SyncAll();\n}\n")
    (kernel / "demo_op.cpp").write_bytes(b'#include "kernel_operator.h"\n#include "' + NAME + b'"\n'
                                        b'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x)\n'
                                        b"{\n    Step(x);\n}\n")
    before = {p: p.read_bytes() for p in kernel.iterdir()}
    return repo / "demo_op", before


def test_a_header_named_in_bytes_is_planned_applied_checked_and_stripped(tmp_path: Path) -> None:
    op, before = _op(tmp_path)
    header = next(p for p in before if p.suffix == ".h")
    plan = runner.invoke(app, ["plan", str(op)])
    assert plan.exit_code == 0, plan.stderr
    assert "evil\\xff\\xfe.h" in plan.stdout and 'not found: "evil' not in plan.stdout, plan.stdout
    assert "\udcff" not in plan.stdout
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    assert b"TRACE_POINT" in header.read_bytes()  # the header's own points
    check = runner.invoke(app, ["check", str(op)])  # libclang compiles it against the stub
    assert check.exit_code == 0, check.stdout + check.stderr
    hook = runner.invoke(app, ["pre-commit", "--repo-root", str(op.parent), "--", str(header)])
    assert hook.exit_code == 0, hook.stdout + hook.stderr
    pre = runner.invoke(app, ["preprocess", str(op / "op_kernel"), "--out", str(tmp_path / "out")])
    assert pre.exit_code == 0, pre.stderr
    assert runner.invoke(app, ["strip", str(op), "--write"]).exit_code == 0
    assert {p: p.read_bytes() for p in before} == before
    assert sorted((op / "op_kernel").iterdir()) == sorted(before)
