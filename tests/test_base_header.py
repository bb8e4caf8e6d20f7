"""The runtime is one generated header beside the entry, included from the operator's own
`<op>_base.h` (or, without one, from each file with points), never from a vendored
sub-kernel's `*_base.h` the entry happens to include: fixture `vendored_base`, apply /
strip / check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.codemods.runtime_block import runtime_header_content, template

runner = CliRunner()
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "vendored_base"
OP_REL = "ops/moe_norm_route"


def _copy(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo)
    return repo


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".optrace" not in p.parts}


def test_the_plan_does_not_take_a_vendored_base_header_for_the_operators() -> None:
    res = runner.invoke(app, ["plan", str(FIXTURE / OP_REL), "--format", "json"])
    assert res.exit_code == 0, res.stderr
    op = json.loads(res.stdout)["operators"][0]
    assert op["layers"]["base_header"] == []  # none of its own yet: apply creates it
    assert "base_header" in op["missing_layers"]


def test_apply_writes_the_runtime_header_beside_the_entry_and_no_base_header(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    before = _tree(repo)
    kernel = repo / OP_REL / "op_kernel"
    res = runner.invoke(app, ["apply", str(repo / OP_REL), "--write"])
    assert res.exit_code == 0, res.stderr
    header = kernel / "optrace_runtime.h"
    assert header.read_bytes() == runtime_header_content()
    assert not (kernel / "moe_norm_route_base.h").exists()  # no base header of its own: none made
    after = _tree(repo)
    # The vendored sub-kernel's files are byte for byte as they were: no block, no include.
    for rel in ("rms_norm_base.h", "rms_norm.h", "add_rms_norm.h"):
        key = f"{OP_REL}/op_kernel/sub_kernels/{rel}"
        assert after[key] == before[key], rel
    assert sum(b"optrace-runtime-block v" in data for data in after.values()) == 1
    # The files with points include the runtime header themselves.
    for name in ("moe_norm_route.cpp", "moe_norm_route_kernel.h"):
        data = (kernel / name).read_text()
        if "TRACE_POINT" in data:
            assert '#include "optrace_runtime.h"  // optrace' in data, name
    # check reads it as a clean instrumented operator.
    res = runner.invoke(app, ["check", str(repo / OP_REL), "--no-compile", "--format", "json"])
    assert res.exit_code == 0, res.stdout
    report = json.loads(res.stdout)["operators"][0]
    assert report["instrumented"] is True
    g2 = next(g for g in report["gates"] if g["gate"] == "G2")
    assert g2["status"] == "pass"
    # A second apply changes nothing; strip gives every byte back and deletes the header it made.
    assert runner.invoke(app, ["apply", str(repo / OP_REL), "--check"]).exit_code == 0
    assert runner.invoke(app, ["strip", str(repo / OP_REL), "--write"]).exit_code == 0
    assert _tree(repo) == before
    assert not header.exists()


def test_check_fails_an_edited_runtime_header_and_apply_rewrites_it(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    assert runner.invoke(app, ["apply", str(repo / OP_REL), "--write"]).exit_code == 0
    header = repo / OP_REL / "op_kernel" / "optrace_runtime.h"
    header.write_bytes(header.read_bytes().replace(b"#define PROF_SIZE_PER_CORE 2048",
                                                   b"#define PROF_SIZE_PER_CORE 1024"))
    res = runner.invoke(app, ["check", str(repo / OP_REL), "--no-compile", "--format", "json"])
    assert res.exit_code == 1, res.stdout
    g2 = next(g for g in json.loads(res.stdout)["operators"][0]["gates"] if g["gate"] == "G2")
    assert g2["status"] == "fail" and "runtime header edited" in res.stdout
    assert runner.invoke(app, ["apply", str(repo / OP_REL), "--write"]).exit_code == 0
    assert header.read_bytes() == runtime_header_content()


def test_two_operators_get_the_same_runtime_header_bytes(tmp_path: Path) -> None:
    """One generated file for every operator and repository: a reviewer reads it once."""
    repo = _copy(tmp_path)
    assert runner.invoke(app, ["apply", str(repo / OP_REL), "--write"]).exit_code == 0
    other = tmp_path / "other"
    shutil.copytree(FIXTURE.parent / "msopgen_style", other)
    assert runner.invoke(app, ["apply", str(other / "moe_token_permute"), "--write"]).exit_code == 0
    first = (repo / OP_REL / "op_kernel" / "optrace_runtime.h").read_bytes()
    second = (other / "moe_token_permute" / "op_kernel" / "optrace_runtime.h").read_bytes()
    assert first == second == runtime_header_content()
    assert b"moe" not in first.split(b"\n", 1)[0]  # nothing of an operator in it


def test_an_existing_own_base_header_includes_the_runtime_not_the_vendored_one(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    kernel = repo / OP_REL / "op_kernel"
    # The operator's own base header, spelled in another case: still the operator's.
    own = kernel / "MoeNormRoute_base.h"
    own.write_text("#pragma once\n#include \"kernel_operator.h\"\n")
    entry = kernel / "moe_norm_route.cpp"
    entry.write_text('#include "MoeNormRoute_base.h"\n' + entry.read_text())
    before = _tree(repo)
    assert runner.invoke(app, ["apply", str(repo / OP_REL), "--write"]).exit_code == 0
    assert own.read_text() == ('#pragma once\n#include "kernel_operator.h"\n'
                               '#include "optrace_runtime.h"  // optrace\n')
    assert not (kernel / "moe_norm_route_base.h").exists()
    vendored = f"{OP_REL}/op_kernel/sub_kernels/rms_norm_base.h"
    assert _tree(repo)[vendored] == before[vendored]
    assert runner.invoke(app, ["strip", str(repo / OP_REL), "--write"]).exit_code == 0
    assert _tree(repo) == before


def test_a_block_an_older_optrace_pasted_becomes_the_include_never_doubled(tmp_path: Path) -> None:
    """A tree instrumented by an older optrace holds the runtime pasted into a header (here
    the vendored one): a second definition beside the generated header would define
    MoeTracing twice. The pasted block becomes the one-line include."""
    repo = _copy(tmp_path)
    kernel = repo / OP_REL / "op_kernel"
    vendored = kernel / "sub_kernels" / "rms_norm_base.h"
    old_block = template().replace(b"optrace-runtime-block v3", b"optrace-runtime-block v0", 1)
    assert old_block != template()  # an older block than the one apply writes
    vendored.write_bytes(vendored.read_bytes().replace(b"#endif\n", old_block + b"#endif\n"))
    assert runner.invoke(app, ["apply", str(repo / OP_REL), "--write"]).exit_code == 0
    assert old_block not in vendored.read_bytes()
    assert b'#include "../optrace_runtime.h"  // optrace\n#endif\n' in vendored.read_bytes()
    assert sum(b"optrace-runtime-block v" in d for d in _tree(repo).values()) == 1


ARMED_ENTRY = """\
#if defined(__NPU_ARCH__) && (__NPU_ARCH__ == 3510)
#include "kernel_operator.h"
#include "arch35/steps.h"
#else
#include "kernel_operator.h"
#include "steps.h"
#endif

