"""Generate a forest of synthetic AscendC operator trees for benchmarks.

Each operator looks like a UMDK-style 1C2V MoE operator: an entry .cpp, a kernel class
header, and gemm/ epilogue/ raw_distributed/ subtrees of headers with classes,
`operator()<AscendC::AIC/AIV>` specialisations, phase loops, tile loops, syncs and role
branches. Deterministic for a given seed.

With `layers=True` (the default of `write_forest`) each operator also has the layers
`optrace apply` carries `profiling_data` through: an op_host OpDef with infer and tiling,
a torch adapter, and — shared by every operator, as in real repositories — one
`pybind.cpp` registering them all, one `functions.h` declaring them, one build script, and one Python sample
per group of eight operators. So apply does real cross-layer work and exercises the
reconciliation of files several operators change.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

SAMPLE_GROUP = 8  # operators per Python sample (see write_shared)
SUBDIRS = ("gemm/kernel", "gemm/block", "epilogue/block", "epilogue/tile", "raw_distributed")


def _helper(rng: random.Random, name: str, n_stmts: int) -> str:
    lines = [f"__aicore__ inline void {name}(GM_ADDR dst, GM_ADDR src, uint32_t len)", "{"]
    lines.append("    AscendC::LocalTensor<float> buf = queue_.AllocTensor<float>();")
    lines.append("    for (uint32_t tileIdx = 0; tileIdx < len; ++tileIdx) {")
    for i in range(n_stmts):
        op = rng.choice(["Add", "Mul", "Muls", "Exp", "Cast", "DataCopy"])
        lines.append(f"        AscendC::{op}(buf[{i}], buf[{i + 1}], tileLen_);  // step {i}")
    lines.append("    }")
    lines.append("    queue_.FreeTensor(buf);")
    lines.append("}")
    return "\n".join(lines)


def _header(rng: random.Random, op: str, idx: int, sub: str, callees: list[str]) -> tuple[str, str]:
    cls = f"{op.title().replace('_', '')}Part{idx}"
    helpers = [f"Compute{idx}x{k}" for k in range(6)]
    body: list[str] = [f"#ifndef {op.upper()}_PART{idx}_H", f"#define {op.upper()}_PART{idx}_H",
                       '#include "kernel_operator.h"', ""]
    for c in callees:
        body.append(f'#include "{c}"')
    body.append(f"namespace {op.title().replace('_', '')}Impl {{")
    body.append(f"class {cls} {{")
    body.append("public:")
    for h in helpers:
        body.append(_helper(rng, h, rng.randint(15, 40)).replace("\n", "\n    "))
    body.append("    template <int32_t CORE_TYPE = g_coreType>")
    body.append("    __aicore__ inline void operator()(GM_ADDR x);")
    for core in ("AIC", "AIV"):
        body.append("    template <>")
        body.append(f"    __aicore__ inline void operator()<AscendC::{core}>(GM_ADDR x)")
        body.append("    {")
        body.append("        for (uint32_t groupIdx = 0; groupIdx < groupNum_; ++groupIdx) {")
        body.append("            Arch::CrossCoreWaitFlag(flag_);")
        for h in rng.sample(helpers, 3):
            body.append(f"            {h}(x, x, 16);")
        body.append("        }")
        if core == "AIV":
            body.append("        if (isSendCore_) {")
            body.append(f"            SendTokens{idx}(x);")
            body.append("        } else {")
            body.append(f"            RecvTokens{idx}(x);")
            body.append("        }")
        body.append("        AscendC::SyncAll();")
        body.append("    }")
    for kind in ("Send", "Recv"):
        body.append(f"    __aicore__ inline void {kind}Tokens{idx}(GM_ADDR x)")
        body.append("    {")
        body.append("        for (uint32_t tokenIdx = 0; tokenIdx < tokenNum_; ++tokenIdx) {")
        body.append(f"            {helpers[0]}(x, x, 8);")
        body.append("        }")
        body.append("        AscendC::SyncAll();")
        body.append("    }")
    body.append("private:")
    # Every member the helpers use is declared, as in a real kernel class (the compile
    # check wades through the errors of undeclared ones: 3,400 on one operator).
    body.append("    uint32_t groupNum_{0}, tokenNum_{0}, tileLen_{0};")
    body.append("    bool isSendCore_{false}; int32_t flag_{0};")
    body.append("    AscendC::TQue<AscendC::QuePosition::VECIN, 2> queue_;")
    body.append("};")
    body.append("}")
    body.append("#endif")
    return f"{sub}/part_{idx}.h", "\n".join(body) + "\n"


def write_operator(root: Path, op: str, rng: random.Random, headers: int = 16) -> int:
    """Write one operator directory; returns its number of lines.

    The kernel header includes the first part; each part includes the next, so the
    include tree is a chain `headers` deep across the subdirectories.
    """
    kernel = root / op / "op_kernel"
    rels = [f"{op}/{SUBDIRS[i % len(SUBDIRS)]}/part_{i}.h" for i in range(headers)]
    files: list[tuple[str, str]] = []
    for i, rel in enumerate(rels):
        nxt = [os.path.relpath(rels[i + 1], os.path.dirname(rel))] if i + 1 < headers else []
        _, text = _header(rng, op, i, SUBDIRS[i % len(SUBDIRS)], nxt)
        files.append((rel, text))
    cls = op.title().replace("_", "")
    main = [f"#ifndef {op.upper()}_H", f"#define {op.upper()}_H", f'#include "{rels[0]}"']
    main += [f"class {cls} {{", "public:", "    __aicore__ inline void Init(GM_ADDR x) { x_ = x; }",
             "    __aicore__ inline void Process()", "    {"]
    for i in range(headers):
        main.append(f"        {cls}Impl::{cls}Part{i} part{i};")
        main.append(f"        part{i}(x_);")
        main.append("        AscendC::PipeBarrier<PIPE_ALL>();")
    main += ["    }", "private:", "    GM_ADDR x_;", "};", "#endif"]
    entry = [f'#include "{op}.h"',
             f'extern "C" __global__ __aicore__ void {op}(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
             "GM_ADDR tiling)",
             "{", "    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);", f"    {cls} op;",
             "    op.Init(x);", "    op.Process();", "}"]
    total = 0
    for rel, text in [*files, (f"{op}.h", "\n".join(main) + "\n"), (f"{op}.cpp", "\n".join(entry) + "\n")]:
        path = kernel / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        total += text.count("\n")
    return total


def camel(op: str) -> str:
    return op.title().replace("_", "")


def write_host(root: Path, op: str) -> int:
    """op_host/<op>.cpp: tiling, shape inference and the OpDef of one operator (x -> y)."""
    cls = camel(op)
    text = f"""#include "register/op_def_registry.h"
