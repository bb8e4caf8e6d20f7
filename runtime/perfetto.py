"""Native Perfetto trace output (``.pftrace``): TrackEvent protobuf, encoded with numpy.

``optrace collect -o trace.pftrace`` writes what the Perfetto UI and trace processor read
natively, about a fifth of the Chrome JSON's bytes. The messages are those of Perfetto's
``perfetto_trace.proto`` (field numbers below); they are encoded here, the packets of a
whole rank at once with numpy, rather than built one message object per event with the
``protobuf`` runtime: bench/results.md has both measured (the same messages; the library
way far slower, longer than the whole JSON collect many times over, plus its imports).
Tests parse every trace back with the official protos.

A trace is a sequence of ``Trace.packet`` (field 1), in this order:

- a root TrackDescriptor (uuid 0) asking for explicit process and thread order;
- per rank, a process TrackDescriptor ("Rank 0", ``sibling_order_rank``; pid: the JSON
  trace's plus one, as pid and tid 0 are the idle process and thread to Perfetto),
  then its rank files (launches) in time order (:mod:`launches`);
- per launch and core, when the core is new to the rank: its thread TrackDescriptor
  ("AIC 3", tid: the slot plus one, ranked by slot, so AIC first) and the start of its
  own packet sequence (``trusted_packet_sequence_id``), which all the rank's launches
  on that core then use:

  1. incremental state cleared; TracePacketDefaults: timestamps on the sequence clock 64,
     events on the core's track; InternedData: the event names (labels) and source
     locations (the B points' ``file:line``) the core uses, the debug-annotation names,
     the launch slices' category (:data:`launches.LAUNCH_CATEGORY`, iid 1);
  2. a ClockSnapshot: clock 64 counts ticks of the rank's unit (``is_incremental``,
     ``unit_multiplier_ns`` = 1000 / clock MHz: 20 ns at 50 MHz, 1 ns at 1 GHz) and its
     0 is BOOTTIME = the launch's start in ns (its placement and ``--rank-offsets``; a
     negative one as its 64-bit two's complement, which the trace processor reads as an
     int64). A clock whose tick is not a whole number of ns, or a rank whose launches
     differ in it, counts ns instead (rounded, unit 1);

  a core seen in an earlier launch gets an InternedData packet for what it had not
  used yet, if anything; then, every launch:

  3. the launch's SLICE_BEGIN (its name inline, ``launch 3``, and the category), at the
     launch's first span on any core;
  4. a SLICE_BEGIN / SLICE_END packet per span's B / E, in record order, each timestamp
     the ticks since the previous packet of the sequence, names by interned id, the loop
     index (and a non-zero extraId) and the decoder's flags (``unclosed``,
     ``closed_by_parent``) as debug annotations;
  5. when the slot overflowed, an INSTANT "optrace: N records dropped ..." with the count
     as the annotation ``dropped`` (and in the thread track's description);
  6. the launch's SLICE_END, at its last end on any core.

- last, ``trace_attributes`` {key "optrace", string value: the JSON document the Chrome
  trace keeps in ``otherData``: format, point map, per-rank clock, barrier, fingerprint}.

One sequence per core and rank keeps the deltas small (a core's records are in time
order, and so are the rank's launches) and its interning tables to what it uses; what
a track costs is paid once per core, not once per launch. Times are those of the Chrome
trace to the ns. ``collect --merge`` relies on this layout (merge.py finds each launch's
begin on every core, and adds flow fields to its event packets).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import IO, Any, cast

import numpy as np

from .atomic import atomic_output
from .chrome import CoreFilter, RenderedRank, drop_tick, label_matcher, launch_extent
from .decode import STATUS_CLOSED_BY_PARENT, STATUS_UNCLOSED, RankDecode, SlotReport
from .launches import LAUNCH_CATEGORY
from .pointmap import PointMap

PERFETTO_FORMAT = "optrace-perfetto"
#: 2: one process per rank, launches as slices (see chrome.TRACE_FORMAT_VERSION).
PERFETTO_FORMAT_VERSION = 2

#: The sequence-scoped clock (ids 64-127 are a sequence's own) events are stamped with.
SEQUENCE_CLOCK = 64
BOOTTIME = 6

# TrackEvent.Type
SLICE_BEGIN, SLICE_END, INSTANT = 1, 2, 3
#: TrackEvent's flow fields (repeated fixed64): a flow starts or continues at the slice of
#: an event carrying its id in ``flow_ids`` and ends at one carrying it in ``terminating_flow_ids``.
FLOW_IDS, TERMINATING_FLOW_IDS = 47, 48
SEQ_INCREMENTAL_STATE_CLEARED = 1

#: The interned id of the launch slices' category on every sequence.
LAUNCH_CATEGORY_IID = 1
#: Debug-annotation names, interned with these ids on every sequence.
ANNOTATIONS = {"index": 1, "extraId": 2, "unclosed": 3, "closed_by_parent": 4, "dropped": 5}
_FLAG_IID = {STATUS_UNCLOSED: ANNOTATIONS["unclosed"],
             STATUS_CLOSED_BY_PARENT: ANNOTATIONS["closed_by_parent"]}


# ----------------------------------------------------------------------------- scalars


def varint(value: int) -> bytes:
    """Base-128 little-endian; a negative value as its 64-bit two's complement."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if 0 < value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    # Up to 35 bits without the loop: a core's track uuid (its rank's in the high bits)
    # and sequence id, a launch's first tick, written once per core.
    if 0 < value < 0x200000:
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14))
    if 0 < value < 0x10000000:
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14 & 0x7F | 0x80, value >> 21))
    if 0 < value < 0x800000000:
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14 & 0x7F | 0x80,
                      value >> 21 & 0x7F | 0x80, value >> 28))
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_ONE_BYTE = [bytes([i]) for i in range(0x80)]


