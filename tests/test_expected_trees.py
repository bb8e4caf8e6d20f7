"""Plans of our MoE fixtures against trees written by hand before the planner ran on them
(fixtures/<name>/expected_tree.txt): labels, nesting, core types, placement and index.

The expected trees are the review artefact: a performance engineer's tree for
each fixture. A change in the planner that alters one must change the file, in review.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_host_layers import cli, snapshot

from optrace.engine.model import Region
from optrace.pipeline.plan import plan_operator

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

CASES = {
    "moe_pipeline": FIXTURES / "moe_pipeline" / "fused_moe_pipeline",
    "class_model": FIXTURES / "class_model" / "norm" / "moe_norm_inherit",
    "spin_wait": FIXTURES / "spin_wait" / "moe_combine_poll",
    "templated_entry": FIXTURES / "templated_entry" / "matmul" / "moe_group_gemm",
    "unresolved_call": FIXTURES / "unresolved_call" / "moe_gate_stub",
    "naming_stutter": FIXTURES / "naming_stutter" / "moe_token_dispatch",
    "phase_barriers": FIXTURES / "phase_barriers" / "moe_phase_barriers",
    "budget_drops": FIXTURES / "budget_drops" / "moe_many_phases",
    "variant_flags": FIXTURES / "variant_flags" / "moe_variant_flags",
    "macro_work": FIXTURES / "macro_work" / "activation" / "moe_tile_glu",
    "key_chains": FIXTURES / "key_chains" / "moe_key_chain",
    "step_names": FIXTURES / "step_names" / "moe_step_names",
    "graph_only": FIXTURES / "graph_only" / "pooling" / "moe_pool_grad_argmax",
    "generated_api": FIXTURES / "generated_api" / "pooling" / "moe_pool_grad_argmax",
    "tile_tail": FIXTURES / "tile_tail" / "norm" / "moe_row_norm",
}


def expected_lines(name: str, file: str = "expected_tree.txt") -> list[str]:
    text = (FIXTURES / name / file).read_text(encoding="utf-8")
    return [ln.rstrip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def tree_lines(region: Region, op_dir: Path, indent: str = "") -> list[str]:
    anchor = region.anchor
    assert anchor is not None
    where = f"{anchor.path.resolve().relative_to(op_dir.resolve()).as_posix()}:{anchor.line}"
    bits = [f"{indent}{region.label}", f"[{'+'.join(sorted(region.cores))}]",
            "inside" if anchor.inside else "around", where]
    if region.index_var:
        bits.append(f"index={region.index_var}")
    out = [" ".join(bits)]
    for child in region.children:
        out += tree_lines(child, op_dir, indent + "  ")
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_equals_expected_tree(name: str) -> None:
    op_dir = CASES[name]
    plan = plan_operator(op_dir)
    got = tree_lines(plan.root, op_dir)
    assert got == expected_lines(name), "\n".join(got)


def test_a_class_run_by_a_macro_from_another_operators_folder_is_the_kernels_work() -> None:
    """`INIT_AND_RUN;` running a class whose header is in another operator's folder: its
    calls enter the call graph, so each arm's region is a phase and the tree is not thin."""
    op_dir = FIXTURES / "macro_work" / "norm" / "moe_scale_norm_v2"
    plan = plan_operator(op_dir)
    assert tree_lines(plan.root, op_dir) == expected_lines("macro_work", "expected_tree_v2.txt")
    assert [r.cost for r in plan.root.children] == ["phase", "phase"]
    assert not [d for d in plan.diagnostics if d.code == "OT023"]


def test_the_budget_drops_what_was_written_down_and_names_it() -> None:
    """The regions the budget drops, in order, with their class and place (text and JSON)."""
    from optrace.pipeline.plan_output import plan_json, render_text

    op_dir = CASES["budget_drops"]
    plan = plan_operator(op_dir)
    got = [f"{d.label} [{'+'.join(d.cores)}] {d.cost} "
           f"{d.path.resolve().relative_to(op_dir.resolve()).as_posix() if d.path else '-'}:{d.line}"
           for d in plan.dropped]
    assert got == expected_lines("budget_drops", "expected_dropped.txt")
    doc = plan_json(plan)
    assert [(d["label"], d["class"]) for d in doc["dropped"]] == [  # type: ignore[union-attr]
        ("prepare-params", "setup"), ("init", "setup"), ("norm-scores", "phase"), ("score-experts", "phase")]
    assert all(d["file"] and d["line"] and d["why"] for d in doc["dropped"])  # type: ignore[union-attr]
    text = render_text(plan)
    assert "dropped by the label budget (4, OT108" in text
    assert "  norm-scores [AIV] phase  @ " in text
    assert plan.lint["phases_dropped"] == 2 and plan.lint["phases_dropped_while_setup_kept"] == 0


def test_variant_conditions_are_the_ones_written_down() -> None:
    plan = plan_operator(CASES["variant_flags"])
    assert [v["condition"] for v in plan.variants] == expected_lines("variant_flags", "expected_variants.txt")


