"""Properties of plan / apply / strip / check on generated kernels and on every fixture.

Generated kernels: random nesting of free functions, templates, a functor class, loops
(phase-named like `groupIdx`, tile-named like `kIdx`, while loops), early returns,
break / continue, `switch`, `#if` / `#if 0` blocks, macros, `if (ASCEND_IS_AIC)`
branches, calls between functions and SyncAll / CrossCoreWaitFlag hot calls — written
with LF or CRLF, with or without a BOM, spaces or tabs, and GBK comment bytes. Each one
is a one-operator repository. The properties:

- plan never raises;
- apply twice = apply once (after the first apply is written, a second has no change);
- strip after apply = identity, byte for byte (created files deleted again);
- `check` after apply has no error (compile safety included);
- (a smaller budget) what compiled before apply still compiles after it, with g++
  against the AscendC host stub, profiling on and off.

Budgets follow the hypothesis profile (tests/conftest.py): a short run by default,
`OPTRACE_LONG_FUZZ=1` for a long one.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from optrace.engine.diagnostics import InputError, Severity
from optrace.engine.transaction import commit
from optrace.pipeline.apply import apply_changes, strip_changes
from optrace.pipeline.check import check_operator
from optrace.pipeline.plan import plan_operator

pytestmark = pytest.mark.slow  # hypothesis over fixtures and generated kernels, with compiles

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
HOST_REPO = Path(__file__).resolve().parent / "data" / "host_repo"
STUB = Path(str(resources.files("optrace.runtime").joinpath("stub/ascendc_host_stub.h")))
BUDGET = settings.default.max_examples  # 100 by default, 2000 with OPTRACE_LONG_FUZZ=1
SLOW = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]

# --------------------------------------------------------------------------- the generator

PHASE_VARS = ["groupIdx", "tokenIdx", "expertIdx", "roundIdx", "rankIdx"]
TILE_VARS = ["kIdx", "tileIdx", "mIdx", "nIdx", "i"]
CONDITIONS = [
    "acc > 3U", "ASCEND_IS_AIC", "ASCEND_IS_AIV", "AscendC::GetBlockIdx() == 0",
    "g_coreType == AscendC::AIC", "AscendC::GetSubBlockIdx() == 1",
]
HOT_CALLS = [
    "AscendC::SyncAll();", "AscendC::CrossCoreWaitFlag(0x8);",
    "AscendC::CrossCoreSetFlag<0x2, PIPE_MTE3>(0x8);", "SyncAll();", "CrossCoreWaitFlag(flagId);",
    "HOT_SYNC();",
]
GBK_COMMENTS = ["分组循环", "等待数据就绪", "合并结果：按专家", "计算 tile"]

# A statement is a tuple; blocks are lists of statements.
Stmt = tuple


@dataclass(frozen=True)
class Function:
    name: str
    returns: bool  # uint32_t (returns acc) or void
    template: bool
    body: list[Stmt]


@dataclass(frozen=True)
class Program:
    functions: list[Function]
    functor: list[Stmt] | None  # body of `Stage::operator()(uint32_t a)`, or no functor
    entry: list[Stmt]


def statements(draw: st.DrawFn, depth: int, pool: list[Function | str], in_loop: bool,
               returns: bool, max_len: int = 4) -> list[Stmt]:
    """A block: up to `max_len` statements; an exit (return / break / continue) only last,
    under an `if`, so no code is unreachable. `pool` holds what may be called (functions
    defined so far, "functor"): a function may be called from several places, so from
    several calling contexts (test_regression_a_callee_reached_from_two_contexts)."""
    count = draw(st.integers(0 if depth else 1, max_len))
    out: list[Stmt] = []
    for _ in range(count):
        kinds = ["plain", "plain", "hot", "comment"]
        if pool:
            kinds += ["call", "call"]
        if depth < 3:
            kinds += ["for", "for", "if", "pp", "while", "switch"]
        kind = draw(st.sampled_from(kinds))
        if kind == "plain":
            out.append(("plain", draw(st.sampled_from(["acc += 1U;", "acc ^= 5U;", "acc = acc * 3U;"]))))
        elif kind == "hot":
            out.append(("plain", draw(st.sampled_from(HOT_CALLS))))
        elif kind == "comment":
            out.append(("comment", draw(st.sampled_from(GBK_COMMENTS))))
        elif kind == "call":
            callee = draw(st.sampled_from(pool))
            out.append(("plain", "stage(acc);") if callee == "functor" else ("call", callee))
        elif kind == "for":
            var = draw(st.sampled_from(PHASE_VARS + TILE_VARS))
            body = statements(draw, depth + 1, pool, True, returns)
            out.append(("for", var, draw(st.sampled_from(["4U", "n", "LOOP_N"])), body))
        elif kind == "while":  # a spin-wait loop when it holds a wait, else a phase loop
            body = statements(draw, depth + 1, pool, True, returns, max_len=2)
            out.append(("while", body))
        elif kind == "if":
            cond = draw(st.sampled_from(CONDITIONS))
            then = statements(draw, depth + 1, pool, in_loop, returns)
            exits = ["return"] + (["break", "continue"] if in_loop else [])
            if draw(st.booleans()):
                then = [*then, ("exit", draw(st.sampled_from(exits)), returns)]
            other = statements(draw, depth + 1, pool, in_loop, returns) if draw(st.booleans()) else None
            out.append(("if", cond, then, other))
        elif kind == "pp":
            macro = draw(st.sampled_from(["0", "1", "OPTRACE_TEST_FLAG", "defined(__CCE_KT_TEST__)"]))
            body = statements(draw, depth + 1, pool, in_loop, returns)
            other = statements(draw, depth + 1, pool, in_loop, returns) if draw(st.booleans()) else None
            out.append(("pp", macro, body, other))
        elif kind == "switch":
            cases = [statements(draw, depth + 1, pool, False, returns, max_len=2)
                     for _ in range(draw(st.integers(1, 3)))]
            out.append(("switch", cases, draw(st.booleans())))
    return out


@st.composite
def programs(draw: st.DrawFn) -> Program:
    functions: list[Function] = []
    pool: list[Function | str] = []
    for n in range(draw(st.integers(0, 4))):
        returns = draw(st.booleans())
        template = draw(st.booleans())
        # Spin-wait hint words (wait, ready) in names reach loop bodies through labels
        # (test_regression_spin_wait_detection_reads_inserted_labels).
        name = draw(st.sampled_from(["Dispatch", "Compute", "Combine", "WaitReady", "Process", "Gemm"]))
        body = statements(draw, 0, pool, False, returns)
        functions.append(Function(f"{name}{n}", returns, template, body))
        pool.append(functions[-1])
    functor = None
    if draw(st.booleans()):
        functor = statements(draw, 1, pool, False, False)
        pool.append("functor")
    entry = statements(draw, 0, pool, False, False, max_len=5)
    return Program(functions, functor, entry)


@dataclass(frozen=True)
class Style:
    newline: str = "\n"
    indent: str = "    "
    bom: bool = False
    final_newline: bool = True
    same_line_brace: bool = False  # `void F() {` (K&R) rather than the brace on its own line


styles = st.builds(
    Style,
    newline=st.sampled_from(["\n", "\r\n"]),
    indent=st.sampled_from(["    ", "\t", "  "]),
    bom=st.booleans(),
    final_newline=st.booleans(),
    same_line_brace=st.booleans(),
)


def render(program: Program, style: Style) -> bytes:
    """The kernel source, in the style's bytes (GBK comments stay GBK)."""
    lines: list[tuple[int, str]] = []  # (indent level, text); level -1: a preprocessor line

    def emit_block(block: list[Stmt], level: int) -> None:
        for stmt in block:
            emit(stmt, level)

    def emit(stmt: Stmt, level: int) -> None:
        kind = stmt[0]
        if kind == "plain":
            lines.append((level, stmt[1]))
        elif kind == "comment":
            lines.append((level, f"// {stmt[1]}"))
        elif kind == "call":
            fn: Function = stmt[1]
            call = f"{fn.name}<uint32_t>(acc)" if fn.template else f"{fn.name}(acc)"
            lines.append((level, f"acc += {call};" if fn.returns else f"{call};"))
        elif kind == "exit":
            what, returns = stmt[1], stmt[2]
            lines.append((level, "return acc;" if what == "return" and returns else f"{what};"))
        elif kind == "for":
            _, var, bound, body = stmt
            lines.append((level, f"for (uint32_t {var} = 0; {var} < {bound}; ++{var}) {{"))
            emit_block(body, level + 1)
            lines.append((level, "}"))
        elif kind == "while":
            lines.append((level, "while (acc < 100U) {"))
            emit_block(stmt[1], level + 1)
            lines.append((level + 1, "acc += 7U;"))
            lines.append((level, "}"))
        elif kind == "if":
            _, cond, then, other = stmt
            lines.append((level, f"if ({cond}) {{"))
            emit_block(then, level + 1)
            if other is None:
                lines.append((level, "}"))
            else:
                lines.append((level, "} else {"))
                emit_block(other, level + 1)
                lines.append((level, "}"))
        elif kind == "pp":
            _, macro, body, other = stmt
            lines.append((-1, f"#if {macro}"))
            emit_block(body, level)
            if other is not None:
                lines.append((-1, "#else"))
                emit_block(other, level)
            lines.append((-1, "#endif"))
        elif kind == "switch":
            _, cases, braces = stmt
            lines.append((level, "switch (acc % 3U) {"))
            for n, body in enumerate(cases):
                lines.append((level, f"case {n}U:" + (" {" if braces else "")))
                emit_block(body, level + 1)
                lines.append((level + 1, "break;"))
                if braces:
                    lines.append((level, "}"))
            lines.append((level, "default:"))
            lines.append((level + 1, "break;"))
            lines.append((level, "}"))

    lines.append((0, "// 生成的算子：optrace 属性测试"))
    lines.append((0, '#include "kernel_operator.h"'))
    lines.append((0, "#define LOOP_N 4U"))
    lines.append((0, "#define HOT_SYNC() AscendC::SyncAll()"))
    lines.append((0, "constexpr uint32_t n = 3U;"))
    lines.append((0, "constexpr int32_t flagId = 5;"))
    lines.append((0, ""))
    for fn in program.functions:
        if fn.template:
            lines.append((0, "template <typename T>"))
        ret = ("T" if fn.template else "uint32_t") if fn.returns else "void"
        arg = "T a" if fn.template else "uint32_t a"
        lines.append((0, f"__aicore__ inline {ret} {fn.name}({arg})"))
        lines.append((0, "{"))
        lines.append((1, "uint32_t acc = static_cast<uint32_t>(a);"))
        emit_block(fn.body, 1)
        if fn.returns:
            lines.append((1, "return acc;"))
        else:
            lines.append((1, "(void)acc;"))
        lines.append((0, "}"))
        lines.append((0, ""))
    if program.functor is not None:
        lines.append((0, "class Stage {"))
        lines.append((0, "public:"))
        lines.append((1, "__aicore__ inline void operator()(uint32_t a)"))
        lines.append((1, "{"))
        lines.append((2, "uint32_t acc = a;"))
        emit_block(program.functor, 2)
        lines.append((2, "(void)acc;"))
        lines.append((1, "}"))
        lines.append((0, "};"))
        lines.append((0, ""))
    lines.append((0, 'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
                     "GM_ADDR tiling)"))
    lines.append((0, "{"))
    lines.append((1, "uint32_t acc = 0U;"))
    if program.functor is not None:
        lines.append((1, "Stage stage;"))
    emit_block(program.entry, 1)
    lines.append((1, "(void)acc;"))
    lines.append((0, "}"))

    if style.same_line_brace:  # fold each lone `{` of a definition onto its signature
        folded: list[tuple[int, str]] = []
        for level, text in lines:
            if text == "{" and folded and folded[-1][1].endswith(")"):
                folded[-1] = (folded[-1][0], folded[-1][1] + " {")
            else:
                folded.append((level, text))
        lines = folded

    def encode(text: str) -> bytes:
        return text.encode("gbk")  # ASCII stays ASCII; the Chinese comments become GBK bytes

    body = style.newline.encode().join(
        encode(text if level < 0 else style.indent * level + text) for level, text in lines
    )
    if style.final_newline:
        body += style.newline.encode()
    return (b"\xef\xbb\xbf" if style.bom else b"") + body


