"""A one-class operator for the planner's tests: an AIV-only entry that declares the
class, calls its `Init(x)` then its `Process()`, and the header a test writes around it."""

from __future__ import annotations

from pathlib import Path


def class_op(tmp_path: Path, name: str, cls: str, header: str, header_name: str = "k.h") -> Path:
    """`<tmp_path>/<name>/op_kernel/{<name>.cpp, <header_name>}`; the operator directory.
    `tmp_path` is marked a repository (a `.git` folder): without a mark, discovery searches
    the operator's grandparent — pytest's folder of every test's tmp_path — and found
    another test's build script there (apply then refused to write outside the operator)."""
    (tmp_path / ".git").mkdir(parents=True, exist_ok=True)
    op = tmp_path / name
    (op / "op_kernel").mkdir(parents=True)
    (op / "op_kernel" / f"{name}.cpp").write_text(
        '#include "kernel_operator.h"\n'
        f'#include "{header_name}"\n'
        f'extern "C" __global__ __aicore__ void {name}(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling)\n'
        "{\n"
        "    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);\n"
        f"    {cls} op;\n"
        "    op.Init(x);\n"
        "    op.Process();\n"
        "}\n")
    (op / "op_kernel" / header_name).write_text(header)
    return op
