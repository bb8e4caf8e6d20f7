"""Spans as columns, loaded from an optrace Chrome trace or straight from a profiling dir.

``report`` and ``compare`` work on this table, whichever input the user gave them. Each
span also gets its depth on its track and its self time (duration minus its children's),
computed with one stack pass per track.
"""

from __future__ import annotations

import itertools
import math
import re
import sys
from bisect import bisect_right
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import json_rows, perfetto_read
from .chrome import TRACE_FORMAT
from .decode import DecodeOptions, decode_rank
from .errors import ProfilingInputError, checked_id, checked_name, shown
from .json_rows import JsonEvents
from .launches import LAUNCH_CATEGORY, launch_name
from .numbers import CLOCK_MHZ, DURATION_US, RANK, TIME_US, NumberError, check_number
from .placement import KEEP_READ_BYTES, place_ranks
from .pointmap import PointMap, load_point_map, resolve_point_map
from .progress import Progress, reading
from .rankfile import RankBuffer, RankFileName, iter_rank_buffers, list_rank_files
from .regular import load_json

PERFETTO_NS_MAX = 1e18

PROCESSING = "processing"


@dataclass
class RunSettings:
    """Runtime settings a measurement was recorded with (compare refuses to mix them)."""

    clock_mhz: set[float] = field(default_factory=set)
    barrier: set[bool | None] = field(default_factory=set)


@dataclass
class SpanTable:
    """Every span of a trace as columns (numpy arrays), with the label and track tables."""

    source: str
    labels: list[str]
    tracks: list[str]  # rows: a core's spans of one launch ("Rank 0 (launch 2) / AIC 3")
    processes: int  # ranks (x launches) the spans come from
    label: np.ndarray  # int32 index into labels
    track: np.ndarray  # int32 index into tracks
    ts: np.ndarray  # float64 µs
    dur: np.ndarray  # float64 µs
    settings: RunSettings
    warnings: list[str] = field(default_factory=list)
    depth: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    self_time: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # The kernel launch each track belongs to (index into `launches`): one launch is the
    # same (tag, launch) of every rank; `compare` resamples launches. When a loader does
    # not say, each process ("Rank 0" in "Rank 0 / AIC 3") is its own launch.
    launches: list[str] = field(default_factory=list)
    track_launch: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    # A trace's launch slices per trace track ("Rank 0 / AIC 1"): their starts and ends
    # (µs) and the names of their rows in ``tracks`` (empty without launch slices).
    launch_rows: dict[str, tuple[list[float], list[float], list[str]]] = field(default_factory=dict)
    trace_tracks: int = -1  # the trace's tracks with spans (-1: one per row)
    # A .pftrace's instant events: (trace track's name, µs, the instant's name).
    instants: list[tuple[str, float, str]] = field(default_factory=list)
    # False: depth and self time left empty, not computed (for a reader that needs
    # neither: compare's launch times are sums of durations).
    nested: bool = True

    def row_at(self, track: str, ts: float) -> str:
        """The row of a trace track at time ``ts`` (µs): its launch's, or the track itself."""
        found = self.launch_rows.get(track)
        if found is None:
            return track
        starts, ends, names = found
        k = bisect_right(starts, ts + LAUNCH_SLACK_US) - 1
        return names[k] if k >= 0 and ts <= ends[k] + LAUNCH_SLACK_US else track

    def __post_init__(self) -> None:
        if self.nested and self.depth.size != self.ts.size:
            self.depth, self.self_time = _depth_and_self_time(self.track, self.ts, self.dur)
        if self.track_launch.size != len(self.tracks):
            self.launches, self.track_launch = _launches_by_process(self.tracks)
        if self.trace_tracks < 0:
            self.trace_tracks = len(self.tracks)


@dataclass(frozen=True)
class RunCounts:
    """What a trace or directory holds, counted the way a cluster user reads it: ranks,
    launches (a (tag, launch) of every rank), cores (a rank's cores, whatever the number of
    launches), core × launch rows (the tracks of a per-launch layout) and spans."""

    ranks: int
    launches: int
    cores: int
    rows: int
    spans: int

    def text(self) -> str:
        each = f" × {self.launches} launches" if self.launches > 1 else ""
        return f"{self.ranks} ranks{each} · {self.cores} cores · {self.spans} spans"


_RANK = re.compile(r"Rank \d+(?!\S)")


def rank_of_track(track: str) -> str:
    """The rank a row's process is, its launches together: `Rank 3` of `Rank 3 (moe,
    launch 2) / AIC 1` or `Rank 3 (node-a, launch 2) / AIC 1`; a process not named by rank
    stands alone."""
    process = track.split(" / ", 1)[0]
    found = _RANK.match(process)
    return found.group(0) if found else process


def run_counts(table: SpanTable) -> RunCounts:
    ranks = {rank_of_track(t) for t in table.tracks}
    cores = {(rank_of_track(t), t.split(" / ", 1)[1] if " / " in t else "") for t in table.tracks}
    return RunCounts(len(ranks), max(1, len(table.launches)) if table.tracks else 0, len(cores),
                     len(table.tracks), int(table.ts.size))


def _launches_by_process(tracks: list[str]) -> tuple[list[str], np.ndarray]:
    ids: dict[str, int] = {}
    column = [ids.setdefault(track.split(" / ", 1)[0], len(ids)) for track in tracks]
    return list(ids), np.array(column, dtype=np.int32)


def _launch_name(tag: object, launch: object) -> str:
    return ", ".join(p for p in (tag if isinstance(tag, str) and tag else None, f"launch {launch}") if p)


#: A span's end within this (µs) of a later span's start: the later one is not inside it.
_NEST_EPS = 1e-9


