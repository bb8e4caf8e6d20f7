"""aclnn codemod: one more `const aclTensor *` output right before workspaceSize."""

# ruff: noqa: E501  (inline before / after snippets are verbatim code)

from __future__ import annotations

from pathlib import Path

import pytest
from layer_snippets import make_repo, run

from optrace.codemods.aclnn import aclnn_edits

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
    assert run(aclnn_edits, op)[HEADER] == (
        "aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor *x, /*optrace<*/const aclTensor "
        "*profilingData, /*>optrace*/uint64_t *workspaceSize, aclOpExecutor **executor);\n")


@pytest.mark.parametrize("rel", ["ops/pregen/build_out/autogen/aclnn_demo_op.h",
                                 "ops/demo_op/pregen/build_out/autogen/aclnn_demo_op.h"])
def test_pregen_autogen_wrappers_beside_or_inside_the_op(tmp_path: Path, rel: str) -> None:
    op = make_repo(tmp_path, {rel: "aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor* x, "
                                    "uint64_t* workspaceSize, aclOpExecutor** executor);\n"})
    assert run(aclnn_edits, op)[rel] == (
        "aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor* x, /*optrace<*/const aclTensor* "
        "profilingData, /*>optrace*/uint64_t* workspaceSize, aclOpExecutor** executor);\n")


def test_a_wrapper_that_already_has_the_output_is_left_alone(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {HEADER: "aclnnStatus aclnnDemoOpGetWorkspaceSize(const aclTensor *x, "
                                      "const aclTensor *profilingData, uint64_t *workspaceSize, "
                                      "aclOpExecutor **executor);\n"})
    assert run(aclnn_edits, op) == {}
