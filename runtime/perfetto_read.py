"""Spans of a Perfetto protobuf trace (``.pftrace``), for ``report`` and ``compare``.

A small reader of the protobuf wire format in plain Python — no ``protobuf``, no
``perfetto`` package, no network — for the TrackEvent subset ``collect`` writes (and
that other TrackEvent producers use): thread / process track descriptors, packet
sequences with their incremental state (interned event names, TracePacketDefaults),
sequence clocks declared by a ClockSnapshot (incremental, with a unit), SLICE_BEGIN /
SLICE_END paired per track (the ``launch K`` slices told apart by their category), and
the ``optrace`` trace attribute (the run's settings).
Other packets are skipped. The tests check it against Perfetto's own protos.

Someone else's file: every read stays inside the message it belongs to, a
field the reader uses must have its schema's wire type (a timestamp sent as bytes is
refused, not read as no timestamp), strings must be UTF-8 (a lone surrogate's bytes
are not), and nothing recurses: unknown fields, however deeply nested, are skipped by
their length. Any breach is ``path: not a readable Perfetto trace: ...`` (exit 2).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import ProfilingInputError
from .launches import LAUNCH_CATEGORY
from .regular import BadJSON, parse_json, read_maybe_gzip

_U64 = 1 << 64


class _Malformed(ValueError):
    """Bytes that are not the trace format: the message says where."""


class _Truncated(_Malformed):
    pass


_VARINT, _LEN = 0, 2
_WIRE = {0: "a varint", 1: "a fixed64", 2: "bytes", 5: "a fixed32"}

#: (message, {field: wire type}) of what the reader takes from each message: a field
#: of another wire type would be read as something else (an offset as a number), so it
#: is refused. Fields the reader does not use are skipped whatever their type.
_Schema = tuple[str, dict[int, int]]
_PACKET: _Schema = ("TracePacket", {8: _VARINT, 10: _VARINT, 13: _VARINT, 58: _VARINT, 6: _LEN, 11: _LEN,
                                    12: _LEN, 59: _LEN, 60: _LEN, 126: _LEN})
# category_iids (3) is a repeated varint, which a producer may pack (bytes): read either way.
_EVENT: _Schema = ("TrackEvent", {9: _VARINT, 10: _VARINT, 11: _VARINT, 22: _LEN, 23: _LEN})
_DEFAULTS: _Schema = ("TracePacketDefaults", {58: _VARINT, 11: _LEN})
_EVENT_DEFAULTS: _Schema = ("TrackEventDefaults", {11: _VARINT})
_INTERNED: _Schema = ("InternedData", {1: _LEN, 2: _LEN, 3: _LEN})
_INTERNED_NAME: _Schema = ("an interned name", {1: _VARINT, 2: _LEN})
_DESCRIPTOR: _Schema = ("TrackDescriptor", {1: _VARINT, 2: _LEN, 3: _LEN, 4: _LEN, 5: _VARINT})
_PROCESS: _Schema = ("ProcessDescriptor", {1: _VARINT, 6: _LEN})
_THREAD: _Schema = ("ThreadDescriptor", {5: _LEN})
_CLOCKS: _Schema = ("ClockSnapshot", {1: _LEN})
_CLOCK: _Schema = ("ClockSnapshot.Clock", {1: _VARINT, 2: _VARINT, 3: _VARINT, 4: _VARINT})
_ATTRIBUTES: _Schema = ("trace attributes", {1: _LEN})
_ATTRIBUTE: _Schema = ("a trace attribute", {1: _LEN, 3: _LEN})


def _wrong_wire(schema: _Schema, number: int, wire: int) -> _Malformed:
    return _Malformed(f"{schema[0]} field {number} is {_WIRE.get(wire, f'wire type {wire}')}, "
                      f"not {_WIRE[schema[1][number]]}")


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(data):
            raise _Truncated("varint runs past the end")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & (_U64 - 1), i
        shift += 7
        if shift > 63:
            raise _Truncated("varint longer than 10 bytes")


def fields(data: bytes, lo: int, hi: int, schema: _Schema | None = None) -> Iterator[tuple[int, int, int]]:
    """(field number, value, end): for a varint its value; for bytes the start offset
    (``end`` is where they stop); fixed-width values are skipped. With a schema, a field
    it names must have its wire type."""
    i = lo
    while i < hi:
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if schema is not None and schema[1].get(number, wire) != wire:
            raise _wrong_wire(schema, number, wire)
        if wire == 0:
            value, i = _varint(data, i)
            yield number, value, i
        elif wire == 2:
            size, i = _varint(data, i)
            if i + size > hi:
                raise _Truncated("field runs past its message")
            yield number, i, i + size
            i += size
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise _Truncated(f"wire type {wire}")
    if i != hi:
        raise _Truncated("message runs past its end")


def _signed(value: int) -> int:
    return value - _U64 if value >= 1 << 63 else value


def _text(data: bytes, lo: int, hi: int) -> str:
    """A string field: UTF-8, as protobuf requires (the UTF-8 form of a lone surrogate,
    ED A0 80, is not; JSON traces refuse such names too)."""
    try:
        return data[lo:hi].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Malformed(f"string {data[lo:min(hi, lo + 60)]!r} is not UTF-8 ({exc.reason})") from None


class _Sequence:
    __slots__ = ("annotation_names", "base", "boot", "categories", "clock", "incremental", "names", "track",
                 "unit", "value")

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.annotation_names: dict[int, str] = {}
        self.categories: dict[int, str] = {}
        self.clock = 0
        self.track = 0
        self.unit = 1
        self.incremental = False
        self.base: int | None = None  # the sequence clock's value at the snapshot
        self.boot = 0  # BOOTTIME (ns) at the snapshot
        self.value = 0


class PerfettoSpans:
    """What :func:`read_spans` found: named tracks and their spans in ns; the launch
    slices (category :data:`launches.LAUNCH_CATEGORY`) apart from the spans."""

    def __init__(self) -> None:
        self.processes: dict[int, str] = {}  # process track uuid -> name
        self.process_pids: dict[int, int] = {}  # process track uuid -> its descriptor's pid
        self.threads: dict[int, tuple[int | None, str]] = {}  # track uuid -> (parent uuid, name)
        self.spans: list[tuple[int, str, int, int]] = []  # (track uuid, name, start ns, end ns)
        self.launches: list[tuple[int, str, int, int]] = []  # the launch slices, as the spans
        self.instants: list[tuple[int, str, int]] = []  # (track uuid, name, ns)
        self.metadata: dict[str, Any] = {}
        self.unclosed = 0

    def track_name(self, uuid: int) -> str:
        parent, name = self.threads.get(uuid, (None, f"track {uuid}"))
        process = self.processes.get(parent, f"process {parent}") if parent is not None else "?"
        return f"{process} / {name}"


def read_spans(path: Path) -> PerfettoSpans:
    """Raises ProfilingInputError (``path: message``) for a file that is not a readable trace."""
    try:
        # Regular, within the trace bound, gunzipped within it too (runtime/regular.py).
        data = read_maybe_gzip(path, "trace")
    except FileNotFoundError:
        raise ProfilingInputError(path, "no such file") from None
    except (OSError, EOFError, BadJSON) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ProfilingInputError(path, f"not a readable trace: {why}") from None
    try:
        return _read(data)
    except (_Malformed, KeyError, BadJSON) as exc:
        raise ProfilingInputError(path, f"not a readable Perfetto trace: {exc}") from None


def _read(data: bytes) -> PerfettoSpans:
    """One pass over the packets. Track events are most of them: their fields are read
    inline here (single-byte varints first); everything else goes through
    :func:`fields`."""
    found = PerfettoSpans()
    sequences: dict[int, _Sequence] = {}
    open_spans: dict[int, list[tuple[str, int, bool]]] = {}
    n = len(data)
    i = 0
    state = _Sequence()
    current_seq = -1
    while i < n:
        if data[i] != 0x0A:  # not Trace.packet (field 1, bytes): skip the field
            for _ in fields(data, i, _field_end(data, i)):
                pass
            i = _field_end(data, i)
            continue
        size = data[i + 1] if i + 1 < n else 0x80
        if size < 0x80:
            lo = i + 2
        else:
            size, lo = _varint(data, i + 1)
        hi = lo + size
        if hi > n:
            raise _Truncated("packet runs past the end of the file")
        i = hi
        timestamp: int | None = None
        clock_id = 0
        seq_id = 0
        flags = 0
        event_lo = event_hi = -1
        other: list[tuple[int, int, int]] | None = None
        j = lo
        while j < hi:  # the packet's fields
            key = data[j]
            if key >= 0x80:
                key, j = _varint(data, j)
            else:
                j += 1
            wire = key & 7
            if wire == 0:
                value = data[j] if j < hi else 0x80
                if value < 0x80:
                    j += 1
                elif j + 1 < hi and data[j + 1] < 0x80:
                    value = (value & 0x7F) | data[j + 1] << 7
                    j += 2
                else:
                    value, j = _varint(data, j)
                field = key >> 3
                if field == 8:
                    timestamp = value
                elif field == 10:
                    seq_id = value
                elif field == 13:
                    flags = value
                elif field == 58:
                    clock_id = value
                elif field in _PACKET[1]:  # a message sent as a number
                    raise _wrong_wire(_PACKET, field, wire)
            elif wire == 2:
                length = data[j] if j < hi else 0x80
                if length < 0x80:
                    j += 1
                else:
                    length, j = _varint(data, j)
                if key == 0x5A:  # track_event
                    event_lo, event_hi = j, j + length
                else:
                    if _PACKET[1].get(key >> 3, _LEN) != _LEN:  # a number sent as bytes
                        raise _wrong_wire(_PACKET, key >> 3, wire)
                    if other is None:
                        other = []
                    other.append((key >> 3, j, j + length))
                j += length
            elif wire == 1 or wire == 5:
                if key >> 3 in _PACKET[1]:
                    raise _wrong_wire(_PACKET, key >> 3, wire)
                j += 8 if wire == 1 else 4
            else:
                raise _Truncated(f"wire type {wire}")
        if j != hi:
            raise _Truncated("packet runs past its end")
        if flags & 1:
            sequences[seq_id] = _Sequence()
            current_seq = -1
        if seq_id != current_seq:
            found_state = sequences.get(seq_id)
            if found_state is None:
                found_state = sequences[seq_id] = _Sequence()
            state, current_seq = found_state, seq_id
        if other is not None:
            _packet_fields(data, other, state, found)
        if event_lo >= 0 and timestamp is not None:
            clock = clock_id or state.clock
            if 64 <= clock < 128 and state.base is not None:
                state.value = state.value + timestamp if state.incremental else timestamp
                ns = state.boot + (state.value - state.base) * state.unit
            else:
                ns = _signed(timestamp)
            _track_event(data, event_lo, event_hi, ns, state, found, open_spans)
    found.unclosed = sum(len(stack) for stack in open_spans.values())
    return found


def _field_end(data: bytes, i: int) -> int:
    """Where the top-level field at ``i`` ends (within the file, or _Truncated)."""
    key, j = _varint(data, i)
    wire = key & 7
    if wire == 0:
        return _varint(data, j)[1]
    if wire == 2:
        length, j = _varint(data, j)
        end = j + length
    elif wire in (1, 5):
        end = j + (8 if wire == 1 else 4)
    else:
        raise _Truncated(f"wire type {wire}")
    if end > len(data):
        raise _Truncated("field runs past the end of the file")
    return end


def _packet_fields(data: bytes, parts: list[tuple[int, int, int]], state: _Sequence,
                   found: PerfettoSpans) -> None:
    """The rarer parts of a packet: defaults, interned data, descriptors, clocks, attributes."""
    by_field = {field: (lo, hi) for field, lo, hi in parts}
    if 59 in by_field:  # TracePacketDefaults
        for field, value, end in fields(data, *by_field[59], _DEFAULTS):
            if field == 58:
                state.clock = value
            elif field == 11:
                for f, v, _ in fields(data, value, end, _EVENT_DEFAULTS):
                    if f == 11:
                        state.track = v
    if 12 in by_field:  # InternedData: event categories, event names, annotation names
        tables = {1: state.categories, 2: state.names, 3: state.annotation_names}
        for field, value, end in fields(data, *by_field[12], _INTERNED):
            if field in tables:
                iid, name = 0, ""
                for f, v, e in fields(data, value, end, _INTERNED_NAME):
                    if f == 1:
                        iid = v
                    elif f == 2:
                        name = _text(data, v, e)
                tables[field][iid] = name
    if 60 in by_field:
        _track_descriptor(data, *by_field[60], found)
    if 6 in by_field:  # ClockSnapshot: the sequence clock (ids 64-127) against BOOTTIME
        clocks = clock_snapshot(data, *by_field[6])
        mine = [c for c in clocks if 64 <= c < 128]
        if mine and 6 in clocks:
            stamp, unit, incremental = clocks[mine[0]]
            state.base = state.value = stamp
            state.unit, state.incremental = unit, incremental
            state.boot = _signed(clocks[6][0])
    if 126 in by_field:  # trace_attributes: {key "optrace", string value: JSON}
        for field, value, end in fields(data, *by_field[126], _ATTRIBUTES):
            if field == 1:
                key, text = "", ""
                for f, v, e in fields(data, value, end, _ATTRIBUTE):
                    if f == 1:
                        key = _text(data, v, e)
                    elif f == 3:
                        text = _text(data, v, e)
                if key == "optrace":
                    found.metadata = parse_json(text)  # strict: no NaN, no huge numbers



def clock_snapshot(data: bytes, lo: int, hi: int) -> dict[int, tuple[int, int, bool]]:
    """A ClockSnapshot's clocks (the message in data[lo:hi]): clock id -> (timestamp, unit
    multiplier in ns, incremental) — read once here for the reader and the merge."""
    clocks: dict[int, tuple[int, int, bool]] = {}
    for field, value, end in fields(data, lo, hi, _CLOCKS):
        if field == 1:
            cid, stamp, unit, incremental = 0, 0, 1, False
            for f, v, _ in fields(data, value, end, _CLOCK):
                if f == 1:
                    cid = v
                elif f == 2:
                    stamp = v
                elif f == 3:
                    incremental = bool(v)
                elif f == 4:
                    unit = v or 1
            clocks[cid] = (stamp, unit, incremental)
    return clocks


def _track_descriptor(data: bytes, lo: int, hi: int, found: PerfettoSpans) -> None:
    uuid, parent, name = 0, None, ""
    process: str | None = None
    pid: int | None = None
    thread: str | None = None
    for field, value, end in fields(data, lo, hi, _DESCRIPTOR):
        if field == 1:
            uuid = value
        elif field == 5:
            parent = value
        elif field == 2:
            name = _text(data, value, end)
        elif field == 3:
            process = name or ""
            for f, v, e in fields(data, value, end, _PROCESS):
                if f == 6:
                    process = _text(data, v, e)
                elif f == 1:
                    pid = _signed(v)  # int32, sign-extended on the wire
        elif field == 4:
            thread = ""
            for f, v, e in fields(data, value, end, _THREAD):
                if f == 5:
                    thread = _text(data, v, e)
    if process is not None:
        found.processes[uuid] = process or name
        if pid is not None:
            found.process_pids[uuid] = pid
    elif uuid:
        found.threads[uuid] = (parent, thread or name)


def _track_event(data: bytes, lo: int, hi: int, ns: int, state: _Sequence, found: PerfettoSpans,
                 open_spans: dict[int, list[tuple[str, int, bool]]]) -> None:
    kind, name_iid, track = 0, 0, state.track
    name = ""
    launch = False  # a launch slice: its category says so
    j = lo
    while j < hi:
        key = data[j]
        if key >= 0x80:
            key, j = _varint(data, j)
        else:
            j += 1
        wire = key & 7
        if wire == 0:
            # Bytes past `hi` belong to the next packet (or are past the file): a varint
            # that reaches them ends past `hi` and is refused below.
            value = data[j] if j < hi else 0x80
            if value < 0x80:
                j += 1
            elif j + 1 < hi and data[j + 1] < 0x80:
                value = (value & 0x7F) | data[j + 1] << 7
                j += 2
            else:
                value, j = _varint(data, j)
            if key == 0x48:
                kind = value
            elif key == 0x50:
                name_iid = value
            elif key == 0x58:
                track = value
            elif key == 0x18:  # category_iids
                launch = launch or state.categories.get(value) == LAUNCH_CATEGORY
            elif key in (0xB8, 0xB0):  # name (23) or categories (22) as a number
                raise _wrong_wire(_EVENT, key >> 3, wire)
        elif wire == 2:
            length = data[j] if j < hi else 0x80
            if length < 0x80:
                j += 1
            else:
                length, j = _varint(data, j)
            if j + length > hi:
                raise _Truncated("a track event's field runs past the event")
            if key >> 3 == 23:
                name = _text(data, j, j + length)
            elif key >> 3 == 22:
                launch = launch or _text(data, j, j + length) == LAUNCH_CATEGORY
            elif key == 0x1A:  # category_iids, packed
                k = j
                while k < j + length:
                    iid, k = _varint(data, k)
                    launch = launch or state.categories.get(iid) == LAUNCH_CATEGORY
                if k != j + length:
                    raise _Truncated("packed category ids run past their field")
            elif key >> 3 in _EVENT[1]:  # type, name_iid, track_uuid or a category iid as bytes
                raise _wrong_wire(_EVENT, key >> 3, wire)
            j += length
        elif wire in (1, 5):
            if key >> 3 in _EVENT[1]:
                raise _wrong_wire(_EVENT, key >> 3, wire)
            j += 8 if wire == 1 else 4
        else:
            raise _Truncated(f"wire type {wire}")
    if j != hi:
        raise _Truncated("track event runs past its end")
    if kind == 1:
        open_spans.setdefault(track, []).append((name or state.names.get(name_iid, f"name {name_iid}"), ns,
                                                 launch))
    elif kind == 2:
        stack = open_spans.get(track)
        if stack:
            label, start, is_launch = stack.pop()
            (found.launches if is_launch else found.spans).append((track, label, start, ns))
    elif kind == 3:
        found.instants.append((track, name or state.names.get(name_iid, f"name {name_iid}"), ns))
