"""What a command went by that the user cache cannot see it go by, for whoever keeps the
command's inputs: paths it decided by without reading them, files read by another process.

A result can rest on where a path leads as much as on the bytes read from it. An include
is resolved to the first candidate that exists, so every candidate before it is an input
(one created later would be found instead), and a header reached through a symbolic link
is in the repository or not by where the link points, not by its bytes. Opening a file
or listing a folder raises an audit event the user cache records (optrace/cli/
result_cache.py); `os.path.lexists` and `realpath` raise none, and nothing a child process
does raises one here (libclang's compile), so the code that decides by them says so. The
recorder takes what is at each path looked at when the command ends (nothing, or its kind
and where it leads) and the digest of each file read elsewhere; a later lookup compares.

Per thread, as the cache's recording is; noting does nothing while nobody records.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

_local = threading.local()


def spelled_absolute(path: str) -> str:
    """`path` made absolute as the system will follow it: `os.path.abspath` would also drop
    `x/..` by its text, where the system follows `x` first (a link leads elsewhere)."""
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


@dataclass
class Noted:
    """What one thread's command said it went by: paths looked at, and files read by
    another process on its behalf (libclang in a child: no audit event reaches here)."""

    looked: set[str] = field(default_factory=set)
    read: set[str] = field(default_factory=set)


def looked_at(path: str | os.PathLike[str]) -> None:
    """Say that this thread's command decided something by `path`'s existence or by where
    it leads (found or not)."""
    noted: Noted | None = getattr(_local, "noted", None)
    if noted is not None:
        noted.looked.add(spelled_absolute(os.fspath(path)))


def read_elsewhere(path: str | os.PathLike[str]) -> None:
    """Say that the result rests on `path`'s bytes, read by another process."""
    noted: Noted | None = getattr(_local, "noted", None)
    if noted is not None:
        noted.read.add(spelled_absolute(os.fspath(path)))


@contextmanager
def noting() -> Iterator[Noted]:
    """Collect what this thread's code says it went by while the block runs."""
    previous = getattr(_local, "noted", None)
    noted = Noted()
    _local.noted = noted
    try:
        yield noted
    finally:
        _local.noted = previous
