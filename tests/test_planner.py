"""Planner behaviour on small inline kernels: core-type split forms, roles, loops, config."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optrace.engine.plan import Plan
from optrace.pipeline.plan import plan_operator
from optrace.rules.registry import builtin_rules


def plan_src(tmp_path: Path, source: str, config: str = "", pyproject: str | None = None) -> Plan:
    repo = tmp_path / "repo"
    kernel = repo / "demo_op" / "op_kernel"
    kernel.mkdir(parents=True)
    (kernel / "demo_op.cpp").write_text(source)
    if pyproject is not None:
        (repo / "pyproject.toml").write_text(pyproject)
        (repo / ".git").mkdir()
    else:
        (repo / "optrace.toml").write_text(config)
    return plan_operator(repo / "demo_op")


def labels(plan: Plan) -> dict[str, list[str]]:
    return {r.label: sorted(r.cores) for r in plan.root.walk()}


HEAD = (
    'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n'
    "    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);\n"
)


@pytest.mark.parametrize("cond", [
    "g_coreType == AscendC::AIC", "ASCEND_IS_AIC", "std::is_same_v<ArchTag, AscendC::AIC>",
])
def test_core_split_forms(tmp_path: Path, cond: str) -> None:
    src = HEAD + f"    if ({cond}) {{ CrossCoreWaitFlag(ready); }} else {{ SyncAll(); }}\n}}\n"
    got = labels(plan_src(tmp_path, src))
    # `ready` is set nowhere on the path: the wait is named by its role only (OT109).
    assert got["wait aic"] == ["AIC"]
    assert got["barrier aiv"] == ["AIV"]


def test_if_without_parentheses_macro(tmp_path: Path) -> None:
    src = HEAD + "    if ASCEND_IS_AIV { SyncAll(); }\n}\n"
    assert labels(plan_src(tmp_path, src))["barrier aiv"] == ["AIV"]


def test_specialised_operator_gets_core_bodies(tmp_path: Path) -> None:
    src = """
template <class T> class Gemm {
public:
    template <int32_t CORE_TYPE = g_coreType>
    __aicore__ inline void operator()(int p);
    template <>
    __aicore__ inline void operator()<AscendC::AIC>(int p) {
        for (uint32_t groupIdx = 0; groupIdx < n; ++groupIdx) { CrossCoreWaitFlag(f); }
    }
    template <>
    __aicore__ inline void operator()<AscendC::AIV>(int p) {
        for (uint32_t stageId = 0; stageId < n; ++stageId) { CrossCoreWaitFlag(f); }
    }
};
__aicore__ inline void RunGemm() {
    using Kernel = Gemm<int>;
    Kernel k;
    k(1);
}
""" + HEAD + "    RunGemm();\n}\n"
    got = labels(plan_src(tmp_path, src))
    # `RunGemm` -> `gemm` (the filler `run` dropped); the call and its two core-type bodies
    # cover the same span, so the bodies are the level (OT110): `gemm aic`, `gemm aiv`.
    assert "gemm" not in got
    assert got["gemm aic"] == ["AIC"] and got["gemm aiv"] == ["AIV"]
    assert got["gemm aic group"] == ["AIC"]
    assert got["gemm aiv stage"] == ["AIV"]
    plan = plan_src(tmp_path / "again", src)
    loop = next(r for r in plan.root.walk() if r.label == "gemm aic group")
    assert loop.index_var == "groupIdx" and loop.anchor is not None and loop.anchor.inside


def test_roles_and_tile_loops(tmp_path: Path) -> None:
    src = """
__aicore__ inline void SendTokens() {
    for (uint32_t tokenIdx = 0; tokenIdx < n; ++tokenIdx) { SyncAll(); }
}
__aicore__ inline void Compute() {
    for (uint32_t kIdx = 0; kIdx < k; ++kIdx) { Mmad(a, b, c); Add(a, b, c); Mul(a, b, c); }
}
""" + 'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n' + """
    bool isSendCore = GetSubBlockIdx() == 1;
    if (isSendCore) { SendTokens(); } else { Compute(); }
}
"""
    plan = plan_src(tmp_path, src)
    got = {r.label: r for r in plan.root.walk()}
    assert got["send-tokens"].role == "(isSendCore)"
    assert got["compute"].role == "!((isSendCore))"
    assert not [lb for lb in got if lb.startswith("compute ")]  # nothing in the k loop
    # A per-token loop is a tile loop: its barrier is bracketed around the whole
    # loop, never once per token.
    assert {lp.var: lp.classification for lp in plan.loops} == {"tokenIdx": "tile", "kIdx": "tile"}
    # SendTokens' one statement is that loop: one region, the call's (same span, OT110).
    token = got["send-tokens"]
    assert token.tile_loop and not token.children and any("barrier" in n or "wait" in n for n in token.notes)
    assert not [lb for lb in got if lb.startswith("send-tokens ")]


def test_pyproject_table_and_custom_qualifier(tmp_path: Path) -> None:
    src = """
