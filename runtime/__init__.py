"""optrace.runtime: what runs next to the device — save, read, decode, trace, report, compare.

Importing this package is cheap: `save_profiling_data` (numpy) loads on first use, so
the CLI starts fast for commands that never touch a buffer. Reading traces needs numpy
only (no torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .errors import ProfilingInputError
    from .save import save_profiling_data

__all__ = ["ProfilingInputError", "save_profiling_data"]


def __getattr__(name: str) -> Any:
    if name == "save_profiling_data":
        from .save import save_profiling_data

        return save_profiling_data
    if name == "ProfilingInputError":
        from .errors import ProfilingInputError

        return ProfilingInputError
    raise AttributeError(name)
