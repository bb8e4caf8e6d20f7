"""Fakes, torchair converters and autograd wrappers follow the op's extra output (mode B).

Snippets: each form before / after (and strip back); fixtures: apply, G2 ✓ with the new
layers as evidence, a second apply changes nothing, strip gives every byte back; bad
input: `file:line`, exit 2, nothing written in any layer.
"""

# ruff: noqa: E501  (inline before / after snippets are verbatim code)

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
from layer_snippets import dedent, make_repo, run
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.codemods.autograd_wrappers import autograd_wrapper_edits
from optrace.codemods.graph_converters_cst import graph_converter_edits
from optrace.codemods.layer_common import python_numel_expr, sizes_header_content
from optrace.codemods.python_fakes_cst import python_fake_edits
from optrace.engine.diagnostics import InputError

REG = ("torch/reg.cpp", 'TORCH_LIBRARY(lib, m)\n{\n    m.def("demo_op(Tensor x, int k) -> (Tensor, Tensor)");\n}\n')
SINGLE_REG = ("torch/reg.cpp", 'TORCH_LIBRARY(lib, m)\n{\n    m.def("demo_op(Tensor x) -> Tensor");\n}\n')
FAKES = "torch/fakes.py"
NUMEL = "_OPTRACE_PROFILING_NUMEL = (32 + 64) * 2048  # optrace\n"


def fakes(tmp: Path, text: str, reg: tuple[str, str] = REG) -> dict[str, str]:
    return run(python_fake_edits, make_repo(tmp, {reg[0]: reg[1], FAKES: text}))


def body(after: str) -> str:
    """The file without its `# optrace-edit` lines (what a reader sees run)."""
    return "".join(ln for ln in after.splitlines(keepends=True) if "# optrace-edit" not in ln)


# --- the size: one source of truth ---------------------------------------------------------


def test_python_numel_is_the_headers_numel() -> None:
    header = sizes_header_content().decode()
    assert "#define PROF_SIZE_PER_CORE 2048" in header and "OPTRACE_MAX_AIV_CORES 64" in header
    assert python_numel_expr() == "(32 + 64) * 2048"


# --- fakes: the forms ------------------------------------------------------------------------


def test_register_fake_tuple_returns_grow(tmp_path: Path) -> None:
    before = dedent('''\
        """Fakes."""
        import torch


        @torch.library.register_fake("lib::demo_op")
        def demo_fake(x: torch.Tensor, k: int):
            if k == 0:
                return (x.new_empty(x.shape),
                        x.new_empty((0,)))  # empty
            return x.new_empty(x.shape), x.new_empty((k,))
        ''')
    after = fakes(tmp_path, before)[FAKES]
    assert body(after) == dedent('''\
        """Fakes."""
        import torch
        _OPTRACE_PROFILING_NUMEL = (32 + 64) * 2048  # optrace


        @torch.library.register_fake("lib::demo_op")
        def demo_fake(x: torch.Tensor, k: int):
            if k == 0:
                return (x.new_empty(x.shape),
                        x.new_empty((0,)), x.new_empty((_OPTRACE_PROFILING_NUMEL,), dtype=torch.int64))  # empty
            return x.new_empty(x.shape), x.new_empty((k,)), x.new_empty((_OPTRACE_PROFILING_NUMEL,), dtype=torch.int64)
        ''')
    assert after.count("# optrace-edit") == 2
    ast.parse(after)


def test_impl_abstract_list_and_single_forms(tmp_path: Path) -> None:
    before = dedent('''\
        import torch

        @torch.library.impl_abstract("lib::demo_op.default")
        def abstract(x, k):
            outs = [x.new_empty(x.shape), x.new_empty((k,))]
            if k < 0:
                return tuple(outs)
            return [outs[0], outs[1]]
        ''')
    got = body(fakes(tmp_path, before)[FAKES])
    assert "        return (*tuple(outs), x.new_empty((_OPTRACE_PROFILING_NUMEL,), dtype=torch.int64))\n" in got
    assert "    return [outs[0], outs[1], x.new_empty((_OPTRACE_PROFILING_NUMEL,), dtype=torch.int64)]\n" in got