# The AscendC calls the stub does not have, for the g++ property.
SHIM = """
#ifndef DEMO_SHIM_H
#define DEMO_SHIM_H
namespace AscendC {
inline void CrossCoreWaitFlag(int32_t) {}
template <int32_t mode, pipe_t pipe>
inline void CrossCoreSetFlag(int32_t) {}
}  // namespace AscendC
using AscendC::CrossCoreWaitFlag;
using AscendC::SyncAll;
#endif
"""


def write_repo(root: Path, source: bytes, with_stub: bool = False) -> Path:
    """`root/repo/optrace.toml` + `root/repo/demo_op/op_kernel/demo_op.cpp`; the op dir."""
    repo = root / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    kernel = repo / "demo_op" / "op_kernel"
    kernel.mkdir(parents=True)
    (repo / "optrace.toml").write_text("")
    (kernel / "demo_op.cpp").write_bytes(source)
    if with_stub:
        (kernel / "kernel_operator.h").write_text(STUB.read_text() + SHIM)
    return repo / "demo_op"


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file() and ".optrace" not in p.parts}


def write(changes: dict[Path, tuple[bytes | None, bytes | None]], journal: Path) -> None:
    commit(changes, journal, name="property")


def errors_of(op: Path, repo: Path) -> list[str]:
    """ERROR findings of `check`, compile safety included."""
    report = check_operator(op, compile_safety=True)
    assert report.instrumented
    return [d.format(repo) for d in report.findings if d.severity == Severity.ERROR]


