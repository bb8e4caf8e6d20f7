"""aclnn codemod: one more `const aclTensor *` output right before workspaceSize."""

# ruff: noqa: E501  (inline before / after snippets are verbatim code)

from __future__ import annotations

from pathlib import Path

import pytest
from layer_snippets import make_repo, run

from optrace.codemods.aclnn import aclnn_edits, wrapper_names
from optrace.engine.diagnostics import InputError
from optrace.pipeline.plan import plan_operator

CPP = "ops/demo_op/op_api/aclnn_demo_op.cpp"
HEADER = "ops/demo_op/op_api/aclnn_demo_op.h"

BEFORE = """\
aclnnStatus aclnnInnerDemoOpGetWorkspaceSize(const aclTensor *x, int64_t k, const aclTensor *y,
    uint64_t *workspaceSize, aclOpExecutor **executor);

aclnnStatus aclnnDemoOpGetWorkspaceSize(
    const aclTensor *x,
    int64_t k,
    const aclTensor *y,
    uint64_t *workspaceSize,
    aclOpExecutor **executor)
{
    return aclnnInnerDemoOpGetWorkspaceSize(x, k, y, workspaceSize, executor);
}
"""

AFTER = """\
aclnnStatus aclnnInnerDemoOpGetWorkspaceSize(const aclTensor *x, int64_t k, const aclTensor *y,
    const aclTensor *profilingData,  // optrace
    uint64_t *workspaceSize, aclOpExecutor **executor);

aclnnStatus aclnnDemoOpGetWorkspaceSize(
    const aclTensor *x,
    int64_t k,
    const aclTensor *y,
    const aclTensor *profilingData,  // optrace
    uint64_t *workspaceSize,
    aclOpExecutor **executor)
{
    return aclnnInnerDemoOpGetWorkspaceSize(x, k, y, /*optrace<*/profilingData, /*>optrace*/workspaceSize, executor);
}
"""


def test_declarations_definitions_and_the_inner_call(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {CPP: BEFORE})
    assert run(aclnn_edits, op) == {CPP: AFTER}


def test_the_same_in_mode_a(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {CPP: BEFORE})
    assert run(aclnn_edits, op, "A") == {CPP: AFTER}


def test_a_parameter_inside_a_line_is_a_fragment(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {HEADER: "aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor *x, "
                                      "uint64_t *workspaceSize, aclOpExecutor **executor);\n"})
    # One line past 120 columns with it: the parameter on a line of its own, inside the
    # fragment, under the first parameter.
    pad = " " * len("aclnnStatus aclnnDemoOpGetWorkspaceSize(")
    assert run(aclnn_edits, op)[HEADER] == (
        "aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor *x, /*optrace<*/\n"
        f"{pad}const aclTensor *profilingData,\n"
        f"{pad}/*>optrace*/uint64_t *workspaceSize, aclOpExecutor **executor);\n")


@pytest.mark.parametrize("rel", ["ops/pregen/build_out/autogen/aclnn_demo_op.h",
                                 "ops/demo_op/pregen/build_out/autogen/aclnn_demo_op.h"])
def test_pregen_autogen_wrappers_beside_or_inside_the_op(tmp_path: Path, rel: str) -> None:
    op = make_repo(tmp_path, {rel: "aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor* x, "
                                    "uint64_t* workspaceSize, aclOpExecutor** executor);\n"})
    pad = " " * len("aclnnStatus aclnnDemoOpGetWorkspaceSize(")
    assert run(aclnn_edits, op)[rel] == (
        "aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor* x, /*optrace<*/\n"
        f"{pad}const aclTensor* profilingData,\n"
        f"{pad}/*>optrace*/uint64_t* workspaceSize, aclOpExecutor** executor);\n")


def test_a_wrapper_that_already_has_the_output_is_left_alone(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {HEADER: "aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor *x, "
                                      "const aclTensor *profilingData, uint64_t *workspaceSize, "
                                      "aclOpExecutor **executor);\n"})
    assert run(aclnn_edits, op) == {}


# --- a hand-written wrapper named apart from the op, over an `extern "C"` inner declaration ----

WRAPPER = "ops/demo_op/op_host/op_api/aclnn_demo.cpp"
WRAPPER_H = "ops/demo_op/op_host/op_api/aclnn_demo.h"

