"""The plan's "edited" marks are apply's edits: on every fixture operator, the files the
plan lists outside the operator directory as edited are exactly the files outside it that
`apply` changes or creates (no more: a repository's every build script is "found" by the
build-hook search, and only the one apply edits is marked)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from layer_snippets import make_repo
from source_fuzz import fixture_operators
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine.sharing import outside_files
from optrace.pipeline.apply import apply_changes
from optrace.pipeline.plan import plan_operator

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


def test_a_found_file_is_marked_edited_when_it_resolves_to_an_edited_file(tmp_path: Path) -> None:
    """`outside_files` tells a found file from the edited ones by its identity before
    resolving it: a link to an edited file is marked, a hard link (the same inode under
    another resolved path) and a look-alike are not."""
    op = make_repo(tmp_path, {"build/build.sh": "#!/bin/bash\ncp -r op_kernel/ out/\n",
                              "other/build.sh": "#!/bin/bash\ncp -r op_kernel/ out/\n"})
    root = tmp_path / "repo"
    (root / "link.sh").symlink_to(root / "build" / "build.sh")
    os.link(root / "build" / "build.sh", root / "hard.sh")
    plan = plan_operator(op)
    found = {f.path.relative_to(root).as_posix() for f in plan.analysis.layers.found["build_script"]}
    assert found == {"build/build.sh", "other/build.sh", "link.sh", "hard.sh"}
    edited = frozenset({(root / "build" / "build.sh").resolve()})
    listed = {f.path.relative_to(root).as_posix(): f.edited for f in outside_files(plan.analysis, edited)}
    assert listed == {"build/build.sh": True, "link.sh": True}
    # apply's edits unknown: every file found outside the operator is listed
    assert {f.path.relative_to(root).as_posix() for f in outside_files(plan.analysis)} == found
