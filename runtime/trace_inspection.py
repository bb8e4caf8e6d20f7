"""``optrace inspect TRACE``: what a trace written by ``collect`` holds, row by row.

For a ``.json`` / ``.json.gz`` or ``.pftrace`` trace (rank files have their own view in
:mod:`inspection`): per row — a core's spans of one launch, its launch slice on the core's
track (a trace of several launches has ``Rank 0 (launch 3) / AIC 1``) — its spans, first
start and last end, busy time (its top-level spans) and the records its core dropped (the
trace's drop markers, in the launch that holds them), and the run's settings from the
trace's metadata.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterable
from pathlib import Path
from typing import Any

from .errors import ProfilingInputError, checked_name
from .formats import fold_spans, is_protobuf, load_spans
from .json_rows import JsonEvents
from .perfetto_read import Regroup
from .rollup import InspectRollup
from .spans import (
    Closing,
    SpanTable,
    TraceNames,
    event_ids,
    json_parts,
    load_trace,
    other_data,
    read_trace_events,
    whole_table_chunks,
)

TRACE_SUFFIXES = (".json", ".json.gz", ".pftrace", ".pftrace.gz", ".perfetto-trace", ".pb")
_DROPPED = re.compile(r"^optrace: (\d+) records")
#: Digits of a drop count: a core drops at most what it wrote (a uint64, 20 digits); int()
#: of more than 4300 digits is a ValueError (exit 3), and a count of 400 digits no count.
_DROP_DIGITS = 20


def _dropped(path: Path, name: str) -> int | None:
    """The count of collect's drop marker ``optrace: N records ...``, else None."""
    match = _DROPPED.match(name)
    if match is None:
        return None
    if len(match[1]) > _DROP_DIGITS:
        raise ProfilingInputError(path, f"drop marker {name[:60]!r}: a count of {len(match[1])} digits "
                                  f"(at most {_DROP_DIGITS})")
    return int(match[1])


def _shown_text(path: Path, meta: dict[str, Any], key: str) -> str | None:
    """A metadata string inspect prints as text: a string without NUL or lone surrogate
    (a surrogate made the text output exit 3: stdout cannot encode it), or absent."""
    value = meta.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ProfilingInputError(path, f"metadata {key!r} must be a string, not {str(value)[:60]}")
    return checked_name(path, value, f"metadata {key!r}")


def is_trace(path: Path) -> bool:
    return path.is_file() and (path.name.endswith(TRACE_SUFFIXES) or is_protobuf(path))


class _Rows(InspectRollup):
    """inspect's rows of a .pftrace, its drop markers read from its instants."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def add(self, table: SpanTable, instants: Iterable[tuple[str, float, int]] = ()) -> None:
        dropped = [(track, at, count) for track, at, name in table.instants
                   if (count := _dropped(self.path, name)) is not None]
        super().add(table, [*instants, *dropped])


def _json_rows(path: Path) -> tuple[InspectRollup, Closing]:
    """inspect's rows of a JSON trace, a process at a time where it is laid out as
    collect lays it out, else read whole; its drop markers found by their pid and tid's
    names."""
    found = json_parts(path)
    if found is not None:
        parts, closing, names = found
        try:
            return _json_rows_by_part(path, parts, closing, names)
        except Regroup:
            pass  # read whole: the same rows, or the fault the whole read names first
    events = read_trace_events(path)  # regular, bounded, strict JSON (spans.py)
    table = load_trace(path, events)
    processes, threads = _titles(path, events.events())
    rows = InspectRollup()
    rows.add(table)

    def track(pid: Any, tid: Any) -> str:
        return f"{processes.get(pid, f'pid {pid}')} / {threads.get((pid, tid), f'tid {tid}')}"

    _add_drops(path, rows, table, events.events(), track)
    _, closing = whole_table_chunks(table, other_data(events))
    return rows, closing


def _json_rows_by_part(path: Path, parts: Generator[tuple[SpanTable, JsonEvents], None, None],
                       closing: Closing, names: TraceNames) -> tuple[InspectRollup, Closing]:
    rows = InspectRollup()

    def track(pid: Any, tid: Any) -> str:
        return f"{names.title(False, pid, f'pid {pid}')} / {names.title(True, (pid, tid), f'tid {tid}')}"

    try:
        for table, part in parts:
            rows.add(table)
            _add_drops(path, rows, table, part.events(), track)
    except ProfilingInputError as exc:  # the whole read names the first fault
        raise Regroup(str(exc)) from None
    finally:  # the reader's progress line closed now, not when collected
        parts.close()
    return rows, closing


def _titles(path: Path, events: Iterable[tuple[int, Any]]
            ) -> tuple[dict[Any, str], dict[tuple[Any, Any], str]]:
    """The process and thread names inspect keys drop markers by."""
    processes: dict[Any, str] = {}
    threads: dict[tuple[Any, Any], str] = {}
    for index, event in events:
        if isinstance(event, dict) and event.get("ph") == "M":
            args = event.get("args")
            title = str(args.get("name") if isinstance(args, dict) else None)
            pid, tid = event_ids(path, index, event)
            if event.get("name") == "process_name":
                processes[pid] = title
            elif event.get("name") == "thread_name":
                threads[(pid, tid)] = title
    return processes, threads


def _add_drops(path: Path, rows: InspectRollup, table: SpanTable, events: Iterable[tuple[int, Any]],
               track: Callable[[Any, Any], str]) -> None:
    """The drop markers among ``events`` counted on their rows (``track``: a (pid, tid)'s
    trace track, by the names inspect reads)."""
    for index, event in events:
        if isinstance(event, dict) and event.get("ph") == "i":
            count = _dropped(path, str(event.get("name", "")))
            if count is not None:
                pid, tid = event_ids(path, index, event)
                key = track(pid, tid)
                at = event.get("ts")
                if isinstance(at, int | float) and not isinstance(at, bool):
                    key = table.row_at(key, float(at))
                rows.add_drop(key, count)


def _inspected(path: Path) -> tuple[InspectRollup, Closing]:
    if path.is_dir() or not path.exists() or path.suffix == ".pt":
        load_spans(path)  # not a trace file: refused there, with its message
    # A .pftrace a rank at a time (runtime/rollup.py): its rows' figures, not its spans.
    return fold_spans(path, lambda: _Rows(path)) if is_protobuf(path) else _json_rows(path)


def _summary(path: Path, found: InspectRollup, closing: Closing, tracks: list[dict[str, Any]] | None
             ) -> dict[str, Any]:
    """inspect_trace's document; ``tracks``: its rows (None: left out, written row by row)."""
    meta = closing.metadata
    counts = found.rows.counts()
    listed = meta.get("ranks")
    ranks = [r for r in listed if isinstance(r, dict)] if isinstance(listed, list) else []
    return {
        "path": str(path),
        "format": _shown_text(path, meta, "format") or "unknown",
        # JSON output only (escaped there); a path, which may hold surrogate escapes of
        # non-UTF-8 bytes (cli.md), so not held to checked_name.
        "point_map": meta.get("point_map"),
        # A rank file is one launch of one rank: ranks, launches and cores counted apart.
        "ranks": counts.ranks,
        "launches": counts.launches,
        "cores": counts.cores,
        "rank_files": len(ranks),
        "clock_mhz": sorted({r["clock_mhz"] for r in ranks if isinstance(r.get("clock_mhz"), int | float)}),
        # The trace's own tracks (a rank's cores: ranks x cores); "tracks" lists rows, a
        # core's spans of one launch each.
        "trace_tracks": closing.trace_tracks + found.spanless_tracks,
        "tracks": tracks,
        "rows": found.rows.rows,
        "spans": counts.spans,
        "dropped": sum(found.drops.values()),
        "warnings": closing.warnings,
    }


