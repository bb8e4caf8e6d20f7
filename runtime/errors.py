"""The error type of the runtime half: bad input, always tied to the file it came from;
and the checks of the names and ids taken from such a file that raise it."""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any


class _Short(reprlib.Repr):
    """Values from a file shown in a message: a few levels only, since shared references
    can make a few hundred bytes of pickle a structure with 2**60 elements, and a JSON
    list in a message needs no million elements."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother = 3, 80, 80

    def repr_Decimal(self, value: Any, level: int) -> str:
        # A number read exactly (collect --merge) as it was written: 1E+30, not Decimal('1E+30').
        return self.repr_str(str(value), level)[1:-1]


_SHORT = _Short()


def shown(value: Any) -> str:
    """``repr(value)``, bounded in size and time whatever the value is."""
    return _SHORT.repr(value)


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


def checked_name(path: Path | str, value: str, what: str) -> str:
    """A label or track name from someone else's file: printable back as UTF-8 (no lone
    surrogate) and without NUL (which ends a C string in every viewer downstream);
    ProfilingInputError naming ``what`` otherwise."""
    if "\x00" in value:
        raise ProfilingInputError(path, f"{what} {value[:60]!r} holds a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ProfilingInputError(path, f"{what} {value[:60]!r} holds a lone surrogate, not text") from None
    return value


def checked_id(path: Path | str, value: object, what: str) -> object:
    """A trace event's pid or tid: an integer, a string (text: :func:`checked_name`) or
    absent (None). A list or an object is no id: it cannot key a track (a list is not
    hashable) and no viewer takes it."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str):
        return checked_name(path, value, what)
    raise ProfilingInputError(path, f"{what} must be an integer or a string, not {shown(value)}")


class MergeError(Exception):
    """``collect --merge``: the framework trace cannot be merged with these rank files
    (a launch without its kernel slice, a trace of unknown rank): exit 2."""
