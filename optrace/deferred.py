"""What the pipeline is handed to import at first use: the CLI package's imports.

Imports inside functions belong to the CLI package (issue 12 §2), and two imports are
too costly for `check`, which pre-commit runs on every commit, to make at start-up:

- LibCST and the Python-layer codemods (~0.16 s, more than the rest of a `check`): the
  Python layers call a `PythonBackend` (codemods/python_files.py); the one installed
  here imports their LibCST halves (codemods/*_cst.py) the first time an operator needs
  it (its edits, or fakes and converters to read).
- importlib.metadata (~11 ms, the email package): the rule registry asks it for rule
  plugins only when a distribution on `sys.path` declares some (rules/registry.py); the
  reader installed here imports it then.

The optrace command installs these before it runs the pipeline, and so does the test
suite (tests/conftest.py); a library caller does the same (docs/config.md).
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the pipeline is imported when the backend is installed, not with the CLI
    from optrace.codemods.layer import Evidence, LayerModel
    from optrace.codemods.python_files import PythonBackend
    from optrace.engine.edits import Edit
    from optrace.engine.plan import Plan


@cache
def _loaded() -> PythonBackend:
    # At first use: LibCST's import.
    from optrace.codemods.graph_converters_cst import converter_evidence, graph_converter_edits
    from optrace.codemods.python_callers_cst import python_caller_edits
    from optrace.codemods.python_fakes_cst import fake_evidence, python_fake_edits
    from optrace.codemods.python_files import PythonBackend

    return PythonBackend(caller_edits=python_caller_edits, fake_edits=python_fake_edits,
                         converter_edits=graph_converter_edits, fake_evidence=fake_evidence,
                         converter_evidence=converter_evidence)


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


def installed_entry_points(group: str) -> list[Any]:
    """importlib.metadata's entry points of `group` (imported only when asked)."""
    from importlib.metadata import entry_points

    return list(entry_points(group=group))


def install() -> None:
    """Hand the pipeline and the rule registry what they import at first use (cheap until
    then; `optrace --help` imports neither the pipeline nor LibCST)."""
    from optrace.codemods.python_files import PythonBackend, use_python_backend
    from optrace.rules.registry import use_entry_points_reader

    use_python_backend(PythonBackend(
        caller_edits=_caller_edits, fake_edits=_fake_edits, converter_edits=_converter_edits,
        fake_evidence=_fake_evidence, converter_evidence=_converter_evidence))
    use_entry_points_reader(installed_entry_points)