extern "C" __global__ __aicore__ void armed_op(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
#if defined(__NPU_ARCH__) && (__NPU_ARCH__ == 3510)
    Steps op;
    op.Init(x);
    op.Process();
#else
    Steps op;
    op.Init(x);
    op.Process();
#endif
}
"""
# The same arms, each going on past its includes with a `using` and a launch macro before
# the `#endif` (ops-nn's pooling kernels): the head ends at the `using`, the include still
# goes after the `#endif`.
ARMED_ENTRY_WITH_DECLARATIONS = ARMED_ENTRY.replace(
    '#include "steps.h"\n#endif\n',
    '#include "steps.h"\n\nusing namespace AscendC;\nnamespace ops = AscendC;\n\n'
    "#define RUN_STEPS(op)  \\\n    do {           \\\n        op.Init(x); \\\n"
    "        op.Process();  \\\n    } while (0)\n#endif\n")
STEPS = """\
#pragma once
class Steps {
public:
    __aicore__ inline void Init(GM_ADDR x) { n_ = 4; }
    __aicore__ inline void Process() { Copy(); AscendC::SyncAll(); Copy(); }
private:
    __aicore__ inline void Copy()
    { for (int i = 0; i < n_; ++i) { AscendC::DataCopy(a_, b_, n_); a_ += 1; b_ += 1; } }
    int n_ = 0;
    AscendC::LocalTensor<float> a_;
    AscendC::LocalTensor<float> b_;
};
"""


@pytest.mark.parametrize("entry", [ARMED_ENTRY, ARMED_ENTRY_WITH_DECLARATIONS],
                         ids=["includes", "declarations"])
def test_an_entry_whose_includes_are_all_in_arch_arms_includes_the_runtime_after_them(tmp_path: Path,
                                                                                      entry: str) -> None:
    """Every include of the entry in an `#if` / `#else` arm: the runtime's include goes
    after the `#endif`, so the points of every arm see it, and check accepts the output
    (it was put in the last arm, and check's reach test failed G2 on apply's output).
    Declarations and a launch macro after the includes, inside the arm, hold no points:
    the include still goes after the `#endif` (ops-nn max_pool3d_grad_with_argmax)."""
    repo = tmp_path / "repo"
    op = repo / "armed_op"
    kernel = op / "op_kernel"
    (kernel / "arch35").mkdir(parents=True)
    (repo / "optrace.toml").write_text("# a repository of one operator\n")
    (kernel / "armed_op.cpp").write_text(entry)
    (kernel / "steps.h").write_text(STEPS)
    (kernel / "arch35" / "steps.h").write_text(STEPS)
    before = _tree(tmp_path)
    res = runner.invoke(app, ["apply", str(op), "--write", "--mode", "A"])
    assert res.exit_code == 0, res.stderr
    entry = (kernel / "armed_op.cpp").read_text()
    assert entry.index('#include "optrace_runtime.h"') > entry.index("#endif"), entry
    res = runner.invoke(app, ["check", str(op), "--no-compile"])
    assert res.exit_code == 0, res.stdout + res.stderr
    assert runner.invoke(app, ["strip", str(op), "--write"]).exit_code == 0
    assert _tree(tmp_path) == before


# A kernel built for one architecture only: the whole file, includes and code, inside one
# `#if` closed by the file's last line (ops-nn's arch35-only matmul kernels).
WRAPPED_ENTRY = """\
// Built for one architecture only.
#if defined(__NPU_ARCH__) && (__NPU_ARCH__ == 3510)

