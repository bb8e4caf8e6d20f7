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
    """A binary file that becomes ``path`` when the block exits without an exception."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    # os.open with 0o666 lets the umask decide the mode, like a plain open() would
    # (tempfile.mkstemp would leave the final file 0600).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb", buffering=buffering) as handle:
            yield handle
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
