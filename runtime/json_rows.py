"""The events of a Chrome JSON trace, ``collect``'s fixed-width span rows read as columns.

``collect`` writes one event a line: ``{"traceEvents":[``, then each event followed by
``,`` (the last without), then ``],`` and the metadata. Within a rank its span rows share
one layout — every number right-aligned in a column of spaces, the args and name padded
to one width (runtime/chrome.py) — so a run of equal-length lines is a byte matrix whose
columns are fields. This module reads those runs with numpy instead of a JSON parser per
event (Python's parser alone took more than twice collect's time), and every other line
— names, launches, drop markers, anything unusual — with the strict parser (lines of a
plain shape together, as one array). :func:`read_parts` reads a trace a process at a
time, as collect lays it out: the names and metadata back from its end, then its events
a block at a time.

Nothing here trusts that a file is collect's. A line is read as a column only when its
bytes are, column for column, what the layout allows: the fixed text equal to the run's
first row, each number spaces then digits (no leading zero), and the variable args and
name among a few distinct byte strings each parsed strictly as JSON in their place (a
name that would replace ``ts``, an args text that would not close, are not). Any other
line is parsed as JSON whole; a document not laid out one event a line (an event across
two lines, two on one, no ``,`` at a line's end) gives ``None``, and the caller reads it
with the whole-document parser, errors and all. The columns equal what that parser
gives: a time ``12.345`` becomes 12345 / 1000, the same double as ``float("12.345")``
(both correctly rounded), for times below 10^12 µs (the layout's limit here; longer
numbers are read by the parser).
"""

from __future__ import annotations

import json
import mmap
import re
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .regular import BadJSON, let_go, map_maybe_gzip, parse_json

_OPENING = b'{"traceEvents":[\n'
_NEWLINE, _COMMA, _CLOSE, _SPACE, _ZERO = 10, 44, 93, 32, 48

#: A span row's first line in a run: its fields' columns, the args and name after them.
_ROW = re.compile(
    rb'\{"ph":"X","pid":(0|[1-9][0-9]{0,17}),"tid":( *[0-9]+),'
    rb'"ts":( *[0-9]+)\.[0-9]{3},"dur":( *[0-9]+)\.[0-9]{3},'
    rb'"args":\{(.*?)("src":.*)'
)
#: An event of a plain shape: an object of strings without escapes, numbers of at most
#: 24 digits and a fraction of at most 30 (no exponent), true, false, null, or objects
#: of those. Such a line is exactly one JSON value (without escapes, the pattern's
#: tokens are JSON's own: lines joined by commas are one element each), and the strict
#: parser's bounds cannot bite (no NaN, no integer or float past them): lines of this
#: shape are parsed together as one array by the plain parser.
_TEXT = rb'"[^"\\\x00-\x1f]*"'
_SCALAR = rb"(?:" + _TEXT + rb"|-?(?:0|[1-9][0-9]{0,23})(?:\.[0-9]{1,30})?|true|false|null)"
_FLAT = rb"\{(?:" + _TEXT + rb":" + _SCALAR + rb"(?:," + _TEXT + rb":" + _SCALAR + rb")*)?\}"
_VALUE = rb"(?:" + _SCALAR + rb"|" + _FLAT + rb")"
_PLAIN = re.compile(rb"\{" + _TEXT + rb":" + _VALUE + rb"(?:," + _TEXT + rb":" + _VALUE + rb")*\}")
#: Columns of a tid, and of a time's whole µs, read as columns: a tid (below 10^15) and a
#: time's thousandths (below 10^15) are exact in a double, and thousandths / 1000 is the
#: double the parser makes of the text.
_TID_COLUMNS, _WHOLE_COLUMNS = 15, 12
#: Runs shorter than this are parsed line by line (launch slices, names): a layout check
#: costs more than a few parses.
_SHORTEST_RUN = 8
#: Distinct args or name texts a run may have before its rows go to the parser: collect's
#: have one name text per trace point and one args text per (index, extra id).
_MOST_DISTINCT = 4096


