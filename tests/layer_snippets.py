"""Helpers for the cross-layer codemod tests: a tiny operator repository from inline
snippets, one codemod run on it, and the files it changes (before / after)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

from optrace.codemods.strip import strip_bytes
from optrace.engine.edits import Edit, EditSet, new_contents
from optrace.engine.plan import Plan
from optrace.pipeline.plan import plan_operator

OP = "demo_op"
KERNEL = """\
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)
{
    AscendC::SyncAll();
}
"""

Codemod = Callable[[Plan, str], list[Edit]]


def make_repo(tmp: Path, files: dict[str, str], kernel: str = KERNEL) -> Path:
    """`files` maps paths relative to the repository root to (dedented) contents; the
    operator lives in ops/demo_op with a kernel entry. Returns the operator directory."""
    root = tmp / "repo"
    (root / "ops" / OP / "op_kernel").mkdir(parents=True, exist_ok=True)
    (root / "optrace.toml").write_text("")
    (root / "ops" / OP / "op_kernel" / f"{OP}.cpp").write_text(kernel)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(textwrap.dedent(text).encode())
    return root / "ops" / OP


def run(codemod: Codemod, op_dir: Path, mode: str = "B") -> dict[str, str]:
    """{path relative to the repository root: new text} of the files the codemod changes;
    every change is checked to strip back to the original bytes."""
    plan = plan_operator(op_dir)
    root = plan.analysis.layers.repo_root
    out: dict[str, str] = {}
    for path, (old, new) in new_contents(EditSet(codemod(plan, mode))).items():
        assert strip_bytes(new, path) == old, f"{path}: strip does not give the original back"
        out[path.relative_to(root).as_posix()] = new.decode()
    return out


def dedent(text: str) -> str:
    return textwrap.dedent(text)
