"""The LibCST half of the Python layers, imported at first use.

The pipeline does not import LibCST: its Python layers call a `PythonBackend` they are
handed (pipeline/layer_python.py). LibCST and the Python-layer codemods take ~0.16 s to
import, more than the rest of a `check` (which pre-commit runs on every commit), and most
operators have no fakes or converters to read; so the CLI installs this backend, which
imports pipeline/layer_python_cst.py the first time an operator needs it. Imports inside
functions belong here, in the CLI package (issue 12 §2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the pipeline is imported when the backend is installed, not with the CLI
    from optrace.engine.edits import Edit
    from optrace.engine.plan import Plan
    from optrace.pipeline.layer_model import Evidence, LayerModel
    from optrace.pipeline.layer_python import PythonBackend


def _loaded() -> PythonBackend:
    from optrace.pipeline.layer_python_cst import BACKEND  # at first use: LibCST's import

    return BACKEND


def _caller_edits(plan: Plan, mode: str) -> list[Edit]:
    return _loaded().caller_edits(plan, mode)


def _fake_edits(plan: Plan, mode: str) -> list[Edit]:
    return _loaded().fake_edits(plan, mode)


def _converter_edits(plan: Plan, mode: str) -> list[Edit]:
    return _loaded().converter_edits(plan, mode)


def _fake_evidence(model: LayerModel) -> list[Evidence]:
    return _loaded().fake_evidence(model)


def _converter_evidence(model: LayerModel) -> list[Evidence]:
    return _loaded().converter_evidence(model)


def install() -> None:
    """Hand the pipeline the backend that imports LibCST at first use (cheap until then;
    `optrace --help` imports neither the pipeline nor LibCST)."""
    from optrace.pipeline.layer_python import PythonBackend, use_python_backend

    use_python_backend(PythonBackend(
        caller_edits=_caller_edits, fake_edits=_fake_edits, converter_edits=_converter_edits,
        fake_evidence=_fake_evidence, converter_evidence=_converter_evidence))
