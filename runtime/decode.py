"""Vectorised decoding of one rank's device buffer into properly nested spans per core.

Pipeline (numpy throughout, one Python iteration per *core*, never per record on the
normal path):

1. :func:`scan_slots` reads each slot's counter and classifies it (unused, empty, ok,
   overflow with the optrace guard, clobbered by a legacy overflow, corrupt) and gathers
   the readable records of all slots at once;
2. the reserved fingerprint record (point id 0) of optrace's runtime is taken out and
   compared with the point map's fingerprint;
3. ids are looked up in the map (sorted-array search); unknown ids are counted and
   diagnosed (a map from another build, or corrupt records when the build matches);
4. cycles become offsets from the rank's earliest core start (modulo 2**64, so a wrap of
   the 64-bit counter is harmless), which keeps launch skew between cores visible;
5. B/E records are paired per core: a vectorised pass for well-formed sequences, and an
   O(n) stack pass (:func:`nest_stack`) for the rest, whose policy is the documented one:

   - an E whose label is open closes it; B records opened after it and still open are
     closed at the same time and flagged ``closed_by_parent``;
   - an E whose label is not open is dropped and counted (``unmatched_e``);
   - B records still open at the end are closed at the core's last timestamp and
     flagged ``unclosed``.

   Either way, spans on one core nest properly (a Chrome trace requirement).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # annotations only: numpy.typing's import would add to collect's start-up
    import numpy.typing as npt

from .errors import ProfilingInputError
from .format import (
    DEFAULT_CLOCK_MHZ,
    MAX_PLAUSIBLE_COUNTER,
    POINT_ID_SPACE,
    RankMeta,
    SlotLayout,
    capacity,
    layout_for_cores,
)
from .labelpaths import disagreement, outside_parent
from .pointmap import PointMap
from .rankfile import RankBuffer
from .records import FrozenRecord, Record

#: The furthest a record's cycle lies from its launch's first core start (~3 years): no
#: kernel runs that long, so such a record's counter is corrupt, and kept, its time would
#: pass what the trace's readers take (1e18 ns). Dropped and counted instead.
RECORD_SPREAD_LIMIT_NS = 10**17

STATUS_OK = 0
STATUS_CLOSED_BY_PARENT = 1  # its own E is missing; an enclosing E closed it
STATUS_UNCLOSED = 2  # never closed; ends at the core's last timestamp
STATUS_NAMES = {STATUS_OK: "ok", STATUS_CLOSED_BY_PARENT: "closed_by_parent", STATUS_UNCLOSED: "unclosed"}

_U64 = 1 << 64


# Plain classes, not dataclasses: defining a dataclass execs generated code, paid at every
# `optrace collect` start, which made this module's import several times slower.
class SlotReport(Record):
    """What one slot's counter and records say, before any point map is involved."""

    __match_args__ = (
        "slot", "core_type", "core_index", "counter", "state", "records", "dropped", "capacity",
        "fingerprint", "start_cycle", "first_cycle", "last_cycle", "message",
    )
    __slots__ = __match_args__
    slot: int
    core_type: str
    core_index: int
    counter: int
    state: str  # unused | empty | ok | overflow | clobbered | corrupt
    records: int  # records readable in the buffer (fingerprint record included)
    dropped: int  # records the core counted that are not (intact) in the buffer
    capacity: int
    fingerprint: int | None
    start_cycle: int  # raw uint64 start word
    first_cycle: int | None  # raw uint64 of the first / last readable record
    last_cycle: int | None
    message: str

    def __init__(
        self,
        slot: int,
        core_type: str,
        core_index: int,
        counter: int,
        state: str,
        records: int,
        dropped: int,
        capacity: int,
        fingerprint: int | None = None,
        start_cycle: int = 0,
        first_cycle: int | None = None,
        last_cycle: int | None = None,
        message: str = "",
    ) -> None:
        self.slot = slot
        self.core_type = core_type
        self.core_index = core_index
        self.counter = counter
        self.state = state
        self.records = records
        self.dropped = dropped
        self.capacity = capacity
        self.fingerprint = fingerprint
        self.start_cycle = start_cycle
        self.first_cycle = first_cycle
        self.last_cycle = last_cycle
        self.message = message

    @property
    def name(self) -> str:
        return f"{self.core_type} {self.core_index}"

    @property
    def fill(self) -> float:
        """Share of the slot's capacity in use (can exceed 1.0 when records were dropped)."""
        return max(self.counter - 1, 0) / self.capacity if self.capacity else 0.0