#include "kernel_operator.h"
#include "steps.h"

using namespace AscendC;

extern "C" __global__ __aicore__ void wrapped_op(GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    Steps op;
    op.Init(x);
    op.Process();
}

#endif  // __NPU_ARCH__ == 3510
"""


def test_a_file_wrapped_whole_in_one_if_includes_the_runtime_inside_it(tmp_path: Path) -> None:
    """The `#if` that opens before the first include and closes at the file's end holds
    every point the file can have: an include inside it, after the last include, reaches
    them all, like an include guard. check accepts it (G2 failed on apply's own output),
    a second apply writes nothing, strip restores every byte."""
    repo = tmp_path / "repo"
    op = repo / "wrapped_op"
    kernel = op / "op_kernel"
    kernel.mkdir(parents=True)
    (repo / "optrace.toml").write_text("# a repository of one operator\n")
    (kernel / "wrapped_op.cpp").write_text(WRAPPED_ENTRY)
    (kernel / "steps.h").write_text(STEPS)
    before = _tree(tmp_path)
    res = runner.invoke(app, ["apply", str(op), "--write", "--mode", "A"])
    assert res.exit_code == 0, res.stderr
    entry = (kernel / "wrapped_op.cpp").read_text()
    assert entry.count('#include "optrace_runtime.h"') == 1, entry
    at = entry.index('#include "optrace_runtime.h"')
    assert entry.index('#include "steps.h"') < at < entry.index("using")
    res = runner.invoke(app, ["check", str(op), "--no-compile"])
    assert res.exit_code == 0, res.stdout + res.stderr
    applied = _tree(tmp_path)
    assert runner.invoke(app, ["apply", str(op), "--write", "--mode", "A"]).exit_code == 0
    assert _tree(tmp_path) == applied
    assert runner.invoke(app, ["strip", str(op), "--write"]).exit_code == 0
    assert _tree(tmp_path) == before
