"""``optrace collect`` without the CLI framework.

collect is the command users run in loops and CI jobs on big profiling directories, and
the one whose speed is promised end to end (process start to trace written). typer,
click, rich and pydantic cost a third of a typical collect to import, so the
console script hands ``collect`` to :func:`fast_main` before importing any of them. The
fast path only accepts the plain spellings of collect's options; anything else (``--help``,
a typo, ``-oFILE``, ``--``) returns None and the full CLI handles it, with its usual help
and usage errors. Both paths run :func:`run_collect`, so they behave the same.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from optrace.runtime.errors import ProfilingInputError
from optrace.runtime.numbers import CLOCK_MHZ, check_optional
from optrace.runtime.regular import track_files_read
from optrace.runtime.terminal import safe_text

if TYPE_CHECKING:  # imported at call time (collect's start-up; tests replace it)
    from optrace.runtime.collect import CollectOptions, CollectResult

EXIT_USAGE = 2
EXIT_INTERNAL = 3

_VALUE_OPTIONS = {
    "-o": "output", "--output": "output", "--point-map": "point_map", "--clock-mhz": "clock_mhz",
    "--ranks": "ranks", "--cores": "cores", "--labels": "labels", "--rank-offsets": "rank_offsets",
    "-j": "jobs", "--jobs": "jobs", "--format": "format", "--split": "split", "--align": "align",
    "--merge": "merge",
}
_REPEATED = {"merge"}  # may be given several times: a list
_FLAGS = {"--ignore-fingerprint": "ignore_fingerprint"}


def _err(message: str) -> None:
    print(safe_text(message), file=sys.stderr)


def paths_as_bytes() -> None:
    """Print a path that is not UTF-8 (a GBK folder name) as the bytes it has on disk, like
    ls does: a strict UTF-8 stdout (any UTF-8 locale) would fail on it instead."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")


def positive_count(value: object) -> int | None:
    """A `-j` value in its plain spelling as the full CLI takes it (a positive integer,
    decimal digits: `²` is a digit `int()` refuses); None for the full CLI's usage error."""
    if not (isinstance(value, str) and value.isdecimal()) or int(value) < 1:
        return None
    return int(value)


def split_plain(argv: Sequence[str], value_options: Mapping[str, str], flags: Mapping[str, str],
                repeated: frozenset[str] = frozenset()) -> tuple[dict[str, object], list[str]] | None:
    """A command's arguments in their plain spellings (`--name value`, `--name=value`,
    `-x value`, the flags), as (values by key, positionals); None for anything else
    (`--help`, a typo, `-oFILE`, `--`, a missing value): the full CLI's business. Keys
    in `repeated` collect a list of paths."""
    values: dict[str, object] = {}
    positional: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, inline = token.partition("=") if token.startswith("--") else (token, "", "")
        if name in value_options:
            if eq:
                value = inline
            elif i + 1 < len(argv):
                i += 1
                value = argv[i]
            else:
                return None  # missing value: the full CLI says so
            key = value_options[name]
            if key in repeated:
                listed = values.setdefault(key, [])
                assert isinstance(listed, list)
                listed.append(Path(value))
            else:
                values[key] = value
        elif token in flags:
            values[flags[token]] = True
        elif token.startswith("-") and token != "-":
            return None  # --help, a typo, -oFILE, --: the full CLI's business
        else:
            positional.append(token)
        i += 1
    return values, positional


def parse_fast(argv: Sequence[str]) -> dict[str, object] | None:
    """collect's arguments in their plain spellings, or None for the full CLI to parse."""
    split = split_plain(argv, _VALUE_OPTIONS, _FLAGS, frozenset(_REPEATED))
    if split is None:
        return None
    values, positional = split
    if len(positional) != 1 or "output" not in values:
        return None
    try:
        if "clock_mhz" in values:
            values["clock_mhz"] = float(str(values["clock_mhz"]))
        if "jobs" in values:
            values["jobs"] = int(str(values["jobs"]))
            if values["jobs"] < 0:  # type: ignore[operator]
                return None
    except ValueError:
        return None  # typer reports the invalid value in its own words
    values["profiling_dir"] = Path(positional[0])
    values["output"] = Path(str(values["output"]))
    if "point_map" in values:
        values["point_map"] = Path(str(values["point_map"]))
    return values


def fast_main(argv: Sequence[str]) -> int | None:
    """The exit code of ``optrace collect ARGV``, or None when the full CLI must parse it."""
    parsed = parse_fast(argv)
    if parsed is None:
        return None
    track_files_read(True)  # a command of its own (see cli/common.start_command)
    try:
        return run_collect(**parsed)  # type: ignore[arg-type]
    finally:
        track_files_read(False)


def _progress() -> tuple[Callable[[int, int], None] | None, Callable[[], None]]:
    """A rich progress bar on stderr when stderr is a terminal; nothing otherwise."""
    if not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console  # imported only for interactive runs (start-up time)
    from rich.progress import Progress

    # No auto-refresh: its thread would keep collect from forking its worker processes
    # (workers.can_fork); the bar is redrawn when a rank is done instead.
    bar = Progress(console=Console(stderr=True), transient=True, auto_refresh=False)
    bar.start()
    task = bar.add_task("decoding ranks", total=None)

    def update(done: int, total: int) -> None:
        bar.update(task, completed=done, total=total, refresh=True)

    return update, bar.stop


