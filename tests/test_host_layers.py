"""Host layers that hold on real code: apply, check (G1 / G2 evidence), apply again, strip.

One small msopgen-style operator of our own carries every construct met on real
operators: an OpDef spelled with an acronym (`DemoOP` for demo_op), infer / tiling
functions named only through their registrations beside helpers taking the same
context, a hand-written aclnn wrapper forwarding through a helper to an `extern "C"`
`aclnnInner...`, a torch schema with `Tensor!` / `Tensor?[]` / defaults, and a CMake
build. `apply --write` then `check` gives G1 and G2 ✓ with evidence in every layer; a
second apply changes nothing; strip gives every byte back; and each layer left broken
on purpose turns its gate ✗ at that layer's `file:line`.
"""

# ruff: noqa: E501  (inline snippets are verbatim code)

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.codemods.strip import strip_bytes
from optrace.codemods.torch_schema import parse_schema

runner = CliRunner()
OP = "ops/demo_op"

KERNEL = """\
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR w, GM_ADDR y, GM_ADDR n, GM_ADDR workspace, GM_ADDR tiling)
{
    for (uint32_t groupIdx = 0; groupIdx < 4; ++groupIdx) {
        AscendC::SyncAll();
    }
}
"""

OPDEF = """\
namespace ops {
class DemoOP : public OpDef {
public:
    explicit DemoOP(const char *name) : OpDef(name)
    {
        this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
        this->Input("w").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
        this->Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
        this->Output("n").ParamType(REQUIRED).DataType({ge::DT_INT64, ge::DT_INT64}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
        this->AICore().AddConfig("ascend910b");
    }
};
OP_ADD(DemoOP);
}  // namespace ops
"""

INFER = """\
#include "register/op_impl_registry.h"
namespace ops {
static bool IsPlatform910B(const gert::InferShapeContext *context)
{
    return context->GetOutputShape(0) != nullptr;
}

static bool CheckTensorDim(gert::InferShapeContext *context, size_t dim)
{
    OP_CHECK_IF(context->GetInputShape(0)->GetDimNum() != dim, OP_LOGE(context, "dim"), return false);
    return true;
}

static ge::graphStatus InferShape4DemoOp(gert::InferShapeContext *context)
{
    OP_CHECK_IF(!CheckTensorDim(context, 2), OP_LOGE(context, "dim"), return ge::GRAPH_FAILED);
    if (IsPlatform910B(context)) {
        *context->GetOutputShape(0) = *context->GetInputShape(0);
    }
    *context->GetOutputShape(1) = *context->GetInputShape(1);
    return ge::GRAPH_SUCCESS;
}

static ge::graphStatus InferDtype4DemoOp(gert::InferDataTypeContext *context)
{
    context->SetOutputDataType(0, context->GetInputDataType(0));
    context->SetOutputDataType(1, ge::DT_INT64);
    return ge::GRAPH_SUCCESS;
}

IMPL_OP_INFERSHAPE(DemoOP).InferShape(InferShape4DemoOp).InferDataType(InferDtype4DemoOp);
}  // namespace ops
"""

TILING = """\
namespace optiling {
static bool CheckOutputs(const gert::TilingContext *context)
{
    OP_CHECK_IF(context->GetOutputDesc(0) == nullptr, OP_LOGE(context, "no y"), return false);
    return true;
}

static ge::graphStatus DemoTiling(gert::TilingContext *context)
{
    OP_CHECK_IF(!CheckOutputs(context), OP_LOGE(context, "outputs"), return ge::GRAPH_FAILED);
    context->SetBlockDim(8);
    return ge::GRAPH_SUCCESS;
}

IMPL_OP_OPTILING(DemoOP)
    .Tiling(DemoTiling)
    .TilingParse<DemoCompileInfo>(DemoTilingParse);
}  // namespace optiling
"""

