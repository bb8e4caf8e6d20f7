"""The operator's C++ samples and API unit tests keep compiling after apply (the
`cpp_callers` layer): the aclnn API grows by `profilingData` right before workspaceSize
in both modes, so each of their calls passes `nullptr` there — a direct call before
`&workspaceSize`, the UT framework's `OP_API_UT(...)` as its last extra argument.

Two fixtures: `generated_api` (the build generates the API from the OpDef: no
declaration among the operator's files; a CRLF sample that also calls another
operator's API) and `l0op_style` (a hand-written API whose header apply edits). The
expected lines below were written by hand before the codemod ran. g++ compiles each
sample against the instrumented API's declaration, a small stub of the ACL types."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from test_host_layers import cli, evidence, gates, snapshot

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GENERATED = "pooling/moe_pool_grad_argmax"
L0OP = "norm/moe_norm_grad"
SAMPLE = f"{GENERATED}/examples/test_aclnn_moe_pool_grad_argmax.cpp"
UT = f"{GENERATED}/tests/ut/op_host/test_aclnn_moe_pool_grad_argmax.cpp"
L0OP_SAMPLE = f"{L0OP}/examples/test_aclnn_moe_norm_backward.cpp"
L0OP_UT = f"{L0OP}/tests/ut/op_api/test_aclnn_moe_norm_backward.cpp"

# Each file's changes: (clean line, what it becomes); every other line unchanged.
EXPECTED: dict[str, list[tuple[bytes, bytes]]] = {
    SAMPLE: [(
        b"    auto ret = aclnnMoePoolGradArgmaxGetWorkspaceSize(x, grad, argmax, ksizeArray, y, "
        b"&workspaceSize, &executor);\r\n",
        # Past the file's longest line: the fragment is wrapped, aligned under the arguments.
        b"    auto ret = aclnnMoePoolGradArgmaxGetWorkspaceSize(x, grad, argmax, ksizeArray, y, "
        b"/*optrace<*/\r\n"
        b"                                                      nullptr,\r\n"
        b"                                                      /*>optrace*/&workspaceSize, &executor);\r\n",
    )],
    UT: [
        (b"    auto ut = OP_API_UT(aclnnMoePoolGradArgmax, INPUT(xDesc, gradDesc, argmaxDesc, ksize), "
         b"OUTPUT(yDesc));\n",
         b"    auto ut = OP_API_UT(aclnnMoePoolGradArgmax, INPUT(xDesc, gradDesc, argmaxDesc, ksize), "
         b"OUTPUT(yDesc)/*optrace<*/,\n                        nullptr/*>optrace*/);\n"),
        (b"                        OUTPUT(yDesc)\n",
         b"                        OUTPUT(yDesc)/*optrace<*/, nullptr/*>optrace*/\n"),
    ],
}
EXPECTED_L0OP: dict[str, list[tuple[bytes, bytes]]] = {
    L0OP_UT: [(b"                        OUTPUT(gradInputDesc, gradGammaDesc));\n",
               b"                        OUTPUT(gradInputDesc, gradGammaDesc)"
               b"/*optrace<*/, nullptr/*>optrace*/);\n")],
}
# A whole line before `&workspaceSize`, which starts its own line.
ALIGNED = b" " * 59  # under the call's first argument
L0OP_SAMPLE_INSERTED = (ALIGNED + b"&workspaceSize, &executor);\n", ALIGNED + b"nullptr,  // optrace\n")


def copy(tmp: Path, name: str) -> Path:
    repo = tmp / name
    shutil.copytree(FIXTURES / name, repo)
    return repo


def changed(before: bytes, lines: list[tuple[bytes, bytes]]) -> bytes:
    """`before` with each clean line (found once) replaced by what it becomes."""
    for old, new in lines:
        assert before.count(old) == 1, old
        before = before.replace(old, new)
    return before


@pytest.mark.parametrize("mode", ["A", "B"])
def test_generated_api_callers_pass_a_null_buffer(tmp_path: Path, mode: str) -> None:
    repo = copy(tmp_path, "generated_api")
    before = snapshot(repo)
    code, out, err = cli("apply", str(repo / GENERATED), "--mode", mode, "--write")
    assert code == 0, out + err
    after = snapshot(repo)
    for rel, lines in EXPECTED.items():
        assert after[rel] == changed(before[rel], lines), rel
    # The other operator's API (aclnnCast) and the second phase are left as they were.
    cast = b"aclnnCastGetWorkspaceSize(grad, ACL_FLOAT, gradFloat, &workspaceSize, &executor);"
    assert cast in after[SAMPLE]
    assert b"aclnnMoePoolGradArgmax(workspaceAddr, workspaceSize, executor, stream);" in after[SAMPLE]
    assert cli("strip", str(repo / GENERATED), "--write")[0] == 0
    assert snapshot(repo) == before


def test_hand_written_api_callers_follow_its_header(tmp_path: Path) -> None:
    repo = copy(tmp_path, "l0op_style")
    before = snapshot(repo)
    code, out, err = cli("apply", str(repo / L0OP), "--write")
    assert code == 0, out + err
    after = snapshot(repo)
    for rel, lines in EXPECTED_L0OP.items():
        assert after[rel] == changed(before[rel], lines), rel
    old, new = before[L0OP_SAMPLE].splitlines(keepends=True), after[L0OP_SAMPLE].splitlines(keepends=True)
    at = old.index(L0OP_SAMPLE_INSERTED[0])
    assert new[:at] + new[at + 1:] == old and new[at] == L0OP_SAMPLE_INSERTED[1]
    assert cli("strip", str(repo / L0OP), "--write")[0] == 0
    assert snapshot(repo) == before


def test_plan_lists_the_callers(tmp_path: Path) -> None:
    repo = copy(tmp_path, "generated_api")
    code, out, err = cli("plan", str(repo / GENERATED))
    assert code == 0, out + err
    assert "+ C++ samples / tests: examples/test_aclnn_moe_pool_grad_argmax.cpp:36  calls " \
           "aclnnMoePoolGradArgmax" in out, out
    assert "tests/ut/op_host/test_aclnn_moe_pool_grad_argmax.cpp:22" in out, out


def test_check_fails_a_call_left_with_the_old_arity(tmp_path: Path) -> None:
    repo = copy(tmp_path, "l0op_style")
    assert cli("apply", str(repo / L0OP), "--write")[0] == 0
    g2 = gates(repo / L0OP)["G2"]
    assert g2["status"] == "pass", g2
    notes = [(p, n) for p, _, n, ok in evidence(g2) if "examples" in p or "tests/ut" in p]
    assert len(notes) == 2 and all("passes 7 arguments before workspaceSize, the API takes 7" in n
                                   for _, n in notes), notes
    sample = repo / L0OP_SAMPLE
    sample.write_bytes(sample.read_bytes().replace(L0OP_SAMPLE_INSERTED[1], b""))
    g2 = gates(repo / L0OP)["G2"]
    assert g2["status"] == "fail", g2
    bad = [(Path(p).name, line, n) for p, line, n, ok in evidence(g2) if not ok]
    assert bad == [(sample.name, 14, "aclnnMoeNormBackward call: passes 6 arguments before workspaceSize, "
                    "the API takes 7: it no longer compiles")], bad


def test_a_call_already_passing_the_buffer_is_left(tmp_path: Path) -> None:
    repo = copy(tmp_path, "l0op_style")
    sample = repo / L0OP_SAMPLE
    sample.write_bytes(sample.read_bytes().replace(b"gradGamma,\n", b"gradGamma, nullptr,\n"))
    before = sample.read_bytes()
    assert cli("apply", str(repo / L0OP), "--write")[0] == 0
    assert sample.read_bytes() == before


# The ACL types a sample names, and the UT framework's case macro as ops-nn's writes it
# (inputs, outputs, extras, then the workspace size and the executor), for g++ alone.
_STUB_ACL = """\
#pragma once
#include <cstdint>
#include <cstddef>
struct aclTensor; struct aclIntArray; struct aclOpExecutor;
typedef void *aclrtStream;
typedef int aclnnStatus;
typedef int aclDataType;
#define ACL_SUCCESS 0
#define ACLNN_SUCCESS 0
#define ACL_FLOAT 0
#define ACL_ERROR_INVALID_PARAM 1
#define ACL_MEM_MALLOC_HUGE_FIRST 0
#define ACLNN_API
int aclrtMalloc(void **ptr, uint64_t size, int policy);
int aclrtFree(void *ptr);
int aclrtSynchronizeStream(aclrtStream stream);
aclIntArray *aclCreateIntArray(const int64_t *values, uint64_t size);
"""
_STUB_CAST = """\
#pragma once
#include "acl/acl.h"
aclnnStatus aclnnCastGetWorkspaceSize(const aclTensor *self, aclDataType dtype, aclTensor *out,
                                      uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnCast(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream);
"""
# What the build generates from the instrumented OpDef: profiling_data after the last output.
_GENERATED_HEADER = """\
#pragma once
#include "acl/acl.h"
aclnnStatus aclnnMoePoolGradArgmaxGetWorkspaceSize(const aclTensor *x, const aclTensor *grad,
                                                   const aclTensor *argmax, const aclIntArray *ksize,
                                                   const aclTensor *y, const aclTensor *profilingData,
                                                   uint64_t *workspaceSize, aclOpExecutor **executor);
aclnnStatus aclnnMoePoolGradArgmax(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                   aclrtStream stream);
"""
_STUB_UT = """\
#pragma once
#include <tuple>
#include <utility>
#include "acl/acl.h"
struct TensorDesc { TensorDesc(std::initializer_list<int64_t>, int, int) {} operator aclTensor *() const
  { return nullptr; } };
struct IntArrayDesc { template <class T> explicit IntArrayDesc(T) {} operator aclIntArray *() const
  { return nullptr; } };
template <class F, class T> struct OpApiUt {
    F f; T args;
    aclnnStatus TestGetWorkspaceSize(uint64_t *ws) {
        aclOpExecutor *executor = nullptr;
        return std::apply([&](auto &&...a) { return f(a..., ws, &executor); }, args);
    }
};
template <class F, class T> OpApiUt<F, T> MakeUt(F f, T t) { return {f, t}; }
#define OP_API_UT(api, input, output, ...) \\
    MakeUt(api##GetWorkspaceSize, std::tuple_cat(input, output, std::make_tuple(__VA_ARGS__)))
#define INPUT(...) std::make_tuple(__VA_ARGS__)
#define OUTPUT(...) std::make_tuple(__VA_ARGS__)
#define ACL_INT32 0
#define ACL_FLOAT16 0
#define ACL_FORMAT_ND 0
#define ACL_FORMAT_NHWC 0
#define ACLNN_ERR_PARAM_NULLPTR 161001
"""
_STUB_GTEST = """\
#pragma once
namespace testing { struct Test {}; }
#define TEST_F(suite, name) void suite##_##name()
#define EXPECT_EQ(a, b) (void)((a) == (b))
"""


def compiles(source: Path, *include: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["g++", "-std=c++17", "-fsyntax-only", *(f"-I{d}" for d in include), str(source)],
                          capture_output=True, text=True, check=False)


def stubs(root: Path, generated: bool) -> Path:
    files = {"acl/acl.h": _STUB_ACL, "aclnnop/aclnn_cast.h": _STUB_CAST, "gtest/gtest.h": _STUB_GTEST,
             "op_api_ut_common/op_api_ut.h": _STUB_UT,
             "op_api_ut_common/tensor_desc.h": '#pragma once\n#include "op_api_ut.h"\n',
             "aclnn/aclnn_base.h": '#pragma once\n#include "acl/acl.h"\n'}
    if generated:
        files["aclnnop/aclnn_moe_pool_grad_argmax.h"] = _GENERATED_HEADER
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_samples_compile_against_the_grown_api_only_once_applied(tmp_path: Path) -> None:
    include = stubs(tmp_path / "include", generated=True)
    repo = copy(tmp_path, "generated_api")
    clean = {rel: compiles(repo / rel, include) for rel in (SAMPLE, UT)}
    assert all(done.returncode != 0 for done in clean.values()), clean  # the old arity
    assert cli("apply", str(repo / GENERATED), "--write")[0] == 0
    for rel in (SAMPLE, UT):
        done = compiles(repo / rel, include)
        assert done.returncode == 0, (rel, done.stderr)

    include = stubs(tmp_path / "include_l0op", generated=False)
    repo = copy(tmp_path, "l0op_style")
    api = repo / L0OP / "op_api"
    old = copy(tmp_path / "clean", "l0op_style")
    for rel in (L0OP_SAMPLE, L0OP_UT):  # the clean tree compiles
        assert compiles(repo / rel, include, api).returncode == 0, rel
    assert cli("apply", str(repo / L0OP), "--write")[0] == 0
    for rel in (L0OP_SAMPLE, L0OP_UT):
        done = compiles(repo / rel, include, api)
        assert done.returncode == 0, (rel, done.stderr)
        # The clean call against the grown header: what apply used to leave behind.
        shutil.copy(old / rel, repo / rel)
        assert compiles(repo / rel, include, api).returncode != 0, rel


def test_a_call_of_another_arity_is_another_function_of_that_name(tmp_path: Path) -> None:
    """ops-nn's gather_v2 samples call a two-argument `aclnnMedian`; the `median` operator
    elsewhere declares a five-argument one. A call matching neither the clean nor the grown
    arity is not this API's: left as written, and not a failing fact in check."""
    repo = copy(tmp_path, "l0op_style")
    sample = repo / L0OP_SAMPLE
    other = b"    (void)aclnnMoeNormBackwardGetWorkspaceSize(gradOutput, &workspaceSize, &executor);\n"
    text = sample.read_bytes().replace(b"    if (ret != ACLNN_SUCCESS) {\n",
                                       other + b"    if (ret != ACLNN_SUCCESS) {\n", 1)
    sample.write_bytes(text)
    assert cli("apply", str(repo / L0OP), "--write")[0] == 0
    assert other in sample.read_bytes()
    g2 = gates(repo / L0OP)["G2"]
    assert g2["status"] == "pass", g2
    assert not [e for e in evidence(g2) if "examples" in e[0] and "passes 2 arguments" in e[2]]