MY_DEVICE void SendAll() { for (uint32_t rankIdx = 0; rankIdx < n; ++rankIdx) { SyncAll(); } }
""" + 'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n    SendAll();\n}\n'
    # Unknown, the macro is a parse error (tree-sitter recovers, but says so) ...
    without = plan_src(tmp_path / "a", src, pyproject="[project]\nname='x'\n")
    assert [d.code for d in without.diagnostics if d.code == "OT020"] == ["OT020"]
    # ... configured as a qualifier, it is blanked and the file parses cleanly.
    plan = plan_src(tmp_path / "b", src, pyproject='[tool.optrace]\nqualifiers = ["MY_DEVICE"]\n')
    assert not [d for d in plan.diagnostics if d.code == "OT020"]
    assert "send-all rank" in labels(plan)
    assert plan.analysis.config.source is not None and plan.analysis.config.source.name == "pyproject.toml"


def test_trip_counts_make_capacity_known(tmp_path: Path) -> None:
    src = HEAD + "    for (uint32_t groupIdx = 0; groupIdx < n; ++groupIdx) { SyncAll(); }\n}\n"
    unknown = plan_src(tmp_path / "a", src)
    assert all("groupIdx" in e.unknown_loops for e in unknown.capacity if e.core == "AIV")
    known = plan_src(tmp_path / "b", src, config="[trip_counts]\ngroupIdx = 8\n")
    aiv = next(e for e in known.capacity if e.core == "AIV")
    # fingerprint + processing + group-loop x8 + sync-all x8
    assert aiv.unknown_loops == () and aiv.records == 1 + 2 + 2 * 8 + 2 * 8


def test_recursion_and_unknown_calls_do_not_hang(tmp_path: Path) -> None:
    src = """
__aicore__ inline void Walk(int d) { SyncAll(); if (d) { Walk(d - 1); } Unknown::Thing(d); }
""" + HEAD + "    Walk(3);\n}\n"
    got = labels(plan_src(tmp_path, src))
    assert "walk" in got and "walk barrier" in got


def test_entry_point_rule_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import optrace.rules.registry as registry
    from optrace.rules.fold_depth import FoldDepth

    class FakeEP:
        def load(self) -> object:
            class Renamed(FoldDepth):
                code = "OT950"
                name = "from-entry-point"
            return Renamed

    monkeypatch.setattr(registry, "entry_points",
                        lambda group: [FakeEP()] if group == "optrace.rules" else [])
    assert "OT950" in [r.code for r in registry.load_rules()]


def _two_loops(exclusive: str | None) -> str:
    """Two phase loops, each 2 records for itself and 2 for its SyncAll per iteration:
    in two arms of one tiling-key (`if`) or preprocessor (`#if`) dispatch, or one after
    the other (None)."""
    loop = "        for (uint32_t groupIdx = 0; groupIdx < n; ++groupIdx) {{ {call}(); }}\n"
    first, second = loop.format(call="SyncAll"), loop.format(call="CrossCoreBarrier")
    if exclusive == "if":
        return HEAD + ("    if (TILING_KEY_IS(1)) {\n" + first + "    } else if (TILING_KEY_IS(2)) {\n"
                       + second + "    }\n}\n")
    if exclusive == "#if":
        return HEAD + "#if defined(SOC_A)\n" + first + "#else\n" + second + "#endif\n}\n"
    if exclusive == "return":  # what follows a key test that returns runs only without it
        return HEAD + "    if (TILING_KEY_IS(1)) {\n" + first + "        return;\n    }\n" + second + "}\n"
    if exclusive == "constants":  # one expression against two constants, no `else`
        return HEAD + ("    if constexpr (sizeof(DTYPE_X) == SIZE_2) {\n" + first + "    }\n"
                       "    if constexpr (sizeof(DTYPE_X) == SIZE_4) {\n" + second + "    }\n}\n")
    if exclusive == "two-flags":  # two different tests: both may hold in one launch
        return HEAD + ("    if constexpr (FLAG_A) {\n" + first + "    }\n"
                       "    if constexpr (FLAG_B) {\n" + second + "    }\n}\n")
    return HEAD + "    {\n" + first + second + "    }\n}\n"


@pytest.mark.parametrize("dispatch", ["if", "#if", "return", "constants"])
def test_capacity_is_the_largest_variant_not_the_sum(tmp_path: Path, dispatch: str) -> None:
    config = "[trip_counts]\ngroupIdx = 200\n"
    exclusive = plan_src(tmp_path / "a", _two_loops(dispatch), config=config)
    assert all(len(r.variant) == 1 for r in exclusive.root.children)  # two arms of one dispatch
    first, second = exclusive.root.children[0], exclusive.root.children[-1]
    assert first.exclusive_with(second)
    aiv = next(e for e in exclusive.capacity if e.core == "AIV")
    # one launch runs one arm: fingerprint + processing + (loop + barrier) x 200
    assert aiv.unknown_loops == () and aiv.records == 1 + 2 + 2 * 200 + 2 * 200
    assert not [d for d in exclusive.diagnostics if d.code == "OT107"]
    # the same loops run one after the other do add up, past the 1023-record slot
    both = plan_src(tmp_path / "b", _two_loops(None), config=config)
    assert next(e for e in both.capacity if e.core == "AIV").records == 1 + 2 + 4 * (2 * 200)
    assert [d.code for d in both.diagnostics if d.code == "OT107"]


def test_two_tests_of_different_flags_without_else_may_both_run(tmp_path: Path) -> None:
    plan = plan_src(tmp_path, _two_loops("two-flags"), config="[trip_counts]\ngroupIdx = 200\n")
    first, second = plan.root.children[0], plan.root.children[-1]
    assert not first.exclusive_with(second)
    assert next(e for e in plan.capacity if e.core == "AIV").records == 1 + 2 + 4 * (2 * 200)


def test_capacity_takes_the_unknown_loops_of_every_variant(tmp_path: Path) -> None:
    src = _two_loops("if").replace("for (uint32_t groupIdx", "for (uint32_t stageIdx", 1)
    plan = plan_src(tmp_path, src, config="[trip_counts]\ngroupIdx = 10\n")
    aiv = next(e for e in plan.capacity if e.core == "AIV")
    # the known arm counts; the other arm's loop is named unknown, not left out
    assert aiv.records == 1 + 2 + 2 * 10 + 2 * 10 and aiv.unknown_loops == ("stageIdx",)


def test_naming_config_adds_phase_words_and_bounds_the_label(tmp_path: Path) -> None:
    src = """
