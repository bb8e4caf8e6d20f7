"""plan's mode probe (`probe_mode`, each layer's `carries`) gives apply's choice
(`choose_mode`, the layers' edits computed): the same mode, the same reason at the same
place, the same edited files, or the same refusal — on every fixture operator (each layer
on its own too), and on caller files written to hit each refusal the Python callers'
codemod has. The layers split into locate and render (`LocatingLayer`) answer the probe
without rendering: their `render` made to fail and no edit of theirs built, the probe
still answers as before, refusals included (issue #30). What the probe keeps while it
runs (`unchanged_files`) is gone when it returns: the next plan sees a file changed in
between."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from textwrap import dedent

import pytest
from layer_snippets import make_repo
from source_fuzz import FIXTURES, fixture_operators

from optrace.codemods import op_host_registry
from optrace.codemods.layer import (
    EXAMPLE_INFER,
    EXAMPLE_OPERATOR,
    EXAMPLE_TORCH,
    Carry,
    LocatingLayer,
    carry_of,
)
from optrace.codemods.layer_common import clean_bytes
from optrace.codemods.registry import HOST_LAYERS, layer
from optrace.engine.cache import once, unchanged_files
from optrace.engine.diagnostics import Diagnostic, InputError
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan
from optrace.pipeline.apply import ModeChoice, choose_mode, edited_files, probe_mode
from optrace.pipeline.layers import layer_carries, layer_edits
from optrace.pipeline.plan import plan_operator


def _every_fixture_operator() -> list[tuple[Path, Path]]:
    """`fixture_operators`, and the operators of the fixtures without an `op_kernel/`
    folder (a kernel source beside the op's other files): every fixture is compared."""
    found = fixture_operators()
    covered = {top for top, _ in found}
    for top in sorted(p for p in FIXTURES.iterdir() if p.is_dir() and p not in covered):
        found.extend((top, src.parent) for src in sorted(top.rglob("*.cpp"))
                     if b"__global__" in src.read_bytes())
    return found


OPERATORS = {op.relative_to(top.parent).as_posix(): (top, op) for top, op in _every_fixture_operator()}


def _outcome(decide: object, plan: Plan) -> ModeChoice | Diagnostic:
    try:
        return decide(plan)  # type: ignore[operator, no-any-return]
    except InputError as exc:
        return exc.diagnostic


def _same(plan: Plan) -> None:
    probed, computed = _outcome(probe_mode, plan), _outcome(choose_mode, plan)
    assert probed == computed
    for mode in ("A", "B"):  # each mode on its own too: the refusal, or the edited files
        try:
            edits = layer_edits(plan, mode)
        except InputError as exc:
            with pytest.raises(InputError) as raised:
                layer_carries(plan, mode)
            assert raised.value.diagnostic == exc.diagnostic
            continue
        assert layer_carries(plan, mode) == edited_files(edits)


def _carry_or_refusal(plan: Plan, answer: object) -> Carry | Diagnostic:
    try:
        return answer(plan)  # type: ignore[operator, no-any-return]
    except InputError as exc:
        return exc.diagnostic


def _same_per_layer(plan: Plan) -> None:
    """Each host layer's `carries` is `carry_of` its edits (files and the sizes header), or
    the same refusal, in each mode: no layer's answer hides behind another's."""
    for lay in HOST_LAYERS:
        for mode in ("A", "B"):
            carried = _carry_or_refusal(plan, lambda p, lay=lay, mode=mode: lay.carries(p, mode))
            computed = _carry_or_refusal(plan, lambda p, lay=lay, mode=mode: carry_of(lay.edits(p, mode,
                                                                                                 None)))
            assert carried == computed, (lay.NAME, mode)


LOCATING = [lay for lay in HOST_LAYERS if isinstance(lay, LocatingLayer)]
# Each located layer's edits name their codemod (`Edit.codemod`): the module's CODEMOD, and
# "infer" for the wrappers tiling writes with infer's `wrap_registered`.
LOCATING_CODEMODS = {sys.modules[type(lay).__module__].CODEMOD for lay in LOCATING}


@contextmanager
def _nothing_rendered(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every locating layer's `render` fails, and every edit built is recorded by its
    codemod: what runs inside must answer without rendering a located layer's edit."""
    built: list[str] = []
    original = Edit.__post_init__

    def record(self: Edit) -> None:
        built.append(self.codemod)
        original(self)

    def refuse(self: LocatingLayer, *args: object) -> list[Edit]:
        raise AssertionError(f"layer {self.NAME} rendered its edits")

    with monkeypatch.context() as patched:
        patched.setattr(Edit, "__post_init__", record)
        for lay in LOCATING:
            patched.setattr(type(lay), "render", refuse)
        yield built


def test_the_migrated_layers_locate_and_render() -> None:
    # The byte-level C++ codemods whose probe was their edits computed.
    assert {lay.NAME for lay in LOCATING} >= {"op_def", "infer", "tiling", "l0op", "aclnn", "torch_adapter",
                                              "registration", "autograd_wrappers", "build_hook"}


def _fixture_plan(name: str) -> Plan:
    top, op = OPERATORS[name]
    try:
        return plan_operator(op, top)
    except InputError:
        pytest.skip("the fixture is refused before any mode is chosen")


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_probe_equals_the_edit_computing_choice(name: str) -> None:
    plan = _fixture_plan(name)
    _same(plan)
    _same_per_layer(plan)


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_the_probe_renders_no_located_edit(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe answers as apply chooses with every locating layer's render failing, and
    builds no edit of theirs: their `carries` is their `locate`."""
    plan = _fixture_plan(name)
    computed = _outcome(choose_mode, plan)
    by_mode = {mode: _carry_or_refusal(plan, lambda p, mode=mode: layer_carries(p, mode)) for mode in "AB"}
    with _nothing_rendered(monkeypatch) as built:
        assert _outcome(probe_mode, plan) == computed
        for mode in "AB":
            assert _carry_or_refusal(plan, lambda p, mode=mode: layer_carries(p, mode)) == by_mode[mode]
    assert not LOCATING_CODEMODS & set(built), built


def _example(tmp_path: Path, caller: str, name: str = "tests/test_demo_op.py") -> Plan:
    for rel, text in {**EXAMPLE_OPERATOR, **EXAMPLE_TORCH, name: caller}.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
    (tmp_path / "optrace.toml").write_text("")
    return plan_operator(tmp_path / "demo_op", tmp_path)


_HEAD = "import torch\nimport demo_lib\n\n\n"
CALLERS = {
    "plain": "def test_it():\n    y = torch.ops.demo_lib.demo_op(x)\n",
    "tuple target": "def test_it():\n    y, z = torch.ops.demo_lib.demo_op(x)\n",
    "bare call": "def test_it():\n    torch.ops.demo_lib.demo_op(x)\n",
    "in an expression": "def test_it():\n    print(torch.ops.demo_lib.demo_op(x).sum())\n",
    "one-line block": "def test_it():\n    if x: y = torch.ops.demo_lib.demo_op(x)\n",
    "one-line block after another": "def test_it():\n    if x: a = 1; y = torch.ops.demo_lib.demo_op(x)\n",
    "a; b": "def test_it():\n    a = 1; y = torch.ops.demo_lib.demo_op(x)\n",
    "b; a": "def test_it():\n    y = torch.ops.demo_lib.demo_op(x); a = 1\n",
    "module a; b": "a = 1; y = torch.ops.demo_lib.demo_op(x)\n",
    "module level": "y = torch.ops.demo_lib.demo_op(x)\n",
    "in a header": "def test_it():\n    if torch.ops.demo_lib.demo_op(x) is None:\n        pass\n",
    "in a lambda": "f = lambda x: torch.ops.demo_lib.demo_op(x)\n",
    "in a comprehension": "ys = [torch.ops.demo_lib.demo_op(x) for x in xs]\n",
    "in a set comprehension": "ys = {torch.ops.demo_lib.demo_op(x) for x in xs}\n",
    "syntax error": "def test_it(:\n    y = torch.ops.demo_lib.demo_op(x)\n",
    "lone CR": "def test_it():\r    y = torch.ops.demo_lib.demo_op(x)\n",
    "spawn in a one-line block": ("import torch.multiprocessing as mp\n\ndef test_it():\n"
                                  "    y = torch.ops.demo_lib.demo_op(x)\n    if x: mp.spawn(f, nprocs=2)\n"),
    "spawn": ("import torch.multiprocessing as mp\n\ndef test_it():\n"
              "    y = torch.ops.demo_lib.demo_op(x)\n    mp.spawn(f, nprocs=2)\n"),
    "else block": ("def test_it():\n    if x:\n        pass\n    else: y = torch.ops.demo_lib.demo_op(x)\n"),
    "no call": "def test_it():\n    y = torch.ops.demo_lib.other_op(x)\n",
}


@pytest.mark.parametrize("case", sorted(CALLERS))
def test_probe_equals_the_codemod_on_callers(tmp_path: Path, case: str) -> None:
    _same(_example(tmp_path, _HEAD + CALLERS[case]))


def test_library_caller_spawn_is_not_checked(tmp_path: Path) -> None:
    # Library code gets the unpack only: its worker starts are not the codemod's business.
    text = _HEAD + ("import torch.multiprocessing as mp\n\ndef run():\n"
                    "    y = torch.ops.demo_lib.demo_op(x)\n    if x: mp.spawn(f, nprocs=2)\n")
    plan = _example(tmp_path, text, "demo_lib/run.py")
    _same(plan)
    assert probe_mode(plan).mode == "B"


def test_refusals_are_seen(tmp_path: Path) -> None:
    # The cases above are worth comparing only if they reach both answers.
    plan = _example(tmp_path, _HEAD + CALLERS["a; b"])
    choice = probe_mode(plan)
    assert choice.mode == "A" and "`a; b`" in choice.why.message
    plan = _example(tmp_path / "2", _HEAD + CALLERS["plain"])
    assert probe_mode(plan).mode == "B"
    assert (tmp_path / "2/tests/test_demo_op.py").resolve() in probe_mode(plan).edited


def test_every_fixture_is_compared() -> None:
    assert {top.name for top, _ in OPERATORS.values()} >= {p.name for p in FIXTURES.iterdir() if p.is_dir()}


def test_once_keeps_only_inside_a_stretch() -> None:
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert (once("k", compute), once("k", compute)) == (1, 2)  # apply: nothing kept
    with unchanged_files():
        assert (once("k", compute), once("k", compute)) == (3, 3)
        with unchanged_files():  # nested: the outer stretch keeps it
            assert once("k", compute) == 3
        assert once("k", compute) == 3
    assert once("k", compute) == 4


def _l0op_example(tmp_path: Path) -> Path:
    for rel, text in {**EXAMPLE_OPERATOR, **layer("l0op").EXAMPLES[0].files}.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "optrace.toml").write_text("")
    return tmp_path / "demo_op"


def test_the_next_probe_sees_a_file_changed_after_one(tmp_path: Path) -> None:
    # The probe reads each file once (its clean bytes, the l0op chain, the host sources'
    # walk): the next plan must read them again. A launch taken out of the op_api file
    # between two plans takes both op_api files out of the edited ones, and a host source
    # added is walked.
    op = _l0op_example(tmp_path)
    launch = op / "op_api/demo_op.cpp"
    plan = plan_operator(op, tmp_path)
    assert launch.resolve() in probe_mode(plan).edited
    _same(plan)
    launch.write_text(launch.read_text().replace("ADD_TO_LAUNCHER_LIST_AICORE(", "LaunchLater("))
    extra = op / "op_host/demo_op_tiling.cpp"
    extra.write_text("int Helper() { return 0; }\n")
    plan = plan_operator(op, tmp_path)
    choice = probe_mode(plan)
    assert choice.mode == "B" and launch.resolve() not in choice.edited
    assert extra in op_host_registry.host_files(plan.analysis.layers)
    _same(plan)


def test_a_stretch_reads_a_file_once(tmp_path: Path) -> None:
    # What the stretch promises its callers, and why it is for work that writes nothing.
    path = tmp_path / "a.cpp"
    path.write_bytes(b"int a;\n")
    with unchanged_files():
        assert clean_bytes(path) == b"int a;\n"
        path.write_bytes(b"int b;\n")
        assert clean_bytes(path) == b"int a;\n"
    assert clean_bytes(path) == b"int b;\n"


# --- refusals found by `locate`: the probe gives apply's diagnostic without rendering ------

_L0_API = """\
aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor *x, aclTensor *y, uint64_t *workspaceSize,
                                        aclOpExecutor **executor)
{
    auto uniqueExecutor = CREATE_EXECUTOR();
    auto out = l0op::DemoOp(x, y, uniqueExecutor.get());
    uniqueExecutor.ReleaseTo(executor);
    return ACLNN_SUCCESS;
}
"""
_L0 = """\
namespace l0op {
const aclTensor *DemoOp(const aclTensor *x, aclTensor *y, aclOpExecutor *executor)
{
    auto ret = ADD_TO_LAUNCHER_LIST_AICORE(DemoOp, OP_INPUT(x), OP_OUTPUT(y));
    return y;
}
}  // namespace l0op
"""
_OPDEF = """\
namespace ops {
class DemoOp : public OpDef {
public:
    explicit DemoOp(const char *name) : OpDef(name)
    {
        this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT});
        this->Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT});
    }
};
OP_ADD(DemoOp);
}  // namespace ops
"""
_UNLOCATED_OPDEF = _OPDEF.replace('this->Output("y")', "this->Output(OutputName())")
_INFER = """\
static ge::graphStatus InferShapeDemoOp(gert::InferShapeContext *context)
{
    *context->GetOutputShape(0) = *context->GetInputShape(0);
    return ge::GRAPH_SUCCESS;
}
IMPL_OP_INFERSHAPE(DemoOp).InferShape(InferShapeDemoOp);
"""
_TILING = """\
static ge::graphStatus TilingDemoOp(gert::TilingContext *context)
{
    auto y = context->GetOutputDesc(0);
    return ge::GRAPH_SUCCESS;
}
IMPL_OP_OPTILING(DemoOp).Tiling(TilingDemoOp);
"""
_ADAPTER = """\
#include <torch/extension.h>
#include "functions.h"

