"""The error type of the runtime half: bad input, always tied to the file it came from."""

from __future__ import annotations

from pathlib import Path


class ProfilingInputError(Exception):
    """A rank file, point map or trace that cannot be used as given.

    The CLI prints it as ``path: message`` (exit 2) without a traceback; library callers
    get the same two parts as attributes.
    """

    def __init__(self, path: str | Path, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)
        self.message = message

    def __reduce__(self) -> tuple[type[ProfilingInputError], tuple[str, str]]:
        # Pickled by collect's worker processes; the default would call __init__ with
        # the one formatted argument.
        return (type(self), (self.path, self.message))


class MergeError(Exception):
    """``collect --merge``: the framework trace cannot be merged with these rank files
    (a launch without its kernel slice, a trace of unknown rank): exit 2."""