__aicore__ inline void MoeExpertFfnComputeStage(GM_ADDR x) {
    for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) { SyncAll(); }
}
""" + 'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n    MoeExpertFfnComputeStage(x);\n}\n'
    # A name over the limit with no phase word keeps its first two words ...
    assert "moe-expert group barrier" in labels(plan_src(tmp_path / "a", src))
    # ... a configured phase word is the telling one (with the word next to it).
    configured = plan_src(tmp_path / "b", src, config='[naming]\nphase_words = ["ffn"]\n')
    assert "ffn-compute group barrier" in labels(configured)
    # Within the limit a name is whole (less its fillers: `stage`).
    assert "moe-expert-ffn-compute group" in labels(plan_src(tmp_path / "d", src.replace(
        "{ SyncAll(); }", "{ Foo(groupIdx); SyncAll(); }"), config="[naming]\nmax_length = 40\n"))
    # A limit below any sensible label is refused where it is written.
    from optrace.engine.diagnostics import InputError

    with pytest.raises(InputError) as exc:
        plan_src(tmp_path / "c", src, config="[naming]\nmax_length = 4\n")
    assert "max_length" in exc.value.diagnostic.message


def test_naming_config_adds_fillers_and_short_forms(tmp_path: Path) -> None:
    src = """
__aicore__ inline void CommunicateHelperTokens(GM_ADDR x) {
    for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) { Foo(groupIdx); SyncAll(); }
}
""" + 'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n    CommunicateHelperTokens(x);\n}\n'
    # The default list has `communicate` -> `comm`; the repository's config adds a filler
    # and a short form of its own.
    assert "comm-helper-tokens group" in labels(plan_src(tmp_path / "a", src))
    config = '[naming]\nfiller_words = ["helper"]\nshort_words = { tokens = "toks" }\n'
    assert "comm-toks group" in labels(plan_src(tmp_path / "b", src, config=config))
    from optrace.engine.diagnostics import InputError

    for bad in ('short_words = { tokens = "Toks!" }', 'filler_words = ["two words"]', "short_words = 3"):
        with pytest.raises(InputError) as exc:
            plan_src(tmp_path / f"c{len(bad)}", src, config=f"[naming]\n{bad}\n")
        assert exc.value.diagnostic.message.startswith(f"`naming.{bad.split()[0]}`")


def test_tile_loop_class_comes_from_the_trip_count_source(tmp_path: Path) -> None:
    src = """
__aicore__ inline void Step(uint32_t g) {
    for (uint32_t k = 0; k < 4; ++k) { Mmad(a, b, c); } Add(a, b, c); Mul(a, b, c); }
