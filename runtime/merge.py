"""``collect --merge TRACE_VIEW.json``: the device tracks inside the framework's timeline.

The framework trace is a Chrome / Kineto JSON trace: torch_npu's profiler writes one per
rank (``trace_view.json``), PyTorch's Kineto the same format (``{"traceEvents": [...]}``
or a bare event list). Each launch that ``save_profiling_data(op=...)`` saved is matched
to a kernel slice of that trace:

- **by op name**: a complete event (``ph: "X"``) whose name has the op's normal form
  (lower case, inner underscores dropped: ``MoeDistributeDispatch`` =
  ``moe_distribute_dispatch``), with or without an ``aclnn`` prefix. Where the name also
  appears on the host side (the aclnn call, the torch op), the device's slices are the
  ones taken: category ``kernel``, or a process named like the NPU's ("Ascend Hardware");
- **by launch order per rank**: the rank's launches of an op, in launch order, against
  its slices of that op in time order. Which rank a trace belongs to: its
  ``distributedInfo.rank`` (Kineto), else the device id of its kernel slices against
  the anchors' device ids, else the only rank there is. When there are more slices than
  launches (warm-up steps, other steps profiled), the anchors choose the run of slices
  whose times agree best with the launches' host times (the anchors of
  :mod:`align`; the profiler's timestamps are wall-clock µs, like the anchors'); without
  anchors the first ``warmup`` slices (as save recorded it) are skipped;
- **placed**: the launch's device timeline starts where its anchor puts it, moved into
  the slice if it does not fit (the slice's own times come from the device, the anchor
  is a host reading); without an anchor it starts with the slice.

The merged trace has the framework's events with numeric timestamps (strings, which
torch_npu writes, become numbers) counted from the earliest event, so no precision is
lost to absolute epoch times in doubles; flow ids renumbered from 1 (< 2**53: ids above
it do not survive a double); the device cores as threads ``optrace AIC 3`` of the
process the kernel slice is on, with a flow from each kernel slice to its launch's first
device span. ``.pftrace`` output gets the framework's slices and instants, the kernel's
threads in the rank's process when all its slices are one rank file's launches, and the
same flows with the same ids as TrackEvent flow fields: ``flow_ids`` on an event of the
slice a flow starts (or goes on) from, ``terminating_flow_ids`` on one of the slice it
ends at — each slice the one the JSON flow event binds to (the trace processor's rules:
``s``, ``t``, ``f`` with ``bp: "e"`` the innermost slice open at its time on its thread,
``f`` without the next slice to begin there, ``bind_id`` its own slice). The trace
processor links a flow's events in time order and ignores an end met before its start,
so an id goes on a slice's begin when that comes after the flow's previous event, else
on its end (a device span starting with its kernel slice carries the end of that flow
on its end event). The device trace is collect's own ``.pftrace``: the first span of
each launch is found in it and its packets rewritten; counters stay in JSON only.
"""

from __future__ import annotations

import json
import math
import re
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterator, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from . import perfetto, perfetto_read
from .align import MERGED, Alignment, Anchor, RankPlacement
from .decode import signed_delta
from .errors import MergeError, ProfilingInputError, checked_id, checked_name, shown
from .format import RankMeta
from .launches import LAUNCH_CATEGORY
from .numbers import DEVICE_ID, FRAMEWORK_TS_US, RANK, TIME_US, NumberError, Range, check_number
from .records import Record
from .regular import JSON_MAX_INT_DIGITS, parse_json, read_maybe_gzip

#: JSON numbers are exact only below this (a double's mantissa).
FLOW_ID_LIMIT = 1 << 53
#: Device cores' tids inside a framework process: above any real thread id of a host.
DEVICE_TID_BASE = 1 << 30
_INNER_UNDERSCORES = re.compile(r"(?<=[A-Za-z0-9])_+(?=[A-Za-z0-9])")
_DEVICE_PROCESS = re.compile(r"ascend hardware|npu|device|gpu", re.IGNORECASE)
_FLOW_PHASES = frozenset("stf")


def op_key(name: str) -> str:
    """An operator name's normal form: lower case, underscores between two letters or
    digits dropped. The same function as engine/names.py ``op_key`` (the layers' normal
    form); duplicated because the runtime imports nothing of the engine, and a test
    checks that the two agree."""
    return _INNER_UNDERSCORES.sub("", name).lower()


def same_op(slice_name: str, op: str) -> bool:
    """A framework slice named ``slice_name`` is a launch of ``op`` (``aclnn`` prefix allowed)."""
    key, want = op_key(slice_name), op_key(op)
    return key == want or key == "aclnn" + want


# ----------------------------------------------------------------------------- reading


class FrameworkTrace(Record):
    """A framework trace as read: its events, timestamps as exact Decimals (µs)."""

    __match_args__ = ("path", "events", "rank", "process_names")
    __slots__ = __match_args__
    path: Path
    events: list[dict[str, Any]]
    rank: int | None  # distributedInfo.rank
    process_names: dict[Any, str]

    def __init__(self, path: Path, events: list[dict[str, Any]], rank: int | None,
                 process_names: dict[Any, str]) -> None:
        self.path = path
        self.events = events
        self.rank = rank
        self.process_names = process_names


#: A framework slice's duration: what a trace holds (numbers.TIME_US), never negative.
DURATION_US = Range(0.0, TIME_US.high, unit="µs")
_DEVICE_KEYS = ("device", "Device Id", "device_id", "Device_id")


def _number(path: Path, index: int, key: str, value: Any, bounds: Range) -> Decimal:
    """A timestamp or duration: a JSON number or a numeric string, finite and within
    ``bounds`` (checked before any arithmetic: ``"1e999999999"`` is a finite Decimal)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise ProfilingInputError(path, f"event {index}: {key} {shown(value)} is not a number")
    try:
        number = Decimal(value.strip()) if isinstance(value, str) else Decimal(value)
    except InvalidOperation:
        raise ProfilingInputError(path, f"event {index}: {key} {shown(value)} is not a number") from None
    if not number.is_finite():
        raise ProfilingInputError(path, f"event {index}: {key} {shown(value)} is not a finite number")
    try:
        check_number(key, float(number), bounds)  # float(): inf past the float range
    except NumberError:
        raise ProfilingInputError(path, f"event {index}: {key} {shown(value)} must be "
                                  f"{bounds.describe()}") from None
    return number


def _device_value(value: Any) -> int | None:
    """A device id as _device_of takes it: an integer, or a string of ASCII digits (alone,
    str.isdigit takes '²', which int() refuses) no longer than a JSON integer may be."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= JSON_MAX_INT_DIGITS:
        return int(value)
    return None