@dataclass
class Spans:
    """Span rows read as columns: event index (its place in ``traceEvents``), pid, tid,
    times in thousandths of a µs, and the name as an index into ``names``."""

    index: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    ts_q: np.ndarray
    dur_q: np.ndarray
    name: np.ndarray
    names: list[str]


@dataclass
class JsonEvents:
    """A trace's events: the top-level members but ``traceEvents`` (``document``), the
    events read by the parser as (index, event) in order (``parsed``; or every event,
    ``whole``, when the document was parsed as one), and the span rows read as columns
    (``spans``, None when there are none)."""

    document: dict[str, Any]
    count: int
    parsed: list[tuple[int, Any]] = field(default_factory=list)
    spans: Spans | None = None
    whole: list[Any] | None = None
    pid: Any = None  # a part's process (read_parts)

    def events(self) -> Iterator[tuple[int, Any]]:
        """(index, event) of every event the parser read, in order."""
        return enumerate(self.whole) if self.whole is not None else iter(self.parsed)


def read_events(path: Path, told: Callable[[int, int], None] | None = None) -> JsonEvents | None:
    """The events of the trace at ``path`` (within the trace bound, gunzipped), or None
    when it is not laid out one event a line (the caller parses it whole; a file that
    cannot be read or is not JSON is None too, for the caller to report)."""
    try:
        data = map_maybe_gzip(path, "trace")
    except (OSError, ValueError):
        return None
    try:
        return _events(data, told)
    except BadJSON:
        return None


def _events(data: Any, told: Callable[[int, int], None] | None) -> JsonEvents | None:
    if len(data) < len(_OPENING) or data[: len(_OPENING)] != _OPENING:
        return None
    raw = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(raw == _NEWLINE)  # ends[0] ends the opening line
    starts = ends + 1
    starts = starts[starts < raw.size]
    # The first line that begins with "]" ends the events (an event begins with "{" or
    # a value, never "]"); what follows is the document's other members.
    closing = np.flatnonzero(raw[starts] == _CLOSE)
    if closing.size == 0:
        return None
    lines = int(closing[0])
    document = _closing(bytes(data[int(starts[lines]):]))
    if document is None:
        return None
    if lines == 0:
        return JsonEvents(document, 0)
    starts = starts[:lines]
    stops = ends[1 : lines + 1]
    if (stops <= starts).any():  # an empty line: not one event a line
        return None
    comma = raw[stops - 1] == _COMMA
    if not comma[:-1].all() or comma[-1]:
        return None
    widths = stops - starts - comma
    reader = _Reader(raw, starts, widths)
    _read_lines(reader, widths, comma, told)
    return JsonEvents(document, lines, reader.parsed, reader.spans())


#: Bytes of a trace read at a time when it is read a process at a time: a block's lines
#: are read, then its pages let go (a trace of gigabytes is never resident whole).
_BLOCK = 1 << 24


class Regroup(Exception):
    """A trace that cannot be read a process at a time after all (a process's events
    after another's began, names among the events, a line the strict parser refuses):
    it is read whole instead, which also names a fault the way it always has."""


@dataclass
class Parts:
    """A trace read a process at a time: the document's members but ``traceEvents``,
    how many name events end its events, and each process's events as they end
    (``parts``: JsonEvents without those names; raises :class:`Regroup` where the trace
    is not laid out so)."""

    document: dict[str, Any]
    names: int
    parts: Iterator[JsonEvents]


def read_parts(path: Path, names: Callable[[list[Any]], bool],
               told: Callable[[int, int], None] | None = None) -> Parts | None:
    """The events of the trace at ``path`` a process (a pid) at a time, as collect lays
    them out: a rank's events together, the names and the metadata at the end. The name
    events are given to ``names`` first, a batch at a time in file order (so they are
    never all held as events); it says whether it took them. None where the trace's end
    is not laid out so, or ``names`` refused a batch (the caller reads it whole)."""
    try:
        data = map_maybe_gzip(path, "trace")
    except (OSError, ValueError):
        return None
    if len(data) < len(_OPENING) or data[: len(_OPENING)] != _OPENING:
        return None
    try:
        found = _tail(data, names)
    except BadJSON:
        return None
    if found is None:
        return None
    document, count, stop = found
    return Parts(document, count, _parts(data, stop, document, count > 0, told))