__aicore__ inline void Run(GM_ADDR x) {
    for (uint32_t i = 0; i < expertNum_; ++i) { Step(i); SyncAll(); }
    for (uint32_t i = 0; i < tokenCnt; ++i) { Step(i); SyncAll(); }
    for (uint32_t groupIdx = 0; groupIdx < bs * topK; ++groupIdx) { Step(groupIdx); SyncAll(); }
}
""" + 'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n    Run(x);\n}\n'
    plan = plan_src(tmp_path, src)
    got = [(lp.line, lp.classification) for lp in plan.loops if lp.function.endswith("Run")]
    # over experts: a phase loop, whatever its variable is called; over tokens, or over
    # tokens x topK (even with a phase word in its name): tile loops
    assert got == [(5, "phase"), (6, "tile"), (7, "tile")]
    why = {lp.line: lp.reason for lp in plan.loops}
    assert "expert" in why[5] and "token" in why[6] and "topk" in why[7]
    # the tile loops' barriers are bracketed around the whole loop, never per iteration
    tiles = [r for r in plan.root.walk() if r.tile_loop]
    assert len(tiles) == 2 and all(r.anchor is not None and not r.anchor.inside and r.notes for r in tiles)


def test_a_function_that_sends_and_waits_is_never_named_a_wait() -> None:
    from optrace.engine.words import pure_wait, shorten

    assert pure_wait("WaitDispatch") and shorten("WaitDispatch") == "wait-dispatch"
    assert not pure_wait("SetWaitTpStatusAndDisPatch")
    assert "wait" not in shorten("SetWaitTpStatusAndDisPatch").split("-")
    assert not pure_wait("SendCountsAndWait") and shorten("SendCountsAndWait") == "send-counts"
    # long names keep their phase words (with the word next to them); fillers go
    assert shorten("MoeTokenDispatchProcess") == "token-dispatch"
    assert shorten("GroupedMatmulDequantSwigluQuant") == "matmul-dequant"


def test_a_send_and_wait_function_with_a_return_is_not_split(tmp_path: Path) -> None:
    """Split regions are runs of statements bracketed by two lines; a `return` inside
    would skip the E (OT407), so such a function stays one region, its wait a child."""
    body = """
__aicore__ inline void SendCountsAndWait(GM_ADDR x) {
    if (rankNum == 0) { return; }
    for (uint32_t rankIdx = 0; rankIdx < rankNum; ++rankIdx) { DataCopy(peer[rankIdx], counts, 8); }
    uint32_t ready = 0;
    while (ready < rankNum) { DataCopy(status, peer, 8); ready = status.GetValue(0); }
}
""" + 'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n    SendCountsAndWait(x);\n}\n'
    got = labels(plan_src(tmp_path, body))
    assert "send-counts" in got and "wait-counts" not in got
    assert "send-counts wait-ready" in got  # the spin, bracketed inside the function


def test_a_copy_in_compute_copy_out_tile_loop_is_one_region_named_by_its_work(tmp_path: Path) -> None:
    """The AscendC pipeline idiom: a loop over tiles calling three small helpers. Not one
    of them is substantial alone, yet the loop is the kernel's work: one region around
    the whole loop, named by the helper that is not a copy, and never a point inside."""
    src = """
class KernelAdd {
public:
    __aicore__ inline void Process() {
        for (int32_t tileIdx = 0; tileIdx < tileNum; ++tileIdx) {
            CopyIn(tileIdx);
            Compute(tileIdx);
            CopyOut(tileIdx);
        }
        SyncAll();
    }
private:
    __aicore__ inline void CopyIn(int32_t i) {
        LocalTensor<half> x = inQueue.AllocTensor<half>(); DataCopy(x, xGm[i * 64], 64); inQueue.EnQue(x); }
    __aicore__ inline void Compute(int32_t i) {
        LocalTensor<half> x = inQueue.DeQue<half>(); LocalTensor<half> y = outQueue.AllocTensor<half>();
        Add(y, x, x, 64); outQueue.EnQue(y); inQueue.FreeTensor(x); }
    __aicore__ inline void CopyOut(int32_t i) {
        LocalTensor<half> y = outQueue.DeQue<half>(); DataCopy(yGm[i * 64], y, 64); outQueue.FreeTensor(y); }
};
""" + ('extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n'
       "    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);\n    KernelAdd op;\n    op.Process();\n}\n")
    plan = plan_src(tmp_path, src)
    assert [(lp.var, lp.classification) for lp in plan.loops] == [("tileIdx", "tile")]
    tiles = [r for r in plan.root.walk() if r.tile_loop]
    assert [r.label for r in tiles] == ["compute"]
    assert tiles[0].anchor is not None and not tiles[0].anchor.inside and not tiles[0].children
    assert "barrier" in {r.label for r in plan.root.walk()}


def test_a_tile_loop_of_copies_alone_is_a_copy_region(tmp_path: Path) -> None:
    src = """
