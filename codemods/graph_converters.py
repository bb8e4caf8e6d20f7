from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from optrace.codemods.layer import Evidence, FileLayer, LayerModel
from optrace.codemods.python_files import converter_files, python_backend, python_layer_absent
from optrace.engine.discovery import Layers
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan


class GraphConvertersLayer(FileLayer):
    NAME: ClassVar[str] = "graph_converters"
    DESCRIPTION: ClassVar[str] = "graph-mode converters (torchair): profiling_data the last GE output"
    MODE_B_ONLY: ClassVar[bool] = True

    def find(self, layers: Layers) -> list[Path]:
        if python_layer_absent(layers, self.NAME):
            return []  # without a repository search
        return converter_files(layers)

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return python_backend().converter_edits(plan, mode)

    def verify(self, model: LayerModel) -> list[Evidence]:
        return python_backend().converter_evidence(model)
