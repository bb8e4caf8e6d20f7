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

from optrace.runtime.regular import Identity as Identity
from optrace.runtime.regular import identity_of as identity_of
from optrace.runtime.regular import spelled_absolute as spelled_absolute

_local = threading.local()


@dataclass
class Noted:
    """What one thread's command said it went by: paths looked at, and files read by
    another process on its behalf (libclang in a child: no audit event reaches here)."""

    looked: set[str] = field(default_factory=set)
    read: set[str] = field(default_factory=set)
    # Folders the command made for itself and removes (the compile check's stand-in
    # headers): nothing in them is an input, and removing them opens them (rmtree).
    scratch: set[str] = field(default_factory=set)
    # What files read elsewhere were when read there (`read_elsewhere`).
    identities: dict[str, Identity] = field(default_factory=dict)

    def in_scratch(self, path: str) -> bool:
        """Whether `path` is one of `scratch` or inside one: by its normal form, as a
        scratch folder is a real one (`scratch/../x` is `x`, outside it)."""
        return any(inside_folder(path, folder) for folder in self.scratch)


def inside_folder(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or lies inside it, `..` taken as the system takes it in a
    folder of real directories (no link on the way: a folder optrace made)."""
    return os.path.join(os.path.normpath(path), "").startswith(os.path.join(os.path.normpath(folder), ""))


def looked_at(path: str | os.PathLike[str]) -> None:
    """Say that this thread's command decided something by `path`'s existence or by where
    it leads (found or not)."""
    noted: Noted | None = getattr(_local, "noted", None)
    if noted is not None:
        noted.looked.add(spelled_absolute(os.fspath(path)))


def read_elsewhere(path: str | os.PathLike[str],
                   identity: Identity | None = None) -> None:
    """Say that the result rests on `path`'s bytes, read by another process; `identity`:
    what the file was when that process read it (runtime/regular.py's `identity_of`)."""
    noted: Noted | None = getattr(_local, "noted", None)
    if noted is not None:
        spelled = spelled_absolute(os.fspath(path))
        noted.read.add(spelled)
        if identity is not None:
            noted.identities.setdefault(spelled, identity)


def scratch_folder(path: str | os.PathLike[str]) -> None:
    """Say that `path` is a folder of the command's own making, removed when it is done."""
    noted: Noted | None = getattr(_local, "noted", None)
    if noted is not None:
        noted.scratch.add(spelled_absolute(os.fspath(path)))


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