def _check_event(path: Path, index: int, event: dict[str, Any]) -> None:
    """What the merge reads of an event, and what it writes back for optrace's readers:
    ts / dur numbers in range (as Decimals), pid / tid ids, names text without NUL, a
    complete event with its ts, dur and name, device ids in range."""
    if "ts" in event:
        event["ts"] = _number(path, index, "ts", event["ts"], FRAMEWORK_TS_US)
    if "dur" in event:
        event["dur"] = _number(path, index, "dur", event["dur"], DURATION_US)
    for key in ("pid", "tid"):
        checked_id(path, event.get(key), f"event {index}: {key}")
    name = event.get("name")
    if isinstance(name, str):
        checked_name(path, name, f"event {index}: name")
    if event["ph"] == "X" and not ("ts" in event and "dur" in event and isinstance(name, str)):
        # report and compare refuse a complete event without them in the merged trace
        raise ProfilingInputError(path, f"event {index}: a complete event ('X') needs a ts, a dur "
                                  "and a name (a string)")
    args = event.get("args")
    if isinstance(args, dict):
        if event["ph"] == "M" and isinstance(args.get("name"), str):  # a process or thread name
            checked_name(path, args["name"], f"event {index}: args.name")
        for key in _DEVICE_KEYS:
            raw = args.get(key)
            device = _device_value(raw)
            if device is None and not (isinstance(raw, str) and raw.isascii() and raw.isdigit()):
                continue  # no device id (absent, a name): _device_of passes it by too
            try:
                check_number(key, device, DEVICE_ID)  # None: digits past a JSON integer's
            except NumberError:
                raise ProfilingInputError(path, f"event {index}: args.{key} {shown(raw)} must be "
                                          f"{DEVICE_ID.describe()}") from None


def read_framework_trace(path: Path) -> FrameworkTrace:
    """Read a Chrome / Kineto JSON trace (``.gz`` too); ``ts`` / ``dur`` become Decimals.
    Raises ProfilingInputError (``path: message``) for what is not such a trace, or holds
    what optrace would not read back in the merged trace (:func:`_check_event`)."""
    try:
        # A regular file within the trace bound, its gunzipped size bounded too (regular.py).
        raw = read_maybe_gzip(path, "trace")
        # Strict (no NaN, no number past the float range or of 25 digits, no lone
        # surrogate: a .pftrace's strings are UTF-8); Decimals, not doubles: an epoch in
        # µs with ns digits has more than 53 bits.
        document = parse_json(raw, parse_float=Decimal, text_only=True)
    except FileNotFoundError:
        raise ProfilingInputError(path, "no such file") from None
    except (OSError, EOFError, ValueError) as exc:
        # An OSError's own text ("[Errno 27] ...: 'path'") would name the path twice.
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ProfilingInputError(path, f"not a readable JSON trace: {why}") from None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise ProfilingInputError(path, "not a Chrome / Kineto trace: no traceEvents list")
    rank = None
    info = document.get("distributedInfo") if isinstance(document, dict) else None
    if isinstance(info, dict) and info.get("rank") is not None:
        try:
            rank = int(check_number("distributedInfo.rank", info["rank"], RANK))
        except NumberError as exc:
            raise ProfilingInputError(path, str(exc)) from None
    process_names: dict[Any, str] = {}
    kept = []
    for index, event in enumerate(events):
        if not isinstance(event, dict) or not isinstance(event.get("ph"), str):
            raise ProfilingInputError(path, f"event {index} is not an object with a 'ph'")
        _check_event(path, index, event)
        if event["ph"] == "M" and event.get("name") == "process_name":
            name = (event.get("args") or {}).get("name") if isinstance(event.get("args"), dict) else None
            if isinstance(name, str):
                process_names[event.get("pid")] = name
        kept.append(event)
    return FrameworkTrace(path, kept, rank, process_names)


def _hashable(value: Any) -> Any:
    if isinstance(value, (int, str, Decimal)) or value is None:
        return value
    return json.dumps(value, default=str)


def _device_of(event: dict[str, Any]) -> int | None:
    args = event.get("args")
    if not isinstance(args, dict):
        return None
    for key in _DEVICE_KEYS:
        value = _device_value(args.get(key))
        if value is not None:
            return value
    return None


def kernel_slices(trace: FrameworkTrace, op: str) -> list[dict[str, Any]]:
    """The device's complete events of ``op``, in time order (see the module's doc)."""
    found = [e for e in trace.events if e["ph"] == "X" and isinstance(e.get("name"), str)
             and "ts" in e and same_op(e["name"], op)]
    device = [e for e in found if e.get("cat") == "kernel"
              or _DEVICE_PROCESS.search(trace.process_names.get(_hashable(e.get("pid")), ""))]
    chosen = device or found
    pids = {_hashable(e.get("pid")) for e in chosen}
    if len(pids) > 1 and not device and len({_device_of(e) for e in chosen}) <= 1:
        raise MergeError(
            f"{trace.path}: {op!r} has slices in {len(pids)} processes and none is marked as the "
            "device's (category 'kernel' or a process named like 'Ascend Hardware'): which are the launches?")
    return sorted(chosen, key=lambda e: (e["ts"], -e.get("dur", 0)))


# ----------------------------------------------------------------------------- matching


class Link(Record):
    """One rank file matched to its kernel slice."""

    __match_args__ = ("position", "trace", "slice", "start_us", "anchor_us")
    __slots__ = __match_args__
    position: int
    trace: int  # index into the framework traces
    slice: dict[str, Any]
    start_us: Decimal  # where the launch's timeline starts, on the framework's clock
    anchor_us: Decimal | None  # where its anchor alone put it

    def __init__(self, position: int, trace: int, slice: dict[str, Any], start_us: Decimal,
                 anchor_us: Decimal | None) -> None:
        self.position = position
        self.trace = trace
        self.slice = slice
        self.start_us = start_us
        self.anchor_us = anchor_us


class MergePlan(Record):
    __match_args__ = ("traces", "links", "origin_us", "alignment")
    __slots__ = __match_args__
    traces: list[FrameworkTrace]
    links: list[Link]
    origin_us: Decimal  # the merged trace's 0 on the framework's clock
    alignment: Alignment

    def __init__(self, traces: list[FrameworkTrace], links: list[Link], origin_us: Decimal,
                 alignment: Alignment) -> None:
        self.traces = traces
        self.links = links
        self.origin_us = origin_us
        self.alignment = alignment


def _extent_us(anchor: Anchor, clock_mhz: float) -> Decimal:
    """The launch's length on the device, first start to last record (µs)."""
    return Decimal(max(signed_delta(anchor.end_cycle - anchor.start_cycle), 0)) / Decimal(repr(clock_mhz))


def _anchored_start(anchor: Anchor, clock_mhz: float) -> Decimal:
    """The launch's start on the host wall clock in µs, from its anchor."""
    return Decimal(anchor.host_wall_ns) / 1000 - _extent_us(anchor, clock_mhz)


