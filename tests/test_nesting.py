"""Input depth never overflows the interpreter: the planner's walk is bounded (OT016 at
the statement that crosses 256 levels, exit 2, nothing written), and real nesting well
below the bound plans as usual."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine.diagnostics import InputError
from optrace.engine.planner import MAX_NESTING
from optrace.pipeline.plan import plan_operator


def _op(tmp_path: Path, body: str) -> Path:
    op = tmp_path / "deep_op"
    (op / "op_kernel").mkdir(parents=True)
    (op / "op_kernel" / "deep_op.cpp").write_text(
        '#include "kernel_operator.h"\n'
        'extern "C" __global__ __aicore__ void deep_op(GM_ADDR x, GM_ADDR tiling)\n{\n' + body + "\n}\n")
    return op


@pytest.mark.parametrize("shape", ["if", "brace", "loop"])
def test_a_thousand_levels_are_refused_at_their_line(tmp_path: Path, shape: str) -> None:
    n = 1000
    open_, close = {
        "if": ("#if 1\n", "#endif\n"),
        "brace": ("{\n", "}\n"),
        "loop": ("for (uint32_t expertIdx = 0; expertIdx < 4; ++expertIdx) {\n", "}\n"),
    }[shape]
    op = _op(tmp_path, open_ * n + "    AscendC::SyncAll();\n" + close * n)
    with pytest.raises(InputError) as info:
        plan_operator(op)
    d = info.value.diagnostic
    assert d.code == "OT016" and str(MAX_NESTING) in d.message and d.path.name == "deep_op.cpp"
    assert 3 + MAX_NESTING // 2 <= d.line <= 3 + MAX_NESTING + 1  # the statement that crossed it
    before = {p: p.read_bytes() for p in op.rglob("*") if p.is_file()}
    for command in (["plan"], ["apply", "--write"]):
        result = CliRunner().invoke(app, [*command, str(op)])
        assert result.exit_code == 2 and "OT016" in result.output + result.stderr, command
    # Nothing of optrace's is in the file: strip has nothing to undo, and says so cleanly.
    assert CliRunner().invoke(app, ["strip", "--write", str(op)]).exit_code == 0
    assert {p: p.read_bytes() for p in op.rglob("*") if p.is_file()} == before


def test_nesting_well_inside_the_bound_plans(tmp_path: Path) -> None:
    depth = 100
    op = _op(tmp_path, "#if 1\n" * depth + "    AscendC::SyncAll();\n" + "#endif\n" * depth)
    plan = plan_operator(op)
    assert plan.lint["deepest_nesting"] >= depth
    assert any(r.label.endswith("barrier") for r in plan.root.walk())