def _depth_and_self_time(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per span: nesting depth on its track and duration minus direct children's.

    What a stack per track gives, spans in (track, start, longest first) order: a span's
    parent is the innermost span before it still open at its start (ending more than
    :data:`_NEST_EPS` after it). Columns at once where the spans nest (:func:`_nested`),
    the stack walked span by span otherwise."""
    found = _nested(track, ts, dur)
    return found if found is not None else _depth_and_self_time_walked(track, ts, dur)


def _nested(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Depth and self time as columns, or None where the spans may not nest.

    When every span longer than 2 ε ends no later than the span it starts inside (the
    spans of a track are a laminar family), the spans open at a span's start are a chain
    of its ancestors, so its depth is a count — the spans before it on its track less
    those ended (within ε) by its start — and its parent is the last span before it one
    level up. Checked here: each span ends by its parent's end; anything else (a span
    overlapping another's end, a span of no length) is None."""
    n = ts.size
    if n == 0:
        return np.zeros(0, np.int32), dur.astype(np.float64).copy()
    if not (dur > 2 * _NEST_EPS).all():
        return None
    # The readers' tables are in order already: then no copy of the columns (at a million
    # spans each column is 8 MB, and this function's peak memory is its temporaries).
    order = _order(track, ts, dur)
    t = track if order is None else track[order]
    start = ts if order is None else ts[order]
    span = dur if order is None else dur[order]
    end = start + span
    new_track = np.ones(n, bool)
    np.not_equal(t[1:], t[:-1], out=new_track[1:])
    heads = np.flatnonzero(new_track).tolist()
    # Spans of the track ended by each start (end <= start + ε); depth: the spans before
    # it on its track less those.
    if len(heads) <= max(64, n >> 8):
        del new_track
        # A track's starts are in order already: its ends, sorted (values only: a track at
        # a time, no argsort of every time), are counted up to each start by a search.
        depth = np.empty(n, np.int32)  # (a depth is below n; int32 as the table keeps it)
        for lo, hi in zip(heads, [*heads[1:], n], strict=True):
            ends = np.sort(end[lo:hi])
            depth[lo:hi] = np.arange(hi - lo) - np.searchsorted(ends, start[lo:hi] + _NEST_EPS, side="right")
            del ends
    else:  # times ranked together, an end before a start at the same time; then ends
        # counted by (track, rank)
        first = np.maximum.accumulate(np.where(new_track, np.arange(n), 0))  # each track's first span
        del new_track
        t64 = t.astype(np.int64)
        rank = np.empty(2 * n, np.int64)
        rank[np.argsort(np.concatenate([end, start + _NEST_EPS]), kind="stable")] = np.arange(2 * n)
        ends = np.sort(t64 * (2 * n) + rank[:n])
        ended_by = np.searchsorted(ends, t64 * (2 * n) + rank[n:])
        del rank, ends, t64
        # Within the track: none of its spans ends by its first start (each longer than 2 ε).
        ended_by -= ended_by[first]
        depth = (np.arange(n) - first - ended_by).astype(np.int32)
        del first, ended_by
    if (depth < 0).any():
        return None
    # The parent: the last span before, on the track, one level up.
    child = np.flatnonzero(depth > 0)
    parent = _parents(t, depth, child)
    del t
    if parent is None:
        return None
    if (end[child] > end[parent]).any() or (start[child] >= end[parent] - _NEST_EPS).any():
        return None
    del end
    self_sorted = span.astype(np.float64) - np.bincount(parent, weights=span[child], minlength=n)
    del parent, child
    if order is None:
        return depth, np.maximum(self_sorted, 0.0)
    depth_out = np.empty(n, np.int32)
    depth_out[order] = depth
    self_time = np.empty(n, np.float64)
    self_time[order] = np.maximum(self_sorted, 0.0)
    return depth_out, self_time


#: Nesting this shallow or less: each level's parents found by one scan of the spans.
_SCANNED_LEVELS = 24


def _parents(t: np.ndarray, depth: np.ndarray, child: np.ndarray) -> np.ndarray | None:
    """Each child's parent, spans in (track, start, longest first) order: the last span
    before it, on its track, one level up; None when there is none.

    Shallow nesting (a kernel's phases, a few levels): per level, the last span of the
    level above so far, carried forward by a running maximum — a few sequential passes,
    no search. Deeper: (track, level, place) as one sorted key, searched."""
    n = depth.size
    levels = int(depth.max()) + 1
    if levels <= _SCANNED_LEVELS:
        index = np.int32 if n < 1 << 31 else np.int64  # half the memory each pass goes over
        parent_of = np.full(n, -1, index)
        place = np.arange(n, dtype=index)
        for level in range(1, levels):
            last = np.where(depth == level - 1, place, -1)
            np.maximum.accumulate(last, out=last)
            mine = depth == level
            parent_of[mine] = last[mine]
            del last, mine
        parent: np.ndarray = parent_of[child]
        del parent_of, place
        # none before it one level up, or the last such span on an earlier track
        if (parent < 0).any() or (t[parent] != t[child]).any():
            return None
        return parent
    levels += 1
    t64 = t.astype(np.int64)
    if (int(t64.max()) + 1) * levels * (n + 1) >= 1 << 62:
        return None
    group = t64 * levels + depth
    if group.min() >= 0 and group.max() < 1 << 16:  # sorted by radix
        by_group = np.argsort(group.astype(np.uint16), kind="stable")
        ranked = group[by_group] * (n + 1) + by_group
        del by_group
    else:
        ranked = np.sort(group * (n + 1) + np.arange(n))
    del group
    probe = (t64[child] * levels + depth[child] - 1) * (n + 1) + child
    k = np.searchsorted(ranked, probe) - 1
    parent_key = ranked[np.maximum(k, 0)]
    del ranked
    if ((k < 0) | (parent_key // (n + 1) != probe // (n + 1))).any():
        return None
    found: np.ndarray = parent_key % (n + 1)
    return found


def _order(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray | None:
    """Spans by (track, start, longest first): parents before their children; None when
    they are in that order already (the trace readers' tables are: checked in one pass)."""
    same_start = ts[1:] == ts[:-1]
    in_track = (ts[1:] > ts[:-1]) | same_start & (dur[1:] <= dur[:-1])
    later = (track[1:] > track[:-1]) | (track[1:] == track[:-1]) & in_track
    if later.all():
        return None
    return np.lexsort((-dur, ts, track))


def _depth_and_self_time_walked(
    track: np.ndarray, ts: np.ndarray, dur: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_depth_and_self_time`, a stack walked span by span (spans that may not nest)."""
    n = ts.size
    depth = np.zeros(n, np.int32)  # a trace may nest past int16: 40,000 slices deep is a file of 1 MB
    self_time = dur.astype(np.float64).copy()
    if n == 0:
        return depth, self_time
    order = np.lexsort((-dur, ts, track))  # parents before their children
    end = ts + dur
    tracks, starts = track[order].tolist(), ts[order].tolist()
    ends, durs = end[order].tolist(), dur[order].tolist()
    stack: list[int] = []  # positions in `order`
    current = None
    depth_list = [0] * n
    self_list = list(durs)
    eps = _NEST_EPS
    for i in range(n):
        if tracks[i] != current:
            current, stack = tracks[i], []
        while stack and starts[i] >= ends[stack[-1]] - eps:
            stack.pop()
        if stack:
            self_list[stack[-1]] -= durs[i]
        depth_list[i] = len(stack)
        stack.append(i)
    depth[order] = depth_list
    self_time[order] = np.maximum(self_list, 0.0)
    return depth, self_time


def read_trace_json(path: Path) -> dict[str, Any]:
    """A Chrome JSON trace someone else may have made: a regular file within the trace
    bound, strict JSON (runtime/regular.py: no NaN, no huge numbers, no deep nesting),
    ``{"traceEvents": [...]}`` with an object or nothing as ``otherData``."""
    try:
        document = load_json(path, "trace")
    except FileNotFoundError:
        raise ProfilingInputError(path, "no such file") from None
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ProfilingInputError(path, f"not a readable JSON trace: {why}") from None
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise ProfilingInputError(path, 'not a Chrome trace: expected {"traceEvents": [...]}')
    _check_other(path, document)
    return document


def _check_other(path: Path, document: dict[str, Any]) -> None:
    if not isinstance(document.get("otherData") or {}, dict):
        raise ProfilingInputError(path, "otherData must be an object")


def read_trace_events(path: Path) -> JsonEvents:
    """A Chrome JSON trace's events (:func:`read_trace_json`'s rules): collect's span rows
    as columns where the file is laid out one event a line (runtime/json_rows.py), else
    the document parsed whole."""
    told = reading(path)
    try:
        found = json_rows.read_events(path, told.update)
    finally:
        told.close()
    if found is not None:
        _check_other(path, found.document)
        return found
    return _whole_events(read_trace_json(path))


def _whole_events(document: dict[str, Any]) -> JsonEvents:
    listed = document["traceEvents"]
    return JsonEvents({k: v for k, v in document.items() if k != "traceEvents"}, len(listed), whole=listed)


def checked_clock(path: Path | str, value: object) -> float:
    try:
        return check_number("clock_mhz", value, CLOCK_MHZ)
    except NumberError as exc:
        raise ProfilingInputError(path, f"ranks metadata: {exc}") from None


def event_ids(path: Path | str, index: int, event: dict[str, Any]) -> tuple[Any, Any]:
    """The (pid, tid) of the ``index``-th event: each an integer, a string or absent."""
    return (checked_id(path, event.get("pid"), f"event {index}: pid"),
            checked_id(path, event.get("tid"), f"event {index}: tid"))


def rank_entries(path: Path | str, other: dict[str, Any]) -> list[dict[str, Any]]:
    """The trace's ``ranks`` metadata (collect's table of rank files): a list of objects
    whose ``pid`` is an id, ``tag`` a text string or null and ``launch`` a launch
    number or absent; anything else is refused, naming the field."""
    listed = other.get("ranks")
    if listed is None:
        return []
    if not isinstance(listed, list):
        raise ProfilingInputError(path, f"ranks metadata must be a list, not {shown(listed)}")
    for n, rank in enumerate(listed):
        if not isinstance(rank, dict):
            raise ProfilingInputError(path, f"ranks metadata: entry {n} must be an object, "
                                      f"not {shown(rank)}")
        checked_id(path, rank.get("pid"), f"ranks metadata: entry {n}: pid")
        tag = rank.get("tag")
        if tag is not None and not isinstance(tag, str):
            raise ProfilingInputError(path, f"ranks metadata: entry {n}: tag must be a string or null, "
                                      f"not {shown(tag)}")
        if isinstance(tag, str):
            checked_name(path, tag, f"ranks metadata: entry {n}: tag")
        if rank.get("launch") is not None:
            try:
                check_number(f"ranks metadata: entry {n}: launch", rank["launch"], RANK)
            except NumberError as exc:
                raise ProfilingInputError(path, str(exc)) from None
    return listed


class _TraceEvents:
    """What a Chrome trace's events say, event by event as the parser gave them: the
    process and thread names, the spans and the launch slices, labels and tracks (a
    (pid, tid)) numbered as they first come, with each event's index."""

    def __init__(self, path: Path, names: TraceNames | None = None) -> None:
        self.path = path
        # A process's part of a trace holds no name event (json_rows regroups it): the
        # trace's names, read once, are shared by its parts, not copied.
        self.process_names: dict[Any, str] = {} if names is None else names.process_names
        self.thread_names: dict[tuple[Any, Any], str] = {} if names is None else names.thread_names
        self.label_ids: dict[str, int] = {}
        self.track_ids: dict[tuple[Any, Any], int] = {}
        self.label: list[int] = []
        self.track: list[int] = []
        self.ts: list[float] = []
        self.dur: list[float] = []
        self.index: list[int] = []
        self.launch_slices: list[tuple[int, float, float, str]] = []
        self.launch_index: list[int] = []

    def take(self, index: int, event: Any) -> None:
        path = self.path
        if not isinstance(event, dict):
            return
        phase = event.get("ph")
        if phase == "M":
            args = event.get("args")
            name = args.get("name") if isinstance(args, dict) else None
            pid, tid = event_ids(path, index, event)
            if event.get("name") == "process_name" and isinstance(name, str):
                self.process_names[pid] = checked_name(path, name, "process name")
            elif event.get("name") == "thread_name" and isinstance(name, str):
                self.thread_names[(pid, tid)] = checked_name(path, name, "thread name")
        elif phase == "X":
            try:
                # float() takes "nan" and "inf" as strings: the range check refuses them.
                ts = check_number("ts", float(event["ts"]), TIME_US)
                dur = check_number("dur", float(event["dur"]), DURATION_US)
                label = checked_name(path, str(event["name"]), "label")
            except (KeyError, TypeError, ValueError, OverflowError):
                raise ProfilingInputError(path, f"malformed complete event: {str(event)[:200]}") from None
            track = self.track_ids.setdefault(event_ids(path, index, event), len(self.track_ids))
            if event.get("cat") == LAUNCH_CATEGORY:  # a launch, not a span
                self.launch_slices.append((track, ts, ts + dur, label))
                self.launch_index.append(index)
                return
            self.label.append(self.label_ids.setdefault(label, len(self.label_ids)))
            self.track.append(track)
            self.ts.append(ts)
            self.dur.append(dur)
            self.index.append(index)

    def columns(self, rows: json_rows.Spans | None
                ) -> tuple[list[str], list[tuple[Any, Any]], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Labels, tracks, and the spans' label, track, ts and dur columns in event
        order, with the span rows json_rows read as columns among them: labels and
        tracks numbered by first use, as an event-by-event read numbers them."""
        label = np.array(self.label, dtype=np.int64)
        track = np.array(self.track, dtype=np.int64)
        ts = np.array(self.ts, dtype=np.float64)
        dur = np.array(self.dur, dtype=np.float64)
        if rows is None:
            return list(self.label_ids), list(self.track_ids), label, track, ts, dur
        names = [self.label_ids.setdefault(checked_name(self.path, n, "label"), len(self.label_ids))
                 for n in rows.names]
        pairs, pair = _pairs(rows.pid, rows.tid)
        codes = [self.track_ids.setdefault((p, t), len(self.track_ids)) for p, t in pairs]
        index = np.concatenate([np.array(self.index, dtype=np.int64), rows.index])
        label = np.concatenate([label, np.array(names, dtype=np.int64)[rows.name]])
        track = np.concatenate([track, np.array(codes, dtype=np.int64)[pair.reshape(-1)]])
        ts = np.concatenate([ts, rows.ts_q / 1000.0])
        dur = np.concatenate([dur, rows.dur_q / 1000.0])
        if self.index:  # spans the parser read among the rows: put in event order
            order = np.argsort(index, kind="stable")
            index, label, track, ts, dur = index[order], label[order], track[order], ts[order], dur[order]
        # Renumbered by first use: tracks among spans and launch slices, labels among spans.
        launch_track = np.array([t for t, _, _, _ in self.launch_slices], dtype=np.int64)
        first_track = np.concatenate([index, np.array(self.launch_index, dtype=np.int64)])
        track_order, track = _by_first_index(np.concatenate([track, launch_track]), first_track,
                                             len(self.track_ids))
        track, launch_track = track[: index.size], track[index.size :]
        label_order, label = _by_first_index(label, None, len(self.label_ids))
        slices = zip(launch_track.tolist(), self.launch_slices, strict=True)
        self.launch_slices = [(int(t), a, b, n) for t, (_, a, b, n) in slices]
        label_names = list(self.label_ids)
        keys = list(self.track_ids)
        return ([label_names[i] for i in label_order.tolist()], [keys[i] for i in track_order.tolist()],
                label, track, ts, dur)


def _pairs(pid: np.ndarray, tid: np.ndarray) -> tuple[list[tuple[int, int]], np.ndarray]:
    """The distinct (pid, tid) and each row's index into them."""
    if pid.size and int(pid.max()) < 2**31 and int(tid.max()) < 2**31:  # one int64 key a row
        keys, inverse = np.unique((pid << 31) | tid, return_inverse=True)
        return [(k >> 31, k & (2**31 - 1)) for k in keys.tolist()], inverse.reshape(-1)
    both, inverse = np.unique(np.stack([pid, tid], axis=1), axis=0, return_inverse=True)
    return [(int(p), int(t)) for p, t in both.tolist()], inverse.reshape(-1)


def _by_first_index(codes: np.ndarray, at: np.ndarray | None, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The codes in use ordered by the least ``at`` of each (None: their order), and
    ``codes`` renumbered so."""
    in_order = codes if at is None else codes[np.argsort(at, kind="stable")]
    first = np.full(size, in_order.size, dtype=np.int64)
    np.minimum.at(first, in_order, np.arange(in_order.size))
    used = np.flatnonzero(first < in_order.size)
    ordered = used[np.argsort(first[used], kind="stable")]
    renumber = np.full(size, -1, dtype=np.int64)
    renumber[ordered] = np.arange(ordered.size)
    return ordered, renumber[codes]


def load_trace(path: Path, events: JsonEvents | None = None) -> SpanTable:
    """Spans of a Chrome trace written by ``optrace collect`` (or of its events, read)."""
    if events is None:
        events = read_trace_events(path)
    try:
        return _trace_table(path, events)
    except ProfilingInputError:
        if events.whole is not None:
            raise
    # A fault among the events read line by line: the whole document's read names the
    # first one, as it always has.
    return _trace_table(path, _whole_events(read_trace_json(path)))


class TraceNames:
    """The process and thread names that end a JSON trace, taken a batch of name events
    at a time: as a table's read takes them (text names, checked) and as ``inspect``
    keys drop markers by (:meth:`title`: any name, as text). Held for the whole read, so
    kept small: a name's text is shared by every core that bears it (``AIC 3`` of each
    rank), and a title is kept apart only where it is not the name (a name not text)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.process_names: dict[Any, str] = {}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self._titles: dict[tuple[bool, Any], str] = {}  # (a thread's?, key): title, where not the name

    def take(self, events: list[Any]) -> bool:
        """False where an event holds a fault (the whole read names it)."""
        try:
            for event in events:
                args = event.get("args")
                name = args.get("name") if isinstance(args, dict) else None
                pid, tid = event_ids(self.path, -1, event)
                kind = event.get("name")
                if kind not in ("process_name", "thread_name"):
                    continue
                key = pid if kind == "process_name" else (pid, tid)
                into: dict[Any, str] = self.process_names if kind == "process_name" else self.thread_names
                if isinstance(name, str):
                    into[key] = sys.intern(checked_name(self.path, name, kind.replace("_", " ")))
                    self._titles.pop((kind == "thread_name", key), None)
                else:
                    self._titles[(kind == "thread_name", key)] = str(name)
        except ProfilingInputError:
            return False
        return True

    def title(self, thread: bool, key: Any, default: str) -> str:
        """A process's (``thread``: a thread's) title as inspect reads it."""
        found = self._titles.get((thread, key))
        if found is not None:
            return found
        return (self.thread_names if thread else self.process_names).get(key, default)


def _trace_table(path: Path, events: JsonEvents, part: bool = False, nested: bool = True,
                 names: TraceNames | None = None,
                 ranks: tuple[RunSettings, dict[Any, str]] | None = None) -> SpanTable:
    """The table of a JSON trace's events; with ``part``, of one process's (the trace's
    warnings are its closing's, not the table's; its names are ``names``, and ``ranks``
    what its rank table says: read once for all processes, not once per process)."""
    other = events.document.get("otherData") or {}
    warnings = [] if part else _json_warnings(path, other)
    found = _TraceEvents(path, names)
    told = reading(path) if events.whole is not None else None
    for index, event in events.events():
        if told is not None and not index & 0xFFFF:
            told.update(index, events.count)
        found.take(index, event)
    if told is not None:
        told.close()
    labels, keys, label, track, ts_all, dur_all = found.columns(events.spans)
    processes, threads = found.process_names, found.thread_names
    real = [(pid, processes.get(pid, f"pid {pid}"), threads.get((pid, tid), f"tid {tid}"))
            for (pid, tid) in keys]
    settings, pid_launch = _json_settings(path, other) if ranks is None else ranks
    rows = launch_rows(track, ts_all, ts_all + dur_all, real, found.launch_slices,
                       [pid_launch.get(pid) for pid, _, _ in real])
    return SpanTable(
        source=str(path),
        labels=labels,
        tracks=rows.names,
        processes=max(len({pid for pid, _ in keys}), 1),
        label=label.astype(np.int32),
        track=rows.track,
        ts=ts_all,
        dur=dur_all,
        settings=settings,
        warnings=warnings,
        launches=rows.launches,
        track_launch=rows.track_launch,
        launch_rows=rows.by_track,
        trace_tracks=int(np.unique(track).size),
        nested=nested,
    )


def _json_warnings(path: Path, other: dict[str, Any]) -> list[str]:
    if other.get("format") != TRACE_FORMAT:
        return [f"{path}: not written by optrace collect: runtime settings unknown"]
    return skipped_warnings(path, other)


def skipped_warnings(path: Path, meta: dict[str, Any]) -> list[str]:
    """What the rank table says collect left out of the trace (each rank file's
    `skipped_records`): the figures read from it miss those records, as those read from
    the rank files do, which warn of them core by core. One line for the whole trace: a
    cluster's table has tens of thousands of rank files."""
    entries = rank_entries(path, meta)
    skipped = [(str(rank.get("file", rank.get("pid"))), n) for rank in entries
               if isinstance(n := rank.get("skipped_records"), int) and not isinstance(n, bool) and n > 0]
    if not skipped:
        return []
    total = sum(n for _, n in skipped)
    where = ", ".join(f"{name}: {n}" for name, n in skipped[:3]) + (
        f" and {len(skipped) - 3} more" if len(skipped) > 3 else "")
    # With --cores, collect counts them on the cores kept (beside, on every core); a trace
    # of an earlier version counted every core's, and is worded so.
    filtered = meta.get("cores_filtered") is True
    of_every = (" — counted over every core of the rank files, of which `--cores` kept fewer"
                if filtered and not all("skipped_records_every_core" in rank for rank in entries)
                else " on the cores `--cores` kept" if filtered else "")
    return [f"{path}: {total} records were skipped when it was collected (dropped when a core's slot "
            f"was full, or with unknown ids, an unmatched E or a corrupt time; {where}{of_every}): "
            "the figures leave them "
            "out"]


def _json_settings(path: Path, other: dict[str, Any]) -> tuple[RunSettings, dict[Any, str]]:
    """The run's settings from a JSON trace's rank table, and the launch of each pid it
    names (a trace of the layout before launch slices)."""
    settings = RunSettings()
    pid_launch: dict[Any, str] = {}
    for rank in rank_entries(path, other):
        if rank.get("launch") is not None:
            pid_launch[rank.get("pid")] = _launch_name(rank.get("tag"), rank["launch"])
        if rank.get("clock_mhz") is not None:
            settings.clock_mhz.add(checked_clock(path, rank["clock_mhz"]))
        settings.barrier.add(rank.get("barrier") if isinstance(rank.get("barrier"), bool) else None)
    return settings, pid_launch


def _perfetto_warnings(path: Path, found: perfetto_read.PerfettoSpans) -> list[str]:
    warnings: list[str] = []
    meta = found.metadata if isinstance(found.metadata, dict) else {}
    if meta.get("format") != "optrace-perfetto":
        warnings.append(f"{path}: not written by optrace collect: runtime settings unknown")
    if found.unclosed:
        warnings.append(f"{path}: {found.unclosed} slice begins without their end (left out)")
    if meta.get("format") == "optrace-perfetto":
        warnings += skipped_warnings(path, meta)
    return warnings


def _perfetto_settings(path: Path, meta: dict[str, Any]) -> tuple[RunSettings, dict[Any, str]]:
    """The run's settings and each process's launch (by its descriptor's pid) from the
    trace's rank table."""
    settings = RunSettings()
    pid_launch: dict[Any, str] = {}
    for rank in rank_entries(path, meta):
        if rank.get("launch") is not None and isinstance(rank.get("pid"), int):
            # the rank table has the JSON trace's pid; a process descriptor has it plus one
            pid_launch[rank["pid"] + 1] = _launch_name(rank.get("tag"), rank["launch"])
        if rank.get("clock_mhz") is not None:
            settings.clock_mhz.add(checked_clock(path, rank["clock_mhz"]))
        settings.barrier.add(rank.get("barrier") if isinstance(rank.get("barrier"), bool) else None)
    return settings, pid_launch


def load_perfetto_trace(path: Path, found: perfetto_read.PerfettoSpans | None = None,
                        part: bool = False, nested: bool = True) -> SpanTable:
    """Spans of a Perfetto protobuf trace (``.pftrace``, as ``collect`` writes it), or of
    what :func:`perfetto_read.read_spans` found in it; with ``part``, of one process
    :func:`perfetto_read.read_processes` gave (the trace's warnings and settings are
    its closing's, not the table's)."""
    if found is None:
        progress = reading(path)
        try:
            found = perfetto_read.read_spans(path, progress.update)
        finally:
            progress.close()
    meta = found.metadata if isinstance(found.metadata, dict) and not part else {}
    warnings = [] if part else _perfetto_warnings(path, found)
    # Labels and tracks numbered in the order the spans first name them (then the launch
    # slices' tracks), each name checked once.
    used = _by_first_use(found.span_name, len(found.names))
    for k in used.tolist():
        checked_name(path, found.names[k], "label")
    label_of = np.zeros(len(found.names), np.int32)
    label_of[used] = np.arange(used.size, dtype=np.int32)
    past = (np.abs(found.span_start) > PERFETTO_NS_MAX) | (np.abs(found.span_end) > PERFETTO_NS_MAX)
    if past.any():
        k = int(np.argmax(past))
        name = found.names[int(found.span_name[k])]
        _past_bound(path, name, int(found.span_start[k]), int(found.span_end[k]))
    seen = _by_first_use(found.span_track, len(found.track_uuids))
    track_ids: dict[int, int] = {found.track_uuids[k]: n for n, k in enumerate(seen.tolist())}
    dense = np.zeros(len(found.track_uuids), np.int64)
    dense[seen] = np.arange(seen.size)
    launch_slices: list[tuple[int, float, float, str]] = []
    for track, label, start, end in found.launches:
        checked_name(path, label, "label")
        if not (abs(start) <= PERFETTO_NS_MAX and abs(end) <= PERFETTO_NS_MAX):
            _past_bound(path, label, start, end)
        track_id = track_ids.setdefault(track, len(track_ids))
        launch_slices.append((track_id, start / 1000.0, end / 1000.0, label))
    # Shown by report / inspect: no NUL, as the JSON reader's process and thread names.
    names = [checked_name(path, found.track_name(uuid), "track name") for uuid in track_ids]
    label_col = label_of[found.span_name]
    track_col = dense[found.span_track]
    starts, ends = found.span_start, found.span_end
    settings, pid_launch = _perfetto_settings(path, meta)
    instants = [(found.track_name(uuid), ns / 1000.0, name) for uuid, name, ns in found.instants]
    parents = {uuid: found.threads.get(uuid, (None, ""))[0] for uuid in track_ids}
    # Without launch slices (a trace written before them), each process's launch as in a
    # JSON trace: the rank table's (tag, launch) through the process descriptor's pid.
    real: list[tuple[Any, str, str]] = []
    fallback: list[str | None] = []
    for uuid, name in zip(track_ids, names, strict=True):
        process, _, thread = name.partition(" / ")
        real.append((parents[uuid], process, thread))
        parent = parents[uuid]
        pid = found.process_pids.get(parent) if parent is not None else None
        fallback.append(pid_launch.get(pid) if pid is not None else None)
    rows = launch_rows(track_col, starts, ends, real, launch_slices, fallback, per_us=1000.0)
    del track_col
    order = _by_row_start_longest(rows.track, starts, ends)
    labels = [found.names[k] for k in used.tolist()]
    # The table's columns, and nothing else of the trace's, held while the table works
    # out its nesting (this reader's peak memory).
    label, row = label_col[order], rows.track[order]
    del label_col, found
    rows.track = row  # (its unsorted column let go)
    start_ns, dur_ns = starts[order], ends[order]
    del order, starts, ends
    dur_ns -= start_ns
    ts = start_ns / 1000.0
    del start_ns
    dur = dur_ns / 1000.0
    del dur_ns
    return SpanTable(
        source=str(path),
        labels=labels,
        tracks=rows.names,
        processes=max(len(set(parents.values())), 1),
        label=label,
        track=row,
        ts=ts,
        dur=dur,
        settings=settings,
        warnings=warnings,
        launches=rows.launches,
        track_launch=rows.track_launch,
        launch_rows=rows.by_track,
        trace_tracks=int(seen.size),
        instants=instants,
        nested=nested,
    )


def _by_row_start_longest(row: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """np.lexsort((-end, start, row)) of integer times: one sort of (row, start) as one
    integer key where it fits (a third of the work), then the spans of one row and start
    put longest first (ties kept in order, as lexsort keeps them)."""
    if not start.size:
        return start
    low, high = int(start.min()), int(start.max())
    rows = int(row.max()) + 1
    if row.min() < 0 or rows * (high - low + 1) >= 1 << 62:
        return np.lexsort((-end, start, row))
    key = row.astype(np.int64) * (high - low + 1) + (start - low)
    order = np.argsort(key, kind="stable")
    key = key[order]
    tie = key[1:] == key[:-1]
    if tie.any():
        within = np.zeros(key.size, bool)  # in a run of one (row, start)
        within[1:] |= tie
        within[:-1] |= tie
        at = np.flatnonzero(within)
        run = np.cumsum(np.concatenate([[True], ~tie]))[at]
        order[at] = order[at][np.lexsort((-end[order[at]], run))]
    return order


def _by_first_use(ids: np.ndarray, size: int) -> np.ndarray:
    """The distinct ids (each in range(size)) in the order they first come: what
    np.unique(ids, return_index=True) gives put in order of the index, without a sort of
    the ids (they are a table's rows: a few thousand names or tracks for a million spans)."""
    first = np.full(size, ids.size, np.int64)
    changes = ids[1:] != ids[:-1]
    if ids.size and np.count_nonzero(changes) < ids.size >> 3:
        # An id first comes where the one before differs (or at 0): only those places
        # looked at — a few per track for a table's tracks, whose spans come in runs.
        at = np.concatenate([np.zeros(1, np.int64), np.flatnonzero(changes) + 1])
        np.minimum.at(first, ids[at], at)
    elif ids.size:
        # Ids that change at almost every place (a table's labels): every place's id,
        # the lowest place kept (numpy >= 1.25 runs ufunc.at as a plain loop: a tenth of
        # the time of np.unique's sort of the first 16k, which was a reader's 3 %).
        np.minimum.at(first, ids, np.arange(ids.size, dtype=np.int64))
    del changes
    used = np.flatnonzero(first < ids.size)
    return used[np.argsort(first[used])]


def unique_small(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(keys, return_inverse=True) of non-negative keys: by a table where the
    keys are few enough (rows x launches), else by np.unique's sort."""
    if keys.size and int(keys.min()) >= 0 and int(keys.max()) < max(1 << 16, 4 * keys.size):
        present = np.flatnonzero(np.bincount(keys))
        table = np.zeros(int(present[-1]) + 1, np.int64)
        table[present] = np.arange(present.size)
        return present.astype(keys.dtype), table[keys]
    return np.unique(keys, return_inverse=True)


def percentiles(values: np.ndarray, percents: tuple[float, ...]) -> list[float]:
    """np.percentile(values, percents) (the default, linear method) to the bit, for a
    non-empty 1-D array: one partition at the positions it reads. Not np.percentile
    itself: its partition's np.unique imports numpy.ma on first use (~14 ms of a reader's
    start). Each position is numpy's: (n - 1) * q, its floor and the next, the last
    value past the end; the two values joined as numpy's _lerp joins them."""
    n = int(values.size)
    picks = []
    for percent in percents:
        at = (n - 1) * (percent / 100)
        low = math.floor(at)
        picks.append((at, -1, -1) if at >= n - 1 else (at, low, low + 1))
    kth = sorted({k % n for _, low, high in picks for k in (0, -1, low, high)})
    part = np.partition(values, kth)
    if np.isnan(part[-1]):  # a NaN sorts last: numpy's answer is NaN
        return [math.nan] * len(picks)
    out = []
    for at, low, high in picks:
        a, b = part[low], part[high]
        t = np.float64(at - low)  # numpy weighs in float64, whatever the values
        diff = b - a
        out.append(float(b - diff * (1 - t) if t >= 0.5 else a + diff * t))
    return out


def _past_bound(path: Path, label: str, start: int, end: int) -> None:
    raise ProfilingInputError(path, f"slice {label[:60]!r}: timestamp {max(abs(start), abs(end))} "
                              f"ns is past {PERFETTO_NS_MAX:g} ns (31 years)")


#: Slack (µs) of a span's end against its launch slice's: JSON's float µs (the trace's
#: times are whole ns, so nothing real falls within it).
LAUNCH_SLACK_US = 5e-4


class LaunchRows:
    """A trace's spans by row (:func:`launch_rows`): ``track``, each span's row;
    ``names``, each row's name; ``track_launch``, each row's launch (an index into
    ``launches``); ``by_track``, each trace track's launch slices: their starts, ends
    (µs) and rows' names."""

    def __init__(self, track: np.ndarray, names: list[str], launches: list[str], track_launch: np.ndarray,
                 by_track: dict[str, tuple[list[float], list[float], list[str]]]) -> None:
        self.track = track
        self.names = names
        self.launches = launches
        self.track_launch = track_launch
        self.by_track = by_track


def launch_rows(
    track: np.ndarray, ts: np.ndarray, end: np.ndarray, real: list[tuple[Any, str, str]],
    slices: list[tuple[int, float, float, str]], fallback: list[str | None], per_us: float = 1.0,
) -> LaunchRows:
    """The spans of a trace by row: a trace track's spans of one launch each.

    ``track``: each span's track in the trace (an index into ``real``: (process key,
    process name, thread name) each); ``slices``: the launch slices (track, start, end,
    name; µs like ``ts`` and ``end``). A span belongs to the launch slice on its track
    that holds it; rows are named ``Rank 0 (launch 3) / AIC 1`` when there are several
    launches, and come rank by rank, each rank's launches in time order. A trace without
    launch slices (written before traces had them: a process per rank file) keeps its
    tracks as rows, each in its process's launch: ``fallback`` (the rank table's, per
    track) or the process itself. ``ts`` and ``end`` are in units ``per_us`` to the µs
    (a trace's ns: divided a track at a time where that is enough, not span by span)."""
    launch_ids: dict[str, int] = {}
    if not slices:
        column = [launch_ids.setdefault(fallback[k] or f"process {process}", len(launch_ids))
                  for k, (_, process, _) in enumerate(real)]
        names = [f"{process} / {thread}" for _, process, thread in real]
        return LaunchRows(track.astype(np.int32), names, list(launch_ids), np.array(column, dtype=np.int32),
                          {})
    s_track = np.array([t for t, _, _, _ in slices], dtype=np.int64)
    s_start = np.array([a for _, a, _, _ in slices], dtype=np.float64)
    s_end = np.array([b for _, _, b, _ in slices], dtype=np.float64)
    s_launch = np.array([launch_ids.setdefault(n, len(launch_ids)) for _, _, _, n in slices], dtype=np.int64)
    from_slices = len(launch_ids)
    # What follows is said of units: the spans themselves, or — when every span of a
    # track lies in the one launch of that track (a trace's usual shape) — the tracks,
    # each standing for its spans (a track's sums, no column over every span).
    per_track = _launch_by_track(track, ts, end, s_track, s_start, s_end, s_launch, per_us)
    if per_track is None:
        if per_us != 1.0:
            ts, end = ts / per_us, end / per_us
        unit_track, unit_first, span_unit = track, ts, None
        unit_launch = _held_by(track, ts, end, s_track, s_start, s_end, s_launch)
    else:
        unit_track, unit_launch, unit_first, span_unit = per_track
    if (unit_launch < 0).any():  # outside every launch slice: its process's own launch
        for k in np.unique(unit_track[unit_launch < 0]).tolist():
            own = launch_ids.setdefault(f"process {real[k][1]}", len(launch_ids))
            unit_launch[(unit_track == k) & (unit_launch < 0)] = own
    width = len(launch_ids) + 1
    pairs, row = unique_small(unit_track * width + unit_launch)
    pair_track, pair_launch = pairs // width, pairs % width
    processes: dict[Any, int] = {}
    track_process = np.array([processes.setdefault(_hashable(key), len(processes)) for key, _, _ in real],
                             dtype=np.int64)
    process = track_process[pair_track]
    # Each launch's first start in each process: a rank's rows in its own time order (as
    # collect laid its launches out), whatever another rank ran first.
    keyed = np.concatenate([track_process[s_track] * width + s_launch,
                            track_process[unit_track] * width + unit_launch, process * width + pair_launch])
    keys, at = np.unique(keyed, return_inverse=True)
    first = np.full(keys.size, np.inf)
    np.minimum.at(first, at[:s_track.size], s_start)
    np.minimum.at(first, at[s_track.size:s_track.size + unit_track.size], unit_first)
    ranked = np.lexsort((pair_track, pair_launch, first[at[s_track.size + unit_track.size:]], process))
    place = np.empty_like(ranked)
    place[ranked] = np.arange(ranked.size)
    launches = list(launch_ids)
    several = from_slices > 1
    names = []
    for k in ranked.tolist():
        _, process_name, thread = real[int(pair_track[k])]
        launch = int(pair_launch[k])
        shown = with_launch(process_name, launches[launch]) if several and launch < from_slices \
            else process_name
        names.append(f"{shown} / {thread}")
    slices_by_track: dict[str, tuple[list[float], list[float], list[str]]] = {}
    order = np.lexsort((s_start, s_track))
    keys = s_track[order] * width + s_launch[order]
    if pairs.size:
        found = np.minimum(np.searchsorted(pairs, keys), pairs.size - 1)
        rows_of = np.where(pairs[found] == keys, place[found], -1).tolist()
    else:  # launch slices holding no span (cores that only dropped records): no row
        rows_of = [-1] * keys.size
    columns = (order.tolist(), s_track[order].tolist(), s_start[order].tolist(), s_end[order].tolist())
    for k, t, begins, finishes, row_of in zip(*columns, rows_of, strict=True):
        track_name = f"{real[t][1]} / {real[t][2]}"
        if row_of >= 0:
            shown = names[row_of]
        else:  # a launch slice holding no span (a core that only dropped records)
            shown = f"{with_launch(real[t][1], launches[int(s_launch[k])])} / {real[t][2]}" if several \
                else track_name
        starts, ends, named = slices_by_track.setdefault(track_name, ([], [], []))
        starts.append(begins)
        ends.append(finishes)
        named.append(shown)
    span_row = place[row].astype(np.int32)
    if span_unit is not None:
        span_row = span_row[span_unit]
    return LaunchRows(span_row, names, launches, pair_launch[ranked].astype(np.int32), slices_by_track)


def with_launch(process: str, launch: str) -> str:
    """A row's process: ``Rank 0 (launch 3)``; ``Rank 0 (node-a, launch 3)`` for
    ``Rank 0 (node-a)``."""
    if process.endswith(")") and " (" in process:
        return f"{process[:-1]}, {launch})"
    return f"{process} ({launch})"


def _held_by(track: np.ndarray, ts: np.ndarray, end: np.ndarray, s_track: np.ndarray, s_start: np.ndarray,
             s_end: np.ndarray, s_launch: np.ndarray) -> np.ndarray:
    """Each span's launch: of the slice on its track that holds it, else -1. The slice
    holding a span is the last one on its track starting by the span's start (of those
    starting together, the last given)."""
    out = np.full(ts.size, -1, dtype=np.int64)
    if not (ts.size and s_track.size):
        return out
    k = s_track.size
    by_start = np.lexsort((s_start, s_track))  # the slices by (track, start, as given)
    top = max(int(track.max()), int(s_track.max())) + 1
    if int(track.min()) < 0 or int(s_track.min()) < 0 or top > max(1 << 16, 4 * (ts.size + k)):
        return _held_by_sorted(track, ts, end, s_track, s_start, s_end, s_launch)
    count = np.bincount(s_track, minlength=top)  # slices on each track
    if int(count.max()) > 64:
        return _held_by_sorted(track, ts, end, s_track, s_start, s_end, s_launch)
    if int(count.max()) == 1:
        # One slice a track (a trace's launches each on tracks of their own, or one
        # launch): each span's slice is its track's, looked up, no count over ranks. A
        # track without a slice points at a sentinel past the end that holds nothing.
        slot_of = np.full(top, k, np.int64)
        slot_of[s_track] = np.arange(k)
        slot = slot_of[track]
        begins = np.append(s_start, np.inf)[slot]
        finishes = np.append(s_end + LAUNCH_SLACK_US, -np.inf)[slot]
        inside = (begins <= ts) & (end <= finishes)
        return np.where(inside, np.append(s_launch, -1)[slot], -1)
    # A track's slices are a few (one a launch): the slices of its track starting by each
    # span's start counted one rank at a time over every span, no sort of the spans.
    first = np.concatenate([[0], np.cumsum(count)[:-1]])[track]  # its track's first slice
    mine = count[track]
    started = np.zeros(ts.size, np.int64)
    for rank in range(int(mine.max())):
        slice_ = by_start[np.minimum(first + rank, k - 1)]
        started += (mine > rank) & (s_start[slice_] <= ts)
    held = np.flatnonzero(started > 0)
    slot = by_start[first[held] + started[held] - 1]
    inside = end[held] <= s_end[slot] + LAUNCH_SLACK_US
    out[held[inside]] = s_launch[slot[inside]]
    return out


def _launch_by_track(track: np.ndarray, ts: np.ndarray, end: np.ndarray, s_track: np.ndarray,
                     s_start: np.ndarray, s_end: np.ndarray, s_launch: np.ndarray, per_us: float = 1.0,
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """What :func:`_held_by` finds, said of tracks, where it is one launch a track: each
    track with spans (in order), its launch (-1: no slice on it), its first span's start,
    and each span's place among those tracks. None where a track has several slices, or
    some of its spans lie in its slice and some do not (then it is said span by span).

    Every span of a track lies in the track's one slice exactly when the earliest start
    and the latest end of them do: per-track minima and maxima, no column per span
    beyond the one lookup of each span's place."""
    if not (ts.size and s_track.size) or int(track.min()) < 0 or int(s_track.min()) < 0:
        return None
    top = max(int(track.max()), int(s_track.max())) + 1
    if top > max(1 << 16, 4 * (ts.size + s_track.size)):
        return None
    count = np.bincount(s_track, minlength=top)
    if int(count.max()) != 1:
        return None
    spans_on = np.bincount(track, minlength=top)
    # Each track's earliest start and latest end, in µs: a monotonic division of the
    # extremes is the extreme of the divided times.
    # (in the times' own type: ufunc.at is fast only without a cast, and a monotonic
    # conversion of the extremes is the extreme of the converted times)
    low = _extremes(np.minimum, track, ts, top) / per_us
    high = _extremes(np.maximum, track, end, top) / per_us
    begins = np.full(top, np.inf)
    begins[s_track] = s_start
    finishes = np.full(top, -np.inf)
    finishes[s_track] = s_end + LAUNCH_SLACK_US
    launch = np.full(top, -1, np.int64)
    launch[s_track] = s_launch
    used = np.flatnonzero(spans_on)
    inside = (begins[used] <= low[used]) & (high[used] <= finishes[used])
    # A track with a slice has all its spans in it, or none of them (checked span by span
    # otherwise); NaN times compare false both ways and go the per-span way.
    if not inside.all():
        sliced = count[used] > 0
        if (sliced & ~inside).any():
            return None
    if used.size == top:
        place = track
    else:
        where = np.zeros(top, np.int64)
        where[used] = np.arange(used.size)
        place = where[track]
    return used, np.where(inside, launch[used], -1), low[used], place


def _extremes(ufunc: np.ufunc, track: np.ndarray, values: np.ndarray, top: int) -> np.ndarray:
    """Per track (of ``top``), the least (``np.minimum``) or greatest (``np.maximum``) of
    its values, as float64; a track without values holds the identity (±inf)."""
    lowest = ufunc is np.minimum
    if values.dtype.kind in "iu":
        info = np.iinfo(values.dtype)
        out = np.full(top, info.max if lowest else info.min, values.dtype)
        ufunc.at(out, track, values)
        found = out.astype(np.float64)
        found[np.bincount(track, minlength=top) == 0] = np.inf if lowest else -np.inf
        return found
    out = np.full(top, np.inf if lowest else -np.inf, np.float64)
    ufunc.at(out, track, values)
    return out


def _held_by_sorted(track: np.ndarray, ts: np.ndarray, end: np.ndarray, s_track: np.ndarray,
                    s_start: np.ndarray, s_end: np.ndarray, s_launch: np.ndarray) -> np.ndarray:
    """:func:`_held_by` of spans on many tracks: slices and spans sorted together (track,
    time, a slice before a span at its time): the slice holding a span is the last one
    before it on its track."""
    n = s_track.size
    order = np.lexsort((np.concatenate([np.zeros(n), np.ones(ts.size)]), np.concatenate([s_start, ts]),
                        np.concatenate([s_track, track])))
    last = np.where(order < n, np.arange(order.size), -1)
    np.maximum.accumulate(last, out=last)
    at = np.flatnonzero(order >= n)
    span = order[at] - n
    slice_ = np.where(last[at] >= 0, order[np.maximum(last[at], 0)], 0)
    held = (last[at] >= 0) & (s_track[slice_] == track[span]) & (end[span] <= s_end[slice_] + LAUNCH_SLACK_US)
    out = np.full(ts.size, -1, dtype=np.int64)
    out[span[held]] = s_launch[slice_[held]]
    return out


def _hashable(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, str)) else repr(value)


@dataclass
class Closing:
    """What a source of span tables knows after its last one: the run's settings and
    warnings (in the order a table of every span lists them) and its processes."""

    source: str
    settings: RunSettings = field(default_factory=RunSettings)
    warnings: list[str] = field(default_factory=list)
    processes: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)  # a trace's (otherData, the pftrace's attribute)
    trace_tracks: int = 0  # a trace's tracks with spans


@dataclass
class _RankSpans:
    """One rank file's spans as a table's columns: its rows (``Rank 0 / AIC 1``, a core
    each), the launch they are in, and per span its label, row (from 0), start, duration."""

    tracks: list[str]
    launch: str
    label: list[np.ndarray]
    track: list[np.ndarray]
    ts: list[np.ndarray]
    dur: list[np.ndarray]


def _rank_spans(path: Path, point_map: Path | None, clock_mhz: float | None,
                closing: Closing) -> tuple[list[str], Iterator[_RankSpans]]:
    """The point map's labels, and each decodable rank file's spans, in file order; the
    run's settings, warnings and processes gathered into ``closing`` as they go."""
    # Rank by rank, each rank's launches in order: the rows in a trace's order (a process
    # a rank, its launches on its tracks), so a page that draws the first rows draws the
    # same ones from the directory as from the trace collected from it.
    listed = list_rank_files(path)
    pmap = load_point_map(resolve_point_map(path, point_map))
    files, kept = _in_trace_order(path, listed, pmap, clock_mhz)
    several_runs = len({n.run_key for n, _ in files}) > 1

    def spans() -> Iterator[_RankSpans]:
        told = Progress(f"decoding {path}")
        try:
            yield from ranks(told)
        finally:
            told.close()
        if closing.processes == 0:
            raise ProfilingInputError(path, "no rank file could be decoded: " + "; ".join(closing.warnings))

    def loaded() -> Iterator[tuple[RankFileName, Path, RankBuffer | ProfilingInputError]]:
        for position, (name, file) in enumerate(files):
            buffer = kept(position)  # read by the placement pass: not read again
            if buffer is not None:
                yield name, file, buffer
            else:
                yield from iter_rank_buffers([(name, file)])

    def ranks(told: Progress) -> Iterator[_RankSpans]:
        for done, (name, _file, loaded_file) in enumerate(loaded()):
            told.update(done, len(files))
            try:
                if isinstance(loaded_file, ProfilingInputError):
                    raise loaded_file
                decoded = decode_rank(loaded_file, pmap, DecodeOptions(clock_mhz=clock_mhz))
            except ProfilingInputError as exc:
                closing.warnings.append(str(exc))
                continue
            closing.processes += 1
            closing.settings.clock_mhz.add(decoded.clock_mhz)
            closing.settings.barrier.add(decoded.meta.barrier)
            closing.warnings.extend(f"{decoded.path}: {issue}" for issue in decoded.issues)
            # Rows named as a trace's (launch_rows): `Rank 0 (moe, launch 3) / AIC 1`.
            rank_name = f"Rank {name.rank}"
            if several_runs:
                rank_name = with_launch(rank_name, launch_name(name.tag, name.launch))
            found = _RankSpans([], _launch_name(name.tag, name.launch), [], [], [], [])
            for core in decoded.cores:
                found.track.append(np.full(core.label.size, len(found.tracks), dtype=np.int32))
                found.tracks.append(f"{rank_name} / {core.name}")
                found.label.append(core.label)
                found.ts.append(core.start / decoded.clock_mhz)
                found.dur.append((core.end - core.start) / decoded.clock_mhz)
            yield found

    return list(pmap.labels), spans()


def _in_trace_order(
    path: Path, files: list[tuple[RankFileName, Path]], pmap: PointMap, clock_mhz: float | None,
) -> tuple[list[tuple[RankFileName, Path]], Callable[[int], RankBuffer | None]]:
    """A directory's rank files rank by rank, each rank's launches in the order its trace
    lays them out, and what the ordering read of each (by position; None: read it).
    Launches of one tag run in their launch order; where a rank has launches of several
    tags (ops of one step), their cycles interleave them, so the placement collect makes
    orders them — reading those ranks' files, kept for decoding as collect keeps them."""
    files = sorted(files, key=lambda item: (item[0].rank, item[0].run_key))
    if len({name.tag or "" for name, _ in files}) < 2:
        return files, lambda _position: None
    told = Progress(f"ordering the launches of {path}")
    try:
        placed = place_ranks(files, pmap, DecodeOptions(clock_mhz=clock_mhz), None,
                             keep_bytes=KEEP_READ_BYTES, advance=lambda done: told.update(done, len(files)))
    finally:
        told.close()
    return placed.files, placed.take_buffer


def _cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)


def profiling_dir_chunks(
    path: Path, point_map: Path | None = None, clock_mhz: float | None = None, nested: bool = True,
) -> tuple[Iterator[SpanTable], Closing]:
    """A profiling directory's spans a rank file at a time (each its own table: a launch
    of a rank, its cores' rows), the rows in :func:`load_profiling_dir`'s order; the
    closing is complete once the tables are."""
    closing = Closing(str(path))
    labels, ranks = _rank_spans(path, point_map, clock_mhz, closing)

    def tables() -> Iterator[SpanTable]:
        for found in ranks:
            yield SpanTable(
                source=str(path), labels=labels, tracks=found.tracks, processes=1,
                label=_cat(found.label, np.int32), track=_cat(found.track, np.int32),
                ts=_cat(found.ts, np.float64), dur=_cat(found.dur, np.float64), settings=RunSettings(),
                launches=[found.launch], track_launch=np.zeros(len(found.tracks), np.int32), nested=nested)

    return tables(), closing


def whole_table_chunks(table: SpanTable, metadata: dict[str, Any] | None = None,
                       ) -> tuple[Iterator[SpanTable], Closing]:
    """A table of every span as the one chunk of its source."""
    return iter([table]), Closing(table.source, table.settings, table.warnings, table.processes,
                                  metadata or {}, table.trace_tracks)


class _LaunchCheck:
    """Whether a trace's tables of a process each name and order their launches as its
    one table would: :func:`launch_rows` names a row's launch where the trace has several
    (a process of one launch cannot tell), and orders a rank's launches by their first
    start in the rank, which a process's table alone knows — but where two start
    together, by the order its launches are met, which may differ. Raises
    perfetto_read.Regroup at the end where they would not."""

    def __init__(self) -> None:
        self.slices: set[str] = set()
        # per table with launch slices: several launches named in it?, its launches' first
        # starts in row order
        self.named: list[tuple[bool, list[float]]] = []

    def add(self, table: SpanTable, launches: list[tuple[str, float]]) -> None:
        """``launches``: the process's launch slices, (name, start µs) each."""
        mine = {name for name, _ in launches}
        self.slices |= mine
        if not mine:
            return
        first: dict[str, float] = {}  # each launch's first start in this rank (µs)
        for name, start in launches:
            first[name] = min(first.get(name, math.inf), start)
        if table.ts.size:
            launch = table.track_launch[table.track]
            for k, name in enumerate(table.launches):
                held = table.ts[launch == k]
                if held.size:
                    first[name] = min(first.get(name, math.inf), float(held.min()))
        order = list(dict.fromkeys(table.launches[k] for k in table.track_launch.tolist()))
        self.named.append((len(mine) > 1, [first.get(name, math.inf) for name in order]))

    def check(self) -> None:
        for several, starts in self.named:
            if several != (len(self.slices) > 1):
                raise perfetto_read.Regroup("a rank's launches named apart from the trace's")
            if any(a >= b for a, b in itertools.pairwise(starts)):
                raise perfetto_read.Regroup("a rank's launches starting together")


def perfetto_chunks(path: Path, nested: bool = True) -> tuple[Iterator[SpanTable], Closing]:
    """A ``.pftrace``'s spans a process (a rank) at a time, each table the rows
    :func:`load_perfetto_trace` gives that process's spans, in the same order, named the
    same. Raises :class:`perfetto_read.Regroup` from the iterator where they would not be
    — a process's events after another's began, a trace without launch slices (its
    launches are named from the rank table at its end), a rank whose launches the whole
    trace would name or order otherwise (:class:`_LaunchCheck`): then the trace is read
    whole (formats.fold_spans)."""
    closing = Closing(str(path))
    progress = reading(path)
    found, parts = perfetto_read.read_processes(path, progress.update)

    def tables() -> Iterator[SpanTable]:
        check = _LaunchCheck()
        parents = 0
        try:
            for part in parts:
                table = load_perfetto_trace(path, part, part=True, nested=nested)
                check.add(table, [(name, start / 1000.0) for _, name, start, _ in part.launches])
                parents += 1  # a part is one process's
                closing.trace_tracks += table.trace_tracks
                yield table
        finally:
            progress.close()
        if not check.slices:
            raise perfetto_read.Regroup("no launch slices: the rank table names the launches")
        check.check()
        meta = found.metadata if isinstance(found.metadata, dict) else {}
        closing.warnings += _perfetto_warnings(path, found)
        closing.settings, _ = _perfetto_settings(path, meta)
        closing.metadata = meta
        closing.processes = max(parents, 1)

    return tables(), closing


_Parts = Generator[tuple[SpanTable, JsonEvents], None, None]


def json_parts(path: Path, nested: bool = True) -> tuple[_Parts, Closing, TraceNames] | None:
    """A JSON trace's spans a process (a pid) at a time: each table the rows
    :func:`load_trace` gives that process's spans, in the same order, named the same,
    with the events it was read from; and the trace's names. None where the trace's end
    is not laid out as collect lays it out (or holds a fault); raises
    :class:`perfetto_read.Regroup` from the iterator where the rest is not (a process's
    events after another's began, names among the events, a fault in an event: the
    whole read names the first) or where a rank's launches would be named or ordered
    otherwise (:class:`_LaunchCheck`): then the trace is read whole (formats.fold_spans)."""
    progress = reading(path)
    names = TraceNames(path)
    found = json_rows.read_parts(path, names.take, progress.update)
    try:
        if found is None:
            raise ProfilingInputError(path, "not laid out a process at a time")
        _check_other(path, found.document)
        other = found.document.get("otherData") or {}
        settings, pid_launch = _json_settings(path, other)
        named = list(names.process_names.values())
        if len(set(named)) < len(named):
            # Two processes of one name: one table keys their launch slices by that name
            # together (a drop marker's row), a table per process apart.
            raise ProfilingInputError(path, "two processes of one name")
    except ProfilingInputError:  # the whole read names the fault it meets first
        progress.close()
        return None
    closing = Closing(str(path), settings, _json_warnings(path, other), metadata=other)

    def tables() -> _Parts:
        check = _LaunchCheck()
        unsliced = 0  # processes with spans and no launch slice
        try:
            for part in found.parts:
                try:
                    # (each table its own settings: a table's are its own to change)
                    own = RunSettings(set(settings.clock_mhz), set(settings.barrier))
                    table = _trace_table(path, part, part=True, nested=nested, names=names,
                                         ranks=(own, pid_launch))
                except ProfilingInputError as exc:
                    raise perfetto_read.Regroup(str(exc)) from None
                complete = [e for _, e in part.parsed if isinstance(e, dict) and e.get("ph") == "X"]
                launches = [(str(e["name"]), float(e["ts"])) for e in complete
                            if e.get("cat") == LAUNCH_CATEGORY]
                check.add(table, launches)
                if table.ts.size and not launches:
                    unsliced += 1
                if part.spans is not None or complete:
                    closing.processes += 1  # a part is one process's
                closing.trace_tracks += table.trace_tracks
                yield table, part
        except json_rows.Regroup as exc:
            raise perfetto_read.Regroup(str(exc)) from None
        finally:
            progress.close()
        if check.slices and unsliced:
            # One table puts the spans of a process without launch slices in no launch
            # of the rank table once any process has slices; that process's own table,
            # with none, takes its launch from the rank table.
            raise perfetto_read.Regroup("a process without launch slices among processes with them")
        check.check()
        closing.processes = max(closing.processes, 1)

    return tables(), closing, names


def json_chunks(path: Path, nested: bool = True) -> tuple[Iterator[SpanTable], Closing]:
    """A JSON trace's spans a process at a time (:func:`json_parts`), or as one table
    where its end is not laid out so."""
    found = json_parts(path, nested)
    if found is None:
        events = read_trace_events(path)
        return whole_table_chunks(load_trace(path, events), other_data(events))
    parts, closing, _ = found

    def tables() -> Iterator[SpanTable]:
        try:
            for table, _ in parts:
                yield table
        finally:  # the reader's progress line closed now, not when collected
            parts.close()

    return tables(), closing


def other_data(events: JsonEvents) -> dict[str, Any]:
    """A JSON trace's ``otherData`` (an object, or empty)."""
    other = events.document.get("otherData")
    return other if isinstance(other, dict) else {}


def load_profiling_dir(
    path: Path, point_map: Path | None = None, clock_mhz: float | None = None
) -> SpanTable:
    """Spans decoded straight from rank files (no trace file needed)."""
    closing = Closing(str(path))
    labels, ranks = _rank_spans(path, point_map, clock_mhz, closing)
    label_col: list[np.ndarray] = []
    track_col: list[np.ndarray] = []
    ts_col: list[np.ndarray] = []
    dur_col: list[np.ndarray] = []
    tracks: list[str] = []
    launch_ids: dict[str, int] = {}
    track_launch: list[int] = []
    for found in ranks:
        launch = launch_ids.setdefault(found.launch, len(launch_ids))
        track_col += [t + len(tracks) for t in found.track]
        tracks += found.tracks
        track_launch += [launch] * len(found.tracks)
        label_col += found.label
        ts_col += found.ts
        dur_col += found.dur
    return SpanTable(
        source=str(path),
        labels=labels,
        tracks=tracks,
        processes=closing.processes,
        label=_cat(label_col, np.int32),
        track=_cat(track_col, np.int32),
        ts=_cat(ts_col, np.float64),
        dur=_cat(dur_col, np.float64),
        settings=closing.settings,
        warnings=closing.warnings,
        launches=list(launch_ids),
        track_launch=np.array(track_launch, dtype=np.int32),
    )