__aicore__ inline void CopyIn(int32_t i) { DataCopy(x, xGm[i * 64], 64); }
__aicore__ inline void CopyOut(int32_t i) { DataCopy(yGm[i * 64], x, 64); }
__aicore__ inline void Run() {
    for (int32_t rowIdx = 0; rowIdx < rowNum; ++rowIdx) { CopyIn(rowIdx); CopyOut(rowIdx); }
    SyncAll();
}
""" + 'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n    Run();\n}\n'
    plan = plan_src(tmp_path, src)
    assert [r.label for r in plan.root.walk() if r.tile_loop] == ["run row-copy"]


def test_a_function_named_for_its_tiling_that_runs_the_kernel_is_not_setup(tmp_path: Path) -> None:
    """`RunWithTiling` reads the tiling, then runs Init and Process: the whole kernel. A
    setup word in a name makes a leaf setup, not a region holding the work (the budget
    then dropped 13 phases of ops-nn's max_pool3_d while keeping it), and a connective
    (`with`) is never a label alone."""
    src = """
class Pool {
public:
    __aicore__ inline void Init(GM_ADDR x) { a = 1; b = 2; }
    __aicore__ inline void Process() {
        for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) { Step(groupIdx); }
        SyncAll();
    }
    __aicore__ inline void Step(uint32_t g) {
        for (uint32_t k = 0; k < 4; ++k) { Mmad(a, b, c); } Add(a, b, c); Mul(a, b, c); }
};
__aicore__ inline void RunWithTiling(GM_ADDR x, GM_ADDR tiling) {
    GET_TILING_DATA(tilingData, tiling);
    Pool op;
    op.Init(x);
    op.Process();
}
""" + ('extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR tiling) {\n'
       "    RunWithTiling(x, tiling);\n}\n")
    plan = plan_src(tmp_path, src)
    regions = {r.label: r for r in plan.root.walk()}
    top = [r for r in plan.root.children]
    assert [r.label for r in top] == ["tiling"] and top[0].cost == "phase" and top[0].children
    assert "with" not in regions
    assert regions["tiling step"].index_var == "groupIdx" and "tiling barrier" in regions


def test_an_installed_distribution_declaring_rules_is_loaded(tmp_path: Path) -> None:
    """A distribution on the path whose entry_points.txt declares `optrace.rules` is
    loaded through importlib.metadata; with none declaring it, importlib.metadata is not
    asked (it reads every installed distribution's metadata: pre-commit runs check on
    every commit)."""
    site = tmp_path / "site"
    dist = site / "team_rules-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: team-rules\nVersion: 1.0\n")
    (site / "other-2.0.dist-info").mkdir()
    (site / "other-2.0.dist-info" / "entry_points.txt").write_text("[console_scripts]\nother = other:main\n")
    (site / "team_rules.py").write_text(
        "from optrace.rules.fold_depth import FoldDepth\n"
        "class Renamed(FoldDepth):\n    code = 'OT951'\n    name = 'from-a-distribution'\n"
        "RULES = [Renamed]\n")
    script = ("import sys; sys.path.insert(0, sys.argv[1])\n"
              "import optrace.rules.registry as registry\n"
              "from optrace.cli.deferred import installed_entry_points\n"
              "asked = []\n"
              "registry.use_entry_points_reader(lambda g: asked.append(g) or installed_entry_points(g))\n"
              "print([r.code for r in registry.load_rules()][-1], bool(asked))\n")
    def run() -> list[str]:
        done = subprocess.run([sys.executable, "-c", script, str(site)], capture_output=True, text=True,
                              check=True)
        return done.stdout.split()

    assert run() == [builtin_rules()[-1].code, "False"]
    (dist / "entry_points.txt").write_text("[optrace.rules]\nteam = team_rules\n")
    assert run() == ["OT951", "True"]


@pytest.mark.parametrize("layout", ["DIST-INFO", "egg"])
def test_rules_of_a_distribution_in_any_layout_importlib_metadata_reads_are_loaded(
        tmp_path: Path, layout: str) -> None:
    """The look before importlib.metadata misses none it finds: a `.DIST-INFO` folder
    (matched in any case) and an unpacked egg (metadata in `EGG-INFO/`)."""
    site = tmp_path / "site"
    if layout == "egg":
        egg = site / "team_rules-1.0-py3.11.egg"
        meta, code = egg / "EGG-INFO", egg
        path_entry = egg
    else:
        meta, code, path_entry = site / "Team_Rules-1.0.DIST-INFO", site, site
    meta.mkdir(parents=True)
    code.mkdir(parents=True, exist_ok=True)
    (meta / ("PKG-INFO" if layout == "egg" else "METADATA")).write_text(
        "Metadata-Version: 2.1\nName: team-rules\nVersion: 1.0\n")
    (meta / "entry_points.txt").write_text("[optrace.rules]\nteam = team_rules\n")
    (code / "team_rules.py").write_text(
        "from optrace.rules.fold_depth import FoldDepth\n"
        "class Renamed(FoldDepth):\n    code = 'OT952'\n    name = 'from-a-layout'\n"
        "RULES = [Renamed]\n")
    script = ("import sys; sys.path.insert(0, sys.argv[1])\n"
              "from optrace.cli.deferred import install; install()  # as the CLI does\n"
              "from optrace.rules.registry import load_rules\n"
              "print([r.code for r in load_rules()][-1])\n")
    done = subprocess.run([sys.executable, "-c", script, str(path_entry)], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split() == ["OT952"], done.stderr


def test_a_declaring_distribution_without_a_reader_says_what_to_install(tmp_path: Path) -> None:
    """The registry does not import importlib.metadata itself (the CLI hands it a reader,
    optrace/cli/deferred.py): run without it, a distribution declaring rules is an error
    naming the call, never rules silently left out."""
    site = tmp_path / "site"
    dist = site / "team_rules-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "entry_points.txt").write_text("[optrace.rules]\nteam = team_rules\n")
    script = ("import sys; sys.path.insert(0, sys.argv[1])\n"
              "from optrace.rules.registry import load_rules\n"
              "load_rules()\n")
    done = subprocess.run([sys.executable, "-c", script, str(site)], capture_output=True, text=True)
    assert done.returncode != 0 and "optrace.cli.deferred.install()" in done.stderr, done.stderr


@pytest.mark.parametrize("plugin, why", [
    (None, "ModuleNotFoundError"),
    ("RULES = 3\n", "is a int, not a list of Rule classes"),
    ("RULES = [object]\n", "not a Rule class"),
    ("raise RuntimeError('broken at import')\n", "RuntimeError: broken at import"),
])
def test_a_broken_rule_plugin_is_ot004_naming_its_distribution(tmp_path: Path, plugin: str | None,
                                                               why: str) -> None:
    """An installed distribution's `optrace.rules` entry point that cannot be used is the
    user's input: OT004 naming the distribution and the entry point, exit 2 (never 3)."""
    site = tmp_path / "site"
    dist = site / "team_rules-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: team-rules\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[optrace.rules]\nteam = team_rules\n")
    if plugin is not None:
        (site / "team_rules.py").write_text(plugin)
    op = tmp_path / "demo_op" / "op_kernel"
    op.mkdir(parents=True)
    (op / "demo_op.cpp").write_text('extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) { }\n')
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-m", "optrace", "plan", str(op.parent)], capture_output=True,
                          text=True, env=env)
    assert done.returncode == 2, done.stderr
    assert "OT004" in done.stderr and "team-rules" in done.stderr and "team = team_rules" in done.stderr
    assert why in done.stderr


