"""collect's first pass: where every rank file goes in the trace, before any is written.

Two levels. The launches of one rank go one after the other on its tracks, by their
cycles or end to end (:mod:`launches`); the ranks are placed against each other by
:mod:`align` (anchors, ``--align``), each rank by its first launch — or, with
``--merge``, every launch by its kernel slice. The result fixes each file's time origin
(ns) and the order files are written in (rank by rank, each rank's launches in time
order), so collect can still decode and write one file at a time, in any number of
processes, and get the same bytes.

Files of a rank that has several are read in full here (their cycles place them); a
rank of one file only needs its anchor, from the pickle alone, as before.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .align import Alignment, AlignmentError, AlignSpec, Anchor, LabelEnds, align, joined_ends, label_ends
from .decode import DecodeOptions, RankDecode, decode_rank
from .errors import ProfilingInputError
from .format import DEFAULT_CLOCK_MHZ
from .launches import (
    END_TO_END,
    LaunchPlace,
    LaunchRange,
    RankLaunches,
    launch_range,
    lay_out_rank,
)
from .pointmap import PointMap
from .pt_reader import load_pt
from .rankfile import OPTRACE_KEY, RankBuffer, RankFileName, rank_buffer_from_object, read_rank_file
from .records import Record

#: The furthest a file's origin goes from the trace's 0 (ns; about 73 years).
ORIGIN_LIMIT_NS = 1 << 61

#: A host name shown in a rank's process name: what hostnames are made of, nothing a
#: viewer or a reader would trip on (the anchor's text comes from the file).
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def rank_process_name(rank: int, host: str | None) -> str:
    """``Rank 3``, or ``Rank 3 (node-a)`` when the ranks ran on several hosts and the
    rank's anchor names its own."""
    return f"Rank {rank} ({host})" if host else f"Rank {rank}"


class FileFacts(Record):
    """What the first pass learned of one rank file (``usable``: it could be read)."""

    __match_args__ = ("usable", "anchor", "clock_mhz", "range", "ends", "host")
    __slots__ = __match_args__
    usable: bool
    anchor: Anchor | None
    clock_mhz: float
    range: LaunchRange | None
    ends: LabelEnds | None
    host: str | None

    def __init__(self, usable: bool, anchor: Anchor | None = None, clock_mhz: float = DEFAULT_CLOCK_MHZ,
                 range: LaunchRange | None = None, ends: LabelEnds | None = None) -> None:
        self.usable = usable
        self.anchor = anchor
        self.clock_mhz = clock_mhz
        self.range = range
        self.ends = ends
        host = anchor.host if anchor is not None else None
        self.host = host if host is not None and _HOST_NAME.fullmatch(host) else None


