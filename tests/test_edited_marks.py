"""The plan's "edited" marks are apply's edits: on every fixture operator, the files the
plan lists outside the operator directory as edited are exactly the files outside it that
`apply` changes or creates (no more: a repository's every build script is "found" by the
build-hook search, and only the one apply edits is marked)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from source_fuzz import fixture_operators
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.pipeline.apply import apply_changes

runner = CliRunner()
OPERATORS = {op.relative_to(top.parent).as_posix(): (top, op) for top, op in fixture_operators()}


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_edited_marks_are_the_files_apply_edits(tmp_path: Path, name: str) -> None:
    top, op = OPERATORS[name]
    repo = tmp_path / top.name
    shutil.copytree(top, repo, symlinks=True)
    op = repo / op.relative_to(top)
    res = runner.invoke(app, ["plan", str(op), "--format", "json"])
    assert res.exit_code in (0, 1), res.stderr
    plan = json.loads(res.stdout)["operators"][0]
    root = Path(plan["repo_root"])
    marked = {(root / f["file"]).resolve() for f in plan["outside"] if f["edited"]}
    changes = apply_changes(op)
    edited = {p.resolve() for p in changes.changes if not p.resolve().is_relative_to(op.resolve())}
    assert marked == edited, (sorted(map(str, marked - edited)), sorted(map(str, edited - marked)))
