"""The runtime block goes into the operator's own `<op>_base.h` (created beside the entry
when absent), never into a vendored sub-kernel's `*_base.h` the entry happens to include:
fixture `vendored_base`, apply / strip / check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.codemods.runtime_block import template

runner = CliRunner()
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "vendored_base"
OP_REL = "ops/moe_norm_route"


def _copy(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)
    return repo


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".optrace" not in p.parts}


def test_the_plan_does_not_take_a_vendored_base_header_for_the_operators() -> None:
    res = runner.invoke(app, ["plan", str(FIXTURE / OP_REL), "--format", "json"])
    assert res.exit_code == 0, res.stderr
    op = json.loads(res.stdout)["operators"][0]
    assert op["layers"]["base_header"] == []  # none of its own yet: apply creates it
    assert "base_header" in op["missing_layers"]


def test_apply_creates_the_operators_base_header_beside_the_entry(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    before = _tree(repo)
    kernel = repo / OP_REL / "op_kernel"
    res = runner.invoke(app, ["apply", str(repo / OP_REL), "--write"])
    assert res.exit_code == 0, res.stderr
    own = kernel / "moe_norm_route_base.h"
    assert template() in own.read_bytes()
    after = _tree(repo)
    # The vendored sub-kernel's files are byte for byte as they were: no block, no include.
    for rel in ("rms_norm_base.h", "rms_norm.h", "add_rms_norm.h"):
        key = f"{OP_REL}/op_kernel/sub_kernels/{rel}"
        assert after[key] == before[key], rel
    assert sum(b"optrace-runtime-block v" in data for data in after.values()) == 1
    # The files with points include the operator's own header.
    for name in ("moe_norm_route.cpp", "moe_norm_route_kernel.h"):
        data = (kernel / name).read_text()
        if "TRACE_POINT" in data:
            assert '#include "moe_norm_route_base.h"  // optrace' in data, name
    # check reads it as a clean instrumented operator.
    res = runner.invoke(app, ["check", str(repo / OP_REL), "--no-compile", "--format", "json"])
    assert res.exit_code == 0, res.stdout
    report = json.loads(res.stdout)["operators"][0]
    assert report["instrumented"] is True
    g2 = next(g for g in report["gates"] if g["gate"] == "G2")
    assert g2["status"] == "pass"
    # A second apply changes nothing; strip gives every byte back and deletes the header it made.
    assert runner.invoke(app, ["apply", str(repo / OP_REL), "--check"]).exit_code == 0
    assert runner.invoke(app, ["strip", str(repo / OP_REL), "--write"]).exit_code == 0
    assert _tree(repo) == before
    assert not own.exists()


def test_an_existing_own_base_header_takes_the_block_not_the_vendored_one(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    kernel = repo / OP_REL / "op_kernel"
    # The operator's own base header, spelled in another case: still the operator's.
    own = kernel / "MoeNormRoute_base.h"
    own.write_text("#pragma once\n#include \"kernel_operator.h\"\n")
    before = _tree(repo)
    assert runner.invoke(app, ["apply", str(repo / OP_REL), "--write"]).exit_code == 0
    assert template() in own.read_bytes()
    assert not (kernel / "moe_norm_route_base.h").exists()
    vendored = f"{OP_REL}/op_kernel/sub_kernels/rms_norm_base.h"
    assert _tree(repo)[vendored] == before[vendored]
    assert runner.invoke(app, ["strip", str(repo / OP_REL), "--write"]).exit_code == 0
    assert _tree(repo) == before


def test_a_block_already_in_a_vendored_header_is_upgraded_there_never_doubled(tmp_path: Path) -> None:
    """A tree instrumented by an older optrace (or by hand) holds the block in the vendored
    header: a second block elsewhere would define MoeTracing twice. It stays and is kept
    current; nothing is created."""
    repo = _copy(tmp_path)
    kernel = repo / OP_REL / "op_kernel"
    vendored = kernel / "sub_kernels" / "rms_norm_base.h"
    old_block = template().replace(b"optrace-runtime-block v2", b"optrace-runtime-block v0", 1)
    assert old_block != template()  # an older block than the one apply writes
    vendored.write_bytes(vendored.read_bytes().replace(b"#endif\n", old_block + b"#endif\n"))
    assert runner.invoke(app, ["apply", str(repo / OP_REL), "--write"]).exit_code == 0
    assert template() in vendored.read_bytes() and old_block not in vendored.read_bytes()
    assert not (kernel / "moe_norm_route_base.h").exists()
    assert sum(b"optrace-runtime-block v" in d for d in _tree(repo).values()) == 1