class Placement(Record):
    """The files in the order they are written, and where each goes.

    ``alignment`` places the units :mod:`align` worked on — ranks, each by its first
    launch (``reference``), or with ``--merge`` the files themselves (``merged``);
    ``unit_of`` is each file's. ``places``: each file's launch within its rank;
    ``unit_ns``: its rank's unit (None: a rank of one file, its own clock's tick)."""

    __match_args__ = ("files", "alignment", "unit_of", "places", "unit_ns", "reference", "facts", "merged",
                      "hosts", "buffers")
    __slots__ = __match_args__
    files: list[tuple[RankFileName, Path]]
    alignment: Alignment
    unit_of: list[int]
    places: list[LaunchPlace]
    unit_ns: list[int | None]
    reference: list[int | None]  # the position of the file placing this one's rank (None: itself)
    facts: list[FileFacts]
    merged: bool
    hosts: dict[int, str]  # rank -> host, where an anchor names it and the ranks ran on several
    # position -> the file as the first pass read it, for the pass that writes it
    # (`take_buffer`); only where place_ranks was asked to keep them.
    buffers: dict[int, RankBuffer]

    def __init__(self, files: list[tuple[RankFileName, Path]], alignment: Alignment, unit_of: list[int],
                 places: list[LaunchPlace], unit_ns: list[int | None], reference: list[int | None],
                 facts: list[FileFacts], merged: bool, hosts: dict[int, str] | None = None,
                 buffers: dict[int, RankBuffer] | None = None) -> None:
        self.files = files
        self.alignment = alignment
        self.unit_of = unit_of
        self.places = places
        self.unit_ns = unit_ns
        self.reference = reference
        self.facts = facts
        self.merged = merged
        if hosts is None:
            hosts = {}
            for (name, _), found in zip(files, facts, strict=True):
                if found.host and name.rank not in hosts:
                    hosts[name.rank] = found.host
            if len(set(hosts.values())) < 2:
                hosts = {}  # one host: its name tells the ranks apart no better than their numbers
        self.hosts = hosts
        self.buffers = buffers if buffers is not None else {}

    def take_buffer(self, position: int) -> RankBuffer | None:
        """The file at ``position`` as the first pass read it, given out once (None: not
        kept, or given out already — read it again)."""
        return self.buffers.pop(position, None)

    def origin_ns(self, position: int, decoded: RankDecode, manual_us: float = 0.0) -> int:
        """Where the file's tick 0 (its decoder's base cycle) is in the trace, in ns."""
        reference = self.reference[position]
        place = self.places[position]
        if self.merged and reference is not None:
            shift_us = 0.0  # each launch where its kernel slice put it (places)
        elif reference is None:
            shift_us = self.alignment.offset_us(self.unit_of[position], decoded)
        else:
            found = self.facts[reference].range
            base = found.base if found is not None else decoded.base_cycle
            shift_us = self.alignment.offset_at(self.unit_of[position], base, self.facts[reference].clock_mhz)
        origin = round(shift_us * 1000.0) + round(manual_us * 1000.0) + place.offset_ns
        # Corrupt cycles can put a launch ~2**63 ticks away and the next one after it:
        # saturated, as the writers saturate times, so that a time plus it fits an int64.
        return max(-ORIGIN_LIMIT_NS, min(origin, ORIGIN_LIMIT_NS))

    def host(self, rank: int) -> str | None:
        """The rank's host, as its first anchor naming one says (None: not known)."""
        return self.hosts.get(rank)

    def alignment_metadata(self, positions: list[int], manual: dict[int, float]) -> dict[str, Any]:
        """The trace's ``alignment`` entry for the files at ``positions``."""
        units = list(dict.fromkeys(self.unit_of[p] for p in positions))
        return self.alignment.metadata(units, manual)

    def launch_metadata(self, position: int) -> dict[str, Any]:
        """How the file's launch was placed, for its entry of the trace's rank table."""
        place = self.places[position]
        entry: dict[str, Any] = {"placed": place.how}
        if place.why is not None:
            entry["placed_why"] = place.why
        return entry

    def notes(self) -> list[str]:
        """Launches laid end to end, for collect's summary: a few named, all counted."""
        apart = [(self.files[p][1].name, place.why) for p, place in enumerate(self.places)
                 if place.how == END_TO_END and self.facts[p].usable]
        if not apart:
            return []
        shown = "; ".join(f"{name}: {why}" for name, why in apart[:4])
        more = f"; and {len(apart) - 4} more" if len(apart) > 4 else ""
        count = f"{len(apart)} launch{'es' if len(apart) != 1 else ''}"
        return [f"{count} laid end to end after the launch before (their cycles do not place them; see the "
                f"trace's rank table): {shown}{more}"]


def _facts(name: RankFileName, path: Path, full: bool, point_map: PointMap, options: DecodeOptions,
           spec: AlignSpec | None, keep: bool) -> tuple[FileFacts, RankBuffer | None]:
    """What the first pass learns of a file and, with ``keep``, the file as it read it
    in full (None: not read in full, or not a rank buffer: the writing pass reads it
    again and says why)."""
    try:
        if full or spec is not None:
            buffer = read_rank_file(path, name.rank)
            clock = float(options.clock_mhz or buffer.meta.clock_mhz or DEFAULT_CLOCK_MHZ)
            ends = None
            if spec is not None:
                ends = label_ends(decode_rank(buffer, point_map, options), point_map, spec.label)
            return FileFacts(True, Anchor.from_meta(buffer.meta), clock,
                             launch_range(buffer, clock) if full else None, ends), buffer if keep else None
        kept = _read_whole(path, name.rank) if keep else None
        whole: RankBuffer | None = None
        if kept is not None:
            (anchor, clock_meta), whole = kept
        else:
            anchor, clock_meta = _anchor_only(path)
    except ProfilingInputError:
        return FileFacts(False), None
    return FileFacts(True, anchor, float(options.clock_mhz or clock_meta or DEFAULT_CLOCK_MHZ)), whole


#: What a placement pass may keep of the files it read in full for the pass after it
#: (collect's writing, a reader's decoding), so small inputs are read once.
KEEP_READ_BYTES = 32 << 20