class SlotScan(Record):
    """Per-slot reports plus every readable record of the rank, slot-major."""

    __match_args__ = ("layout", "reports", "offsets", "events", "cycles", "has_fingerprint")
    __slots__ = __match_args__
    layout: SlotLayout
    reports: list[SlotReport]
    offsets: np.ndarray  # records of slot s are [offsets[s], offsets[s+1])
    events: np.ndarray  # uint64 event words
    cycles: np.ndarray  # uint64 timestamps
    has_fingerprint: np.ndarray  # bool per slot: record 0 is optrace's fingerprint record

    def __init__(
        self, layout: SlotLayout, reports: list[SlotReport], offsets: np.ndarray, events: np.ndarray,
        cycles: np.ndarray, has_fingerprint: np.ndarray,
    ) -> None:
        self.layout = layout
        self.reports = reports
        self.offsets = offsets
        self.events = events
        self.cycles = cycles
        self.has_fingerprint = has_fingerprint


def scan_slots(data: np.ndarray, layout: SlotLayout) -> SlotScan:
    """Classify every slot and gather the readable records (vectorised over slots)."""
    if data.ndim != 2 or data.dtype != np.int64:
        raise ValueError("scan_slots needs an int64 [slots, slot_words] array")
    slots, words = data.shape
    cap = capacity(words)
    counters = data[:, 0]
    first_word = data[:, 1] if words > 1 else np.zeros(slots, np.int64)
    has_fp = (counters >= 2) & ((first_word & 0xFFFFFFFF) == 0)
    written = np.maximum(counters - 1, 0)
    corrupt = (counters < 0) | (counters > MAX_PLAUSIBLE_COUNTER) | (~has_fp & (written > 2 * cap))
    # Guarded slots (fingerprint present) keep the first `cap` records. A legacy overflow
    # (no guard) makes record k >= cap overwrite record 2*cap-1-k, so only the first
    # 2*cap - n records are intact.
    legacy_read = np.where(written <= cap, written, 2 * cap - written)
    readable = np.where(has_fp, np.minimum(written, cap), legacy_read)
    readable = np.where(corrupt | (counters <= 0), 0, np.clip(readable, 0, cap))

    k = np.arange(cap)
    mask = k[None, :] < readable[:, None]
    events = data[:, 1 : cap + 1][mask].view(np.uint64)
    cycles = data[:, words - 1 - cap : words - 1][:, ::-1][mask].view(np.uint64)
    offsets = np.zeros(slots + 1, dtype=np.int64)
    np.cumsum(readable, out=offsets[1:])

    # The per-slot loop reads Python ints and bools: indexing a numpy array one element at
    # a time is slow, and would be done a dozen times per slot, every slot of every rank.
    first_at = np.minimum(offsets[:-1], max(events.size - 1, 0))  # only read where n_read > 0
    last_at = np.maximum(offsets[1:] - 1, 0)
    fingerprints = (events[first_at] >> np.uint64(32)).tolist() if events.size else [0] * slots
    firsts = cycles[first_at].tolist() if cycles.size else [0] * slots
    lasts = cycles[np.minimum(last_at, max(cycles.size - 1, 0))].tolist() if cycles.size else [0] * slots
    rows = zip(counters.tolist(), readable.tolist(), written.tolist(), corrupt.tolist(), has_fp.tolist(),
               data[:, words - 1].view(np.uint64).tolist(), strict=True)
    reports: list[SlotReport] = []
    for s, (counter, n_read, n_written, is_corrupt, guarded, start) in enumerate(rows):
        core_type, core_index = layout.core_of(s)
        report = SlotReport(
            slot=s, core_type=core_type, core_index=core_index, counter=counter, state="ok",
            records=n_read, dropped=0, capacity=cap, start_cycle=start,
        )
        if is_corrupt:
            report.state = "corrupt"
            report.message = (
                f"{report.name}: counter {counter} is negative"
                if counter < 0
                else f"{report.name}: counter {counter} is past what the layout can explain "
                f"(capacity {cap}{'' if guarded else ', no overflow guard'})"
            )
        elif counter == 0:
            report.state = "unused"
        elif n_written == 0 or (guarded and n_written == 1):
            report.state = "empty"
        elif n_written > cap:
            report.dropped = n_written - n_read
            if guarded:
                report.state = "overflow"
                report.message = (
                    f"{report.name}: {report.dropped} records dropped "
                    f"(slot holds {cap}, the core wrote {n_written})"
                )
            else:
                report.state = "clobbered"
                report.message = (
                    f"{report.name}: legacy runtime overflowed ({n_written} records, capacity "
                    f"{cap}, no guard): {report.dropped} records overwritten, first {n_read} kept"
                )
        if guarded and n_read:
            report.fingerprint = fingerprints[s]
        if n_read:
            report.first_cycle = firsts[s]
            report.last_cycle = lasts[s]
        reports.append(report)
    return SlotScan(layout, reports, offsets, events, cycles, has_fp)


# ----------------------------------------------------------------------------- nesting


class Nesting(Record):
    """Spans of one core as record positions: B at ``begin``, ended by ``end``.

    ``end`` is -1 for spans that end at the core's last timestamp (unclosed).
    """

    __match_args__ = ("begin", "end", "depth", "status", "unmatched_e")
    __slots__ = __match_args__
    begin: np.ndarray
    end: np.ndarray
    depth: np.ndarray
    status: np.ndarray
    unmatched_e: int

    def __init__(
        self, begin: np.ndarray, end: np.ndarray, depth: np.ndarray, status: np.ndarray, unmatched_e: int
    ) -> None:
        self.begin = begin
        self.end = end
        self.depth = depth
        self.status = status
        self.unmatched_e = unmatched_e