def test_a_run_of_key_tests_that_return_is_one_dispatch() -> None:
    """`if (KEY(1)) { ...; return; } if (KEY(2)) {...}`: one launch runs one arm, so each
    class's `Init` may be `init`; a test of another constant is not said as a negation."""
    plan = plan_operator(CASES["key_chains"])
    text = (FIXTURES / "key_chains" / "expected_variants.txt").read_text(encoding="utf-8")
    # conditions here start with `#if` / `#else`: only `# ` lines are comments
    expected = [ln.rstrip() for ln in text.splitlines() if ln.strip() and not ln.startswith("# ")]
    assert [v["condition"] for v in plan.variants] == expected
    inits = [r for r in plan.root.children if r.label == "init"]
    assert len(inits) == 6 and all(a.exclusive_with(b) for a in inits for b in inits if a is not b)


@pytest.mark.parametrize("name", sorted(CASES))
def test_labels_never_stutter_clash_or_fold(name: str) -> None:
    """The plan lint's name figures: 0 on every fixture with an expected tree."""
    lint = plan_operator(CASES[name]).lint
    assert (lint["labels_with_repeated_word"], lint["sibling_label_clashes"],
            lint["regions_folded_for_length"]) == (0, 0, 0)


def test_own_points_never_sit_in_a_tile_loop_and_strip_restores(tmp_path: Path) -> None:
    """apply -> check (no OT408: optrace's points are never inside a tile loop; every
    handshake bracketed) -> the instrumented tree plans and lints as the original ->
    strip gives the original bytes back."""
    from typer.testing import CliRunner

    from optrace.cli.app import app

    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "moe_pipeline", repo)
    op = repo / "fused_moe_pipeline"
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    runner = CliRunner()
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    applied = repo / "fused_moe_pipeline/op_kernel/comm/token_dispatch.h"
    text = applied.read_text()
    # the split function: send-counts around the sends, wait-counts around the spin
    assert text.index('"dispatch aiv send-counts", "B"') < text.index("rankIdx = 0")
    assert text.index("PipeBarrier<PIPE_ALL>") < text.index('"dispatch aiv send-counts", "E"')
    assert text.index('"dispatch aiv wait-counts", "B"') < text.index("while (readyRanks")
    checked = runner.invoke(app, ["check", str(op)])
    assert checked.exit_code == 0 and "OT408" not in checked.output + checked.stderr
    lint = plan_operator(op).lint
    assert lint["points_in_tile_loops"] == 0 and lint["unbracketed_handshakes"] == []
    assert runner.invoke(app, ["strip", str(op), "--write"]).exit_code == 0
    after = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".optrace" not in p.parts}
    assert after == before  # (.optrace/ holds apply's own bookkeeping, not sources)


def test_lint_figures_of_the_fixture() -> None:
    lint = plan_operator(CASES["moe_pipeline"]).lint
    assert lint == {
        "points_in_tile_loops": 0,
        "points_in_spin_loops": 0,
        "deepest_nesting": 7,
        "longest_label": "swiglu aiv group notify-gmm2",
        "longest_label_length": 28,
        "same_span_levels": 0,
        "setup_share": 0.04,  # `init` of 28 regions
        "phases_dropped": 0,
        "phases_dropped_while_setup_kept": 0,
        "unbracketed_handshakes": [],
        "handshakes_not_bracketed": 0,
        "labels_with_repeated_word": 0,
        "sibling_label_clashes": 0,
        "regions_folded_for_length": 0,
    }


def test_a_macro_call_with_a_type_argument_is_bracketed_with_its_semicolon(tmp_path: Path) -> None:
    """`RUN_SCALE_NORM(ScaleNormRows, float);` is an error node and a lone `;` to
    tree-sitter: the points go on lines of their own around the whole statement, so the
    macro's `do { ... } while (0)` keeps its `;` and check compiles what apply wrote."""
    repo = tmp_path / "macro_work"
    shutil.copytree(FIXTURES / "macro_work", repo)
    op_dir = repo / "norm" / "moe_scale_norm_v3"
    plan = plan_operator(op_dir)
    assert tree_lines(plan.root, op_dir) == expected_lines("macro_work", "expected_tree_v3.txt")
    before = snapshot(repo)
    code, _, err = cli("apply", str(op_dir), "--write")
    assert code == 0, err
    entry = (op_dir / "op_kernel" / "moe_scale_norm_v3.cpp").read_text()
    for arm in ("half", "float"):
        assert (f'MoeTracing(TRACE_POINT("rows", "B"));  // optrace\n'
                f"        RUN_SCALE_NORM(ScaleNormRows, {arm});\n"
                f'        MoeTracing(TRACE_POINT("rows", "E"));  // optrace\n') in entry
    code, out, err = cli("check", str(op_dir))  # compile safety included
    assert code == 0, out + err
    assert cli("strip", str(op_dir), "--write")[0] == 0
    assert snapshot(repo) == before
