from __future__ import annotations

from pathlib import Path

import pytest

from optrace.codemods.registry import LAYERS
from optrace.engine.config import Config
from optrace.engine.diagnostics import InputError
from optrace.engine.discovery import (
    camel_case,
    default_repo_root,
    discover,
    find_entries,
    find_operator_dirs,
    may_be_one_operator,
)

ROOT = Path(__file__).resolve().parent.parent / "fixtures"


def test_entries_templated_extern_c_and_declarations(tmp_path: Path) -> None:
    f = tmp_path / "k.cpp"
    f.write_text(
        '// extern "C" __global__ __aicore__ void commented(GM_ADDR x) {}\n'
        'extern "C" __global__ __aicore__ void declared_only(GM_ADDR x);\n'
        "#include \"k.h\"\n"
        "template <bool A, int B>\n"
        "__global__ __aicore__ void templated_entry(GM_ADDR x,\n    GM_ADDR y)\n{\n}\n"
        'extern "C" __global__ __aicore__ void plain_entry(GM_ADDR x) { Run(); }\n'
    )
    got = [(e.name, e.line, e.extern_c, e.templated) for e in find_entries([f])]
    assert got == [("templated_entry", 5, False, True), ("plain_entry", 9, True, False)]


def test_camel_and_repo_root() -> None:
    assert camel_case("fused_deep_moe") == "FusedDeepMoe"
    op = ROOT / "umdk_style/src/cam/comm_operator/ascend_kernels/moe_fused_gmm"
    assert default_repo_root(op) == ROOT / "umdk_style"


def test_umdk_layers_found_outside_op_dir() -> None:
    op = ROOT / "umdk_style/src/cam/comm_operator/ascend_kernels/moe_fused_gmm"
    layers = discover(op, ROOT / "umdk_style", Config(), LAYERS)
    assert layers.missing() == []
    rel = {k: [h.path.relative_to(ROOT / "umdk_style").as_posix() for h in v]
           for k, v in layers.found.items()}
    assert rel["torch_adapter"] == ["src/cam/comm_operator/pybind/moe_fused_gmm.cpp"]
    assert rel["build_script"][0] == "build/cam/comm_operator/compile_ascend_proj.sh"
    assert sorted(rel["python_callers"]) == [
        "src/cam/examples/moe_fused_gmm_sample.py", "test/cam/ut/moe_fused_gmm/test_moe_fused_gmm.py"]
    # The other operator of the same repository does not leak into this one.
    assert not any("moe_gate_bias" in p for paths in rel.values() for p in paths)


def test_direct_launch_launcher_inside_op_dir_and_no_opdef() -> None:
    op = ROOT / "direct_launch/csrc/ops/moe_gating_topk"
    layers = discover(op, ROOT / "direct_launch", Config(), LAYERS)
    assert "op_def" in layers.missing() and "torch_adapter" not in layers.missing()
    assert layers.found["registration"][0].path.name == "torch_binding.cpp"


def test_msopgen_has_no_torch_layer() -> None:
    op = ROOT / "msopgen_style/moe_token_permute"
    layers = discover(op, ROOT / "msopgen_style", Config(), LAYERS)
    assert {"torch_adapter", "registration", "python_callers"} <= set(layers.missing())
    assert layers.found["tiling"][0].path.parent.name == "op_tiling"


def test_config_layer_override(tmp_path: Path) -> None:
    op = ROOT / "msopgen_style/moe_token_permute"
    script = tmp_path / "build_ops.sh"
    script.write_text("#!/bin/sh\n")
    layers = discover(op, ROOT / "msopgen_style", Config(layers={"build_script": (script,)}), LAYERS)
    assert [h.path for h in layers.found["build_script"]] == [script]


# --- which directories are operators ------------------------------------------------------------

ENTRY = 'extern "C" __global__ __aicore__ void {name}(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling)\n{{\n}}\n'


