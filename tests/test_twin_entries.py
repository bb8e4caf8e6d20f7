"""An operator with a second kernel entry of the same name (another SoC's build compiles
it: ops-nn's `*_apt.cpp`): it takes `GM_ADDR profiling_data` where the instrumented entry
does, or the OpDef's new output shifts its workspace and tiling pointers."""

from __future__ import annotations

from pathlib import Path

import pytest
from layer_snippets import KERNEL, make_repo
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.codemods.kernel_entry import entry_edits
from optrace.engine.edits import EditSet, new_contents
from optrace.pipeline.plan import plan_operator

TWIN = ("ops/demo_op/op_kernel/demo_op_apt.cpp",
        '#include "kernel_operator.h"\n'
        'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR y,\n'
        "    GM_ADDR workspace, GM_ADDR tiling)\n"
        "{\n    AscendC::SyncAll();\n}\n")
runner = CliRunner()


def _twin_after(op: Path) -> bytes:
    changes = new_contents(EditSet(entry_edits(plan_operator(op), "B")))
    return changes[(op / "op_kernel" / "demo_op_apt.cpp").resolve()][1]


def test_the_other_entry_takes_the_buffer_before_its_workspace(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {TWIN[0]: TWIN[1]})
    after = _twin_after(op).decode()
    assert after == TWIN[1].replace(
        "    GM_ADDR workspace", "    /*optrace<*/GM_ADDR profiling_data, /*>optrace*/GM_ADDR workspace")


def test_apply_strip_and_a_second_apply_with_the_other_entry(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {TWIN[0]: TWIN[1]})
    root = op.parent.parent
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    out = runner.invoke(app, ["apply", str(op), "--write", "--mode", "B"])
    assert out.exit_code == 0, out.output
    assert b"GM_ADDR profiling_data" in (op / "op_kernel" / "demo_op_apt.cpp").read_bytes()
    again = runner.invoke(app, ["apply", str(op), "--check"])
    assert again.exit_code == 0, again.output
    out = runner.invoke(app, ["strip", str(op), "--write"])
    assert out.exit_code == 0, out.output
    after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and ".optrace" not in p.parts}
    assert after == before


def test_an_entry_of_another_name_is_left_alone(tmp_path: Path) -> None:
    other = TWIN[1].replace("void demo_op(", "void demo_op_helper_kernel(")
    op = make_repo(tmp_path, {TWIN[0]: other})
    changes = new_contents(EditSet(entry_edits(plan_operator(op), "B")))
    assert (op / "op_kernel" / "demo_op_apt.cpp").resolve() not in changes


def test_an_other_entry_whose_parameters_are_a_macro_is_refused_at_its_line(tmp_path: Path) -> None:
    macro = ('#define DEMO_PARAMS GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling\n'
             'extern "C" __global__ __aicore__ void demo_op(DEMO_PARAMS)\n{\n}\n')
    op = make_repo(tmp_path, {TWIN[0]: macro})
    with pytest.raises(Exception) as info:
        entry_edits(plan_operator(op), "B")
    assert "OT313" in str(getattr(info.value, "diagnostic", info.value).code)  # type: ignore[union-attr]
    assert info.value.diagnostic.line == 2  # type: ignore[attr-defined]


def test_the_instrumented_entry_is_the_same_with_or_without_the_other(tmp_path: Path) -> None:
    alone = new_contents(EditSet(entry_edits(plan_operator(make_repo(tmp_path / "a", {})), "B")))
    twin_op = make_repo(tmp_path / "b", {TWIN[0]: TWIN[1]})
    with_twin = new_contents(EditSet(entry_edits(plan_operator(twin_op), "B")))
    assert [v[1] for k, v in alone.items() if k.name == "demo_op.cpp"] == \
        [v[1] for k, v in with_twin.items() if k.name == "demo_op.cpp"]
    assert KERNEL  # the instrumented entry: layer_snippets' own


def test_a_tree_instrumented_without_it_gets_it_on_the_next_apply(tmp_path: Path) -> None:
    """An older optrace instrumented the entry and left the other one as it was: apply
    again adds the parameter there (and changes nothing else)."""
    op = make_repo(tmp_path, {TWIN[0]: TWIN[1]})
    assert runner.invoke(app, ["apply", str(op), "--write", "--mode", "B"]).exit_code == 0
    twin = op / "op_kernel" / "demo_op_apt.cpp"
    twin.write_text(TWIN[1])  # as an older apply left it
    entry = (op / "op_kernel" / "demo_op.cpp").read_bytes()
    out = runner.invoke(app, ["apply", str(op), "--write"])
    assert out.exit_code == 0, out.output
    assert b"/*optrace<*/GM_ADDR profiling_data, /*>optrace*/GM_ADDR workspace" in twin.read_bytes()
    assert (op / "op_kernel" / "demo_op.cpp").read_bytes() == entry