#: Brackets and braces a text parsed apart may hold: the parser's nesting bound is its
#: recursion limit, which a text parsed alone meets a few levels after the whole
#: document does — a deep text is left to the whole document's parse (read_events gives
#: the document up, a read a process at a time regroups).
_DEEPEST = 100


def _deep(text: bytes) -> bool:
    return text.count(b"[") + text.count(b"{") > _DEEPEST


#: A line that may be a process or thread name (parsed, then checked to be one).
_NAME_LINE = b'{"name":"'
#: Name events parsed at a time.
_NAME_BATCH = 4096


def _tail(data: Any, take: Callable[[list[Any]], bool]) -> tuple[dict[str, Any], int, int] | None:
    """The document's other members, the count of name events that end its events (read
    back from its end, then given to ``take`` in batches in file order), and where the
    events before them end (the ``\n`` after the last)."""
    closing = data.rfind(b"\n]")
    if closing < len(_OPENING):
        return None
    document = _closing(bytes(data[closing + 1 :]))
    if document is None:
        return None
    lines: list[tuple[int, int]] = []  # each name line's start and end, last first
    end = closing
    while True:
        start = data.rfind(b"\n", 0, end) + 1
        if start < len(_OPENING):
            return None  # names only, or no events: read whole
        line = bytes(data[start:end])
        # Every event line but the last (the first read here) ends with its comma.
        if line.endswith(b",") == (end == closing):
            return None
        line = line if end == closing else line[:-1]
        if not (line.startswith(_NAME_LINE) and b'"ph":"M"' in line and _PLAIN.fullmatch(line)):
            break
        lines.append((start, start + len(line)))
        end = start - 1
    lines.reverse()
    names_from = lines[0][0] if lines else closing
    for at in range(0, len(lines), _NAME_BATCH):
        batch = [bytes(data[a:b]) for a, b in lines[at : at + _NAME_BATCH]]
        try:  # decoded first: json.loads of bytes would let surrogates' bytes through
            events = json.loads((b"[" + b",".join(batch) + b"]").decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None
        if not all(isinstance(e, dict) and e.get("ph") == "M" for e in events) or not take(events):
            return None
    let_go(data, names_from // mmap.PAGESIZE * mmap.PAGESIZE, len(data))  # read once, as the rest
    return document, len(lines), end


def _parts(data: Any, stop: int, document: dict[str, Any], comma_last: bool,
           told: Callable[[int, int], None] | None) -> Iterator[JsonEvents]:
    """Each process's events in the lines before ``stop`` (every one ends with its comma
    when ``comma_last``), read a block at a time."""
    raw = np.frombuffer(data, dtype=np.uint8)
    shared: dict[str, int] = {}
    group = _Processes(document, shared)
    pos, offset, dropped, size = len(_OPENING), 0, 0, _BLOCK
    while pos < stop:
        end = min(pos + size, stop)
        found = np.flatnonzero(raw[pos : end + 1 if end == stop else end] == _NEWLINE)
        if found.size == 0:  # a line longer than a block
            size *= 2
            continue
        ends = found + pos
        starts = np.concatenate([[pos], ends[:-1] + 1])
        if (ends <= starts).any() or (raw[starts] == _CLOSE).any():
            raise Regroup("an empty line, or events after the end")
        comma = raw[ends - 1] == _COMMA
        last = int(ends[-1]) == stop and not comma_last
        if not comma[: comma.size - last].all() or (last and comma[-1]):
            raise Regroup("an event line without its comma")
        widths = ends - starts - comma
        reader = _Reader(raw, starts, widths, offset, shared)
        try:
            _read_lines(reader, widths, comma)
        except BadJSON as exc:
            raise Regroup(str(exc)) from None
        yield from group.add(reader)
        pos, offset, size = int(ends[-1]) + 1, offset + starts.size, _BLOCK
        dropped = let_go(data, dropped, pos)
        if told is not None:
            told(pos, stop)
    yield from group.close()


def _read_lines(reader: _Reader, widths: np.ndarray, comma: np.ndarray,
                told: Callable[[int, int], None] | None = None) -> None:
    """The reader's lines read: runs of consecutive lines of one width (and comma) as
    columns (a strided byte matrix each), the rest parsed."""
    lines = widths.size
    cut = np.flatnonzero((np.diff(widths) != 0) | (np.diff(comma) != 0)) + 1
    bounds = np.concatenate([[0], cut, [lines]])
    for first, last in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if last - first >= _SHORTEST_RUN:
            reader.run(first, last)
        else:
            reader.parse(range(first, last))
        if told is not None:
            told(last, lines)
    reader.finish()


class _Processes:
    """A block's events put with their process (pid), each process given out once a
    later one's events began (and at the end)."""

    def __init__(self, document: dict[str, Any], names: dict[str, int]) -> None:
        self.document = document
        self.names = names
        self.current: Any = None
        self.started = False
        self.closed: set[Any] = set()
        self.parsed: list[tuple[int, Any]] = []
        self.columns: list[tuple[np.ndarray, ...]] = []

    def add(self, reader: _Reader) -> Iterator[JsonEvents]:
        # (first index, pid, a run's columns or None, the event or None)
        items: list[tuple[int, Any, tuple[np.ndarray, ...] | None, tuple[int, Any] | None]] = []
        spans: list[tuple[int, int, int]] = []  # each run's first and last index, and pid
        for run in reader.columns:
            if run[-1].size:
                items.append((int(run[-1][0]), int(run[0][0]), run, None))
                spans.append((int(run[-1][0]), int(run[-1][-1]), int(run[0][0])))
        for index, event in reader.parsed:
            if not isinstance(event, dict):
                continue  # no event a reader takes
            phase = event.get("ph")
            if phase == "M":
                raise Regroup("names among the events")
            if phase not in ("X", "i"):
                continue
            pid = event.get("pid")
            if isinstance(pid, list | dict):
                raise Regroup("a pid that is no id")
            at = bisect_right(spans, (index,)) - 1  # the run that began last before it
            if at >= 0 and index < spans[at][1] and pid != spans[at][2]:
                raise Regroup("a process's event among another's rows")
            items.append((index, pid, None, (index, event)))
        items.sort(key=lambda item: item[0])
        for _, pid, columns, parsed in items:
            if not self.started or pid != self.current:
                yield from self.close()
                if pid in self.closed:
                    raise Regroup("a process's events after another's began")
                self.current, self.started = pid, True
            if columns is not None:
                self.columns.append(columns)
            if parsed is not None:
                self.parsed.append(parsed)

    def close(self) -> Iterator[JsonEvents]:
        if not self.started:
            return
        self.closed.add(self.current)
        self.started = False
        spans = None
        if self.columns:
            pid, tid, ts_q, dur_q, name, rows = (np.concatenate(c) for c in zip(*self.columns, strict=True))
            spans = Spans(rows, pid, tid, ts_q, dur_q, name.astype(np.int32), list(self.names))
        part = JsonEvents(self.document, 0, self.parsed, spans, pid=self.current)
        self.parsed, self.columns = [], []
        yield part


def _closing(text: bytes) -> dict[str, Any] | None:
    """The members after the events (``],"otherData":{...}}``) as an object, or None
    where they would not close the document as one (or name ``traceEvents`` again: the
    parser keeps the last of two)."""
    rest = text[1:]
    if rest[:1] == b",":
        rest = rest[1:]
        if rest.lstrip(b" \t\r\n")[:1] == b"}":
            return None  # "],}": a comma before nothing
    elif rest[:1] != b"}":
        return None
    # Parsed at the depth it has in the document (its members are the document's), so
    # the parser's nesting bound falls where it falls for the whole document.
    document = parse_json(b"{" + rest)
    if not isinstance(document, dict) or "traceEvents" in document:
        return None
    return document


class _Reader:
    """Lines ``starts`` / ``widths`` of ``raw`` (the ``offset``-th line of the events
    first), read as span columns and parsed events; ``names`` may be shared by readers."""

    def __init__(self, raw: np.ndarray, starts: np.ndarray, widths: np.ndarray, offset: int = 0,
                 names: dict[str, int] | None = None) -> None:
        self.raw = raw
        self.starts = starts
        self.widths = widths
        self.offset = offset
        self.parsed: list[tuple[int, Any]] = []
        self.plain: list[int] = []  # places in parsed of lines of the plain shape
        self.names: dict[str, int] = {} if names is None else names
        self.columns: list[tuple[np.ndarray, ...]] = []

    def line(self, n: int) -> bytes:
        start = int(self.starts[n])
        return self.raw[start : start + int(self.widths[n])].tobytes()

    def parse(self, lines: range | np.ndarray) -> None:
        """Lines for the parser: one of the plain shape (:data:`_PLAIN`) waits for the
        others, to be parsed with them as one array; any other is parsed now, strictly."""
        for n in lines:
            line = self.line(int(n))
            if _PLAIN.fullmatch(line):
                self.plain.append(len(self.parsed))
                self.parsed.append((self.offset + int(n), line))
            elif _deep(line):
                raise BadJSON("nested deeply: read with the whole document")
            else:
                self.parsed.append((self.offset + int(n), parse_json(line)))

    def finish(self) -> None:
        """The plain lines parsed, as one JSON array (one call of the parser instead of
        one a line: the names and launch slices of a trace of many launches)."""
        if not self.plain:
            return
        try:
            text = b"[" + b",".join(self.parsed[at][1] for at in self.plain) + b"]"
            events = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):  # not UTF-8: the strict parser says why
            events = [parse_json(self.parsed[at][1]) for at in self.plain]
        for at, event in zip(self.plain, events, strict=True):
            self.parsed[at] = (self.parsed[at][0], event)

    def run(self, first: int, last: int) -> None:
        """Lines ``first`` to ``last`` (one width): as columns where the first row's
        layout holds (a first row that is no span row goes to the parser and the next
        one is tried), the rows it does not hold for by the parser."""
        while first < last:
            taken = self._layout(first, last)
            if taken is None:
                self.parse(range(first, first + 1))
                first += 1
                continue
            ok, columns = taken
            rows = np.arange(first, last)
            self.columns.append((*(c[ok] for c in columns), rows[ok] + self.offset))
            self.parse(rows[~ok])
            return

    def _layout(self, first: int, last: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]] | None:
        """Which rows of the run hold its first row's layout, and their pid, tid, times
        and name; None when the first row is no span row."""
        head = self.line(first)
        found = _ROW.fullmatch(head)
        if found is None:
            return None
        step = int(self.starts[first + 1] - self.starts[first]) if last - first > 1 else len(head) + 2
        start = int(self.starts[first])
        rows = _Rows(self.raw, start, last - first, len(head), step)
        tid_at, ts_at, dur_at = found.span(2), found.span(3), found.span(4)
        mid_at, tail_at = found.span(5), found.span(6)
        whole_columns = max(ts_at[1] - ts_at[0], dur_at[1] - dur_at[0])
        if tid_at[1] - tid_at[0] > _TID_COLUMNS or whole_columns > _WHOLE_COLUMNS:
            return None  # numbers that may not fit an int64, or a double exactly
        fixed = [(0, tid_at[0]), (tid_at[1], ts_at[0]), (ts_at[1], ts_at[1] + 1),
                 (ts_at[1] + 4, dur_at[0]), (dur_at[1], dur_at[1] + 1), (dur_at[1] + 4, mid_at[0])]
        ok = rows.equal(head, fixed)
        numbers = rows.columns([tid_at, (ts_at[0], ts_at[1] + 4), (dur_at[0], dur_at[1] + 4)])
        values, good = _numbers(numbers, [(tid_at[1] - tid_at[0], False), (ts_at[1] - ts_at[0], True),
                                          (dur_at[1] - dur_at[0], True)])
        ok &= good
        tid, ts_q, dur_q = values
        ok &= _args_ok(rows, mid_at)
        name, good = _distinct(rows, tail_at, self._name)
        ok &= good
        pid = np.full(last - first, int(found.group(1)), dtype=np.int64)
        return ok, (pid, tid, ts_q, dur_q, name)

    def _name(self, tail: bytes) -> int | None:
        """The name a row's args-and-name text gives (an index into the names), or None
        when it is not ``<args members>}, "name": <string>`` and spaces."""
        if _deep(tail):
            return None
        try:
            member = parse_json(b'{"args":{' + tail)
        except BadJSON:
            return None
        if not isinstance(member, dict) or set(member) != {"args", "name"}:
            return None
        if not isinstance(member["name"], str):
            return None
        return self.names.setdefault(member["name"], len(self.names))

    def spans(self) -> Spans | None:
        if not self.columns:
            return None
        pid, tid, ts_q, dur_q, name, rows = (np.concatenate(c) for c in zip(*self.columns, strict=True))
        return Spans(rows, pid, tid, ts_q, dur_q, name.astype(np.int32), list(self.names))