def _operator_forest(root: Path) -> None:
    """Every layout find_operator_dirs knows, plus what must not count as an operator."""
    for rel, name in [("norm/rms_norm/op_kernel/rms_norm.cpp", "rms_norm"),
                      ("norm/rms_norm/op_kernel/arch35/rms_norm_v35.cpp", "rms_norm_v35"),
                      ("ascend_kernels/moe_a/op_kernel/moe_a.cpp", "moe_a"),
                      ("csrc/ops/gather_x/kernel/gather_x.cpp", "gather_x"),
                      ("norm/rms_norm/tests/ut/op_kernel/stub_kernel.cpp", "stub_kernel")]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(ENTRY.format(name=name))
    # a shared library of kernel headers with no entry, and an entry that is only declared
    (root / "norm/norm_common/op_kernel").mkdir(parents=True)
    (root / "norm/norm_common/op_kernel/reduce.h").write_text("inline int Reduce() { return 0; }\n")
    (root / "norm/decl_only/op_kernel").mkdir(parents=True)
    (root / "norm/decl_only/op_kernel/decl_only.cpp").write_text(
        'extern "C" __global__ __aicore__ void decl_only(GM_ADDR x);\n')


def test_operator_dirs_are_found_by_layout_and_entry(tmp_path: Path) -> None:
    _operator_forest(tmp_path)
    found = [p.relative_to(tmp_path.resolve()).as_posix() for p in find_operator_dirs(tmp_path)]
    # arch variants under op_kernel/ are one operator; a test tree with its own entry counts
    # (the corpus run leaves tests/ out), a header library or a declaration does not
    assert found == ["ascend_kernels/moe_a", "csrc/ops/gather_x", "norm/rms_norm", "norm/rms_norm/tests/ut"]
    assert find_operator_dirs(tmp_path / "norm/rms_norm")[0] == (tmp_path / "norm/rms_norm").resolve()


def test_a_parent_of_operators_is_refused_with_their_list(tmp_path: Path) -> None:
    _operator_forest(tmp_path)
    for parent, listed in [("norm", "rms_norm, rms_norm/tests/ut"), ("csrc", "ops/gather_x"),
                           ("ascend_kernels", "moe_a")]:
        with pytest.raises(InputError) as err:
            discover(tmp_path / parent, tmp_path, Config(), LAYERS)
        d = err.value.diagnostic
        assert d.code == "OT015" and d.path == tmp_path / parent
        noun = "directory" if "," not in listed else "directories"
        assert f"operator {noun} below it ({listed}); give one" in d.message
    # the operator itself, holding a nested test tree, is planned
    assert discover(tmp_path / "norm/rms_norm", tmp_path, Config(), LAYERS).entry is not None


def test_the_caches_pre_check_takes_an_operator_with_a_test_tree_and_not_a_parent(tmp_path: Path) -> None:
    """What a cache lookup asks before it indexes the repository follows the command's
    own refusal: an operator holding a unit test's kernel below it is one (the command
    plans it), a folder of operators is not."""
    _operator_forest(tmp_path)
    assert may_be_one_operator(tmp_path / "norm/rms_norm")  # its entry, and tests/ut's below
    assert may_be_one_operator(tmp_path / "ascend_kernels/moe_a")
    assert may_be_one_operator(tmp_path / "norm/rms_norm/tests/ut")
    for parent in ("norm", "ascend_kernels", "csrc", "."):
        assert not may_be_one_operator(tmp_path / parent), parent
    assert not may_be_one_operator(tmp_path / "norm/norm_common")  # headers, no kernel source
    # a kernel source without an entry of its own, over another operator's: a parent,
    # whatever its text says of `__global__` outside a definition
    (tmp_path / "norm/op_kernel").mkdir()
    for helper in ("inline int Helper() { return 1; }\n",
                   "// no __global__ entry in this file\ninline int Helper() { return 1; }\n",
                   'static const char *kQualifier = "__global__";\n'):
        (tmp_path / "norm/op_kernel/helpers.cpp").write_text(helper)
        assert not may_be_one_operator(tmp_path / "norm"), helper
    # an operator vendoring a CUDA kernel (`__global__`, no `__aicore__`) under csrc/ops/
    vendored = tmp_path / "vendoring/op_kernel"
    vendored.mkdir(parents=True)
    (vendored / "vendoring.cpp").write_text(ENTRY.format(name="vendoring"))
    cuda = tmp_path / "vendoring/third_party/csrc/ops/scale/scale.cu.cpp"
    cuda.parent.mkdir(parents=True)
    cuda.write_text("__global__ void scale(float *x) { x[0] *= 2.0f; }\n")
    assert may_be_one_operator(tmp_path / "vendoring")
    assert find_operator_dirs(tmp_path / "vendoring") == [(tmp_path / "vendoring").resolve()]


