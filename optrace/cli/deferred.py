"""What the pipeline is handed to import at first use: the CLI package's imports.

Imports inside functions belong to the CLI package, and two imports cost `check` (which
pre-commit runs on every commit) more than most operators need:

- LibCST and the Python layers' codemods, which take longer to import than the rest of a
  `check`: the Python layers ask `codemods.python_files.cst_half` for their LibCST halves
  (`codemods/<layer>_cst.py`), which the loader installed here imports the first time an
  operator needs one (its edits, or fakes and converters to read).
- importlib.metadata (the email package): the rule registry asks it for rule plugins only
  when a distribution on `sys.path` declares some (rules/registry.py); the reader
  installed here imports it then.

The optrace command installs these before it runs the pipeline, and so does the test
suite (tests/conftest.py); a library caller does the same (docs/config.md).
"""

from __future__ import annotations

import importlib
from typing import Any


def installed_entry_points(group: str) -> list[Any]:
    """importlib.metadata's entry points of `group` (imported only when asked)."""
    from importlib.metadata import entry_points

    return list(entry_points(group=group))


def install() -> None:
    """Hand the pipeline and the rule registry what they import at first use (cheap until
    then; `optrace --help` imports neither the pipeline nor LibCST)."""
    from optrace.codemods.python_files import use_cst_loader
    from optrace.rules.registry import use_entry_points_reader

    use_cst_loader(importlib.import_module)
    use_entry_points_reader(installed_entry_points)
