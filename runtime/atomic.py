"""Atomic file replacement: write beside the target, then ``os.replace``.

Ranks saving from spawned processes, or a collect interrupted half-way, must never leave
a half-written file under the final name; a reader sees the old file or the new one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def atomic_output(path: str | Path, buffering: int = 1 << 20) -> Iterator[IO[bytes]]:
    """A binary file that becomes ``path`` when the block exits without an exception
    (its ``name`` is the temporary file's path, for other processes writing into it)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    # "x": created here or refused (O_EXCL); the umask decides the mode as for any
    # open() (tempfile.mkstemp would leave the final file 0600).
    handle = open(tmp, "xb", buffering=buffering)
    try:
        with handle:
            yield handle
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
