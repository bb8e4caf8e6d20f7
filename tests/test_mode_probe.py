"""plan's mode probe (`probe_mode`, each layer's `carries`) gives apply's choice
(`choose_mode`, the layers' edits computed): the same mode, the same reason at the same
place, the same edited files, or the same refusal — on every fixture operator, and on
caller files written to hit each refusal the Python callers' codemod has. What the probe
keeps while it runs (`unchanged_files`) is gone when it returns: the next plan sees a
file changed in between."""

from __future__ import annotations

from pathlib import Path

import pytest
from source_fuzz import FIXTURES, fixture_operators

from optrace.codemods import op_host_registry
from optrace.codemods.layer import EXAMPLE_OPERATOR, EXAMPLE_TORCH
from optrace.codemods.layer_common import clean_bytes
from optrace.codemods.registry import layer
from optrace.engine.cache import once, unchanged_files
from optrace.engine.diagnostics import Diagnostic, InputError
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


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_probe_equals_the_edit_computing_choice(name: str) -> None:
    top, op = OPERATORS[name]
    try:
        plan = plan_operator(op, top)
    except InputError:
        pytest.skip("the fixture is refused before any mode is chosen")
    _same(plan)


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
