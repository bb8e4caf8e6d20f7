"""The entry forwards `profiling_data` to a callee that takes its workspace (the seed's G2
convention: `op.Init(..., profiling_data, workspace)`) only when no other code calls that
callee: ops-nn's `fused_mat_mul` includes `mat_mul_v3`'s kernel headers by a path that
resolves only in the build's flattened tree (`../mat_mul_v3/arch35/...`) and calls their
helpers, so the plan never reads that call. A helper or class another operator names
keeps its signature; with that operator gone, it is widened as before."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from optrace.engine.discovery import forget_repo_indexes
from optrace.pipeline.apply import apply_changes

HELPER = """\
#pragma once
#include "kernel_operator.h"

template <typename T>
__aicore__ inline void MmTileKernel(GM_ADDR a, GM_ADDR c, GM_ADDR workspaceGM, uint32_t tiles)
{
    for (uint32_t t = 0; t < tiles; ++t) {
        AscendC::PipeBarrier<PIPE_ALL>();
    }
}

class KernelMmRow {
public:
    __aicore__ inline void Init(GM_ADDR a, GM_ADDR c, GM_ADDR workspaceGM) { a_ = a; }
    __aicore__ inline void Process() { AscendC::PipeBarrier<PIPE_ALL>(); }
private:
    GM_ADDR a_;
};
"""

ENTRY = """\
#include "kernel_operator.h"
#include "mm_tile.h"

extern "C" __global__ __aicore__ void mm_row(GM_ADDR a, GM_ADDR c, GM_ADDR workspace, GM_ADDR tiling)
{
    if (TILING_KEY_IS(1)) {
        MmTileKernel<half>(a, c, workspace, 4);
    } else {
        KernelMmRow op;
        op.Init(a, c, workspace);
        op.Process();
    }
}
"""

# Another operator's kernel, including the helper as the build's flattened tree lays it.
OTHER = {
    "function": """\
#include "kernel_operator.h"
#include "../mm_row/mm_tile.h"

extern "C" __global__ __aicore__ void fused_mm(GM_ADDR a, GM_ADDR c, GM_ADDR workspace, GM_ADDR tiling)
{
    MmTileKernel<float>(a, c, workspace, 8);
}
""",
    "class": """\
#include "kernel_operator.h"
#include "../mm_row/mm_tile.h"

extern "C" __global__ __aicore__ void fused_mm(GM_ADDR a, GM_ADDR c, GM_ADDR workspace, GM_ADDR tiling)
{
    KernelMmRow op;
    op.Init(a, c, workspace);  // MmTileKernel is named in a comment only
    op.Process();
}
""",
}


def _repo(tmp: Path, other: str | None) -> Path:
    root = tmp / "repo"
    files = {"optrace.toml": "", "matmul/mm_row/op_kernel/mm_tile.h": HELPER,
             "matmul/mm_row/op_kernel/mm_row.cpp": ENTRY}
    if other is not None:
        files["matmul/fused_mm/op_kernel/fused_mm.cpp"] = OTHER[other]
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    forget_repo_indexes()  # each test's repository is new
    return root / "matmul" / "mm_row"


def _widened(op: Path) -> dict[str, bool]:
    """Which of the helper's callees apply gives the buffer parameter."""
    changes = apply_changes(op).changes
    new = changes[(op / "op_kernel" / "mm_tile.h").resolve()][1]
    assert new is not None
    text = new.decode()
    head = {"MmTileKernel": text[text.index("MmTileKernel("):text.index("{")],
            "Init": text[text.index("Init("):text.index("{", text.index("Init("))]}
    return {name: "profilingData" in sig for name, sig in head.items()}


def test_without_other_callers_both_callees_take_the_buffer(tmp_path: Path) -> None:
    assert _widened(_repo(tmp_path, None)) == {"MmTileKernel": True, "Init": True}


@pytest.mark.parametrize("other", sorted(OTHER))
def test_a_callee_another_operator_names_keeps_its_signature(tmp_path: Path, other: str) -> None:
    widened = _widened(_repo(tmp_path, other))
    if other == "function":
        assert widened == {"MmTileKernel": False, "Init": True}
    else:  # the class is named; the helper only in a comment
        assert widened == {"MmTileKernel": True, "Init": False}