ACLNN = """\
#include "aclnn_demo_op.h"
extern "C" aclnnStatus aclnnInnerDemoOPGetWorkspaceSize(const aclTensor *x, const aclTensor *w, const aclTensor *y,
                                                        const aclTensor *n, uint64_t *workspaceSize,
                                                        aclOpExecutor **executor);

static aclnnStatus Forward(const aclTensor *x, const aclTensor *w, const aclTensor *y, const aclTensor *n,
                           uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return aclnnInnerDemoOPGetWorkspaceSize(x, w, y, n, workspaceSize, executor);
}

aclnnStatus aclnnDemoOPGetWorkspaceSize(const aclTensor *x, const aclTensor *w, const aclTensor *y,
                                        const aclTensor *n, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    return Forward(x, w, y, n, workspaceSize, executor);
}
"""

ACLNN_H = """\
#pragma once
aclnnStatus aclnnDemoOPGetWorkspaceSize(const aclTensor *x, const aclTensor *w, const aclTensor *y,
                                        const aclTensor *n, uint64_t *workspaceSize, aclOpExecutor **executor);
"""

ADAPTER = """\
#include "functions.h"
std::tuple<at::Tensor, at::Tensor> demo_op_impl(const at::Tensor &x, const at::Tensor &w)
{
    at::Tensor y = at::empty_like(x);
    at::Tensor n = at::empty_like(x);
    EXEC_NPU_CMD(aclnnDemoOP, x, w, y, n);
    return {y, n};
}
"""

FUNCS = """\
#pragma once
std::tuple<at::Tensor, at::Tensor> demo_op_impl(const at::Tensor &x, const at::Tensor &w);
"""

SCHEMA = 'demo_op(Tensor! x, Tensor w, Tensor?[] extras=None, int[] dims=[0, 1], str mode=\\"sum\\", *, ScalarType? dtype=None) -> (Tensor, Tensor)'

REGISTRATION = f"""\
#include "functions.h"
TORCH_LIBRARY(my_lib, m)
{{
    m.def("{SCHEMA}");
}}
TORCH_LIBRARY_IMPL(my_lib, PrivateUse1, m)
{{
    m.impl("demo_op", &demo_op_impl);
}}
"""

CMAKE = "project(demo)\nascendc_library(kernels STATIC ${CMAKE_CURRENT_SOURCE_DIR}/ops/demo_op/op_kernel/demo_op.cpp)\n"

FILES = {
    f"{OP}/op_kernel/demo_op.cpp": KERNEL,
    f"{OP}/op_host/demo_op_def.cpp": OPDEF,
    f"{OP}/op_host/demo_op_infershape.cpp": INFER,
    f"{OP}/op_host/demo_op_tiling.cpp": TILING,
    f"{OP}/op_host/op_api/aclnn_demo_op.cpp": ACLNN,
    f"{OP}/op_host/op_api/aclnn_demo_op.h": ACLNN_H,
    "torch/demo_op.cpp": ADAPTER,
    "torch/functions.h": FUNCS,
    "torch/registration.cpp": REGISTRATION,
    "CMakeLists.txt": CMAKE,
}


def make(tmp: Path, **replace: tuple[str, str, str]) -> Path:
    """The operator repository; `replace[key] = (file, old, new)` edits one file first."""
    root = tmp / "repo"
    files = dict(FILES)
    for rel, old, new in replace.values():
        assert old in files[rel], (rel, old)
        files[rel] = files[rel].replace(old, new, 1)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text) if not text.startswith(" ") else text)
    (root / "optrace.toml").write_text("")
    return root / OP


def cli(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".optrace" not in p.relative_to(root).parts}


def gates(op: Path) -> dict[str, dict[str, object]]:
    _, out, _ = cli("check", str(op), "--format", "json", "--no-compile")
    return {g["gate"]: g for g in json.loads(out)["operators"][0]["gates"]}


def evidence(gate: dict[str, object]) -> list[tuple[str, int, str, bool]]:
    items = gate["evidence"]
    assert isinstance(items, list)
    return [(str(e["path"]), int(e["line"]) if e["line"] else 0, str(e["note"]), bool(e["ok"])) for e in items]


def applied(tmp: Path, **replace: tuple[str, str, str]) -> Path:
    op = make(tmp, **replace)
    code, _, err = cli("apply", str(op), "--write")
    assert code == 0, err
    return op