def test_a_single_tensor_op_returns_a_pair(tmp_path: Path) -> None:
    before = dedent('''\
        import torch

        @torch.library.register_fake("lib::demo_op")
        def demo_fake(x):
            return x.new_empty(x.shape)
        ''')
    got = body(fakes(tmp_path, before, SINGLE_REG)[FAKES])
    assert "    return x.new_empty(x.shape), x.new_empty((_OPTRACE_PROFILING_NUMEL,), dtype=torch.int64)\n" in got


@pytest.mark.parametrize("registration", [
    'torch.library.register_fake("lib::demo_op", _meta)',
    'torch.library.impl_abstract("lib::demo_op", _meta)',
    'lib.impl("demo_op", _meta, "Meta")',
    'torch.library.impl(lib, "demo_op", "Meta")(_meta)',
])
def test_call_forms_find_the_function(tmp_path: Path, registration: str) -> None:
    before = dedent(f'''\
        import torch

        lib = torch.library.Library("lib", "IMPL")


        def _meta(x, k):
            def nested():
                return x  # not the fake's return
            return x.new_empty(x.shape), x.new_empty((k,))


        {registration}
        ''')
    got = body(fakes(tmp_path, before)[FAKES])
    assert "    return x.new_empty(x.shape), x.new_empty((k,)), x.new_empty((_OPTRACE_PROFILING_NUMEL,), dtype=torch.int64)\n" in got
    assert "        return x  # not the fake's return\n" in got


def test_a_call_form_registers_the_function_python_would_find(tmp_path: Path) -> None:
    """A method and a later redefinition share the fake's name: the module-level function
    defined last before the registration is the one grown, and nothing else."""
    before = dedent('''\
        import torch


        class Helper:
            def _meta(self, x):
                return x  # a method: not the fake


        def _meta(x):
            return x.new_empty(x.shape)  # replaced below


        def _meta(x):
            return x.new_empty(x.shape), x.new_empty((1,))


        torch.library.register_fake("lib::demo_op", _meta)
        ''')
    got = body(fakes(tmp_path, before)[FAKES])
    assert "        return x  # a method: not the fake\n" in got
    assert "    return x.new_empty(x.shape)  # replaced below\n" in got
    assert ("    return x.new_empty(x.shape), x.new_empty((1,)), "
            "x.new_empty((_OPTRACE_PROFILING_NUMEL,), dtype=torch.int64)\n") in got


def test_meta_decorator_and_other_ops_and_keys_left_alone(tmp_path: Path) -> None:
    before = dedent('''\
        import torch

        lib = torch.library.Library("lib", "IMPL")


        @torch.library.impl(lib, "demo_op", "Meta")
        def meta(x, k):
            return x, x


        @torch.library.impl(lib, "demo_op", "CPU")
        def cpu(x, k):
            return x, x


        @torch.library.register_fake("lib::other_op")
        def other(x, k):
            return x, x
        ''')
    got = body(fakes(tmp_path, before)[FAKES])
    assert got.count("_OPTRACE_PROFILING_NUMEL,") == 1
    assert "def meta(x, k):\n    return x, x, x.new_empty(" in got


def test_a_file_without_torch_gets_its_own_import(tmp_path: Path) -> None:
    before = dedent('''\
        from torch.library import register_fake


        @register_fake("lib::demo_op")
        def demo_fake(x, k):
            return x, x
        ''')
    got = fakes(tmp_path, before)[FAKES]
    assert "import torch as _optrace_torch  # optrace\n" + NUMEL in got
    assert "dtype=_optrace_torch.int64)" in got