def test_flags_of_one_family_are_one_step_and_a_barrier_is_named_by_the_call_it_ends(tmp_path: Path) -> None:
    """`CrossCoreSetFlag(evt + 1)` ... `(evt + 3)` differ by a counter only: one step run
    again, one label. Barriers between calls that have no region of their own (too small)
    are named by the call each ends (by what tells them apart)."""
    src = HEAD + """    if ASCEND_IS_AIV {
        CrossCoreSetFlag<0x2, PIPE_MTE2>(ctx.evt);
        CrossCoreSetFlag<0x2, PIPE_MTE2>(ctx.evt + 1);
        CrossCoreSetFlag<0x2, PIPE_MTE2>(ctx.evt + 2);
        ScaleRows(x);
        SyncAll();
        ShiftRows(x);
        SyncAll();
    }
}
"""
    plan = plan_src(tmp_path, src)
    got = {r.label for r in plan.root.walk()}
    # (the words the other lacks: `rows` tells nothing apart)
    assert {"notify aiv", "barrier-scale aiv", "barrier-shift aiv"} <= got, got
    assert plan.lint["sibling_label_clashes"] == 0


SETUP_THEN_WORK = """
class Op {
public:
    __aicore__ inline void Init(GM_ADDR x) {
        xGm.SetGlobalBuffer((__gm__ float*)x);
        PrepareStrides();
        Process();
    }
private:
    __aicore__ inline void PrepareStrides() {
        roundLen = (len + 31) / 32 * 32; tail = len - roundLen;
        PrepareTail();
        PrepareHead();
    }
    __aicore__ inline void PrepareTail() {
        for (uint32_t i = 0; i < 4; ++i) { tails[i] = len * i; }
        tailLen = len * 8; tailAligned = (tailLen + 31) / 32 * 32;
    }
    __aicore__ inline void PrepareHead() {
        for (uint32_t i = 0; i < 4; ++i) { heads[i] = len * i; }
        headLen = len * 8; headAligned = (headLen + 31) / 32 * 32;
    }
    __aicore__ inline void Process() {
        for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) { Compute(groupIdx); SyncAll(); }
    }
};
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    Op op;
    op.Init(x);
}
"""


