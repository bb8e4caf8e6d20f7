"""The console script's entry point: ``collect``, the readers, ``check`` and ``plan`` skip the
CLI framework's import.

See ``optrace.cli.collect_fast``: collect's speed is promised from process start, and
typer / click / rich / pydantic would be a third of it; the readers' (inspect, report,
compare: readers_fast.py) is promised against collect's. Every other command, and any
invocation the fast parsers do not recognise, runs the full CLI.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable


def finish(code: int) -> None:
    """Exit once collect is done, skipping interpreter teardown (freeing every module and
    array one by one costs a twentieth of a typical collect). Safe here: the trace is
    closed and renamed, the worker threads joined, and nothing registers atexit work on
    this path; stdout and stderr are flushed first."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # `| head` closed the pipe; the code still counts
            pass
    os._exit(code)


def keep_freed_memory() -> None:
    """Ask glibc to keep freed memory for reuse instead of returning it to the system.

    By default a block over 128 KiB is mmap-ed and, once freed, unmapped; the next one
    comes back as fresh zeroed pages, one page fault each. collect allocates and frees
    some 10 MB of arrays per rank, and those faults and unmaps were a third of its time
    (perf: ``clear_page``, ``unmap_page_range``). Peak memory does not grow: the same
    blocks are reused rank after rank. Only for this short-lived process (the settings
    are process-wide); other C libraries keep theirs.
    """
    try:
        import ctypes  # numpy imports it anyway

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows)
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest allowed value on 64-bit
    mallopt(m_trim_threshold, 1 << 30)
    if sys.platform == "linux":
        huge_heap()


#: Heap made ready for transparent huge pages before collect starts (under the mmap
#: threshold above, so that it is heap and stays heap once freed).
HUGE_HEAP_BYTES = 24 << 20
_MADV_HUGEPAGE = 14  # Linux
_HUGE_PAGE = 2 << 20


def huge_heap() -> None:
    """Let the heap collect's arrays come from be backed by 2 MiB pages (where the system
    hands out transparent huge pages on request, as numpy asks for its own large arrays).

    A first collect touches fresh heap a page fault per 4 KiB page: ~3,100 faults in the
    8-rank benchmark's first call, most of the gap between a process's first collect and
    its next (bench/ab_decode.py prints them). Here glibc extends the heap once, the
    range is marked, and the block is freed (kept by the trim threshold above): the
    arrays then fault a 2 MiB page at a time (~170 faults). The same zeroed memory,
    fewer traps. Nothing is touched here; a system without huge pages ignores the mark.
    """
    import ctypes  # numpy imports it anyway

    libc = ctypes.CDLL(None)
    try:
        malloc, free, madvise = libc.malloc, libc.free, libc.madvise
    except AttributeError:
        return
    malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    madvise.restype, madvise.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    block = malloc(HUGE_HEAP_BYTES)
    if not block:
        return
    start = (block + _HUGE_PAGE - 1) & ~(_HUGE_PAGE - 1)
    length = (block + HUGE_HEAP_BYTES - start) & ~(_HUGE_PAGE - 1)
    if length > 0:
        madvise(start, length, _MADV_HUGEPAGE)  # a refusal (no THP) changes nothing
    free(block)


def prepare_collect_process() -> None:
    """Settings for a process that runs one collect and exits (see :func:`main`)."""
    # No cyclic garbage collector in this short process: its passes over the objects
    # numpy's import creates were a noticeable part of a collect. Reference counting
    # still frees every array and row block; the decoder makes no cycles per rank
    # (peak memory over 64 ranks is the same with and without it).
    gc.disable()
    # collect does no linear algebra, but numpy's import starts an OpenBLAS thread
    # per CPU, which spin for a while and, on 2 cores, took a large share of the CPU
    # from collect's own worker processes (perf stat).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    keep_freed_memory()


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["collect"]:
        prepare_collect_process()
        from optrace.cli.collect_fast import fast_main

        code = fast_main(argv[1:])
        if code is not None:
            finish(code)
            return  # only when a test replaced finish
        gc.enable()  # the full CLI below is an ordinary Python program
    # The commands import some 250 modules, and the collector's passes over what the
    # imports create were most of a one-operator `check`'s collection: import with it
    # off, then freeze what was imported (modules, classes, compiled patterns live until
    # exit anyway) so later passes skip it. The command itself runs with the collector on.
    if argv[:1] and argv[0] in ("inspect", "report", "compare"):
        prepare_collect_process()  # a reader is such a process too (readers_fast.py)
        from optrace.cli.readers_fast import fast_main as reader_main

        code = reader_main(argv[0], argv[1:])
        if code is not None:
            finish(code)
            return  # only when a test replaced finish
        gc.enable()
    gc.disable()
    if argv[:1] == ["check"]:
        check_main()
        return  # only when a test replaced finish
    if argv[:1] == ["plan"]:
        plan_main()
        return  # only when a test replaced finish
    from optrace.cli.app import main as full_main

    gc.freeze()
    gc.enable()
    full_main()


def check_main() -> None:
    """`check`, what pre-commit runs on every commit: its plain spellings without the CLI
    framework (check_fast.py), and once the report is written (the process pool,
    if any, shut down) out without freeing every module and parse tree one by one (see
    :func:`finish`)."""
    from optrace.cli.check_fast import fast_main
    from optrace.pipeline import check_output  # noqa: F401  (what check runs: imported before the freeze)

    _fast_command(fast_main)


def plan_main() -> None:
    """`plan`: its plain spellings without the CLI framework (plan_fast.py; a plan the
    user cache answers costs a walk of the repository, and typer's import and command
    building were a third of it), then out as :func:`check_main` goes."""
    from optrace.cli.plan_fast import fast_main

    _fast_command(fast_main)


def _fast_command(fast_main: Callable[[list[str]], int | None]) -> None:
    """Run a command's framework-free spelling (`fast_main` of the arguments after its
    name); where it returns None, the full CLI. Either way out through :func:`finish`."""
    argv = sys.argv[2:]
    gc.freeze()
    gc.enable()
    try:
        code = fast_main(argv)
    except KeyboardInterrupt:  # as click reports Ctrl-C in the full CLI
        print("\nAborted!", file=sys.stderr)
        code = 1
    except Exception:  # as the full CLI reports it (optrace.cli.app.main)
        import traceback  # only on this path: it would cost check's start-up otherwise

        from optrace.engine.codes import OT999

        print(f"optrace: {OT999} internal error:\n" + traceback.format_exc(), file=sys.stderr)
        code = 3
    if code is not None:
        finish(code)
        return
    from optrace.cli.app import main as full_main

    try:
        full_main()
    except SystemExit as done:
        status = done.code
        if isinstance(status, str):  # what sys.exit("message") would print
            print(status, file=sys.stderr)
        finish(status if isinstance(status, int) else (0 if status is None else 1))
        raise  # only when a test replaced finish
