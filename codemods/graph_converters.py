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
    converter_files,
    cst_half,
    parsed_by_ast,
    python_layer_absent,
)
from optrace.codemods.torch_adapter import hand_instrumented
from optrace.engine.discovery import LayerFile, Layers, SearchContext
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan

_EXAMPLE_CONVERTER = """\
import torch
from torchair.ge_concrete_graph import ge_apis as ge
from torchair.ge_concrete_graph.fx2ge_converter import register_fx_node_ge_converter


@register_fx_node_ge_converter(torch.ops.demo_lib.demo_op.default)
def convert_demo_op(x, meta_outputs=None):
    return ge.custom_op("DemoOp", inputs={"x": x}, outputs=["y"])
"""


class GraphConvertersLayer(FileLayer):
    NAME: ClassVar[str] = "graph_converters"
    DESCRIPTION: ClassVar[str] = "graph-mode converters (torchair): profiling_data the last GE output"
    MODE_B_ONLY: ClassVar[bool] = True
    FOUND_KEY: ClassVar[str | None] = "graph_converters"
    TITLE: ClassVar[str] = "graph-mode converters (torchair)"
    OPTIONAL: ClassVar[bool] = True
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (LayerExample(
        path="python/demo_lib/converters.py",
        files={**EXAMPLE_TORCH, "python/demo_lib/converters.py": _EXAMPLE_CONVERTER},
        changes=(('    return ge.custom_op("DemoOp", inputs={"x": x}, outputs=["y"])\n',
                  "    # optrace-edit 1\n"
                  '    return ge.custom_op("DemoOp", inputs={"x": x}, outputs=["y", "profiling_data"])\n'),),
    ),)

    def search(self, ctx: SearchContext) -> list[LayerFile]:
        """Python files outside the operator registering a torchair converter of it."""
        pattern = re.compile(rb"\bregister_fx_node_ge_converter\s*\(\s*torch\.ops\.\w+\."
                             + ctx.any_name + rb"\b")
        return [ctx.at(path, data, pattern.pattern, "torchair converter")
                for path, data in ctx.python_candidates() if pattern.search(data)]

    def find(self, layers: Layers) -> list[Path]:
        if python_layer_absent(layers, self.NAME):
            return []  # without a repository search
        return converter_files(layers)

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        edits: EditsFn = cst_half(__name__).graph_converter_edits
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
        evidence: EvidenceFn = cst_half(__name__).converter_evidence
        return evidence(model)