#: Rows transposed to word columns at a time (a block's bytes, ~20 words a row: ~600 KB).
_TRANSPOSED = 4096


class _Rows:
    """A run's rows as 8-byte words (a row padded with zeros), a row of words per word
    column (``words[w]``: every row's w-th word), so that a check of the rows' fixed text
    or a hash of a field is a few operations on long vectors (numpy's loops are fast
    along the last axis, and a row is only ~20 words)."""

    def __init__(self, raw: np.ndarray, start: int, count: int, width: int, step: int) -> None:
        self.count, self.width = count, width
        # the rows in place: row k is raw[start + k * step :][:width]
        self.bytes = np.lib.stride_tricks.as_strided(raw[start:], shape=(count, width), strides=(step, 1),
                                                     writeable=False)
        self.padded = -(-width // 8) * 8
        words = self.padded // 8
        self.words = np.empty((words, count), dtype=np.uint64)
        try:  # the words in place too (unaligned): a row's last word reads past its end ...
            view = np.ndarray((count, words), dtype=np.uint64, buffer=raw, offset=start, strides=(step, 8))
        except ValueError:  # ... past the end of the file, here: the rows copied, padded
            padded = np.zeros((count, self.padded), dtype=np.uint8)
            padded[:, :width] = self.bytes
            view = padded.view(np.uint64)
        # Transposed a block of rows at a time: a block's bytes stay in the cache while each
        # of its words is written (a transpose of the whole run at once went through memory
        # once a word, and was a tenth of reading a JSON trace).
        for lo in range(0, count, _TRANSPOSED):
            self.words[:, lo : lo + _TRANSPOSED] = view[lo : lo + _TRANSPOSED].T
        if width % 8:  # ... the bytes past the row zeroed, as a padded row's are
            kept = np.zeros(8, dtype=np.uint8)
            kept[: width % 8] = 0xFF
            self.words[-1] &= kept.view(np.uint64)[0]

    def _mask(self, spans: list[tuple[int, int]]) -> tuple[np.ndarray, int, int]:
        """A byte mask of ``spans`` as words, and the words it covers."""
        mask = np.zeros(self.padded, dtype=np.uint8)
        for lo, hi in spans:
            mask[lo:hi] = 0xFF
        covered = np.flatnonzero(mask.view(np.uint64))
        lo_word, hi_word = (int(covered[0]), int(covered[-1]) + 1) if covered.size else (0, 0)
        return mask.view(np.uint64)[lo_word:hi_word], lo_word, hi_word

    def equal(self, head: bytes, spans: list[tuple[int, int]]) -> np.ndarray:
        """Whether each row has ``head``'s bytes in ``spans``."""
        mask, lo, hi = self._mask(spans)
        template = np.zeros(self.padded, dtype=np.uint8)
        template[: len(head)] = np.frombuffer(head, dtype=np.uint8)
        expected = template.view(np.uint64)[lo:hi] & mask
        differ = np.zeros(self.count, dtype=np.uint64)
        for w in range(hi - lo):
            differ |= (self.words[lo + w] & mask[w]) ^ expected[w]
        same: np.ndarray = differ == 0
        return same

    def columns(self, spans: list[tuple[int, int]]) -> np.ndarray:
        """The bytes of columns ``spans``, a row of bytes a column."""
        out = np.empty((sum(hi - lo for lo, hi in spans), self.count), dtype=np.uint8)
        for first in range(0, self.count, _TRANSPOSED):  # a block of rows at a time, as the words
            block = self.bytes[first : first + _TRANSPOSED]
            at = 0
            for lo, hi in spans:
                out[at : at + hi - lo, first : first + _TRANSPOSED] = block[:, lo:hi].T
                at += hi - lo
        return out

    def field(self, at: tuple[int, int]) -> np.ndarray:
        """The word columns covering columns ``at``, the bytes outside them zeroed (a key
        of the field's text)."""
        mask, lo, hi = self._mask([at])
        field: np.ndarray = self.words[lo:hi] & mask[:, None]
        return field


def _distinct(rows: _Rows, at: tuple[int, int], judge: Callable[[bytes], int | None]
              ) -> tuple[np.ndarray, np.ndarray]:
    """``judge``'s value of each row's text in columns ``at`` (-1 where it refused it)
    and whether it took it."""
    n = rows.count
    if at[1] == at[0]:
        taken = judge(b"")
        return np.full(n, -1 if taken is None else taken, np.int64), np.full(n, taken is not None)
    return _judged(rows.field(at), lambda row: rows.bytes[row, at[0] : at[1]].tobytes(), judge)


def _judged(words: np.ndarray, text: Callable[[int], bytes], judge: Callable[[bytes], int | None]
            ) -> tuple[np.ndarray, np.ndarray]:
    """``judge``'s verdict on each row's text (``words``: its word columns; ``text``: a
    row's bytes), judging each distinct text once: the rows are put in 2^16 buckets by 16
    bits of a hash of their words, one row of each bucket stands for its text, and the
    rows whose words are that row's take its verdict. Rows of another text in the same
    bucket try the next 16 bits (no sort of the rows: a few passes over them). Past
    _MOST_DISTINCT texts, the rows left are refused (the parser reads them)."""
    n = words.shape[1]
    key = words[0].copy()
    for j in range(1, words.shape[0]):
        key *= np.uint64(0x9E3779B97F4A7C15)
        key ^= words[j]
    value = np.full(n, -1, dtype=np.int64)
    todo = np.arange(n)
    judged = 0
    for shift in (48, 32, 16, 0):
        whole = todo.size == n
        part = key if whole else key[todo]
        bucket = ((part >> np.uint64(shift)) & np.uint64(0xFFFF)).astype(np.intp)
        table = np.full(1 << 16, -1, dtype=np.intp)
        table[bucket] = todo  # any of a bucket's rows
        kept = table[table >= 0]
        judged += kept.size
        if judged > _MOST_DISTINCT:
            break
        verdict = np.full(1 << 16, -1, dtype=np.int64)
        verdict[table >= 0] = [-1 if (v := judge(text(int(row)))) is None else v for row in kept]
        standing = table[bucket]
        differ = np.zeros(todo.size, dtype=bool)
        for w in range(words.shape[0]):
            differ |= (words[w] if whole else words[w][todo]) != words[w][standing]
        same = ~differ
        value[todo[same]] = verdict[bucket[same]]
        todo = todo[differ]
        if todo.size == 0:
            break
    return value, value >= 0


def _members(text: bytes) -> int | None:
    """0 when ``text`` is object members each followed by a comma (or blank), else None."""
    if _deep(text):
        return None
    try:
        return 0 if isinstance(parse_json(b"{" + text + b'"":0}'), dict) else None
    except BadJSON:
        return None


#: Longest args text whose digits are judged by shape (below, beside a float's 309).
_SHAPED = 256


def _args_ok(rows: _Rows, at: tuple[int, int]) -> np.ndarray:
    """Whether each row's args text (columns ``at``, before ``"src"``) is object members
    each followed by a comma. The distinct texts are judged; where a run has too many
    (rows differ in their numbers' digits, ``"index":  12``), their shapes are, every
    digit a ``1``: a digit's value changes no JSON verdict but a leading zero (refused
    here) and the range of a float, which needs an exponent (a digit after ``e``,
    refused) or ~309 digits (texts that wide are not shaped)."""
    ok = _distinct(rows, at, _members)[1]
    if ok.all() or at[1] - at[0] > _SHAPED:
        return ok
    texts = rows.bytes[:, at[0] : at[1]]
    is_digit = (texts >= _ZERO) & (texts <= _ZERO + 9)
    ok = np.ones(rows.count, dtype=bool)
    if at[1] - at[0] > 1:
        before = np.zeros_like(is_digit)
        before[:, 1:] = is_digit[:, :-1]
        after = np.zeros_like(is_digit)
        after[:, :-1] = is_digit[:, 1:]
        ok &= ~((texts == _ZERO) & ~before & after).any(axis=1)
        exponent = (texts[:, :-1] == ord("e")) | (texts[:, :-1] == ord("E"))
        signed = is_digit[:, 1:] | (texts[:, 1:] == ord("+")) | (texts[:, 1:] == ord("-"))
        ok &= ~(exponent & signed).any(axis=1)
    shapes = np.zeros((rows.count, -(-(at[1] - at[0]) // 8) * 8), dtype=np.uint8)
    shapes[:, : at[1] - at[0]] = np.where(is_digit, np.uint8(_ZERO + 1), texts)
    width = at[1] - at[0]
    shaped = _judged(shapes.view(np.uint64).T.copy(), lambda row: shapes[row, :width].tobytes(), _members)
    judged: np.ndarray = ok & shaped[1]
    return judged


def _numbers(digits: np.ndarray, fields: list[tuple[int, bool]]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's numbers (``digits``: a row of bytes a column), one a field: ``fields``
    gives each one's whole-part columns and whether a ``.ddd`` follows (its value is then
    in thousandths). A row holds them when every whole part is spaces, then digits
    without a leading zero (right-aligned, at least one), and every fraction three
    digits. Checked a column at a time on whole rows of bytes (numpy's fast loops; a
    per-column mask broadcast over the matrix is several times slower)."""
    is_space = digits == _SPACE
    is_digit = (digits - np.uint8(_ZERO)) < 10  # bytes below '0' wrap past 9
    zero = digits == _ZERO
    bad = np.zeros(digits.shape[1], dtype=bool)
    places = []  # (field, column, power of ten)
    at = 0
    for n, (whole, fraction) in enumerate(fields):
        three = 3 if fraction else 0
        for c in range(at, at + whole):
            places.append((n, c, at + whole - 1 - c + three))
            if c == at + whole - 1:  # the last column: a digit ("0" alone is a number)
                bad |= ~is_digit[c]
            else:  # a space or a digit, and no zero that begins a number of several digits
                bad |= ~(is_space[c] | is_digit[c])
                bad |= zero[c] & (is_space[c - 1] if c > at else True)
            if c > at:  # no space after a digit
                bad |= is_digit[c - 1] & is_space[c]
        at += whole
        if fraction:  # the '.' at ``at`` is the run's fixed text (checked with it)
            for c in range(at + 1, at + 4):
                places.append((n, c, at + 3 - c))
                bad |= ~is_digit[c]
            at += 4
    return _values(digits, places, len(fields)), ~bad


#: Digits summed in one float32 block: below 2^24, so exact.
_BLOCK_DIGITS = 7


def _values(digits: np.ndarray, places: list[tuple[int, int, int]], count: int) -> np.ndarray:
    """The fields' values from their digit columns ((field, column, power of ten) each;
    a space and a zero are both 0 in their low four bits): blocks of 7 digits summed by
    one float32 matrix product (exact), then put together in int64."""
    blocks: list[tuple[int, int]] = []  # (field, power of ten of the block)
    weights = []
    for number, column, power in places:
        block = (number, power // _BLOCK_DIGITS * _BLOCK_DIGITS)
        if block not in blocks:
            blocks.append(block)
            weights.append(np.zeros(digits.shape[0], dtype=np.float32))
        weights[blocks.index(block)][column] = 10 ** (power - block[1])
    sums = np.stack(weights) @ (digits & np.uint8(0x0F)).astype(np.float32)
    values = np.zeros((count, digits.shape[1]), dtype=np.int64)
    for (number, power), block_sum in zip(blocks, sums, strict=True):
        values[number] += block_sum.astype(np.int64) * 10**power
    return values