def test_the_grown_fake_runs_and_returns_the_buffer(tmp_path: Path) -> None:
    """Executed against a stand-in torch: one more output, 1-D int64, the header's size."""
    before = dedent('''\
        import torch

        @torch.library.register_fake("lib::demo_op")
        def demo_fake(x, k):
            return x.new_empty((2,)), x.new_empty((k,))
        ''')
    after = fakes(tmp_path, before)[FAKES]

    class FakeTensor:
        def __init__(self, shape: tuple[int, ...], dtype: str = "float32") -> None:
            self.shape, self.dtype = shape, dtype

        def new_empty(self, shape: tuple[int, ...], dtype: str | None = None) -> FakeTensor:
            return FakeTensor(tuple(shape), dtype or self.dtype)

    class Library:
        @staticmethod
        def register_fake(name: str):  # type: ignore[no-untyped-def]
            return lambda fn: fn

    class Torch:
        library = Library
        int64 = "int64"

    import sys
    import types

    stub = types.ModuleType("torch")
    stub.library = Library  # type: ignore[attr-defined]
    stub.int64 = "int64"  # type: ignore[attr-defined]
    saved = sys.modules.get("torch")
    sys.modules["torch"] = stub
    try:
        scope: dict[str, object] = {}
        exec(compile(after, FAKES, "exec"), scope)
    finally:
        if saved is not None:
            sys.modules["torch"] = saved
        else:
            del sys.modules["torch"]
    out = scope["demo_fake"](FakeTensor((4, 8)), 3)  # type: ignore[operator]
    assert len(out) == 3
    assert out[2].shape == ((32 + 64) * 2048,) and out[2].dtype == "int64"


def test_mode_a_and_unrelated_files_change_nothing(tmp_path: Path) -> None:
    before = '@torch.library.register_fake("lib::demo_op")\ndef f(x, k):\n    return x, x\n'
    op = make_repo(tmp_path, {REG[0]: REG[1], FAKES: "import torch\n" + before})
    assert run(python_fake_edits, op, "A") == {}


@pytest.mark.parametrize(("text", "line", "message"), [
    ('import torch\ntorch.library.register_fake("lib::demo_op", make_fake())\n', 2, "not a function this file defines"),
    ('import torch\n\n@torch.library.register_fake("lib::demo_op")\ndef f(x, k):\n    if k:\n        return\n    return x, x\n', 6,
     "bare `return`"),
    ('import torch\n\n@torch.library.register_fake("lib::demo_op")\ndef f():\n    return None\n', 4, "no argument"),
])
def test_unsupported_fakes_are_refused(tmp_path: Path, text: str, line: int, message: str) -> None:
    op = make_repo(tmp_path, {REG[0]: REG[1], FAKES: text})
    with pytest.raises(InputError) as err:
        run(python_fake_edits, op)
    assert err.value.diagnostic.code == "OT313" and err.value.diagnostic.line == line
    assert message in err.value.diagnostic.message


# --- torchair converters --------------------------------------------------------------------

CONV = "torch/converters.py"
CONV_HEAD = '''\
import torch
import torchair
from torchair._ge_concrete_graph.fx2ge_converter import register_fx_node_ge_converter


@register_fx_node_ge_converter(torch.ops.lib.demo_op.default)
def convert_demo_op(x, k, meta_outputs=None):
'''


def converters(tmp: Path, text: str) -> dict[str, str]:
    return run(graph_converter_edits, make_repo(tmp, {REG[0]: REG[1], CONV: CONV_HEAD + text}))


@pytest.mark.parametrize(("before", "after"), [
    ('''\
    return torchair.ge.custom_op("DemoOp", inputs={"x": x}, attrs={"k": torchair.ge.attr.Int(k)},
                                 outputs=["y", "z"])
''', '''\
    return torchair.ge.custom_op("DemoOp", inputs={"x": x}, attrs={"k": torchair.ge.attr.Int(k)},
                                 outputs=["y", "z", "profiling_data"])
'''),
    ('''\
    out = torchair.ge.custom_op("DemoOp", inputs={"x": x}, outputs=('y', 'z'))
    return out
''', '''\
    out = torchair.ge.custom_op("DemoOp", inputs={"x": x}, outputs=('y', 'z', 'profiling_data'))
    return out
'''),
    ('''\
    y, z = torchair.ge.custom_op(
        "DemoOp",
        inputs={"x": x},
        outputs=["y", "z"],
    )
    if k == 0:
        return [y, z]
    return (y, z)
''', '''\
    y, z, profiling_data = torchair.ge.custom_op(
        "DemoOp",
        inputs={"x": x},
        outputs=["y", "z", "profiling_data"],
    )
    if k == 0:
        return [y, z, profiling_data]
    return (y, z, profiling_data)
'''),
    ('''\
    cast = torchair.ge.custom_op("Cast", inputs={"x": x}, outputs=["y"])
    y, z = torchair.ge.custom_op("DemoOp", inputs={"x": cast}, outputs=["y", "z"])
    return y, z
''', '''\
    cast = torchair.ge.custom_op("Cast", inputs={"x": x}, outputs=["y"])
    y, z, profiling_data = torchair.ge.custom_op("DemoOp", inputs={"x": cast}, outputs=["y", "z", "profiling_data"])
    return y, z, profiling_data
'''),
])
def test_converter_forms(tmp_path: Path, before: str, after: str) -> None:
    got = converters(tmp_path, before)[CONV]
    assert body(got) == CONV_HEAD + after


