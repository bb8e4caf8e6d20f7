"""What every command shares, without the CLI framework: exit codes, output targets, the
process pool, the help of shared options.

Exit codes (docs/cli.md): 0 clean (warnings allowed), 1 findings / changes needed,
2 bad usage or bad input, 3 internal error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from optrace.engine.codes import OT030
from optrace.engine.diagnostics import shown_path
from optrace.runtime.terminal import safe_text

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3

_T = TypeVar("_T")


def err(message: str) -> None:
    """A line on stderr, safe for a terminal: what came from input data (labels, file
    names; a name that is not UTF-8 shows its bytes as `\\xff`) cannot act on it."""
    text = safe_text(message)
    try:
        print(text, file=sys.stderr)
    except UnicodeEncodeError:  # a stderr that cannot encode a `✓`
        sys.stderr.flush()
        sys.stderr.buffer.write((text + "\n").encode("utf-8", "backslashreplace"))
        sys.stderr.flush()


def apply_config_trust(trusted: bool) -> None:
    """`--trust-config` for this process (and, through `run_parallel`, its workers)."""
    if trusted or "optrace.engine.config" in sys.modules:
        from optrace.engine.config import set_config_trust

        set_config_trust(trusted)


def start_command(trusted: bool) -> None:
    """What every command sets up first: the config's trust for this command, the files
    it reads tracked from none (its outputs must not replace one of them), and no
    repository index left from an earlier command of the process (tests, library
    callers): each command searches the repository as it is when it starts."""
    from optrace.runtime.regular import track_files_read

    apply_config_trust(trusted)
    track_files_read(True)
    discovery = sys.modules.get("optrace.engine.discovery")  # not imported: nothing to forget
    if discovery is not None:
        discovery.forget_repo_indexes()


def end_command() -> None:
    """Undo :func:`start_command`: several commands may run in one process (tests,
    library callers), and outside a command nothing is tracked."""
    from optrace.runtime.regular import track_files_read

    apply_config_trust(False)
    track_files_read(False)
    index_cache = sys.modules.get("optrace.engine.index_cache")  # not imported: nothing set
    if index_cache is not None:
        index_cache.reset_enabled()  # plan's --no-cache was that command's only


def _worker_start(trusted: bool) -> None:
    """What a worker of `run_parallel` inherits from the command, however it started."""
    from optrace.cli.deferred import install as install_deferred
    from optrace.runtime.regular import track_files_read

    apply_config_trust(trusted)
    track_files_read(True)  # a worker started afresh (not forked) tracks what it reads too
    install_deferred()


def operator_files(op_dirs: list[Path]) -> list[Path]:
    """Every file under the operator directories: the sources an output must not replace
    (links not followed; a directory that cannot be listed adds nothing)."""
    files: list[Path] = []
    for op_dir in op_dirs:
        for folder, _dirs, names in os.walk(op_dir):
            files.extend(Path(folder) / name for name in names)
    return files


def output_refused(output: Path | None, inputs: list[Path], code: str = OT030) -> bool:
    """Checked before any work: `output` is a FIFO, socket, directory or one of the
    inputs (runtime/atomic.py) -> the message, and True."""
    from optrace.runtime.atomic import OutputError, output_target

    if output is None:
        return False
    try:
        output_target(output, inputs)
    except OutputError as exc:
        err(f"{shown_path(exc.path)}: {code} {exc.message}")
        return True
    return False


def write_user_output(output: Path, data: bytes, inputs: list[Path], code: str = OT030) -> bool:
    """`data` as the user-named `output` (runtime/atomic.py); False after the message
    naming it when it could not be written (the previous file is intact)."""
    from optrace.runtime.atomic import OutputError, write_output

    try:
        write_output(output, data, inputs=inputs)
    except OutputError as exc:
        err(f"{shown_path(exc.path)}: {code} {exc.message}")
        return False
    return True


def emit(rendered: str, output: Path | None, inputs: list[Path], *, text: bool = False) -> bool:
    """The report to `-o FILE`, else stdout; False (after the message) when the file
    could not be written: the command exits 2. A text report (`text`) is made safe for a
    terminal; JSON and SARIF keep their own escaping."""
    if text:
        rendered = safe_text(rendered)
    # JSON's paths are the user's bytes (surrogate-escaped when not UTF-8): write them back.
    data = rendered.encode("utf-8", "surrogateescape")
    if output is None:
        write_stdout_bytes(data)
        return True
    return write_user_output(output, data, inputs)


def write_stdout_bytes(data: bytes) -> None:
    """Diffs carry the files' own bytes (GBK comments included): write bytes, not text."""
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is not None:
        buffer.write(data)
        buffer.flush()
    else:
        sys.stdout.write(data.decode("utf-8", errors="replace"))