at::Tensor demo_op(const at::Tensor &x)
{
    at::Tensor y = at::empty_like(x);
    EXEC_NPU_CMD(aclnnDemoOp, x, y);
    return y;
}
"""
_WRAPPED = {rel: text for rel, text in layer("autograd_wrappers").EXAMPLES[0].files.items()}
_ACLNN = "ops/demo_op/op_api/aclnn_demo_op.cpp"
_L0_FILE = "ops/demo_op/op_api/demo_op.cpp"
_DEF = "ops/demo_op/op_host/demo_op_def.cpp"
_SHARED = Path(__file__).resolve().parent.parent / "fixtures" / "shared_l0_header"

# (the refusing layer, its files, the mode that applies (None: none), what the refusal says)
REFUSALS: dict[str, tuple[str, dict[str, str], str | None, str]] = {
    "op_def: outputs not located": (
        "op_def", {_DEF: _UNLOCATED_OPDEF}, None, "cannot locate the OpDef's outputs"),
    "infer: the OpDef's index": (
        "infer", {_DEF: _UNLOCATED_OPDEF, "ops/demo_op/op_host/demo_op_infershape.cpp": _INFER}, None,
        "cannot locate the OpDef's outputs"),
    "tiling: the OpDef's index": (
        "tiling", {_DEF: _UNLOCATED_OPDEF, "ops/demo_op/op_host/demo_op_tiling.cpp": _TILING}, None,
        "cannot locate the OpDef's outputs"),
    "l0op: a launch without OP_OUTPUT or OP_INPUT": (
        "l0op", {_ACLNN: _L0_API, _L0_FILE: _L0.replace("OP_INPUT(x), OP_OUTPUT(y)", "OP_ATTR(k)")}, None,
        "has neither OP_OUTPUT(...) nor OP_INPUT(...)"),
    "l0op: a profiling parameter not last": (
        "l0op", {_ACLNN: _L0_API.replace("(x, y, uniqueExecutor", "(x, nullptr, y, uniqueExecutor"),
                 _L0_FILE: _L0.replace("const aclTensor *x, aclTensor *y, aclOpExecutor",
                                       "const aclTensor *x, const aclTensor *profilingData, aclTensor *y, "
                                       "aclOpExecutor")}, None,
        "`DemoOp` already takes `const aclTensor *profilingData` here, not last"),
    "l0op: a call leaving defaults unstated": (
        "l0op", {_ACLNN: _L0_API.replace("(x, y, uniqueExecutor.get())", "(x, y)"), _L0_FILE: _L0}, None,
        "this call of `DemoOp` passes 2 argument(s)"),
    "aclnn: no wrapper of the op (mode B)": (
        "aclnn", {_ACLNN: "aclnnStatus aclnnOtherGetWorkspaceSize(const aclTensor *x,\n"
                          "    uint64_t *workspaceSize, aclOpExecutor **executor);\n"}, "A",
        "no aclnn wrapper of this op in aclnn_demo_op.cpp"),
    "aclnn: no workspaceSize": (
        "aclnn", {_ACLNN: "aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor *x,\n"
                          "    const aclTensor *y);\n"},
        None, "cannot find the workspaceSize parameter of `aclnnDemoOpGetWorkspaceSize`"),
    "aclnn: a profiling parameter elsewhere": (
        "aclnn", {_ACLNN: "aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor *profilingData, "
                          "const aclTensor *x,\n    uint64_t *workspaceSize, aclOpExecutor **executor);\n"},
        None, "aclnnDemoOpGetWorkspaceSize already takes `const aclTensor *profilingData` here"),
    "aclnn: a caller without workspaceSize": (
        "aclnn", {_ACLNN: dedent("""\
            extern "C" aclnnStatus aclnnInnerDemoOpGetWorkspaceSize(const aclTensor *x,
                uint64_t *workspaceSize, aclOpExecutor **executor);
            static aclnnStatus OneShot(const aclTensor *x)
            {
                uint64_t size = 0;
                aclOpExecutor *exec = nullptr;
                return aclnnInnerDemoOpGetWorkspaceSize(x, &size, &exec);
            }
            """)}, None, "`OneShot` calls aclnnInnerDemoOpGetWorkspaceSize but has no workspaceSize"),
    "torch_adapter: returns void (mode B)": (
        "torch_adapter", {"csrc/adapter.cpp": _ADAPTER.replace("at::Tensor demo_op(", "void demo_op(")
                          .replace("    return y;\n", "")}, "A", "the adapter returns void"),
    "torch_adapter: no tensor parameter (mode B)": (
        "torch_adapter", {"csrc/adapter.cpp": _ADAPTER.replace("const at::Tensor &x", "const TensorList &x")},
        "A", "`demo_op` has no tensor parameter"),
    "torch_adapter: a launch sharing its line": (
        "torch_adapter", {"csrc/adapter.cpp": _ADAPTER.replace("x);\n    EXEC", "x); EXEC")}, None,
        "`EXEC_NPU_CMD` shares its line with other code"),
    "registration: a schema that does not parse": (
        "registration", {"csrc/adapter.cpp": _ADAPTER,
                         "csrc/registration.cpp": 'TORCH_LIBRARY(demo_lib, m)\n{\n'
                                                  '    m.def("demo_op(Tensor x) -> (Tensor");\n}\n'}, None,
        "the schema of `demo_op` does not parse"),
    "registration: a declaration returning void (mode B)": (
        "registration", {"csrc/adapter.cpp": _ADAPTER,
                         "csrc/functions.h": "void demo_op(const at::Tensor &x);\n"},
        "A", "the adapter returns void"),
    "autograd_wrappers: a return that cannot take the buffer (mode B)": (
        "autograd_wrappers", {**_WRAPPED, "csrc/registration.cpp": _WRAPPED["csrc/registration.cpp"].replace(
            "return std::make_tuple(std::get<0>(outputs), std::get<1>(outputs));", "return Swap(outputs);")},
        "A", "`demo_op_autograd` is registered for the op and returns a fixed tuple, but this return cannot"),
    "l0op: a shared l0 function another operator calls (mode B)": (
        "l0op", {}, "A",
        "`MoeNormGrad` is declared in common/inc/op_api/moe_norm_grad.h, outside the operator"),
}


def _refusing_plan(tmp_path: Path, case: str) -> Plan:
    _name, files, _mode, _says = REFUSALS[case]
    if not files:  # the fixture's own operator (read only: plan writes nothing)
        return plan_operator(_SHARED / "norm/moe_norm_grad", _SHARED)
    # an infer beside the OpDef, as an operator has it (without one mode B is refused first)
    infer = {"ops/demo_op/op_host/demo_op_infershape.cpp": EXAMPLE_INFER}
    return plan_operator(make_repo(tmp_path, {_DEF: _OPDEF, **infer, **files}))


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refusal_located_is_the_probes_and_apply_s(tmp_path: Path, case: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The layer's `locate` refuses: its `carries` raises the diagnostic its `edits` does,
    and the probe answers what apply chooses (that refusal, or mode A with it as the
    reason) while no locating layer can render."""
    name, _files, mode, says = REFUSALS[case]
    plan = _refusing_plan(tmp_path, case)
    lay = layer(name)
    refused = "B" if mode == "A" else "A"
    with pytest.raises(InputError) as by_edits:
        lay.edits(plan, refused, None)
    assert says in by_edits.value.diagnostic.message
    computed = _outcome(choose_mode, plan)
    with _nothing_rendered(monkeypatch):
        with pytest.raises(InputError) as by_carries:
            lay.carries(plan, refused)
        probed = _outcome(probe_mode, plan)
    assert by_carries.value.diagnostic == by_edits.value.diagnostic
    assert probed == computed
    if mode is None:
        assert isinstance(probed, Diagnostic) and probed.code == by_edits.value.diagnostic.code
    else:
        assert isinstance(probed, ModeChoice) and probed.mode == mode and says in probed.why.message