def test_what_setup_runs_is_setup_but_not_the_work_it_calls(tmp_path: Path) -> None:
    # `PrepareStrides` holds regions (a phase by what it holds, alone) but runs inside
    # `Init`: setup. The `Process` an Init ends on is the kernel's work, barrier and all.
    plan = plan_src(tmp_path, SETUP_THEN_WORK)
    cost = {r.label: r.cost for r in plan.root.walk()}
    prepare = [r for r in plan.root.walk() if r.label.endswith("strides")]
    assert prepare and all(r.cost == "setup" and r.children for r in prepare), cost
    work = [lb for lb in cost if "group" in lb and "barrier" not in lb]
    assert work and all(cost[lb] == "phase" for lb in work), cost
    assert any(c == "handshake" for c in cost.values()), cost


def _first_assignments_by_one_scan(text: str, names: list[str]) -> dict[str, str]:
    """The names' first `name = value;` as a scan for the names alone finds them (the way
    the planner searched a loop's body before it kept every `word =` place of it)."""
    import re

    assigned: dict[str, str] = {}
    if names:
        alternation = "|".join(re.escape(n) for n in sorted(set(names)))
        for m in re.finditer(rf"\b({alternation})\s*=", text):
            if m.group(1) not in assigned:
                value = re.compile(r"\s*([^;]+);").match(text, m.end())
                if value:
                    assigned[m.group(1)] = value.group(1)
    return assigned


@settings(max_examples=300)
@given(st.lists(st.sampled_from(["n", "m", "nm", "n_", "ün", "x1", " ", "=", " = ", "n =", "m  =", "==", ";",
                                 "\n", "(", "+", "1", "->", ".", "<", "\t"]), max_size=30),
       st.lists(st.sampled_from(["n", "m", "nm", "n_", "x1", "q"]), max_size=4))
def test_a_bodys_assignment_places_find_what_a_scan_per_name_finds(
    tokens: list[str], names: list[str]
) -> None:
    from optrace.engine.planner import assignment_places, first_assignments

    text = "".join(tokens)
    found = first_assignments(text, assignment_places(text), names)
    assert found == _first_assignments_by_one_scan(text, names)


def test_a_loop_over_a_member_call_is_not_named_this(tmp_path: Path) -> None:
    """`while (this->IterMatmulOut())` (ops-nn's weight-quant matmul) was a loop "over
    `this`", its span labelled `this`: the member called names it."""
    src = """
class MatmulOut {
public:
    __aicore__ inline bool IterMatmulOut() { return ++n_ < 4; }
    __aicore__ inline void Process() {
        while (this->IterMatmulOut()) { CopyIn(); Mmad(a, b, c); SyncAll(); }
    }
    uint32_t n_ = 0;
};
""" + 'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n' + """
    MatmulOut op;
    op.Process();
}
"""
    plan = plan_src(tmp_path, src)
    assert {lp.var for lp in plan.loops} == {"IterMatmulOut"}, [lp.var for lp in plan.loops]
    assert not [r.label for r in plan.root.walk() if r.label == "this" or r.label.startswith("this ")]


@pytest.mark.parametrize("opener", ["__VEC_SCOPE__", "VF_ROWS"])
def test_no_point_inside_a_vector_scope_block(tmp_path: Path, opener: str) -> None:
    """`__VEC_SCOPE__ { ... }` is compiled as a vector function (ops-nn's Regbase kernels:
    MicroAPI register code, hardware loops): a point there is no instruction it can hold.
    Its loop and calls got points; the function around it is measured instead. A macro the
    tree defines to it (`VF_ROWS`) opens one too."""
    src = """
#define VF_ROWS __VEC_SCOPE__
__aicore__ inline void ComputeRows(uint32_t n) {
    """ + opener + """
    {
        MicroAPI::MaskReg mask = MicroAPI::UpdateMask<float>(n);
        for (uint16_t i = 0; i < n; i++) { ComputeRowEach(mask, i); ComputeRowEach(mask, i); }
        ComputeRowTail(mask, n);
    }
}
__aicore__ inline void ComputeRowEach(MicroAPI::MaskReg m, uint16_t i) {
    Add(a, b, c); Mul(a, b, c); Exp(a, b, c);
}
__aicore__ inline void ComputeRowTail(MicroAPI::MaskReg m, uint32_t n) {
    Add(a, b, c); Mul(a, b, c); Exp(a, b, c);
}
""" + 'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n' + """
    for (uint32_t t = 0; t < 8; t++) { CopyIn(t); ComputeRows(64); CopyOut(t); SyncAll(); }
}
"""
    plan = plan_src(tmp_path, src)
    got = {r.label: r for r in plan.root.walk()}
    rows = [r for label, r in got.items() if label.endswith("compute-rows") or label == "compute-rows"]
    assert rows, list(got)
    assert not rows[0].children, [c.label for c in rows[0].children]
    assert any("__VEC_SCOPE__" in n for n in rows[0].notes), rows[0].notes
    assert not [label for label in got if "each" in label or "tail" in label], list(got)