def test_the_cli_refuses_a_parent_and_writes_nothing(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from optrace.cli.app import app

    _operator_forest(tmp_path)
    before = sorted(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    for cmd in (["plan"], ["apply", "--write"], ["check"]):
        res = CliRunner().invoke(app, [cmd[0], str(tmp_path / "norm"), *cmd[1:]])
        assert res.exit_code == 2, (cmd, res.output)
        assert f"{tmp_path / 'norm'}: OT015 not one operator directory" in res.stderr
    assert sorted(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()) == before


def test_op_host_layers_are_host_sources_not_launch_code_or_unit_tests(tmp_path: Path) -> None:
    op = tmp_path / "conv/demo"
    files = {
        "op_kernel/demo.cpp":
            'extern "C" __global__ __aicore__ void demo(GM_ADDR x, GM_ADDR w, GM_ADDR t) {}\n',
        "op_host/demo_def.cpp": 'class Demo : public OpDef {\n  Demo(const char *n) : OpDef(n) {\n'
                                '    this->Output("y");\n  }\n};\n',
        "op_host/demo_infershape.cpp": "IMPL_OP_INFERSHAPE(Demo).InferShape(InferShapeDemo);\n",
        "op_host/op_tiling/demo_tiling.cpp": "IMPL_OP_OPTILING(Demo).Tiling(DemoTiling);\n",
        # the l0 launch code and a unit test name the same things; neither is the layer
        "op_host/op_api/demo.cpp": "void Launch() { InferShape(ctx); DemoTiling(ctx); }\n",
        "op_host/op_api/demo_tiling_util.cpp": "int TilingKeyOf() { return 0; }\n",
        "tests/ut/op_host/test_demo_tiling.cpp": "TEST(DemoTiling, Base) { InferShape(ctx); }\n",
        "op_host/test_demo_infershape.cpp": "TEST(Demo, Infer) { InferShapeDemo(ctx); }\n",
    }
    for rel, text in files.items():
        (op / rel).parent.mkdir(parents=True, exist_ok=True)
        (op / rel).write_text(text)
    layers = discover(op, tmp_path, Config(), LAYERS)
    found = {key: sorted(f.path.relative_to(op).as_posix() for f in hits)
             for key, hits in layers.found.items()}
    assert found["infer"] == ["op_host/demo_infershape.cpp"]
    assert found["tiling"] == ["op_host/op_tiling/demo_tiling.cpp"]
    assert found["op_def"] == ["op_host/demo_def.cpp"]


def test_a_registration_is_one_naming_the_op_in_a_string_not_in_a_message(tmp_path: Path) -> None:
    """A torch extension registering its own op (`hadamard_quant`) that says "Hadamard +
    quantize" in a static_assert is not `quantize`'s registration; one whose schema or
    impl names it is, in any of torch's forms."""
    op = tmp_path / "quant/quantize"
    (op / "op_kernel").mkdir(parents=True)
    (op / "op_kernel/quantize.cpp").write_text(
        'extern "C" __global__ __aicore__ void quantize(GM_ADDR x, GM_ADDR y, GM_ADDR t) {}\n')
    other = tmp_path / "matmul/hadamard_quant/hadamard_quant.cpp"
    other.parent.mkdir(parents=True)
    other.write_text('static_assert(N <= 4, "Fused Hadamard+quantize UB layout exceeds usable UB.");\n'
                     "TORCH_LIBRARY_FRAGMENT(ext, m) {\n"
                     '    m.def("hadamard_quant(Tensor x) -> Tensor");\n}\n')
    schema = tmp_path / "csrc/torch_binding.cpp"
    schema.parent.mkdir(parents=True)
    schema.write_text('TORCH_LIBRARY_FRAGMENT(_C, ops) {\n    ops.def("quantize(Tensor x) -> Tensor");\n}\n')
    pybind = tmp_path / "csrc/pybind.cpp"
    pybind.write_text('PYBIND11_MODULE(ext, m) {\n    m.def("quantize", &Quantize);\n}\n')
    (tmp_path / "optrace.toml").write_text("")
    layers = discover(op, tmp_path, Config(), LAYERS)
    found = sorted(f.path.relative_to(tmp_path).as_posix() for f in layers.found.get("registration", []))
    assert found == ["csrc/pybind.cpp", "csrc/torch_binding.cpp"]


def _big_kernel_operator(root: Path, padding_bytes: int) -> Path:
    """An operator whose one kernel file carries a generated table after its entry:
    ``padding_bytes`` of comment rows (an amalgamated or generated kernel source)."""
    op = root / "moe" / "big_table_op"
    (op / "op_kernel").mkdir(parents=True)
    row = b"// row 0x%08x: 0x%08x 0x%08x\n"
    rows = b"".join(row % (i, i * 3, i * 7) for i in range(padding_bytes // 34 + 1))
    (op / "op_kernel" / "big_table_op.cpp").write_bytes(
        b'#include "kernel_operator.h"\n'
        b'extern "C" __global__ __aicore__ void big_table_op(GM_ADDR x, GM_ADDR y)\n'
        b"{\n    AscendC::PipeBarrier<PIPE_ALL>();\n}\n" + rows)
    return op


def test_a_kernel_file_past_the_searchs_bound_still_holds_the_entry(tmp_path: Path) -> None:
    """The repository search reads files of at most 2 MiB; the operator's own kernel
    files are read within the source bound (64 MiB unless the user lowers it): a 3 MiB
    kernel file's entry was "no kernel entry" (OT010)."""
    op = _big_kernel_operator(tmp_path, 3 * 1024 * 1024)
    assert (op / "op_kernel" / "big_table_op.cpp").stat().st_size > 3 * 1024 * 1024
    layers = discover(op, tmp_path, Config(), LAYERS)
    assert layers.entry is not None and layers.entry.name == "big_table_op" and layers.entry.line == 2
    # and the listing of a repository's operators (several in one run, the corpus) says so too
    assert find_operator_dirs(tmp_path) == [op.resolve()]


def test_a_kernel_file_past_the_source_bound_is_named_not_called_no_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    op = _big_kernel_operator(tmp_path / "repo", 300_000)
    config_home = tmp_path / "config"
    (config_home / "optrace").mkdir(parents=True)
    (config_home / "optrace" / "config.toml").write_text("[limits]\nsource_bytes = 100000\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    with pytest.raises(InputError) as err:
        discover(op, tmp_path / "repo", Config(), LAYERS)
    d = err.value.diagnostic
    size = (op / "op_kernel" / "big_table_op.cpp").stat().st_size
    assert d.code == "OT010" and d.path == op / "op_kernel" / "big_table_op.cpp"
    assert f"this kernel file was not read: {size} bytes, past the 100000-byte bound" in d.message
    assert "`[limits] source_bytes`" in d.message


def test_a_macro_entry_in_a_kernel_file_past_the_searchs_bound_is_named(tmp_path: Path) -> None:
    op = tmp_path / "moe" / "mac_op"
    (op / "op_kernel").mkdir(parents=True)
    rows = b"".join(b"// row 0x%08x\n" % i for i in range(3 * 1024 * 1024 // 16))
    (op / "op_kernel" / "mac_op.cpp").write_bytes(
        b'#include "kernel_operator.h"\n'
        b'#define DEFINE_ENTRY(name) extern "C" __global__ __aicore__ void name(GM_ADDR x) '
        b"{ AscendC::PipeBarrier<PIPE_ALL>(); }\n"
        b"DEFINE_ENTRY(mac_op)\n" + rows)
    with pytest.raises(InputError) as err:
        discover(op, tmp_path, Config(), LAYERS)
    assert "defined by the macro `DEFINE_ENTRY`" in err.value.diagnostic.message
    assert err.value.diagnostic.line == 3


def test_a_namesake_operator_with_a_kernel_past_the_searchs_bound_keeps_its_tests(tmp_path: Path) -> None:
    """Two operators `foo_op` (a current and an experimental one): the other's test is
    its own caller whatever the size of its kernel file (past 2 MiB it was taken for
    this operator's)."""
    (tmp_path / ".git").mkdir()
    for sub, pad in (("a", 0), ("b", 3 * 1024 * 1024)):
        op = _big_kernel_operator(tmp_path / sub, pad)
        (op / "tests").mkdir()
        (op / "tests" / f"test_big_table_op_{sub}.py").write_text(
            "import torch\nimport torch_npu\n\n\ndef test_it():\n"
            "    assert torch_npu.big_table_op(torch.ones(4)) is not None\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_big_table_op.py").write_text(
        "import torch\nimport torch_npu\n\n\ndef test_it():\n"
        "    assert torch_npu.big_table_op(torch.ones(4)) is not None\n")
    layers = discover(tmp_path / "a" / "moe" / "big_table_op", tmp_path, Config(), LAYERS)
    callers = [f.path.name for f in layers.found.get("python_callers", [])]
    assert callers == ["test_big_table_op.py"], callers