def _trace_ranks(trace: FrameworkTrace, slices: list[dict[str, Any]], ranks_by_device: dict[int, set[int]],
                 ranks: set[int]) -> dict[int, list[dict[str, Any]]]:
    """The slices of each rank this trace holds."""
    if trace.rank is not None:
        return {trace.rank: slices}
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for event in slices:
        device = _device_of(event)
        owners = ranks_by_device.get(device, set()) if device is not None else set()
        if len(owners) == 1:
            out[next(iter(owners))].append(event)
        elif len(ranks) == 1:
            out[next(iter(ranks))].append(event)
        else:
            where = f"device {device}" if device is not None else "no device id"
            raise MergeError(
                f"{trace.path}: cannot tell which rank its kernel slices belong to ({where}; no "
                "distributedInfo.rank): merge one rank's trace with that rank's files (--ranks N)")
    return dict(out)


def plan_merge(
    traces: list[FrameworkTrace],
    files: Sequence[tuple[str, int, int]],
    metas: Sequence[RankMeta | None],
    clocks: Sequence[float],
) -> MergePlan:
    """Match every rank file (``files``: (file name, rank, launch) in trace order) to a
    kernel slice and place it; MergeError when one cannot be matched."""
    anchors = [Anchor.from_meta(m) if m is not None else None for m in metas]
    ops: list[str | None] = []
    for (name, _, _), meta in zip(files, metas, strict=True):
        op = meta.extra.get("op") if meta is not None and isinstance(meta.extra, dict) else None
        if meta is not None and not isinstance(op, str):
            raise MergeError(f"--merge: {name} has no op name: save it with save_profiling_data(op=...)")
        ops.append(op)
    ranks = {rank for (_, rank, _), meta in zip(files, metas, strict=True) if meta is not None}
    ranks_by_device: dict[int, set[int]] = defaultdict(set)
    for (_, rank, _), anchor in zip(files, anchors, strict=True):
        if anchor is not None and anchor.device_id is not None:
            ranks_by_device[anchor.device_id].add(rank)

    # (rank, op key) -> [(trace index, slice)] in time order
    available: dict[tuple[int, str], list[tuple[int, dict[str, Any]]]] = defaultdict(list)
    for key in sorted({op_key(op) for op in ops if op is not None}):
        op = next(o for o in ops if o is not None and op_key(o) == key)
        for t, trace in enumerate(traces):
            for rank, found in _trace_ranks(trace, kernel_slices(trace, op), ranks_by_device, ranks).items():
                available[(rank, key)].extend((t, s) for s in found)
    groups: dict[tuple[int, str], list[int]] = defaultdict(list)
    for position, ((_, rank, _), op) in enumerate(zip(files, ops, strict=True)):
        if op is not None:
            groups[(rank, op_key(op))].append(position)

    links: list[Link] = []
    notes: list[str] = []
    for (rank, key), positions in sorted(groups.items()):
        positions.sort(key=lambda p: files[p][2])
        slices = sorted(available.get((rank, key), []), key=lambda ts: ts[1]["ts"])
        if len(slices) < len(positions):
            op = ops[positions[0]]
            raise MergeError(
                f"--merge: rank {rank} has {len(positions)} launch{'es' if len(positions) != 1 else ''} of "
                f"{op!r} but the framework trace{'s have' if len(traces) > 1 else ' has'} {len(slices)} "
                "matching kernel slice" + ("s" if len(slices) != 1 else ""))
        starts = [_anchored_start(a, clocks[p]) if (a := anchors[p]) is not None else None for p in positions]
        first = _first_slice(slices, positions, starts, metas, notes, rank)
        for k, position in enumerate(positions):
            t, event = slices[first + k]
            anchored = starts[k]
            begin = event["ts"]
            if anchored is None:
                start = begin
            else:
                anchor = anchors[position]
                assert anchor is not None
                extent = _extent_us(anchor, clocks[position])
                latest = begin + max(event.get("dur", Decimal(0)) - extent, Decimal(0))
                start = min(max(anchored, begin), latest)  # inside the slice
            links.append(Link(position, t, event, start, anchored))

    # Metadata events carry a ts of 0 or the trace's start, if any: not a time on the axis.
    times = [e["ts"] for trace in traces for e in trace.events if "ts" in e and e["ph"] != "M"]
    origin = min([*times, *(link.start_us for link in links)], default=Decimal(0))
    _check_extent(traces, origin)
    placements = [RankPlacement(name, rank, clock_mhz=c)
                  for (name, rank, _), c in zip(files, clocks, strict=True)]
    for link in links:
        placement = placements[link.position]
        placement.shift_us = float(link.start_us - origin)
        if link.anchor_us is not None:
            placement.anchor_us = float(link.anchor_us - origin)
            anchor = anchors[link.position]
            assert anchor is not None
            placement.anchor_start_cycle = anchor.start_cycle
    alignment = Alignment(MERGED, placements, notes=notes,
                          clock="framework trace (kernel slices; anchors choose and place within them)")
    return MergePlan(traces, links, origin, alignment)


def _check_extent(traces: list[FrameworkTrace], origin: Decimal) -> None:
    """Every event within numbers.TIME_US of the merged trace's 0 (its earliest event):
    report, compare and the .pftrace reader refuse a time past it, so it is not written."""
    for trace in traces:
        for index, event in enumerate(trace.events):
            if "ts" in event and event["ph"] != "M":
                end = event["ts"] + event.get("dur", Decimal(0)) - origin
                if end > TIME_US.high:
                    raise ProfilingInputError(trace.path, f"event {index}: ends {float(end):g} µs after the "
                                              f"earliest framework event (at {origin} µs), past the "
                                              f"{TIME_US.high:g} µs a trace holds")


