"""Streamed Chrome / Perfetto trace writer (``.json`` or ``.json.gz``).

One pid per rank ("Rank N", the rank's number), one tid per core (its slot: "AIC 3",
"AIV 17 (send)"), ``ph: "X"`` complete events, properly nested per track because
:mod:`decode` nests them. Each rank file is one launch: on every core it has, a
top-level ``launch K`` slice (category :data:`launches.LAUNCH_CATEGORY`, from the
launch's first span to its last end on any core) holds its spans; a rank's launches
follow each other on the same tracks (:mod:`launches`). The process and thread names
and sort indices come last, once per rank and core, from what was written (so a file
is formatted alone, whichever process writes it). Events are formatted and written rank
file by rank file, so memory is bounded by one file's spans, whatever the trace size.
The file appears atomically (temporary file in the same directory, then ``os.replace``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import IO, Any, cast

import numpy as np

from .atomic import atomic_output
from .decode import STATUS_CLOSED_BY_PARENT, STATUS_UNCLOSED, CoreTimeline, RankDecode
from .launches import LAUNCH_CATEGORY
from .pointmap import PointMap
from .records import Record

TRACE_FORMAT = "optrace-chrome"
#: 2: one process per rank, launches as ``launch K`` slices on its core threads (1: one
#: process per rank file, the launch of each pid in the metadata's rank table).
TRACE_FORMAT_VERSION = 2

CoreFilter = Callable[[str, int], bool]


def label_matcher(prefixes: list[str] | None) -> Callable[[str], bool]:
    """A label matches a filter entry when it equals it or lies below it in the hierarchy."""
    if not prefixes:
        return lambda _label: True
    wanted = [p.strip() for p in prefixes if p.strip()]
    return lambda label: any(label == p or label.startswith(p + " ") for p in wanted)

_ROWS_PER_BLOCK = 1 << 14  # bounds the row matrix of one write (~3 MB)
_SPACE, _MINUS, _ZERO = 32, 45, 48
_FLAG_TEXT = {STATUS_UNCLOSED: b'"unclosed":true,', STATUS_CLOSED_BY_PARENT: b'"closed_by_parent":true,'}


def _text_table(texts: list[str]) -> np.ndarray:
    """uint8 [len(texts), width]: ASCII texts right-padded with spaces.

    The padding always lands where JSON allows whitespace: after a head's '"ts":' (before
    the number) or after a tail's name (before the closing '}').
    """
    raw = [t.encode("ascii") for t in texts]
    width = max(len(r) for r in raw)
    table = np.full((len(raw), width), _SPACE, dtype=np.uint8)
    for i, r in enumerate(raw):
        table[i, : len(r)] = np.frombuffer(r, dtype=np.uint8)
    return table


# "0000".."9999" as ASCII: numbers are rendered four digits per division (divisions
# dominate the cost of formatting millions of numbers).
def _digit_table() -> np.ndarray:
    i = np.arange(10000)
    digits = np.stack([i // 1000, i // 100 % 10, i // 10 % 10, i % 10], axis=1)
    return (digits + _ZERO).astype(np.uint8)


_DIGITS4 = _digit_table()


def _words(table: np.ndarray) -> np.ndarray:
    """Rows of four ASCII bytes as one uint32 each (the bytes' own order, whatever the
    machine's endianness): a 4-byte store per number group instead of four 1-byte ones."""
    return np.ascontiguousarray(table, dtype=np.uint8).view(np.uint32)[:, 0]


_FULL4 = _words(_DIGITS4)  # "0042"
_LEAD4 = _words(np.where(  # "  42", "   0": the most significant group
    np.logical_or.accumulate(_DIGITS4 != _ZERO, axis=1) | (np.arange(4) == 3), _DIGITS4, _SPACE))
_FRAC4 = _words(np.concatenate([np.full((1000, 1), ord("."), np.uint8), _DIGITS4[:1000, 1:]], axis=1))
_BLANK4 = _words(np.full((1, 4), _SPACE, np.uint8))[0]


#: Timestamps in thousandths of a µs saturate here (about 146 years): corrupt cycle
#: counts can sit 2**63 cycles away, which no int64 holds once scaled.
_Q_LIMIT = float(2**62)


def _quantised(values: np.ndarray) -> np.ndarray:
    """Rounded to int64, saturating instead of overflowing (and NaN, from a clock so slow
    that the scale is infinite, as 0): a span the decoder flagged keeps a valid number."""
    # In place, a NaN looked for by one sum: np.nan_to_num copied the column and made
    # three passes for what is almost never there.
    rounded = np.rint(values)
    np.clip(rounded, -_Q_LIMIT, _Q_LIMIT, out=rounded)  # the infinities saturate too
    if np.isnan(rounded.sum()):  # (the sum of clipped numbers is finite)
        rounded[np.isnan(rounded)] = 0.0
    quantised: np.ndarray = rounded.astype(np.int64)
    return quantised


def render_int(values: np.ndarray, width: int | None = None) -> np.ndarray:
    """uint8 [n, width]: non-negative ints right-aligned in ASCII, leading spaces."""
    values = values.astype(np.int64)
    if width is None:
        width = len(str(int(values.max()))) if values.size else 1
    chunks = -(-width // 4)
    text = np.empty((values.size, 4 * chunks), dtype=np.uint8)
    rest = values
    for chunk in range(chunks - 1, -1, -1):
        rest, low = np.divmod(rest, 10000)
        text[:, 4 * chunk : 4 * chunk + 4] = _DIGITS4[low]
    text = text[:, 4 * chunks - width :]
    # Leading '0' (48) -> ' ' (32): everything before the first other digit, except
    # the last column (so 0 renders as "0").
    significant = np.logical_or.accumulate(text != _ZERO, axis=1)
    significant[:, -1] = True
    text -= (~significant).view(np.uint8) * np.uint8(_ZERO - _SPACE)
    return text


def render_fixed3(values: np.ndarray) -> np.ndarray:
    """uint8 [n, width]: ``values / 1000`` with exactly 3 decimals, right-aligned."""
    negative = values < 0
    magnitude = np.abs(values)
    whole, frac = np.divmod(magnitude, 1000)
    int_width = (len(str(int(whole.max()))) if whole.size else 1) + int(negative.any())
    text = np.empty((values.size, int_width + 4), dtype=np.uint8)
    text[:, :int_width] = render_int(whole, int_width)
    if negative.any():
        rows = np.flatnonzero(negative)
        first_digit = (text[rows, :int_width] != _SPACE).argmax(axis=1)
        text[rows, first_digit - 1] = _MINUS
    text[:, int_width] = ord(".")
    text[:, int_width + 1 :] = _DIGITS4[frac][:, 1:]
    return text


def _point_tails(point_map: PointMap) -> np.ndarray:
    """Per point of the map: the end of its event row, source and name included."""
    texts = [
        '"src":' + json.dumps(point_map.points[i].source) + '},"name":'
        + json.dumps(point_map.points[i].label)
        for i in point_map.ids.tolist()
    ] or [""]
    table = _text_table(texts)
    return np.concatenate([table, np.full((table.shape[0], 1), ord("}"), np.uint8)], axis=1)


def _rows(
    heads: np.ndarray, ts_q: np.ndarray, dur_q: np.ndarray, high: np.ndarray, show: np.ndarray,
    status: np.ndarray,
    tails: np.ndarray,
) -> np.ndarray:
    """uint8 [n, width]: fixed-width JSON rows (head, ts, dur, args, name, ",\\n").

    Padding is JSON whitespace (after a ':' or an '{', before a '}'), so every row parses
    as the plain object; the trace is valid JSON for any reader.
    """
    parts: list[np.ndarray | bytes] = [heads, render_fixed3(ts_q), b',"dur":', render_fixed3(dur_q),
                                       b',"args":{']
    if (status != 0).any():
        width = max(len(t) for t in _FLAG_TEXT.values())
        flags = np.full((status.size, width), _SPACE, dtype=np.uint8)
        for code, text in _FLAG_TEXT.items():
            rows = np.flatnonzero(status == code)
            flags[rows, : len(text)] = np.frombuffer(text, np.uint8)
        parts.append(flags)
    index_parts = 0
    if show.any():
        index_region: list[np.ndarray | bytes] = [
            b'"index":', render_int(high >> 8), b',"extraId":', render_int(high & 0xFF, 3), b","
        ]
        parts += index_region
        index_parts = len(index_region)
    parts += [tails, b",\n"]
    widths = [p.shape[1] if isinstance(p, np.ndarray) else len(p) for p in parts]
    out = np.empty((heads.shape[0], sum(widths)), dtype=np.uint8)
    offsets = np.concatenate([[0], np.cumsum(widths)])
    for part, lo, hi in zip(parts, offsets[:-1], offsets[1:], strict=True):
        out[:, lo:hi] = part if isinstance(part, np.ndarray) else np.frombuffer(part, np.uint8)
    if index_parts:  # rows without an index get a blank index region
        first = len(parts) - 2 - index_parts
        columns = np.arange(offsets[first], offsets[first + index_parts])
        out[np.ix_(np.flatnonzero(~show), columns)] = _SPACE
    return out


def _groups(top: int) -> int:
    """4-digit groups needed for numbers up to ``top``."""
    return max(1, -(-len(str(top)) // 4))


def _put_uint(
    out: np.ndarray, at: int, groups: int, values: np.ndarray, shown: np.ndarray | None = None
) -> None:
    """Non-negative ints right-aligned in ``out[:, at : at + 4 * groups]``, leading spaces
    (all spaces in the rows ``shown`` leaves out)."""
    # np.take, not table[values]: the same gather in about half the time (numpy's
    # fancy indexing goes through its general index machinery; these run per row).
    words = out[:, at : at + 4 * groups].view(np.uint32)
    if groups == 1:
        word = np.take(_LEAD4, values)
        words[:, 0] = word if shown is None else np.where(shown, word, _BLANK4)
        return
    rest = values
    for p in range(groups):
        rest, low = _divmod(rest, 10000)
        word = np.where(rest > 0, np.take(_FULL4, low), np.take(_LEAD4, low))
        if p:
            word[(rest == 0) & (low == 0)] = _BLANK4
        words[:, groups - 1 - p] = word if shown is None else np.where(shown, word, _BLANK4)


def _divmod(values: np.ndarray, divisor: int) -> tuple[np.ndarray, np.ndarray]:
    """np.divmod of non-negative ints by a constant, as a floor division and a product:
    numpy divides by a scalar with a precomputed multiplier, which np.divmod does not
    (half the time of these columns)."""
    quotient = values // divisor
    return quotient, values - quotient * divisor


def _put_fixed3(out: np.ndarray, at: int, groups: int, values: np.ndarray) -> None:
    """Non-negative ``values / 1000`` with 3 decimals in ``out[:, at : at + 4 * groups + 4]``."""
    whole, frac = _divmod(values, 1000)
    _put_uint(out, at, groups, whole)
    out[:, at + 4 * groups : at + 4 * groups + 4].view(np.uint32)[:, 0] = np.take(_FRAC4, frac)


class RowScratch:
    """The memory rows are formatted in, reused block after block: a new 2.5 MB array per
    block costs page faults on every block (freed memory goes back to the system), about
    as much as formatting the rows. A chunk built in it is valid until the next one."""

    def __init__(self) -> None:
        self._buffer = np.empty(0, dtype=np.uint8)

    def rows(self, n: int, width: int) -> np.ndarray:
        if self._buffer.size < n * width:
            self._buffer = np.empty(n * width, dtype=np.uint8)
        return self._buffer[: n * width].reshape(n, width)


class _RowLayout:
    """Where each field of a block's fixed-width rows goes: a template row (constant text
    and blanks) and the offsets of the blanks. Known before any row is formatted, so the
    block's size in bytes is too (rows x width)."""

    __slots__ = (
        "dur_at",
        "dur_groups",
        "extra_at",
        "flags_at",
        "index_at",
        "index_groups",
        "index_span",
        "tail_at",
        "template",
        "tid_at",
        "tid_groups",
        "ts_at",
        "ts_groups",
    )

    def __init__(self) -> None:
        self.template = bytearray()
        self.tid_at = self.tid_groups = self.ts_at = self.ts_groups = self.dur_at = self.dur_groups = 0
        self.flags_at = -1
        self.index_span = (0, 0)
        self.index_at = self.index_groups = self.extra_at = self.tail_at = 0

    @property
    def width(self) -> int:
        return len(self.template)

    def blank(self, width: int) -> int:
        at = len(self.template)
        self.template.extend(b" " * width)
        return at


def _row_layout(
    pid: int, tid: np.ndarray, ts_q: np.ndarray, dur_q: np.ndarray, high: np.ndarray,
    show: np.ndarray, status: np.ndarray, tail_width: int,
) -> _RowLayout | None:
    """The layout :func:`_fill_rows` fills; None when a timestamp is negative (a '-' must
    touch its first digit): :func:`_rows` does those. Numbers take whole 4-digit groups,
    so a column can be up to 3 spaces wider than its widest number."""
    if ts_q.size == 0 or int(ts_q.min()) < 0 or int(dur_q.min()) < 0:
        return None
    layout = _RowLayout()
    template = layout.template
    template.extend(f'{{"ph":"X","pid":{pid},"tid":'.encode())
    layout.tid_groups = _groups(int(tid.max()))
    layout.tid_at = layout.blank(4 * layout.tid_groups)
    template.extend(b',"ts":')
    layout.ts_groups = _groups(int(ts_q.max()) // 1000)
    layout.ts_at = layout.blank(4 * layout.ts_groups + 4)
    template.extend(b',"dur":')
    layout.dur_groups = _groups(int(dur_q.max()) // 1000)
    layout.dur_at = layout.blank(4 * layout.dur_groups + 4)
    template.extend(b',"args":{')
    if (status != 0).any():
        layout.flags_at = layout.blank(max(len(t) for t in _FLAG_TEXT.values()))
    if show.any():
        index_start = len(template)
        template.extend(b'"index":')
        layout.index_groups = _groups(int(high.max()) >> 8)
        layout.index_at = layout.blank(4 * layout.index_groups)
        template.extend(b',"extraId":')
        layout.extra_at = layout.blank(4)
        template.extend(b",")
        layout.index_span = (index_start, len(template))
    layout.tail_at = layout.blank(tail_width)
    template.extend(b",\n")
    return layout


def _fill_rows(
    layout: _RowLayout, out: np.ndarray, tid: np.ndarray, ts_q: np.ndarray, dur_q: np.ndarray,
    high: np.ndarray, show: np.ndarray, status: np.ndarray, point: np.ndarray, tails: np.ndarray,
) -> None:
    """Rows into ``out`` [n, layout.width] (contiguous): each row's constant text — the
    template with its point's tail, the index region blank where the row shows none — in
    one gather of whole rows, then 4-byte stores per number group (each row is written
    about once: several times faster than :func:`_rows`). Every ``point`` must have its
    row of ``tails`` (the gather clips, it does not check): see :func:`_check_points`."""
    item = np.dtype((np.void, layout.width))
    texts, text_of = _row_texts(layout, tails, point)
    key = text_of * 2
    if layout.index_span[1]:
        key += show
    # mode="clip" (every key is in range): with the default "raise", np.take buffers a
    # gather into ``out``, which made it four times slower.
    np.take(texts.view(item)[:, 0], key, out=out.view(item)[:, 0], mode="clip")
    _put_uint(out, layout.tid_at, layout.tid_groups, tid)
    _put_fixed3(out, layout.ts_at, layout.ts_groups, ts_q)
    _put_fixed3(out, layout.dur_at, layout.dur_groups, dur_q)
    if layout.flags_at >= 0:
        for code, text in _FLAG_TEXT.items():
            rows = np.flatnonzero(status == code)
            out[rows, layout.flags_at : layout.flags_at + len(text)] = np.frombuffer(text, np.uint8)
    if layout.index_span[1]:
        shown = None if show.all() else show
        _put_uint(out, layout.index_at, layout.index_groups, high >> 8, shown)
        extra = np.take(_LEAD4, high & 0xFF)
        out[:, layout.extra_at : layout.extra_at + 4].view(np.uint32)[:, 0] = (
            extra if shown is None else np.where(shown, extra, _BLANK4))


def _check_points(point: np.ndarray, tails: np.ndarray) -> None:
    """Raise IndexError unless every point is a row of ``tails`` (:func:`_fill_rows`'s
    gather clips its keys instead: a wrong point would take another point's text)."""
    if point.size and (int(point.min()) < 0 or int(point.max()) >= tails.shape[0]):
        raise IndexError(f"a point outside the map's {tails.shape[0]} points")


def _row_texts(layout: _RowLayout, tails: np.ndarray, point: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """uint8 [2 x points, width]: per point, its row's constant text — the template, the
    point's tail — with the index region blank (row 2p) and as the template has it (2p +
    1); and each row's p. For a map of many points and a block of few rows, the points the
    rows use only (the table stays small beside the block)."""
    if 8 * tails.shape[0] > point.size:
        used = np.zeros(tails.shape[0], bool)
        used[point] = True
        which = np.flatnonzero(used)
        place = np.zeros(tails.shape[0], np.intp)
        place[which] = np.arange(which.size)
        tails, text_of = tails[which], place[point]
    else:
        text_of = point.astype(np.intp)
    texts = np.empty((2 * tails.shape[0], layout.width), np.uint8)
    texts[:] = np.frombuffer(bytes(layout.template), dtype=np.uint8)
    texts[:, layout.tail_at : layout.tail_at + tails.shape[1]] = np.repeat(tails, 2, axis=0)
    lo, hi = layout.index_span
    texts[0::2, lo:hi] = _SPACE
    return texts, text_of


def _rows_words(
    pid: int,
    tid: np.ndarray,
    ts_q: np.ndarray,
    dur_q: np.ndarray,
    high: np.ndarray,
    show: np.ndarray,
    status: np.ndarray,
    point: np.ndarray,
    tails: np.ndarray,
    scratch: RowScratch | None = None,
) -> np.ndarray | None:
    """What :func:`_rows` renders, from a template row and 4-byte stores; None when a
    timestamp is negative. Raises IndexError for a point ``tails`` has no row for."""
    _check_points(point, tails)
    layout = _row_layout(pid, tid, ts_q, dur_q, high, show, status, tails.shape[1])
    if layout is None:
        return None
    out = (scratch or RowScratch()).rows(ts_q.size, layout.width)
    _fill_rows(layout, out, tid, ts_q, dur_q, high, show, status, point, tails)
    return out


class RenderedRank(Record):
    """One rank file's event rows, produced lazily block by block (so only one block of
    formatted rows is in memory), each chunk a run of complete rows without the trailing
    separator (the writer puts ",\n" between chunks). ``events``, ``spans``, and the
    ``size`` in bytes and number of ``chunks_count`` of what ``chunks`` will produce
    (all non-empty) are known before any row is formatted: collect's processes write
    side by side into one file from them. ``tracks``: (slot, name) of each core with
    events; ``launch_ns``: the launch slice's start and end; ``span_slots``: the slots of
    the cores with spans (a core's drop marker alone is a track too). (Not a dataclass:
    see records.py.)"""

    __match_args__ = ("chunks", "events", "spans", "size", "chunk_count", "tracks", "launch_ns", "span_slots")
    __slots__ = __match_args__
    chunks: Iterator[bytes | np.ndarray]
    events: int
    spans: int
    size: int
    chunk_count: int
    tracks: list[tuple[int, str]]
    launch_ns: tuple[int, int]
    span_slots: list[int]

    def __init__(self, chunks: Iterator[bytes | np.ndarray], events: int = 0, spans: int = 0, size: int = 0,
                 chunk_count: int = 0, tracks: list[tuple[int, str]] | None = None,
                 launch_ns: tuple[int, int] = (0, 0), span_slots: list[int] | None = None) -> None:
        self.chunks = chunks
        self.events = events
        self.spans = spans
        self.size = size
        self.chunk_count = chunk_count
        self.tracks = [] if tracks is None else tracks
        self.launch_ns = launch_ns
        self.span_slots = [] if span_slots is None else span_slots


def _metadata_row(pid: int, name: str, sort_index: int, tid: int | None = None) -> bytes:
    kind = "process" if tid is None else "thread"
    tid_part = "" if tid is None else f',"tid":{tid}'
    return (
        f'{{"name":"{kind}_name","ph":"M","pid":{pid}{tid_part},"args":{{"name":{json.dumps(name)}}}}},\n'
        f'{{"name":"{kind}_sort_index","ph":"M","pid":{pid}{tid_part},'
        f'"args":{{"sort_index":{sort_index}}}}}'
    ).encode()


def name_rows(processes: list[tuple[int, str, list[tuple[int, str]]]]) -> bytes:
    """The process and thread names (and sort indices) of ``processes``: (pid, name,
    [(tid, thread name)]) each; b"" for none. Four events a process, two a thread."""
    rows = []
    for pid, name, threads in processes:
        rows.append(_metadata_row(pid, name, pid))
        rows += [_metadata_row(pid, thread, tid, tid=tid) for tid, thread in threads]
    return b",\n".join(rows)


def us_text(q: int) -> str:
    """Thousandths of a µs as the trace writes times: ``-12.345``."""
    return f"{'-' if q < 0 else ''}{abs(q) // 1000}.{abs(q) % 1000:03d}"


def launch_extent(decoded: RankDecode) -> tuple[int, int]:
    """The launch's first start and last end in ticks from its base (0, 0: no span)."""
    spans = decoded.spans
    if not spans.start.size:
        return 0, 0
    return int(spans.start.min()), int(spans.end.max())


def _launch_rows(pid: int, tids: list[int], start_q: int, end_q: int, name: str, file: str) -> list[bytes]:
    tail = (f',"ts":{us_text(start_q)},"dur":{us_text(end_q - start_q)},"name":{json.dumps(name)},'
            f'"cat":"{LAUNCH_CATEGORY}","args":{{"file":{json.dumps(file)}}}}}')
    return [f'{{"ph":"X","pid":{pid},"tid":{tid}{tail}'.encode() for tid in tids]


def render_rank(
    pid: int,
    decoded: RankDecode,
    point_map: PointMap,
    *,
    launch: str = "launch 0",
    labels: list[str] | None = None,
    core_filter: CoreFilter | None = None,
    origin_ns: int = 0,
    scratch: RowScratch | None = None,
) -> RenderedRank:
    """A rank file's launch slices, span rows and drop markers, as bytes formatted on
    demand (a chunk is valid until the next one is asked for: rows are built in
    ``scratch``); ``origin_ns``: where its base cycle is in the trace."""
    label_ok = None
    if labels:
        matcher = label_matcher(labels)
        label_ok = np.array([matcher(label) for label in point_map.labels] or [True], dtype=bool)
    selected: list[tuple[CoreTimeline, np.ndarray | None]] = []  # None: every span
    for core in decoded.cores:
        if core_filter is not None and not core_filter(core.core_type, core.core_index):
            continue
        keep = None if label_ok is None else np.flatnonzero(label_ok[core.label])
        if keep is None or keep.size:
            selected.append((core, keep))
    drops = [slot for slot in decoded.slots
             if slot.dropped and (core_filter is None or core_filter(slot.core_type, slot.core_index))]
    spans = sum(c.start.size if k is None else k.size for c, k in selected)
    first, last = launch_extent(decoded)
    scale = 1000.0 / decoded.clock_mhz
    with np.errstate(over="ignore", invalid="ignore"):  # saturated by _quantised
        start_q, end_q = (int(q) + origin_ns for q in _quantised(np.array([first, last]) * scale))

    names = {core.slot: core.name for core, _ in selected}
    for slot in drops:
        names.setdefault(slot.slot, slot.name)
    tracks = sorted(names.items())
    # The launch slices as one chunk: two Python-level writes per core (row and
    # separator) were ~1,200 calls for the benchmark's 8 ranks.
    head = [b",\n".join(_launch_rows(pid, [t for t, _ in tracks], start_q, end_q, launch,
                                     Path(decoded.path).name))] if tracks else []
    blocks: list[_Block] = []
    if selected:
        everything = len(selected) == len(decoded.cores) and all(k is None for _, k in selected)
        columns = _all_columns(decoded) if everything else _selected_columns(selected)
        blocks = _row_blocks(pid, columns, point_map, decoded.clock_mhz, origin_ns)
    tail = [_drop_marker(pid, slot.slot, slot.dropped, slot.state, decoded, origin_ns, first)
            for slot in drops]
    rows = scratch or RowScratch()

    def chunks() -> Iterator[bytes | np.ndarray]:
        yield from head
        for block in blocks:
            yield block.emit(rows)
        yield from tail

    size = sum(map(len, head)) + sum(b.size for b in blocks) + sum(map(len, tail))
    return RenderedRank(chunks(), len(tracks) + spans + len(drops), spans, size,
                        len(head) + len(blocks) + len(tail), tracks, (start_q, end_q),
                        sorted(core.slot for core, _ in selected))


_Columns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _all_columns(decoded: RankDecode) -> _Columns:
    """tid, start, end, point, status, high of every span: the rank's own table."""
    t = decoded.spans
    return t.slot, t.start, t.end, t.point, t.status, t.high


def _selected_columns(selected: list[tuple[CoreTimeline, np.ndarray | None]]) -> _Columns:
    """The same columns for the cores and spans a filter kept."""

    def column(name: str) -> np.ndarray:
        return np.concatenate([getattr(c, name) if k is None else getattr(c, name)[k] for c, k in selected])

    sizes = [c.start.size if k is None else k.size for c, k in selected]
    tid = np.repeat(np.array([c.slot for c, _ in selected], dtype=np.int64), sizes)
    return tid, column("start"), column("end"), column("point"), column("status"), column("high")


class _Block:
    """Up to ``_ROWS_PER_BLOCK`` span rows of a rank: laid out when the rank is rendered
    (so the size is known), formatted when written."""

    __slots__ = ("columns", "layout", "ready", "size", "tails")

    def __init__(self, columns: tuple[np.ndarray, ...], tails: np.ndarray, layout: _RowLayout | None,
                 ready: np.ndarray | None) -> None:
        self.columns = columns  # tid, ts_q, dur_q, high, show, status, point (views)
        self.tails = tails
        self.layout = layout
        self.ready = ready  # rows formatted at once (the rare negative-timestamp block)
        rows = columns[0].size
        self.size = (ready.size if ready is not None else rows * layout.width if layout else 0) - 2

    def emit(self, scratch: RowScratch) -> np.ndarray:
        """The rows, without the last row's ",\n" (the writer puts one between chunks)."""
        if self.ready is not None:
            rows = self.ready
        else:
            assert self.layout is not None
            tid, ts_q, dur_q, high, show, status, point = self.columns
            rows = scratch.rows(tid.size, self.layout.width)
            _fill_rows(self.layout, rows, tid, ts_q, dur_q, high, show, status, point, self.tails)
        return rows.reshape(-1)[:-2]


def _row_blocks(
    pid: int,
    columns: _Columns,
    point_map: PointMap,
    clock_mhz: float,
    origin_ns: int,
) -> list[_Block]:
    """All span events of a rank as blocks of fixed-width rows, no per-span Python."""
    tid, start, end, point, status, high_word = columns
    high = high_word.astype(np.int64)
    scale = 1000.0 / clock_mhz  # thousandths of a µs (ns): 3 decimals of the µs value
    with np.errstate(over="ignore", invalid="ignore"):  # saturated by _quantised
        # Each time rounded to ns, then moved by the origin (whole ns): the .pftrace's
        # times, whose clock counts ns when a tick is not a whole number of them. The end
        # rounded as the start is: a span ends inside its launch's slice.
        ts_q = _quantised(start * scale) + origin_ns
        dur_q = _quantised(end * scale) + origin_ns - ts_q
    tails, indexed = _point_columns(point_map)
    # A loop's first iteration has index 0 and extraId 0 (high word 0): the map says
    # which points carry an index, so it is shown as index 0, not left out.
    _check_points(point, tails)
    show = (high != 0) | np.take(indexed, point)
    blocks = []
    for lo in range(0, start.size, _ROWS_PER_BLOCK):
        part = tuple(c[lo : lo + _ROWS_PER_BLOCK] for c in (tid, ts_q, dur_q, high, show, status, point))
        b_tid, b_ts, b_dur, b_high, b_show, b_status, b_point = part
        layout = _row_layout(pid, b_tid, b_ts, b_dur, b_high, b_show, b_status, tails.shape[1])
        ready = None
        if layout is None:  # a negative timestamp (a negative --rank-offsets)
            tids, row_tid = np.unique(b_tid, return_inverse=True)
            heads = _text_table([f'{{"ph":"X","pid":{pid},"tid":{t},"ts":' for t in tids.tolist()])
            ready = _rows(heads[row_tid], b_ts, b_dur, b_high, b_show, b_status, tails[b_point])
        blocks.append(_Block(part, tails, layout, ready))
    return blocks


# The last point map's row tails and "carries an index" flags: the same for every rank of
# a collect (the map is kept in the entry, so its id cannot be reused while cached).
_POINT_COLUMNS: dict[int, tuple[PointMap, np.ndarray, np.ndarray]] = {}


def _point_columns(point_map: PointMap) -> tuple[np.ndarray, np.ndarray]:
    cached = _POINT_COLUMNS.get(id(point_map))
    if cached is None or cached[0] is not point_map:
        indexed = np.array([point_map.points[i].indexed for i in point_map.ids.tolist()] or [False])
        cached = (point_map, _point_tails(point_map), indexed)
        _POINT_COLUMNS.clear()
        _POINT_COLUMNS[id(point_map)] = cached
    return cached[1], cached[2]


def drop_tick(decoded: RankDecode, slot: int, first: int) -> int:
    """Where a slot's drop marker goes: the end of its last span, inside its launch
    (``first``: the launch's start tick, for a core without a span)."""
    core = next((c for c in decoded.cores if c.slot == slot), None)
    return max(int(core.end.max()), first) if core is not None and core.end.size else first


def _drop_marker(
    pid: int, tid: int, dropped: int, state: str, decoded: RankDecode, origin_ns: int, first: int
) -> bytes:
    at = drop_tick(decoded, tid, first)
    what = "dropped (slot full)" if state == "overflow" else "overwritten (legacy overflow)"
    with np.errstate(over="ignore", invalid="ignore"):  # saturated by _quantised
        ts = (int(_quantised(np.array([at]) * (1000.0 / decoded.clock_mhz))[0]) + origin_ns) / 1000
    return json.dumps(
        {"name": f"optrace: {dropped} records {what}", "ph": "i", "s": "t", "pid": pid,
         "tid": tid, "ts": ts},
        separators=(",", ":"),
    ).encode("utf-8")


class EventSink:
    """Trace events appended to a binary stream, chunk by chunk, ``",\n"`` between two
    chunks. The trace writer has one; so has each :class:`EventPart`."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.events = 0
        self.wrote = False  # anything written yet (the next chunk needs a separator)

    def write_bytes(self, chunk: bytes | np.ndarray) -> None:
        if len(chunk) == 0:
            return
        if self.wrote:
            self.out.write(b",\n")
        self.wrote = True
        self.out.write(chunk if isinstance(chunk, bytes) else chunk.data)

    def write_rendered(self, rendered: RenderedRank) -> int:
        """Append a rank rendered by :func:`render_rank`; returns its span count."""
        for chunk in rendered.chunks:
            self.write_bytes(chunk)
        self.events += rendered.events
        return rendered.spans


class EventPart:
    """Events another process writes while the trace's own stream is busy: an unnamed
    temporary file in the trace's directory (nothing to clean up if the process dies),
    appended to the trace in order by :meth:`ChromeTraceWriter.append`."""

    def __init__(self, directory: Path) -> None:
        self.file = _temporary_file(directory)
        self.sink = EventSink(self.file)

    def close(self) -> None:
        self.file.close()


def _temporary_file(directory: Path) -> IO[bytes]:
    flag = getattr(os, "O_TMPFILE", None)
    if flag is not None:
        try:
            return os.fdopen(os.open(directory, flag | os.O_RDWR, 0o600), "w+b", buffering=1 << 20)
        except OSError:  # a filesystem without O_TMPFILE
            pass
    import tempfile  # only where O_TMPFILE is missing (start-up time)

    return tempfile.TemporaryFile(dir=directory)


def copy_bytes(source: int, target: int, size: int) -> None:
    """``size`` bytes from the start of file ``source`` to ``target``'s position. The
    kernel copies (copy_file_range: within one filesystem no byte passes through this
    process; some filesystems share the blocks); a read / write loop where it cannot."""
    done = 0
    copy_range = getattr(os, "copy_file_range", None)
    while copy_range is not None and done < size:
        try:
            copied = copy_range(source, target, size - done, done)
        except OSError:  # EXDEV, ENOSYS, EINVAL...: not supported here
            break
        if copied == 0:
            break
        done += copied
    while done < size:
        block = os.pread(source, min(size - done, 1 << 22), done)
        if not block:
            raise OSError(f"temporary trace part ended after {done} of {size} bytes")
        view = memoryview(block)
        while view:
            view = view[os.write(target, view):]
        done += len(block)


_OPENING = b'{"traceEvents":[\n'


def _closing(other_data: dict[str, Any], names: bytes = b"", leading: bool = True) -> bytes:
    """The end of the document: the name rows (after ",\n" when ``leading``: events
    came before), then the metadata."""
    tail = {"displayTimeUnit": "ns", "otherData": other_data}
    rows = (b",\n" if leading else b"") + names if names else b""
    return rows + b"\n]," + json.dumps(tail, separators=(",", ":"))[1:].encode("utf-8") + b"\n"


class ChromeTraceWriter:
    """Use as a context manager; ``path`` is only replaced when :meth:`close` ran and no
    exception escaped the block."""

    def __init__(self, path: str | Path, *, compress: bool | None = None) -> None:
        self.path = Path(path)
        self.compress = self.path.name.endswith(".gz") if compress is None else compress
        self._closed = False
        self._context: AbstractContextManager[IO[bytes]] | None = None
        self._raw: IO[bytes] | None = None
        self._out: IO[bytes] | None = None
        self._sink: EventSink | None = None
        self._temporary = self.path

    def __enter__(self) -> ChromeTraceWriter:
        self._context = atomic_output(self.path)
        self._raw = self._context.__enter__()
        self._temporary = Path(self._raw.name)
        out: IO[bytes] = self._raw
        if self.compress:
            import gzip  # only for .gz output (start-up time of plain collects)

            # No name in the header (gzip would take the temporary's): `gunzip -N` must not
            # restore it, and the same trace gives the same bytes, as mtime=0 does.
            gz = gzip.GzipFile(filename="", fileobj=self._raw, mode="wb", compresslevel=3, mtime=0)
            out = cast(IO[bytes], gz)
        self._out = out
        out.write(_OPENING)
        self._sink = EventSink(out)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._context is not None
        if exc_type is None and not self._closed:
            exc_type, exc = RuntimeError, RuntimeError("trace writer left without close()")
        self._context.__exit__(exc_type, exc, tb)

    @property
    def sink(self) -> EventSink:
        assert self._sink is not None, "use ChromeTraceWriter as a context manager"
        return self._sink

    @property
    def events(self) -> int:
        return self._sink.events if self._sink is not None else 0

    def metadata(self, pid: int, name: str, sort_index: int, tid: int | None = None) -> None:
        self.sink.write_bytes(_metadata_row(pid, name, sort_index, tid))
        self.sink.events += 2

    def write_rendered(self, rendered: RenderedRank) -> int:
        """Append a rank rendered by :func:`render_rank`."""
        return self.sink.write_rendered(rendered)

    def flush(self) -> None:
        assert self._out is not None
        self._out.flush()

    def tell(self) -> int:
        """Bytes written so far (plain ``.json`` output)."""
        assert self._raw is not None and not self.compress
        return self._raw.tell()

    def seek(self, offset: int) -> None:
        """Continue at ``offset``: after other processes wrote up to it (plain ``.json``)."""
        assert self._raw is not None and not self.compress
        self._raw.seek(offset)

    @property
    def temporary_path(self) -> Path:
        """The file being written, which replaces ``path`` on success (for processes
        that write into it through their own descriptor)."""
        assert self._context is not None
        return self._temporary

    def append(self, part: EventPart) -> None:
        """Append what another process wrote to ``part`` (plain ``.json`` output only)."""
        assert self._raw is not None and not self.compress, "parts are appended to plain JSON"
        if not part.sink.wrote:
            return
        part.file.flush()
        if self.sink.wrote:
            self._raw.write(b",\n")
        self._raw.flush()
        copy_bytes(part.file.fileno(), self._raw.fileno(), os.fstat(part.file.fileno()).st_size)
        self._raw.seek(0, os.SEEK_END)  # the buffered writer learns the new end
        self.sink.wrote = True
        self.sink.events += part.sink.events

    @staticmethod
    def opening_size() -> int:
        """Bytes before the first event (uncompressed)."""
        return len(_OPENING)

    @staticmethod
    def rank_size(rendered: RenderedRank, first: bool) -> int:
        """Bytes a rank adds: its chunks and the ",\\n" before each (but the file's first)."""
        return rendered.size + 2 * rendered.chunk_count - (2 if first and rendered.chunk_count else 0)

    @staticmethod
    def closing_size(other_data: dict[str, Any], names: bytes = b"") -> int:
        """Bytes :meth:`close` writes for ``other_data`` and ``names`` (uncompressed)."""
        return len(_closing(other_data, names))

    def close(self, other_data: dict[str, Any], names: bytes = b"") -> None:
        """Finish the JSON document (``names``: :func:`name_rows` of what it holds); it
        replaces ``path`` when the ``with`` block ends."""
        assert self._out is not None and self._raw is not None
        if names:
            self.sink.events += names.count(b'"ph":"M"')
        self._out.write(_closing(other_data, names, self.sink.wrote))
        if self._out is not self._raw:
            self._out.close()  # flushes the gzip trailer; the raw file closes on exit
        self._closed = True
