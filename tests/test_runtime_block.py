"""The runtime block is versioned: apply upgrades an older block in place, and only it."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from optrace.cli import app
from optrace.codemods.runtime_block import template

runner = CliRunner()

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_older_block_is_upgraded_in_place(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "msopgen_style", tmp_path / "m")
    op = tmp_path / "m" / "moe_token_permute"
    runner = CliRunner()
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    base = op / "op_kernel" / "moe_token_permute_base.h"
    current = base.read_bytes()
    block = template()
    assert block in current
    # An "older optrace" left a v0 block with different content.
    old_block = block.replace(b"optrace-runtime-block v2", b"optrace-runtime-block v0", 1).replace(
        b"#define PROF_SIZE_PER_CORE 2048", b"#define PROF_SIZE_PER_CORE 1024")
    base.write_bytes(current.replace(block, old_block))
    res = runner.invoke(app, ["apply", str(op)])
    assert res.exit_code == 0
    assert "-// optrace-runtime-block v0" in res.stdout and "+// optrace-runtime-block v2" in res.stdout
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    assert base.read_bytes() == current  # exactly the current block, the rest untouched
    assert runner.invoke(app, ["apply", str(op), "--check"]).exit_code == 0


def test_the_block_is_included_before_the_first_point_not_after_a_trailing_include(tmp_path: Path) -> None:
    """A header that includes its variant's implementation at its end (code above it, the
    points in that code): the runtime block's include goes with the head includes,
    unconditionally (not into the `#if` around the last one), so every point compiles."""
    kernel = tmp_path / "norm_grad" / "op_kernel"
    kernel.mkdir(parents=True)
    (tmp_path / ".git").mkdir()
    (kernel / "norm_grad.cpp").write_text(
        '#include "norm_grad.h"\n'
        'extern "C" __global__ __aicore__ void norm_grad(GM_ADDR x, GM_ADDR y, GM_ADDR workspace,\n'
        "                                                GM_ADDR tiling)\n"
        "{\n    NormGrad op;\n    op.Init(x, y, workspace);\n    op.Process();\n}\n")
    loop_body = "".join(f"            Step{i}(c);\n" for i in range(4))
    steps = "".join(f"    __aicore__ inline void Step{i}(int c)\n    {{\n" + "        acc += c;\n" * 9
                    + "    }\n" for i in range(4))
    (kernel / "norm_grad.h").write_text(
        "/* licence\n   #include \"not_an_include.h\" */\n#ifndef NORM_GRAD_H\n#define NORM_GRAD_H\n"
        '#include "kernel_operator.h"\n#if defined(HAS_TILING)\n#include "norm_grad_tiling.h"\n#endif\n'
        "class NormGrad {\npublic:\n"
        "    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, GM_ADDR workspace) {}\n"
        "    __aicore__ inline void Process()\n    {\n"
        "        for (int groupIdx = 0; groupIdx < n; ++groupIdx) {\n"
        + loop_body + "        }\n    }\n" + steps + "    int acc = 0;\n    int n = 4;\n};\n"
        '#if defined(BF16)\n#include "norm_grad_bf16.h"\n#endif\n#endif\n')
    before = (kernel / "norm_grad.h").read_bytes()
    assert runner.invoke(app, ["apply", str(tmp_path / "norm_grad"), "--write"]).exit_code == 0
    text = (kernel / "norm_grad.h").read_text()
    include = text.index('#include "norm_grad_base.h"  // optrace\n')
    assert text.index("MoeTracing(") > include
    assert text[:include].endswith('#include "kernel_operator.h"\n')
    res = runner.invoke(app, ["check", str(tmp_path / "norm_grad"), "--format", "json"])
    assert "OT420" not in res.stdout and '"compile_checked_files": 0' not in res.stdout
    assert runner.invoke(app, ["strip", str(tmp_path / "norm_grad"), "--write"]).exit_code == 0
    assert (kernel / "norm_grad.h").read_bytes() == before