def run_parallel(work: Callable[..., _T], jobs: list[tuple[Any, ...]], workers: int,
                  title: str) -> list[_T]:
    """Run `work(*job)` for every job in a process pool (each operator its own unit of
    failure), results in job order, with a progress bar on an interactive stderr."""
    show = sys.stderr.isatty() and len(jobs) > 3
    results: list[_T | None] = [None] * len(jobs)
    pool = None
    iterator: Iterator[tuple[int, _T]]
    if workers > 1:
        # multiprocessing's import only for a pool: one operator (pre-commit) has none.
        from concurrent.futures import ProcessPoolExecutor, as_completed

        from optrace.engine.config import config_trust_flag

        # Workers started another way than fork still get this command's --trust-config
        # and the Python layers' LibCST half.
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_start,
                                   initargs=(config_trust_flag(),))
        futures = {pool.submit(_in_worker, work, *job): i for i, job in enumerate(jobs)}
        iterator = ((futures[f], _from_worker(f.result())) for f in as_completed(futures))
    else:
        iterator = ((i, work(*job)) for i, job in enumerate(jobs))
    if show:  # rich's import is a tenth of a one-operator check: only when a bar is drawn
        from rich.progress import Progress

        with Progress(transient=True) as progress:
            task = progress.add_task(title, total=len(jobs))
            for i, outcome in iterator:
                results[i] = outcome
                progress.advance(task)
    else:
        for i, outcome in iterator:
            results[i] = outcome
    if pool is not None:
        pool.shutdown()
    return [r for r in results if r is not None]


def _in_worker(work: Callable[..., _T], *job: Any) -> tuple[_T, dict[tuple[int, int], str]]:
    """`work(*job)` in a worker, with the files it read: the outputs the parent writes
    must not replace any of them (runtime/atomic.py)."""
    from optrace.runtime.regular import take_files_read

    result = work(*job)
    return result, take_files_read()


def _from_worker(outcome: tuple[_T, dict[tuple[int, int], str]]) -> _T:
    from optrace.runtime.regular import add_files_read

    result, read = outcome
    add_files_read(read)
    return result


def run_summary(total: int, counts: list[tuple[int, str]]) -> str:
    """The closing line of a run over several operators, e.g. `40 operators: 38 planned,
    2 failed` (on stderr, after everything else: stdout carries plans, diffs and JSON)."""
    return f"{total} operators: " + ", ".join(f"{n} {what}" for n, what in counts)


def worker_count(jobs: int | None, n: int) -> int:
    return max(1, min(jobs or os.cpu_count() or 1, n))




class CheckFormat(StrEnum):
    text = "text"
    json = "json"
    sarif = "sarif"


TRUST_HELP = ("Let the repository's config import the rule modules it names ([rules] modules): "
               "running code a clone brings. Without it they are skipped, and the plan says so.")


JOBS_HELP = "Worker processes for several operators (default: all cores)."


REPO_ROOT_HELP = ("Repository to search for the operator's other layers, and the bound of what "
                  "--write may edit (default: the nearest ancestor with .git or optrace.toml; "
                  "without one, the operator directory's grandparent is searched and --write edits "
                  "the operator directory only).")
