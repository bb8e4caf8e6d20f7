"""Spans as columns, loaded from an optrace Chrome trace or straight from a profiling dir.

``report`` and ``compare`` work on this table, whichever input the user gave them. Each
span also gets its depth on its track and its self time (duration minus its children's),
computed with one stack pass per track.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import perfetto_read
from .chrome import TRACE_FORMAT
from .collect import list_rank_files, resolve_point_map
from .decode import DecodeOptions, decode_rank
from .errors import ProfilingInputError, checked_id, checked_name, shown
from .numbers import CLOCK_MHZ, RANK, TIME_US, NumberError, check_number
from .pointmap import load_point_map
from .rankfile import iter_rank_buffers
from .regular import load_json, open_regular

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
    tracks: list[str]  # "Rank 0 / AIC 3"
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

    def __post_init__(self) -> None:
        if self.depth.size != self.ts.size:
            self.depth, self.self_time = _depth_and_self_time(self.track, self.ts, self.dur)
        if self.track_launch.size != len(self.tracks):
            self.launches, self.track_launch = _launches_by_process(self.tracks)


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
    """The rank a track's process is, its launches together: `Rank 3` of `Rank 3 (moe,
    launch 2) / AIC 1` or `Rank 3 launch 2 / AIC 1`; a process not named by rank stands
    alone."""
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


def _depth_and_self_time(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per span: nesting depth on its track and duration minus direct children's."""
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
    eps = 1e-9
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
    if not isinstance(document.get("otherData") or {}, dict):
        raise ProfilingInputError(path, "otherData must be an object")
    return document


def _clock(path: Path | str, value: object) -> float:
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


def load_trace(path: Path) -> SpanTable:
    """Spans of a Chrome trace written by ``optrace collect``."""
    document = read_trace_json(path)
    other = document.get("otherData") or {}
    warnings: list[str] = []
    if other.get("format") != TRACE_FORMAT:
        warnings.append(f"{path}: not written by optrace collect: runtime settings unknown")
    process_names: dict[Any, str] = {}
    thread_names: dict[tuple[Any, Any], str] = {}
    label_ids: dict[str, int] = {}
    track_ids: dict[tuple[Any, Any], int] = {}
    label_col: list[int] = []
    track_col: list[int] = []
    ts_col: list[float] = []
    dur_col: list[float] = []
    for index, event in enumerate(document["traceEvents"]):
        if not isinstance(event, dict):
            continue
        phase = event.get("ph")
        if phase == "M":
            args = event.get("args")
            name = args.get("name") if isinstance(args, dict) else None
            pid, tid = event_ids(path, index, event)
            if event.get("name") == "process_name" and isinstance(name, str):
                process_names[pid] = checked_name(path, name, "process name")
            elif event.get("name") == "thread_name" and isinstance(name, str):
                thread_names[(pid, tid)] = checked_name(path, name, "thread name")
        elif phase == "X":
            try:
                # float() takes "nan" and "inf" as strings: the range check refuses them.
                ts = check_number("ts", float(event["ts"]), TIME_US)
                dur = check_number("dur", float(event["dur"]), TIME_US)
                label = checked_name(path, str(event["name"]), "label")
            except (KeyError, TypeError, ValueError, OverflowError):
                raise ProfilingInputError(path, f"malformed complete event: {str(event)[:200]}") from None
            key = event_ids(path, index, event)
            label_col.append(label_ids.setdefault(label, len(label_ids)))
            track_col.append(track_ids.setdefault(key, len(track_ids)))
            ts_col.append(ts)
            dur_col.append(dur)
    tracks = [""] * len(track_ids)
    for (pid, tid), index in track_ids.items():
        process = process_names.get(pid, f"pid {pid}")
        tracks[index] = f"{process} / {thread_names.get((pid, tid), f'tid {tid}')}"
    settings = RunSettings()
    pid_launch: dict[Any, str] = {}
    for rank in rank_entries(path, other):
        if rank.get("launch") is not None:
            pid_launch[rank.get("pid")] = _launch_name(rank.get("tag"), rank["launch"])
        if rank.get("clock_mhz") is not None:
            settings.clock_mhz.add(_clock(path, rank["clock_mhz"]))
        settings.barrier.add(rank.get("barrier") if isinstance(rank.get("barrier"), bool) else None)
    return SpanTable(
        source=str(path),
        labels=list(label_ids),
        tracks=tracks,
        processes=max(len({pid for pid, _ in track_ids}), 1),
        label=np.array(label_col, dtype=np.int32),
        track=np.array(track_col, dtype=np.int32),
        ts=np.array(ts_col, dtype=np.float64),
        dur=np.array(dur_col, dtype=np.float64),
        settings=settings,
        warnings=warnings,
        **_trace_launches(track_ids, process_names, pid_launch),
    )


def load_perfetto_trace(path: Path) -> SpanTable:
    """Spans of a Perfetto protobuf trace (``.pftrace``, as ``collect`` writes it)."""
    found = perfetto_read.read_spans(path)
    warnings: list[str] = []
    meta = found.metadata if isinstance(found.metadata, dict) else {}
    if meta.get("format") != "optrace-perfetto":
        warnings.append(f"{path}: not written by optrace collect: runtime settings unknown")
    if found.unclosed:
        warnings.append(f"{path}: {found.unclosed} slice begins without their end (left out)")
    label_ids: dict[str, int] = {}
    track_ids: dict[int, int] = {}
    label_col: list[int] = []
    track_col: list[int] = []
    start_col: list[int] = []
    end_col: list[int] = []
    for track, label, start, end in found.spans:
        checked_name(path, label, "label")
        if not (abs(start) <= PERFETTO_NS_MAX and abs(end) <= PERFETTO_NS_MAX):
            raise ProfilingInputError(path, f"slice {label[:60]!r}: timestamp {max(abs(start), abs(end))} "
                                      f"ns is past {PERFETTO_NS_MAX:g} ns (31 years)")
        label_col.append(label_ids.setdefault(label, len(label_ids)))
        track_col.append(track_ids.setdefault(track, len(track_ids)))
        start_col.append(start)
        end_col.append(end)
    # Shown by report / inspect: no NUL, as the JSON reader's process and thread names.
    tracks = [checked_name(path, found.track_name(uuid), "track name") for uuid in track_ids]
    settings = RunSettings()
    pid_launch: dict[Any, str] = {}
    for rank in rank_entries(path, meta):
        if rank.get("launch") is not None and isinstance(rank.get("pid"), int):
            # the rank table has the JSON trace's pid; a process descriptor has it plus one
            pid_launch[rank["pid"] + 1] = _launch_name(rank.get("tag"), rank["launch"])
        if rank.get("clock_mhz") is not None:
            settings.clock_mhz.add(_clock(path, rank["clock_mhz"]))
        settings.barrier.add(rank.get("barrier") if isinstance(rank.get("barrier"), bool) else None)
    starts = np.array(start_col, dtype=np.int64)
    ends = np.array(end_col, dtype=np.int64)
    order = np.lexsort((-ends, starts, np.array(track_col, dtype=np.int64))) if starts.size else starts
    parents = {uuid: found.threads.get(uuid, (None, ""))[0] for uuid in track_ids}
    processes = set(parents.values())
    # Launches as in a JSON trace, keyed by process track: the rank table's (tag, launch)
    # through the process descriptor's pid, else each process its own launch.
    process_launch = {uuid: pid_launch[pid] for uuid, pid in found.process_pids.items() if pid in pid_launch}
    launches = _trace_launches({(parents[uuid], uuid): index for uuid, index in track_ids.items()},
                               dict(found.processes), process_launch)
    return SpanTable(
        source=str(path),
        labels=list(label_ids),
        tracks=tracks,
        processes=max(len(processes), 1),
        label=np.array(label_col, dtype=np.int32)[order],
        track=np.array(track_col, dtype=np.int32)[order],
        ts=starts[order] / 1000.0,
        dur=(ends - starts)[order] / 1000.0,
        settings=settings,
        warnings=warnings,
        **launches,
    )


def _trace_launches(
    track_ids: dict[tuple[Any, Any], int], process_names: dict[Any, str], pid_launch: dict[Any, str]
) -> dict[str, Any]:
    """Launch of each track: from collect's rank table (tag, launch), else one per process."""
    ids: dict[str, int] = {}
    column = [0] * len(track_ids)
    for (pid, _tid), index in track_ids.items():
        key = pid_launch.get(pid) or f"process {process_names.get(pid, pid)}"
        column[index] = ids.setdefault(key, len(ids))
    return {"launches": list(ids), "track_launch": np.array(column, dtype=np.int32)}


def load_profiling_dir(
    path: Path, point_map: Path | None = None, clock_mhz: float | None = None
) -> SpanTable:
    """Spans decoded straight from rank files (no trace file needed)."""
    files = list_rank_files(path)
    pmap = load_point_map(resolve_point_map(path, point_map))
    label_col: list[np.ndarray] = []
    track_col: list[np.ndarray] = []
    ts_col: list[np.ndarray] = []
    dur_col: list[np.ndarray] = []
    tracks: list[str] = []
    launch_ids: dict[str, int] = {}
    track_launch: list[int] = []
    settings = RunSettings()
    warnings: list[str] = []
    several_runs = len({n.run_key for n, _ in files}) > 1
    processes = 0
    for name, _file, loaded in iter_rank_buffers(files):
        try:
            if isinstance(loaded, ProfilingInputError):
                raise loaded
            decoded = decode_rank(loaded, pmap, DecodeOptions(clock_mhz=clock_mhz))
        except ProfilingInputError as exc:
            warnings.append(str(exc))
            continue
        processes += 1
        settings.clock_mhz.add(decoded.clock_mhz)
        settings.barrier.add(decoded.meta.barrier)
        warnings.extend(f"{decoded.path}: {issue}" for issue in decoded.issues)
        rank_name = f"Rank {name.rank}" + (f" launch {name.launch}" if several_runs else "")
        if several_runs and name.tag:
            rank_name += f" {name.tag}"
        launch = launch_ids.setdefault(_launch_name(name.tag, name.launch), len(launch_ids))
        for core in decoded.cores:
            track = len(tracks)
            tracks.append(f"{rank_name} / {core.name}")
            track_launch.append(launch)
            label_col.append(core.label)
            track_col.append(np.full(core.label.size, track, dtype=np.int32))
            ts_col.append(core.start / decoded.clock_mhz)
            dur_col.append((core.end - core.start) / decoded.clock_mhz)
    if processes == 0:
        raise ProfilingInputError(path, "no rank file could be decoded: " + "; ".join(warnings))

    def cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

    return SpanTable(
        source=str(path),
        labels=list(pmap.labels),
        tracks=tracks,
        processes=processes,
        label=cat(label_col, np.int32),
        track=cat(track_col, np.int32),
        ts=cat(ts_col, np.float64),
        dur=cat(dur_col, np.float64),
        settings=settings,
        warnings=warnings,
        launches=list(launch_ids),
        track_launch=np.array(track_launch, dtype=np.int32),
    )


def load_spans(path: Path, point_map: Path | None = None, clock_mhz: float | None = None) -> SpanTable:
    """A profiling directory, or a trace file (.json / .json.gz, .pftrace)."""
    if path.is_dir():
        return load_profiling_dir(path, point_map, clock_mhz)
    if not path.exists():
        raise ProfilingInputError(path, "no such file or directory")
    if path.suffix == ".pt":
        raise ProfilingInputError(
            path, "expected a trace or a profiling directory (`optrace inspect` reads .pt files)"
        )
    if is_protobuf(path):
        return load_perfetto_trace(path)
    return load_trace(path)


def is_protobuf(path: Path) -> bool:
    """A Perfetto trace: named so, or starting like one (a packet, field 1, not JSON)."""
    if path.name.endswith((".pftrace", ".pftrace.gz", ".perfetto-trace", ".pb")):
        return True
    try:
        with open_regular(path, "trace") as handle:  # a FIFO is never opened blocking
            head = handle.read(2)
    except OSError:
        return False
    return head[:1] == b"\x0a"