def break_file(op: Path, rel: str, old: str, new: str) -> None:
    path = op.parent.parent / rel
    text = path.read_text()
    assert old in text, text
    path.write_text(text.replace(old, new, 1))


# --- the whole operator -----------------------------------------------------------------------


def test_apply_check_reapply_strip(tmp_path: Path) -> None:
    op = make(tmp_path)
    root = op.parent.parent
    before = snapshot(root)
    code, _, err = cli("apply", str(op), "--write")
    assert code == 0, err  # `Tensor! x` and friends no longer stop apply (exit 2)
    after = snapshot(root)
    changed = sorted(k for k in after if after[k] != before.get(k))
    assert changed == sorted([
        "CMakeLists.txt", f"{OP}/op_host/demo_op_def.cpp", f"{OP}/op_host/demo_op_infershape.cpp",
        f"{OP}/op_host/demo_op_tiling.cpp", f"{OP}/op_host/op_api/aclnn_demo_op.cpp",
        f"{OP}/op_host/op_api/aclnn_demo_op.h", f"{OP}/op_host/optrace_demo_op_profiling.h",
        f"{OP}/op_kernel/demo_op.cpp", f"{OP}/op_kernel/optrace_runtime.h",
        "torch/demo_op.cpp", "torch/functions.h", "torch/registration.cpp"])
    code, out, err = cli("check", str(op), "--no-compile")
    assert code == 0, out + err
    g = gates(op)
    assert g["G1"]["status"] == "pass" and g["G2"]["status"] == "pass", json.dumps(g, indent=1)
    notes = {(p.split("/")[-1], line, note) for p, line, note, _ok in evidence(g["G2"])}
    assert {("demo_op_def.cpp", 10, "OpDef: profiling_data is output 3 of 3"),
            ("demo_op_infershape.cpp", 23, "infer shape: profiling_data is output 3 (index 2)"),
            ("demo_op_infershape.cpp", 36, "infer dtype: profiling_data is output 3 (index 2)"),
            ("demo_op_tiling.cpp", 13, "tiling: profiling_data is output 3 (index 2)"),
            ("aclnn_demo_op.cpp", 2, "aclnnInnerDemoOPGetWorkspaceSize signature: profiling output last"),
            ("aclnn_demo_op.cpp", 8, "Forward signature: profiling output last"),
            ("aclnn_demo_op.cpp", 12, "aclnnInnerDemoOPGetWorkspaceSize call: profiling output last"),
            ("aclnn_demo_op.cpp", 15, "aclnnDemoOPGetWorkspaceSize signature: profiling output last"),
            ("aclnn_demo_op.cpp", 20, "Forward call: profiling output last"),
            ("aclnn_demo_op.h", 2, "aclnnDemoOPGetWorkspaceSize signature: profiling output last"),
            ("demo_op.cpp", 9, "EXEC_NPU_CMD: `profilingData` is argument 6"),  # below the wrapped type
            ("registration.cpp", 4, "schema returns 3 tensor(s)")} <= notes, sorted(notes)
    g1 = {(p, line, note) for p, line, note, _ok in evidence(g["G1"])}
    assert ("CMakeLists.txt", 9, "writes ${CMAKE_BINARY_DIR}/point_map.json") in g1
    # A second apply changes nothing; strip gives back every byte.
    assert cli("apply", str(op), "--check")[0] == 0
    assert cli("strip", str(op), "--write")[0] == 0
    assert snapshot(root) == before


def test_the_registered_schema_parses_and_grows_by_one(tmp_path: Path) -> None:
    op = applied(tmp_path)
    text = (op.parent.parent / "torch/registration.cpp").read_bytes()
    literal = text.split(b"m.def(", 1)[1].split(b");", 1)[0]
    literal = re.sub(rb"/\*.*?\*/", b"", literal)  # adjacent literals concatenate
    pieces = re.findall(rb'"((?:\\.|[^"\\])*)"', literal)
    joined = b"".join(pieces).replace(b'\\"', b'"')
    assert len(parse_schema(joined.decode()).returns) == 3
    assert strip_bytes(text) == REGISTRATION.encode()


