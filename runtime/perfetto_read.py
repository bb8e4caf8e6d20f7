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

import itertools
import mmap
import sys
from bisect import bisect_left
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from .errors import ProfilingInputError
from .launches import LAUNCH_CATEGORY
from .regular import BadJSON, let_go, map_maybe_gzip, parse_json, read_maybe_gzip

_U64 = 1 << 64
#: TrackEvent.Type (perfetto.py writes them)
SLICE_BEGIN, SLICE_END = 1, 2


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
    n = len(data)
    while i < hi:
        # (a key, value or length of one byte read here: most are; _varint the others)
        if i < n and data[i] < 0x80:
            key = data[i]
            i += 1
        else:
            key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if schema is not None and schema[1].get(number, wire) != wire:
            raise _wrong_wire(schema, number, wire)
        if wire == 0:
            if i < n and data[i] < 0x80:
                value = data[i]
                i += 1
            else:
                value, i = _varint(data, i)
            yield number, value, i
        elif wire == 2:
            if i < n and data[i] < 0x80:
                size = data[i]
                i += 1
            else:
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
    __slots__ = ("annotation_names", "base", "boot", "categories", "clock", "incremental", "names",
                 "names_key", "shared", "table", "track", "unit", "value")

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
        # Interned name id -> the reader's name id (-1: not interned), built when first
        # needed and dropped when the names change (see _name_table).
        self.table: np.ndarray | None = None
        # The interned data all of `names` came from, when one packet's (then the table
        # of another sequence with the same data serves: collect interns per core).
        self.names_key: bytes | None = None
        # The three tables are another sequence's too (the same interned data began both):
        # copied before either adds to them.
        self.shared = False


#: Track events as columns: track (index of its uuid), type, ns, name (index), launch?
_EventColumns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class PerfettoSpans:
    """What :func:`read_spans` found: named tracks and their spans in ns; the launch
    slices (category :data:`launches.LAUNCH_CATEGORY`) apart from the spans.

    The spans are columns (a cluster's trace has tens of millions): ``span_track``
    indexes ``track_uuids``, ``span_name`` indexes ``names``; ``spans`` gives them as
    (track uuid, name, start ns, end ns) tuples, in the order their ends come."""

    def __init__(self) -> None:
        self.processes: dict[int, str] = {}  # process track uuid -> name
        self.process_pids: dict[int, int] = {}  # process track uuid -> its descriptor's pid
        self.threads: dict[int, tuple[int | None, str]] = {}  # track uuid -> (parent uuid, name)
        self.track_uuids: list[int] = []
        self.names: list[str] = []
        self.span_track = np.zeros(0, np.int64)
        self.span_name = np.zeros(0, np.int64)
        self.span_start = np.zeros(0, np.int64)
        self.span_end = np.zeros(0, np.int64)
        self.launches: list[tuple[int, str, int, int]] = []  # the launch slices: (uuid, name, start, end)
        self.instants: list[tuple[int, str, int]] = []  # (track uuid, name, ns)
        self.metadata: dict[str, Any] = {}
        self.unclosed = 0
        self._open: _EventColumns | None = None  # begins still open after the last chunk
        # The tracks of each run of events on one track, in file order, of the last chunk
        # paired (indices into track_uuids): what a reader a process at a time checks.
        self.track_runs = np.zeros(0, np.int64)
        # Uuids of processes (and their tracks) given out by a reader a process at a time:
        # a descriptor naming one again means the trace is not laid out a process at a time.
        self.frozen: set[int] = set()
        self.parent_uuids: dict[int, int] = {}  # a parent track's uuid, as one int object
        self._columns: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._interned: dict[bytes, _Interned] = {}  # see _packet_fields
        self._clocks: dict[bytes, dict[int, tuple[int, int, bool]]] = {}  # see _packet_fields

    @property
    def spans(self) -> list[tuple[int, str, int, int]]:
        uuids, names = self.track_uuids, self.names
        columns = (self.span_track.tolist(), self.span_name.tolist(), self.span_start.tolist(),
                   self.span_end.tolist())
        return [(uuids[t], names[k], a, b) for t, k, a, b in zip(*columns, strict=True)]

    def pair(self, events: _Events) -> None:
        """The chunk's SLICE_BEGIN / SLICE_END paired per track as a stack would (an end
        with nothing open is dropped, an end closes the innermost begin open on its
        track), the begins left open carried to the next chunk: they are the stacks.
        With a track's events in order, its open-slice depth is a walk clamped at 0 (its
        running sum less the sum's lowest point so far); a begin that raises the depth to
        d pairs with the next end on its track that lowers it from d."""
        chunks, events.chunks = events.chunks, []
        if chunks:
            fresh = np.concatenate([c[0] for c in chunks])  # this chunk's own events, in file order
            self.track_runs = fresh[np.flatnonzero(np.diff(fresh, prepend=-1))] if fresh.size else fresh
        else:
            self.track_runs = np.zeros(0, np.int64)
        if self._open is not None:
            chunks.insert(0, self._open)
            self._open = None
        if not chunks:
            return
        track, kind, ns, name, launch = (np.concatenate(column) for column in zip(*chunks, strict=True))
        for k in np.flatnonzero(kind == 3).tolist():
            self.instants.append((events.track_uuids[int(track[k])], events.names[int(name[k])], int(ns[k])))
        slices = np.flatnonzero(kind != 3)
        if slices.size == 0:
            return
        if slices.size == track.size and bool((track[1:] >= track[:-1]).all()):
            order = slices  # in order by track already (a launch per rank: each core's events in a row)
            t, kinds = track, kind
        else:
            order = slices[_stable_order(track[slices])]  # by track, in file order
            t, kinds = track[order], kind[order]
        is_begin = kinds == 1
        m = order.size
        found = _paired_as_nested(t, is_begin)
        if found is None:
            found = _paired(t, is_begin)
        b, e = found
        paired = np.zeros(m, bool)
        paired[b] = True
        left = _in_order(order[is_begin & ~paired], track.size)
        if left.size:
            self._open = (track[left], kind[left], ns[left], name[left], launch[left])
        b, e = order[b], order[e]
        by_end = _places_in_order(e, track.size)  # spans in the order their ends come
        b, e = b[by_end], e[by_end]
        spans = ~launch[b]
        self._columns.append((track[b[spans]].astype(np.int32), name[b[spans]].astype(np.int32),
                              ns[b[spans]], ns[e[spans]]))
        for k in np.flatnonzero(~spans).tolist():
            self.launches.append((events.track_uuids[int(track[b[k]])], events.names[int(name[b[k]])],
                                  int(ns[b[k]]), int(ns[e[k]])))

    def finish(self, events: _Events) -> None:
        self._interned = {}
        self._clocks = {}
        self.track_uuids, self.names = events.track_uuids, events.names
        self.unclosed = int(self._open[0].size) if self._open is not None else 0
        self._open = None
        if self._columns:
            # A column at a time, its pieces let go as it is joined: the spans once more
            # than their columns at the peak, not twice.
            pieces = [list(c) for c in zip(*self._columns, strict=True)]
            self._columns = []
            columns = []
            for k, column in enumerate(pieces):
                columns.append(np.concatenate(column))
                pieces[k] = []
                del column
            self.span_track, self.span_name, self.span_start, self.span_end = columns
        self._columns = []

    def track_name(self, uuid: int) -> str:
        parent, name = self.threads.get(uuid, (None, f"track {uuid}"))
        process = self.processes.get(parent, f"process {parent}") if parent is not None else "?"
        return f"{process} / {name}"