def assert_round_trip(op: Path, repo: Path) -> dict[str, bytes]:
    """apply, re-apply, check, strip on one operator; returns the applied tree."""
    before = snapshot(repo)
    plan_operator(op)  # never raises on valid input
    first = apply_changes(op)
    assert first.changes, "every generated kernel has at least the root point"
    write(first.changes, repo / ".optrace")
    applied = snapshot(repo)
    second = apply_changes(op)
    assert second.changes == {}, f"apply is not idempotent: {sorted(map(str, second.changes))}"
    errors = errors_of(op, repo)
    assert not errors, "\n".join(errors)
    stripped = strip_changes(op)
    write(stripped.changes, repo / ".optrace")
    assert snapshot(repo) == before, "strip did not give back the original bytes"
    assert strip_changes(op).changes == {}
    return applied


# --------------------------------------------------------------------------- generated kernels

def _simple() -> Program:
    fn = Function("Compute0", False, False, [("for", "kIdx", "4U", [("plain", "AscendC::SyncAll();")])])
    return Program([fn], None, [("for", "groupIdx", "n", [("call", fn)]),
                                ("if", "ASCEND_IS_AIV", [("plain", "CrossCoreWaitFlag(flagId);"),
                                                         ("exit", "return", False)], None)])


def _break_beside_decided_conditionals() -> Program:
    """A loop with a `break` and `#if 0` / `#else` and `#if 1` / `#else` arms: check blanks the
    decided conditionals before it parses, and once left an `#endif` without its `#if`, so
    the loop did not parse and its `break` seemed to leave the region around it (OT407)."""
    plain = ("plain", "acc += 1U;")
    body = [plain, ("if", "acc > 3U", [plain, ("exit", "break", False)], None),
            ("pp", "0", [("for", "groupIdx", "4U", [plain]), plain], [plain, plain]),
            ("pp", "1", [plain, ("pp", "1", [plain, ("plain", "AscendC::SyncAll();")], []), plain], [])]
    fn = Function("Dispatch0", False, False, [plain, ("for", "nIdx", "4U", body)])
    return Program([fn], None, [("call", fn)])


