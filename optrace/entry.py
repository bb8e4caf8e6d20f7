"""The console script's entry point: ``collect`` skips the CLI framework's import.

See ``optrace.runtime.collect_cli``: collect's speed is promised from process start, and
typer / click / rich / pydantic would be a third of it. Every other command, and any
collect invocation the fast parser does not recognise, runs the full CLI.
"""

from __future__ import annotations

import os
import sys


def finish(code: int) -> None:
    """Exit once collect is done, skipping interpreter teardown (freeing every module and
    array one by one costs ~10 ms, a twentieth of a typical collect). Safe here: the
    trace is closed and renamed, the worker threads joined, and nothing registers atexit
    work on this path; stdout and stderr are flushed first."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # `| head` closed the pipe; the code still counts
            pass
    os._exit(code)


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["collect"]:
        # No cyclic garbage collector in this short process: its passes over the objects
        # numpy's import creates were ~15 ms of a 0.2 s collect. Reference counting
        # still frees every array and row block; the decoder makes no cycles per rank
        # (peak memory over 64 ranks is the same with and without it).
        import gc

        gc.disable()
        from optrace.runtime.collect_cli import fast_main

        code = fast_main(argv[1:])
        if code is not None:
            finish(code)
            return  # only when a test replaced finish
        gc.enable()  # the full CLI below is an ordinary Python program
    from optrace.cli import main as full_main

    full_main()
