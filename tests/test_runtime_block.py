"""The runtime block is versioned: apply upgrades an older block in place, and only it."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from optrace.cli import app
from optrace.codemods.runtime_block import template

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_older_block_is_upgraded_in_place(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "msopgen_style", tmp_path / "m")
    op = tmp_path / "m" / "moe_token_permute"
    runner = CliRunner()
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    base = op / "op_kernel" / "moe_token_permute_base.h"
    current = base.read_bytes()
    block = template()
    assert block in current
    # An "older optrace" left a v0 block with different content.
    old_block = block.replace(b"optrace-runtime-block v1", b"optrace-runtime-block v0", 1).replace(
        b"#define PROF_SIZE_PER_CORE 2048", b"#define PROF_SIZE_PER_CORE 1024")
    base.write_bytes(current.replace(block, old_block))
    res = runner.invoke(app, ["apply", str(op)])
    assert res.exit_code == 0
    assert "-// optrace-runtime-block v0" in res.stdout and "+// optrace-runtime-block v1" in res.stdout
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    assert base.read_bytes() == current  # exactly the current block, the rest untouched
    assert runner.invoke(app, ["apply", str(op), "--check"]).exit_code == 0