# --- each layer left broken on purpose: its gate fails at that layer ----------------------------


def failing(gate: dict[str, object]) -> list[tuple[str, int, str]]:
    assert gate["status"] == "fail", json.dumps(gate, indent=1)
    return [(p.split("/")[-1], line, note) for p, line, note, ok in evidence(gate) if not ok]


def test_a_schema_left_unedited_fails_g2(tmp_path: Path) -> None:
    op = applied(tmp_path)
    path = op.parent.parent / "torch/registration.cpp"
    path.write_bytes(strip_bytes(path.read_bytes()))
    assert failing(gates(op)["G2"]) == [("registration.cpp", 4, "schema returns 2 tensor(s), the adapter returns 3")]


def test_an_adapter_spelled_with_an_acronym_is_read_and_fails_g2_when_left_unedited(tmp_path: Path) -> None:
    op = applied(tmp_path)
    path = op.parent.parent / "torch/demo_op.cpp"
    path.write_bytes(strip_bytes(path.read_bytes()))
    bad = failing(gates(op)["G2"])
    assert ("demo_op.cpp", 6, "EXEC_NPU_CMD does not pass a profiling tensor") in bad


def test_an_aclnn_helper_left_unedited_fails_g2(tmp_path: Path) -> None:
    op = applied(tmp_path)
    break_file(op, f"{OP}/op_host/op_api/aclnn_demo_op.cpp",
               "                           const aclTensor *profilingData,  // optrace\n", "")
    assert failing(gates(op)["G2"]) == [
        ("aclnn_demo_op.cpp", 8, "Forward signature has no profiling output (stale wrapper?)")]


def test_an_infer_left_unedited_fails_g2_at_the_registered_function(tmp_path: Path) -> None:
    op = applied(tmp_path)
    path = op / "op_host/demo_op_infershape.cpp"
    path.write_bytes(strip_bytes(path.read_bytes()))
    assert failing(gates(op)["G2"]) == [
        ("demo_op_infershape.cpp", 14, "infer `InferShape4DemoOp` never sets the shape of profiling_data, output 3 (index 2)"),
        ("demo_op_infershape.cpp", 24, "infer `InferDtype4DemoOp` never sets the dtype of profiling_data, output 3 (index 2)"),
    ]


def test_an_infer_registered_outside_the_op_is_wrapped_and_fails_g2_without_the_wrapper(tmp_path: Path) -> None:
    op = applied(tmp_path, infer=(f"{OP}/op_host/demo_op_infershape.cpp", ".InferDataType(InferDtype4DemoOp)",
                                  ".InferDataType(Ops::Base::InferDtypeSame)"))
    # apply registers a wrapper that calls the library's function, then sets the output
    assert gates(op)["G2"]["status"] == "pass"
    path = op / "op_host/demo_op_infershape.cpp"
    assert ".InferDataType(Ops::Base::InferDtypeSame/*optrace<*/).InferDataType(OptraceInferDataTypeDemoOp" \
        in path.read_text()
    # the second registration taken out by hand: the library's function is registered again
    path.write_text(re.sub(r"/\*optrace<\*/\)\.InferDataType\(\w+/\*>optrace\*/", "", path.read_text()))
    bad = failing(gates(op)["G2"])
    assert [b[2].split(",")[0] for b in bad] == [
        "infer dtype is registered as `Ops::Base::InferDtypeSame`"]


def test_a_tiling_left_unedited_fails_g2(tmp_path: Path) -> None:
    op = applied(tmp_path)
    path = op / "op_host/demo_op_tiling.cpp"
    path.write_bytes(strip_bytes(path.read_bytes()))
    assert failing(gates(op)["G2"]) == [
        ("demo_op_tiling.cpp", 8, "tiling `DemoTiling` describes outputs but not profiling_data, output 3 (index 2)")]