@pytest.mark.parametrize(("text", "line"), [
    ("    return torchair.ge.Add(x, x)\n", 7),  # no custom_op with outputs
    ('    y, z = torchair.ge.custom_op("DemoOp", inputs={"x": x}, outputs=["y", "z"])\n    return torchair.ge.Identity(y), z\n', 9),
    ('    outs = torchair.ge.custom_op("DemoOp", inputs={"x": x}, outputs=["y", "z"])\n    return outs[0], outs[1]\n', 9),
    ('    a = torchair.ge.custom_op("A", inputs={"x": x}, outputs=["y"])\n    b = torchair.ge.custom_op("B", inputs={"x": a}, outputs=["y"])\n    return b\n', 7),
])
def test_unrecognised_converters_are_refused(tmp_path: Path, text: str, line: int) -> None:
    op = make_repo(tmp_path, {REG[0]: REG[1], CONV: CONV_HEAD + text})
    with pytest.raises(InputError) as err:
        run(graph_converter_edits, op)
    assert err.value.diagnostic.code == "OT313" and err.value.diagnostic.line == line


# --- C++ wrappers registered for the op -------------------------------------------------------

ADAPTER = ("torch/demo_op.cpp",
           "std::tuple<at::Tensor, at::Tensor> demo_op_impl(const at::Tensor &x)\n{\n"
           "    EXEC_NPU_CMD(aclnnDemoOp, x, x, x);\n    return {x, x};\n}\n")
AUTOGRAD = "torch/autograd.cpp"


def wrapped(tmp: Path, wrapper: str) -> dict[str, str]:
    text = dedent(wrapper) + 'TORCH_LIBRARY_IMPL(lib, AutogradPrivateUse1, m)\n{\n    m.impl("demo_op", &demo_op_autograd);\n}\n'
    op = make_repo(tmp, {REG[0]: REG[1], ADAPTER[0]: ADAPTER[1], AUTOGRAD: text})
    return run(autograd_wrapper_edits, op)


