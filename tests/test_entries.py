"""Entries of every shape: a function-template entry whose work is chosen by `if constexpr`
under an arch guard, its kernel classes declared inside a function-like macro; each arm a
variant labelled by what selects it. An entry that still cannot be read is refused naming
the construct and its line."""

from __future__ import annotations

from pathlib import Path

from optrace.engine.analysis import unreadable_entry
from optrace.engine.cpp import new_parser, parse_file
from optrace.engine.source import DEFAULT_QUALIFIERS, SourceFile, normalise
from optrace.pipeline.plan import plan_operator

ROOT = Path(__file__).resolve().parent.parent
TEMPLATED = ROOT / "fixtures" / "templated_entry" / "matmul" / "moe_group_gemm"


def test_each_constexpr_arm_is_a_variant_labelled_by_what_selects_it() -> None:
    plan = plan_operator(TEMPLATED)
    guard = "#if defined(__NPU_ARCH__) && (__NPU_ARCH__ == 3510)"
    assert [v["condition"] for v in plan.variants] == [
        f"{guard} && MODE == MOE_GEMM_BASIC",
        f"{guard} && !(MODE == MOE_GEMM_BASIC) && MODE == MOE_GEMM_SPLIT_K",
        f"{guard} && !(MODE == MOE_GEMM_BASIC) && !(MODE == MOE_GEMM_SPLIT_K)",
    ]
    assert [v["labels"] for v in plan.variants] == [{"AIC": 2}, {"AIC": 4}, {"AIC": 3}]
    assert not [d for d in plan.diagnostics if d.code == "OT010"]


def test_a_condition_written_over_lines_is_shown_on_one(tmp_path: Path) -> None:
    op = tmp_path / "moe_group_gemm"
    op.mkdir()
    for f in (TEMPLATED / "op_kernel").iterdir():
        (op / "op_kernel").mkdir(exist_ok=True)
        text = f.read_text()
        if f.suffix == ".cpp":
            text = text.replace("if constexpr (MODE == MOE_GEMM_BASIC) {",
                                "if constexpr (MODE == MOE_GEMM_BASIC &&\n                  TRANS_B == 0) {")
        (op / "op_kernel" / f.name).write_text(text)
    conditions = [v["condition"] for v in plan_operator(op).variants]
    assert conditions[0].endswith("&& MODE == MOE_GEMM_BASIC && TRANS_B == 0")
    assert all("\n" not in c and "  " not in c for c in conditions)


def test_an_entry_that_cannot_be_read_names_the_construct_and_its_line(tmp_path: Path) -> None:
    # tree-sitter's recovery reads nearly anything as a function now; the refusal is built
    # from the parse's error lines, as the analysis hands it a file it found no entry in.
    raw = (b'#include "kernel_operator.h"\n'
           b'extern "C" __global__ __aicore__ void broken_op(GM_ADDR x, GM_ADDR tiling)\n'
           b"{\n"
           b"    op.Init(x;  // a construct the parse cannot read\n")
    path = tmp_path / "broken_op.cpp"
    src = SourceFile(path, raw, normalise(raw, DEFAULT_QUALIFIERS))
    pf = parse_file(new_parser(), src)
    pf.error_lines = [4]
    d = unreadable_entry("broken_op", path, 2, pf)
    assert d.code == "OT010" and d.line == 2 and d.path == path
    assert "could not be parsed" not in d.message
    assert "line 4" in d.message and "`op.Init(x; // a construct the parse cannot read`" in d.message
    bare = unreadable_entry("broken_op", path, 2, None)
    assert bare.code == "OT010" and "no function definition" in bare.message