def narrow_depth(depth: np.ndarray) -> np.ndarray:
    """Depths as int16, which they nearly always fit, else int32: a slot of 64 Ki words
    holds 32 Ki begins without their ends (a B in a loop whose E was forgotten, or a
    hostile rank file), and int16 would wrap them — event_places needs them exact."""
    return depth.astype(np.int16 if depth.size == 0 or int(depth.max()) < 1 << 15 else np.int32)


def nest_vectorised(kinds: np.ndarray, labels: np.ndarray) -> Nesting | None:
    """Pair B/E of a well-formed sequence without a Python loop; None when malformed.

    Well-formed: the running depth never goes negative, ends at 0, and every pair found
    by level matches by label. At each level, B and E then alternate, so sorting records
    by (level, position) puts each B right before its E.
    """
    n = kinds.size
    if n == 0:
        empty = np.zeros(0, np.int64)
        return Nesting(empty, empty, empty.astype(np.int16), empty.astype(np.int8), 0)
    depth_after = np.cumsum(kinds, dtype=np.int64)
    if depth_after[-1] != 0 or depth_after.min() < 0:
        return None
    level = depth_after + (kinds < 0)
    order = np.argsort(level, kind="stable")
    begin, end = order[0::2], order[1::2]
    if not (
        np.all(kinds[begin] > 0)
        and np.all(kinds[end] < 0)
        and np.array_equal(level[begin], level[end])
        and np.array_equal(labels[begin], labels[end])
    ):
        return None
    by_start = np.argsort(begin, kind="stable")
    begin, end = begin[by_start], end[by_start]
    return Nesting(
        begin=begin,
        end=end,
        depth=narrow_depth(level[begin] - 1),
        status=np.zeros(begin.size, np.int8),
        unmatched_e=0,
    )


def nest_stack(kinds: np.ndarray, labels: np.ndarray) -> Nesting:
    """The reference pairing (module docstring policy), O(n) for any input."""
    stack: list[int] = []  # record positions of open B records
    open_count: Counter[int] = Counter()  # label -> open B records with that label
    begins: list[int] = []
    ends: list[int] = []
    depths: list[int] = []
    statuses: list[int] = []
    unmatched_e = 0
    kind_list = kinds.tolist()
    label_list = labels.tolist()
    for pos, (kind, label) in enumerate(zip(kind_list, label_list, strict=True)):
        if kind > 0:
            stack.append(pos)
            open_count[label] += 1
            continue
        if open_count[label] == 0:
            unmatched_e += 1
            continue
        while True:  # pop to the nearest open B of this label; each B is popped once
            top = stack.pop()
            top_label = label_list[top]
            open_count[top_label] -= 1
            begins.append(top)
            ends.append(pos)
            depths.append(len(stack))
            if top_label == label:
                statuses.append(STATUS_OK)
                break
            statuses.append(STATUS_CLOSED_BY_PARENT)
    while stack:
        top = stack.pop()
        begins.append(top)
        ends.append(-1)
        depths.append(len(stack))
        statuses.append(STATUS_UNCLOSED)
    begin = np.array(begins, dtype=np.int64)
    order = np.argsort(begin, kind="stable")
    return Nesting(
        begin=begin[order],
        end=np.array(ends, dtype=np.int64)[order],
        depth=narrow_depth(np.array(depths, dtype=np.int64))[order],
        status=np.array(statuses, dtype=np.int8)[order],
        unmatched_e=unmatched_e,
    )


def nest(kinds: np.ndarray, labels: np.ndarray) -> Nesting:
    """Pair one core's B/E records: fast path when well-formed, stack pass otherwise."""
    fast = nest_vectorised(kinds, labels)
    return fast if fast is not None else nest_stack(kinds, labels)


class SegmentNesting(Record):
    """:class:`Nesting` of many cores at once; ``segment`` says whose span each is."""

    __match_args__ = ("segment", "begin", "end", "depth", "status", "unmatched_e")
    __slots__ = __match_args__
    segment: np.ndarray  # int64 segment (slot) of each span, ascending
    begin: np.ndarray  # positions in the concatenated record arrays
    end: np.ndarray  # -1: ends at the segment's last record
    depth: np.ndarray
    status: np.ndarray
    unmatched_e: np.ndarray  # per segment

    def __init__(
        self, segment: np.ndarray, begin: np.ndarray, end: np.ndarray, depth: np.ndarray,
        status: np.ndarray, unmatched_e: np.ndarray,
    ) -> None:
        self.segment = segment
        self.begin = begin
        self.end = end
        self.depth = depth
        self.status = status
        self.unmatched_e = unmatched_e


