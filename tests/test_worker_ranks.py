"""Samples and tests that start their ranks as worker processes (fixtures/worker_ranks):
`apply` makes the profiling paths absolute before every worker start it finds, and
`check`'s G5 asks the same question of the same calls (`python_files.starts_workers`), so
check passes on what apply wrote; strip gives every byte back.

Also a Meta kernel registered in a file of its own (`csrc/moe_expert_scale_meta.cpp`): it
gets the launcher's extra output, on the meta device."""

# ruff: noqa: E501  (inline snippets are verbatim code)

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest
from test_host_layers import cli, evidence, gates, snapshot

from optrace.codemods.python_files import starts_workers, workers_block

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "worker_ranks"
OP = "csrc/ops/moe_expert_scale"


def _copy(tmp_path: Path) -> Path:
    repo = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, repo)
    return repo


def _worker_lines(data: str) -> list[int]:
    """Lines of the calls starting workers, read independently of the layer's own reader."""
    lines = []
    for node in ast.walk(ast.parse(data)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("spawn", "Process", "Pool", "ProcessPoolExecutor"):
                lines.append(node.lineno)
    return sorted(lines)


def _apply_check_strip(repo: Path, extra: dict[str, str] | None = None) -> dict[str, dict[str, object]]:
    for rel, text in (extra or {}).items():
        (repo / rel).write_text(text)
    before = snapshot(repo)
    op = repo / OP
    code, _, err = cli("apply", str(op), "--write")
    assert code == 0, err
    code, out, err = cli("check", str(op), "--no-compile")
    assert code == 0, out + err
    g = gates(op)
    code, _, err = cli("strip", str(op), "--write")
    assert code == 0, err
    assert snapshot(repo) == before
    return g


def test_every_worker_start_gets_absolute_paths_and_check_passes(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    g = _apply_check_strip(repo)
    assert g["G5"]["status"] == "pass"
    proven = {(Path(p).name, note) for p, _l, note, ok in evidence(g["G5"]) if ok}
    for rel in ("tests/test_moe_expert_scale_ranks.py", "examples/run_moe_expert_scale.py"):
        starts = _worker_lines((FIXTURE / rel).read_text())
        assert starts, rel
        # each start, by its line in the applied file, is covered by a resolve before it
        notes = [n for name, n in proven if name == Path(rel).name]
        assert len(notes) == len(starts), (rel, notes)


def test_the_resolve_sits_in_the_workers_function_before_them(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    op = repo / OP
    assert cli("apply", str(op), "--write")[0] == 0
    text = (repo / "tests/test_moe_expert_scale_ranks.py").read_text()
    tree = ast.parse(text)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "test_moe_expert_scale_processes")
    body = ast.get_source_segment(text, fn) or ""
    assert body.index(".expanduser().resolve()") < body.index("ctx.Process(")
    # a Process runs until joined: the parent's collector, if any, is after the joins
    example = (repo / "examples/run_moe_expert_scale.py").read_text()
    assert example.count("optrace\", \"collect\"") == 1
    assert example.index("\"collect\"") > example.index("    pool.join()")


VARIANTS = {
    "bare_pool": ("from multiprocessing import Pool\nimport torch\n\n\n"
                  "def run(r):\n    return torch.ops._C.moe_expert_scale(torch.ones(2, 2), torch.ones(2))\n\n\n"
                  "def test_pool():\n    with Pool(2) as p:\n        p.map(run, range(2))\n"),
    "executor_in_elif": ("import concurrent.futures as cf\nimport os\nimport torch\n\n\n"
                         "def run(r):\n    return torch.ops._C.moe_expert_scale(torch.ones(2, 2), torch.ones(2))\n\n\n"
                         "def test_executor():\n    if os.environ.get('SERIAL'):\n        run(0)\n"
                         "    elif cf.ProcessPoolExecutor(2).map(run, range(2)):\n        pass\n"),
    "start_processes_one_line": ("import torch\nimport torch.multiprocessing as mp\n\n\n"
                                 "def run(r):\n    torch.ops._C.moe_expert_scale(torch.ones(2, 2), torch.ones(2))\n\n\n"
                                 "def test_ranks():\n    for n in (1, 2): mp.start_processes(run, nprocs=n)\n"),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_worker_start_variants(tmp_path: Path, name: str) -> None:
    repo = _copy(tmp_path)
    rel = f"tests/test_variant_{name}.py"
    g = _apply_check_strip(repo, {rel: VARIANTS[name]})
    mine = [(line, ok) for p, line, _n, ok in evidence(g["G5"]) if p.endswith(Path(rel).name)]
    assert mine and all(ok for _l, ok in mine), mine


def test_one_predicate_for_apply_and_check() -> None:
    assert starts_workers("torch.multiprocessing.spawn") and workers_block("mp.spawn")
    assert starts_workers(".Process") and not workers_block(".Process")
    assert starts_workers("multiprocessing.Pool") and starts_workers("Pool")
    assert not starts_workers("subprocess.Popen") and not starts_workers("pexpect.spawn")
    assert not starts_workers("threading.Thread")


def test_meta_kernel_in_its_own_file_gets_the_extra_output(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    op = repo / OP
    assert cli("apply", str(op), "--write")[0] == 0
    meta = (repo / "csrc/moe_expert_scale_meta.cpp").read_text()
    launcher = (op / "op_host/moe_expert_scale.cpp").read_text()
    for text in (meta, launcher):  # the grown type, wherever the review width breaks it
        assert "std::tuple</*>optrace*/at::Tensor/*optrace<*/, at::Tensor>" in re.sub(r",\s+", ", ", text)
    assert "device(at::kMeta)" in meta and "profilingData}" in meta
    g = gates(op)
    assert g["G2"]["status"] == "pass"
    assert any(p.endswith("moe_expert_scale_meta.cpp") and ok for p, _l, _n, ok in evidence(g["G2"]))


def test_a_meta_kernel_left_unedited_fails_g2(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    op = repo / OP
    meta = repo / "csrc/moe_expert_scale_meta.cpp"
    before = meta.read_bytes()
    assert cli("apply", str(op), "--write")[0] == 0
    meta.write_bytes(before)  # as if the Meta file had not been found
    code, out, err = cli("check", str(op), "--no-compile")
    assert code == 1, out + err
    g = gates(op)
    bad = [(p, n) for p, _l, n, ok in evidence(g["G2"]) if not ok]
    assert bad and all(p.endswith("moe_expert_scale_meta.cpp") for p, _n in bad), bad
    assert "Meta kernel `ExpertScaleMeta` does not return the profiling tensor" in bad[0][1]


OTHER_EXTENSION = """\
// Another extension's op, built from its own copy of the kernel; it names this op's node.
#include <torch/library.h>
#include <ATen/ATen.h>
at::Tensor ScaleV2Npu(const at::Tensor &x, const at::Tensor &s)
{
    const char *nodeType = "moe_expert_scale";
    (void)nodeType;
    return x * s;
}
TORCH_LIBRARY_FRAGMENT(ext, m)
{
    m.def("moe_expert_scale_v2(Tensor x, Tensor s) -> Tensor");
}
TORCH_LIBRARY_IMPL(ext, PrivateUse1, m) { m.impl("moe_expert_scale_v2", ScaleV2Npu); }
"""


def test_another_extensions_registration_naming_the_op_is_said_and_left(tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    other = repo / "examples/ext/scale_v2_torch.cpp"
    other.parent.mkdir(parents=True)
    g = _apply_check_strip(repo, {"examples/ext/scale_v2_torch.cpp": OTHER_EXTENSION})
    notes = [(n, ok) for p, _l, n, ok in evidence(g["G2"]) if p.endswith("scale_v2_torch.cpp")]
    assert notes == [("registers `moe_expert_scale_v2`, not this op (its names: moe_expert_scale): another "
                      "operator's registration, left as it is", True)], notes


META_APART = """\
// The Meta kernel's body, registered from torch_binding.cpp.
#include <ATen/ATen.h>

namespace fused_ops {
at::Tensor ExpertScaleMeta(const at::Tensor &x, const at::Tensor &scale)
{
    return at::empty_like(x);
}
}  // namespace fused_ops
"""
BINDING_WITH_META = """\
#include <torch/extension.h>
#include <torch/library.h>
#include "ops.h"

namespace fused_ops {
at::Tensor ExpertScaleMeta(const at::Tensor &x, const at::Tensor &scale);
}

TORCH_LIBRARY(_C, ops)
{
    ops.def("moe_expert_scale(Tensor x, Tensor scale) -> Tensor");
    ops.impl("moe_expert_scale", torch::kPrivateUse1, &fused_ops::moe_expert_scale);
}

TORCH_LIBRARY_IMPL(_C, Meta, m)
{
    m.impl("moe_expert_scale", &fused_ops::ExpertScaleMeta);
}
"""


def test_a_meta_kernel_defined_apart_from_its_registration_is_found_and_edited(tmp_path: Path) -> None:
    """Registered by the op's name in the binding, defined in `*_meta.cpp`: the definition
    is found by the registered function's name and gets the extra output; the declaration
    beside the registration follows (the registration layer's header rule)."""
    repo = _copy(tmp_path)
    g = _apply_check_strip(repo, {"csrc/moe_expert_scale_meta.cpp": META_APART,
                                  "csrc/torch_binding.cpp": BINDING_WITH_META})
    assert any(p.endswith("moe_expert_scale_meta.cpp") and "Meta kernel `ExpertScaleMeta` returns" in n and ok
               for p, _l, n, ok in evidence(g["G2"])), evidence(g["G2"])