#include "tiling/platform/platform_ascendc.h"

namespace optiling {{
static ge::graphStatus {cls}TilingFunc(gert::TilingContext *context)
{{
    auto platform = platform_ascendc::PlatformAscendC(context->GetPlatformInfo());
    context->SetBlockDim(platform.GetCoreNumAic());
    size_t *workspaces = context->GetWorkspaceSizes(1);
    workspaces[0] = platform.GetLibApiWorkSpaceSize();
    return ge::GRAPH_SUCCESS;
}}
}}  // namespace optiling

namespace ge {{
static ge::graphStatus InferShape{cls}(gert::InferShapeContext *context)
{{
    const gert::Shape *xShape = context->GetInputShape(0);
    gert::Shape *yShape = context->GetOutputShape(0);
    if (xShape == nullptr || yShape == nullptr) {{
        return ge::GRAPH_FAILED;
    }}
    *yShape = *xShape;
    return ge::GRAPH_SUCCESS;
}}
}}  // namespace ge

namespace ops {{
class {cls} : public OpDef {{
public:
    explicit {cls}(const char *name) : OpDef(name)
    {{
        this->Input("x")
            .ParamType(REQUIRED)
            .DataType({{ge::DT_FLOAT16, ge::DT_BF16}})
            .Format({{ge::FORMAT_ND, ge::FORMAT_ND}});
        this->Output("y")
            .ParamType(REQUIRED)
            .DataType({{ge::DT_FLOAT16, ge::DT_BF16}})
            .Format({{ge::FORMAT_ND, ge::FORMAT_ND}});

        this->SetInferShape(ge::InferShape{cls});
        this->AICore().SetTiling(optiling::{cls}TilingFunc);
        this->AICore().AddConfig("ascend910b");
    }}
}};

OP_ADD({cls});
}}  // namespace ops
"""
    path = root / op / "op_host" / f"{op}.cpp"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text.count("\n")


def write_shared(root: Path, ops: list[str]) -> int:
    """The files every operator shares (registration, declarations, sample, build script)
    and one torch adapter per operator; returns their number of lines."""
    files: dict[str, str] = {}
    decls = "\n".join(f"at::Tensor {op}_impl(const at::Tensor &x);" for op in ops)
    files["pybind/functions.h"] = (f"#ifndef FOREST_FUNCTIONS_H\n#define FOREST_FUNCTIONS_H\n\n"
                                   f"#include <ATen/ATen.h>\n\n{decls}\n\n#endif  // FOREST_FUNCTIONS_H\n")
    defs = "\n".join(f'    m.def("{op}", &{op}_impl, "{op}");' for op in ops)
    schemas = "\n".join(f'    m.def("{op}(Tensor x) -> Tensor");' for op in ops)
    impls = "\n".join(f'    m.impl("{op}", &{op}_impl);' for op in ops)
    files["pybind/pybind.cpp"] = (
        '#include <torch/extension.h>\n#include <torch/library.h>\n#include "functions.h"\n\n'
        f"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)\n{{\n{defs}\n}}\n\n"
        f"TORCH_LIBRARY(forest_op_lib, m)\n{{\n{schemas}\n}}\n\n"
        f"TORCH_LIBRARY_IMPL(forest_op_lib, PrivateUse1, m)\n{{\n{impls}\n}}\n")
    for op in ops:
        files[f"pybind/{op}.cpp"] = (
            '#include <torch/extension.h>\n#include "pytorch_npu_helper.hpp"\n#include "functions.h"\n\n'
            f"at::Tensor {op}_impl(const at::Tensor &x)\n{{\n"
            "    at::Tensor y = at::empty_like(x);\n"
            f"    EXEC_NPU_CMD(aclnn{camel(op)}, x, y);\n"
            "    return y;\n}\n")
    # One sample per group of operators: shared, but not by all of them — each operator's
    # Python-caller codemod parses (libcst) every sample calling it, so one sample for
    # hundreds of operators would make apply quadratic in a way real repositories are not.
    for first in range(0, len(ops), SAMPLE_GROUP):
        group = ops[first : first + SAMPLE_GROUP]
        calls = "\n".join(f"    y = torch.ops.forest_op_lib.{op}(x)\n    assert y.shape == x.shape"
                           for op in group)
        name = "forest_sample.py" if first == 0 else f"forest_sample_{first // SAMPLE_GROUP}.py"
        files[f"examples/{name}"] = (
            '"""Runs forest operators once."""\n\nimport torch\nimport torch_npu  # noqa: F401\n\n\n'
            f"def main():\n    x = torch.randn(16, 64, dtype=torch.float16).npu()\n{calls}\n\n\n"
            'if __name__ == "__main__":\n    main()\n')
    files["build/compile_ascend_proj.sh"] = (
        "#!/bin/bash\n# Builds every operator of the forest into one msopgen project.\nset -e\n\n"
        'PROJ_DIR="${BUILD_ROOT:-build_out}/forest_kernels"\n\n'
        "copy_ops() {\n"
        '    for op_dir in */op_kernel; do\n'
        '        cp -r "${op_dir}/"* "${PROJ_DIR}/op_kernel/"\n'
        "    done\n}\n\n"
        "build_project() {\n"
        '    cd "${PROJ_DIR}"\n'
        '    cmake -S . -B build_out --preset=default -DASCEND_COMPUTE_UNIT="${SOC_VERSION}"\n'
        '    cmake --build build_out --target binary package -j "$(nproc)"\n}\n\n'
        "copy_ops\nbuild_project\n")
    total = 0
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        total += text.count("\n")
    return total


def write_forest(root: Path, operators: int, seed: int = 7, layers: bool = True,
                 headers: int = 16) -> tuple[list[Path], int]:
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    (root / "optrace.toml").write_text("# benchmark forest\n")
    ops: list[Path] = []
    lines = 0
    for i in range(operators):
        name = f"moe_op_{i:04d}"
        lines += write_operator(root, name, rng, headers)
        if layers:
            lines += write_host(root, name)
        ops.append(root / name)
    if layers:
        lines += write_shared(root, [op.name for op in ops])
    return ops, lines
