"""A reader's progress on the terminal: ``reading trace.pftrace: 42 %`` on stderr.

Only when stderr is a terminal (a pipe or a log file gets nothing), and only once the
read has taken a second (a small trace prints nothing). The line is rewritten in place
and cleared when the read ends, so what the command prints after it is unchanged.
The runtime keeps away from the CLI's rich (importlinter): plain text does here.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from .terminal import safe_text

#: Seconds before the first line, and between lines.
QUIET_FOR = 1.0
EVERY = 0.25


class Progress:
    """``update(done, total)`` as the work goes; ``close()`` at its end (clears the line)."""

    def __init__(self, what: str, stream: TextIO | None = None, *, force: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.what = safe_text(what)
        self.enabled = force or _is_terminal(self.stream)
        self.started = time.monotonic()
        self.shown = 0.0
        self.width = 0

    def update(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.started < QUIET_FOR or now - self.shown < EVERY:
            return
        self.shown = now
        share = f"{100 * done // total} %" if total > 0 else f"{done}"
        line = f"{self.what}: {share}"
        self.stream.write("\r" + line.ljust(self.width))
        self.stream.flush()
        self.width = len(line)

    def close(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def reading(path: Path | str) -> Progress:
    return Progress(f"reading {path}")