def _uint(field: int, value: int) -> bytes:
    return _VARINT_TAG[field] + varint(value)


def _bytes(field: int, payload: bytes) -> bytes:
    return _LENGTH_TAG[field] + varint(len(payload)) + payload


_VARINT_TAG = [varint(field << 3) for field in range(128)]
_LENGTH_TAG = [varint(field << 3 | 2) for field in range(128)]


def _string(field: int, text: str) -> bytes:
    return _bytes(field, text.encode("utf-8"))


#: The field encoders under public names, for the framework tracks of a merged trace (merge.py).
def uint_field(field: int, value: int) -> bytes:
    return _uint(field, value)


def bytes_field(field: int, payload: bytes) -> bytes:
    return _bytes(field, payload)


def string_field(field: int, text: str) -> bytes:
    return _string(field, text)


def fixed64_field(field: int, value: int) -> bytes:
    """A ``fixed64`` field (wire type 1), as TrackEvent's ``flow_ids`` are: one per value,
    not packed (the protos declare them plain ``repeated``, proto2)."""
    return varint(field << 3 | 1) + value.to_bytes(8, "little")


def packet(*fields: bytes) -> bytes:
    """A ``Trace.packet`` holding the given TracePacket fields."""
    return _bytes(1, b"".join(fields))


def _track_descriptor(*fields: bytes) -> bytes:
    return packet(_bytes(60, b"".join(fields)))


def root_descriptor() -> bytes:
    """uuid 0 with process_ordering / thread_ordering EXPLICIT: ranks and cores are shown
    in their ``sibling_order_rank`` order (rank, then slot: AIC first), as in JSON."""
    return _track_descriptor(_uint(1, 0), _uint(19, 1), _uint(20, 1))


def process_uuid(pid: int) -> int:
    return (pid + 1) << 20


def thread_uuid(pid: int, slot: int) -> int:
    return process_uuid(pid) + slot + 1


def trace_attributes(document: dict[str, Any]) -> bytes:
    """The trace's metadata: ``trace_attributes`` {key "optrace", JSON string}."""
    text = json.dumps(document, separators=(",", ":"), sort_keys=True)
    return packet(_bytes(126, _bytes(1, _string(1, "optrace") + _string(3, text))))


# ----------------------------------------------------------------------------- vectors
#
# A rank's B / E packets are written straight into one byte buffer at offsets known from
# their sizes (a cumulative sum): no padded matrix to compact. Packets of one layout (the
# kind of event and the length of its timestamp) have one width; each layout is built as
# a matrix, column by column, and stored in one fancy assignment through a view of the
# buffer whose items are that many bytes wide at a stride of one byte (~3 ns a packet).
# To keep layouts few, the varints of a packet other than its timestamp (sequence id,
# name and source ids, index, extraId) are written at one width per rank: a varint may
# carry redundant 0x80 groups, which protobuf parsers read as the same value.


