"""A disk that fills up, for the tests: every file opened through ``open()`` for writing
in binary mode takes bytes from one shared budget, and once it is spent ``write`` raises
``ENOSPC`` as write(2) does on a full filesystem (a short write first, when the budget
ends inside a buffer). The tests cannot mount a small filesystem, and injecting the error
at the last system call (not inside optrace's own functions) exercises every layer of
buffering and clean-up above it: the buffered writer's flush on close, gzip's trailer,
the helper's rename.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
from typing import Any

import pytest


class FullDisk:
    """The bytes the disk still takes (``left``; ``None``: unbounded, to measure what a
    run writes), the bytes written so far (``used``), and every file opened, in order,
    with the bytes written into it (``files``: a file rewritten in place, as zip does
    its headers, counts every write)."""

    def __init__(self, budget: int | None) -> None:
        self.left = budget
        self.used = 0
        self.files: list[tuple[str, list[int]]] = []

    def take(self, wanted: int) -> int:
        """How many of ``wanted`` bytes fit; raises ENOSPC when none does."""
        if self.left is None:
            self.used += wanted
            return wanted
        if wanted and self.left == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        granted = min(wanted, self.left)
        self.left -= granted
        self.used += granted
        return granted


def fill_disk(monkeypatch: pytest.MonkeyPatch, budget: int | None) -> FullDisk:
    """From now on (until the test ends) binary writes through ``open()`` share ``budget``
    bytes. Reads, text files and descriptors opened otherwise are untouched."""
    disk = FullDisk(budget)
    real_open = builtins.open

    class _Raw(io.FileIO):
        def __init__(self, file: Any, mode: str) -> None:
            super().__init__(file, mode)
            self.counted = [0]
            disk.files.append((os.fsdecode(file), self.counted))

        def write(self, data: Any) -> int:
            view = memoryview(data).cast("B")
            granted = disk.take(len(view))
            self.counted[0] += granted
            return super().write(view[:granted]) if granted else 0

    def full_open(file: Any, mode: str = "r", buffering: int = -1, *args: Any, **kwargs: Any) -> Any:
        if "b" not in mode or not any(c in mode for c in "wxa+") or args or kwargs or not isinstance(
                file, (str, bytes, os.PathLike)):
            return real_open(file, mode, buffering, *args, **kwargs)
        raw = _Raw(file, mode.replace("b", ""))
        size = buffering if buffering > 1 else io.DEFAULT_BUFFER_SIZE
        if "+" in mode:
            return io.BufferedRandom(raw, size)
        return io.BufferedWriter(raw, size)

    monkeypatch.setattr(builtins, "open", full_open)
    return disk
