"""`optrace` run in-process on a thread with a time limit, for the tests of hostile and
oversized inputs: a read that blocks (a FIFO) fails the test instead of hanging it, and
an exception that escapes is exit 3, as the console script makes it."""

from __future__ import annotations

import threading
from pathlib import Path

from typer.testing import CliRunner

from optrace.cli.app import app


def run_cli(*args: object, timeout: float = 180) -> tuple[int, str]:
    """(exit code, stdout + stderr) of `optrace ARGS`."""
    box: list[tuple[int, str]] = []

    def run() -> None:
        res = CliRunner().invoke(app, [str(a) for a in args])
        crashed = res.exception is not None and not isinstance(res.exception, SystemExit)
        box.append((3 if crashed else res.exit_code, res.stdout + res.stderr + (
            f"\nTraceback: {res.exception!r}" if crashed else "")))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    assert box, f"optrace {' '.join(map(str, args))} did not finish in {timeout} s (a blocking read?)"
    return box[0]


def assert_refused(code: int, out: str, path: Path, words: str) -> None:
    """Refused as bad input: exit 2, the file named, no traceback."""
    assert "Traceback" not in out and "internal error" not in out, out[-2000:]
    assert code == 2, f"exit {code}:\n{out[-2000:]}"
    assert f"{path}: " in out and words in out, out[-2000:]