def nest_segments(
    kinds: np.ndarray, labels: np.ndarray, segment: np.ndarray, n_segments: int,
    counts: np.ndarray | None = None,
) -> SegmentNesting:
    """Pair B/E of all cores of a rank in one vectorised pass.

    ``segment`` (non-decreasing) says which core each record belongs to; ``counts``, the
    records of each segment, where the caller has them. Segments that are well-formed
    (see :func:`nest_vectorised`) are paired by sorting records by (segment, level,
    position); the others go through :func:`nest_stack` one by one.
    """
    n = kinds.size
    if counts is None:
        counts = np.bincount(segment, minlength=n_segments) if n else np.zeros(n_segments, np.int64)
    starts = np.zeros(n_segments, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    cumulative = np.cumsum(kinds, dtype=np.int64)
    before = np.where(starts > 0, cumulative[np.maximum(starts - 1, 0)] if n else 0, 0)
    # np.take rather than array[index] for the gathers of every record or span below:
    # the same result, about twice as fast as numpy's general fancy indexing.
    depth_after = cumulative - np.take(before, segment) if n else cumulative
    nonempty = counts > 0
    good = np.ones(n_segments, dtype=bool)
    if n:
        seg_min = np.minimum.reduceat(depth_after, starts[nonempty])
        seg_last = depth_after[starts[nonempty] + counts[nonempty] - 1]
        good[np.flatnonzero(nonempty)[(seg_min < 0) | (seg_last != 0)]] = False
    level = depth_after + (kinds < 0)
    # A stable sort by level alone keeps record order inside each level, so the records
    # of one (segment, level) stay together in segment order: in a well-formed segment
    # they alternate B, E and are as many of each, so the pairs found below never cross
    # into the next segment. A level that fits 8 bits gets numpy's one-pass radix sort.
    if good.all():  # the common case: no gather of every record
        candidates = None
        key = level
    else:
        candidates = np.flatnonzero(good[segment]) if n else np.zeros(0, np.int64)
        key = level[candidates]
    if key.size == 0 or (0 <= int(key.min()) and int(key.max()) < 2**8):
        order = np.argsort(key.astype(np.uint8), kind="stable")
    else:
        order = np.argsort(key, kind="stable")
    if candidates is not None:
        order = candidates[order]
    begin, end = order[0::2], order[1::2]
    # In a segment whose depth never goes negative and ends at 0, each (segment, level)
    # group alternates B, E in record order (a B at level L opens depth L, only an E at
    # level L closes it) and ends with an E, so pairs are B-E of one segment and level by
    # construction; only their labels can disagree.
    mismatch = np.take(labels, begin) != np.take(labels, end)
    if mismatch.any():  # e.g. crossing pairs: balanced depth, wrong labels
        good[np.unique(segment[begin][mismatch])] = False
        ok = good[segment[begin]]
        begin, end = begin[ok], end[ok]
    parts_begin = [begin]
    parts_end = [end]
    parts_depth = [narrow_depth(np.take(level, begin) - 1)]
    parts_status = [np.zeros(begin.size, np.int8)]
    unmatched = np.zeros(n_segments, dtype=np.int64)
    for seg in np.flatnonzero(~good & nonempty).tolist():
        lo = int(starts[seg])
        hi = lo + int(counts[seg])
        fallback = nest_stack(kinds[lo:hi], labels[lo:hi])
        unmatched[seg] = fallback.unmatched_e
        parts_begin.append(fallback.begin + lo)
        parts_end.append(np.where(fallback.end >= 0, fallback.end + lo, -1))
        parts_depth.append(fallback.depth)
        parts_status.append(fallback.status)
    # Spans in record order (slot-major: by slot, then time). Every begin is a distinct
    # record position, so scattering by position and reading back the occupied ones sorts
    # in O(n), no argsort.
    all_begin = np.concatenate(parts_begin)
    occupied = np.zeros(n, dtype=bool)
    occupied[all_begin] = True
    sorted_begin = np.flatnonzero(occupied)
    n_spans = sorted_begin.size

    def by_start(parts: list[np.ndarray], dtype: npt.DTypeLike) -> np.ndarray:
        spread: np.ndarray = np.empty(n, dtype=dtype)
        spread[all_begin] = np.concatenate(parts)
        return np.take(spread, sorted_begin)

    return SegmentNesting(
        segment=np.take(segment, sorted_begin).astype(np.int64),  # a span's segment is its B's
        begin=sorted_begin,
        end=by_start(parts_end, np.int64),
        depth=by_start(parts_depth, np.result_type(*parts_depth)),  # int32 if a part needs it
        # every segment well-formed: no span flagged, whatever its place
        status=by_start(parts_status, np.int8) if len(parts_status) > 1 else np.zeros(n_spans, np.int8),
        unmatched_e=unmatched,
    )


# ----------------------------------------------------------------------------- decoding


class CoreTimeline(Record):
    """Properly nested spans of one core, times in cycles from the rank's base cycle."""

    __match_args__ = (
        "slot", "core_type", "core_index", "role", "start_offset", "label", "start", "end",
        "depth", "point", "high", "status",
    )
    __slots__ = __match_args__
    slot: int
    core_type: str
    core_index: int
    role: str | None
    start_offset: int  # this core's start cycle minus the rank base (launch skew)
    label: np.ndarray  # int32 index into PointMap.labels
    start: np.ndarray  # int64 cycles
    end: np.ndarray  # int64 cycles
    depth: np.ndarray  # int16, 0 = outermost
    point: np.ndarray  # int64 position of the B point in PointMap.ids (for file:line)
    high: np.ndarray  # uint32 high word of the B record: extraId | index << 8
    status: np.ndarray  # int8 STATUS_*

    def __init__(
        self, slot: int, core_type: str, core_index: int, role: str | None, start_offset: int,
        label: np.ndarray, start: np.ndarray, end: np.ndarray, depth: np.ndarray, point: np.ndarray,
        high: np.ndarray, status: np.ndarray,
    ) -> None:
        self.slot = slot
        self.core_type = core_type
        self.core_index = core_index
        self.role = role
        self.start_offset = start_offset
        self.label = label
        self.start = start
        self.end = end
        self.depth = depth
        self.point = point
        self.high = high
        self.status = status

    @property
    def name(self) -> str:
        base = f"{self.core_type} {self.core_index}"
        return f"{base} ({self.role})" if self.role else base


class RankSpans(Record):
    """Every span of a rank, by slot then start (a core's columns are views of these).

    ``begin_record`` / ``end_record``: the positions of a span's B and E among the rank's
    kept records (its E's: the record that closed it, or the core's last for an unclosed
    span), whose times are ``record_time``; when no record was dropped or repaired they
    are the B / E event order (the Perfetto writer's)."""

    __match_args__ = ("slot", "label", "start", "end", "depth", "point", "high", "status",
                      "begin_record", "end_record", "record_time")
    __slots__ = __match_args__
    slot: np.ndarray  # int64, non-decreasing
    label: np.ndarray
    start: np.ndarray
    end: np.ndarray
    depth: np.ndarray
    point: np.ndarray
    high: np.ndarray
    status: np.ndarray
    begin_record: np.ndarray | None
    end_record: np.ndarray | None
    record_time: np.ndarray | None

    def __init__(
        self, slot: np.ndarray, label: np.ndarray, start: np.ndarray, end: np.ndarray,
        depth: np.ndarray, point: np.ndarray, high: np.ndarray, status: np.ndarray,
        begin_record: np.ndarray | None = None, end_record: np.ndarray | None = None,
        record_time: np.ndarray | None = None,
    ) -> None:
        self.slot = slot
        self.label = label
        self.start = start
        self.end = end
        self.depth = depth
        self.point = point
        self.high = high
        self.status = status
        self.begin_record = begin_record
        self.end_record = end_record
        self.record_time = record_time

    @classmethod
    def empty(cls) -> RankSpans:
        none = np.zeros(0, np.int64)
        return cls(none, none.astype(np.int32), none, none, none.astype(np.int16), none,
                   none.astype(np.uint32), none.astype(np.int8))


class RankDecode(Record):
    __match_args__ = (
        "path", "meta", "clock_mhz", "base_cycle", "fingerprint", "slots", "cores",
        "unknown_ids", "unmatched_e", "repaired_spans", "backwards", "issues", "notes", "spans",
        "unread_by_slot", "far_records",
    )
    __slots__ = __match_args__
    path: str
    meta: RankMeta
    clock_mhz: float
    base_cycle: int
    fingerprint: int | None
    slots: list[SlotReport]
    cores: list[CoreTimeline]
    unknown_ids: Counter[int]
    unmatched_e: int
    repaired_spans: int  # spans closed by a parent or at the end (flagged)
    backwards: int  # records whose timestamp went backwards (clamped)
    issues: list[str]  # "path: message" lines for the user
    notes: list[str]  # informational, not a problem
    spans: RankSpans  # all cores' spans at once
    # per slot, its records of an unknown id, years from the launch and its unmatched E
    # (None: there are none)
    unread_by_slot: np.ndarray | None
    far_records: int  # records years from the launch's start (a corrupt counter; dropped)

    def __init__(
        self,
        path: str,
        meta: RankMeta,
        clock_mhz: float,
        base_cycle: int,
        fingerprint: int | None,
        slots: list[SlotReport],
        cores: list[CoreTimeline],
        unknown_ids: Counter[int] | None = None,
        unmatched_e: int = 0,
        repaired_spans: int = 0,
        backwards: int = 0,
        issues: list[str] | None = None,
        notes: list[str] | None = None,
        spans: RankSpans | None = None,
        unread_by_slot: np.ndarray | None = None,
        far_records: int = 0,
    ) -> None:
        self.path = path
        self.meta = meta
        self.clock_mhz = clock_mhz
        self.base_cycle = base_cycle
        self.fingerprint = fingerprint
        self.slots = slots
        self.cores = cores
        self.unknown_ids = Counter() if unknown_ids is None else unknown_ids
        self.unmatched_e = unmatched_e
        self.repaired_spans = repaired_spans
        self.backwards = backwards
        self.issues = [] if issues is None else issues
        self.notes = [] if notes is None else notes
        self.spans = RankSpans.empty() if spans is None else spans
        self.unread_by_slot = unread_by_slot
        self.far_records = far_records

    @property
    def dropped(self) -> int:
        return sum(s.dropped for s in self.slots)

    @property
    def corrupt_slots(self) -> int:
        return sum(1 for s in self.slots if s.state == "corrupt")

    @property
    def unused_slots(self) -> int:
        return sum(1 for s in self.slots if s.state == "unused")

    @property
    def skipped_records(self) -> int:
        """Records the device wrote that are not in the trace as written."""
        return self.dropped + sum(self.unknown_ids.values()) + self.unmatched_e + self.far_records

    def skipped_on(self, keep: Callable[[str, int], bool]) -> int:
        """:attr:`skipped_records` of the cores ``keep`` accepts (core type, index): what a
        trace of those cores alone (``--cores``) leaves out of them."""
        total = 0
        for report in self.slots:
            if keep(report.core_type, report.core_index):
                total += report.dropped
                if self.unread_by_slot is not None:
                    total += int(self.unread_by_slot[report.slot])
        return total

    @property
    def span_count(self) -> int:
        return sum(c.start.size for c in self.cores)

    def release_spans(self) -> None:
        """Forget the span arrays (collect, once they are in the trace); counts and
        diagnostics stay."""
        self.cores = []
        self.spans = RankSpans.empty()


class DecodeOptions(FrozenRecord):
    __match_args__ = ("clock_mhz", "ignore_fingerprint")
    __slots__ = __match_args__
    clock_mhz: float | None  # None: the rank file's, else 50 MHz
    ignore_fingerprint: bool  # decode even with a map from another build

    def __init__(self, clock_mhz: float | None = None, ignore_fingerprint: bool = False) -> None:
        object.__setattr__(self, "clock_mhz", clock_mhz)
        object.__setattr__(self, "ignore_fingerprint", ignore_fingerprint)


def spread_limit_cycles(clock_mhz: float) -> int:
    """:data:`RECORD_SPREAD_LIMIT_NS` in cycles of a clock of ``clock_mhz``."""
    return int(RECORD_SPREAD_LIMIT_NS * float(clock_mhz) / 1000.0)


def launch_base(starts: np.ndarray, cycles: np.ndarray, clock_mhz: float) -> int:
    """A launch's cycle 0: the earliest start word of its slots in use (uint64 ``starts``,
    read modulo 2**64). A start word years from the launch's records (a corrupt header
    word) is left out: taken as the base, every record would lie years from it. The
    records' median says where the launch is; only looked at when the starts themselves
    lie that far apart."""
    ref = int(starts[0])
    rel = (starts - np.uint64(ref)).view(np.int64)
    limit = spread_limit_cycles(clock_mhz)
    if int(rel.max()) - int(rel.min()) <= limit or not cycles.size:
        return (ref + int(rel.min())) % _U64
    records = (cycles - np.uint64(ref)).view(np.int64)
    middle = float(np.partition(records, records.size // 2)[records.size // 2])
    # In floats: differences of int64 offsets can overflow; a ns-scale error is nothing
    # against a limit of years.
    near = rel[np.abs(rel.astype(np.float64) - middle) <= limit]
    if not near.size:
        near = records[np.abs(records.astype(np.float64) - middle) <= limit]
    return (ref + int(near.min())) % _U64


def wrap_min(values: np.ndarray) -> int:
    """The earliest of uint64 cycle values, read modulo 2**64 around the first one."""
    ref = int(values[0])
    deltas = (values - np.uint64(ref)).view(np.int64)
    return (ref + int(deltas.min())) % _U64


def _fingerprint_check(path: str, scan: SlotScan, point_map: PointMap, options: DecodeOptions,
                       result_notes: list[str], result_issues: list[str]) -> int | None:
    found = Counter(r.fingerprint for r in scan.reports if r.fingerprint is not None)
    if not found:
        if point_map.fingerprint is not None:
            result_notes.append(
                "no build fingerprint in the buffer (legacy runtime): "
                "cannot verify the point map belongs to this build"
            )
        return None
    if set(found) == {0}:
        result_notes.append(
            "build fingerprint 0: the kernel was compiled from sources not preprocessed with "
            "`optrace preprocess --modify`, so the point map cannot be verified against it"
        )
        return None
    fingerprint, _ = found.most_common(1)[0]
    if len(found) > 1:
        result_issues.append(
            "slots disagree on the build fingerprint ("
            + ", ".join(f"{fp:#010x}" for fp in sorted(found))
            + "): buffer is corrupt or mixes builds"
        )
    if point_map.fingerprint is not None and point_map.fingerprint != fingerprint:
        message = (
            f"built with fingerprint {fingerprint:#010x}, but {point_map.path} has "
            f"{point_map.fingerprint:#010x}: the point map comes from another build"
        )
        if not options.ignore_fingerprint:
            raise ProfilingInputError(path, message + " (use --ignore-fingerprint to decode anyway)")
        result_issues.append(message + "; decoded anyway (--ignore-fingerprint)")
    elif point_map.fingerprint is None:
        result_notes.append(
            f"the point map has no fingerprint: cannot verify it belongs to build {fingerprint:#010x}"
        )
    return fingerprint


def _diagnose_unknown(unknown: Counter[int], fingerprint_verified: bool) -> str:
    total = sum(unknown.values())
    ids = sorted(unknown)
    shown = ", ".join(str(i) for i in ids[:8]) + (", ..." if len(ids) > 8 else "")
    if all(i > POINT_ID_SPACE for i in ids):
        why = "no point id has bit 31 set: these records are corrupt"
    elif fingerprint_verified:
        why = "the map matches the build fingerprint, so these records are corrupt"
    else:
        why = "the point map probably comes from another build"
    return f"{total} records with {len(ids)} ids not in the point map ({shown}): {why}"


def decode_rank(
    buffer: RankBuffer, point_map: PointMap, options: DecodeOptions | None = None
) -> RankDecode:
    """Decode one rank. Raises ProfilingInputError only for a map from another build."""
    options = options or DecodeOptions()
    path = str(buffer.path)
    meta = buffer.meta
    # The map knows the kernel's core mix, a file saved without it may not.
    layout = layout_for_cores(meta.layout(buffer.slots), point_map.cores)
    scan = scan_slots(buffer.data, layout)
    clock = options.clock_mhz or meta.clock_mhz or DEFAULT_CLOCK_MHZ
    issues = [r.message for r in scan.reports if r.message]
    notes: list[str] = []
    fingerprint = _fingerprint_check(path, scan, point_map, options, notes, issues)
    if meta.fingerprint is not None and fingerprint is not None and meta.fingerprint != fingerprint:
        issues.append(
            f"metadata fingerprint {meta.fingerprint:#010x} differs from the buffer's {fingerprint:#010x}"
        )

    live = [r for r in scan.reports if r.state not in ("unused", "corrupt")]
    starts = np.array([r.start_cycle for r in live], dtype=np.uint64)
    base = launch_base(starts, scan.cycles, clock) if live else 0
    base_u = np.uint64(base)

    # The fingerprint record is bookkeeping, not an event: drop record 0 of guarded slots.
    if np.little_endian:  # the two halves of each event word, as views (no arithmetic)
        halves = scan.events.view(np.uint32).reshape(-1, 2)
        point_ids, high_all = halves[:, 0], halves[:, 1]
    else:
        point_ids = (scan.events & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        high_all = (scan.events >> np.uint64(32)).astype(np.uint32)
    position = point_map.lookup(point_ids)
    known = position >= 0
    fingerprint_records = scan.offsets[:-1][scan.has_fingerprint & (scan.offsets[1:] > scan.offsets[:-1])]
    keep = known.copy()
    keep[fingerprint_records] = False
    unknown: Counter[int] = Counter()
    unknown_by_slot: np.ndarray | None = None
    if not known.all():
        unknown_mask = ~known
        unknown_mask[fingerprint_records] = False
        if unknown_mask.any():
            values, counts = np.unique(point_ids[unknown_mask], return_counts=True)
            unknown.update(dict(zip(values.tolist(), counts.tolist(), strict=True)))
            record_slot = np.repeat(np.arange(buffer.slots), np.diff(scan.offsets))
            unknown_by_slot = np.bincount(record_slot[unknown_mask], minlength=buffer.slots)
            verified = fingerprint is not None and point_map.fingerprint is not None
            issues.append(_diagnose_unknown(unknown, verified))

    rel = (scan.cycles - base_u).view(np.int64)
    far_by_slot: np.ndarray | None = None
    far_records = 0
    if rel.size:
        # Two reductions in the common case; the mask only when a record is that far.
        limit = spread_limit_cycles(clock)
        if int(rel.max()) > limit or int(rel.min()) < -limit:
            far = ((rel > limit) | (rel < -limit)) & keep
            if far.any():
                keep &= ~far
                record_slot = np.repeat(np.arange(buffer.slots), np.diff(scan.offsets))
                far_by_slot = np.bincount(record_slot[far], minlength=buffer.slots)
                far_records = int(far.sum())
                issues.append(f"{far_records} records whose timestamp lies years from the launch's "
                              "start (a corrupt counter; dropped)")
    # Kinds and labels by map position; an unknown id (-1) reads the appended 0.
    kinds_all = np.take(np.append(point_map.kinds, np.int8(0)), position)
    labels_all = np.take(np.append(point_map.label_index, np.int32(0)), position)

    roles = {str(k): str(v) for k, v in (meta.aiv_roles or {}).items()}
    slot_of = np.repeat(np.arange(buffer.slots), np.diff(scan.offsets))
    kept: np.ndarray | None = None  # every record (the common case: a legacy buffer)
    if keep.all():  # no gather of every record
        times = rel
        kinds_kept, labels_kept = kinds_all, labels_all
    else:
        kept = np.flatnonzero(keep)
        slot_of = slot_of[kept]
        times = rel[kept]
        kinds_kept, labels_kept = kinds_all[kept], labels_all[kept]
    backwards = 0
    if times.size > 1:
        # A comparison, not np.diff: differences of int64 cycle offsets can overflow.
        went_back = (times[1:] < times[:-1]) & (slot_of[1:] == slot_of[:-1])
        backwards = int(np.count_nonzero(went_back))
        for slot in np.unique(slot_of[1:][went_back]).tolist() if backwards else []:
            mask = slot_of == slot  # rare: clamp so children stay inside their parents
            times[mask] = np.maximum.accumulate(times[mask])
    # Every record kept: a slot's records are its readable ones (no count of every record).
    nesting = nest_segments(kinds_kept, labels_kept, slot_of, buffer.slots,
                            np.diff(scan.offsets) if kept is None else None)
    unmatched_e = int(nesting.unmatched_e.sum())
    repaired = int(np.count_nonzero(nesting.status))
    # The last kept record of each slot ends its unclosed spans.
    last_of_slot = np.full(buffer.slots, -1, dtype=np.int64)
    if times.size:
        last_of_slot[slot_of] = np.arange(times.size)
    end_pos = np.where(nesting.end >= 0, nesting.end, np.take(last_of_slot, nesting.segment))
    starts_all = np.take(times, nesting.begin)
    ends_all = np.take(times, end_pos)
    b_rec = nesting.begin if kept is None else kept[nesting.begin]
    spans = RankSpans(
        slot=nesting.segment,
        label=np.take(labels_all, b_rec),
        start=starts_all,
        end=ends_all,
        depth=nesting.depth,
        point=np.take(position, b_rec),
        high=np.take(high_all, b_rec),
        status=nesting.status,
        begin_record=nesting.begin,
        end_record=end_pos,
        record_time=times,
    )
    bounds = np.searchsorted(nesting.segment, np.arange(buffer.slots + 1))
    cores: list[CoreTimeline] = []
    for report in scan.reports:
        lo, hi = int(bounds[report.slot]), int(bounds[report.slot + 1])
        if hi == lo:
            continue  # unused, empty, or no record that opens a span
        role = roles.get(str(report.core_index)) if report.core_type == "AIV" else None
        cores.append(
            CoreTimeline(
                slot=report.slot,
                core_type=report.core_type,
                core_index=report.core_index,
                role=role,
                start_offset=signed_delta(report.start_cycle - base),
                label=spans.label[lo:hi],
                start=spans.start[lo:hi],
                end=spans.end[lo:hi],
                depth=spans.depth[lo:hi],
                point=spans.point[lo:hi],
                high=spans.high[lo:hi],
                status=spans.status[lo:hi],
            )
        )
    start_at, end_at = spans.start, spans.end
    if float(clock) > 1000.0:
        # A cycle shorter than a ns: judged on the ns the trace holds, as every reader of
        # it judges (two cycles can round to one ns), so collect's note and their warnings
        # agree. At 1 GHz and below a cycle is a ns or more: the same answer either way.
        unit = 1000.0 / float(clock)
        start_at, end_at = (np.clip(np.rint(t * unit), -(2.0**62), 2.0**62).astype(np.int64)
                            for t in (spans.start, spans.end))
    for child, parent, _count in outside_parent(point_map.labels, spans.label, spans.slot, start_at, end_at):
        notes.append(disagreement(child, parent))
    unread_by_slot = unknown_by_slot
    if far_by_slot is not None:
        unread_by_slot = far_by_slot if unread_by_slot is None else unread_by_slot + far_by_slot
    if unmatched_e:
        issues.append(f"{unmatched_e} E records without an open B of the same label (dropped)")
        per_slot = nesting.unmatched_e.astype(np.int64)
        unread_by_slot = per_slot if unread_by_slot is None else unread_by_slot + per_slot
    if repaired:
        issues.append(f"{repaired} B records without their E (closed and flagged)")
    if backwards:
        issues.append(f"{backwards} records whose timestamp goes backwards (clamped)")
    return RankDecode(
        path=path,
        meta=meta,
        clock_mhz=float(clock),
        base_cycle=base,
        fingerprint=fingerprint,
        slots=scan.reports,
        cores=cores,
        unknown_ids=unknown,
        unmatched_e=unmatched_e,
        repaired_spans=repaired,
        backwards=backwards,
        issues=issues,
        notes=notes,
        spans=spans,
        unread_by_slot=unread_by_slot,
        far_records=far_records,
    )


def signed_delta(delta: int) -> int:
    """A difference of two uint64 cycle values, read as a signed 64-bit offset."""
    delta %= _U64
    return delta - _U64 if delta >= 1 << 63 else delta
