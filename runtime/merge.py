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
threads in the rank's process when all its slices are one rank file's launches
(flows stay in JSON only).
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from . import perfetto
from .align import MERGED, Alignment, Anchor, RankPlacement
from .decode import signed_delta
from .errors import MergeError, ProfilingInputError
from .format import RankMeta
from .records import Record
from .regular import read_maybe_gzip

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


def _number(path: Path, index: int, key: str, value: Any) -> Decimal:
    """A timestamp or duration: a JSON number or a numeric string, finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise ProfilingInputError(path, f"event {index}: {key} {value!r} is not a number")
    try:
        number = Decimal(value.strip()) if isinstance(value, str) else Decimal(value)
    except InvalidOperation:
        raise ProfilingInputError(path, f"event {index}: {key} {value!r} is not a number") from None
    if not number.is_finite():
        raise ProfilingInputError(path, f"event {index}: {key} {value!r} is not a finite number")
    return number


def read_framework_trace(path: Path) -> FrameworkTrace:
    """Read a Chrome / Kineto JSON trace (``.gz`` too); ``ts`` / ``dur`` become Decimals.
    Raises ProfilingInputError (``path: message``) for what is not such a trace."""
    try:
        # A regular file within the trace bound, its gunzipped size bounded too (regular.py).
        raw = read_maybe_gzip(path, "trace")
        # Decimals, not doubles: an epoch in µs with ns digits has more than 53 bits.
        document = json.loads(raw, parse_float=Decimal)
    except FileNotFoundError:
        raise ProfilingInputError(path, "no such file") from None
    except (OSError, EOFError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        # An OSError's own text ("[Errno 27] ...: 'path'") would name the path twice.
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ProfilingInputError(path, f"not a readable JSON trace: {why}") from None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise ProfilingInputError(path, "not a Chrome / Kineto trace: no traceEvents list")
    rank = None
    info = document.get("distributedInfo") if isinstance(document, dict) else None
    if isinstance(info, dict) and isinstance(info.get("rank"), int) and not isinstance(info["rank"], bool):
        rank = info["rank"]
    process_names: dict[Any, str] = {}
    kept = []
    for index, event in enumerate(events):
        if not isinstance(event, dict) or not isinstance(event.get("ph"), str):
            raise ProfilingInputError(path, f"event {index} is not an object with a 'ph'")
        if "ts" in event:
            event["ts"] = _number(path, index, "ts", event["ts"])
        if "dur" in event:
            event["dur"] = _number(path, index, "dur", event["dur"])
            if event["dur"] < 0:
                raise ProfilingInputError(path, f"event {index}: negative dur")
        if event["ph"] == "M" and event.get("name") == "process_name":
            name = (event.get("args") or {}).get("name") if isinstance(event.get("args"), dict) else None
            if isinstance(name, str):
                process_names[_hashable(event.get("pid"))] = name
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
    for key in ("device", "Device Id", "device_id", "Device_id"):
        value = args.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.isdigit():
            return int(value)
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


def _flow_keys(t: int, event: dict[str, Any]) -> Iterator[tuple[int, Any, Any]]:
    if event["ph"] in _FLOW_PHASES:
        ident = event.get("id", event.get("id2"))
        yield t, event.get("cat"), _hashable(ident)
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
                out["id"] = ids[(t, event.get("cat"), _hashable(event.get("id", event.get("id2"))))]
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


def merged_json(plan: MergePlan, device: dict[str, Any], device_pids: dict[int, Any]) -> dict[str, Any]:
    """The merged Chrome trace: the framework's events, then the device's, folded into
    the process each launch's kernel slice is on, and a flow from slice to launch.
    ``device``: the device trace collect wrote; ``device_pids``: its pid per position."""
    events = list(framework_events(plan))
    _, next_id = _flow_ids(plan)
    link_of = {link.position: link for link in plan.links}
    pid_to_link = {device_pids[p]: link for p, link in link_of.items() if p in device_pids}
    first_span: dict[Any, dict[str, Any]] = {}
    names: dict[tuple[Any, Any], str] = {}
    for event in device.get("traceEvents", []):
        link = pid_to_link.get(event.get("pid"))
        if link is None:
            continue
        target = _target_pid(plan, link)
        if event["ph"] == "M":
            if event.get("name") in ("thread_name", "thread_sort_index"):
                moved = dict(event, pid=target, tid=DEVICE_TID_BASE + int(event["tid"]))
                if event["name"] == "thread_name":
                    moved["args"] = {"name": f"optrace {event['args']['name']}"}
                    name = moved["args"]["name"]
                    if names.setdefault((target, moved["tid"]), name) != name:
                        continue  # another launch of the rank named this core already
                else:
                    moved["args"] = {"sort_index": DEVICE_TID_BASE + int(event["args"]["sort_index"])}
                events.append(moved)
            continue  # process metadata: the device tracks live in the framework's process now
        moved = dict(event, pid=target, tid=DEVICE_TID_BASE + int(event["tid"]))
        moved.setdefault("args", {})
        if isinstance(moved["args"], dict):
            moved["args"] = {**moved["args"], "launch_file": device_file(plan, link)}
        events.append(moved)
        if event["ph"] == "X":
            best = first_span.get(event["pid"])
            if best is None or (event["ts"], event["tid"]) < (best["ts"], best["tid"] - DEVICE_TID_BASE):
                first_span[event["pid"]] = dict(moved, tid=moved["tid"])
    for device_pid, link in pid_to_link.items():
        span = first_span.get(device_pid)
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


def _track_events(events: list[dict[str, Any]], origin: Decimal) -> list[tuple[int, int, int, str]]:
    """(ns, order, kind, name) of one thread's slices and instants, properly nested: a
    slice that overlaps its predecessor without nesting is cut at its parent's end (the
    JSON viewer would move it to another track; a TrackEvent stream cannot say that)."""
    slices = sorted(((e["ts"], -(e.get("dur") or Decimal(0)), e.get("name"))
                     for e in events if e["ph"] == "X"), key=lambda s: (s[0], s[1]))
    out: list[tuple[int, int, int, str]] = []
    stack: list[int] = []  # open ends (ns)
    for ts, negative_dur, name in slices:
        start = _ns(ts - origin)
        end = _ns(ts - negative_dur - origin)
        while stack and stack[-1] <= start:
            out.append((stack.pop(), len(out), _SLICE_END, ""))
        if stack:
            end = min(end, stack[-1])
        out.append((start, len(out), _SLICE_BEGIN, str(name)))
        stack.append(end)
    while stack:
        out.append((stack.pop(), len(out), _SLICE_END, ""))
    for event in events:
        if event["ph"] in ("i", "I") and "ts" in event:
            out.append((_ns(event["ts"] - origin), len(out), _INSTANT, str(event.get("name"))))
    out.sort(key=lambda item: (item[0], item[1]))
    return out


_SLICE_BEGIN, _SLICE_END, _INSTANT = perfetto.SLICE_BEGIN, perfetto.SLICE_END, perfetto.INSTANT


def _ns(value: Decimal) -> int:
    return int((value * 1000).to_integral_value())


def framework_packets(plan: MergePlan, device_pids: dict[int, int]) -> bytes:
    """The framework traces' slices and instants as Perfetto packets, in the layout the
    device cores use (perfetto.py): a thread track per thread, one packet sequence per
    thread with its interned names and a clock counting ns from the merged trace's 0
    (BOOTTIME, as the device tracks'). The threads of a process whose kernel slices are
    all launches of one rank file (``device_pids``: the device trace's pid per position)
    join that rank's process, above its cores, so the device tracks sit under the kernel
    slice; other processes get a process track of their own. Flows and counters stay in
    the JSON output only."""
    u, b, s = perfetto.uint_field, perfetto.bytes_field, perfetto.string_field
    joins: dict[tuple[int, Any], set[int]] = defaultdict(set)
    for link in plan.links:
        joins[(link.trace, _hashable(link.slice.get("pid")))].add(device_pids[link.position])
    threads: dict[tuple[int, Any], dict[Any, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    thread_names: dict[tuple[int, Any, Any], str] = {}
    for t, trace in enumerate(plan.traces):
        for event in trace.events:
            pid, tid = _hashable(event.get("pid")), _hashable(event.get("tid"))
            if event["ph"] in ("X", "i", "I") and "ts" in event:
                threads[(t, pid)][tid].append(event)
            elif (event["ph"] == "M" and event.get("name") == "thread_name"
                  and isinstance(event.get("args"), dict)):
                thread_names[(t, pid, tid)] = str(event["args"].get("name"))
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
        for thread_number, (tid, events) in enumerate(sorted(by_tid.items(), key=lambda kv: str(kv[0]))):
            uuid = process_uuid + first_thread + thread_number
            thread_name = thread_names.get((t, pid, tid), f"tid {tid}")
            thread = u(1, number_pid) + u(2, first_thread + thread_number) + s(5, thread_name)
            # Above the cores (ranked by slot from 0) in a rank's process.
            descriptor = u(1, uuid) + u(5, process_uuid) + b(4, thread) + u(12, thread_number - len(by_tid))
            chunks.append(perfetto.packet(b(60, descriptor)))
            stream = _track_events(events, plan.origin_us)
            names = sorted({name for _, _, kind, name in stream if kind != _SLICE_END})
            iid = {name: i + 1 for i, name in enumerate(names)}
            interned = b(12, b"".join(b(2, u(1, iid[n]) + s(2, n)) for n in names))
            defaults = b(59, u(58, perfetto.SEQUENCE_CLOCK) + b(11, u(11, uuid)))
            chunks.append(perfetto.packet(u(10, sequence), u(13, perfetto.SEQ_INCREMENTAL_STATE_CLEARED),
                                          defaults, interned))
            clocks = (b(1, u(1, perfetto.SEQUENCE_CLOCK) + u(2, 0) + u(3, 1) + u(4, 1))
                      + b(1, u(1, perfetto.BOOTTIME) + u(2, 0)))
            chunks.append(perfetto.packet(u(10, sequence), b(6, clocks)))
            previous = 0
            for ns, _, kind, name in stream:
                body = u(9, kind) + (u(10, iid[name]) if kind != _SLICE_END else b"")
                chunks.append(perfetto.packet(u(8, ns - previous), u(10, sequence), b(11, body)))
                previous = ns
            sequence += 1
    return b"".join(chunks)
