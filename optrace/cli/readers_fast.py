"""``optrace inspect``, ``report`` and ``compare`` without the CLI framework.

Their speed is promised against collect's (within 2x its time on the same data), and on
an 8-rank trace importing typer / click / rich was a third of the difference; at 64
ranks the page faults of numpy temporaries freed and reallocated were a third of the
readers' CPU. So, as for collect (collect_fast.py), the console script hands their plain
spellings to :func:`fast_main` before importing the framework, in a process set up like
collect's (cli/start.py: no cyclic collector, freed memory kept for reuse). Anything the
fast parser does not recognise (``--help``, a typo, a bad number) returns None and the
full CLI handles it with its usual help and usage errors. Both paths run the same
``run_*`` bodies below, so they behave the same.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from optrace.cli.collect_fast import failure_code, paths_as_bytes, split_plain
from optrace.runtime.numbers import CLOCK_MHZ, TOP, NumberError, check_number, check_optional
from optrace.runtime.regular import track_files_read
from optrace.runtime.terminal import safe_text

EXIT_USAGE = 2

# Each command's value options (spelling -> keyword of its run_* body), how many
# positionals it takes, and which values are numbers or paths.
_OPTIONS: dict[str, dict[str, str]] = {
    "inspect": {"--format": "fmt"},
    "report": {"--format": "fmt", "--point-map": "point_map", "--html": "html", "--png": "png",
               "--clock-mhz": "clock_mhz", "--top": "top"},
    "compare": {"--format": "fmt", "--point-map": "point_map", "--expect": "expect", "--label": "label",
                "--fail-on-regression": "fail_on_regression"},
}
_POSITIONALS = {"inspect": ("path",), "report": ("path",), "compare": ("before", "after")}
_FLOATS = ("clock_mhz", "expect", "fail_on_regression")
_INTS = ("top",)
_PATHS = ("point_map", "html", "png")
READERS = tuple(_OPTIONS)


class _Usage(Exception):
    """Bad usage found by a body: ``optrace: <message>``, exit 2."""


def _err(message: str) -> None:
    print(safe_text(message), file=sys.stderr)


def parse_fast(command: str, argv: list[str]) -> dict[str, object] | None:
    """The reader's arguments in their plain spellings, or None for the full CLI to parse."""
    split = split_plain(argv, _OPTIONS[command], {})
    if split is None:
        return None
    values, positional = split
    names = _POSITIONALS[command]
    if len(positional) != len(names):
        return None
    try:
        for key in _FLOATS:
            if key in values:
                values[key] = float(str(values[key]))
        for key in _INTS:
            if key in values:
                values[key] = int(str(values[key]))
    except ValueError:
        return None  # typer reports the invalid value in its own words
    for key in _PATHS:
        if key in values:
            values[key] = Path(str(values[key]))
    values.update({name: Path(text) for name, text in zip(names, positional, strict=True)})
    return values


def fast_main(command: str, argv: list[str]) -> int | None:
    """The exit code of ``optrace COMMAND ARGV`` for a reader, or None when the full CLI
    must parse it."""
    parsed = parse_fast(command, argv)
    if parsed is None:
        return None
    track_files_read(True)  # a command of its own (see cli/common.start_command)
    try:
        return _RUNNERS[command](**parsed)
    finally:
        track_files_read(False)


def _guarded(body: Callable[[], int]) -> int:
    """Bad usage -> ``optrace: message``, exit 2; bad input -> ``path: message``, exit 2;
    anything unexpected -> exit 3 (collect_fast.failure_code, collect's contract too)."""
    paths_as_bytes()
    try:
        return body()
    except _Usage as exc:
        _err(f"optrace: {exc}")
        return EXIT_USAGE
    except BaseException as exc:
        code = failure_code(exc)
        if code is None:
            raise
        return code


def _check_format(fmt: str) -> None:
    if fmt not in ("text", "json"):
        raise _Usage(f"--format must be text or json, not {fmt!r}")


def _emit_json(document: object) -> None:
    import json

    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")


def _files_read(path: Path, point_map: Path | None) -> list[Path]:
    """What report reads (the trace, or the directory's files and its point map): an
    output that is one of them is refused."""
    files = [path, *([point_map] if point_map is not None else [])]
    try:
        files += list(path.iterdir()) if path.is_dir() else []
    except OSError:
        pass  # reported when it is read
    return files


def run_inspect(path: Path, fmt: str = "text") -> int:
    """`optrace inspect`: per-core records of rank files, per-track of a trace."""
    def body() -> int:
        _check_format(fmt)
        import json
        import textwrap

        from optrace.runtime.dataset_layout import is_dataset
        from optrace.runtime.inspection import format_text, inspection_json, iter_inspect
        from optrace.runtime.trace_inspection import inspect_trace, is_trace, write_trace_text

        where = path.expanduser()
        if is_dataset(where):
            # Its files hold spans, not the rank files' slots and drops inspect reports.
            raise _Usage(f"{path}: a Parquet dataset: inspect reads rank files and traces; `optrace "
                         f"report {path}` and `optrace query {path} --preset phases` read a dataset")
        if is_trace(where):
            if fmt == "json":
                _emit_json(inspect_trace(where))
            else:
                write_trace_text(where, lambda text: sys.stdout.write(safe_text(text)))
            return 0
        # A rank file at a time, written as it is read: the same text (format_text of
        # each result is its lines) and JSON (the list's items, indented as json.dumps
        # indents them in the list) as for all at once.
        errors: list[str] = []
        for count, result in enumerate(iter_inspect(where)):
            if fmt == "json":
                item = json.dumps(inspection_json([result])[0], indent=2, default=str)
                opening = "[\n" if count == 0 else ",\n"
                sys.stdout.write(opening + textwrap.indent(item, "  ", lambda _: True))
            else:
                sys.stdout.write(safe_text(format_text([result])))
            if result.error is not None:
                errors.append(str(result.error))
        if fmt == "json":
            sys.stdout.write("\n]\n")
        for error in errors:
            _err(error)
        return 2 if errors else 0

    return _guarded(body)