def _first_slice(slices: list[tuple[int, dict[str, Any]]], positions: list[int], starts: list[Decimal | None],
                 metas: Sequence[RankMeta | None], notes: list[str], rank: int) -> int:
    """Which slice the rank's first launch of the op is: with anchors, the run of slices
    whose starts agree best with the anchored starts (least spread of the differences,
    then least difference: robust to a constant offset between the two clocks); without,
    after the warm-up calls save skipped."""
    extra = len(slices) - len(positions)
    if extra == 0:
        return 0
    if all(s is not None for s in starts):
        def cost(first: int) -> tuple[Decimal, Decimal]:
            diffs = sorted(slices[first + k][1]["ts"] - s for k, s in enumerate(starts) if s is not None)
            middle = diffs[len(diffs) // 2]
            return max(abs(d - middle) for d in diffs), abs(middle)

        best = min(range(extra + 1), key=cost)
        notes.append(f"rank {rank}: {extra} more kernel slices than launches; the anchors matched the "
                     f"launches to slices {best + 1}..{best + len(positions)}")
        return best
    meta = metas[positions[0]]
    warmup = meta.extra.get("warmup") if meta is not None else None
    if isinstance(warmup, int) and not isinstance(warmup, bool) and 0 < warmup <= extra:
        notes.append(f"rank {rank}: no anchors; the first {warmup} kernel slices taken as the warm-up")
        return warmup
    raise MergeError(
        f"--merge: rank {rank} has {len(positions)} launches and {len(slices)} kernel slices, and no "
        "anchors to tell which slices are the launches")


# ----------------------------------------------------------------------------- writing


def _flow_ids(plan: MergePlan) -> tuple[dict[tuple[int, Any, Any], int], int]:
    """New ids, from 1, for every flow of the framework traces (per trace, category and id)."""
    ids: dict[tuple[int, Any, Any], int] = {}
    for t, trace in enumerate(plan.traces):
        for event in trace.events:
            for key in _flow_keys(t, event):
                ids.setdefault(key, len(ids) + 1)
    return ids, len(ids) + 1


def _flow_key(t: int, event: dict[str, Any]) -> tuple[int, Any, Any]:
    """A flow event's flow: its trace, category and id (any JSON value, as a key)."""
    return t, _hashable(event.get("cat")), _hashable(event.get("id", event.get("id2")))


def _flow_keys(t: int, event: dict[str, Any]) -> Iterator[tuple[int, Any, Any]]:
    if event["ph"] in _FLOW_PHASES:
        yield _flow_key(t, event)
    for key in ("bind_id",):
        if key in event:
            yield t, "bind", _hashable(event[key])


def framework_events(plan: MergePlan) -> Iterator[dict[str, Any]]:
    """The framework traces' events, timestamps from the merged origin as numbers, flow
    ids renumbered (several traces: their pids kept apart)."""
    ids, _ = _flow_ids(plan)
    for t, trace in enumerate(plan.traces):
        for event in trace.events:
            out = dict(event)
            if "ts" in out:
                out["ts"] = 0 if out["ph"] == "M" else _us(out["ts"] - plan.origin_us)
            if "dur" in out:
                out["dur"] = _us(out["dur"])
            if out["ph"] in _FLOW_PHASES:
                out.pop("id2", None)
                out["id"] = ids[_flow_key(t, event)]
            if "bind_id" in out:
                out["bind_id"] = ids[(t, "bind", _hashable(event["bind_id"]))]
            if len(plan.traces) > 1 and "pid" in out:
                out["pid"] = _trace_pid(t, out["pid"])
            yield out


def _trace_pid(t: int, pid: Any) -> Any:
    """A pid of the t-th framework trace (with several, each keeps its own processes)."""
    return f"{t}:{pid}" if t else pid


def _us(value: Decimal) -> float | int:
    """A JSON number: an int when whole, else a float with ns digits (small: no loss)."""
    integral = value.to_integral_value()
    return int(integral) if integral == value else float(value)


def _plain(value: Any) -> Any:
    """Decimals left in args (json.loads made every float one) as floats."""
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def merged_json(plan: MergePlan, device: dict[str, Any],
                device_launches: dict[int, tuple[int, str]]) -> dict[str, Any]:
    """The merged Chrome trace: the framework's events, then the device's, each launch's
    folded into the process its kernel slice is on, and a flow from slice to launch.
    ``device``: the device trace collect wrote; ``device_launches``: each position's
    (pid, launch slice name) there — a rank's process holds all its launches, each
    event's launch is the launch slice on its thread that holds it."""
    events = list(framework_events(plan))
    _, next_id = _flow_ids(plan)
    link_of: dict[tuple[Any, str], Link] = {device_launches[link.position]: link for link in plan.links
                                            if link.position in device_launches}
    device_events = device.get("traceEvents", [])
    thread_rows: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    launches: dict[tuple[Any, Any], list[tuple[Any, Any, str]]] = defaultdict(list)
    for event in device_events:
        key = (event.get("pid"), event.get("tid"))
        if event["ph"] == "M" and event.get("name") in ("thread_name", "thread_sort_index"):
            thread_rows[key].append(event)
        elif event["ph"] == "X" and event.get("cat") == LAUNCH_CATEGORY:
            launches[key].append((event["ts"], event["ts"] + event["dur"], event["name"]))
    for found in launches.values():
        found.sort()

    def link_at(event: dict[str, Any]) -> Link | None:
        found = launches.get((event.get("pid"), event.get("tid")), [])
        k = bisect_right(found, (event["ts"], math.inf)) - 1
        if k < 0 or event["ts"] > found[k][1]:
            return None
        return link_of.get((event.get("pid"), found[k][2]))

    first_span: dict[int, dict[str, Any]] = {}  # per link (its position): its earliest slice
    named: set[tuple[Any, Any]] = set()
    for event in device_events:
        if event["ph"] == "M" or "ts" not in event:
            continue  # process metadata: the device tracks live in the framework's process now
        link = link_at(event)
        if link is None:
            continue
        target = _target_pid(plan, link)
        tid = DEVICE_TID_BASE + int(event["tid"])
        if (target, tid) not in named:  # the core's name, in each process its launches go to
            named.add((target, tid))
            for row in thread_rows.get((event.get("pid"), event.get("tid")), []):
                moved = dict(row, pid=target, tid=tid)
                moved["args"] = ({"name": f"optrace {row['args']['name']}"} if row["name"] == "thread_name"
                                 else {"sort_index": DEVICE_TID_BASE + int(row["args"]["sort_index"])})
                events.append(moved)
        moved = dict(event, pid=target, tid=tid)
        moved.setdefault("args", {})
        if isinstance(moved["args"], dict):
            moved["args"] = {**moved["args"], "launch_file": device_file(plan, link)}
        events.append(moved)
        if event["ph"] == "X":
            best = first_span.get(link.position)
            if best is None or (event["ts"], tid) < (best["ts"], best["tid"]):
                first_span[link.position] = moved
    for link in plan.links:
        span = first_span.get(link.position)
        if span is None:
            continue
        kernel = link.slice
        source_pid = _trace_pid(link.trace, kernel.get("pid")) if len(plan.traces) > 1 else kernel.get("pid")
        common = {"name": "optrace launch", "cat": "optrace", "id": next_id}
        events.append({**common, "ph": "s", "pid": source_pid, "tid": kernel.get("tid"),
                       "ts": _us(kernel["ts"] - plan.origin_us)})
        events.append({**common, "ph": "f", "bp": "e", "pid": span["pid"], "tid": span["tid"],
                       "ts": span["ts"]})
        next_id += 1
    if next_id >= FLOW_ID_LIMIT:
        raise MergeError(f"{next_id} flows: more than JSON numbers can number exactly")
    other = dict(device.get("otherData", {}))
    other["merge"] = merge_metadata(plan)
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


def _target_pid(plan: MergePlan, link: Link) -> Any:
    pid = link.slice.get("pid")
    return _trace_pid(link.trace, pid) if len(plan.traces) > 1 else pid


def device_file(plan: MergePlan, link: Link) -> str:
    return plan.alignment.placements[link.position].file


def merge_metadata(plan: MergePlan) -> dict[str, Any]:
    """What the merged trace says about the merge: its inputs and each launch's slice."""
    launches = []
    for link in plan.links:
        placement = plan.alignment.placements[link.position]
        entry: dict[str, Any] = {
            "file": placement.file, "rank": placement.rank, "trace": str(plan.traces[link.trace].path),
            "kernel": link.slice.get("name"), "kernel_ts_us": _us(link.slice["ts"] - plan.origin_us),
            "start_us": _us(link.start_us - plan.origin_us)}
        if link.anchor_us is not None:
            entry["anchor_correction_us"] = float(link.start_us - link.anchor_us)
        launches.append(entry)
    return {"traces": [str(t.path) for t in plan.traces], "origin_us": str(plan.origin_us),
            "launches": launches}


def write_json(path: Any, document: dict[str, Any]) -> None:
    """``document`` as compact JSON into an open binary file ``path``."""
    path.write(json.dumps(document, separators=(",", ":"), default=_plain).encode())


def check_finite(document: dict[str, Any]) -> None:
    """Every timestamp numeric and finite (the merged trace's promise)."""
    for event in document["traceEvents"]:
        for key in ("ts", "dur"):
            if key in event and not (isinstance(event[key], (int, float)) and math.isfinite(event[key])):
                raise MergeError(f"internal: {key} {event[key]!r} of {event.get('name')!r} is not a number")


# ----------------------------------------------------------------------------- .pftrace

#: Track uuids of the framework's processes and threads: far from the device ranks'
#: (perfetto.process_uuid: (pid + 1) << 20, pids up to a few thousand).
_FRAMEWORK_UUID = 1 << 48
#: Packet sequence ids of the framework's threads: far above the device cores' (counted from 1).
_FRAMEWORK_SEQUENCE = 1 << 30
#: Their pids (int32 in the protos; the device ranks' are small).
_FRAMEWORK_PID = 1 << 30
#: The first tid (and uuid offset) of framework threads joining a rank's process: above
#: its slots' (thread_uuid: process uuid + slot + 1; slots are a few hundred at most).
_JOINED_THREADS = 1 << 19

_SLICE_BEGIN, _SLICE_END, _INSTANT = perfetto.SLICE_BEGIN, perfetto.SLICE_END, perfetto.INSTANT
#: Flow event phases in a flow's order (JSON flows: start, step, finish).
_FLOW_ROLE = {"s": 0, "t": 1, "f": 2}
#: A slice's ``bind_id`` flow by its ``flow_out`` / ``flow_in``: starts, continues, ends.
_BIND_ROLE = {(True, False): 0, (True, True): 1, (False, True): 2}


def _ns(value: Decimal) -> int:
    return int((value * 1000).to_integral_value())


class _Track:
    """One thread's slices in begin order (by start; at one start the longer first), in
    ns from the merged trace's 0, and the flow fields their begin and end events get.
    ``ends``: the slices' own (what a flow event binds by, as in the JSON trace);
    ``written``: where the track's end events are (a framework slice that overlaps its
    predecessor without nesting is cut at its parent's end)."""

    __slots__ = ("ends", "flows", "parents", "starts", "written")

    def __init__(self, starts: list[int], ends: list[int], written: list[int]) -> None:
        self.starts, self.ends, self.written = starts, ends, written
        # Each slice's parent: the innermost slice still open where it begins (-1: none).
        # A slice that is no ancestor has ended before a later one began, so before any
        # time the walk up in ``enclosing`` asks about.
        self.parents: list[int] = []
        stack: list[int] = []
        for k, start in enumerate(starts):
            while stack and ends[stack[-1]] < start:
                stack.pop()
            self.parents.append(stack[-1] if stack else -1)
            stack.append(k)
        #: (slice, its end event?) -> flow fields of that event
        self.flows: defaultdict[tuple[int, bool], bytes] = defaultdict(bytes)

    def enclosing(self, ns: int) -> int | None:
        """The slice a flow event at ``ns`` binds to when it binds to its enclosing slice
        (``s``, ``t``, ``f`` with ``bp: "e"``): the innermost one open there, as the
        trace processor takes the top of the track's stack — the last begun of those
        whose span holds ``ns`` (ends included)."""
        k = bisect_right(self.starts, ns) - 1
        while k >= 0 and self.ends[k] < ns:
            k = self.parents[k]
        return k if k >= 0 else None

    def following(self, ns: int) -> int | None:
        """The slice an ``f`` without ``bp: "e"`` binds to: the next to begin (at ``ns`` or after)."""
        k = bisect_left(self.starts, ns)
        return k if k < len(self.starts) else None


class _Thread(_Track):
    """A framework thread: its complete events in begin order, its instants (ns, name)."""

    __slots__ = ("events", "index", "instants")

    def __init__(self, events: list[dict[str, Any]], origin: Decimal) -> None:
        self.events = sorted((e for e in events if e["ph"] == "X"),
                             key=lambda e: (e["ts"], -(e.get("dur") or Decimal(0))))
        self.index = {id(event): k for k, event in enumerate(self.events)}
        starts = [_ns(e["ts"] - origin) for e in self.events]
        ends = [_ns(e["ts"] + (e.get("dur") or Decimal(0)) - origin) for e in self.events]
        # A TrackEvent stream nests: a slice overlapping its predecessor without nesting
        # ends with its parent (the JSON viewer would move it to another track; a stream
        # cannot say that).
        written: list[int] = []
        open_ends: list[int] = []
        for start, end in zip(starts, ends, strict=True):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            written.append(min(end, open_ends[-1]) if open_ends else end)
            open_ends.append(written[-1])
        super().__init__(starts, ends, written)
        self.instants = [(_ns(e["ts"] - origin), str(e.get("name"))) for e in events if e["ph"] in ("i", "I")]

    def stream(self) -> list[tuple[int, int, int, str, bytes]]:
        """(ns, order, kind, name, flow fields) of the thread's events, properly nested."""
        out: list[tuple[int, int, int, str, bytes]] = []
        stack: list[int] = []  # open slices
        for k, event in enumerate(self.events):
            start = self.starts[k]
            while stack and self.written[stack[-1]] <= start:
                j = stack.pop()
                out.append((self.written[j], len(out), _SLICE_END, "", self.flows.get((j, True), b"")))
            name = str(event.get("name"))
            out.append((start, len(out), _SLICE_BEGIN, name, self.flows.get((k, False), b"")))
            stack.append(k)
        while stack:
            j = stack.pop()
            out.append((self.written[j], len(out), _SLICE_END, "", self.flows.get((j, True), b"")))
        out += [(ns, len(out) + n, _INSTANT, name, b"") for n, (ns, name) in enumerate(self.instants)]
        out.sort(key=lambda item: (item[0], item[1]))
        return out


class _Core(_Track):
    """A launch's first device span (one slice) and where its begin and end packets are
    in the device trace ((start, end) of each whole ``Trace.packet``)."""

    __slots__ = ("packets",)

    def __init__(self, start: int, end: int, begin: tuple[int, int], finish: tuple[int, int]) -> None:
        super().__init__([start], [end], [end])
        self.packets = [(begin, finish)]


class _SequenceClock:
    """What a packet sequence's incremental state says about times and tracks."""

    __slots__ = ("base", "boot", "clock", "incremental", "track", "unit", "value")

    def __init__(self) -> None:
        self.clock = self.track = self.boot = self.value = 0
        self.base: int | None = None  # the sequence clock's value at its snapshot
        self.unit = 1
        self.incremental = False

    def copy(self) -> _SequenceClock:
        out = _SequenceClock()
        for name in self.__slots__:
            setattr(out, name, getattr(self, name))
        return out

    def ns(self, timestamp: int) -> int:
        """An event's time in ns (BOOTTIME), its sequence clock moved on (the events of
        perfetto.py name no clock of their own: the sequence's default)."""
        if not 64 <= self.clock < 128 or self.base is None:
            return _signed(timestamp)
        self.value = self.value + timestamp if self.incremental else timestamp
        return self.boot + (self.value - self.base) * self.unit


class _FirstSpan(Record):
    """Where a device core's packet sequence begins (its first event's packet, the clock
    before it) and the time of its first span."""

    __match_args__ = ("sequence", "tid", "ns", "at", "clock")
    __slots__ = __match_args__
    sequence: int
    tid: int
    ns: int
    at: int
    clock: _SequenceClock

    def __init__(self, sequence: int, tid: int, ns: int, at: int, clock: _SequenceClock) -> None:
        self.sequence = sequence
        self.tid = tid
        self.ns = ns
        self.at = at
        self.clock = clock


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _varint_at(data: bytes, i: int) -> tuple[int, int]:
    """The varint at ``data[i]`` and the offset after it."""
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _packets(data: bytes, start: int = 0) -> Iterator[tuple[int, int, int]]:
    """(start, payload start, end) of each ``Trace.packet`` of the device trace from ``start``."""
    i, n = start, len(data)
    while i < n:
        if data[i] != 0x0A:
            raise AssertionError("the device trace holds a field other than Trace.packet")
        size = data[i + 1]
        if size < 0x80:
            lo = i + 2
        else:
            size, lo = _varint_at(data, i + 1)
        yield i, lo, lo + size
        i = lo + size


#: perfetto.py writes every track event packet as [timestamp (field 8)] [sequence id
#: (field 10)] [track_event (field 11)]: its first byte is field 8's key.
_TIMESTAMP_KEY, _SEQUENCE_KEY = 0x40, 0x50


def _event(data: bytes, lo: int, hi: int) -> tuple[int, int, int, int]:
    """(timestamp, sequence id, event kind, track uuid or 0) of a track event packet."""
    stamp, j = _varint_at(data, lo + 1)
    if data[j] != _SEQUENCE_KEY:
        raise AssertionError("a device track event packet not laid out as perfetto.py lays them out")
    sequence, j = _varint_at(data, j + 1)
    kind = track = 0
    for field, value, end in perfetto_read.fields(data, j, hi):
        if field == 11:  # TrackEvent
            for f, v, _ in perfetto_read.fields(data, value, end):
                if f == 9:
                    kind = v
                elif f == 11:
                    track = v
    return stamp, sequence, kind, track


def _device_launches(data: bytes) -> dict[tuple[int, str], list[_FirstSpan]]:
    """Where each launch begins on each of its cores in the .pftrace collect wrote, per
    (process track uuid, launch slice name). One walk over the packets: perfetto.py
    writes a core's descriptor, its sequence's state and clock snapshot, then per launch
    its launch slice's begin, events and end (documented there), so every event packet
    moves its sequence's clock on and only a launch's begin is read further.
    (perfetto_read.py reads every span, for report and compare.)"""
    threads: dict[int, tuple[int, int]] = {}  # thread uuid -> (process uuid, tid)
    sequences: dict[int, _SequenceClock] = {}
    begins: list[tuple[str, int, int, int, _SequenceClock]] = []  # (name, sequence, ns, packet, clock before)
    for at, lo, hi in _packets(data):
        if data[lo] == _TIMESTAMP_KEY:
            stamp, j = _varint_at(data, lo + 1)
            if data[j] != _SEQUENCE_KEY:
                raise AssertionError("a device track event packet not laid out as perfetto.py lays them out")
            sequence, j = _varint_at(data, j + 1)
            clock = sequences[sequence]
            # A launch's begin: its TrackEvent opens with the category iid (perfetto.py).
            before = clock.copy() if data[j] == 0x5A and data[_varint_at(data, j + 1)[1]] == 0x18 else None
            ns = clock.ns(stamp)
            if before is not None:
                name = _event_name(data, j, hi)
                if name is not None:
                    begins.append((name, sequence, ns, at, before))
            continue
        sequence = flags = 0
        parts: list[tuple[int, int, int]] = []
        for field, value, end in perfetto_read.fields(data, lo, hi):
            if field == 10:
                sequence = value
            elif field == 13:
                flags = value
            elif field in (6, 59, 60):
                parts.append((field, value, end))
            elif field == 11:
                raise AssertionError("a device track event packet not laid out as perfetto.py lays them out")
        state = sequences.get(sequence)
        if state is None or flags & perfetto.SEQ_INCREMENTAL_STATE_CLEARED:
            state = sequences[sequence] = _SequenceClock()
        for field, value, end in parts:
            if field == 60:
                _thread_descriptor(data, value, end, threads)
            elif field == 59:  # TracePacketDefaults: timestamp_clock_id, track_event_defaults.track_uuid
                for f, v, e in perfetto_read.fields(data, value, end):
                    if f == 58:
                        state.clock = v
                    elif f == 11:
                        state.track = next((v2 for f2, v2, _ in perfetto_read.fields(data, v, e) if f2 == 11),
                                           state.track)
            else:  # ClockSnapshot: the sequence clock (ids 64-127) against BOOTTIME
                _clock_snapshot(data, value, end, state)
    launches: dict[tuple[int, str], list[_FirstSpan]] = defaultdict(list)
    for name, sequence, ns, at, clock in begins:
        if clock.track in threads:
            process, tid = threads[clock.track]
            launches[(process, name)].append(_FirstSpan(sequence, tid, ns, at, clock))
    return dict(launches)


def _event_name(data: bytes, lo: int, hi: int) -> str | None:
    """The inline name of the TrackEvent (field 11) at ``data[lo:hi]``, if it has one."""
    for field, value, end in perfetto_read.fields(data, lo, hi):
        if field == 11:
            for f, v, e in perfetto_read.fields(data, value, end):
                if f == 23:
                    return bytes(data[v:e]).decode("utf-8")
    return None


def _first_span(data: bytes, first: _FirstSpan) -> _Core:
    """The slice a flow event at the core's first time binds to (as ``enclosing``): the
    last span to begin then (the innermost of those), read from the core's first event
    on until its end is known."""
    clock = first.clock.copy()
    depth = 0  # open spans
    target: tuple[int, int, int] | None = None  # (its depth, begin packet's start, end)
    found: _Core | None = None
    for at, lo, hi in _packets(data, first.at):
        if data[lo] != _TIMESTAMP_KEY:
            continue  # other cores' descriptors and state
        stamp, sequence, kind, _ = _event(data, lo, hi)
        if sequence != first.sequence:
            continue
        ns = clock.ns(stamp)
        if found is not None and ns > first.ns:
            break  # no span begins at the first time any more
        if kind == _SLICE_BEGIN:
            if ns == first.ns:
                target, found = (depth, at, hi), None
            depth += 1
        elif kind == _SLICE_END and depth:
            depth -= 1
            if target is not None and depth == target[0] and found is None:
                found = _Core(first.ns, ns, (target[1], target[2]), (at, hi))
                if ns > first.ns:
                    break
    if found is None:
        raise AssertionError("a device core's first span has no end")  # collect closes every span
    return found


def _thread_descriptor(data: bytes, lo: int, hi: int, threads: dict[int, tuple[int, int]]) -> None:
    uuid, parent, tid = 0, None, None
    for field, value, end in perfetto_read.fields(data, lo, hi):
        if field == 1:
            uuid = value
        elif field == 5:
            parent = value
        elif field == 4:
            tid = next((v for f, v, _ in perfetto_read.fields(data, value, end) if f == 2), 0)
    if parent is not None and tid is not None:
        threads[uuid] = (parent, tid)


def _clock_snapshot(data: bytes, lo: int, hi: int, state: _SequenceClock) -> None:
    clocks = perfetto_read.clock_snapshot(data, lo, hi)
    own = [c for c in clocks if 64 <= c < 128]
    if own and perfetto.BOOTTIME in clocks:
        state.base, state.unit, state.incremental = clocks[own[0]]
        state.value = state.base
        state.boot = _signed(clocks[perfetto.BOOTTIME][0])


def _framework_threads(plan: MergePlan) -> tuple[dict[tuple[int, Any], dict[Any, _Thread]],
                                                 dict[tuple[int, Any, Any], str]]:
    """The framework's threads with slices or instants, per (trace, pid) and tid, and
    the names thread_name metadata gives them."""
    events: dict[tuple[int, Any], dict[Any, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    names: dict[tuple[int, Any, Any], str] = {}
    for t, trace in enumerate(plan.traces):
        for event in trace.events:
            pid, tid = _hashable(event.get("pid")), _hashable(event.get("tid"))
            if event["ph"] in ("X", "i", "I") and "ts" in event:
                events[(t, pid)][tid].append(event)
            elif (event["ph"] == "M" and event.get("name") == "thread_name"
                  and isinstance(event.get("args"), dict)):
                names[(t, pid, tid)] = str(event["args"].get("name"))
    threads = {process: {tid: _Thread(found, plan.origin_us) for tid, found in by_tid.items()}
               for process, by_tid in events.items()}
    return threads, names


def _link(flow: int, slices: list[tuple[_Track, int]]) -> None:
    """Flow ``flow`` through ``slices`` (in the flow's order) as TrackEvent flow fields:
    ``flow_ids`` on the first's begin and on each step's, ``terminating_flow_ids`` on
    the last's. The trace processor links an id in the order it meets the events (time)
    and drops an end that comes before its flow's start, so a slice that does not begin
    after the event of the slice before it carries the flow on its end event."""
    if len(slices) < 2:
        return  # one end alone links nothing (as in the JSON trace)
    previous = 0
    for n, (track, k) in enumerate(slices):
        at_end = n > 0 and track.starts[k] <= previous
        previous = track.written[k] if at_end else track.starts[k]
        field = perfetto.TERMINATING_FLOW_IDS if n == len(slices) - 1 else perfetto.FLOW_IDS
        track.flows[(k, at_end)] += perfetto.fixed64_field(field, flow)


def _add_flows(plan: MergePlan, threads: dict[tuple[int, Any], dict[Any, _Thread]], device: bytes,
               device_launches: dict[int, tuple[int, str]]) -> list[_Core]:
    """The merged JSON trace's flows on the slices they bind to there, with its ids: the
    framework's own (as framework_events renumbers them) and one from each kernel slice
    to its launch's first device span in ``device`` (as merged_json numbers them, after).
    Returns those device spans."""
    ids, next_id = _flow_ids(plan)
    points: dict[int, list[tuple[int, int, int, _Track, int]]] = defaultdict(list)
    order = 0
    for t, trace in enumerate(plan.traces):
        for event in trace.events:
            phase = event["ph"]
            if "ts" not in event:
                continue
            thread = threads.get((t, _hashable(event.get("pid"))), {}).get(_hashable(event.get("tid")))
            if thread is None:
                continue
            ns = _ns(event["ts"] - plan.origin_us)
            if phase in _FLOW_PHASES:
                flow = ids[_flow_key(t, event)]
                role = _FLOW_ROLE[phase]
                k = thread.following(ns) if phase == "f" and event.get("bp") != "e" else thread.enclosing(ns)
            elif phase == "X" and "bind_id" in event:
                direction = (event.get("flow_out") is True, event.get("flow_in") is True)
                if direction not in _BIND_ROLE:
                    continue  # no direction: the trace processor links nothing either
                flow, role, k = ids[(t, "bind", _hashable(event["bind_id"]))], _BIND_ROLE[direction], \
                    thread.index[id(event)]
            else:
                continue
            if k is not None:
                points[flow].append((role, ns, order, thread, k))
                order += 1
    for flow, found in points.items():
        found.sort(key=lambda point: point[:3])
        _link(flow, [(track, k) for _, _, _, track, k in found])
    launches = _device_launches(device)
    targets: list[_Core] = []
    for link in plan.links:
        launch = device_launches.get(link.position)
        firsts = launches.get((perfetto.process_uuid(launch[0]), launch[1]), []) if launch is not None else []
        if not firsts:
            continue
        # The launch's first slice: the earliest, on the lowest core at a tie (merged_json's).
        target = _first_span(device, min(firsts, key=lambda first: (first.ns, first.tid)))
        kernel = link.slice
        thread = threads[(link.trace, _hashable(kernel.get("pid")))][_hashable(kernel.get("tid"))]
        source = thread.enclosing(_ns(kernel["ts"] - plan.origin_us))
        if source is not None:
            _link(next_id, [(thread, source), (target, 0)])
            targets.append(target)
        next_id += 1
    if next_id >= FLOW_ID_LIMIT:
        raise MergeError(f"{next_id} flows: more than JSON numbers can number exactly")
    return targets


def _with_flows(data: bytes, spans: list[_Core]) -> list[bytes | memoryview]:
    """The device trace ``data`` with the flow fields of ``spans`` written into the
    TrackEvents of their events' packets (the rest as it is)."""
    places: dict[tuple[int, int], bytes] = defaultdict(bytes)
    for span in spans:
        for (k, at_end), fields in span.flows.items():
            places[span.packets[k][at_end]] += fields
    view = memoryview(data)
    chunks: list[bytes | memoryview] = []
    at = 0
    for (lo, hi), fields in sorted(places.items()):
        chunks += [view[at:lo], _packet_with(data, lo, hi, fields)]
        at = hi
    chunks.append(view[at:])
    return chunks


def _packet_with(data: bytes, lo: int, hi: int, extra: bytes) -> bytes:
    """The ``Trace.packet`` at ``data[lo:hi]`` with ``extra`` appended to its TrackEvent."""
    ((_, packet_lo, packet_hi),) = perfetto_read.fields(data, lo, hi)
    parts: list[bytes] = []
    at = packet_lo
    for field, value, end in perfetto_read.fields(data, packet_lo, packet_hi):
        if field == 11:
            event = data[value:end]
            header = b"\x5a" + perfetto.varint(len(event))  # field 11, its length as perfetto.py writes it
            if data[value - len(header) : value] != header:
                raise AssertionError("a device track event not encoded as perfetto.py encodes them")
            parts += [data[at : value - len(header)], perfetto.bytes_field(11, event + extra)]
        else:
            parts.append(data[at:end])
        at = end
    parts.append(data[at:packet_hi])
    return perfetto.packet(*parts)


def merged_pftrace(plan: MergePlan, device: bytes,
                   device_launches: dict[int, tuple[int, str]]) -> list[bytes | memoryview]:
    """The merged ``.pftrace``: the device trace collect wrote (``device``, its bytes)
    with the ends of the kernel slices' flows in its events, then the framework's
    packets (:func:`framework_packets`), every flow of the merged JSON trace on the
    slices it binds to there, with the same ids (``device_launches``: the device trace's
    pid and launch slice name per position)."""
    threads, names = _framework_threads(plan)
    spans = _add_flows(plan, threads, device, device_launches)
    return [*_with_flows(device, spans), framework_packets(plan, device_launches, threads, names)]


def framework_packets(plan: MergePlan, device_launches: dict[int, tuple[int, str]],
                      threads: dict[tuple[int, Any], dict[Any, _Thread]],
                      thread_names: dict[tuple[int, Any, Any], str]) -> bytes:
    """The framework traces' slices and instants as Perfetto packets, in the layout the
    device cores use (perfetto.py): a thread track per thread, one packet sequence per
    thread with its interned names and a clock counting ns from the merged trace's 0
    (BOOTTIME, as the device tracks'). The threads of a process whose kernel slices are
    all launches of one rank (``device_launches``: the device trace's pid and launch per position)
    join that rank's process, above its cores, so the device tracks sit under the kernel
    slice; other processes get a process track of their own. Each event carries the flow
    fields :func:`_add_flows` gave it; counters stay in the JSON output only."""
    u, b, s = perfetto.uint_field, perfetto.bytes_field, perfetto.string_field
    joins: dict[tuple[int, Any], set[int]] = defaultdict(set)
    for link in plan.links:
        joins[(link.trace, _hashable(link.slice.get("pid")))].add(device_launches[link.position][0])
    chunks: list[bytes] = []
    sequence = _FRAMEWORK_SEQUENCE
    for process_number, ((t, pid), by_tid) in enumerate(sorted(threads.items(), key=lambda kv: str(kv[0]))):
        trace = plan.traces[t]
        joined = joins.get((t, pid), set())
        first_thread = 1
        if len(joined) == 1:  # the rank's process: tids and uuids above its slots'
            device_pid = next(iter(joined))
            process_uuid, number_pid = perfetto.process_uuid(device_pid), device_pid + 1
            first_thread = _JOINED_THREADS
        else:
            process_uuid = _FRAMEWORK_UUID + (process_number << 20)
            number_pid = _FRAMEWORK_PID + process_number  # a pid no device rank has
            name = trace.process_names.get(pid, f"pid {pid}")
            chunks.append(perfetto.packet(b(60, u(1, process_uuid) + b(3, u(1, number_pid) + s(6, name))
                                            + u(12, -1 - process_number))))
        for thread_number, (tid, thread) in enumerate(sorted(by_tid.items(), key=lambda kv: str(kv[0]))):
            uuid = process_uuid + first_thread + thread_number
            thread_name = thread_names.get((t, pid, tid), f"tid {tid}")
            descriptor = u(1, number_pid) + u(2, first_thread + thread_number) + s(5, thread_name)
            # Above the cores (ranked by slot from 0) in a rank's process.
            track = u(1, uuid) + u(5, process_uuid) + b(4, descriptor) + u(12, thread_number - len(by_tid))
            chunks.append(perfetto.packet(b(60, track)))
            stream = thread.stream()
            names = sorted({name for _, _, kind, name, _ in stream if kind != _SLICE_END})
            iid = {name: i + 1 for i, name in enumerate(names)}
            interned = b(12, b"".join(b(2, u(1, iid[n]) + s(2, n)) for n in names))
            defaults = b(59, u(58, perfetto.SEQUENCE_CLOCK) + b(11, u(11, uuid)))
            chunks.append(perfetto.packet(u(10, sequence), u(13, perfetto.SEQ_INCREMENTAL_STATE_CLEARED),
                                          defaults, interned))
            clocks = (b(1, u(1, perfetto.SEQUENCE_CLOCK) + u(2, 0) + u(3, 1) + u(4, 1))
                      + b(1, u(1, perfetto.BOOTTIME) + u(2, 0)))
            chunks.append(perfetto.packet(u(10, sequence), b(6, clocks)))
            previous = 0
            for ns, _, kind, name, flows in stream:
                body = u(9, kind) + (u(10, iid[name]) if kind != _SLICE_END else b"") + flows
                chunks.append(perfetto.packet(u(8, ns - previous), u(10, sequence), b(11, body)))
                previous = ns
            sequence += 1
    return b"".join(chunks)