WRAPPER_BEFORE = """\
#include "aclnn_demo.h"
#ifdef __cplusplus
extern "C" {
#endif
extern "C" aclnnStatus aclnnInnerDemoOPGetWorkspaceSize(const aclTensor *x, const aclTensor *y,
                                                        uint64_t *workspaceSize, aclOpExecutor **executor);

static aclnnStatus Forward(const aclTensor *x, const aclTensor *y, uint64_t *workspaceSize,
                           aclOpExecutor **executor)
{
    return aclnnInnerDemoOPGetWorkspaceSize(x, y, workspaceSize, executor);
}

aclnnStatus aclnnDemoGetWorkspaceSize(const aclTensor *x, const aclTensor *y, uint64_t *workspaceSize,
                                      aclOpExecutor **executor)
{
    if (x == nullptr) {
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    auto ret = Forward(x, y, workspaceSize, executor);
    return ret;
}
#ifdef __cplusplus
}
#endif
"""

WRAPPER_AFTER = """\
#include "aclnn_demo.h"
#ifdef __cplusplus
extern "C" {
#endif
extern "C" aclnnStatus aclnnInnerDemoOPGetWorkspaceSize(const aclTensor *x, const aclTensor *y,
                                                        const aclTensor *profilingData,  // optrace
                                                        uint64_t *workspaceSize, aclOpExecutor **executor);

static aclnnStatus Forward(const aclTensor *x, const aclTensor *y, /*optrace<*/
                           const aclTensor *profilingData,
                           /*>optrace*/uint64_t *workspaceSize,
                           aclOpExecutor **executor)
{
    return aclnnInnerDemoOPGetWorkspaceSize(x, y, /*optrace<*/profilingData, /*>optrace*/workspaceSize, executor);
}

aclnnStatus aclnnDemoGetWorkspaceSize(const aclTensor *x, const aclTensor *y, /*optrace<*/
                                      const aclTensor *profilingData,
                                      /*>optrace*/uint64_t *workspaceSize,
                                      aclOpExecutor **executor)
{
    if (x == nullptr) {
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    auto ret = Forward(x, y, /*optrace<*/profilingData, /*>optrace*/workspaceSize, executor);
    return ret;
}
#ifdef __cplusplus
}
#endif
"""

WRAPPER_H_BEFORE = """\
#pragma once
ACLNN_API aclnnStatus aclnnDemoGetWorkspaceSize(const aclTensor *x, const aclTensor *y,
                                                uint64_t *workspaceSize, aclOpExecutor **executor);
"""


def test_a_wrapper_over_an_extern_c_inner_gets_it_in_declaration_definition_and_every_call(
        tmp_path: Path) -> None:
    # The inner is spelled with an acronym (`DemoOP` for demo_op); the wrapper has its own
    # name and forwards through a helper: all of them take profilingData before workspaceSize.
    op = make_repo(tmp_path, {WRAPPER: WRAPPER_BEFORE, WRAPPER_H: WRAPPER_H_BEFORE})
    assert wrapper_names(plan_operator(op).analysis.layers) == (
        "Forward", "aclnnDemoGetWorkspaceSize", "aclnnInnerDemoOPGetWorkspaceSize")
    assert run(aclnn_edits, op) == {
        WRAPPER: WRAPPER_AFTER,
        WRAPPER_H: WRAPPER_H_BEFORE.replace(
            "                                                uint64_t *workspaceSize",
            "                                                const aclTensor *profilingData,  // optrace\n"
            "                                                uint64_t *workspaceSize"),
    }


def test_a_caller_without_a_workspace_parameter_is_refused(tmp_path: Path) -> None:
    text = WRAPPER_BEFORE.replace(
        "auto ret = Forward(x, y, workspaceSize, executor);",
        "uint64_t size = 0;\n    auto ret = OneShot(x, y);").replace(
        "static aclnnStatus Forward(const aclTensor *x, const aclTensor *y, uint64_t *workspaceSize,\n"
        "                           aclOpExecutor **executor)\n{\n"
        "    return aclnnInnerDemoOPGetWorkspaceSize(x, y, workspaceSize, executor);",
        "static aclnnStatus OneShot(const aclTensor *x, const aclTensor *y)\n{\n    uint64_t size = 0;\n"
        "    aclOpExecutor *exec = nullptr;\n"
        "    return aclnnInnerDemoOPGetWorkspaceSize(x, y, &size, &exec);")
    op = make_repo(tmp_path, {WRAPPER: text})
    with pytest.raises(InputError) as caught:
        run(aclnn_edits, op)
    assert caught.value.diagnostic.code == "OT313" and "`OneShot` calls aclnnInnerDemoOPGetWorkspaceSize" in \
        caught.value.diagnostic.message