@pytest.mark.parametrize(("before", "after"), [
    ('''\
    std::tuple<at::Tensor, at::Tensor> demo_op_autograd(const at::Tensor &x)
    {
        auto r = demo_op_impl(x);
        if (x.numel() == 0) {
            return {std::get<0>(r), std::get<1>(r)};
        }
        return std::make_tuple(std::get<0>(r), std::get<1>(r));
    }
    ''', '''\
    std::tuple<at::Tensor, at::Tensor/*optrace<*/, at::Tensor/*>optrace*/> demo_op_autograd(const at::Tensor &x)
    {
        auto r = demo_op_impl(x);
        if (x.numel() == 0) {
            return {std::get<0>(r), std::get<1>(r)/*optrace<*/, std::get<2>(r)/*>optrace*/};
        }
        return std::make_tuple(std::get<0>(r), std::get<1>(r)/*optrace<*/, std::get<2>(r)/*>optrace*/);
    }
    '''),
    ('''\
    std::tuple<at::Tensor, at::Tensor> demo_op_autograd(const at::Tensor &x)
    {
        auto [y, z] = demo_op_impl(x);
        return std::tuple<at::Tensor, at::Tensor>(y, z);
    }
    ''', '''\
    std::tuple<at::Tensor, at::Tensor/*optrace<*/, at::Tensor/*>optrace*/> demo_op_autograd(const at::Tensor &x)
    {
        auto [y, z/*optrace<*/, profilingData/*>optrace*/] = demo_op_impl(x);
        return std::tuple<at::Tensor, at::Tensor/*optrace<*/, at::Tensor/*>optrace*/>(y, z/*optrace<*/,
                                                  profilingData/*>optrace*/);
    }
    '''),
    ('''\
    std::tuple<at::Tensor, at::Tensor> demo_op_autograd(const at::Tensor &x)
    {
        std::tuple<at::Tensor, at::Tensor> r = demo_op_impl(x);
        return r;
    }
    ''', '''\
    std::tuple<at::Tensor, at::Tensor/*optrace<*/, at::Tensor/*>optrace*/> demo_op_autograd(const at::Tensor &x)
    {
        std::tuple<at::Tensor, at::Tensor/*optrace<*/, at::Tensor/*>optrace*/> r = demo_op_impl(x);
        return r;
    }
    '''),
    ('''\
    std::tuple<at::Tensor, at::Tensor> demo_op_autograd(const at::Tensor &x)
    {
        at::AutoDispatchBelowADInplaceOrView guard;
        return demo_op_impl(x);
    }
    ''', '''\
    std::tuple<at::Tensor/*optrace<*/, at::Tensor/*>optrace*/, at::Tensor> demo_op_autograd(const at::Tensor &x)
    {
        at::AutoDispatchBelowADInplaceOrView guard;
        return demo_op_impl(x);
    }
    '''),
])
def test_wrapper_forms(tmp_path: Path, before: str, after: str) -> None:
    got = wrapped(tmp_path, before)[AUTOGRAD]
    assert got.startswith(dedent(after).replace(
        "std::tuple<at::Tensor/*optrace<*/, at::Tensor/*>optrace*/, at::Tensor> demo_op_autograd",
        "std::tuple<at::Tensor, at::Tensor/*optrace<*/, at::Tensor/*>optrace*/> demo_op_autograd"))


def test_a_wrapper_without_the_launchers_result_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        wrapped(tmp_path, '''\
            std::tuple<at::Tensor, at::Tensor> demo_op_autograd(const at::Tensor &x)
            {
                auto outs = DemoOpFunction::apply(x);
                return std::make_tuple(outs[0], outs[1]);
            }
            ''')
    assert err.value.diagnostic.code == "OT313" and err.value.diagnostic.line == 1
    assert "cannot tell where it gets the launcher's profiling tensor" in err.value.diagnostic.message


def test_mode_a_leaves_wrappers(tmp_path: Path) -> None:
    text = ('std::tuple<at::Tensor, at::Tensor> demo_op_autograd(const at::Tensor &x)\n{\n'
            '    auto r = demo_op_impl(x);\n    return {std::get<0>(r), std::get<1>(r)};\n}\n'
            'TORCH_LIBRARY_IMPL(lib, Autograd, m)\n{\n    m.impl("demo_op", &demo_op_autograd);\n}\n')
    op = make_repo(tmp_path, {REG[0]: REG[1], ADAPTER[0]: ADAPTER[1], AUTOGRAD: text})
    assert run(autograd_wrapper_edits, op, "A") == {}


# --- fixtures -----------------------------------------------------------------------------------

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
UMDK_OP = "src/cam/comm_operator/ascend_kernels/moe_fused_gmm"
UMDK_FAKE = "src/cam/comm_operator/torch_binding/meta_moe_fused_gmm.py"
UMDK_CONV = "src/cam/comm_operator/torch_binding/moe_fused_gmm_converter.py"
UMDK_AUTOGRAD = "src/cam/comm_operator/pybind/moe_fused_gmm_autograd.cpp"
CASES = {
    "umdk_style": (UMDK_OP, [UMDK_FAKE, UMDK_CONV, UMDK_AUTOGRAD]),
    "direct_launch": ("csrc/ops/moe_gating_topk", ["python/fused_ops/abstract_impls.py"]),
}
runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".optrace" not in p.relative_to(root).parts}