def place_ranks(
    files: list[tuple[RankFileName, Path]], point_map: PointMap, decode_options: DecodeOptions,
    spec: AlignSpec | None, merged: Alignment | None = None, keep_bytes: int = 0,
    advance: Callable[[int], None] | None = None,
) -> Placement:
    """Every file's place (see the module's doc). ``merged``: ``--merge``'s placement of
    each file (in the order of ``files``). A file that cannot be read here is left at
    its rank's end; writing reports it. ``keep_bytes``: read files in full here and keep
    them for the writing pass (``Placement.take_buffer``) instead of reading them twice,
    while their records in memory add up to no more than that (a compressed file can
    hold far more than its size on disk); the files after are read twice. ``advance``
    is told how many files the pass has been through (progress)."""
    if spec is not None and spec.label not in point_map.labels:
        raise AlignmentError(f"--align: {spec.label!r} is not a label of {point_map.path}")
    by_rank: dict[int, list[int]] = {}
    for position, (name, _) in enumerate(files):
        by_rank.setdefault(name.rank, []).append(position)
    first_pass: list[tuple[FileFacts, RankBuffer | None]] = []
    room = keep_bytes
    for done, (name, path) in enumerate(files, 1):
        fact, buffer = _facts(name, path, len(by_rank[name.rank]) > 1, point_map, decode_options, spec,
                              room > 0)
        if buffer is not None:
            if buffer.data.nbytes > room:
                buffer, room = None, 0  # past the bound: this file and the rest read again
            else:
                room -= buffer.data.nbytes
        first_pass.append((fact, buffer))
        if advance is not None:
            advance(done)
    facts = [fact for fact, _ in first_pass]
    ranks: list[RankLaunches] = []
    for rank in sorted(by_rank):
        ranks.append(_lay_out(rank, by_rank[rank], files, facts, merged))
    order = [p for laid in ranks for p in laid.positions]
    places: dict[int, LaunchPlace] = {}
    reference: dict[int, int | None] = {}
    unit_ns: dict[int, int | None] = {}
    for laid in ranks:
        several = len(laid.positions) > 1
        first = next((p for p in laid.positions if facts[p].usable), laid.positions[0])
        for p, place in zip(laid.positions, laid.places, strict=True):
            places[p], reference[p] = place, first if several else None
            unit_ns[p] = laid.unit_ns if several else None
    if merged is not None:
        alignment, unit_of = merged, order
    else:
        alignment = _align_ranks(ranks, files, facts, spec, places, reference)
        rank_unit = {laid.rank: k for k, laid in enumerate(ranks)}
        unit_of = [rank_unit[files[p][0].rank] for p in order]
    new_position = {p: n for n, p in enumerate(order)}
    references: list[int | None] = [None if (found := reference[p]) is None else new_position[found]
                                    for p in order]
    buffers = {n: buffer for n, p in enumerate(order) if (buffer := first_pass[p][1]) is not None}
    return Placement([files[p] for p in order], alignment, unit_of, [places[p] for p in order],
                     [unit_ns[p] for p in order], references, [facts[p] for p in order], merged is not None,
                     buffers=buffers)


def _lay_out(rank: int, positions: list[int], files: list[tuple[RankFileName, Path]], facts: list[FileFacts],
             merged: Alignment | None) -> RankLaunches:
    """A rank's launches in time order, placed; files that could not be read at its end."""
    usable = [p for p in positions if facts[p].usable]
    unusable = [p for p in positions if not facts[p].usable]
    if len(positions) == 1 or not usable:
        return RankLaunches(rank, usable + unusable, [LaunchPlace() for _ in positions], 1)
    fixed: list[int | None] | None = None
    if merged is not None:
        fixed = []
        for p in usable:
            found = facts[p].range
            base = found.base if found is not None else 0
            fixed.append(round(merged.offset_at(p, base, facts[p].clock_mhz) * 1000.0))
    laid = lay_out_rank(rank, [(p, files[p][0], files[p][1].name) for p in usable],
                        [facts[p].range for p in usable], [facts[p].clock_mhz for p in usable], fixed)
    laid.positions += unusable
    laid.places += [LaunchPlace() for _ in unusable]
    return laid