def run_collect(
    profiling_dir: Path,
    output: Path,
    *,
    point_map: Path | None = None,
    clock_mhz: float | None = None,
    ranks: str | None = None,
    cores: str | None = None,
    labels: str | None = None,
    rank_offsets: str | None = None,
    ignore_fingerprint: bool = False,
    jobs: int | None = None,
    format: str | None = None,
    split: str | None = None,
    align: str | None = None,
    merge: Sequence[Path] | None = None,
) -> int:
    """Run collect and print its summary; returns the exit code (cli.md): 0 ok, 1 records
    skipped, 2 usage or bad input (``path: message``, no traceback), 3 internal error."""
    from optrace.runtime import collect as collect_module  # looked up at call time (tests replace it)

    paths_as_bytes()
    try:
        try:
            options = _options(collect_module, output, point_map=point_map, clock_mhz=clock_mhz, ranks=ranks,
                               cores=cores, labels=labels, rank_offsets=rank_offsets,
                               ignore_fingerprint=ignore_fingerprint, jobs=jobs, format=format, split=split,
                               align=align, merge=merge)
            check_optional("--clock-mhz", clock_mhz, CLOCK_MHZ)
        except ValueError as exc:
            _err(f"optrace: {exc}")
            return EXIT_USAGE
        update, stop = _progress()
        try:
            result = collect_module.collect(profiling_dir.expanduser(), output.expanduser(), options, update)
        except collect_module.NothingToWrite as exc:
            _err(f"optrace: warning: {exc}")
            return 1
        except (collect_module.AlignmentError, collect_module.MergeError) as exc:
            _err(f"optrace: {exc}")
            return EXIT_USAGE
        finally:
            stop()
        _print_result(collect_module, result, profiling_dir, output, filtered=bool(labels or cores))
        return result.exit_code
    except BaseException as exc:
        code = failure_code(exc)
        if code is None:
            raise
        return code


def _options(collect_module: ModuleType, output: Path, *, point_map: Path | None, clock_mhz: float | None,
             ranks: str | None, cores: str | None, labels: str | None, rank_offsets: str | None,
             ignore_fingerprint: bool, jobs: int | None, format: str | None, split: str | None,
             align: str | None, merge: Sequence[Path] | None) -> CollectOptions:
    """collect's options from the command's; ValueError says what is wrong with one."""
    fmt = collect_module.output_format(output, format)  # says which formats there are
    if merge and fmt.merge_suffix is None:
        raise ValueError(f"--merge writes one trace: it cannot write {fmt.describe}")
    if split is not None and fmt.directory:
        raise ValueError(f"--split splits a trace file: {fmt.describe} is a file per rank already")
    if merge and split is not None:
        raise ValueError("--merge writes one trace: it cannot be used with --split")
    if merge and align is not None:
        raise ValueError("--merge places each launch in its kernel slice: it cannot be used with --align")
    split_value: str | int | None = None
    if split is not None:
        from optrace.runtime.trace_files import parse_split

        split_value = parse_split(split)
    options: CollectOptions = collect_module.CollectOptions(
        point_map=point_map.expanduser() if point_map else None,
        clock_mhz=clock_mhz,
        ranks=collect_module.parse_int_set(ranks, "--ranks") if ranks else None,
        cores=collect_module.parse_core_filter(cores) if cores else None,
        labels=[s for s in labels.split(",") if s.strip()] if labels else None,
        rank_offsets_us=collect_module.parse_rank_offsets(rank_offsets) if rank_offsets else {},
        ignore_fingerprint=ignore_fingerprint,
        jobs=jobs,
        format=format,
        split=split_value,
        align=collect_module.parse_align(align) if align is not None else None,
        merge=tuple(path.expanduser() for path in merge or ()),
    )
    return options


def _print_result(collect_module: ModuleType, result: CollectResult, profiling_dir: Path, output: Path,
                  filtered: bool) -> None:
    """The summary and notes on stdout; the ranks' errors, and an empty trace, on stderr."""
    for line in collect_module.summary_lines(result):
        print(safe_text(line))
    for line in collect_module.note_lines(result):
        print(safe_text(line))
    for error in result.errors:
        _err(str(error))
    if not result.written:
        decoded = sum(o.decoded is not None for o in result.outcomes)
        kept = " kept by --labels / --cores" if filtered else ""
        _err(f"optrace: warning: {profiling_dir}: no span{kept} in {decoded} decoded rank "
             f"file{'s' if decoded != 1 else ''}: nothing written to {output}")


def failure_code(exc: BaseException) -> int | None:
    """The runtime commands' contract for an exception that escaped: print its message
    and return the exit code — bad input 2 (``path: message``, no traceback), Ctrl-C 130,
    anything else 3 — or None for what must propagate (SystemExit)."""
    if isinstance(exc, ProfilingInputError):
        _err(str(exc))
        return EXIT_USAGE
    if isinstance(exc, OSError):  # e.g. the output directory is not writable: input, not a bug
        _err(f"{exc.filename or 'optrace'}: {exc.strerror or exc}")
        return EXIT_USAGE
    if isinstance(exc, KeyboardInterrupt):
        _err("optrace: interrupted")
        return 130
    if not isinstance(exc, Exception):
        return None
    _err(f"optrace: internal error: {type(exc).__name__}: {exc}")
    if os.environ.get("OPTRACE_DEBUG"):
        import traceback

        traceback.print_exception(exc)
    else:
        _err("(set OPTRACE_DEBUG=1 for the traceback)")
    return EXIT_INTERNAL