def g2(op: Path) -> dict[str, object]:
    doc = json.loads(cli("check", str(op), "--format", "json", "--no-compile")[1])
    return next(g for g in doc["operators"][0]["gates"] if g["gate"] == "G2")


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_apply_g2_reapply_strip(tmp_path: Path, name: str) -> None:
    op_rel, files = CASES[name]
    repo = tmp_path / name
    shutil.copytree(FIXTURES / name, repo)
    before = snapshot(repo)
    assert cli("apply", str(repo / op_rel), "--write")[0] == 0
    after = snapshot(repo)
    for rel in files:
        assert after[rel] != before[rel], rel
        if rel.endswith(".py"):
            ast.parse(after[rel])
    gate = g2(repo / op_rel)
    assert gate["status"] == "pass", json.dumps(gate, indent=1)
    evidence = {e["path"] for e in gate["evidence"]}  # type: ignore[attr-defined]
    assert set(files) <= evidence
    assert cli("apply", str(repo / op_rel), "--check")[0] == 0
    assert cli("apply", str(repo / op_rel))[1] == ""
    assert cli("strip", str(repo / op_rel), "--write")[0] == 0
    assert snapshot(repo) == before


def test_a_fake_left_behind_fails_g2(tmp_path: Path) -> None:
    repo = tmp_path / "umdk_style"
    shutil.copytree(FIXTURES / "umdk_style", repo)
    original = {rel: (repo / rel).read_bytes() for rel in (UMDK_FAKE, UMDK_CONV, UMDK_AUTOGRAD)}
    assert cli("apply", str(repo / UMDK_OP), "--write")[0] == 0
    for rel, data in original.items():
        (repo / rel).write_bytes(data)  # someone reverted these layers by hand
    gate = g2(repo / UMDK_OP)
    assert gate["status"] == "fail"
    bad = {(e["path"], e["note"]) for e in gate["evidence"] if not e["ok"]}  # type: ignore[attr-defined]
    assert (UMDK_FAKE, "register_fake `moe_fused_gmm_fake` returns 2 value(s), the op returns 3") in bad
    assert any(p == UMDK_CONV and "want profiling_data last of 3" in n for p, n in bad)
    assert (UMDK_AUTOGRAD, "`moe_fused_gmm_autograd` (registered for the op) returns 2 tensor(s), the launcher "
            "returns 3") in bad


def test_mode_a_leaves_the_new_layers_alone(tmp_path: Path) -> None:
    repo = tmp_path / "umdk_style"
    shutil.copytree(FIXTURES / "umdk_style", repo)
    before = snapshot(repo)
    assert cli("apply", str(repo / UMDK_OP), "--mode", "A", "--write")[0] == 0
    after = snapshot(repo)
    assert all(after[rel] == before[rel] for rel in (UMDK_FAKE, UMDK_CONV, UMDK_AUTOGRAD))
    assert cli("apply", str(repo / UMDK_OP), "--mode", "B", "--write")[0] == 0
    assert cli("apply", str(repo / UMDK_OP), "--mode", "A", "--write")[0] == 0
    assert snapshot(repo) == after  # B then A: the new layers are back as they were


@pytest.mark.parametrize(("rel", "old", "new", "code", "line"), [
    (UMDK_FAKE, "    local_experts = moe_expert_num // ep_rank_size\n", "    local_experts = (moe_expert_num //\n",
     "OT312", 14),
    (UMDK_CONV, "    return output, expert_token_nums\n", "    return output, torchair.ge.Cast(expert_token_nums)\n",
     "OT313", 30),
])
def test_bad_fake_or_converter_is_reported_and_nothing_is_written(tmp_path: Path, rel: str, old: str, new: str,
                                                                  code: str, line: int) -> None:
    repo = tmp_path / "umdk_style"
    shutil.copytree(FIXTURES / "umdk_style", repo)
    text = (repo / rel).read_text()
    assert old in text
    (repo / rel).write_text(text.replace(old, new, 1))
    before = snapshot(repo)
    exit_code, _, err = cli("apply", str(repo / UMDK_OP), "--mode", "B", "--write")
    assert exit_code == 2
    assert f"{rel}:{line}: {code} " in err.replace(str(repo) + "/", "")
    # Mode A leaves fakes and converters alone: a converter it cannot grow is no obstacle
    # there, so the refusal says so; a file that does not parse stops both modes.
    assert err.rstrip().endswith("; use --mode A") == (code == "OT313")
    assert snapshot(repo) == before