def _barrier_after_a_traced_if() -> Program:
    """Found by this property (a random seed of the README's test run): a barrier after an
    `if` holding a barrier of its own. On the instrumented tree the second barrier was named
    after the nearest call before it — `TRACE_POINT`, inside the traced `if` — so a second
    apply added a `barrier-trace-point` region inside `barrier`: apply was not idempotent."""
    sync = ("plain", "AscendC::SyncAll();")
    return Program([], None, [("if", "acc > 3U", [sync], None), sync])


def _barriers_around_a_call_in_if_0() -> Program:
    """Found by this property (session 29, a random seed of the README's test run; the same
    at the session's start): the entry's calls inside `#if 0`, a barrier before and after
    one. The first apply wraps each barrier (not in a block: an `#else` arm) in braces and a
    region named after the call; the second named each anew (`barrier`) and added a region
    inside: the planner's walk to the nearest call stopped at optrace's own braces."""
    dispatch = Function("Dispatch0", True, False, [("plain", "acc += 1U;")])
    sync = ("plain", "AscendC::SyncAll();")
    return Program([dispatch], None, [("pp", "0", [], [sync, ("call", dispatch), sync])])


def _two_loops_told_apart_by_their_code() -> Program:
    """Found by this property (session 30, OPTRACE_LONG_FUZZ=1; shrunk by hand): two loops
    of one function, each with a barrier, told apart by what their code does. On the
    instrumented tree that code began with optrace's own `MoeTracing` and `OptraceEnd`
    lines, so a second apply named the loops anew (`acc-trace`) and planned them again."""
    sync = ("plain", "AscendC::SyncAll();")
    loops = [("pp", "1", [("while", [("for", "groupIdx", "4U", [sync])])], None), ("while", [sync])]
    fn = Function("Dispatch0", False, False, loops)
    return Program([fn], [], [("call", fn), ("call", fn)])


