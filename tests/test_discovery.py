from __future__ import annotations

from pathlib import Path

from optrace.engine.config import Config
from optrace.engine.discovery import camel_case, default_repo_root, discover, find_entries

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
    layers = discover(op, ROOT / "umdk_style", Config())
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
    layers = discover(op, ROOT / "direct_launch", Config())
    assert "op_def" in layers.missing() and "torch_adapter" not in layers.missing()
    assert layers.found["registration"][0].path.name == "torch_binding.cpp"


def test_msopgen_has_no_torch_layer() -> None:
    op = ROOT / "msopgen_style/moe_token_permute"
    layers = discover(op, ROOT / "msopgen_style", Config())
    assert {"torch_adapter", "registration", "python_callers"} <= set(layers.missing())
    assert layers.found["tiling"][0].path.parent.name == "op_tiling"


def test_config_layer_override(tmp_path: Path) -> None:
    op = ROOT / "msopgen_style/moe_token_permute"
    script = tmp_path / "build_ops.sh"
    script.write_text("#!/bin/sh\n")
    layers = discover(op, ROOT / "msopgen_style", Config(layers={"build_script": (script,)}))
    assert [h.path for h in layers.found["build_script"]] == [script]
