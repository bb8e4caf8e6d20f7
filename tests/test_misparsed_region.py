"""A region in code tree-sitter misreads (fixtures/misparsed_region: a macro taking a type
inside a bracketed loop): it moves to its nearest placeable parent with a warning naming
both places (OT025) instead of refusing the operator (OT302); apply, check and strip go
through, and its children keep their labels."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_host_layers import cli, snapshot

from optrace.engine.codes import OT025
from optrace.engine.diagnostics import Severity
from optrace.pipeline import plan as plan_module
from optrace.pipeline.plan import plan_operator

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "misparsed_region"
OP = "moe_group_cast"


def test_the_unparsed_region_moves_to_its_parent_with_a_warning() -> None:
    plan = plan_operator(FIXTURE / OP)
    labels = [r.label for r in plan.root.walk()]
    assert "load" not in labels and "group cast" in labels
    moved = [d for d in plan.findings if d.code == OT025.code]
    assert len(moved) == 1 and moved[0].severity == Severity.WARNING
    assert moved[0].line == 34
    kernel = "moe_group_cast/op_kernel/moe_group_cast.cpp"
    assert moved[0].message == (f'the points of "load" cannot be placed at {kernel}:34: the code there '
                                f'does not parse; its time is counted in "processing" ({kernel}:89)')


def test_apply_check_strip_go_through(tmp_path: Path) -> None:
    repo = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, repo)
    before = snapshot(repo)
    op = repo / OP
    code, _out, err = cli("apply", str(op), "--write")
    assert code == 0, err
    kernel = (op / "op_kernel/moe_group_cast.cpp").read_text()
    assert 'TRACE_POINT("load"' not in kernel and 'TRACE_POINT("barrier", "B")' in kernel
    code, out, err = cli("check", str(op), "--no-compile")
    assert code == 0, out + err
    code, _out, err = cli("strip", str(op), "--write")
    assert code == 0, err
    assert snapshot(repo) == before


def test_children_of_a_moved_region_keep_their_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    """A moved region's children may parse: they move up with it, labels unchanged."""
    real = plan_module.unplaceable
    monkeypatch.setattr(plan_module, "unplaceable",
                        lambda parsed, region: region.label == "group" or real(parsed, region))
    plan = plan_operator(FIXTURE / OP)
    top = [c.label for c in plan.root.children]
    assert "group" not in top and "group cast" in top
    notes = [d.message for d in plan.findings if d.code == OT025.code]
    assert any(n.startswith('the points of "group" cannot be placed') for n in notes), notes
