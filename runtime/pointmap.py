"""``point_map.json``: which label, source line and B/E each point id stands for.

Legacy form: ``{"points": {"<id>": {"label", "file", "line", "event_type", "event_id"}}}``.
optrace adds ``"fingerprint"`` (uint32, the build fingerprint the runtime also writes into
each slot's reserved first record), ``"format_version"`` and ``"cores"`` (the core types
the kernel declares, ``["AIV"]`` / ``["AIC"]`` / ``["AIC", "AIV"]``: the buffer's slot
layout; absent in older maps, which read as mixed). A B point and an E point close each
other when they carry the same label.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ProfilingInputError, checked_name
from .format import CORE_TYPES, FINGERPRINT_POINT_ID
from .records import FrozenRecord, Record
from .regular import BadJSON, parse_json, read_regular

POINT_MAP_NAME = "point_map.json"


# Plain classes, not dataclasses: defining a dataclass execs generated code, paid at every
# `optrace collect` start, which made this module's import several times slower.
class Point(FrozenRecord):
    __match_args__ = ("point_id", "label", "event_type", "file", "line", "event_id", "indexed")
    __slots__ = __match_args__
    point_id: int
    label: str
    event_type: str  # "B" or "E"
    file: str
    line: int | None
    event_id: Any
    indexed: bool  # recorded with an index (a loop region): index 0 is shown too

    def __init__(
        self, point_id: int, label: str, event_type: str, file: str = "", line: int | None = None,
        event_id: Any = None, indexed: bool = False,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "point_id", point_id)
        set_(self, "label", label)
        set_(self, "event_type", event_type)
        set_(self, "file", file)
        set_(self, "line", line)
        set_(self, "event_id", event_id)
        set_(self, "indexed", indexed)

    @property
    def source(self) -> str:
        if not self.file:
            return ""
        return f"{self.file}:{self.line}" if self.line is not None else self.file


class PointMap(Record):
    """A loaded map plus the sorted arrays the vectorised decoder looks ids up in."""

    __match_args__ = (
        "path", "points", "fingerprint", "format_version", "labels", "ids", "kinds",
        "label_index", "cores",
    )
    __slots__ = (*__match_args__, "_hash")
    path: str
    points: dict[int, Point]
    fingerprint: int | None
    format_version: int | None
    labels: list[str]
    ids: np.ndarray
    kinds: np.ndarray  # +1 B, -1 E
    label_index: np.ndarray
    cores: frozenset[str] | None  # the kernel's core types; None: not recorded (mixed layout)

    def __init__(
        self,
        path: str,
        points: dict[int, Point],
        fingerprint: int | None = None,
        format_version: int | None = None,
        labels: list[str] | None = None,
        ids: np.ndarray | None = None,
        kinds: np.ndarray | None = None,
        label_index: np.ndarray | None = None,
        cores: frozenset[str] | None = None,
    ) -> None:
        self.path = path
        self.points = points
        self.fingerprint = fingerprint
        self.format_version = format_version
        self.labels = [] if labels is None else labels
        self.ids = np.zeros(0, np.uint32) if ids is None else ids
        self.kinds = np.zeros(0, np.int8) if kinds is None else kinds
        self.label_index = np.zeros(0, np.int32) if label_index is None else label_index
        self.cores = cores
        self._hash: tuple[np.uint32, np.ndarray] | None = None

    @classmethod
    def build(
        cls, path: str, points: dict[int, Point], fingerprint: int | None = None,
        format_version: int | None = None, cores: frozenset[str] | None = None,
    ) -> PointMap:
        labels = sorted({p.label for p in points.values()})
        position = {label: i for i, label in enumerate(labels)}
        ordered = sorted(points)
        return cls(
            path=path,
            points=points,
            fingerprint=fingerprint,
            format_version=format_version,
            labels=labels,
            ids=np.array(ordered, dtype=np.uint32),
            kinds=np.array([1 if points[i].event_type == "B" else -1 for i in ordered], np.int8),
            label_index=np.array([position[points[i].label] for i in ordered], np.int32),
            cores=cores,
        )

    def lookup(self, point_ids: np.ndarray) -> np.ndarray:
        """Position of each id in ``self.ids``, or -1 for ids the map does not know."""
        if self.ids.size == 0:
            return np.full(point_ids.shape, -1, dtype=np.int64)
        if self._hash is None:
            self._hash = _perfect_hash(self.ids)
        modulus, table = self._hash
        if modulus == 0:  # small ids (legacy 1..N): the table is by id, -1 past the last
            # np.take: the same gather as table[...], about twice as fast (every record).
            by_id: np.ndarray = np.take(table, np.minimum(point_ids, np.uint32(table.size - 1)))
            return by_id
        if table.size:  # one remainder and two gathers per record instead of a binary search
            pos = np.take(table, np.remainder(point_ids, modulus))
        else:
            pos = np.minimum(np.searchsorted(self.ids, point_ids), self.ids.size - 1)
        # An id at a taken place but not the map's is unknown; so is one at an empty
        # place (-1 reads the last id, which lives elsewhere in the table).
        return np.where(np.take(self.ids, pos) == point_ids, pos, -1)


def _perfect_hash(ids: np.ndarray, largest: int = 1 << 16) -> tuple[np.uint32, np.ndarray]:
    """The smallest modulus under which the map's ids all land in different places, and
    the table of their positions by place (-1: none). Modulus 0 when the ids are small
    enough to be places themselves (the table then ends with a -1 for any larger id); an
    empty table when there is none
    up to ``largest`` places or the map has over 192 points (then a sorted search: the
    tries would cost more than they save). A build's ids are a few dozen (two per label,
    30 labels by default): legacy ids 1..N fit at once, hashed ones within a few hundred
    tries, tried 256 moduli at a time."""
    n = ids.size
    values = ids.astype(np.int64)
    if int(values.max()) < largest:  # modulus 0: a table by id itself, no remainder
        table = np.full(int(values.max()) + 2, -1, dtype=np.int64)
        table[values] = np.arange(n)
        return np.uint32(0), table
    if n > 192:
        return np.uint32(1), np.zeros(0, np.int64)
    for first in range(max(n, 1), min(largest, 64 * n + 64) + 1, 256):
        moduli = np.arange(first, min(first + 256, largest + 1), dtype=np.int64)
        places = np.sort(values[None, :] % moduli[:, None], axis=1)
        distinct = ~(places[:, 1:] == places[:, :-1]).any(axis=1)
        if distinct.any():
            modulus = int(moduli[np.argmax(distinct)])
            table = np.full(modulus, -1, dtype=np.int64)
            table[values % modulus] = np.arange(n)
            return np.uint32(modulus), table
    return np.uint32(1), np.zeros(0, np.int64)


def _entry(path: str, key: str, raw: Any) -> Point:
    def bad(message: str) -> ProfilingInputError:
        return ProfilingInputError(path, f"point {key!r}: {message}")

    try:
        point_id = int(key)
    except ValueError:
        raise bad("ids must be integers") from None
    if not 0 <= point_id <= 0xFFFFFFFF:
        raise bad("ids must fit in 32 bits")
    if point_id == FINGERPRINT_POINT_ID:
        raise bad("id 0 is reserved for the build-fingerprint record")
    if not isinstance(raw, dict):
        raise bad("entry must be an object")
    label = raw.get("label")
    if not isinstance(label, str) or not label.strip():
        raise bad("missing 'label'")
    # Written into every trace and report: a lone surrogate cannot be written as UTF-8 (a
    # .pftrace's strings), and a NUL ends the label in every viewer downstream.
    checked_name(path, label, f"point {key!r}: label")
    event_type = raw.get("event_type")
    if event_type not in ("B", "E"):
        raise bad(f"'event_type' must be \"B\" or \"E\", not {event_type!r}")
    line = raw.get("line")
    # A source line: what JSON writes in a span's `src` and a .pftrace in 32 bits, alike.
    if line is not None and (not isinstance(line, int) or isinstance(line, bool) or not 0 <= line < 2**31):
        raise bad("'line' must be a line number (a whole number from 0)")
    file = raw.get("file")
    if file is not None and not isinstance(file, str):
        raise bad("'file' must be a path (a string)")
    if file is not None and "\x00" in file:  # a path's bytes are kept (lone surrogates too), a NUL none has
        raise bad(f"'file' {file[:60]!r} holds a NUL character")
    try:  # a path named in bytes that are not UTF-8 reads back as \udc80-\udcff; other surrogates no path has
        (file or "").encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise bad(f"'file' {(file or '')[:60]!r} holds a lone surrogate that is no path's byte") from None
    return Point(
        point_id=point_id,
        label=label,
        event_type=event_type,
        file=file or "",
        line=line,
        event_id=raw.get("event_id"),
        indexed=raw.get("indexed") is True,
    )


def parse_point_map(path: str, document: Any) -> PointMap:
    if not isinstance(document, dict) or not isinstance(document.get("points"), dict):
        raise ProfilingInputError(path, 'not a point map: expected {"points": {...}}')
    points = {}
    for key, raw in document["points"].items():
        point = _entry(path, key, raw)
        points[point.point_id] = point
    fingerprint = document.get("fingerprint")
    if fingerprint is not None and (
        not isinstance(fingerprint, int) or not 0 <= fingerprint <= 0xFFFFFFFF
    ):
        raise ProfilingInputError(path, f"'fingerprint' must be a uint32, not {fingerprint!r}")
    version = document.get("format_version")
    cores = document.get("cores")
    if cores is not None and (
        not isinstance(cores, list) or not cores
        or not all(isinstance(c, str) and c in CORE_TYPES for c in cores)
    ):
        raise ProfilingInputError(path, f"'cores' must list \"AIC\" and/or \"AIV\", not {cores!r}")
    return PointMap.build(path, points, fingerprint, version if isinstance(version, int) else None,
                          frozenset(cores) if cores is not None else None)


def load_point_map(path: str | Path) -> PointMap:
    """Load and validate a map; any problem is a ProfilingInputError naming the file."""
    source = str(path)
    try:
        text = read_regular(path, "point_map")  # regular and bounded (runtime/regular.py)
    except FileNotFoundError:
        raise ProfilingInputError(source, "point map not found") from None
    except OSError as exc:
        raise ProfilingInputError(source, f"cannot read point map: {exc.strerror or exc}") from None
    try:
        try:
            document = parse_json(text)  # strict: no NaN, no huge numbers, no deep nesting
        except BadJSON:
            if text.isascii():
                raise
            # Input files are bytes (cli.md): a GBK source path in the map is kept as is.
            document = parse_json(text.decode("utf-8", "surrogateescape"))
    except BadJSON as exc:
        raise ProfilingInputError(source, f"point map is not valid JSON: {exc}") from None
    return parse_point_map(source, document)


def resolve_point_map(profiling_dir: Path, explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    beside = profiling_dir / POINT_MAP_NAME
    if os.path.lexists(beside):  # a FIFO or a directory there is named when it is read
        return beside
    raise ProfilingInputError(
        profiling_dir, f"no {POINT_MAP_NAME} beside the rank files: pass --point-map MAP"
    )