@settings(max_examples=max(10, BUDGET // 2), suppress_health_check=SLOW)
@given(program=programs(), style=styles)
@example(program=_barrier_after_a_traced_if(), style=Style(final_newline=False))
@example(program=_two_loops_told_apart_by_their_code(), style=Style(final_newline=False))
@example(program=_barriers_around_a_call_in_if_0(), style=Style(final_newline=False))
@example(program=_simple(), style=Style())
@example(program=_break_beside_decided_conditionals(), style=Style(final_newline=False))
@example(program=_simple(), style=Style("\r\n", "\t", True, False))
def test_generated_kernels_round_trip(tmp_path_factory: pytest.TempPathFactory, program: Program,
                                      style: Style) -> None:
    source = render(program, style)
    op = write_repo(tmp_path_factory.mktemp("gen"), source)
    applied = assert_round_trip(op, op.parent)
    kernel = applied["demo_op/op_kernel/demo_op.cpp"]
    # The file keeps its own conventions: BOM, line ending, GBK bytes.
    assert kernel.startswith(b"\xef\xbb\xbf") == style.bom
    if style.newline == "\r\n":
        assert kernel.count(b"\n") == kernel.count(b"\r\n")
    for comment in GBK_COMMENTS:
        if comment.encode("gbk") in source:
            assert comment.encode("gbk") in kernel


def gxx(kernel_dir: Path, *defines: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["g++", "-std=c++17", "-fsyntax-only", "-w", f"-I{kernel_dir}", *defines,
         str(kernel_dir / "demo_op.cpp")],
        capture_output=True, text=True, check=False, timeout=120,
    )


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@settings(max_examples=max(4, BUDGET // 12), suppress_health_check=SLOW)
@given(program=programs(), style=styles)
@example(program=_simple(), style=Style())
def test_what_compiled_before_apply_compiles_after(tmp_path_factory: pytest.TempPathFactory,
                                                   program: Program, style: Style) -> None:
    op = write_repo(tmp_path_factory.mktemp("gxx"), render(program, style), with_stub=True)
    kernel_dir = op / "op_kernel"
    before = gxx(kernel_dir)
    assert before.returncode == 0, "the generator wrote invalid C++:\n" + before.stderr
    result = apply_changes(op)
    write(result.changes, op.parent / ".optrace")
    for defines in ((), ("-DENABLE_MOE_PROFILING=0",)):
        after = gxx(kernel_dir, *defines)
        assert after.returncode == 0, f"instrumented kernel {defines} does not compile:\n" + after.stderr


@settings(max_examples=max(10, BUDGET // 2), suppress_health_check=SLOW)
@given(st.binary(max_size=600), st.sampled_from([b"", b"\xef\xbb\xbf", b"\xff\xfe"]))
def test_plan_never_raises_on_arbitrary_bytes(tmp_path_factory: pytest.TempPathFactory, noise: bytes,
                                              prefix: bytes) -> None:
    """Garbage around an entry: plan either plans or refuses with a located OT0xx input
    error (exit 2 in the CLI) — never anything else; when it plans, apply and strip
    round-trip the garbage byte for byte."""
    # optrace's provenance markers (`// optrace`, `/*optrace<*/`, ...) are reserved: text
    # that spells them is optrace's to remove (docs/edits.md).
    assume(b"optrace" not in noise)
    entry = b'\nextern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n'
    source = prefix + noise + entry + noise + b"\n}\n"
    op = write_repo(tmp_path_factory.mktemp("noise"), source)
    try:
        plan_operator(op)
    except InputError as exc:
        assert exc.diagnostic.code.startswith("OT0") and exc.diagnostic.path is not None
        return
    result = apply_changes(op)
    write(result.changes, op.parent / ".optrace")
    write(strip_changes(op).changes, op.parent / ".optrace")
    assert (op / "op_kernel" / "demo_op.cpp").read_bytes() == source


# --------------------------------------------------------------------------- every fixture


def fixture_operators() -> dict[str, Path]:
    """Every operator directory under fixtures/ (and the host-compilable demo): an
    `op_kernel` folder's parent."""
    found: dict[str, Path] = {}
    for base in (FIXTURES, HOST_REPO.parent):
        for kernel in sorted(base.rglob("op_kernel")):
            op = kernel.parent
            if base == HOST_REPO.parent and not op.is_relative_to(HOST_REPO):
                continue
            found[op.relative_to(base).as_posix()] = op
    return found


FIXTURE_OPS = fixture_operators()


def test_every_fixture_operator_is_found() -> None:
    assert {Path(k).name for k in FIXTURE_OPS} >= {
        "moe_fused_gmm", "moe_gate_bias", "moe_token_permute", "moe_gating_topk", "demo_moe"}


def copy_fixture(tmp: Path, op: Path) -> tuple[Path, Path]:
    """The fixture's repository (the op dir's top folder under fixtures/) in tmp."""
    base = FIXTURES if op.is_relative_to(FIXTURES) else HOST_REPO.parent
    top = base / op.relative_to(base).parts[0]
    repo = tmp / top.name
    shutil.copytree(top, repo)
    return repo, repo / op.relative_to(top)


def restyle(repo: Path, style: Style) -> None:
    """Rewrite every kernel source of the repository in another style (CRLF, BOM, tabs)."""
    for path in sorted(repo.rglob("*")):
        if path.suffix not in (".h", ".cpp") or "op_kernel" not in path.parts:
            continue
        data = path.read_bytes().replace(b"\r\n", b"\n")
        if style.indent == "\t":
            data = b"\n".join(_tabs(line) for line in data.split(b"\n"))
        data = data.replace(b"\n", style.newline.encode())
        if style.bom and not data.startswith(b"\xef\xbb\xbf"):
            data = b"\xef\xbb\xbf" + data
        path.write_bytes(data)


def _tabs(line: bytes) -> bytes:
    stripped = line.lstrip(b" ")
    return b"\t" * ((len(line) - len(stripped)) // 4) + b" " * ((len(line) - len(stripped)) % 4) + stripped


# Driven through the CLI in the default mode, as they are, by test_apply_strip.py.
COVERED_ELSEWHERE = {
    "umdk_style/src/cam/comm_operator/ascend_kernels/moe_fused_gmm",
    "umdk_style/src/cam/comm_operator/ascend_kernels/moe_gate_bias",
    "msopgen_style/moe_token_permute",
    "direct_launch/csrc/ops/moe_gating_topk",
}

# Fixtures where mode B is refused by design, with the refusal's words: there, mode B must
# be refused (nothing written) and mode A round-trips.
MODE_B_REFUSED = {
    "shared_l0_header/norm/moe_norm_grad":
        "declared in common/inc/op_api/moe_norm_grad.h, outside the operator, and "
        "norm/norm_common/op_api/aclnn_moe_norm_legacy.cpp:12 calls it too",
    "l0op_style/norm/moe_norm_grad":
        "`MoeNormGrad` is called from norm/norm_common/op_api/aclnn_moe_norm_legacy.cpp:12 too, "
        "outside the operator",
    "graph_only/pooling/moe_pool_grad_argmax":
        "no caller can take profiling_data as the op's last output: its build makes no aclnn API "
        "(`ACLNNTYPE aclnn_exclude`)",
}

FIXTURE_STYLES = {
    "as-is": None,
    "crlf-bom-tabs": Style("\r\n", "\t", True),
}


@pytest.mark.parametrize("style_name", sorted(FIXTURE_STYLES))
@pytest.mark.parametrize("mode", ["A", "B"])
@pytest.mark.parametrize("name", sorted(FIXTURE_OPS))
def test_every_fixture_round_trips(tmp_path: Path, name: str, mode: str, style_name: str) -> None:
    """test_apply_strip.py drives the CLI on the fixtures as they are, in the default mode;
    this adds mode A, restyled sources, check with compile safety, and the host demo."""
    if style_name == "as-is" and mode == "B" and name in COVERED_ELSEWHERE:
        pytest.skip("covered by test_apply_strip.py and test_check.py")
    repo, op = copy_fixture(tmp_path, FIXTURE_OPS[name])
    style = FIXTURE_STYLES[style_name]
    if style is not None:
        restyle(repo, style)
    before = snapshot(repo)
    if mode == "B" and name in MODE_B_REFUSED:
        with pytest.raises(InputError) as refused:
            apply_changes(op, mode=mode)
        assert MODE_B_REFUSED[name] in refused.value.diagnostic.message
        assert snapshot(repo) == before
        return
    first = apply_changes(op, mode=mode)
    write(first.changes, repo / ".optrace")
    assert apply_changes(op).changes == {}  # re-apply without --mode keeps the recorded one
    assert apply_changes(op, mode=mode).changes == {}
    report = check_operator(op, compile_safety=True)
    errors = [d.format(repo) for d in report.findings if d.severity == Severity.ERROR]
    assert not errors, "\n".join(errors)
    write(strip_changes(op).changes, repo / ".optrace")
    assert snapshot(repo) == before
    # Plan, apply and strip again: the same bytes as the first time (no drift).
    again = apply_changes(op, mode=mode)
    assert again.changes == first.changes


def test_check_is_clean_after_apply_on_the_fixture_check_py_leaves_out(tmp_path: Path) -> None:
    gate = FIXTURE_OPS["umdk_style/src/cam/comm_operator/ascend_kernels/moe_gate_bias"]
    repo, op = copy_fixture(tmp_path, gate)
    write(apply_changes(op).changes, repo / ".optrace")
    report = check_operator(op, compile_safety=True)
    assert report.instrumented and report.compile_checked > 0
    assert not [d for d in report.findings if d.severity == Severity.ERROR]


def test_generated_sources_are_what_the_properties_claim() -> None:
    """The generator really produces the advertised shapes (guards the test, not optrace)."""
    rendered = render(_simple(), Style("\r\n", "\t", True))
    assert rendered.startswith(b"\xef\xbb\xbf") and b"\r\n\t" in rendered
    assert "分组循环".encode("gbk") not in rendered and "生成的算子".encode("gbk") in rendered
    assert b'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, ' \
           b"GM_ADDR tiling)" in rendered


# --------------------------------------------------------------------------- regressions
# Found by the generator above, reduced by hand, and fixed: each stays as a regression test.

ENTRY = ('extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
         "GM_ADDR tiling)\n")


def round_trip_source(tmp: Path, source: str) -> None:
    op = write_repo(tmp, source.encode())
    assert_round_trip(op, op.parent)


def test_regression_return_inside_a_spin_wait_loop(tmp_path: Path) -> None:
    round_trip_source(tmp_path, '#include "kernel_operator.h"\n' + ENTRY + """{
    uint32_t acc = 0U;
    while (acc < 100U) {
        if (acc > 3U) {
            return;
        }
        AscendC::CrossCoreWaitFlag(0x8);
        acc += 7U;
    }
}
""")


def test_regression_check_flags_a_break_that_stays_inside_the_region(tmp_path: Path) -> None:
    round_trip_source(tmp_path, '#include "kernel_operator.h"\n' + ENTRY + """{
    uint32_t acc = 0U;
    while (acc < 100U) {
        if (acc > 3U) {
            break;
        }
        AscendC::CrossCoreWaitFlag(0x8);
        acc += 7U;
    }
}
""")


def test_regression_a_callee_reached_from_two_contexts(tmp_path: Path) -> None:
    round_trip_source(tmp_path, """#include "kernel_operator.h"
__aicore__ inline void Handshake()
{
    AscendC::CrossCoreWaitFlag(8);
}
""" + ENTRY + """{
    if (ASCEND_IS_AIC) {
        for (uint32_t groupIdx = 0; groupIdx < 4; ++groupIdx) {
            Handshake();
        }
    } else {
        Handshake();
    }
}
""")


def test_regression_core_suffix_makes_labels_too_deep(tmp_path: Path) -> None:
    source = """#include "kernel_operator.h"
__aicore__ inline void Inner()
{
    for (uint32_t tokenIdx = 0; tokenIdx < 4; ++tokenIdx) {
        if (ASCEND_IS_AIV) {
            AscendC::SyncAll();
        }
    }
}
__aicore__ inline void Middle()
{
    for (uint32_t expertIdx = 0; expertIdx < 4; ++expertIdx) {
        Inner();
    }
}
""" + ENTRY + """{
    for (uint32_t groupIdx = 0; groupIdx < 4; ++groupIdx) {
        Middle();
    }
    if (ASCEND_IS_AIC) {
        AscendC::SyncAll();
    }
}
"""
    op = write_repo(tmp_path, source.encode())
    write(apply_changes(op).changes, op.parent / ".optrace")
    report = check_operator(op, compile_safety=False)
    assert not [d for d in report.findings if d.code == "OT402"]


def test_regression_spin_wait_detection_reads_inserted_labels(tmp_path: Path) -> None:
    round_trip_source(tmp_path, """#include "kernel_operator.h"
__aicore__ inline uint32_t Compute(uint32_t acc)
{
    while (acc < 100U) {
        AscendC::SyncAll();
        acc += 7U;
    }
    return acc;
}
template <typename T>
__aicore__ inline void WaitReady(T acc)
{
    for (uint32_t groupIdx = 0; groupIdx < 4U; ++groupIdx) {
    }
    acc += Compute(acc);
}
""" + ENTRY + """{
    WaitReady<uint32_t>(0U);
}
""")


def test_regression_a_one_line_kernel_entry(tmp_path: Path) -> None:
    round_trip_source(tmp_path, '#include "kernel_operator.h"\n'
                      + ENTRY.rstrip("\n") + " { AscendC::SyncAll(); }\n")