def _paired(t: np.ndarray, is_begin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The begins and ends (places in ``t``, the events' tracks in order by track) a stack
    per track pairs: see :meth:`PerfettoSpans.pair`."""
    m = t.size
    step = is_begin.astype(np.int64) * 2 - 1
    new_track = np.ones(m, bool)
    new_track[1:] = t[1:] != t[:-1]
    total = np.cumsum(step)
    first = np.maximum.accumulate(np.where(new_track, np.arange(m), 0))  # each track's first event
    running = total - (total - step)[first]  # the running sum within the track
    offset = (np.cumsum(new_track) - 1) * (2 * m + 2)  # keeps the tracks' minima apart
    lowest = np.minimum(np.minimum.accumulate(running - offset) + offset, 0)
    depth = running - lowest  # slices open after each event
    depth_before = np.where(new_track, 0, np.roll(depth, 1))
    level = np.where(is_begin, depth, depth_before)
    kept = np.flatnonzero(is_begin | (depth_before > 0))  # an end with nothing open is dropped
    levels = int(level.max()) + 1
    if int(t[-1]) < _I64 // (2 * levels):
        # by (track, level, place): one key, as the tracks are few and the levels too
        key = t[kept] * levels + level[kept]
        by_key = _stable_order(key)
        ranked, key = kept[by_key], key[by_key]
        same = key[:-1] == key[1:]
    else:
        ranked = kept[np.lexsort((kept, level[kept], t[kept]))]
        same = (t[ranked[:-1]] == t[ranked[1:]]) & (level[ranked[:-1]] == level[ranked[1:]])
    opens = is_begin[ranked]
    pair = opens[:-1] & ~opens[1:] & same
    return ranked[:-1][pair], ranked[1:][pair]


#: Nesting at most this deep is paired a level at a time (:func:`_paired_as_nested`).
_LEVELS_SCANNED = 16


def _paired_as_nested(t: np.ndarray, is_begin: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_paired`'s pairs where no track's events close more slices than they
    opened (no end with nothing open: collect's traces) and the nesting is shallow, in
    fewer passes: a track's open-slice depth is then its running sum, unclamped, and the
    events of one level, in order, are its begins and ends in turn — a begin pairs with
    the next event of its level when that is an end on its track. None otherwise."""
    m = t.size
    heads = np.flatnonzero(t[1:] != t[:-1]) + 1
    total = np.cumsum(is_begin, dtype=np.int64) * 2 - np.arange(1, m + 1)  # begins less ends so far
    before = np.concatenate([[0], total[heads - 1]])  # the sum before each track's first event
    running = total - np.repeat(before, np.diff(np.concatenate([[0], heads, [m]])))
    if m and int(running.min()) < 0:
        return None  # an end with nothing open: clamped by _paired
    level = running + ~is_begin  # a begin opens its level, an end closes the one above
    levels = int(level.max()) + 1 if m else 1
    if levels > _LEVELS_SCANNED:
        return None
    begins, ends = [], []
    for depth in range(1, levels):
        mine = np.flatnonzero(level == depth)
        opens = is_begin[mine]
        pair = opens[:-1] & ~opens[1:] & (t[mine[:-1]] == t[mine[1:]])
        begins.append(mine[:-1][pair])
        ends.append(mine[1:][pair])
    if not begins:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(begins), np.concatenate(ends)


def _stable_order(key: np.ndarray) -> np.ndarray:
    """np.argsort(key, kind="stable") of non-negative keys: in 16 bits where they fit
    (numpy sorts those by radix, several times faster)."""
    if key.size and int(key.max()) < 1 << 16:
        return np.argsort(key.astype(np.uint16), kind="stable")
    return np.argsort(key, kind="stable")


def _in_order(places: np.ndarray, size: int) -> np.ndarray:
    """np.sort of distinct places in range(size), by marking them (no sort)."""
    marked = np.zeros(size, bool)
    marked[places] = True
    return np.flatnonzero(marked)


def _places_in_order(places: np.ndarray, size: int) -> np.ndarray:
    """np.argsort of distinct places in range(size), by scattering them (no sort)."""
    slot = np.full(size, -1, np.int64)
    slot[places] = np.arange(places.size)
    return slot[slot >= 0]


def read_spans(path: Path, progress: Callable[[int, int], None] | None = None) -> PerfettoSpans:
    """Raises ProfilingInputError (``path: message``) for a file that is not a readable
    trace. ``progress(bytes read, bytes in all)`` is called as the packets go by."""
    # Regular, within the trace bound, gunzipped within it too (runtime/regular.py).
    data = _trace_bytes(path, read_maybe_gzip)
    try:
        found, events = _read(data, progress)
    except (_Malformed, KeyError, BadJSON) as exc:
        raise ProfilingInputError(path, f"not a readable Perfetto trace: {exc}") from None
    del data  # the file's bytes gone before the spans' columns are joined: a lower peak
    found.finish(events)
    return found


def _trace_bytes(path: Path, read: Callable[[Path, str], _T]) -> _T:
    """``read(path, "trace")``, its failures as ProfilingInputError naming the path."""
    try:
        return read(path, "trace")
    except FileNotFoundError:
        raise ProfilingInputError(path, "no such file") from None
    except (OSError, EOFError, BadJSON) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ProfilingInputError(path, f"not a readable trace: {why}") from None


_T = TypeVar("_T")


class Regroup(Exception):
    """A trace that cannot be read a process at a time after all (one process's events
    after another's began, a track of no known process, a process described after it was
    read): read it whole instead."""


#: The state of a sequence let go (:class:`_Sequences`).
_LET_GO = _Sequence()


class _Sequences(dict[int, _Sequence]):
    """The packet sequences' states of a read a process at a time, those of processes
    given out let go (tens of thousands of cores, a sequence each: the reader's state
    would otherwise grow with the cluster). A sequence let go that packets name again is
    not collect's layout: Regroup, and the whole read keeps every state."""

    def get(self, key: int, default: _Sequence | None = None) -> _Sequence | None:  # type: ignore[override]
        found = super().get(key, default)
        if found is _LET_GO:
            raise Regroup(f"packet sequence {key} continues after its process was read")
        return found

    def __setitem__(self, key: int, value: _Sequence) -> None:
        if super().get(key) is _LET_GO:
            raise Regroup(f"packet sequence {key} continues after its process was read")
        super().__setitem__(key, value)

    def retire(self, tracks: set[int]) -> None:
        """Let go the sequences whose events go on one of ``tracks`` by default (each
        key kept, its state one shared marker)."""
        for key, state in self.items():
            if state is not _LET_GO and state.track in tracks:
                super().__setitem__(key, _LET_GO)


def read_processes(path: Path, progress: Callable[[int, int], None] | None = None,
                   ) -> tuple[PerfettoSpans, Iterator[PerfettoSpans]]:
    """The spans of a trace one process (a rank) at a time, in the order their first
    spans come, each a :class:`PerfettoSpans` of its own spans, launch slices and
    instants (track and name indices into the shared ``track_uuids`` and ``names``).

    ``collect`` writes a rank's packets together, so a process is whole once the file is
    read past it: once a later process's events began, none of its slices is still open
    and its descriptor has named it. The file is mapped, not read into memory, and the
    bytes behind the read let go as it goes (:func:`regular.map_maybe_gzip`): memory is a
    rank's spans, whatever the trace's size. The first returned is the whole trace's,
    complete (metadata, unclosed begins) once the processes are. Raises
    :class:`Regroup` from the iterator where a process's events come back after
    another's, or a descriptor names a process given out; ProfilingInputError as
    :func:`read_spans` does."""
    data = _trace_bytes(path, map_maybe_gzip)
    found = PerfettoSpans()
    events = _Events()
    return found, _processes(path, data, found, events, progress)


#: Tracks of processes given out whose sequences and thread names are let go together.
_RETIRED_AT_ONCE = 2048


def _processes(path: Path, data: bytes | mmap.mmap, found: PerfettoSpans, events: _Events,
               progress: Callable[[int, int], None] | None) -> Iterator[PerfettoSpans]:
    process_of: list[int] = []  # per track index: its process's uuid
    uuids: list[int] = []  # processes' uuids (any 64-bit value), by a small index ...
    index_of: dict[int, int] = {}
    process_column = np.zeros(0, np.int64)  # ... which this column holds per track index
    order: list[int] = []  # processes in the order they first come
    pending: dict[int, _Pending] = {}
    done: set[int] = set()

    def process(track: int) -> int:
        while len(process_of) <= track:
            parent = found.threads.get(events.track_uuids[len(process_of)], (None, ""))[0]
            if parent is None:
                raise Regroup(f"track {events.track_uuids[len(process_of)]} of no process")
            process_of.append(parent)
        return process_of[track]

    ended: set[int] = set()  # processes whose events another's followed
    last: list[int] = []  # the process of the last event read

    def runs() -> None:
        """The chunk's events, process by process in file order: a process whose events
        come back after another's is not collect's layout."""
        for t in found.track_runs.tolist():
            key = process(t)
            if last and key == last[0]:
                continue
            if key in ended or key in done:
                raise Regroup(f"process {found.processes.get(key, key)} continues after another's events")
            if last:
                ended.add(last[0])
            last[:] = [key]
            order.append(key)

    def into(key: int) -> _Pending:
        if key in done:
            raise Regroup(f"process {found.processes.get(key, key)} continues after another's spans")
        held = pending.get(key)
        if held is None:
            held = pending[key] = _Pending()
        return held

    def take() -> None:
        nonlocal process_column
        columns, found._columns = found._columns, []
        for track, name, start, end in columns:
            if not track.size:
                continue
            top = int(track.max())
            if top >= process_column.size:
                process(top)
                more = [index_of.setdefault(uuid, len(index_of)) for uuid in process_of[process_column.size:]]
                uuids[len(uuids):] = list(index_of)[len(uuids):]
                process_column = np.concatenate([process_column, np.array(more, np.int64)])
            keys = process_column[track]
            changes = np.flatnonzero(np.diff(keys)) + 1
            bounds = [0, *changes.tolist(), int(keys.size)]
            for lo, hi in itertools.pairwise(bounds):
                held = into(uuids[int(keys[lo])])
                held.columns.append((track[lo:hi], name[lo:hi], start[lo:hi], end[lo:hi]))
        launches, found.launches = found.launches, []
        instants, found.instants = found.instants, []
        if launches or instants:
            tracks = events.track_ids  # track uuid -> index
            for launch in launches:
                into(process(tracks[launch[0]])).launches.append(launch)
            for instant in instants:
                into(process(tracks[instant[0]])).instants.append(instant)

    sequences = _Sequences()
    retiring: set[int] = set()  # tracks of the processes given out, their state not let go yet

    def part(key: int) -> PerfettoSpans:
        if len(retiring) >= _RETIRED_AT_ONCE:  # (the parts given out so far have been read)
            sequences.retire(retiring)
            for uuid in retiring:
                found.threads.pop(uuid, None)
            retiring.clear()
        held = pending.pop(key, None) or _Pending()
        done.add(key)
        found.frozen.add(key)
        tracks: set[int] = set()
        for columns in held.columns:  # (not np.unique: it imports numpy.ma, ~14 ms of a start)
            used = np.flatnonzero(np.bincount(columns[0])).tolist()
            tracks.update(events.track_uuids[t] for t in used)
        tracks.update(launch[0] for launch in held.launches)
        tracks.update(instant[0] for instant in held.instants)
        found.frozen.update(tracks)
        retiring.update(tracks)
        out = PerfettoSpans()
        out.processes, out.process_pids, out.threads = found.processes, found.process_pids, found.threads
        out.track_uuids, out.names = events.track_uuids, events.names
        if held.columns:
            out.span_track, out.span_name, out.span_start, out.span_end = (
                np.concatenate(c) for c in zip(*held.columns, strict=True))
        out.launches, out.instants = held.launches, held.instants
        return out

    dropped = 0
    try:
        # A map reads as bytes do (an int per index, bytes per slice) where the reader looks.
        for offset in _steps(cast(bytes, data), found, events, progress, sequences):
            runs()
            take()
            dropped = let_go(data, dropped, offset)
            current = set(last)
            if found._open is not None:
                current.update(process(t) for t in np.flatnonzero(np.bincount(found._open[0])).tolist())
            if current & done:
                raise Regroup("a process's slices continue after another's spans")
            # Given out in file order, once the read is past it and its name is known (a
            # process descriptor after the spans names them at the end).
            while order and order[0] not in current and order[0] in found.processes:
                key = order.pop(0)
                if key in pending:
                    yield part(key)
                else:
                    done.add(key)
                    found.frozen.add(key)
        found.finish(events)
        for key in order:
            if key in pending:
                yield part(key)
    except (_Malformed, KeyError, BadJSON) as exc:
        raise ProfilingInputError(path, f"not a readable Perfetto trace: {exc}") from None


class _Pending:
    """A process's spans, launch slices and instants read so far."""

    __slots__ = ("columns", "instants", "launches")

    def __init__(self) -> None:
        self.columns: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.launches: list[tuple[int, str, int, int]] = []
        self.instants: list[tuple[int, str, int]] = []



class _Events:
    """Every track event's (track, type, ns, name, launch?) in file order, as chunks of
    columns: the batches decoded with numpy and the events read one at a time between
    them."""

    def __init__(self) -> None:
        self.chunks: list[_EventColumns] = []
        self.one: list[tuple[int, int, int, int, bool]] = []
        self.track_ids: dict[int, int] = {}
        self.track_uuids: list[int] = []
        self.name_ids: dict[str, int] = {}
        self.names: list[str] = []
        self.tables: dict[bytes, np.ndarray] = {}  # name tables by interned data (_name_table)

    def track(self, uuid: int) -> int:
        found = self.track_ids.get(uuid)
        if found is None:
            found = self.track_ids[uuid] = len(self.track_uuids)
            self.track_uuids.append(uuid)
        return found

    def name(self, text: str) -> int:
        found = self.name_ids.get(text)
        if found is None:
            found = self.name_ids[text] = len(self.names)
            self.names.append(text)
        return found

    def add_one(self, uuid: int, kind: int, ns: int, name: str, launch: bool) -> None:
        # A time past int64 is refused downstream anyway (PERFETTO_NS_MAX): kept past it.
        ns = max(-_I64, min(_I64, ns))
        self.one.append((self.track(uuid), kind, ns, self.name(name) if kind != 2 else -1, launch))

    def flush_one(self) -> None:
        if self.one:
            track, kind, ns, name, launch = zip(*self.one, strict=True)
            self.chunks.append((np.array(track, np.int64), np.array(kind, np.int8), np.array(ns, np.int64),
                                np.array(name, np.int64), np.array(launch, bool)))
            self.one = []


_I64 = (1 << 63) - 1


def _read(data: bytes, progress: Callable[[int, int], None] | None = None) -> tuple[PerfettoSpans, _Events]:
    """:func:`_steps` to the end of the file."""
    found = PerfettoSpans()
    events = _Events()
    for _ in _steps(data, found, events, progress):
        pass
    return found, events


def _steps(data: bytes, found: PerfettoSpans, events: _Events,
           progress: Callable[[int, int], None] | None = None,
           sequences: dict[int, _Sequence] | None = None) -> Iterator[int]:
    """One pass over the packets, a chunk at a time. A short loop finds the packets and
    notes the short ones (``0x0A len<128``), which may be track events of ``collect``'s
    layout; a chunk of them is decoded as columns (:func:`_chunk`), every
    other packet read field by field in its place, and the chunk's slices paired (open
    ones carried to the next chunk): memory is a chunk's columns and the spans.

    A long run of short packets (a core's events: a thousand or more in a row) is found
    by :func:`_short_run` with numpy instead, from the same bytes to the same packets:
    stepping through them here was most of the reader's time.

    Yields, after each chunk, the offset the file is read to: nothing before it is read
    again (a reader a rank at a time takes the chunk's spans and lets those bytes go;
    ``sequences``, the packet sequences' states: its own, which it may retire)."""
    if sequences is None:
        sequences = {}
    n = len(data)
    buffer = np.frombuffer(data, dtype=np.uint8)
    i = 0
    runs: list[np.ndarray] = []  # the candidates in file order: runs found as columns ...
    candidates: list[int] = []  # ... and those stepped to since the last run
    count = 0  # candidates in the chunk
    others: list[int] = []  # starts of the other packets, in order
    # Packets stepped through before a run is looked for as columns: fewer right after a
    # long run (the next core's events follow its few descriptor packets).
    quota = _STEPPED
    seen = _Window()  # the stretch of the file _short_run looked at last
    while i < n:
        try:  # a run of short packets, [0x0A len<128] ...: event packets, most likely
            stepped = 0
            while True:
                if data[i] != 0x0A:
                    break
                size = data[i + 1]
                if size >= 0x80:
                    break
                candidates.append(i)
                i += 2 + size
                stepped += 1
                if stepped >= quota:  # a long run: its rest as columns
                    stepped = 0
                    run, i = _short_run(buffer, i, seen)
                    quota = _STEPPED_AFTER_LONG if run.size >= _LONG_RUN else _STEPPED
                    if run.size:
                        count += len(candidates) + run.size
                        runs += [np.array(candidates, np.int64), run]
                        candidates = []
        except IndexError:  # at (or past) the end of the file
            pass
        if i > n:
            raise _Truncated("packet runs past the end of the file")
        if i < n:
            if data[i] != 0x0A:  # not Trace.packet (field 1, bytes): skip the field
                end = _field_end(data, i)
                for _ in fields(data, i, end):
                    pass
                i = end
            else:
                others.append(i)
                size = data[i + 1] if i + 1 < n else 0x80
                i = i + 2 + size if size < 0x80 else sum(_varint(data, i + 1))
        if count + len(candidates) >= _CHUNK or i >= n:
            starts = np.concatenate([*runs, np.array(candidates, np.int64)])
            _chunk(data, buffer, starts, others, sequences, found, events)
            runs, candidates, others, count = [], [], [], 0
            if progress is not None:
                progress(min(i, n), n)
            yield min(i, n)


#: Short packets stepped through one by one before the rest of their run is found as
#: columns: a call of :func:`_short_run` costs about as much as stepping through a
#: hundred, so a short run (another producer's, one between two long packets) is not
#: charged for it.
_STEPPED = 64
#: ... and after a run of this many or more (a core's events), this many.
_LONG_RUN, _STEPPED_AFTER_LONG = 256, 2
#: Bytes :func:`_short_run` looks at first, growing 4x a stretch up to the last (a core's
#: events of a launch are ~16 KB in collect's traces: a stretch of 1 MB holds dozens of
#: cores' runs, each found in it without looking at its bytes again).
_WINDOW_FIRST, _WINDOW_LAST = 1 << 14, 1 << 20


class _Window:
    """The candidates :func:`_short_run` found in one stretch of the file, ``[lo, hi)``:
    their places, where each one's packet would end, and where a chain of them breaks —
    kept for the runs that start in it (a stretch holds the runs of dozens of cores, a few
    descriptor packets apart), and the size of the next stretch looked at."""

    __slots__ = ("after", "at", "breaks", "hi", "lo", "size")

    def __init__(self) -> None:
        self.lo = self.hi = 0
        self.at = self.after = np.zeros(0, np.int64)
        self.breaks: list[int] = []
        self.size = _WINDOW_FIRST

    def look(self, buffer: np.ndarray, i: int) -> None:
        """The stretch from ``i`` on: every byte that could start an event packet (``0x0A
        len<128 0x40``), where its packet would end, and where the next candidate is not
        that end (a stray ``0A xx 40`` inside a packet, or a packet of another form)."""
        stop = min(buffer.size - 2, i + self.size)  # starts looked at: i .. stop - 1
        width = stop - i
        seg = buffer[i : stop + 2]
        at = np.flatnonzero(seg[:width] == 0x0A)  # then the next two bytes of those only
        at = at[(seg[at + 1] < 0x80) & (seg[at + 2] == 0x40)]
        self.after = at + 2 + seg[at + 1] + i
        self.at = at + i
        self.breaks = np.flatnonzero(self.after[:-1] != self.at[1:]).tolist()
        self.breaks.append(at.size - 1)
        self.lo, self.hi = i, stop
        self.size = min(4 * self.size, _WINDOW_LAST)


def _short_run(buffer: np.ndarray, i: int, seen: _Window) -> tuple[np.ndarray, int]:
    """The run of short packets ``0x0A len<128 0x40`` (a Trace.packet whose first field
    is a timestamp: collect's event packets) from ``i`` on, as the loop in :func:`_read`
    steps through them, and where the run stops: the start of the first packet not of
    that form (or past the end of the file: the caller refuses it).

    In a stretch of the file (``seen``, looked at again from ``i`` when ``i`` is past it),
    every byte that could start such a packet is a candidate and knows where its packet
    would end; where each candidate's end is the next candidate (no stray ``0A xx 40``
    inside a packet) the run is those candidates as they are, and the chain is followed
    by hand only across the others: a few jumps a stretch."""
    n = buffer.size
    pieces: list[np.ndarray] = []
    while i + 2 < n and buffer[i] == 0x0A and buffer[i + 1] < 0x80 and buffer[i + 2] == 0x40:
        if not seen.lo <= i < seen.hi:
            seen.look(buffer, i)
        at, after, breaks = seen.at, seen.after, seen.breaks
        k = int(np.searchsorted(at, i))  # i is a candidate of the stretch: at[k] == i
        while True:
            last = breaks[bisect_left(breaks, k)]  # the chain is at[k .. last]
            pieces.append(at[k : last + 1])
            step = int(after[last])
            if last == at.size - 1 or step >= seen.hi:
                break  # on past the stretch
            k = int(np.searchsorted(at, step))
            if k == at.size or int(at[k]) != step:
                return np.concatenate(pieces), step  # the run stops inside the stretch
        i = step
    return (np.concatenate(pieces) if pieces else np.zeros(0, np.int64)), i


#: Candidate event packets decoded as columns at once: a chunk's few dozen temporary
#: columns stay around a MB each (1 << 19 made them 4 MB: a third more peak memory, and
#: twice the system time, in page faults, of a reader at 8 ranks; no less user time).
_CHUNK = 1 << 17


def _packet(data: bytes, i: int, sequences: dict[int, _Sequence], current_seq: int, state: _Sequence,
            found: PerfettoSpans, events: _Events) -> tuple[int, _Sequence]:
    """One packet at ``i``, field by field: the sequence it was on, and its state."""
    n = len(data)
    size = data[i + 1] if i + 1 < n else 0x80
    if size < 0x80:
        lo = i + 2
    else:
        size, lo = _varint(data, i + 1)
    hi = lo + size
    if hi > n:
        raise _Truncated("packet runs past the end of the file")
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
        _track_event(data, event_lo, event_hi, ns, state, found, events)
    return current_seq, state


def _varints(read: _Reader, at: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The varints starting at ``at`` (each before its ``hi``): values, where each ends,
    and whether it ended in bounds within 10 bytes. Byte k is read for every varint while
    most are still going after k bytes (a sequence id of three bytes: a cluster trace's
    every event), then only for those still going (most end after one or two)."""
    first = read(at)
    value = (first & 0x7F).astype(np.uint64)
    done = (first < 0x80) & (at < hi)
    end = at + 1
    still = (first >= 0x80) & (at + 1 < hi)
    dense = 1  # bytes read for every varint so far
    while dense < 10 and 2 * int(np.count_nonzero(still)) > at.size:
        k = dense
        where = at + k
        byte = read(where)
        value |= ((byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)) * still
        ended = still & (byte < 0x80)
        end = np.where(ended, where + 1, end)
        done |= ended
        still &= (byte >= 0x80) & (where + 1 < hi)
        dense += 1
    going = np.flatnonzero(still)
    for k in range(dense, 10):
        if going.size == 0:
            break
        where = at[going] + k
        byte = read(where)
        value[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        ended = byte < 0x80
        end[going[ended]] = where[ended] + 1
        done[going[ended]] = True
        more = ~ended & (where + 1 < hi[going])
        going = going[more]
    return value, end, done


_Reader = Callable[[np.ndarray], np.ndarray]


def _byte(buffer: np.ndarray, at: np.ndarray) -> np.ndarray:
    """buffer[at], 0xFF (no field key the fast layout accepts) past the end."""
    last = buffer.size - 1
    if at.size and int(at.max()) <= last:
        return np.asarray(buffer[at])
    return np.where(at <= last, buffer[np.minimum(at, last)], 0xFF)


#: Bytes past a packet's start that :func:`_parse_events` may read: the packet (up to
#: 129) and, for a packet not of collect's layout, a few varints and annotation lengths
#: past its end (at most 4 x 131 and 10 more).
_REACH = 1024


def _chunk(data: bytes, buffer: np.ndarray, starts: np.ndarray, others: list[int],
           sequences: dict[int, _Sequence], found: PerfettoSpans, events: _Events) -> None:
    """Packets in file order: ``starts``, the candidates (each ``0x0A len<128``), those of
    ``collect``'s layout decoded as columns, and the rest — ``others`` and candidates of
    any other layout — read one by one in their place; then the chunk's slices paired.

    The runs of column packets between the others (a core's events, mostly) are gone
    through in order, as the others are read, for what they take from their sequence —
    its clock, track and names, as they stand then — and moved its clock on; their
    columns are then computed for the whole chunk at once (:class:`_Runs`), the events
    read one by one set in their places among them."""
    stamp, seq, begin, name, fast = _parse_events(buffer, starts)
    odd = np.flatnonzero(~fast)
    # Where the fast runs stop: before an other packet (its place among the candidates),
    # or at an odd candidate (skipped over); in file order.
    places = np.searchsorted(starts, np.array(others, dtype=np.int64)).tolist()
    stops = sorted([*zip(others, places, [False] * len(others), strict=True),
                    *((int(starts[k]), k, True) for k in odd.tolist())])
    stops.append((-1, starts.size, False))
    runs = _Runs(stamp, seq, begin, name, stops)
    state = _Sequence()
    lo = 0
    for start, k, is_candidate in stops:
        if k > lo:
            runs.take(lo, k, sequences, events)
        if start >= 0:
            before = len(events.one)
            _, state = _packet(data, start, sequences, -1, state, found, events)
            runs.ones(len(events.one) - before)
        lo = k + 1 if is_candidate else k
    runs.finish(events)
    found.pair(events)


class _Runs:
    """A chunk's runs of column packets (``[lo, k)`` of its candidates), each read on one
    sequence's state as it stands at the run's place in the file: per run a few numbers
    (its track, the clock's offset, unit and origin, its name table), the columns of all
    of them at the end, in one go; a run that does not fit (several sequences, a clock
    past int64, names past a table) computed on its own, as before."""

    def __init__(self, stamp: np.ndarray, seq: np.ndarray, begin: np.ndarray, name: np.ndarray,
                 stops: list[tuple[int, int, bool]]) -> None:
        self.stamp, self.seq, self.begin, self.name = stamp, seq, begin, name
        # Each run's sum, lowest and highest timestamp and whether it is on one sequence,
        # reduced over all runs at once (the runs are known from the stops).
        bounds: list[int] = []
        lo = 0
        for _, k, is_candidate in stops:
            if k > lo:
                bounds += (lo, k)
            lo = k + 1 if is_candidate else k
        self.sums: dict[int, tuple[int, int, int, bool]] = {}
        if bounds:
            at = np.array(bounds, np.int64)
            lows, highs = at[0::2], at[1::2]
            padded = np.append(stamp, np.zeros(1, stamp.dtype))
            # the sums in uint64, as the ticks are: only trusted below where they cannot wrap
            total = np.add.reduceat(padded, at)[0::2]
            top = np.maximum.reduceat(padded, at)[0::2]
            low = np.minimum.reduceat(padded, at)[0::2]
            # on one sequence: no place inside the run where it differs from the one before
            changes = np.flatnonzero(seq[1:] != seq[:-1]) + 1
            one = np.ones(lows.size, bool)
            if changes.size:
                after = np.searchsorted(changes, lows, side="right")  # the first change past lo
                one = (after == changes.size) | (changes[np.minimum(after, changes.size - 1)] >= highs)
            columns = (total.tolist(), top.tolist(), low.tolist(), one.tolist())
            self.sums = dict(zip(lows.tolist(), zip(*columns, strict=True), strict=True))
        # per run taken: candidates [lo, k), track id, clock (0 raw, 1 incremental from
        # `offset`, 2 absolute less `offset`), unit, origin (ns), its name table
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.track: list[int] = []
        self.clock: list[int] = []
        self.offset: list[int] = []
        self.unit: list[int] = []
        self.origin: list[int] = []
        self.tables: list[np.ndarray] = []
        self.own: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}  # run -> its columns
        self.taken = 0  # column events so far
        self.one_at: list[int] = []  # per event read one by one: column events before it

    def ones(self, count: int) -> None:
        self.one_at += [self.taken] * count

    def take(self, lo: int, k: int, sequences: dict[int, _Sequence], events: _Events) -> None:
        run = len(self.lo)
        self.lo.append(lo)
        self.hi.append(k)
        self.taken += k - lo
        total, top, low, one = self.sums[lo]
        state = sequences.get(int(self.seq[lo])) if one else None
        if one and state is None:
            state = sequences[int(self.seq[lo])] = _Sequence()
        table = _name_table(state, events) if state is not None else None
        # (the plan moves the sequence's clock on: made only for a run computed here)
        plan = _clock_plan(state, k - lo, total, top, low, int(self.stamp[k - 1])) \
            if state is not None and table is not None else None
        if state is None or table is None or plan is None:
            # several sequences, names past a table, or a clock only Python's integers hold
            self.own[run] = _event_columns(self.stamp[lo:k], self.seq[lo:k], self.begin[lo:k],
                                           self.name[lo:k], sequences, events)
            for column in (self.track, self.clock, self.offset, self.unit, self.origin):
                column.append(0)
            self.tables.append(_NO_TABLE)
            return
        clock, offset, unit, origin = plan
        self.track.append(events.track(state.track))
        self.clock.append(clock)
        self.offset.append(offset)
        self.unit.append(unit)
        self.origin.append(origin)
        self.tables.append(table)

    def finish(self, events: _Events) -> None:
        """The runs' columns, with the events read one by one set among them."""
        if not self.lo:
            events.flush_one()
            return
        lo = np.array(self.lo, np.int64)
        size = np.array(self.hi, np.int64) - lo
        m = int(size.sum())
        first = np.cumsum(size) - size  # each run's first place among the columns
        at = np.arange(m) + np.repeat(lo - first, size)  # each column event's candidate
        ticks = self.stamp[at]
        begin = self.begin[at]
        clock = np.array(self.clock, np.int8)
        ns = ticks.view(np.int64).copy()  # raw: the timestamp as a signed 64-bit number
        unit = np.array(self.unit, np.int64)
        origin = np.array(self.origin, np.int64)
        offset = np.array(self.offset, np.int64)
        if (clock == 1).all():  # every run's (collect's): no run to leave out
            step = ticks.view(np.int64)  # ticks under 2**40 there
            running = np.cumsum(step)
            before = running[first] - step[first]
            rel = running - np.repeat(before - offset, size)
            ns = rel * (int(unit[0]) if (unit == unit[0]).all() else np.repeat(unit, size))
            ns += np.repeat(origin, size)
        elif (clock == 1).any():  # within each run, the running sum of its ticks from its offset
            rising = np.repeat(clock == 1, size)
            step = np.where(rising, ticks.view(np.int64), 0)  # ticks under 2**40 there
            running = np.cumsum(step)
            before = running[first] - step[first]
            rel = running - np.repeat(before - offset, size)
            ns[rising] = (rel * np.repeat(unit, size) + np.repeat(origin, size))[rising]
        if (clock == 2).any():
            fixed = np.repeat(clock == 2, size)
            ns[fixed] = ((ticks.view(np.int64) - np.repeat(offset, size)) * np.repeat(unit, size)
                         + np.repeat(origin, size))[fixed]
        # names: each run's table, one after another (or the one table every run shares:
        # collect interns a rank's labels alike on all its cores)
        iid = self.name[at]
        name_id = np.full(m, -1, np.int64)
        shared = self.tables[0]
        if all(table is shared for table in self.tables):
            opens = np.flatnonzero(begin & (iid < np.uint64(shared.size)))
            name_id[opens] = shared[iid[opens].astype(np.int64)]
        else:
            lengths = np.array([t.size for t in self.tables], np.int64)
            joined = np.concatenate(self.tables)
            inside = iid < np.repeat(lengths, size).astype(np.uint64)
            opens = np.flatnonzero(begin & inside)
            start_of = np.repeat(np.cumsum(lengths) - lengths, size)
            name_id[opens] = joined[start_of[opens] + iid[opens].astype(np.int64)]
        computed = np.ones(lo.size, bool)  # a run computed on its own has its names
        computed[list(self.own)] = False
        unnamed = np.flatnonzero(begin & (name_id < 0) & np.repeat(computed, size))
        for k in unnamed.tolist():  # not interned on its sequence: named by its id
            name_id[k] = events.name(f"name {int(iid[k])}")
        track = np.repeat(np.array(self.track, np.int64), size)
        kind = np.subtract(2, begin, dtype=np.int8)  # 1 a begin, 2 an end
        for run, (r_track, r_kind, r_ns, r_name) in self.own.items():
            place = slice(int(first[run]), int(first[run] + size[run]))
            track[place], kind[place], ns[place], name_id[place] = r_track, r_kind, r_ns, r_name
        launch = np.zeros(m, bool)
        if self.one_at:
            ones = events.one
            events.one = []
            where = np.array(self.one_at, np.int64)
            o_track, o_kind, o_ns, o_name, o_launch = zip(*ones, strict=True)
            track = np.insert(track, where, np.array(o_track, np.int64))
            kind = np.insert(kind, where, np.array(o_kind, np.int8))
            ns = np.insert(ns, where, np.array(o_ns, np.int64))
            name_id = np.insert(name_id, where, np.array(o_name, np.int64))
            launch = np.insert(launch, where, np.array(o_launch, bool))
        events.flush_one()
        events.chunks.append((track, kind, ns, name_id, launch))


#: A run computed on its own has no table.
_NO_TABLE = np.zeros(0, np.int64)


def _name_table(state: _Sequence, events: _Events) -> np.ndarray | None:
    """The sequence's interned event names as the reader's name ids, by interned id (-1:
    none), or None when the ids are too large for a table."""
    if state.table is None:
        key = state.names_key
        table = events.tables.get(key) if key is not None else None
        if table is None:
            top = max(state.names, default=-1)
            if top >= 1 << 16 or min(state.names, default=0) < 0:
                return None
            table = np.full(top + 1, -1, np.int64)
            for iid in sorted(state.names):
                table[iid] = events.name(state.names[iid])
            if key is not None and len(events.tables) < _INTERNED_KEPT:
                events.tables[key] = table
        state.table = table
    return state.table


def _clock_plan(state: _Sequence, size: int, total: int, top: int, low: int,
                last: int) -> tuple[int, int, int, int] | None:
    """How a run of ``size`` events on ``state`` turns its timestamps into ns, as
    :func:`_times` does, with the run's sum, highest, lowest and last tick: (clock: 0 raw,
    1 incremental, 2 absolute; offset; unit; origin), the sequence's clock moved on; None
    where an intermediate could pass int64 (then :func:`_times`, in Python integers)."""
    if not (64 <= state.clock < 128 and state.base is not None):
        return 0, 0, 1, 0
    base, unit, boot = state.base, state.unit, state.boot
    if state.incremental:
        if top < 1 << 40 and size < 1 << 20:  # the sum (exact: under 2**60) stays in int64
            start = state.value - base
            if (abs(start) + total) * unit + abs(boot) < _SAFE:
                state.value += total
                return 1, start, unit, boot
        return None
    if top < _SAFE and max(abs(low - base), abs(top - base)) * unit + abs(boot) < _SAFE:
        state.value = last
        return 2, base, unit, boot
    return None


def _parse_events(buffer: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, ...]:
    """The fields of the packets at ``starts`` as ``collect`` lays event packets out:
    timestamps, sequence ids, whether a begin, name ids, and whether the packet is of
    that layout at all (a SLICE_BEGIN or a SLICE_END and nothing the reader uses else)."""
    # Packets whose reach is inside the file are read without a bounds check (a pass
    # over the indices each read, a good part of this function's time); the last few
    # of the file with one.
    inside = int(np.searchsorted(starts, buffer.size - _REACH))
    if inside == starts.size:
        return _parse_layout(buffer, buffer.__getitem__, starts)
    if inside == 0:
        return _parse_layout(buffer, lambda at: _byte(buffer, at), starts)
    head = _parse_layout(buffer, buffer.__getitem__, starts[:inside])
    tail = _parse_layout(buffer, lambda at: _byte(buffer, at), starts[inside:])
    return tuple(np.concatenate(pair) for pair in zip(head, tail, strict=True))


def _parse_layout(buffer: np.ndarray, read: _Reader, starts: np.ndarray) -> tuple[np.ndarray, ...]:
    """:func:`_parse_events` with ``read(at)``: buffer[at], 0xFF past the end."""
    hi = starts + 2 + buffer[starts + 1].astype(np.int64)
    stamp, at, ok = _varints(read, starts + 3, hi)
    ok &= (read(starts + 2) == 0x40) & (read(at) == 0x50)  # timestamp, sequence id
    seq, at, seq_ok = _varints(read, at + 1, hi)
    ok &= seq_ok & (read(at) == 0x5A) & (read(at + 1) < 0x80)  # track_event, short
    lo = at + 2
    ok &= lo + read(at + 1) == hi
    # SLICE_END: [0x48 02], nothing else
    end = ok & (hi - lo == 2) & (read(lo) == 0x48) & (read(lo + 1) == SLICE_END)
    # SLICE_BEGIN: [0x50 name_iid], source location and annotations, [0x48 01] last; read
    # for those that may be one only (about half the packets), a field's varint for those
    # that have that field
    maybe = np.flatnonzero(ok & ~end & (read(lo) == 0x50))
    last = hi[maybe]
    name_of, at, good = _varints(read, lo[maybe] + 1, last)
    for _ in range(4):  # source_location_iid (field 34, varint), debug_annotations (4, bytes)
        key, after_key = read(at), read(at + 1)
        source = good & (key == 0x90) & (after_key == 0x02)
        annotation = good & (key == 0x22) & (after_key < 0x80)
        if not (source.any() or annotation.any()):
            break
        at = np.where(annotation, at + 2 + after_key, at)
        sourced = np.flatnonzero(source)
        if sourced.size:
            _, at[sourced], source_ok = _varints(read, at[sourced] + 2, last[sourced])
            good[sourced] &= source_ok
    good &= (at + 2 == last) & (read(at) == 0x48) & (read(at + 1) == SLICE_BEGIN)
    begin = np.zeros(starts.size, bool)
    begin[maybe[good]] = True
    name = np.zeros(starts.size, np.uint64)  # (a name is read for a begin only)
    name[maybe] = name_of
    return stamp, seq, begin, name, begin | end


def _event_columns(stamp: np.ndarray, seq: np.ndarray, begin: np.ndarray, name: np.ndarray,
                   sequences: dict[int, _Sequence], events: _Events,
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Events of collect's layout (each on a sequence, no clock of its own, on the
    sequence's default track): their times from the sequence clocks, names from the
    sequences' interned names."""
    m = stamp.size
    one = int(seq[0]) == int(seq[-1]) and bool((seq == seq[0]).all())  # collect's runs: one sequence
    if one:
        state = sequences.get(int(seq[0]))
        if state is None:
            state = sequences[int(seq[0])] = _Sequence()
        ns = _times(stamp, state)
        track = np.full(m, events.track(state.track), np.int64)
        name_id = np.full(m, -1, np.int64)
        _name_ids(name, begin, state, events, name_id)
        return track, np.where(begin, 1, 2).astype(np.int8), ns, name_id
    ns = np.empty(m, np.int64)
    track = np.empty(m, np.int64)
    name_id = np.full(m, -1, np.int64)
    seqs = np.unique(seq)
    for sequence in seqs.tolist():
        rows = np.flatnonzero(seq == sequence)
        state = sequences.get(sequence)
        if state is None:
            state = sequences[sequence] = _Sequence()
        track[rows] = events.track(state.track)
        ns[rows] = _times(stamp[rows], state)
        opens = rows[begin[rows]]
        if opens.size:
            iids, where = np.unique(name[opens], return_inverse=True)
            ids = [events.name(state.names.get(iid, f"name {iid}")) for iid in iids.tolist()]
            name_id[opens] = np.array(ids, np.int64)[where]
    return track, np.where(begin, 1, 2).astype(np.int8), ns, name_id


def _name_ids(name: np.ndarray, begin: np.ndarray, state: _Sequence, events: _Events,
              out: np.ndarray) -> None:
    """``out`` at the begins: the events' name ids of their interned names (``name``)."""
    opens = np.flatnonzero(begin)
    if not opens.size:
        return
    iids = name[opens]
    top = int(iids.max())
    if top < 1 << 16:  # interned ids are small: a table of them, not a sort
        present = np.flatnonzero(np.bincount(iids.astype(np.int64), minlength=top + 1))
        table = np.zeros(top + 1, np.int64)
        table[present] = [events.name(state.names.get(iid, f"name {iid}")) for iid in present.tolist()]
        out[opens] = table[iids.astype(np.int64)]
        return
    unique, where = np.unique(iids, return_inverse=True)
    ids = [events.name(state.names.get(iid, f"name {iid}")) for iid in unique.tolist()]
    out[opens] = np.array(ids, np.int64)[where]


_SAFE = 1 << 62


def _times(ticks: np.ndarray, state: _Sequence) -> np.ndarray:
    """ns of a sequence's events (the packets' timestamps ``ticks``, in order), as the
    packet-by-packet reader reckons them; the sequence's clock value moved on. In int64
    where every intermediate fits, else in Python integers."""
    if not (64 <= state.clock < 128 and state.base is not None):
        return ticks.view(np.int64)  # the timestamp as a signed 64-bit number (_signed)
    base, unit, boot = state.base, state.unit, state.boot
    if state.incremental:
        if int(ticks.max()) < 1 << 40 and ticks.size < 1 << 20:  # the sum stays under 2**60
            rel = np.cumsum(ticks.astype(np.int64))
            start = state.value - base
            if (abs(start) + int(rel[-1])) * unit + abs(boot) < _SAFE:
                state.value += int(rel[-1])
                return (rel + start) * unit + boot
    elif int(ticks.max()) < _SAFE:
        low, high = int(ticks.min()), int(ticks.max())
        if max(abs(low - base), abs(high - base)) * unit + abs(boot) < _SAFE:
            state.value = int(ticks[-1])
            return (ticks.astype(np.int64) - base) * unit + boot
    out = []
    for tick in ticks.tolist():
        state.value = state.value + tick if state.incremental else tick
        out.append(max(-_I64, min(_I64, boot + (state.value - base) * unit)))
    return np.array(out, np.int64)


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
        lo, hi = by_field[12]
        # collect writes the same interned data on every core that uses the same points
        # (hundreds of cores a rank, a few KB each): read once, as the entries it sets.
        content = data[lo:hi] if hi - lo >= _INTERNED_CACHED else None
        cached = found._interned.get(content) if content is not None else None
        if cached is None:
            cached = _Interned(content, _interned(data, lo, hi))
            if content is not None and len(found._interned) < _INTERNED_KEPT:
                found._interned[content] = cached
        fresh = not state.names
        empty = fresh and not state.categories and not state.annotation_names
        state.table = None
        if empty and cached.tables is not None:
            # A sequence that begins with the interned data another began with (collect:
            # every core of every rank using the same points) shares that one's tables: a
            # cluster's trace has tens of thousands of sequences.
            state.categories, state.names, state.annotation_names = cached.tables
            state.shared = True
            state.names_key = cached.key
        else:
            if state.shared:  # copied before it adds to them
                state.categories, state.names = dict(state.categories), dict(state.names)
                state.annotation_names = dict(state.annotation_names)
                state.shared = False
            tables = (state.categories, state.names, state.annotation_names)
            for field, iid, name in cached.entries:
                tables[field - 1][iid] = name
            state.names_key = cached.key if fresh and content is not None else None
            if empty and cached.key is not None and found._interned.get(cached.key) is cached:
                cached.tables = tables
                state.shared = True
    if 60 in by_field:
        _track_descriptor(data, *by_field[60], found)
    if 6 in by_field:  # ClockSnapshot: the sequence clock (ids 64-127) against BOOTTIME
        # read once per content (collect writes the same snapshot on a rank's every core;
        # a few dozen bytes: a longer one is read each time, memory stays small)
        lo, hi = by_field[6]
        content = data[lo:hi] if hi - lo <= _INTERNED_CACHED else None
        clocks = found._clocks.get(content) if content is not None else None  # (only read below)
        if clocks is None:
            clocks = clock_snapshot(data, lo, hi)
            if content is not None and len(found._clocks) < _INTERNED_KEPT:
                found._clocks[content] = clocks
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



#: InternedData of this many bytes or more is read once per distinct content, for at
#: most this many contents (the rest read each time: memory stays a few MB).
_INTERNED_CACHED, _INTERNED_KEPT = 256, 64


class _Interned:
    """One InternedData's content as read: its bytes (the cache's key, one object for
    every sequence it began), its entries, and the tables of the first sequence it began
    (None until then), which later ones share."""

    __slots__ = ("entries", "key", "tables")

    def __init__(self, key: bytes | None, entries: list[tuple[int, int, str]]) -> None:
        self.key = key
        self.entries = entries
        self.tables: tuple[dict[int, str], dict[int, str], dict[int, str]] | None = None


def _interned(data: bytes, lo: int, hi: int) -> list[tuple[int, int, str]]:
    """(table: 1 categories, 2 event names, 3 annotation names; iid; name) of the
    InternedData in data[lo:hi], in order (a later entry of an iid replaces it)."""
    entries = []
    for field, value, end in fields(data, lo, hi, _INTERNED):
        if field in (1, 2, 3):
            iid, name = 0, ""
            for f, v, e in fields(data, value, end, _INTERNED_NAME):
                if f == 1:
                    iid = v
                elif f == 2:
                    name = _text(data, v, e)
            entries.append((field, iid, name))
    return entries


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
    if found.frozen and (uuid in found.frozen or parent in found.frozen):
        raise Regroup(f"track {uuid} described after its process was read")
    if process is not None:
        found.processes[uuid] = process or name
        if pid is not None:
            found.process_pids[uuid] = pid
    elif uuid:
        # A core's name is every rank's ("AIC 3"): one string for all of them; its
        # process's uuid one number for all its threads (the reader keeps it per track).
        if parent is not None:
            parent = found.parent_uuids.setdefault(parent, parent)
        found.threads[uuid] = (parent, sys.intern(thread or name or ""))


def _track_event(data: bytes, lo: int, hi: int, ns: int, state: _Sequence, found: PerfettoSpans,
                 events: _Events) -> None:
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
        events.add_one(track, 1, ns, name or state.names.get(name_iid, f"name {name_iid}"), launch)
    elif kind == 2:
        events.add_one(track, 2, ns, "", False)
    elif kind == 3:
        events.add_one(track, 3, ns, name or state.names.get(name_iid, f"name {name_iid}"), False)
