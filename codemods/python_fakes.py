from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from optrace.codemods.layer import Evidence, FileLayer, LayerModel
from optrace.codemods.python_files import fake_files, python_backend, python_layer_absent
from optrace.engine.discovery import Layers
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan


class PythonFakesLayer(FileLayer):
    NAME: ClassVar[str] = "python_fakes"
    DESCRIPTION: ClassVar[str] = "Python fake / Meta implementations: profiling_data returned last"
    MODE_B_ONLY: ClassVar[bool] = True

    def find(self, layers: Layers) -> list[Path]:
        if python_layer_absent(layers, self.NAME):
            return []  # without a repository search
        return fake_files(layers)

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return python_backend().fake_edits(plan, mode)

    def verify(self, model: LayerModel) -> list[Evidence]:
        return python_backend().fake_evidence(model)