@pytest.mark.parametrize(("old", "new", "note"), [
    ("\n                --out ${CMAKE_BINARY_DIR} RESULT_VARIABLE", "\n                RESULT_VARIABLE",
     "no `--out`: point_map.json is not written beside the build"),
    ("preprocess ${CMAKE_CURRENT_SOURCE_DIR}", "# preprocess ${CMAKE_CURRENT_SOURCE_DIR}",
     "the block does not run `optrace preprocess`"),
])
def test_a_cmake_hook_left_broken_fails_g1(tmp_path: Path, old: str, new: str, note: str) -> None:
    op = applied(tmp_path)
    break_file(op, "CMakeLists.txt", old, new)
    assert [b[2] for b in failing(gates(op)["G1"])] == [note]


def test_a_shell_hook_written_across_continuation_lines_passes_g1(tmp_path: Path) -> None:
    script = ('#!/bin/bash\nset -e\nROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n'
              'mkdir -p "${ROOT}/build"\ncmake -S "${ROOT}" -B "${ROOT}/build"\n')
    op = applied(tmp_path, build=("CMakeLists.txt", "project(demo)\n", "project(demo)\n# built by build.sh\n"))
    (op.parent.parent / "build.sh").write_text(script)
    assert cli("apply", str(op), "--write")[0] == 0
    text = (op.parent.parent / "build.sh").read_text()
    assert "TRACE_PREPROCESSOR_HOOK_START" in text
    # Someone reflows the command over continuation lines, with a comment in between.
    line = next(ln for ln in text.splitlines() if ln.startswith("optrace preprocess"))
    words = line.split(" || ")[0].split()
    reflowed = " \\\n    ".join([" ".join(words[:3]), *[" ".join(words[i : i + 2]) for i in range(3, len(words), 2)]])
    break_file(op, "build.sh", line.split(" || ")[0], reflowed)
    g1 = gates(op)["G1"]
    assert g1["status"] == "pass", json.dumps(g1, indent=1)
    # the repository's script: the operator's own folder of the build folder
    assert any("writes" in e[2] and f"build/optrace/{op.name}/point_map.json" in e[2] for e in evidence(g1))


# --- an OpDef without outputs ---------------------------------------------------------------------


NO_OUTPUTS = {
    "opdef": (f"{OP}/op_host/demo_op_def.cpp",
              """        this->Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT, ge::DT_BF16}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
        this->Output("n").ParamType(REQUIRED).DataType({ge::DT_INT64, ge::DT_INT64}).Format({ge::FORMAT_ND, ge::FORMAT_ND});
""", ""),
    "kernel": (f"{OP}/op_kernel/demo_op.cpp", "GM_ADDR y, GM_ADDR n, ", ""),
}


def test_an_opdef_without_outputs_gets_profiling_data_as_its_only_output(tmp_path: Path) -> None:
    op = make(tmp_path, **NO_OUTPUTS)
    root = op.parent.parent
    before = snapshot(root)
    code, _, err = cli("apply", str(op), "--write")
    assert code == 0, err  # not OT310
    opdef = (op / "op_host/demo_op_def.cpp").read_text()
    assert ('        this->Output("profiling_data").ParamType(REQUIRED).DataType({  // optrace\n'
            '            ge::DT_INT64, ge::DT_INT64}).Format({ge::FORMAT_ND, ge::FORMAT_ND});  // optrace\n'
            '        this->AICore()') in opdef
    g2 = gates(op)["G2"]
    assert g2["status"] == "pass", json.dumps(g2, indent=1)
    assert ("demo_op_def.cpp", 8, "OpDef: profiling_data is output 1 of 1") in [
        (p.split("/")[-1], line, note) for p, line, note, _ok in evidence(g2)]
    assert cli("apply", str(op), "--check")[0] == 0
    # Left unedited, the OpDef fails G2 at its class.
    path = op / "op_host/demo_op_def.cpp"
    path.write_bytes(strip_bytes(path.read_bytes()))
    assert ("demo_op_def.cpp", 2, "OpDef has no profiling_data output") in failing(gates(op)["G2"])
    assert cli("strip", str(op), "--write")[0] == 0
    assert snapshot(root) == before