def test_the_default_mode_is_a_where_a_layer_cannot_carry_the_output(tmp_path: Path) -> None:
    repo = tmp_path / "umdk_style"
    shutil.copytree(FIXTURES / "umdk_style", repo)
    text = (repo / UMDK_CONV).read_text()
    (repo / UMDK_CONV).write_text(text.replace("    return output, expert_token_nums\n",
                                               "    return output, torchair.ge.Cast(expert_token_nums)\n", 1))
    code, out, _ = cli("plan", str(repo / UMDK_OP), "--format", "json")
    doc = json.loads(out)["operators"][0]
    assert code == 0 and doc["mode"] == "A"
    assert doc["mode_reason"].startswith("mode B is refused here: OT313 converter")
    assert doc["mode_reason"].endswith(f"({UMDK_CONV}:30)")
    assert "  mode: A — mode B is refused here: OT313" in cli("plan", str(repo / UMDK_OP))[1]
    before = snapshot(repo)
    assert cli("apply", str(repo / UMDK_OP), "--write")[0] == 0
    entry = (repo / UMDK_OP / "op_kernel" / "moe_fused_gmm.cpp").read_text()
    assert "optrace-scaffold begin mode=A" in entry
    assert json.loads(cli("plan", str(repo / UMDK_OP), "--format", "json")[1])["operators"][0]["mode_reason"] \
        == "recorded in the instrumented tree"
    assert cli("strip", str(repo / UMDK_OP), "--write")[0] == 0
    assert snapshot(repo) == before


def test_the_default_mode_is_b_where_every_layer_carries_it(tmp_path: Path) -> None:
    repo = tmp_path / "umdk_style"
    shutil.copytree(FIXTURES / "umdk_style", repo)
    doc = json.loads(cli("plan", str(repo / UMDK_OP), "--format", "json")[1])["operators"][0]
    assert (doc["mode"], doc["mode_reason"]) == ("B", "every layer can carry it")
    assert cli("apply", str(repo / UMDK_OP), "--write")[0] == 0
    assert "optrace-scaffold begin mode=B" in (repo / UMDK_OP / "op_kernel" / "moe_fused_gmm.cpp").read_text()


# --- a Python autograd.Function calling the op ---------------------------------------------------


def test_an_autograd_function_keeps_its_arity_and_saves_the_buffer(tmp_path: Path) -> None:
    """python_callers unpacks the extra value in `forward` and saves it there, so the
    Function's outputs, its `backward` and its callers stay as they were (docs/layers.md)."""
    from optrace.codemods.python_callers_cst import python_caller_edits

    text = dedent('''\
        import torch


        class DemoOp(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                y, z = torch.ops.lib.demo_op(x, k)
                return y, z

            @staticmethod
            def backward(ctx, gy, gz):
                return gy, None
        ''')
    # A sample's Function (library code would get the unpack only: test_python_library_callers.py).
    got = body(run(python_caller_edits, make_repo(tmp_path, {REG[0]: REG[1], "examples/fn.py": text}))[
        "examples/fn.py"])
    assert "        y, z, profiling_data = torch.ops.lib.demo_op(x, k)\n" in got
    assert "        return y, z\n" in got and "    def backward(ctx, gy, gz):\n" in got
    assert "_optrace_save(profiling_data" in got


@pytest.mark.parametrize("type_text, count", [
    (b"std::tuple<at::Tensor, at::Tensor>", 2),
    (b"at::Tensor", 1),
    (b"std::tuple<at::Tensor, at::Tensor/*optrace<*/, at::Tensor/*>optrace*/>", 3),
    (b"std::tuple<at::Tensor, at::Tensor, int64_t>", None),  # the new element's place: not guessed
    (b"std::tuple<at::Tensor, double>", None),
    (b"std::tuple<int64_t, int64_t>", None),
    (b"std::vector<at::Tensor>", None),
    (b"auto", None),
])
def test_fixed_count_counts_elements_of_tensor_only_tuples(type_text: bytes, count: int | None) -> None:
    from optrace.codemods.autograd_wrappers import fixed_count

    assert fixed_count(type_text) == count