def _align_ranks(ranks: list[RankLaunches], files: list[tuple[RankFileName, Path]], facts: list[FileFacts],
                 spec: AlignSpec | None, places: dict[int, LaunchPlace],
                 reference: dict[int, int | None]) -> Alignment:
    """The ranks against each other (:func:`align.align`), each by its first launch: its
    anchor; with ``--align``, the label's occurrences over all its launches, each launch
    where its rank's timeline has it."""
    usable: list[int] = []  # ranks (indices into ``ranks``)
    anchors: list[Anchor | None] = []
    clocks: list[float] = []
    ends: list[LabelEnds] = []
    for k, laid in enumerate(ranks):
        first = _first(laid, reference)
        if not facts[first].usable:
            continue
        usable.append(k)
        anchors.append(facts[first].anchor)
        clocks.append(facts[first].clock_mhz)
        if spec is not None:
            parts = [(found, places[p].offset_ns / 1000.0) for p in laid.positions
                     if (found := facts[p].ends) is not None]
            ends.append(joined_ends(parts))
    firsts = [_first(laid, reference) for laid in ranks]
    if spec is None and any(anchors) and not all(anchors):
        # A rank without an anchor turns the anchors off for all, unless it is unusable
        # anyway (reported when the trace is written): only those are read in full.
        kept = [n for n, (k, anchor) in enumerate(zip(usable, anchors, strict=True))
                if anchor is not None or _readable(*files[firsts[k]])]
        usable, anchors = [usable[n] for n in kept], [anchors[n] for n in kept]
        clocks = [clocks[n] for n in kept]
    names = [(files[firsts[k]][1].name, ranks[k].rank) for k in usable]
    placed = align(names, anchors, clocks, ends if spec is not None else None, spec) if usable else None
    everyone = align([(files[p][1].name, laid.rank) for p, laid in zip(firsts, ranks, strict=True)],
                     [None] * len(ranks), [DEFAULT_CLOCK_MHZ] * len(ranks))
    if placed is None:
        return everyone
    for k, placement in zip(usable, placed.placements, strict=True):
        everyone.placements[k] = placement
    placed.placements = everyone.placements
    return placed


def _first(laid: RankLaunches, reference: dict[int, int | None]) -> int:
    """The position of the file that places the rank: its first launch that can be read."""
    found = reference[laid.positions[0]]
    return laid.positions[0] if found is None else found


def _readable(name: RankFileName, path: Path) -> bool:
    try:
        read_rank_file(path, name.rank)
    except ProfilingInputError:
        return False
    return True


def _anchor_only(path: Path) -> tuple[Anchor | None, float | None]:
    """A rank file's anchor and clock rate, without building its buffer: a legacy file (a
    list of tensors) has neither, and reading it as a rank buffer would copy its tensors
    into one for nothing. The file is checked when the trace is written.

    Only the pickle is read at first (the anchor and clock are in it): reading and
    checksumming every storage here as well, then again when the trace is written, was
    a tenth of a legacy collect's decoding. A file with an anchor is then read in full,
    so that a damaged one stays out of the placement as before; one without an anchor
    needs no more: place_ranks reads those in full itself when the placement depends on
    them (some files have anchors), and otherwise every file starts at 0 anyway."""
    document = load_pt(path, tensors=False)
    anchor, clock = _anchor_of(document)
    if anchor is not None:
        load_pt(path)  # raises ProfilingInputError for a damaged storage, as it always did
    return anchor, clock


def _read_whole(path: Path, rank: int) -> tuple[tuple[Anchor | None, float | None], RankBuffer | None] | None:
    """:func:`_anchor_only`'s answer from the file read in full once, and the file as a
    rank buffer (None where it is not one: the writing pass says why); None where the
    file cannot be read in full (then :func:`_anchor_only` reads what it can, as before)."""
    try:
        document = load_pt(path)
    except ProfilingInputError:
        return None
    answer = _anchor_of(document)
    try:
        return answer, rank_buffer_from_object(path, document, rank)
    except ProfilingInputError:
        return answer, None


def _anchor_of(document: Any) -> tuple[Anchor | None, float | None]:
    """A rank file's anchor and clock rate from what its pickle holds (a legacy file, a
    list of tensors, has neither)."""
    meta = document.get("meta") if isinstance(document, dict) and OPTRACE_KEY in document else None
    if not isinstance(meta, dict):
        return None, None
    extra = meta.get("extra")
    anchor = Anchor.from_raw(extra.get("anchor")) if isinstance(extra, dict) else None
    clock = meta.get("clock_mhz")
    if isinstance(clock, (int, float)) and not isinstance(clock, bool) and math.isfinite(clock) and clock > 0:
        return anchor, float(clock)
    return anchor, None

