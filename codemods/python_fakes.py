from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

from optrace.codemods.layer import (
    EXAMPLE_TORCH,
    Carry,
    Evidence,
    FileLayer,
    LayerExample,
    LayerModel,
    carry_of,
)
from optrace.codemods.python_files import (
    EditsFn,
    EvidenceFn,
    cst_half,
    fake_files,
    parsed_by_ast,
    python_layer_absent,
)
from optrace.codemods.torch_adapter import hand_instrumented
from optrace.engine.discovery import LayerFile, Layers, SearchContext
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan

_EXAMPLE_FAKE = """\
import torch


@torch.library.register_fake("demo_lib::demo_op")
def demo_op_fake(x):
    return torch.empty_like(x)
"""


def _fake_re(any_name: bytes) -> re.Pattern[bytes]:
    op_ref = (rb"(?:['\"](?:\w+::)?" + any_name + rb"(?:\.\w+)?['\"]|\btorch\.ops\.\w+\."
              + any_name + rb"\b)")
    return re.compile(rb"\b(?:register_fake|impl_abstract)\s*\(\s*" + op_ref
                      + rb"|\bimpl\s*\([^)]*" + op_ref + rb"[^)]*['\"]Meta['\"]")


class PythonFakesLayer(FileLayer):
    NAME: ClassVar[str] = "python_fakes"
    DESCRIPTION: ClassVar[str] = "Python fake / Meta implementations: profiling_data returned last"
    MODE_B_ONLY: ClassVar[bool] = True
    FOUND_KEY: ClassVar[str | None] = "python_fakes"
    TITLE: ClassVar[str] = "Python fake / Meta impls"
    OPTIONAL: ClassVar[bool] = True
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (LayerExample(
        path="python/demo_lib/fakes.py",
        files={**EXAMPLE_TORCH, "python/demo_lib/fakes.py": _EXAMPLE_FAKE},
        changes=(
            ("import torch\n", "import torch\n_OPTRACE_PROFILING_NUMEL = (32 + 64) * 2048  # optrace\n"),
            ("    return torch.empty_like(x)\n",
             "    # optrace-edit 1\n"
             "    return torch.empty_like(x), x.new_empty((_OPTRACE_PROFILING_NUMEL,), dtype=torch.int64)\n"),
        ),
    ),)

    def search(self, ctx: SearchContext) -> list[LayerFile]:
        """Python files outside the operator registering a fake / Meta implementation of
        it: the op named as a string ("ns::op", "op" for lib.impl) or torch.ops.ns.op."""
        pattern = _fake_re(ctx.any_name)
        return [ctx.at(path, data, pattern.pattern, "fake / Meta impl of the op")
                for path, data in ctx.python_candidates() if pattern.search(data)]

    def find(self, layers: Layers) -> list[Path]:
        if python_layer_absent(layers, self.NAME):
            return []  # without a repository search
        return fake_files(layers)

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        edits: EditsFn = cst_half(__name__).python_fake_edits
        return edits(plan, mode)

    def carries(self, plan: Plan, mode: str) -> Carry:
        """Nothing without files; in mode A (or a kernel instrumented by hand) nothing once
        the files parse (`ast`, no LibCST); else the edits computed."""
        files = self.find(plan.analysis.layers)
        if not files:
            return Carry()
        if (mode != "B" or hand_instrumented(plan)) and parsed_by_ast(files) is not None:
            return Carry()
        return carry_of(self.edits(plan, mode, None))

    def verify(self, model: LayerModel) -> list[Evidence]:
        evidence: EvidenceFn = cst_half(__name__).fake_evidence
        return evidence(model)