def varint_length(values: np.ndarray) -> np.ndarray:
    """Bytes of the minimal varint of each non-negative value (1 to 10)."""
    v = values.astype(np.uint64, copy=False)
    top = int(v.max()) if v.size else 0
    length = np.ones(v.shape, dtype=np.uint8)  # a byte each: cheaper to add to and gather
    for j in range(1, max(1, -(-top.bit_length() // 7))):
        length += (v >= np.uint64(1 << (7 * j))).view(np.uint8)
    return length


def padded_varint(values: np.ndarray, width: int) -> np.ndarray:
    """uint8 [n, width]: each value as a varint of exactly ``width`` bytes."""
    v = values.astype(np.uint64, copy=False)
    out = np.empty((v.size, width), dtype=np.uint8)
    for j in range(width):
        group = (v >> np.uint64(7 * j)) & np.uint64(0x7F)
        out[:, j] = group | np.uint64(0x80) if j + 1 < width else group
    return out


def _width(values: np.ndarray, where: np.ndarray | None = None) -> int:
    """Bytes of the longest varint of ``values`` (those ``where`` says), at least 1."""
    if where is None:
        top = int(values.max()) if values.size else 0
    else:
        top = int(np.where(where, values, 0).max()) if values.size else 0  # 3x max(where=)
    return max(1, -(-top.bit_length() // 7))


def _byte_view(buffer: np.ndarray, width: int) -> np.ndarray:
    """Items of ``width`` bytes starting at every byte of ``buffer`` (stride 1)."""
    dtype = np.dtype("<u8") if width == 8 else np.dtype((np.void, width))
    return np.ndarray(shape=(buffer.size - width + 1,), dtype=dtype, buffer=buffer, strides=(1,))


class _Rows:
    """A uint8 [rows, width] matrix filled column by column (a 1-d store per column is
    several times cheaper than a store into a slice of columns)."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.columns: list[np.ndarray | int] = []

    def put(self, *columns: np.ndarray | int) -> None:
        self.columns.extend(columns)

    def varint(self, values: np.ndarray, width: int) -> None:
        """``values`` as varints of exactly ``width`` bytes (redundant groups padded): each
        needs at most ``width``, so the last group is below 0x80."""
        v = values.astype(np.uint64, copy=False)
        for j in range(width):
            group = (v >> np.uint64(7 * j) if j else v).astype(np.uint8)  # its low 8 bits
            if j + 1 < width:
                group |= 0x80  # the 8th bit is the next group's: set it whatever it was
            self.columns.append(group)

    @property
    def width(self) -> int:
        return len(self.columns)

    def matrix(self) -> np.ndarray:
        width = len(self.columns)
        out = np.empty((self.rows, width), dtype=np.uint8)
        # The constant bytes (most of a packet's: tags, lengths, the event's type) as a row
        # copied down the matrix by doubling, a few contiguous copies; then the columns
        # that vary, one strided store each.
        flat = out.reshape(-1)
        if self.rows:
            flat[:width] = [c if isinstance(c, int) else 0 for c in self.columns]
        done = width
        while done < flat.size:
            step = min(done, flat.size - done)
            flat[done : done + step] = flat[:step]
            done += step
        for j, column in enumerate(self.columns):
            if not isinstance(column, int):
                out[:, j] = column
        return out


def _void_items(matrix: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(matrix).view(np.dtype((np.void, matrix.shape[1])))[:, 0]


def _groups(key: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(key, rows) for each distinct small key, rows in increasing order."""
    if key.size == 0:
        return []
    lo, hi = int(key.min()), int(key.max())
    if lo == hi:
        return [(lo, np.arange(key.size))]
    if hi - lo < 16:
        # A few values (the timestamps' lengths): a comparison each, not np.bincount, whose
        # count of a few values (the same counters again and again) is several times slower.
        found = [(k, np.flatnonzero(key == k)) for k in range(lo, hi + 1)]
        return [(k, rows) for k, rows in found if rows.size]
    present = np.flatnonzero(np.bincount(key)).tolist()
    return [(k, np.flatnonzero(key == k)) for k in present]


def encode_events(
    ticks_b: np.ndarray | None, ticks_e: np.ndarray | None, b_at: np.ndarray, e_at: np.ndarray,
    first_b: np.ndarray,
    track: np.ndarray, track_sequence: np.ndarray, point: np.ndarray, point_name: np.ndarray,
    point_source: np.ndarray, indexed: np.ndarray, index: np.ndarray, extra: np.ndarray, status: np.ndarray,
    stream_ticks: np.ndarray | None = None, first_delta: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The B and E packets of a rank's spans: the bytes, and the end offset of each
    event's packet (``ends[k]``: bytes up to and including event k). Per span: the places
    of its B and E in the event stream, their times, its track (whose sequence id
    ``track_sequence`` has), its B point (whose interned name and source location ids
    ``point_name`` / ``point_source`` have, 0: none) and its annotations. ``stream_ticks``:
    the times of all events in stream order when known (the decoder's records, in time
    order per core), instead of ``ticks_b`` / ``ticks_e``. ``first_delta``: the
    timestamp of each core's first event (at ``first_b``), the ticks since the packet
    before it on its sequence (default 0).

    Packets of one layout (kind of event, timestamp length) have one width: each layout
    is built as a matrix, column by column, and stored in one pass."""
    m = b_at.size
    n = 2 * m
    if stream_ticks is not None:
        ticks = stream_ticks
    else:
        assert ticks_b is not None and ticks_e is not None
        ticks = np.empty(n, dtype=np.int64)
        ticks[b_at] = ticks_b
        ticks[e_at] = ticks_e
        backwards = ticks[1:] < ticks[:-1]
        backwards[first_b[first_b > 0] - 1] = False  # a core's first event may come before the last's
        if backwards.any():
            raise AssertionError("a core's events are not in time order")  # the decoder clamps them
    # uint64: the difference of two int64 times far apart (corrupt records) is still exact
    delta = np.empty(n, dtype=np.uint64)
    if n:
        delta[0] = 0
        np.subtract(ticks[1:].view(np.uint64), ticks[:-1].view(np.uint64), out=delta[1:])
        delta[first_b] = 0 if first_delta is None else first_delta  # after its launch's begin
    timestamp_length = varint_length(delta)

    ws = _width(track_sequence)
    sequence_bytes = list(padded_varint(track_sequence, ws).T)
    wn, wsrc = _width(point_name), _width(point_source)
    name_bytes = list(padded_varint(point_name, wn).T)
    source_bytes = list(padded_varint(point_source, wsrc).T)
    has_source = point_source[point] > 0
    kind = has_source.view(np.uint8) | indexed.view(np.uint8) << 1
    has_extra = indexed & (extra != 0)
    if has_extra.any():
        kind |= has_extra.view(np.uint8) << 2
    if status.any():
        kind |= status.astype(np.uint8) << 3
    wi, we = _width(index, indexed), _width(extra, has_extra)
    b_length = timestamp_length[b_at]
    e_length = timestamp_length[e_at]

    layouts: list[tuple[np.ndarray, _Rows]] = []  # (places, packets)
    size = np.empty(n, dtype=np.int64)

    def packets(rows: int, length: int, at: np.ndarray, body: int) -> _Rows:
        """[0x0A len] [0x40 timestamp] of events at places ``at`` (timestamps of
        ``length`` bytes; the packet ``body`` bytes after it)."""
        out = _Rows(rows)
        out.put(0x0A, 1 + length + body, 0x40)
        out.varint(delta[at], length)  # minimal: ``length`` bytes
        return out

    # E: [0x0A len] [0x40 ts] [0x50 seq] [0x5A 02 0x48 02]
    for length, rows in _groups(e_length):
        at = e_at[rows]
        out = packets(rows.size, length, at, 1 + ws + 4)
        on = track[rows]
        out.put(0x50, *(np.take(column, on) for column in sequence_bytes), 0x5A, 2, 0x48, SLICE_END)
        size[at] = out.width
        layouts.append((at, out))
    # B: ... [0x50 seq] [0x5A len] [0x50 name] [0x90 02 src] [index] [extraId] [flag] [0x48 01]
    for key, rows in _groups(kind.astype(np.uint16) << 4 | b_length):  # the flags take kind past 15
        k, length = key >> 4, key & 15
        event_length = 2 + 1 + wn + (2 + wsrc if k & 1 else 0) + (5 + wi if k & 2 else 0) \
            + (5 + we if k & 4 else 0) + (6 if k >> 3 else 0)
        at = b_at[rows]
        out = packets(rows.size, length, at, 1 + ws + 2 + event_length)
        on_track, on_point = track[rows], point[rows]
        out.put(0x50, *(np.take(column, on_track) for column in sequence_bytes), 0x5A, event_length)
        out.put(0x50, *(np.take(column, on_point) for column in name_bytes))
        if k & 1:
            out.put(0x90, 0x02, *(np.take(column, on_point) for column in source_bytes))
        if k & 2:  # debug_annotations {name_iid 1, int_value index}
            out.put(0x22, 3 + wi, 0x08, ANNOTATIONS["index"], 0x20)
            out.varint(index[rows], wi)
        if k & 4:
            out.put(0x22, 3 + we, 0x08, ANNOTATIONS["extraId"], 0x20)
            out.varint(extra[rows], we)
        if k >> 3:  # debug_annotations {name_iid, bool_value true}
            out.put(0x22, 4, 0x08, _FLAG_IID[k >> 3], 0x10, 1)
        out.put(0x48, SLICE_BEGIN)
        size[at] = out.width
        layouts.append((at, out))
    if n and int(size.max()) > 129:
        raise AssertionError("an event packet outgrew a one-byte length")  # field widths forbid it
    ends = np.cumsum(size)
    total = int(ends[-1]) if n else 0
    buffer = np.empty(total, dtype=np.uint8)  # every byte is some packet's
    for at, out in layouts:
        _byte_view(buffer, out.width)[ends[at] - out.width] = _void_items(out.matrix())
    return buffer, ends


def event_places(
    depth: np.ndarray, selected: np.ndarray | None, decoded: RankDecode | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Where each selected span's B and E go in the event stream, the order the device
    recorded them in. ``depth`` is the nesting depth of every span of the rank, in record
    (pre-)order: before span i's B come i Bs and the Es of the i - depth spans already
    closed (the others are its ancestors), so its B is event 2 i - depth. Each E then
    closes the last B opened at its level: a stable sort of the events by level (radix,
    as in :func:`decode.nest_segments`) pairs them. A selection keeps its spans' events
    in the same order. When the decoder kept every record as one B or one E (nothing
    dropped, nothing repaired), the places are the records' own, as it found them."""
    n = depth.size
    spans = decoded.spans if decoded is not None else None
    if records_are_events(decoded) and spans is not None:
        assert spans.begin_record is not None and spans.end_record is not None
        return _keep_places(spans.begin_record, spans.end_record, selected)
    index = np.int32 if n < 1 << 29 else np.int64
    b_at = 2 * np.arange(n, dtype=index) - depth
    is_b = np.zeros(2 * n, dtype=bool)
    is_b[b_at] = True
    opened: np.ndarray = np.cumsum(is_b, dtype=index)
    # a B's own depth; for an E, the depth it closes
    level: np.ndarray = 2 * opened - np.arange(1, 2 * n + 1, dtype=index)
    level -= is_b
    top = int(level.max()) if n else 0
    key = level.astype(np.uint8) if top < 256 else level
    order = np.argsort(key, kind="stable").astype(index)
    begins, ends = order[0::2], order[1::2]  # each level's events alternate B, E
    e_at = np.empty(n, dtype=index)
    e_at[opened[begins] - 1] = ends
    return _keep_places(b_at, e_at, selected)


def records_are_events(decoded: RankDecode | None) -> bool:
    """Whether the decoder kept every record as exactly one span's B or E (nothing
    dropped, nothing repaired): then its records are the event stream."""
    if decoded is None:
        return False
    spans = decoded.spans
    return (spans.begin_record is not None and spans.end_record is not None
            and spans.record_time is not None and not decoded.unmatched_e
            and not decoded.repaired_spans and spans.record_time.size == 2 * spans.begin_record.size)


def _keep_places(
    b_at: np.ndarray, e_at: np.ndarray, selected: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The places of the selected spans' events once the others' are taken out."""
    if selected is None:
        return b_at, e_at
    keep = np.zeros(2 * b_at.size, dtype=bool)
    keep[b_at[selected]] = True
    keep[e_at[selected]] = True
    place = np.cumsum(keep) - 1
    return place[b_at[selected]], place[e_at[selected]]


# ----------------------------------------------------------------------------- ranks


class _CoreSequence:
    """A core's packet sequence in one trace file: its id, the BOOTTIME (ns) of its
    clock's 0 and the unit it counts, the clock's value at its last packet, and the
    labels and points its interning tables hold (``points``: a bool per map position,
    its own array once the sequence is made)."""

    __slots__ = ("boot_ns", "id", "labels", "last", "points", "unit")

    def __init__(self, sequence: int, boot_ns: int, unit: int, points: np.ndarray, labels: set[int]) -> None:
        self.id = sequence
        self.boot_ns = boot_ns
        self.unit = unit
        self.last = 0
        self.labels = labels
        self.points = points


class Sequences:
    """Packet sequences of one trace file, handed out as ranks are laid out, and what the
    rank being written already has in it (its process track, its cores' sequences): a
    rank's files come one after the other."""

    def __init__(self) -> None:
        self.next = 1
        self.rank: int | None = None
        self.cores: dict[int, _CoreSequence] = {}

    def take(self, count: int) -> int:
        first = self.next
        self.next += count
        return first

    def enter(self, pid: int) -> bool:
        """Make ``pid`` the rank being written; True when it is new to the file."""
        if pid == self.rank:
            return False
        self.rank, self.cores = pid, {}
        return True


def clock_unit_ns(clock_mhz: float) -> int | None:
    """ns per tick when a whole number (50 MHz: 20), else None (timestamps in ns)."""
    unit = 1000.0 / clock_mhz
    whole = round(unit)
    return whole if whole >= 1 and abs(unit - whole) < 1e-9 * unit else None


class _Interning:
    """Per point map: the interned-data entries of each label and B point (bytes)."""

    def __init__(self, point_map: PointMap) -> None:
        self.point_map = point_map
        self.names = [_bytes(2, _uint(1, i + 1) + _string(2, label))
                      for i, label in enumerate(point_map.labels)]
        self.sources: list[bytes] = []
        has_source = []
        for position, point_id in enumerate(point_map.ids.tolist()):
            point = point_map.points[point_id]
            fields = _uint(1, position + 1)
            if point.file:
                # A path's own bytes: one named in bytes that are not UTF-8 reads back as
                # lone surrogates (the point map keeps paths as bytes), written as they were.
                fields += _bytes(2, point.file.encode("utf-8", "surrogateescape"))
            if point.line is not None:
                fields += _uint(4, point.line)
            self.sources.append(_bytes(4, fields))
            has_source.append(bool(point.file))
        self.has_source = np.array(has_source or [False], dtype=bool)
        self.indexed = np.array([point_map.points[i].indexed for i in point_map.ids.tolist()] or [False])
        self.label_iid = point_map.label_index.astype(np.int64) + 1
        if not point_map.ids.size:
            self.label_iid = np.ones(1, np.int64)
        self.annotations = b"".join(_bytes(3, _uint(1, iid) + _string(2, name))
                                    for name, iid in ANNOTATIONS.items())
        self.annotations += _bytes(1, _uint(1, LAUNCH_CATEGORY_IID) + _string(2, LAUNCH_CATEGORY))
        self.cache: dict[bytes, tuple[bytes, list[int]]] = {}
        # A rank's ClockSnapshot field (the same for all its cores): (unit, boot ns) -> bytes.
        self.clocks: dict[tuple[int, int], bytes] = {}
        # A core's ThreadDescriptor fields after the pid, and its TrackDescriptor's after the
        # thread, per (slot, name shown, drop message): the same on every rank.
        self.threads: dict[tuple[int, str, str], tuple[bytes, bytes]] = {}

    def more(self, used: np.ndarray, sequence: _CoreSequence) -> bytes:
        """TracePacket.interned_data of what a later launch uses on a core and its
        sequence does not have yet (b"": nothing); the sequence has it then."""
        new = used & ~sequence.points
        if not new.any():
            return b""
        points = np.flatnonzero(new)
        labels = sorted(set(self.point_map.label_index[points].tolist()) - sequence.labels)
        sequence.points |= new
        sequence.labels.update(labels)
        entries = [self.names[i] for i in labels] + [self.sources[p] for p in points.tolist()]
        return _bytes(12, b"".join(entries))

    def data(self, used: np.ndarray) -> tuple[bytes, list[int]]:
        """TracePacket.interned_data for a core whose spans open at the points ``used``
        says (bool per map position): their labels and source locations, the annotation
        names, the launch category; and those labels. Kept per set of points: a rank's
        cores mostly open at the same ones."""
        key = used.tobytes()
        found = self.cache.get(key)
        if found is None:
            points = np.flatnonzero(used)
            # sorted(set()), not np.unique: that imports numpy.ma, a noticeable part of a
            # cold collect
            labels = sorted(set(self.point_map.label_index[points].tolist()))
            entries = [self.annotations, *(self.names[i] for i in labels)]
            entries += [self.sources[p] for p in points.tolist()]
            found = self.cache[key] = (_bytes(12, b"".join(entries)), labels)
        return found

    def thread(self, slot: int, name: str | None, drop: SlotReport | None) -> tuple[bytes, bytes]:
        """A core's ThreadDescriptor fields after its pid (tid, thread_name) and its
        TrackDescriptor's after the thread (sibling_order_rank, the drop's description)."""
        message = _drop_message(drop.dropped, drop.state) if drop is not None else ""
        # By the name shown: a core with no span takes its name from its rank's layout,
        # which differs between ranks for the same slot.
        shown = name or (drop.name if drop is not None else str(slot))
        key = (slot, shown, message)
        found = self.threads.get(key)
        if found is None:
            found = (b"\x10" + varint(slot + 1) + _string(5, shown),
                     b"\x60" + varint(slot) + (_string(14, message) if message else b""))
            if len(self.threads) > 65536:
                self.threads.clear()  # names that differ rank by rank: keep the table small
            self.threads[key] = found
        return found

    def clock(self, unit: int, boot_ns: int) -> bytes:
        """TracePacket.clock_snapshot (field 6) of a sequence whose clock counts ``unit`` ns
        from ``boot_ns`` on BOOTTIME."""
        found = self.clocks.get((unit, boot_ns))
        if found is None:
            clock = _bytes(1, _uint(1, SEQUENCE_CLOCK) + _uint(2, 0) + _uint(3, 1) + _uint(4, unit))
            boot_clock = b"\x08\x06\x10" + varint(boot_ns)
            snapshot = clock + b"\x0a" + varint(len(boot_clock)) + boot_clock
            if len(self.clocks) > 4096:
                self.clocks.clear()  # a trace of many launches: keep the table small
            found = self.clocks[(unit, boot_ns)] = b"\x32" + varint(len(snapshot)) + snapshot
        return found


_INTERNING: dict[int, _Interning] = {}


def _interning(point_map: PointMap) -> _Interning:
    found = _INTERNING.get(id(point_map))
    if found is None or found.point_map is not point_map:
        _INTERNING.clear()
        found = _INTERNING[id(point_map)] = _Interning(point_map)
    return found


def render_rank(
    pid: int,
    process_name: str,
    decoded: RankDecode,
    point_map: PointMap,
    sequences: Sequences,
    *,
    launch: str = "launch 0",
    labels: list[str] | None = None,
    core_filter: CoreFilter | None = None,
    origin_ns: int = 0,
    unit_ns: int | None = None,
) -> RenderedRank:
    """A rank file's packets (see the module's doc), encoded at once (``size`` is exact,
    ``chunks`` the bytes): the rank's process track if new to the file, then per core its
    track and sequence if new to the rank, its launch slice, events and drop marker.
    ``origin_ns``: where the file's base cycle is in the trace; ``unit_ns``: the unit the
    rank's sequences count (None: a rank of one file, its clock's tick)."""
    spans = decoded.spans
    mask: np.ndarray | None = None
    if core_filter is not None:
        slot_ok = np.array([core_filter(r.core_type, r.core_index) for r in decoded.slots] or [True])
        mask = slot_ok[spans.slot]
    if labels:
        matcher = label_matcher(labels)
        label_ok = np.array([matcher(label) for label in point_map.labels] or [True], dtype=bool)
        mask = label_ok[spans.label] if mask is None else mask & label_ok[spans.label]
    selected = None if mask is None or mask.all() else np.flatnonzero(mask)

    def pick(column: np.ndarray) -> np.ndarray:
        return column if selected is None else column[selected]

    slot, point = pick(spans.slot), pick(spans.point)
    drops = {s.slot: s for s in decoded.slots
             if s.dropped and (core_filter is None or core_filter(s.core_type, s.core_index))}
    names = {c.slot: c.name for c in decoded.cores}
    # each core's slot once (spans are by slot): a sixth of diff(prepend=)'s time
    span_slots = slot[np.flatnonzero(np.concatenate(([True], slot[1:] != slot[:-1])))] if slot.size else slot
    tracks = sorted(set(span_slots.tolist()) | set(drops))
    interning = _interning(point_map)
    tick = clock_unit_ns(decoded.clock_mhz)
    unit = tick if unit_ns is None or unit_ns == tick else None  # None: the clocks count ns

    first, last = launch_extent(decoded)
    start, end = pick(spans.start), pick(spans.end)
    stream = spans.record_time if selected is None and records_are_events(decoded) else None
    drop_at = {k: drop_tick(decoded, k, first) for k in drops}
    if unit is None:  # a tick is not a whole number of ns: the sequence clock counts ns
        start, end = _in_ns(start, decoded.clock_mhz), _in_ns(end, decoded.clock_mhz)
        stream = None if stream is None else _in_ns(stream, decoded.clock_mhz)
        first, last = (int(t) for t in _in_ns(np.array([first, last]), decoded.clock_mhz))
        drop_at = {k: int(_in_ns(np.array([t]), decoded.clock_mhz)[0]) for k, t in drop_at.items()}
    step = unit or 1
    track_of = np.zeros(max(tracks, default=0) + 1, dtype=np.int64)
    track_of[tracks] = np.arange(len(tracks))
    span_track = track_of[slot]
    b_at, e_at = event_places(spans.depth, selected, decoded)
    firsts = np.searchsorted(slot, span_slots)  # each core's first span
    high = pick(spans.high).astype(np.int64)
    indexed = (high != 0) | interning.indexed[point]
    point_source = np.where(interning.has_source, np.arange(1, interning.has_source.size + 1), 0)

    chunks: list[bytes | np.ndarray] = []
    packets = 0
    if sequences.enter(pid):
        process = _bytes(3, _uint(1, pid + 1) + _string(6, process_name))
        chunks.append(_track_descriptor(_uint(1, process_uuid(pid)), process, _uint(12, pid)))
        packets += 1
    used = np.zeros((len(tracks), max(point_map.ids.size, 1)), dtype=bool)
    # by flat index: a store at (row, column) pairs costs several times a 1-d one
    used.reshape(-1)[span_track * used.shape[1] + point] = True
    track_sequence = np.zeros(len(tracks), dtype=np.int64)
    # Per core: the bytes before its launch's begin (a new core's track and sequence start,
    # or what a later launch interns), its sequence's field, and this file's tick 0 on the
    # sequence's clock.
    heads: list[bytes] = []
    fields: list[bytes] = []
    zeros: list[int] = []
    new = [k for k, track_slot in enumerate(tracks) if track_slot not in sequences.cores]
    if new:
        heads_of_new = _core_starts(pid, [tracks[k] for k in new], names, drops, interning, used[new].copy(),
                                    sequences, origin_ns + first * step, step)
    new_at = 0
    cores = [sequences.cores[track_slot] for track_slot in tracks]
    for k, core in enumerate(cores):
        field = b"\x50" + varint(core.id)
        if new_at < len(new) and new[new_at] == k:
            heads.append(heads_of_new[new_at])
            new_at += 1
            zeros.append(-first)  # its clock's 0 is the launch's first tick
        else:
            more = interning.more(used[k], core)
            heads.append(b"\x0a" + varint(len(field) + len(more)) + field + more if more else b"")
            packets += 1 if more else 0
            # This file's tick 0 on the core's clock: a whole number of its units after the
            # launch before ends (launches.py); only saturated corrupt times could make it
            # less, and they start where that one ends.
            zeros.append(max((origin_ns - core.boot_ns) // step, core.last - first))
        fields.append(field)
        track_sequence[k] = core.id
    packets += 3 * len(new)
    span_lo = np.searchsorted(slot, np.array(tracks, dtype=np.int64), side="left")
    span_hi = np.searchsorted(slot, np.array(tracks, dtype=np.int64), side="right")
    with_spans = span_hi > span_lo
    first_event = np.array([int(start[lo]) - first for lo, has in zip(span_lo.tolist(), with_spans.tolist(),
                                                                       strict=True) if has], dtype=np.int64)
    encoded, ends = encode_events(
        None if stream is not None else start, None if stream is not None else end, b_at, e_at, b_at[firsts],
        span_track, track_sequence, point, interning.label_iid, point_source,
        indexed, high >> 8, high & 0xFF, pick(spans.status), stream, first_event.view(np.uint64))
    packets += int(ends.size)
    # A core's bytes: spans lo..hi-1 are its own, their events are places 2 lo .. 2 hi - 1.
    ends_with_zero = np.concatenate([[0], ends])
    byte_lo = ends_with_zero[2 * span_lo].tolist()
    byte_hi = ends_with_zero[2 * span_hi].tolist()
    begin_event = _bytes(11, _uint(3, LAUNCH_CATEGORY_IID) + _uint(9, SLICE_BEGIN) + _string(23, launch))
    end_event = _bytes(11, _uint(9, SLICE_END))
    # Each core's last span end, for all cores at once (a max of a slice per core was a
    # good part of this loop's time at 72 cores a rank).
    last_end = [first] * len(tracks)
    if with_spans.any():
        for k, top in zip(np.flatnonzero(with_spans).tolist(),
                          np.maximum.reduceat(end, span_lo[with_spans]).tolist(), strict=True):
            last_end[k] = int(top)
    v = varint
    for k, track_slot in enumerate(tracks):
        field = fields[k]
        core = cores[k]
        body = b"\x40" + v(zeros[k] + first - core.last) + field + begin_event
        chunks.append(heads[k] + b"\x0a" + v(len(body)) + body)
        at = last_end[k]  # the sequence's last packet so far
        if byte_hi[k] > byte_lo[k]:
            chunks.append(encoded[byte_lo[k] : byte_hi[k]])
        drop = drops.get(track_slot) if drops else None
        if drop is not None:
            mark = max(drop_at[track_slot], at)
            chunks.append(packet(
                _uint(8, mark - at), field,
                _bytes(11, _uint(9, INSTANT) + _string(23, _drop_message(drop.dropped, drop.state))
                       + _bytes(4, _uint(1, ANNOTATIONS["dropped"]) + _uint(4, drop.dropped)))))
            packets += 1
            at = mark
        body = b"\x40" + v(max(last, at) - at) + field + end_event
        chunks.append(b"\x0a" + v(len(body)) + body)
        packets += 2
        core.last = zeros[k] + max(last, at)
    size = sum(map(len, chunks))
    return RenderedRank(iter(chunks), packets, int(slot.size), size, len(chunks),
                        [(t, names.get(t) or (drops[t].name if t in drops else str(t))) for t in tracks],
                        (origin_ns + first * step, origin_ns + last * step), span_slots.tolist())


def _core_starts(pid: int, slots: list[int], names: dict[int, str], drops: dict[int, SlotReport],
                 interning: _Interning, used: np.ndarray, sequences: Sequences, boot_ns: int,
                 unit: int) -> list[bytes]:
    """Cores new to their rank (``slots``, ``used``: the points each opens spans at, a
    row each, the cores' own from here on): their sequences, made and kept in
    ``sequences``, and per core its thread TrackDescriptor, its sequence's first packet
    (state cleared, defaults: clock 64 and this track, interned data) and ClockSnapshot
    (0 at ``boot_ns``, ticks of ``unit`` ns). Written out by hand (field numbers as in
    root_descriptor & co.), what the cores of a rank share made once."""
    v = varint
    pid_field = _uint(1, pid + 1)
    process_field = _uint(5, process_uuid(pid))
    first_uuid = thread_uuid(pid, 0)
    clock = interning.clock(unit, boot_ns)
    heads: list[bytes] = []
    sequence_id = sequences.take(len(slots))
    for row, slot in enumerate(slots):
        core_uuid = v(first_uuid + slot)
        thread, rest = interning.thread(slot, names.get(slot), drops.get(slot))
        thread = pid_field + thread
        descriptor = b"".join((b"\x08", core_uuid, process_field, b"\x22", v(len(thread)), thread, rest))
        td = b"\xe2\x03" + v(len(descriptor)) + descriptor
        points = used[row]
        data, labels = interning.data(points)
        sequences.cores[slot] = _CoreSequence(sequence_id, boot_ns, unit, points, set(labels))
        sequence = v(sequence_id)
        sequence_id += 1
        uuid_length = len(core_uuid)
        state = (b"\x50" + sequence + b"\x68\x01\xda\x03" + _ONE_BYTE[uuid_length + 6] + b"\xd0\x03\x40\x5a"
                 + _ONE_BYTE[uuid_length + 1] + b"\x58" + core_uuid)
        clock_packet = b"\x50" + sequence + clock
        heads.append(b"".join((b"\x0a", v(len(td)), td, b"\x0a", v(len(state) + len(data)), state, data,
                               b"\x0a", v(len(clock_packet)), clock_packet)))
    return heads


def _in_ns(ticks: np.ndarray, clock_mhz: float) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):  # saturated as in the JSON trace
        return np.clip(np.rint(ticks * (1000.0 / clock_mhz)), -(2.0**62), 2.0**62).astype(np.int64)


def _drop_message(dropped: int, state: str) -> str:
    what = "dropped (slot full)" if state == "overflow" else "overwritten (legacy overflow)"
    return f"optrace: {dropped} records {what}"


# ----------------------------------------------------------------------------- writer


class PerfettoTraceWriter:
    """Same use as :class:`chrome.ChromeTraceWriter`: ``path`` appears when :meth:`close`
    ran and no exception left the ``with`` block."""

    def __init__(self, path: str | Path, *, compress: bool | None = None) -> None:
        self.path = Path(path)
        self.compress = self.path.name.endswith(".gz") if compress is None else compress
        self.events = 0
        self._closed = False
        self._context: AbstractContextManager[IO[bytes]] | None = None
        self._raw: IO[bytes] | None = None
        self._out: IO[bytes] | None = None

    def __enter__(self) -> PerfettoTraceWriter:
        self._context = atomic_output(self.path)
        self._raw = self._context.__enter__()
        self._out = self._raw
        if self.compress:  # the trace processor and UI read gzipped traces
            import gzip

            # No name in the header (it would be the temporary's): see chrome.py.
            self._out = cast(IO[bytes], gzip.GzipFile(filename="", fileobj=self._raw, mode="wb",
                                                      compresslevel=3, mtime=0))
        self._write(root_descriptor())
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._context is not None
        if exc_type is None and not self._closed:
            exc_type, exc = RuntimeError, RuntimeError("trace writer left without close()")
        self._context.__exit__(exc_type, exc, tb)

    @property
    def sink(self) -> PerfettoTraceWriter:
        return self

    def _write(self, chunk: bytes | memoryview) -> None:
        assert self._out is not None, "use PerfettoTraceWriter as a context manager"
        self._out.write(chunk)

    def write_rendered(self, rendered: RenderedRank) -> int:
        """Append a rank laid out by :func:`render_rank`; returns its span count."""
        assert self._out is not None, "use PerfettoTraceWriter as a context manager"
        # One call for the rank's ~4 chunks a core (bytes, and uint8 arrays written
        # through their buffers): a Python call per chunk was a tenth of a rank's time.
        self._out.writelines(cast("Iterator[bytes]", rendered.chunks))  # arrays: buffers too
        self.events += rendered.events
        return rendered.spans

    @staticmethod
    def opening_size() -> int:
        return len(root_descriptor())

    @staticmethod
    def rank_size(rendered: RenderedRank, first: bool) -> int:
        return rendered.size

    @staticmethod
    def closing_size(other_data: dict[str, Any], names: bytes = b"") -> int:
        return len(trace_attributes(_metadata(other_data)))

    def close(self, other_data: dict[str, Any], names: bytes = b"") -> None:
        """The metadata packet (``names``: JSON's, not used: the tracks are named where
        they begin); the file replaces ``path`` when the ``with`` block ends."""
        self._write(trace_attributes(_metadata(other_data)))
        if self._out is not self._raw:
            assert self._out is not None
            self._out.close()  # the gzip trailer; the file itself closes on exit
        self._closed = True


def _metadata(other_data: dict[str, Any]) -> dict[str, Any]:
    return {**other_data, "format": PERFETTO_FORMAT, "version": PERFETTO_FORMAT_VERSION}
