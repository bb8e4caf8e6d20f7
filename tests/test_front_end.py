"""Front-end constructs met in public operator repositories (issue #11 §3, §4), each on a
minimal operator tree of our own: the plan states the expected tree, and where apply
writes, strip takes every byte back."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine.host_compile import host_compile
from optrace.engine.index_cache import reading_only
from optrace.engine.model import Region
from optrace.engine.plan import Plan
from optrace.pipeline.plan import plan_operator

runner = CliRunner()


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / ".git").mkdir(exist_ok=True)
    return root


def tree(plan: Plan) -> list[tuple[int, str, str]]:
    """(depth, label, `file:line` of the B point) in plan order, below the root."""
    out = []

    def visit(r: Region, depth: int) -> None:
        for c in r.children:
            assert c.anchor is not None
            out.append((depth, c.label, f"{c.anchor.path.name}:{c.anchor.line}"))
            visit(c, depth + 1)

    visit(plan.root, 1)
    return out


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".optrace" not in p.parts and ".git" not in p.parts}


ENTRY_HEAD = ('extern "C" __global__ __aicore__ void {op}(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
              "GM_ADDR tiling)\n{{\n")


def kernel_class(name: str, work: str) -> str:
    """A class whose Process runs a phase loop over groups with enough work to be traced."""
    body = "".join(f"            {work}{i}(g);\n" for i in range(3))
    helpers = "".join(f"    __aicore__ inline void {work}{i}(int g)\n    {{\n" + "        acc_ += g;\n" * 8
                      + "    }\n" for i in range(3))
    return (f"class {name} {{\npublic:\n"
            "    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR workspace) {}\n"
            "    __aicore__ inline void Process()\n    {\n"
            "        for (int groupIdx = 0; groupIdx < groups_; ++groupIdx) {\n" + body + "        }\n    }\n"
            f"{helpers}    int acc_ = 0;\n    int groups_ = 4;\n}};\n")


# --- one variable name, one class per tiling-key branch ----------------------------------------


def test_a_name_declared_in_each_branch_resolves_to_its_own_class(tmp_path: Path) -> None:
    branches = "".join(
        f"    {'else ' if i else ''}if (TILING_KEY_IS({i})) {{\n        Kernel{c} op;\n"
        "        op.Init(x, y, workspace);\n        op.Process();\n    }\n"
        for i, c in enumerate("ABC"))
    files = {"ops/multi_key/op_kernel/multi_key.cpp":
             '#include "kernels.h"\n' + ENTRY_HEAD.format(op="multi_key") + branches + "}\n",
             "ops/multi_key/op_kernel/kernels.h":
             "".join(kernel_class(f"Kernel{c}", f"Step{c}") for c in "ABC")}
    plan = plan_operator(write_tree(tmp_path, files) / "ops/multi_key")
    # each branch's op.Process() is its own class's loop (the last declaration of `op`
    # used to win, so all three were KernelC's); the class level is lifted (OT102), and
    # the variants share the loop's label (one launch runs one of them)
    assert tree(plan) == [
        (1, "group", "kernels.h:6"), (2, "group step-a0", "kernels.h:13"),
        (2, "group step-a1", "kernels.h:24"), (2, "group step-a2", "kernels.h:35"),
        (1, "group", "kernels.h:53"), (2, "group step-b0", "kernels.h:60"),
        (2, "group step-b1", "kernels.h:71"), (2, "group step-b2", "kernels.h:82"),
        (1, "group", "kernels.h:100"), (2, "group step-c0", "kernels.h:107"),
        (2, "group step-c1", "kernels.h:118"), (2, "group step-c2", "kernels.h:129")]
    steps = [c.function for loop in plan.root.children for c in loop.children]
    want = [f":Kernel{c}::Step{c}{i}" for c in "ABC" for i in range(3)]
    assert len(steps) == len(want)
    assert all(f is not None and f.endswith(w) for f, w in zip(steps, want, strict=True))


# --- classes from an absent header, one per variant ----------------------------------------------


def test_work_on_a_class_from_an_absent_header_is_traced_at_its_call_sites(tmp_path: Path) -> None:
    files = {"ops/elem/op_kernel/elem.cpp":
             '#include "kernel_operator.h"\n#include "vendor/elementwise_sch.h"\n'
             + ENTRY_HEAD.format(op="elem") + "    TPipe pipe;\n    pipe.Init();\n"
             "    if (TILING_KEY_IS(1)) {\n        ElementwiseSch<half> sch(&pipe);\n"
             "        sch.Init(x, y);\n        sch.Process();\n"
             "    } else if (TILING_KEY_IS(2)) {\n        ElementwiseSch<float> sch(&pipe);\n"
             "        sch.Init(x, y);\n        sch.Process();\n    }\n}\n"}
    root = write_tree(tmp_path, files)
    plan = plan_operator(root / "ops/elem")
    # one label per step shared by the variants (one launch runs one), never `process-2`;
    # AscendC's own `pipe.Init()` is not the operator's work
    # `sch.Process()` is named by the class (`process` says only that work runs)
    assert tree(plan) == [(1, "init", "elem.cpp:9"), (1, "elementwise-sch", "elem.cpp:10"),
                          (1, "init", "elem.cpp:13"), (1, "elementwise-sch", "elem.cpp:14")]
    before = snapshot(root)
    assert runner.invoke(app, ["apply", str(root / "ops/elem"), "--write"]).exit_code == 0
    text = (root / "ops/elem/op_kernel/elem.cpp").read_text()
    assert text.count('MoeTracing(TRACE_POINT("elementwise-sch", "B"));  // optrace') == 2
    assert "sch.Init(x, y);" in text  # no profiling argument for a class we cannot change
    assert runner.invoke(app, ["strip", str(root / "ops/elem"), "--write"]).exit_code == 0
    assert snapshot(root) == before


# --- variant functions the entry calls -------------------------------------------------------------


def test_small_variant_functions_called_by_the_entry_are_regions(tmp_path: Path) -> None:
    fn = ("__aicore__ inline void Process{t}(GM_ADDR x, GM_ADDR y)\n{{\n"
          "    for (int32_t i = 0; i < 8; i++) {{\n        VecRun(x, y, i);\n    }}\n}}\n")
    files = {"ops/vec/op_kernel/vec.cpp":
             "".join(fn.format(t=t) for t in ("Fp16", "Fp32"))
             + "template <uint32_t schMode>\n" + ENTRY_HEAD.replace('extern "C" ', "").format(op="vec")
             + "    if constexpr (schMode == 0) {\n        ProcessFp16(x, y);\n"
             "    } else {\n        ProcessFp32(x, y);\n    }\n}\n"}
    plan = plan_operator(write_tree(tmp_path, files) / "ops/vec")
    assert [(d, label) for d, label, _ in tree(plan)] == [(1, "fp16"), (1, "fp32")]


# --- preprocessor arms ------------------------------------------------------------------------------


def test_every_preprocessor_arm_is_planned_and_a_missing_header_collapses_none(tmp_path: Path) -> None:
    files = {"ops/arch/op_kernel/arch.cpp":
             '#if __has_include("arch35/impl.h")\n#include "arch35/impl.h"\n#else\n#include "arch22/impl.h"\n'
             "#endif\n" + ENTRY_HEAD.format(op="arch")
             + "#if defined(__DAV_C310__)\n    KernelNew op;\n    op.Init(x, y, workspace);\n"
             "    op.Process();\n#elif defined(__DAV_C220__)\n    KernelOld op;\n"
             "    op.Init(x, y, workspace);\n    op.Process();\n"
             "#else\n    KernelGone op;\n    op.Process();\n#endif\n}\n",
             # arch22/impl.h is absent (a submodule not checked out)
             "ops/arch/op_kernel/arch35/impl.h":
                 kernel_class("KernelNew", "New") + kernel_class("KernelOld", "Old")}
    plan = plan_operator(write_tree(tmp_path, files) / "ops/arch")
    # each arm its variant: the two classes found (their Process lifted, OT102) and the
    # class of the arm whose header is absent, measured at its call
    assert [(d, label) for d, label, _ in tree(plan)] == [
        (1, "group"), (2, "group new0"), (2, "group new1"), (2, "group new2"),
        (1, "group"), (2, "group old0"), (2, "group old1"), (2, "group old2"),
        (1, "gone")]
    assert any(h == "arch22/impl.h" for _, _, h in plan.analysis.includes.missing)


# --- kernel headers of a sibling operator (§4) ------------------------------------------------------


SIBLING = {
    "norm/rms_norm/op_kernel/rms_norm.cpp":
        '#include "rms_norm_kernel.h"\n' + ENTRY_HEAD.format(op="rms_norm")
        + "    RmsNormKernel op;\n    op.Init(x, y, workspace);\n    op.Process();\n}\n",
    "norm/rms_norm/op_kernel/rms_norm_kernel.h":
        "#pragma once\n#include \"kernel_operator.h\"\n" + kernel_class("RmsNormKernel", "Norm"),
    # the v2 operator reuses v1's class through the build tree's layout (`../<op>/...`)
    "norm/rms_norm_v2/op_kernel/rms_norm_v2.cpp":
        '#include "../rms_norm/rms_norm_kernel.h"\n' + ENTRY_HEAD.format(op="rms_norm_v2")
        + "    RmsNormKernel op;\n    op.Init(x, y, workspace);\n    op.Process();\n    Finalize(y);\n}\n",
    "norm/rms_norm_v2/op_kernel/finalize.h": "",
}


def test_a_sibling_operators_header_is_found_and_measured_at_the_call_site(tmp_path: Path) -> None:
    files = dict(SIBLING)
    v2 = "norm/rms_norm_v2/op_kernel/rms_norm_v2.cpp"
    files[v2] = files[v2].replace("    Finalize(y);\n", "")
    root = write_tree(tmp_path, files)
    plan = plan_operator(root / "norm/rms_norm_v2")
    sibling_header = (root / "norm/rms_norm/op_kernel/rms_norm_kernel.h").resolve()
    assert sibling_header in plan.analysis.includes.files
    assert [(path.name, found) for path, _, _, found in plan.analysis.includes.searched] == \
        [("rms_norm_v2.cpp", sibling_header)]
    # its time is measured where v2 calls it; no point goes into the file v1 compiles
    # (named without the operator's own words, `rms` and `norm` of rms_norm_v2, but its
    # phase word: `norm`)
    assert tree(plan) == [(1, "norm", "rms_norm_v2.cpp:6")]
    assert "defined outside the operator directory" in plan.root.children[0].notes[0]


def test_plan_lists_the_files_outside_the_operator_and_who_else_includes_them(tmp_path: Path) -> None:
    files = dict(SIBLING)
    # a third operator reaches the same header by a relative path of its own
    files["norm/rms_norm_grad/op_kernel/rms_norm_grad.cpp"] = (
        '#include "../../rms_norm/op_kernel/rms_norm_kernel.h"\n' + ENTRY_HEAD.format(op="rms_norm_grad")
        + "    RmsNormKernel op;\n    op.Process();\n}\n")
    # and one with a header of the same name that is its own
    files["norm/layer_norm/op_kernel/layer_norm.cpp"] = (
        '#include "rms_norm_kernel.h"\n' + ENTRY_HEAD.format(op="layer_norm") + "}\n")
    files["norm/layer_norm/op_kernel/rms_norm_kernel.h"] = "#pragma once\n"
    root = write_tree(tmp_path, files)
    plan = plan_operator(root / "norm/rms_norm_v2")
    [shared] = plan.outside_files()
    assert shared.path.resolve() == (root / "norm/rms_norm/op_kernel/rms_norm_kernel.h").resolve()
    assert not shared.edited and shared.role == "kernel header"
    assert [p.name for p in shared.included_by] == ["rms_norm", "rms_norm_grad"]
    text = runner.invoke(app, ["plan", str(root / "norm/rms_norm_v2")]).stdout
    # One entry, its line broken where its fields part (the plan keeps to 120 columns).
    assert ("outside the operator directory:\n"
            "  norm/rms_norm/op_kernel/rms_norm_kernel.h\n"
            "      kernel header, read: its code is measured at the call sites, never edited; also included "
            "by norm/rms_norm,\n      norm/rms_norm_grad\n") in text, text
    data = json.loads(runner.invoke(app, ["plan", str(root / "norm/rms_norm_v2"), "--format", "json"]).stdout)
    assert data["operators"][0]["outside"] == [
        {"file": "norm/rms_norm/op_kernel/rms_norm_kernel.h", "role": "kernel header", "edited": False,
         "included_by": ["norm/rms_norm", "norm/rms_norm_grad"]}]
    # an operator with nothing outside says nothing about it
    assert plan_operator(root / "norm/rms_norm").outside_files() == []


def test_a_second_plan_in_the_process_sees_an_include_added_in_between(tmp_path: Path) -> None:
    # plan runs in a `reading_only` phase: the index's store takes each source's signature
    # once for it, and the names the sources include are gathered once for it. The next
    # phase of the same process (the same repository index: no command in between forgets
    # it), and work outside any phase (apply's), take them again: a source that starts
    # including the header in between is an includer for them.
    files = dict(SIBLING)
    files["norm/rms_norm_grad/op_kernel/rms_norm_grad.cpp"] = (
        ENTRY_HEAD.format(op="rms_norm_grad") + "    Process();\n}\n")
    root = write_tree(tmp_path, files)

    def included_by() -> list[str]:
        [shared] = plan_operator(root / "norm/rms_norm_v2").outside_files()
        return [p.name for p in shared.included_by]

    with reading_only():
        assert included_by() == included_by() == ["rms_norm"]
    grad = root / "norm/rms_norm_grad/op_kernel/rms_norm_grad.cpp"
    grad.write_text('#include "../../rms_norm/op_kernel/rms_norm_kernel.h"\n' + grad.read_text())
    with reading_only():
        assert included_by() == ["rms_norm", "rms_norm_grad"]
    grad.write_text(grad.read_text().split("\n", 1)[1])
    assert included_by() == ["rms_norm"]
    # and through the command, each run its own phase
    res = runner.invoke(app, ["plan", str(root / "norm/rms_norm_v2"), "--format", "json", "--no-cache"])
    assert json.loads(res.stdout)["operators"][0]["outside"][0]["included_by"] == ["norm/rms_norm"]


def test_apply_of_one_operator_leaves_the_siblings_files_and_strip_restores(tmp_path: Path) -> None:
    root = write_tree(tmp_path, SIBLING)
    before = snapshot(root)
    v1 = [root / "norm/rms_norm/op_kernel/rms_norm.cpp"]
    errors_before = host_compile(v1, root / "norm/rms_norm").errors
    res = runner.invoke(app, ["apply", str(root / "norm/rms_norm_v2"), "--write"])
    assert res.exit_code == 0, res.output
    after = snapshot(root)
    changed = sorted(k for k in after if after[k] != before.get(k))
    assert all(k.startswith("norm/rms_norm_v2/") for k in changed), changed
    # v2's call keeps v1's Init signature (the buffer reaches the class through the
    # per-launch pointer), so v1 and its call sites compile exactly as before
    v2 = (root / "norm/rms_norm_v2/op_kernel/rms_norm_v2.cpp").read_text()
    assert "op.Init(x, y, workspace);" in v2 and "GM_ADDR profiling_data" in v2
    assert host_compile(v1, root / "norm/rms_norm").errors == errors_before
    check = runner.invoke(app, ["check", str(root / "norm/rms_norm_v2"), "--format", "json"])
    assert '"OT420"' not in check.stdout
    # the sibling's own apply / strip does not touch what v2's apply wrote, and v2's strip
    # takes back every byte
    assert runner.invoke(app, ["apply", str(root / "norm/rms_norm"), "--write"]).exit_code == 0
    assert runner.invoke(app, ["strip", str(root / "norm/rms_norm"), "--write"]).exit_code == 0
    assert snapshot(root) == after
    assert runner.invoke(app, ["strip", str(root / "norm/rms_norm_v2"), "--write"]).exit_code == 0
    assert snapshot(root) == before


# --- function-like macros that declare and run the kernel class --------------------------------


def test_a_macro_that_runs_the_kernel_class_is_seen_through(tmp_path: Path) -> None:
    files = {"ops/mac/op_kernel/mac.cpp":
             '#include "mac_kernels.h"\n'
             "#define RUN_KERNEL_IMPL(cls, ...)                 \\\n"
             "    do {                                           \\\n"
             "        cls<__VA_ARGS__> op;                        \\\n"
             "        op.Init(x, y, workspace);                   \\\n"
             "        op.Process();                               \\\n"
             "    } while (0)\n"
             + ENTRY_HEAD.format(op="mac")
             + "    if (TILING_KEY_IS(1)) {\n        RUN_KERNEL_IMPL(KernelWide, half);\n"
             "    } else {\n        RUN_KERNEL_IMPL(KernelNarrow, float, 2);\n    }\n}\n",
             "ops/mac/op_kernel/mac_kernels.h":
             "template <class T>\n" + kernel_class("KernelWide", "Wide")
             + "template <class T, int N>\n" + kernel_class("KernelNarrow", "Narrow")}
    root = write_tree(tmp_path, files)
    plan = plan_operator(root / "ops/mac")
    # each macro call reaches its own class; the class level is lifted (OT102)
    assert [(d, label) for d, label, _ in tree(plan)] == [
        (1, "group"), (2, "group wide0"), (2, "group wide1"), (2, "group wide2"),
        (1, "group"), (2, "group narrow0"), (2, "group narrow1"), (2, "group narrow2")]
    before = snapshot(root)
    assert runner.invoke(app, ["apply", str(root / "ops/mac"), "--write"]).exit_code == 0
    entry = (root / "ops/mac/op_kernel/mac.cpp").read_text()
    # nothing inside the macro's text (every call shares it), points in the classes
    macro = before["ops/mac/op_kernel/mac.cpp"].decode().split("#define")[1].split("extern")[0]
    assert "#define" + macro in entry
    assert (root / "ops/mac/op_kernel/mac_kernels.h").read_text().count('"group", "B"') == 2
    check = runner.invoke(app, ["check", str(root / "ops/mac"), "--format", "json"])
    assert '"severity": "error"' not in check.stdout, check.stdout
    assert runner.invoke(app, ["strip", str(root / "ops/mac"), "--write"]).exit_code == 0
    assert snapshot(root) == before


# --- the core mix the kernel declares --------------------------------------------------------------


def test_the_declared_task_type_sets_the_core_types(tmp_path: Path) -> None:
    cases = {"KERNEL_TYPE_AIV_ONLY": {"AIV"}, "KERNEL_TYPE_MIX_AIV_1_0": {"AIV"},
             "KERNEL_TYPE_AIC_ONLY": {"AIC"}, "KERNEL_TYPE_MIX_AIC_1_0": {"AIC"},
             "KERNEL_TYPE_MIX_AIC_1_2": {"AIC", "AIV"}}
    for i, (decl, cores) in enumerate(cases.items()):
        files = {f"ops/k{i}/op_kernel/k{i}.cpp":
                 ENTRY_HEAD.format(op=f"k{i}")
                 + f"    KERNEL_TASK_TYPE_DEFAULT({decl});\n    SyncAll();\n}}\n"}
        plan = plan_operator(write_tree(tmp_path / str(i), files) / f"ops/k{i}")
        assert set(plan.analysis.kernel_cores) == cores, decl
        assert set(plan.per_core) == cores, decl


# --- parameters written with the address-space qualifier first ----------------------------------


def test_a_parameter_goes_before_the_gm_qualifier_of_its_neighbour(tmp_path: Path) -> None:
    files = {"ops/gm/op_kernel/gm.cpp":
             '#include "kernel_operator.h"\n'
             'extern "C" __global__ __aicore__ void gm(GM_ADDR x, GM_ADDR y,\n'
             "                                        __gm__ uint8_t *workspace,\n"
             "                                        __gm__ uint8_t *tiling)\n{\n"
             "    AscendC::SyncAll();\n}\n"}
    root = write_tree(tmp_path, files)
    assert runner.invoke(app, ["apply", str(root / "ops/gm"), "--write"]).exit_code == 0
    text = (root / "ops/gm/op_kernel/gm.cpp").read_text()
    inserted = "/*optrace<*/GM_ADDR profiling_data, /*>optrace*/"
    assert "GM_ADDR y,\n" + " " * 40 + inserted + "__gm__ uint8_t *workspace," in text
    check = runner.invoke(app, ["check", str(root / "ops/gm"), "--format", "json"])
    assert '"OT420"' not in check.stdout


def test_the_compile_check_sees_a_pointer_that_lost_its_address_space(tmp_path: Path) -> None:
    """What the misplaced parameter used to produce (`__gm__ GM_ADDR p, uint8_t *ws`): under
    libclang `__gm__` is an address space, so passing global memory where a plain pointer
    is declared is an error the compile check reports."""
    kernel = tmp_path / "gm" / "op_kernel" / "gm.cpp"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("__aicore__ inline void Use(uint8_t *workspace) {}\n"
                      "__aicore__ inline void UseGm(__gm__ uint8_t *workspace) {}\n"
                      'extern "C" __global__ __aicore__ void gm(GM_ADDR x, GM_ADDR workspace)\n'
                      "{\n    UseGm(workspace);\n    Use(workspace);\n}\n")
    errors = host_compile([kernel], tmp_path / "gm").errors[kernel]
    assert [e.line for e in errors] == [6]
    assert errors[0].message == "no matching function for call to 'Use'"


def test_a_function_two_entries_call_keeps_its_signature(tmp_path: Path) -> None:
    """Two entry variants in one file call one helper with the workspace: growing the
    helper's parameters for the entry optrace instruments would break the other's call."""
    helper = ("static __aicore__ inline void RunIdx(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, "
              "GM_ADDR tiling)\n{\n" + "    AscendC::SyncAll();\n" * 3 + "}\n")
    second = ('extern "C" __global__ __aicore__ void idx_ai_core(GM_ADDR x, GM_ADDR y, GM_ADDR workspace,\n'
              "                                                GM_ADDR tiling)\n{\n"
              "    RunIdx(x, y, workspace, tiling);\n}\n")
    files = {"ops/idx/op_kernel/idx.cpp": '#include "kernel_operator.h"\n' + helper
             + ENTRY_HEAD.format(op="idx") + "    RunIdx(x, y, workspace, tiling);\n}\n" + second}
    root = write_tree(tmp_path, files)
    before = (root / "ops/idx/op_kernel/idx.cpp").read_text()
    assert runner.invoke(app, ["apply", str(root / "ops/idx"), "--write"]).exit_code == 0
    text = (root / "ops/idx/op_kernel/idx.cpp").read_text()
    assert text.count("RunIdx(x, y, workspace, tiling);") == 2
    assert helper.splitlines()[0] in text
    errors = host_compile([root / "ops/idx/op_kernel/idx.cpp"], root / "ops/idx").errors
    assert not [e for e in errors[root / "ops/idx/op_kernel/idx.cpp"] if "RunIdx" in e.message]
    assert runner.invoke(app, ["strip", str(root / "ops/idx"), "--write"]).exit_code == 0
    assert (root / "ops/idx/op_kernel/idx.cpp").read_text() == before


# --- strip takes back every byte of what apply wrote (seen failing on ops-nn) -----------------------


def test_strip_restores_inl_files_one_line_bodies_and_commented_opdef_chains(tmp_path: Path) -> None:
    # one-line bodies with real work: their points go inline, as fragments
    steps = "".join(f"    __aicore__ inline void Step{i}(int g) {{ " + "acc_ += g; " * 8 + "}\n"
                    for i in range(3))
    works = ""
    files = {
        "ops/inl/op_kernel/inl.cpp": '#include "inl_kernel.h"\n' + ENTRY_HEAD.format(op="inl")
        + "    InlKernel op;\n    op.Init(x, y, workspace);\n    op.Process();\n}\n",
        "ops/inl/op_kernel/inl_kernel.h": "#pragma once\nclass InlKernel {\npublic:\n"
        "    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR workspace) {}\n"
        "    __aicore__ inline void Process();\n" + steps + works + "    int acc_ = 0;\n};\n"
        '#include "inl_kernel_impl.inl"\n',
        "ops/inl/op_kernel/inl_kernel_impl.inl":
        "__aicore__ inline void InlKernel::Process()\n{\n"
        "    for (int groupIdx = 0; groupIdx < 4; ++groupIdx) {\n"
        + "".join(f"        Step{i}(groupIdx);\n" for i in range(3)) + "    }\n}\n",
        "ops/inl/op_host/inl_def.cpp": "namespace ops {\nclass Inl : public OpDef {\npublic:\n"
        "    explicit Inl(const char *name) : OpDef(name)\n    {\n"
        '        this->Output("y")\n            .ParamType(REQUIRED)\n'
        "            .DataType({ge::DT_FLOAT16,\n"
        "                       // group 2: bf16\n"
        "                       ge::DT_BF16})\n"
        "            .Format({ge::FORMAT_ND, ge::FORMAT_ND});\n    }\n};\n"
        "OP_ADD(Inl);\n}  // namespace ops\n",
    }
    root = write_tree(tmp_path, files)
    before = snapshot(root)
    assert runner.invoke(app, ["apply", str(root / "ops/inl"), "--write"]).exit_code == 0
    after = snapshot(root)
    assert after["ops/inl/op_kernel/inl_kernel_impl.inl"] != before["ops/inl/op_kernel/inl_kernel_impl.inl"]
    # a one-line body: B and the guard on lines of their own inside one fragment
    assert re.search(rb"\{/\*optrace<\*/\n[ ]+MoeTracing\(", after["ops/inl/op_kernel/inl_kernel.h"])
    assert b'this->Output("profiling_data")' in after["ops/inl/op_host/inl_def.cpp"]
    assert b"group 2: bf16  // optrace" not in after["ops/inl/op_host/inl_def.cpp"]
    assert runner.invoke(app, ["strip", str(root / "ops/inl"), "--write"]).exit_code == 0
    assert snapshot(root) == before


# --- kernel classes chosen through templates --------------------------------------------------


CHOSEN = {
    "conditional": "    using K = typename std::conditional<IS_BIG, KernelA, KernelB>::type;\n    K op;\n",
    "conditional_t": ("    std::conditional_t<IS_BIG, KernelA,\n"
                      "                       std::conditional_t<IS_WIDE, KernelB, KernelC>> op;\n"),
    "alias_template": "    PickKernel<half> op;\n",
    "traits": "    typename KernelTraits<half>::Kernel op;\n",
    "decltype": "    decltype(MakeKernel<KernelA>()) op;\n",
    "member": "    Holder h;\n    h.k.Init(x, y, workspace);\n    h.k.Process();\n",
}
CHOSEN_CLASSES = {"conditional": "AB", "conditional_t": "ABC", "alias_template": "B", "traits": "C",
                  "decltype": "A", "member": "AB"}


def test_kernel_classes_chosen_through_templates_are_all_planned(tmp_path: Path) -> None:
    support = ("template <typename T> using PickKernel = KernelB;\n"
               "template <typename T> struct KernelTraits { using Kernel = KernelC; };\n"
               "template <typename T> __aicore__ inline T MakeKernel() { return T{}; }\n"
               "struct Holder { typename std::conditional<IS_BIG, KernelA, KernelB>::type k; };\n")
    for form, decl in CHOSEN.items():
        root = tmp_path / form
        run = "" if form == "member" else "    op.Init(x, y, workspace);\n    op.Process();\n"
        files = {"ops/chosen/op_kernel/chosen.cpp":
                 '#include "kernels.h"\n' + ENTRY_HEAD.format(op="chosen") + decl + run + "}\n",
                 "ops/chosen/op_kernel/kernels.h":
                 "".join(kernel_class(f"Kernel{c}", f"Step{c}") for c in "ABC") + support}
        plan = plan_operator(write_tree(root, files) / "ops/chosen")
        reached = {f.split("::")[-2][-1] for r in plan.root.walk() if (f := r.function) and "::Step" in f}
        assert reached == set(CHOSEN_CLASSES[form]), form


# --- entries tree-sitter splits ---------------------------------------------------------------


RUN_A = "{\n    KernelA op;\n    op.Init(x, y, workspace);\n    op.Process();\n}\n"
PARAMS = "(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)"
SPLIT_ENTRIES = {
    # entry text, the line of its head
    "qualifier-macro": ('#define KERNEL_API extern "C" __global__ __aicore__\n'
                        f"KERNEL_API void sp{PARAMS}\n{RUN_A}", 3),
    "attribute": (f'extern "C" __global__ __aicore__ __attribute__((always_inline)) void sp{PARAMS}\n{RUN_A}',
                  2),
    "extern-block": (f'extern "C" {{\n__global__ __aicore__ void sp{PARAMS}\n{RUN_A}}}\n', 3),
    "templated": ("template <int D_T_X, int MODE>\n"
                  f"__global__ __aicore__ void sp{PARAMS}\n{{\n    if constexpr (MODE == 1) {{\n"
                  "        KernelA op;\n        op.Init(x, y, workspace);\n"
                  "        op.Process();\n    }\n}\n", 3),
}


def test_entries_with_macros_attributes_and_blocks_around_them_are_planned(tmp_path: Path) -> None:
    for form, (entry, line) in SPLIT_ENTRIES.items():
        root = write_tree(tmp_path / form, {
            "ops/sp/op_kernel/sp.cpp": '#include "kernels.h"\n' + entry,
            "ops/sp/op_kernel/kernels.h": kernel_class("KernelA", "StepA")})
        before = snapshot(root)
        plan = plan_operator(root / "ops/sp")
        entry = plan.analysis.layers.entry
        assert entry is not None and (entry.name, entry.line) == ("sp", line)
        assert not [d for d in plan.diagnostics if d.code in ("OT010", "OT020")], form
        assert {r.function.split("::")[-1] for r in plan.root.walk() if r.function} >= {"StepA0", "StepA2"}
        assert runner.invoke(app, ["apply", str(root / "ops/sp"), "--write"]).exit_code == 0, form
        text = (root / "ops/sp/op_kernel/sp.cpp").read_text()
        # a head past 120 columns gets the parameter on a line of its own, inside its fragment
        text = re.sub(r"/\*optrace<\*/\n\s+(.*),\n\s+/\*>optrace\*/", r"/*optrace<*/\1, /*>optrace*/", text)
        assert "sp(GM_ADDR x, GM_ADDR y, /*optrace<*/GM_ADDR profiling_data, /*>optrace*/GM_ADDR w" in text
        check = runner.invoke(app, ["check", str(root / "ops/sp")])
        assert check.exit_code == 0, (form, check.stdout)
        assert runner.invoke(app, ["strip", str(root / "ops/sp"), "--write"]).exit_code == 0
        assert snapshot(root) == before, form


def test_an_entry_defined_by_a_macro_is_refused_naming_the_macro(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "ops/sp/op_kernel/sp.cpp": '#include "kernels.h"\n'
        '#define DEFINE_SP_KERNEL(name) extern "C" __global__ __aicore__ void name(GM_ADDR x, \\\n'
        "    GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling) { KernelA op; op.Process(); }\n"
        "DEFINE_SP_KERNEL(sp)\n",
        "ops/sp/op_kernel/kernels.h": kernel_class("KernelA", "StepA")})
    before = snapshot(root)
    for command in (["plan"], ["apply", "--write"]):
        result = runner.invoke(app, [command[0], str(root / "ops/sp"), *command[1:]])
        assert result.exit_code == 2
        assert "sp.cpp:4: OT010 the kernel entry is defined by the macro `DEFINE_SP_KERNEL`" in result.output
    assert snapshot(root) == before


# --- functions of one name in two headers ---------------------------------------------------------


def test_same_name_functions_in_two_headers_are_distinct_nodes(tmp_path: Path) -> None:
    sync = ("namespace {ns} {{\n__aicore__ inline void SyncFunc(int g)\n{{\n"
            + "    acc += g;\n" * 9 + "    {work}(g);\n}}\n}}\n")
    work = "__aicore__ inline void {name}(int g)\n{{\n" + "    acc += g;\n" * 9 + "}}\n"
    root = write_tree(tmp_path, {
        "ops/two/op_kernel/two.cpp": '#include "gather.h"\n#include "scatter.h"\n'
        + ENTRY_HEAD.format(op="two") + "    for (int groupIdx = 0; groupIdx < 4; ++groupIdx) {\n"
        "        gather::SyncFunc(groupIdx);\n        scatter::SyncFunc(groupIdx);\n    }\n}\n",
        "ops/two/op_kernel/gather.h": "static int acc;\n" + work.format(name="GatherRows")
        + sync.format(ns="gather", work="GatherRows"),
        "ops/two/op_kernel/scatter.h": "static int acc2;\n#define acc acc2\n"
        + work.format(name="ScatterRows") + sync.format(ns="scatter", work="ScatterRows")})
    plan = plan_operator(root / "ops/two")
    syncs = [r for r in plan.root.walk() if r.function and r.function.endswith("SyncFunc")]
    assert len({r.function for r in syncs}) == 2
    # each call's region sits in its own namespace's function (before, both calls
    # resolved to gather's, and scatter's body was never planned)
    assert sorted(r.anchor.path.name for r in syncs if r.anchor) == ["gather.h", "scatter.h"]


def test_a_tiling_parameter_named_after_the_kernel_counts_as_the_tiling(tmp_path: Path) -> None:
    root = write_tree(tmp_path, {
        "ops/lstm/op_kernel/lstm.cpp": '#include "kernels.h"\n'
        'extern "C" __global__ __aicore__ void lstm(GM_ADDR x, GM_ADDR y, GM_ADDR usrWorkspace,\n'
        "                                          GM_ADDR lstmTiling)\n"
        "{\n    KernelA op;\n    op.Init(x, y, usrWorkspace);\n    op.Process();\n}\n",
        "ops/lstm/op_kernel/kernels.h": kernel_class("KernelA", "StepA")})
    assert runner.invoke(app, ["apply", str(root / "ops/lstm"), "--write"]).exit_code == 0
    text = (root / "ops/lstm/op_kernel/lstm.cpp").read_text()
    text = re.sub(r"/\*optrace<\*/\n\s+(.*),\n\s+/\*>optrace\*/", r"/*optrace<*/\1, /*>optrace*/", text)
    assert "GM_ADDR y, /*optrace<*/GM_ADDR profiling_data, /*>optrace*/GM_ADDR usrWorkspace," in text
    check = runner.invoke(app, ["check", str(root / "ops/lstm")])
    assert "G2 output order: ✓" in check.stdout and "OT411" not in check.stdout


def test_a_conditional_that_splits_an_else_if_chain_still_plans_the_entry(tmp_path: Path) -> None:
    # `} else if` under `#if`, twice, with type arguments in macro calls: tree-sitter
    # then loses the whole entry (seen on an ops-nn pooling operator)
    entry = ('#include "kernels.h"\n'
             "#define RUN_KERNEL(K, T, N) do { K op; op.Process(); } while (0)\n"
             + ENTRY_HEAD.format(op="split_if") + "    GET_TILING_DATA(tilingData, tiling);\n"
             "    if (TILING_KEY_IS(1)) {\n        RUN_KERNEL(KernelA, half, 1);\n"
             "#if __CCE_AICORE__ >= 220\n    } else if (TILING_KEY_IS(2)) {\n"
             "        RUN_KERNEL(KernelB, half, 1);\n#endif\n"
             "    } else if (TILING_KEY_IS(3)) {\n        RUN_KERNEL(KernelC, float, 1);\n"
             "#if __CCE_AICORE__ >= 220\n    } else if (TILING_KEY_IS(4)) {\n"
             "        RUN_KERNEL(KernelB, float, 1);\n#endif\n    }\n}\n")
    root = write_tree(tmp_path, {"ops/split_if/op_kernel/split_if.cpp": entry,
                                 "ops/split_if/op_kernel/kernels.h":
                                 "".join(kernel_class(f"Kernel{c}", f"Step{c}") for c in "ABC")})
    before = snapshot(root)
    plan = plan_operator(root / "ops/split_if")
    [note] = [d for d in plan.diagnostics if d.code == "OT022"]
    assert (note.path.name, note.line) == ("split_if.cpp", 8)
    reached = {f.split("::")[-2][-1] for r in plan.root.walk() if (f := r.function) and "::Step" in f}
    assert reached == {"A", "B", "C"}
    assert runner.invoke(app, ["apply", str(root / "ops/split_if"), "--write"]).exit_code == 0
    assert runner.invoke(app, ["check", str(root / "ops/split_if")]).exit_code == 0
    assert runner.invoke(app, ["strip", str(root / "ops/split_if"), "--write"]).exit_code == 0
    assert snapshot(root) == before


def test_an_object_like_macro_that_runs_the_declared_object_is_seen_through(tmp_path: Path) -> None:
    entry = ('#include "kernels.h"\n' + ENTRY_HEAD.format(op="obj_macro")
             + "#define INIT_AND_PROCESS          \\\n    op.Init(x, y, workspace); \\\n    op.Process()\n"
             "    if (TILING_KEY_IS(1)) {\n        KernelA op;\n        INIT_AND_PROCESS;\n"
             "    } else {\n        KernelB op;\n        INIT_AND_PROCESS;\n    }\n}\n")
    root = write_tree(tmp_path, {"ops/obj_macro/op_kernel/obj_macro.cpp": entry,
                                 "ops/obj_macro/op_kernel/kernels.h":
                                 "".join(kernel_class(f"Kernel{c}", f"Step{c}") for c in "AB")})
    before = snapshot(root)
    plan = plan_operator(root / "ops/obj_macro")
    reached = {f.split("::")[-2][-1] for r in plan.root.walk() if (f := r.function) and "::Step" in f}
    assert reached == {"A", "B"}
    # no point inside the macro's text (lines 4-6): the class level at each use is
    # lifted (each class's Process is the main flow of its variant)
    assert not [r for r in plan.root.walk() if r.anchor and r.anchor.path.name == "obj_macro.cpp"
                and 4 <= r.anchor.line <= 6]
    assert runner.invoke(app, ["apply", str(root / "ops/obj_macro"), "--write"]).exit_code == 0
    assert runner.invoke(app, ["check", str(root / "ops/obj_macro")]).exit_code == 0
    assert runner.invoke(app, ["strip", str(root / "ops/obj_macro"), "--write"]).exit_code == 0
    assert snapshot(root) == before


def test_simt_vector_functions_parse_and_are_measured_at_their_launch(tmp_path: Path) -> None:
    simt = ("#pragma once\nnamespace NsDemo {\nconstexpr uint32_t THREAD_NUM = 512;\n"
            "template <typename T>\n__simt_callee__ inline T Twice(T x) { return x + x; }\n"
            "template <typename T>\n__simt_vf__ __aicore__ LAUNCH_BOUND(THREAD_NUM) inline void DemoSimt("
            "int32_t n, __gm__ T *x, __gm__ T *y)\n{\n"
            "    for (int32_t i = AscendC::Simt::GetThreadIdx(); i < n;\n"
            "         i += AscendC::Simt::GetThreadNum()) {\n"
            "        y[i] = Twice<T>(x[i]);\n    }\n}\n"
            "template <typename T>\n__aicore__ inline void Process(GM_ADDR x, GM_ADDR y, int32_t n)\n{\n"
            "    __local_mem__ T *scratch = nullptr;\n"
            "    AscendC::Simt::VF_CALL<DemoSimt<T>>(AscendC::Simt::Dim3(THREAD_NUM), n,\n"
            "        (__gm__ T *)x, (__gm__ T *)y);\n}\n}  // namespace NsDemo\n")
    entry = ('#include "demo_simt.h"\n' + ENTRY_HEAD.format(op="simt")
             + "    NsDemo::Process<float>(x, y, 64);\n}\n")
    root = write_tree(tmp_path, {"ops/simt/op_kernel/simt.cpp": entry,
                                 "ops/simt/op_kernel/demo_simt.h": simt})
    before = snapshot(root)
    plan = plan_operator(root / "ops/simt")
    assert not [d for d in plan.diagnostics if d.code == "OT020"]
    regions = [r for r in plan.root.walk() if r is not plan.root]
    assert regions, "the launch is the operator's work: not a root-only tree"
    # nothing inside the per-thread function: its body runs once per thread
    simt_lines = range(7, 14)
    assert not [r for r in regions if r.anchor and r.anchor.path.name == "demo_simt.h"
                and r.anchor.line in simt_lines]
    assert runner.invoke(app, ["apply", str(root / "ops/simt"), "--write"]).exit_code == 0
    assert runner.invoke(app, ["strip", str(root / "ops/simt"), "--write"]).exit_code == 0
    assert snapshot(root) == before


def test_a_macro_running_an_absent_or_aliased_class_is_measured_at_its_call(tmp_path: Path) -> None:
    entry = ('#include "kernels.h"\n#include "lib/absent_controller.h"\n'
             "#define RUN_ABSENT(Cls) do { Cls<half> op; op.Init(x, y); op.Process(); } while (0)\n"
             "#define RUN_GEMM(Policy) do { \\\n    using Kernel = lib::GemmUniversal<Policy, KernelA>; \\\n"
             "    typename Kernel::Params params{x, y}; \\\n    Kernel kernel; \\\n    kernel(params); \\\n"
             "} while (0)\n"
             + ENTRY_HEAD.format(op="mac")
             + "    if (TILING_KEY_IS(1)) {\n        RUN_ABSENT(MsdController);\n"
             "    } else {\n        RUN_GEMM(SplitPolicy);\n    }\n}\n")
    gemm = ("namespace lib {\ntemplate <class P, class B> class GemmUniversal {\npublic:\n"
            "    struct Params { GM_ADDR a; GM_ADDR b; };\n"
            "    __aicore__ inline void operator()(Params const &p)\n    {\n"
            "        for (int groupIdx = 0; groupIdx < 4; ++groupIdx) {\n"
            + "            acc_ += groupIdx;\n" * 9
            + "        }\n    }\n    int acc_ = 0;\n};\n}  // namespace lib\n")
    root = write_tree(tmp_path, {"ops/mac/op_kernel/mac.cpp": entry,
                                 "ops/mac/op_kernel/kernels.h": kernel_class("KernelA", "StepA") + gemm})
    plan = plan_operator(root / "ops/mac")
    at_calls = {(r.anchor.line, r.function.split("::")[-2] if r.function else None)
                for r in plan.root.walk()
                if r.anchor and r.anchor.path.name == "mac.cpp" and r is not plan.root}
    # the absent class at its macro's call; the aliased library kernel's operator() planned
    assert {line for line, _ in at_calls} == {13, 15}
    assert (13, None) in at_calls
    assert any(r.function and r.function.endswith("GemmUniversal::operator()") for r in plan.root.walk())


def test_an_entry_with_two_heads_under_ifdef_is_read_as_its_first_arm(tmp_path: Path) -> None:
    entry = ('#include "kernels.h"\n#ifdef __CCE_KT_TEST__\n'
             'extern "C" __global__ __aicore__ void two_heads(\n'
             "#else\ntemplate <uint32_t SCH_MODE>\n__global__ __aicore__ void two_heads(\n#endif\n"
             "    GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)\n{\n"
             "    KernelA op;\n    op.Init(x, y, workspace);\n    op.Process();\n}\n")
    root = write_tree(tmp_path, {"ops/two_heads/op_kernel/two_heads.cpp": entry,
                                 "ops/two_heads/op_kernel/kernels.h": kernel_class("KernelA", "StepA")})
    before = snapshot(root)
    plan = plan_operator(root / "ops/two_heads")
    assert [d.code for d in plan.diagnostics if d.code == "OT022"] == ["OT022"]
    assert runner.invoke(app, ["apply", str(root / "ops/two_heads"), "--write"]).exit_code == 0
    text = (root / "ops/two_heads/op_kernel/two_heads.cpp").read_text()
    # the parameter goes into the one parameter list both heads share, never after it
    assert "GM_ADDR y, /*optrace<*/GM_ADDR profiling_data, /*>optrace*/GM_ADDR workspace" in text
    check = runner.invoke(app, ["check", str(root / "ops/two_heads")])
    assert check.exit_code == 0, check.stdout
    assert runner.invoke(app, ["strip", str(root / "ops/two_heads"), "--write"]).exit_code == 0
    assert snapshot(root) == before


def test_an_own_base_header_nothing_includes_is_left_alone(tmp_path: Path) -> None:
    # `<op>_base.h` exists but the entry compiles a sibling's base instead: including it
    # would bring its own BUFFER_NUM beside the sibling's (ambiguous)
    files = {"ops/fused/op_kernel/fused.cpp": '#include "kernels.h"\n' + ENTRY_HEAD.format(op="fused")
             + "    KernelA op;\n    op.Init(x, y, workspace);\n    op.Process();\n}\n",
             "ops/fused/op_kernel/kernels.h": kernel_class("KernelA", "StepA"),
             "ops/fused/op_kernel/fused_base.h": "#pragma once\nconstexpr int BUFFER_NUM = 1;\n"}
    root = write_tree(tmp_path, files)
    before = snapshot(root)
    assert runner.invoke(app, ["apply", str(root / "ops/fused"), "--write"]).exit_code == 0
    after = snapshot(root)
    assert after["ops/fused/op_kernel/fused_base.h"] == before["ops/fused/op_kernel/fused_base.h"]
    assert "optrace-runtime-block" in after["ops/fused/op_kernel/optrace_runtime.h"].decode()
    assert b'#include "optrace_runtime.h"  // optrace' in after["ops/fused/op_kernel/kernels.h"]
    assert runner.invoke(app, ["check", str(root / "ops/fused")]).exit_code == 0
    assert runner.invoke(app, ["strip", str(root / "ops/fused"), "--write"]).exit_code == 0
    assert snapshot(root) == before


def test_an_own_base_header_only_a_sub_kernel_includes_is_left_alone(tmp_path: Path) -> None:
    """`arch35/<op>_base.h` holds code one sub-kernel includes after what it needs; the
    entry never includes it. Including it into the entry and the other files with points
    would compile its code in an order it never was (ops-nn's avg_pool_v2_grad): the files
    with points include the runtime header themselves, and the sub-kernel's base stays as
    it is (no file with points includes it)."""
    files = {"ops/pool/op_kernel/pool.cpp": '#include "arch35/simt.h"\n#include "arch35/nchw.h"\n'
             + ENTRY_HEAD.format(op="pool")
             + "    KernelA op;\n    op.Init(x, y, workspace);\n    op.Process();\n}\n",
             "ops/pool/op_kernel/arch35/simt.h": kernel_class("KernelA", "StepA"),
             "ops/pool/op_kernel/arch35/nchw.h": '#pragma once\nusing T = float;\n#include "pool_base.h"\n',
             "ops/pool/op_kernel/arch35/pool_base.h": "#pragma once\nconstexpr T kZero = T(0);\n"}
    root = write_tree(tmp_path, files)
    before = snapshot(root)
    assert runner.invoke(app, ["apply", str(root / "ops/pool"), "--write"]).exit_code == 0
    after = snapshot(root)
    assert after["ops/pool/op_kernel/arch35/pool_base.h"] == before["ops/pool/op_kernel/arch35/pool_base.h"]
    assert "optrace-runtime-block" in after["ops/pool/op_kernel/optrace_runtime.h"].decode()
    assert b'#include "../optrace_runtime.h"  // optrace' in after["ops/pool/op_kernel/arch35/simt.h"]
    assert b'"arch35/pool_base.h"' not in after["ops/pool/op_kernel/pool.cpp"]
    assert runner.invoke(app, ["check", str(root / "ops/pool")]).exit_code == 0
    assert runner.invoke(app, ["strip", str(root / "ops/pool"), "--write"]).exit_code == 0
    assert snapshot(root) == before


def test_an_own_base_header_the_entry_includes_takes_the_block(tmp_path: Path) -> None:
    files = {"ops/pool/op_kernel/pool.cpp": '#include "pool_base.h"\n#include "kernels.h"\n'
             + ENTRY_HEAD.format(op="pool")
             + "    KernelA op;\n    op.Init(x, y, workspace);\n    op.Process();\n}\n",
             "ops/pool/op_kernel/kernels.h": kernel_class("KernelA", "StepA"),
             "ops/pool/op_kernel/pool_base.h": "#pragma once\nconstexpr int BUFFER_NUM = 2;\n"}
    root = write_tree(tmp_path, files)
    assert runner.invoke(app, ["apply", str(root / "ops/pool"), "--write"]).exit_code == 0
    text = (root / "ops/pool/op_kernel/pool_base.h").read_text()
    assert text == '#pragma once\n#include "optrace_runtime.h"  // optrace\nconstexpr int BUFFER_NUM = 2;\n'
    assert "optrace-runtime-block" in (root / "ops/pool/op_kernel/optrace_runtime.h").read_text()


def test_a_base_header_included_in_one_arm_only_does_not_leave_the_other_without_the_runtime(
        tmp_path: Path) -> None:
    """The entry includes its base header inside `#if` only; its points (and the kernel
    header's) compile under the other arm too: the runtime's include goes outside every
    `#if`, in each file with points, so `check` compiles them all (no OT420)."""
    files = {"ops/arm/op_kernel/arm.cpp": '#if defined(USE_BASE)\n#include "arm_base.h"\n#endif\n'
             '#include "kernels.h"\n' + ENTRY_HEAD.format(op="arm")
             + "    KernelA op;\n    op.Init(x, y, workspace);\n    op.Process();\n}\n",
             "ops/arm/op_kernel/kernels.h": kernel_class("KernelA", "StepA"),
             "ops/arm/op_kernel/arm_base.h": "#pragma once\nconstexpr int BUFFER_NUM = 2;\n"}
    root = write_tree(tmp_path, files)
    before = snapshot(root)
    assert runner.invoke(app, ["apply", str(root / "ops/arm"), "--write"]).exit_code == 0
    entry = (root / "ops/arm/op_kernel/arm.cpp").read_text()
    assert entry.startswith('#if defined(USE_BASE)\n#include "arm_base.h"\n#endif\n#include "kernels.h"\n'
                            '#include "optrace_runtime.h"  // optrace\n')
    assert '#include "optrace_runtime.h"  // optrace' in (root / "ops/arm/op_kernel/kernels.h").read_text()
    check = runner.invoke(app, ["check", str(root / "ops/arm"), "--format", "json"])
    assert "OT420" not in check.stdout and '"compile_checked_files": 0' not in check.stdout
    assert runner.invoke(app, ["strip", str(root / "ops/arm"), "--write"]).exit_code == 0
    assert snapshot(root) == before


def test_an_opdef_built_through_helpers_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    files = {"ops/helped/op_kernel/helped.cpp": '#include "kernels.h"\n' + ENTRY_HEAD.format(op="helped")
             + "    KernelA op;\n    op.Process();\n}\n",
             "ops/helped/op_kernel/kernels.h": kernel_class("KernelA", "StepA"),
             "ops/helped/op_host/helped_def.cpp":
             "namespace ops {\n"
             "template <typename C> static void AddOutput(C &c, const char *n) { c.Output(n); }\n"
             "class Helped : public OpDef {\npublic:\n    explicit Helped(const char *name) : OpDef(name)\n"
             '    {\n        AddOutput(*this, "y");\n    }\n};\nOP_ADD(Helped);\n}  // namespace ops\n'}
    root = write_tree(tmp_path, files)
    before = snapshot(root)
    result = runner.invoke(app, ["apply", str(root / "ops/helped"), "--write"])
    assert result.exit_code == 2
    assert "helped_def.cpp" in result.output and "OT310 cannot locate the OpDef's outputs" in result.output
    assert snapshot(root) == before