def run_report(path: Path, point_map: Path | None = None, html: Path | None = None, png: Path | None = None,
               clock_mhz: float | None = None, top: int = 10, fmt: str = "text") -> int:
    """`optrace report`: per-label statistics, imbalance and hotspots; a page or a PNG."""
    def body() -> int:
        _check_format(fmt)
        from optrace.runtime.report import MissingExtra, format_text, report_json, require_matplotlib

        try:
            check_optional("--clock-mhz", clock_mhz, CLOCK_MHZ)
            check_number("--top", top, TOP)
        except NumberError as exc:
            raise _Usage(str(exc)) from None
        if png is not None:
            try:
                require_matplotlib()
            except MissingExtra as exc:
                raise _Usage(str(exc)) from None
        if html is not None and png is not None and os.path.abspath(html.expanduser()) == os.path.abspath(
                png.expanduser()):
            # one file, written twice: the page would be lost to the chart
            raise _Usage(f"--html and --png name one file ({html}): give each its own")
        from optrace.runtime.atomic import output_target
        from optrace.runtime.dataset_layout import is_dataset

        where = path.expanduser()
        if is_dataset(where):
            if html is not None or png is not None:
                raise _Usage(f"{path}: --html / --png draw every span of a trace or a profiling "
                             "directory; of a dataset, report prints its statistics (computed in DuckDB)")
            from optrace.runtime.dataset_stats import dataset_report

            found = dataset_report(where, top=top)
            if fmt == "json":
                _emit_json(report_json(found))
            else:
                sys.stdout.write(safe_text(format_text(found)))
            return 0
        pmap = point_map.expanduser() if point_map else None
        read = _files_read(where, pmap)
        for output in (html, png):  # refused before anything is read (runtime/atomic.py)
            if output is not None:
                output_target(output.expanduser(), read)
        from optrace.runtime.formats import fold_spans
        from optrace.runtime.report import PAGE_ROWS, report_of, write_html, write_png
        from optrace.runtime.rollup import ReportRollup

        # A rank at a time where the input allows: the figures, never a table of every span.
        drawn = html is not None or png is not None
        rollup, closing = fold_spans(where, lambda: ReportRollup(page_rows=PAGE_ROWS if drawn else None),
                                     pmap, clock_mhz)
        report = report_of(rollup, closing.source, closing.warnings, top)
        page = rollup.page() if drawn else None
        if fmt == "json":
            _emit_json(report_json(report))
        else:
            sys.stdout.write(safe_text(format_text(report)))
        if html is not None:
            assert page is not None
            write_html(page, report, html.expanduser())
            print(safe_text(f"wrote {html}"))
        if png is not None:
            assert page is not None
            write_png(page, report, png.expanduser())
            print(safe_text(f"wrote {png}"))
        return 0

    return _guarded(body)


def run_compare(before: Path, after: Path, expect: float | None = None, label: str = "processing",
                point_map: Path | None = None, fail_on_regression: float | None = None,
                fmt: str = "text") -> int:
    """`optrace compare`: per-label changes with bootstrap intervals; the verdict's exit."""
    def body() -> int:
        _check_format(fmt)
        from optrace.runtime.compare import (
            EXPECT_RANGE,
            REGRESSION_RANGE,
            MeasuredRun,
            OptionError,
            check_percent,
            compare,
            comparison_json,
            format_text,
            run_of,
        )
        from optrace.runtime.dataset_layout import is_dataset
        from optrace.runtime.formats import fold_spans
        from optrace.runtime.rollup import LaunchRollup

        try:
            check_percent("--expect", expect, EXPECT_RANGE)
            check_percent("--fail-on-regression", fail_on_regression, REGRESSION_RANGE)
        except OptionError as exc:
            raise _Usage(str(exc)) from None
        pmap = point_map.expanduser() if point_map else None

        def run(where: Path) -> MeasuredRun:
            """A dataset's launch times computed in DuckDB; a trace's or directory's from its
            spans, a rank at a time where the input allows."""
            if is_dataset(where):
                from optrace.runtime.dataset_stats import dataset_run

                return dataset_run(where)
            return run_of(*fold_spans(where, LaunchRollup, pmap))

        result = compare(run(before.expanduser()), run(after.expanduser()),
                         label=label, expect=expect, fail_on_regression=fail_on_regression)
        if fmt == "json":
            _emit_json(comparison_json(result))
        else:
            sys.stdout.write(safe_text(format_text(result)))
        return 1 if result.failed else 0

    return _guarded(body)


_RUNNERS: dict[str, Callable[..., int]] = {
    "inspect": run_inspect, "report": run_report, "compare": run_compare,
}
