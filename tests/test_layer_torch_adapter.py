"""Torch adapter codemod: a named profiling tensor through EXEC_NPU_CMD / EXEC_KERNEL_CMD."""

# ruff: noqa: E501  (inline before / after snippets are verbatim code)

from __future__ import annotations

from pathlib import Path

from layer_snippets import make_repo, run

from optrace.codemods.torch_adapter import torch_adapter_edits

ADAPTER = "torch/demo_op.cpp"

BEFORE = """\
#include "pytorch_npu_helper.hpp"

std::tuple<at::Tensor, at::Tensor> demo_op_impl(const c10::optional<at::Tensor> &bias, const at::Tensor &x, int64_t k)
{
    at::Tensor y = at::empty_like(x);
    at::Tensor n = at::empty({k}, x.options());
    EXEC_NPU_CMD(aclnnDemoOp, bias, x, k,
                 y, n);
    return {y, n};
}
"""

AFTER_B = """\
#include "pytorch_npu_helper.hpp"
#include "../ops/demo_op/optrace_demo_op_profiling.h"  // optrace

std::tuple<at::Tensor, at::Tensor/*optrace<*/,
        at::Tensor/*>optrace*/> demo_op_impl(const c10::optional<at::Tensor> &bias, const at::Tensor &x, int64_t k)
{
    at::Tensor y = at::empty_like(x);
    at::Tensor n = at::empty({k}, x.options());
    at::Tensor profilingData = at::zeros({OPTRACE_PROFILING_NUMEL}, x.options().dtype(at::kLong));  // optrace
    EXEC_NPU_CMD(aclnnDemoOp, bias, x, k,
                 y, n/*optrace<*/, profilingData/*>optrace*/);
    return {y, n/*optrace<*/, profilingData/*>optrace*/};
}
"""

AFTER_A = """\
#include "pytorch_npu_helper.hpp"

std::tuple<at::Tensor, at::Tensor> demo_op_impl(const c10::optional<at::Tensor> &bias, const at::Tensor &x, int64_t k)
{
    at::Tensor y = at::empty_like(x);
    at::Tensor n = at::empty({k}, x.options());
    c10::optional<at::Tensor> profilingData = c10::nullopt;  // mode A: optional, left out  // optrace
    EXEC_NPU_CMD(aclnnDemoOp, bias, x, k,
                 y, n/*optrace<*/, profilingData/*>optrace*/);
    return {y, n};
}
"""


def test_mode_b_allocates_passes_and_returns_it_last(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {ADAPTER: BEFORE})
    assert run(torch_adapter_edits, op, "B") == {ADAPTER: AFTER_B}


def test_mode_a_passes_an_empty_named_optional(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {ADAPTER: BEFORE})
    assert run(torch_adapter_edits, op, "A") == {ADAPTER: AFTER_A}


def test_a_lone_tensor_becomes_a_pair_and_make_tuple_grows(tmp_path: Path) -> None:
    text = ("at::Tensor demo_op_impl(const at::Tensor &x)\n{\n    at::Tensor y = x;\n"
            "    EXEC_NPU_CMD(aclnnDemoOp, x, y);\n    if (x.dim() == 0) {\n        return y;\n    }\n"
            "    return y;\n}\n"
            "std::tuple<at::Tensor> other(const at::Tensor &x)\n{\n    return std::make_tuple(x);\n}\n")
    op = make_repo(tmp_path, {ADAPTER: text})
    after = run(torch_adapter_edits, op, "B")[ADAPTER]
    assert after.count("return /*optrace<*/{/*>optrace*/y/*optrace<*/, profilingData}/*>optrace*/;") == 2
    assert after.startswith('#include "../ops/demo_op/optrace_demo_op_profiling.h"  // optrace\n'
                            "/*optrace<*/std::tuple</*>optrace*/at::Tensor/*optrace<*/, at::Tensor>/*>optrace*/ demo_op_impl")
    assert "return std::make_tuple(x);" in after  # not the op's adapter


def test_a_vector_return_grows_by_one_element_and_lambdas_are_skipped(tmp_path: Path) -> None:
    text = ("std::vector<at::Tensor> demo_op_impl(const at::Tensor &x)\n{\n    std::vector<at::Tensor> outs = {x};\n"
            "    auto f = [&]() -> int { return 0; };\n    EXEC_NPU_CMD(aclnnDemoOp, x, outs[0]);\n"
            "    return outs;\n}\n")
    op = make_repo(tmp_path, {ADAPTER: text})
    after = run(torch_adapter_edits, op, "B")[ADAPTER]
    assert "    outs.push_back(profilingData);  // optrace\n    return outs;\n" in after
    assert "{ return 0; }" in after


def test_direct_launch_passes_the_buffer_at_the_kernels_position(tmp_path: Path) -> None:
    text = ("std::tuple<at::Tensor, at::Tensor> demo_op(const at::Tensor &x)\n{\n"
            "    at::Tensor y = at::empty_like(x);\n"
            "    EXEC_KERNEL_CMD(demo_op, 8, x, y, workspace, tiling);\n    return std::make_tuple(x, y);\n}\n")
    op = make_repo(tmp_path, {"ops/demo_op/op_host/demo_op.cpp": text})
    after = run(torch_adapter_edits, op, "B")["ops/demo_op/op_host/demo_op.cpp"]
    assert "EXEC_KERNEL_CMD(demo_op, 8, x, y, /*optrace<*/profilingData, /*>optrace*/workspace, tiling);" in after
    assert "return std::make_tuple(x, y/*optrace<*/, profilingData/*>optrace*/);" in after
    assert '#include "optrace_demo_op_profiling.h"  // optrace' in after
    after_a = run(torch_adapter_edits, op, "A")["ops/demo_op/op_host/demo_op.cpp"]
    assert "void *profilingData = nullptr;" in after_a and "make_tuple(x, y);" in after_a


def test_meta_kernels_return_the_extra_output_too(tmp_path: Path) -> None:
    text = BEFORE + ("std::tuple<at::Tensor, at::Tensor> demo_op_meta(const at::Tensor &x, int64_t k)\n{\n"
                     "    return {at::empty_like(x), at::empty({k}, x.options())};\n}\n"
                     "TORCH_LIBRARY_IMPL(ns, Meta, m)\n{\n    m.impl(\"demo_op\", &demo_op_meta);\n}\n")
    op = make_repo(tmp_path, {ADAPTER: text})
    after = run(torch_adapter_edits, op, "B")[ADAPTER]
    assert ("    at::Tensor profilingData = at::empty({OPTRACE_PROFILING_NUMEL},  // optrace\n"
            "        x.options().dtype(at::kLong).device(at::kMeta));  // optrace\n"
            "    return {at::empty_like(x), at::empty({k}, x.options())/*optrace<*/, profilingData/*>optrace*/};") in after