def test_a_comment_naming_the_vector_scope_is_not_one(tmp_path: Path) -> None:
    src = ('extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n'
           "    // the rows below run outside __VEC_SCOPE__\n"
           "    {\n        for (uint32_t t = 0; t < 8; t++) {\n"
           "            CopyIn(t); Compute(t); CopyOut(t); SyncAll();\n        }\n"
           "    }\n}\n")
    got = labels(plan_src(tmp_path, src))
    assert any(label.startswith("barrier") or "barrier" in label for label in got), got


def test_a_cast_in_a_loop_condition_is_not_the_loop_s_name(tmp_path: Path) -> None:
    src = ('extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n'
           "    uint32_t k = 0;\n    uint32_t blockNum = 8;\n"
           "    while (static_cast<int64_t>(k) < blockNum) { CopyIn(k); Compute(k); SyncAll(); k++; }\n}\n")
    plan = plan_src(tmp_path, src)
    assert [lp.var for lp in plan.loops] == ["k"], [lp.var for lp in plan.loops]



def test_arithmetic_on_tile_sizes_does_not_name_a_tile_loop(tmp_path: Path) -> None:
    """Two row loops of one step both run `SubProcess`; the second also sizes its rows with
    the operator's own `Min` helper. Told apart, it read `sub-min` (ops-nn's rms_norm): the
    arithmetic says nothing of the loop, so another difference names it."""
    src = """
template <typename T> __aicore__ inline T Min(T a, T b) { return a < b ? a : b; }

class KernelRows {
public:
    __aicore__ inline void Process() {
        CopyInGamma();
        for (uint32_t rowIdx = 0; rowIdx < headRows; ++rowIdx) {
            SubProcess(rowIdx, rowFactor);
        }
        SyncAll();
        uint32_t remain = tailRows;
        for (uint32_t repeat = 0; repeat < repeatNum; ++repeat) {
            uint32_t calRowNum = Min(remain, rowFactor);
            SubProcess(repeat, calRowNum);
            remain -= calRowNum;
        }
    }
private:
    __aicore__ inline void CopyInGamma() {
        for (uint32_t k = 0; k < gammaBlocks; ++k) { DataCopy(g, gammaGm[k * 64], 64); Cast(gf, g, 64); }
    }
    __aicore__ inline void SubProcess(uint32_t i, uint32_t rows) {
        for (uint32_t j = 0; j < rows; ++j) { DataCopy(x, xGm[i * rows + j], 64); Mul(y, x, x, 64);
            ReduceSum(z, y, w, 64); Muls(z, z, 2.0f, 1); Sub(y, x, z, 64); DataCopy(yGm[i], y, 64); }
    }
};
""" + ('extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n'
       "    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);\n    KernelRows op;\n    op.Process();\n}\n")
    plan = plan_src(tmp_path, src)
    tiles = [r.label for r in plan.root.walk() if r.tile_loop]
    assert len(tiles) == 2 and len(set(tiles)) == 2, tiles
    assert not any("min" in label.split("-") for label in tiles), tiles


def test_a_matmul_run_is_a_step_and_a_time_loop_is_named_by_its_bound(tmp_path: Path) -> None:
    """A recurrent kernel (ops-nn's gru): the input matmul is a few lines that set the
    matmul API up and run it (`IterateAll`), which is the step's whole product, not a
    chore; the time loop's variable (`tIdx`) says nothing, what it runs up to does."""
    src = """
class KernelRnn {
public:
    __aicore__ inline void Process() {
        InputMM();
        SyncAll();
        int64_t tIdx = hasInitH ? 0 : 1;
        for (; tIdx < this->tiling->timeStep; tIdx++) {
            SyncAll();
            HiddenMM(tIdx);
            SyncAll();
            Gates(tIdx);
        }
    }
private:
    __aicore__ inline void InputMM() {
        inputMM.SetTensorA(xGm[aOffset]);
        inputMM.SetTensorB(wiGm[bOffset]);
        inputMM.IterateAll(inputMMWorkspace[cOffset], false);
    }
    __aicore__ inline void HiddenMM(int64_t t) {
        hiddenMM.SetTensorA(hGm[t * hiddenSize]);
        hiddenMM.SetTensorB(whGm[bOffset]);
        hiddenMM.IterateAll(hiddenMMWorkspace[cOffset], false);
    }
    __aicore__ inline void Gates(int64_t t) {
        for (int64_t row = 0; row < rowNum; ++row) { DataCopy(x, ws[t * row], 64); Sigmoid(y, x, 64);
            Mul(z, y, x, 64); DataCopy(outGm[t * row], z, 64); }
    }
};
""" + ('extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n'
       "    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);\n    KernelRnn op;\n    op.Process();\n}\n")
    plan = plan_src(tmp_path, src)
    got = [r.label for r in plan.root.walk()]
    assert "input-mm" in got, got
    assert "time-step" in got and "loop" not in got, got
    assert "time-step hidden-mm" in got, got
