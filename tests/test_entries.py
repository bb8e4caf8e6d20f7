"""Entries of every shape: a function-template entry whose work is chosen by `if constexpr`
under an arch guard, its kernel classes declared inside a function-like macro; each arm a
variant labelled by what selects it. An entry that still cannot be read is refused naming
the construct and its line."""

from __future__ import annotations

from pathlib import Path

from layer_snippets import make_repo
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine.analysis import unreadable_entry
from optrace.engine.cpp import new_parser, parse_file
from optrace.engine.source import DEFAULT_QUALIFIERS, SourceFile, normalise
from optrace.pipeline.plan import plan_operator, simplify_condition

ROOT = Path(__file__).resolve().parent.parent
TEMPLATED = ROOT / "fixtures" / "templated_entry" / "matmul" / "moe_group_gemm"


def test_each_constexpr_arm_is_a_variant_labelled_by_what_selects_it() -> None:
    plan = plan_operator(TEMPLATED)
    guard = "#if defined(__NPU_ARCH__) && __NPU_ARCH__ == 3510"
    assert [v["condition"] for v in plan.variants] == [
        f"{guard} && MODE == MOE_GEMM_BASIC",
        # `!(MODE == MOE_GEMM_BASIC)` is implied by testing another constant: not said
        f"{guard} && MODE == MOE_GEMM_SPLIT_K",
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


def test_a_macro_named_in_lower_case_is_expanded_like_any_other(tmp_path: Path) -> None:
    op = tmp_path / "lower_op"
    (op / "op_kernel").mkdir(parents=True)
    (op / "op_kernel" / "k.h").write_text("""\
#pragma once
template <typename T>
class LowerKernel {
public:
    __aicore__ inline LowerKernel(TPipe *pipe) : pipe_(pipe) {}
    __aicore__ inline void Init(GM_ADDR x) { xGm_.SetGlobalBuffer((__gm__ T *)x); }
    __aicore__ inline void Process()
    {
        for (uint32_t expertIdx = 0; expertIdx < 8; ++expertIdx) {
            AscendC::DataCopy(a_, xGm_[expertIdx], 16);
            AscendC::Muls(a_, a_, (T)2, 16);
            AscendC::SyncAll();
        }
    }
    TPipe *pipe_;
    AscendC::LocalTensor<T> a_;
    AscendC::GlobalTensor<T> xGm_;
};
""")
    (op / "op_kernel" / "lower_op.cpp").write_text("""\
#include "kernel_operator.h"
#include "k.h"
#define lower_op_IMPL(INPUT_TYPE)              \\
    do {                                       \\
        TPipe pipe;                            \\
        LowerKernel<INPUT_TYPE> op(&pipe);     \\
        op.Init(x);                            \\
        op.Process();                          \\
    } while (0)
extern "C" __global__ __aicore__ void lower_op(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    lower_op_IMPL(half);
}
""")
    plan = plan_operator(op)
    regions = [r for r in plan.root.walk() if r is not plan.root]
    # The class's own code is planned below the macro's call (without the expansion the
    # tree is the root alone).
    assert any(r.index_var == "expertIdx" and r.anchor is not None and r.anchor.path.name == "k.h"
               for r in regions)


def test_variant_conditions_are_simplified() -> None:
    """No repeated conjunct, no variant whose condition contradicts itself, identical
    variants merged (an arm nested under the same test as its parent)."""
    assert simplify_condition(["A && B", "A", "(B)"]) == "A && B"
    flag = "EXEC_FLAG & EXEC_FLAG_DEEP_FUSE"
    assert simplify_condition([flag, f"!({flag})"]) is None
    assert simplify_condition(["(A || B) && C", "!(A || B)"]) is None
    assert simplify_condition(["!(A)", "!A", "B"]) == "!(A) && B"  # one test spelt two ways
    assert simplify_condition(["(A & M) == 0", "A & M"]) is None
    assert simplify_condition(["x != 0", "!(x)"]) is None


def test_an_arm_nested_under_its_own_test_has_no_impossible_variant(tmp_path: Path) -> None:
    op = tmp_path / "nested_op"
    (op / "op_kernel").mkdir(parents=True)
    (op / "op_kernel" / "nested_op.cpp").write_text("""\
#include "kernel_operator.h"
__aicore__ inline void Deep()
{ for (uint32_t expertIdx = 0; expertIdx < 4; ++expertIdx) { AscendC::SyncAll(); } }
__aicore__ inline void Flat()
{ for (uint32_t groupIdx = 0; groupIdx < 4; ++groupIdx) { AscendC::SyncAll(); } }
template <int FLAG>
__global__ __aicore__ void nested_op(GM_ADDR x, GM_ADDR tiling)
{
    if constexpr (FLAG & 1) {
        if constexpr (FLAG & 1) {
            Deep();
        } else {
            Flat();
        }
    } else {
        Flat();
    }
}
""")
    conditions = [v["condition"] for v in plan_operator(op).variants]
    assert all("!(FLAG & 1)" not in c or "FLAG & 1 &&" not in c for c in conditions), conditions
    assert len(conditions) == len(set(conditions))
    assert "FLAG & 1" in conditions and "!(FLAG & 1)" in conditions


def test_a_macro_running_a_process_of_another_name_is_followed(tmp_path: Path) -> None:
    """`#define INIT_CUT_N_PROCESS op.Init(...); op.CutNProcess()` defined inside the entry:
    the class's `CutNProcess` is its work (before: the tree stopped at the root)."""
    op = tmp_path / "cut_op"
    (op / "op_kernel").mkdir(parents=True)
    (op / "op_kernel" / "cut_op.cpp").write_text("""\
#include "kernel_operator.h"
template <typename T>
class CutKernel {
public:
    __aicore__ inline void Init(GM_ADDR x) { xGm_.SetGlobalBuffer((__gm__ T *)x); }
    __aicore__ inline void CutNProcess()
    {
        for (uint32_t expertIdx = 0; expertIdx < 8; ++expertIdx) {
            AscendC::DataCopy(a_, xGm_[expertIdx], 16);
            AscendC::Muls(a_, a_, (T)2, 16);
            AscendC::SyncAll();
        }
    }
    AscendC::LocalTensor<T> a_;
    AscendC::GlobalTensor<T> xGm_;
};
extern "C" __global__ __aicore__ void cut_op(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling)
{
#define INIT_CUT_N_PROCESS \\
    op.Init(x);            \\
    op.CutNProcess()
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    if (TILING_KEY_IS(10)) {
        CutKernel<float> op;
        INIT_CUT_N_PROCESS;
    }
}
""")
    plan = plan_operator(op)
    assert any(r.index_var == "expertIdx" for r in plan.root.walk())


def test_a_plain_else_if_ends_a_variant_chain_as_its_last_arm(tmp_path: Path) -> None:
    """`if constexpr (A) {...} else if (b) {...}`: the plain `else if` is the chain's else
    arm (variant `!(A)`), so its regions never share a launch with A's — the same step in
    both arms keeps one label, and no variant holds both."""
    op = tmp_path / "chain_op"
    (op / "op_kernel").mkdir(parents=True)
    (op / "op_kernel" / "chain_op.cpp").write_text("""\
#include "kernel_operator.h"
template <int MODE>
__global__ __aicore__ void chain_op(GM_ADDR x, GM_ADDR tiling)
{
    if constexpr (MODE == 1) {
        Sched sch;
        sch.Init(x);
        sch.Process();
    } else if (approximate == 2) {
        Sched sch;
        sch.Init(x);
        sch.Process();
    }
}
""")
    plan = plan_operator(op)
    conditions = [v["condition"] for v in plan.variants]
    assert conditions == ["MODE == 1", "!(MODE == 1)"], conditions
    process = [r for r in plan.root.walk() if r.label == "sched"]  # `sch.Process()`: by its class
    assert len(process) == 2 and process[0].exclusive_with(process[1])
    assert plan.lint["sibling_label_clashes"] == 0


def test_an_entry_whose_parameters_come_from_a_macro_is_refused_naming_it(tmp_path: Path) -> None:
    """`void entry(ENTRY_PARAMS)` (ops-nn's `inplace_apply_adagrad_v2`): profiling_data
    belongs before workspace, inside the macro; put after it, it followed `tiling` and the
    launch's pointers shifted. Refused at the entry's line, nothing written."""
    kernel = ("#include \"kernel_operator.h\"\n"
              "#define DEMO_PARAMS \\\n    GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling\n"
              "extern \"C\" __global__ __aicore__ void demo_op(DEMO_PARAMS)\n{\n"
              "    for (uint32_t t = 0; t < 8; t++) { CopyIn(t); Compute(t); CopyOut(t); SyncAll(); }\n}\n")
    op = make_repo(tmp_path, {}, kernel)
    entry = op / "op_kernel" / "demo_op.cpp"
    res = CliRunner().invoke(app, ["apply", str(op), "--write"])
    assert res.exit_code == 2, res.stdout
    assert ("demo_op.cpp:4: OT313 the kernel entry's parameters come from the macro `DEMO_PARAMS`"
            in res.stderr), res.stderr
    assert entry.read_text() == kernel
    written_out = kernel.replace("(DEMO_PARAMS)", "(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)")
    entry.write_text(written_out)
    assert CliRunner().invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    flat = " ".join(entry.read_text().split())  # the parameter may go on a line of its own
    assert "GM_ADDR profiling_data, /*>optrace*/GM_ADDR workspace" in flat