def inspect_trace(path: Path) -> dict[str, Any]:
    found, closing = _inspected(path)
    tracks = [{"track": row.track, "spans": row.spans, "first_us": row.first_us, "last_us": row.last_us,
               "busy_us": row.busy_us, "dropped": found.drops.get(row.track, 0)} for row in found.found]
    summary = _summary(path, found, closing, tracks)
    del summary["rows"]  # (the document's rows are its tracks)
    return summary


def write_trace_text(path: Path, write: Callable[[str], object]) -> None:
    """format_trace_text(inspect_trace(path)), written a few thousand rows at a time: a
    cluster's trace has tens of thousands of rows, and their document and text held
    whole were most of inspect's memory at 512 ranks."""
    found, closing = _inspected(path)
    summary = _summary(path, found, closing, None)
    width = max([len(name) for name in found.rows.names] + [5])
    lines = _head_lines(summary, width)
    for row in found.found:
        lines.append(_row_line(width, row.track, row.spans, row.first_us, row.last_us, row.busy_us,
                               found.drops.get(row.track, 0)))
        if len(lines) >= _LINES_AT_ONCE:
            write("\n".join(lines) + "\n")
            lines = []
    write("\n".join([*lines, *_tail_lines(summary, summary["rows"])]) + "\n")


#: Rows of inspect's text written at once.
_LINES_AT_ONCE = 4096


def _head_lines(found: dict[str, Any], width: int) -> list[str]:
    clocks = ", ".join(f"{c:g} MHz" for c in found["clock_mhz"]) or "unknown"
    each = f" × {found['launches']} launches" if found["launches"] > 1 else ""
    return [f"{found['path']}: {found['format']} trace · {found['ranks']} ranks{each} · "
            f"{found['cores']} cores · clock {clocks}",
            f"  {'track':<{width}} {'spans':>7} {'first µs':>12} {'last µs':>12} {'busy µs':>12} "
            f"{'dropped':>7}"]


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _row_line(width: int, track: str, spans: int, first: float | None, last: float | None, busy: float,
              dropped: int) -> str:
    return (f"  {track:<{width}} {spans:>7} {_number(first):>12} "
            f"{_number(last):>12} {_number(busy):>12} {dropped:>7}")


def _tail_lines(found: dict[str, Any], rows: int) -> list[str]:
    tracks = f"{found['trace_tracks']} tracks"
    if rows != found["trace_tracks"]:
        tracks += f" ({rows} core × launch rows)"
    return [f"  {tracks}, {found['spans']} spans, {found['dropped']} records dropped",
            *(f"  warning: {w}" for w in found["warnings"])]


def format_trace_text(found: dict[str, Any]) -> str:
    width = max([len(t["track"]) for t in found["tracks"]] + [5])
    lines = _head_lines(found, width)
    lines += [_row_line(width, t["track"], t["spans"], t["first_us"], t["last_us"], t["busy_us"],
                        t["dropped"]) for t in found["tracks"]]
    lines += _tail_lines(found, len(found["tracks"]))
    return "\n".join(lines) + "\n"
