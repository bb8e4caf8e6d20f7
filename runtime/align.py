"""Ranks on one time axis: where each rank's timeline starts in the trace.

Each device counts cycles from its own boot (docs/runtime.md), so two ranks' raw times say
nothing about each other; a rank's launches lie on its timeline by their cycles
(:mod:`launches`), and the rank is placed by its first launch (collect gives :func:`align`
one entry a rank, that launch's file; ``--merge`` one a file). Three sources place them,
in this order:

- **anchors** (written by :func:`save.save_profiling_data`): the host clocks read right
  after the device sync, with the kernel's first start cycle and its last recorded cycle.
  The sync returns just after the kernel's last record, so the rank's start sits
  ``(end - start) / clock`` before the host reading. Monotonic clocks are compared when
  every file comes from one boot of one host, wall clocks otherwise. Used only when every
  file has one: mixing placed and unplaced ranks would look aligned and be wrong. The
  clocks are also read right before the sync: when the sync waited for the kernel, the
  host reading is late by at most that window, so the uncertainty is the largest window
  plus one tick (:func:`anchor_uncertainty`; none when a sync did not wait or a file
  predates the window).
- ``--align LABEL[@N]``: per file, the end of the N-th occurrence of LABEL on each core
  that ran it, their median; files are shifted so these coincide (refining the anchors'
  placement when there are anchors: the common time is the median of the anchored ends).
- ``--rank-offsets``: a manual correction added last.

Without anchors or ``--align`` every rank starts at 0 and the method is "not aligned".
The result (:class:`Alignment`) also goes into the trace's metadata: method, per-file
shift and residual, and the uncertainty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .decode import RECORD_SPREAD_LIMIT_NS, RankDecode, signed_delta
from .format import DEFAULT_CLOCK_MHZ, RankMeta
from .numbers import ALIGN_OCCURRENCE, check_number
from .pointmap import PointMap
from .records import FrozenRecord, Record

NOT_ALIGNED = "not aligned"
#: The method of ``collect --merge`` (merge.py): each launch placed in its kernel slice.
MERGED = "framework trace"
#: A sync window of at least this many empty syncs' durations means the sync waited for
#: the kernel (Anchor.sync_waited). A heuristic: a sync's latency varies, and twice the
#: one measured leaves room for that; not validated on hardware.
SYNC_WAITED_FACTOR = 2


class AlignmentError(Exception):
    """``--align`` cannot be applied to these files (a usage problem: exit 2)."""


class AlignSpec(FrozenRecord):
    """``--align LABEL[@N]``: the N-th (1-based) occurrence of LABEL."""

    __match_args__ = ("label", "occurrence")
    __slots__ = __match_args__
    label: str
    occurrence: int

    def __init__(self, label: str, occurrence: int = 1) -> None:
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "occurrence", occurrence)

    def __str__(self) -> str:
        return f"{self.label}@{self.occurrence}"


def parse_align(text: str) -> AlignSpec:
    """``"barrier"`` or ``"barrier@3"``; ValueError (``--align ...``) otherwise. N passes
    check_number like every number a user gives (runtime/numbers.py): an integer in
    [1, 2^24] — not 0, negative, 2.5, 1e400, nan or a word."""
    label, at, number = text.strip().rpartition("@") if "@" in text else (text.strip(), "", "")
    label = label.strip()
    if not label:
        raise ValueError(f"--align: {text!r} has no label (expected LABEL or LABEL@N)")
    occurrence = 1
    if at:
        occurrence = int(check_number(f"--align {text.strip()!r}: N", _as_number(number), ALIGN_OCCURRENCE))
    return AlignSpec(label, occurrence)


def _as_number(text: str) -> object:
    """N as written, for check_number to judge: an int, else a float ("2.5", "1e400" ->
    inf, "nan"), else the text itself (not a number at all)."""
    text = text.strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:  # int() of more than 4300 digits too: then float() says inf
            continue
    return text


class Anchor(FrozenRecord):
    """One rank file's host anchor (see :func:`save.host_anchor`).

    ``host_*_before_ns`` (the clocks read right before the device sync) and
    ``empty_sync_ns`` (how long a second sync with nothing to wait for took) measure the
    anchor's error; files saved by an older optrace, or without a device sync (a numpy
    buffer, no simulated clock), lack them (None)."""

    __match_args__ = ("host_monotonic_ns", "host_wall_ns", "start_cycle", "end_cycle", "device_id",
                      "host", "boot_id", "host_monotonic_before_ns", "host_wall_before_ns", "empty_sync_ns")
    __slots__ = __match_args__
    host_monotonic_ns: int
    host_wall_ns: int
    start_cycle: int
    end_cycle: int
    device_id: int | None
    host: str | None
    boot_id: str | None
    host_monotonic_before_ns: int | None
    host_wall_before_ns: int | None
    empty_sync_ns: int | None

    def __init__(self, host_monotonic_ns: int, host_wall_ns: int, start_cycle: int, end_cycle: int,
                 device_id: int | None = None, host: str | None = None, boot_id: str | None = None,
                 host_monotonic_before_ns: int | None = None, host_wall_before_ns: int | None = None,
                 empty_sync_ns: int | None = None) -> None:
        for name, value in zip(self.__match_args__, (host_monotonic_ns, host_wall_ns, start_cycle, end_cycle,
                                                      device_id, host, boot_id, host_monotonic_before_ns,
                                                      host_wall_before_ns, empty_sync_ns), strict=True):
            object.__setattr__(self, name, value)

    @classmethod
    def from_meta(cls, meta: RankMeta) -> Anchor | None:
        """The anchor a rank file holds, or None (legacy files, older optrace, or a value
        that is not what save writes: an anchor that cannot be trusted is not used)."""
        return cls.from_raw(meta.extra.get("anchor") if isinstance(meta.extra, dict) else None)

    @classmethod
    def from_raw(cls, raw: Any) -> Anchor | None:
        """The anchor from the dict save wrote, or None for anything else. The sync
        window's fields are optional (older files lack them): one that is missing or not
        what save writes leaves the window unknown, not the anchor unused, since the
        placement does not rest on it."""
        if not isinstance(raw, dict):
            return None

        def integer(key: str, low: int, high: int) -> int | None:
            value = raw.get(key)
            ok = isinstance(value, int) and not isinstance(value, bool) and low <= value < high
            return value if ok else None

        numbers = [integer("host_monotonic_ns", 0, 1 << 63), integer("host_wall_ns", 0, 1 << 63),
                   integer("start_cycle", 0, 1 << 64), integer("end_cycle", 0, 1 << 64)]
        if any(n is None for n in numbers):
            return None
        device = integer("device_id", 0, 1 << 31)
        host, boot = raw.get("host"), raw.get("boot_id")
        mono, wall, start, end = (int(n) for n in numbers if n is not None)
        window = [integer("host_monotonic_before_ns", 0, mono + 1),  # not after the reading
                  integer("host_wall_before_ns", 0, 1 << 63), integer("empty_sync_ns", 0, 1 << 63)]
        before_mono, before_wall, empty = window if None not in window else (None, None, None)
        return cls(mono, wall, start, end, device, host if isinstance(host, str) else None,
                   boot if isinstance(boot, str) else None, before_mono, before_wall, empty)

    @property
    def sync_window_ns(self) -> int | None:
        """Monotonic ns from just before the device sync to the host reading, or None
        (not recorded). The monotonic clock, not the wall clock: NTP may step the latter."""
        if self.host_monotonic_before_ns is None:
            return None
        return self.host_monotonic_ns - self.host_monotonic_before_ns

    @property
    def sync_waited(self) -> bool | None:
        """Whether the sync waited for the kernel (None: not recorded). A sync that found
        the device idle takes about as long as the empty one after it; one that had to
        wait takes longer. Below SYNC_WAITED_FACTOR empty syncs the window cannot be told
        from a sync's own latency, so the kernel may have ended before save was called."""
        window = self.sync_window_ns
        if window is None or self.empty_sync_ns is None:
            return None
        return window >= SYNC_WAITED_FACTOR * self.empty_sync_ns

    def host_ns(self, monotonic: bool) -> int:
        return self.host_monotonic_ns if monotonic else self.host_wall_ns

    def host_ns_at_start(self, clock_mhz: float, monotonic: bool, reference: int) -> float:
        """Host time (ns after ``reference``) of ``start_cycle``: the last record is the
        host reading. The difference is taken in integers first: a wall clock's ns since
        the epoch (~1.7e18) is only good to 256 ns as a double."""
        span_cycles = signed_delta(self.end_cycle - self.start_cycle)
        return float(self.host_ns(monotonic) - reference) - span_cycles * 1000.0 / clock_mhz


class LabelEnds(Record):
    """The ends (µs from the rank's base cycle) of every occurrence of a label, per core
    (``slots``: each core's slot, to join the launches of one rank core by core)."""

    __match_args__ = ("per_core", "clock_mhz", "base_cycle", "slots")
    __slots__ = __match_args__
    per_core: list[np.ndarray]  # one sorted-by-start array per core that ran the label
    clock_mhz: float
    base_cycle: int | None  # the decoded rank's base cycle, which the ends count from
    slots: list[int]

    def __init__(self, per_core: list[np.ndarray], clock_mhz: float, base_cycle: int | None = None,
                 slots: list[int] | None = None) -> None:
        self.per_core = per_core
        self.clock_mhz = clock_mhz
        self.base_cycle = base_cycle
        self.slots = list(range(len(per_core))) if slots is None else slots

    def occurrences(self) -> int:
        """How many times the label ran on the core that ran it most."""
        return max((a.size for a in self.per_core), default=0)

    def ends(self, occurrence: int) -> np.ndarray:
        """The ends (µs) of the ``occurrence``-th (1-based) run on each core that has one."""
        return np.array([a[occurrence - 1] for a in self.per_core if a.size >= occurrence], dtype=np.float64)


def joined_ends(parts: Sequence[tuple[LabelEnds, float]]) -> LabelEnds:
    """A rank's launches as one timeline: each launch's ends moved by its offset (µs from
    the first launch's base), core by core, in time order. The first part's clock and base."""
    per_slot: dict[int, list[np.ndarray]] = {}
    for found, offset_us in parts:
        for slot, ends in zip(found.slots, found.per_core, strict=True):
            per_slot.setdefault(slot, []).append(ends + offset_us)
    slots = sorted(per_slot)
    first = parts[0][0]
    return LabelEnds([np.sort(np.concatenate(per_slot[s])) for s in slots], first.clock_mhz, first.base_cycle,
                     slots)


def label_ends(decoded: RankDecode, point_map: PointMap, label: str) -> LabelEnds:
    """Every occurrence of ``label`` in a decoded rank, per core, in start order."""
    clock = decoded.clock_mhz
    try:
        index = point_map.labels.index(label)
    except ValueError:
        return LabelEnds([], clock, decoded.base_cycle)
    per_core = []
    slots = []
    for core in decoded.cores:
        mask = core.label == index
        if mask.any():
            order = np.argsort(core.start[mask], kind="stable")
            per_core.append(core.end[mask][order].astype(np.float64) / clock)
            slots.append(core.slot)
    return LabelEnds(per_core, clock, decoded.base_cycle, slots)


class RankPlacement(Record):
    """Where one rank file goes: ``shift_us`` at its base cycle, and what it rests on."""

    __match_args__ = ("file", "rank", "shift_us", "anchor_us", "label_end_us", "spread_us",
                      "residual_us", "anchor_start_cycle", "clock_mhz", "sync_window_us", "empty_sync_us")
    __slots__ = __match_args__
    file: str
    rank: int
    shift_us: float
    anchor_us: float | None  # the anchors' placement alone (at the anchor's start cycle)
    label_end_us: float | None  # --align: the median end, before the shift
    spread_us: float | None  # --align: max |core end - aligned time| at the aligned occurrence
    residual_us: float | None  # --align: the same over every occurrence all files ran
    anchor_start_cycle: int | None
    clock_mhz: float
    sync_window_us: float | None  # the anchor's sync window: its host reading is late by at most this
    empty_sync_us: float | None  # an empty sync's duration, measured after it (see Anchor.sync_waited)

    def __init__(self, file: str, rank: int, shift_us: float = 0.0, anchor_us: float | None = None,
                 label_end_us: float | None = None, spread_us: float | None = None,
                 residual_us: float | None = None, anchor_start_cycle: int | None = None,
                 clock_mhz: float = DEFAULT_CLOCK_MHZ, sync_window_us: float | None = None,
                 empty_sync_us: float | None = None) -> None:
        self.file = file
        self.rank = rank
        self.shift_us = shift_us
        self.anchor_us = anchor_us
        self.label_end_us = label_end_us
        self.spread_us = spread_us
        self.residual_us = residual_us
        self.anchor_start_cycle = anchor_start_cycle
        self.clock_mhz = clock_mhz
        self.sync_window_us = sync_window_us
        self.empty_sync_us = empty_sync_us


class Alignment(Record):
    """Every rank file's placement and how it was found (the trace's ``alignment``)."""

    __match_args__ = ("method", "placements", "spec", "clock", "occurrences_used", "uncertainty_us",
                      "notes")
    __slots__ = __match_args__
    method: str
    placements: list[RankPlacement]
    spec: AlignSpec | None
    clock: str | None  # the host clock the anchors were compared on
    occurrences_used: int  # --align: occurrences of LABEL the residual is taken over
    uncertainty_us: float | None
    notes: list[str]

    def __init__(self, method: str, placements: list[RankPlacement], spec: AlignSpec | None = None,
                 clock: str | None = None, occurrences_used: int = 0, uncertainty_us: float | None = None,
                 notes: list[str] | None = None) -> None:
        self.method = method
        self.placements = placements
        self.spec = spec
        self.clock = clock
        self.occurrences_used = occurrences_used
        self.uncertainty_us = uncertainty_us
        self.notes = [] if notes is None else notes

    def offset_us(self, position: int, decoded: RankDecode) -> float:
        """The shift of a decoded file's times (µs). Anchored shifts are taken at the
        anchor's start cycle; the decoder's base may lie after it (a corrupt slot left
        out), so the difference is added."""
        return self.offset_at(position, decoded.base_cycle, decoded.clock_mhz)

    def offset_at(self, position: int, base_cycle: int, clock_mhz: float) -> float:
        """:meth:`offset_us` of a file whose decoder counts from ``base_cycle``."""
        placement = self.placements[position]
        shift = placement.shift_us
        if placement.label_end_us is None and placement.anchor_start_cycle is not None:
            apart_us = signed_delta(base_cycle - placement.anchor_start_cycle) / clock_mhz
            # Years apart, the anchor's start word was not this launch's (a corrupt slot's,
            # which the decoder's base leaves out): counted, the trace's times would pass
            # what its readers take.
            if abs(apart_us) * 1000.0 <= RECORD_SPREAD_LIMIT_NS:
                shift += apart_us
        return shift

    def metadata(self, positions: Sequence[int], manual: dict[int, float]) -> dict[str, Any]:
        """The trace's ``alignment`` entry for the files at ``positions``."""
        method = self.method + (" + manual offsets" if manual else "")
        ranks = []
        for p in positions:
            placement = self.placements[p]
            entry: dict[str, Any] = {"file": placement.file, "rank": placement.rank,
                                     "shift_us": _rounded(placement.shift_us)}
            if placement.rank in manual:
                entry["manual_offset_us"] = manual[placement.rank]
            for key in ("anchor_us", "label_end_us", "spread_us", "residual_us", "sync_window_us",
                        "empty_sync_us"):
                value = getattr(placement, key)
                if value is not None:
                    entry[key] = _rounded(value)
            if placement.anchor_us is not None and placement.label_end_us is not None:
                # What --align moved the anchored placement by: the anchors' error here.
                entry["anchor_correction_us"] = _rounded(placement.shift_us - placement.anchor_us)
            ranks.append(entry)
        document: dict[str, Any] = {"method": method, "uncertainty_us": _rounded(self.uncertainty_us)}
        if self.spec is not None:
            document.update(label=self.spec.label, occurrence=self.spec.occurrence,
                            occurrences_used=self.occurrences_used)
        if self.clock is not None:
            document["host_clock"] = self.clock
        if self.notes:
            document["notes"] = list(self.notes)
        document["ranks"] = ranks
        return document

    def summary_lines(self) -> list[str]:
        """What collect prints: the method, then each file's shift and residual."""
        if self.method == NOT_ALIGNED:
            return [f"ranks not aligned: each starts at 0 ({'; '.join(self.notes)})" if self.notes
                    else "ranks not aligned: each starts at 0 (no anchors; see --align)"]
        head = f"ranks aligned by {self.method}"
        if self.method == MERGED:
            head = "launches placed under their kernel slices of the framework trace"
        if self.uncertainty_us is not None:
            head += f", uncertainty {self.uncertainty_us:.3f} µs"
        lines = [head]
        # Per file only when --align was asked (its residuals are the point); the anchors'
        # shifts of hundreds of ranks are in the trace's metadata.
        for p in self.placements if self.spec is not None else []:
            line = f"  {p.file}: shift {p.shift_us:.3f} µs"
            if p.residual_us is not None:
                line += f", residual {p.residual_us:.3f} µs (spread at the aligned end {p.spread_us:.3f} µs)"
            if p.anchor_us is not None and p.label_end_us is not None:
                line += f", anchor corrected by {p.shift_us - p.anchor_us:+.3f} µs"
            lines.append(line)
        lines.extend(f"  note: {note}" for note in self.notes)
        return lines


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _host_count(anchors: Sequence[Anchor]) -> tuple[int, bool]:
    """How many (host, boot) pairs the anchors come from, and whether their monotonic
    clocks compare (one known boot of one known host)."""
    hosts = {(a.host, a.boot_id) for a in anchors}
    return len(hosts), len(hosts) == 1 and None not in next(iter(hosts))


#: The furthest apart anchors may place a run's ranks (~3 years): past it they are not used.
ANCHOR_SPREAD_LIMIT_NS = 10**17


def place_by_anchors(
    files: Sequence[tuple[str, int]], anchors: Sequence[Anchor | None], clocks: Sequence[float]
) -> tuple[list[float] | None, str | None, list[str]]:
    """Each file's start (µs, the earliest at 0) from its anchor, the host clock used,
    and notes; (None, None, notes) when not every file has an anchor."""
    missing = [name for (name, _), anchor in zip(files, anchors, strict=True) if anchor is None]
    if missing:
        notes = []
        if len(missing) < len(files):  # some have one: say why they are not used
            shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
            notes.append(f"anchors not used: {len(missing)} of {len(files)} rank files have none ({shown})")
        return None, None, notes
    present = [a for a in anchors if a is not None]
    hosts, monotonic = _host_count(present)
    clock = "monotonic, one host" if monotonic else f"wall clock, {hosts} hosts or boots"
    reference = present[0].host_ns(monotonic)
    starts = [a.host_ns_at_start(c, monotonic, reference) for a, c in zip(present, clocks, strict=True)]
    first = min(starts)
    if max(starts) - first > ANCHOR_SPREAD_LIMIT_NS:
        # No job's ranks start years apart: another clock (a corrupt or foreign anchor).
        # Placed by them, the trace's times would pass what its readers take (1e18 ns).
        years = (max(starts) - first) / 3.15576e16
        latest = files[starts.index(max(starts))][0]
        return None, None, [f"anchors not used: they place {latest} {years:.3g} years after the first rank "
                            "(another clock)"]
    return [(s - first) / 1000.0 for s in starts], clock, []


def _listed(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def anchor_uncertainty(
    files: Sequence[tuple[str, int]], anchors: Sequence[Anchor], clocks: Sequence[float]
) -> tuple[float | None, list[str]]:
    """The uncertainty (µs) of the anchors' placement alone, and notes saying what it
    rests on; None with a note naming the files when it cannot be given.

    An anchor maps the kernel's last record to the host reading taken right after the
    sync returned. When the sync waited, the kernel was still running when it was called,
    so its last record lies between the readings before and after the sync: the rank is
    placed late by 0 to its window, never early. Two ranks then disagree by at most the
    larger window, plus one tick (the cycles are whole). When a sync did not wait, the
    kernel had ended some unknown time before save was called: that rank's placement is
    only an upper bound on its start, and no figure is given."""
    names = [name for name, _ in files]
    unrecorded = [n for n, a in zip(names, anchors, strict=True) if a.sync_waited is None]
    idle = [(n, a) for n, a in zip(names, anchors, strict=True) if a.sync_waited is False]
    notes = []
    if unrecorded:
        notes.append(f"no uncertainty: no sync window in {_listed(unrecorded)} (saved by an older "
                     "optrace, or without a device sync)")
    if idle:
        shown = [f"{n} (window {(a.sync_window_ns or 0) / 1000:.3f} µs, empty sync "
                 f"{(a.empty_sync_ns or 0) / 1000:.3f} µs)" for n, a in idle]
        notes.append(
            f"no uncertainty: the sync did not wait for the kernel of {_listed(shown)}: the kernel had "
            "ended before save was called, so the anchor places the rank at or after its true start, "
            "later by an unknown amount")
    hosts, monotonic = _host_count(anchors)
    if not monotonic:
        notes.append(f"ranks on {hosts} hosts or boots are compared on their wall clocks: the hosts' clock "
                     "agreement is not measured and not in the uncertainty")
    if unrecorded or idle:
        return None, notes
    widest = max(range(len(anchors)), key=lambda k: anchors[k].sync_window_ns or 0)
    window_us = (anchors[widest].sync_window_ns or 0) / 1000.0
    tick = max(1.0 / c for c in clocks)
    notes.insert(0, (
        f"uncertainty: the largest host-device sync window ({names[widest]}, {window_us:.3f} µs) plus one "
        "tick; it assumes nothing ran on the device after the kernel's last trace point (the sync waits "
        "for untraced work or another kernel too, which add to the error) and leaves out the device "
        "clock's rate error over the kernel's length"))
    return window_us + tick, notes


def align(
    files: Sequence[tuple[str, int]],
    anchors: Sequence[Anchor | None],
    clocks: Sequence[float],
    ends: Sequence[LabelEnds] | None = None,
    spec: AlignSpec | None = None,
    groups: Sequence[Any] | None = None,
) -> Alignment:
    """Place the rank files (``files``: (file name, rank) in trace order).

    ``ends`` (with ``spec``): each file's occurrences of the label, for ``--align``;
    ``groups``: each file's launch (tag, launch index): the label's ends are made to
    coincide among the files of one launch (default: all files are one launch).
    Raises AlignmentError (``--align: ...``) when a file did not run the asked occurrence."""
    anchored, clock, notes = place_by_anchors(files, anchors, clocks)
    placements = [RankPlacement(name, rank, clock_mhz=c)
                  for (name, rank), c in zip(files, clocks, strict=True)]
    if anchored is not None:
        for placement, anchor, shift in zip(placements, anchors, anchored, strict=True):
            placement.shift_us = placement.anchor_us = shift
            placement.anchor_start_cycle = anchor.start_cycle if anchor is not None else None
            if anchor is not None and anchor.sync_window_ns is not None and anchor.empty_sync_ns is not None:
                placement.sync_window_us = anchor.sync_window_ns / 1000.0
                placement.empty_sync_us = anchor.empty_sync_ns / 1000.0
    if ends is None or spec is None:
        if anchored is None:
            return Alignment(NOT_ALIGNED, placements, notes=notes)
        uncertainty, measured = anchor_uncertainty(files, [a for a in anchors if a is not None], clocks)
        return Alignment("anchors", placements, clock=clock, uncertainty_us=uncertainty,
                         notes=[*notes, *measured, "--align LABEL measures the placement and refines it"])

    n = spec.occurrence
    label_end = []
    for (name, _), found in zip(files, ends, strict=True):
        got = found.ends(n)
        if got.size == 0:
            runs = found.occurrences()
            raise AlignmentError(
                f"--align: {name} ran {spec.label!r} {runs} time{'s' if runs != 1 else ''} on its busiest "
                f"core, occurrence {n} asked" if runs else f"--align: {name} has no span {spec.label!r}")
        label_end.append(float(np.median(got)))
    if anchored is not None:
        # The anchors place the anchor's start cycle; the ends count from the decoded
        # base (the same cycle unless a slot was left out as corrupt).
        for k, (anchor, found) in enumerate(zip(anchors, ends, strict=True)):
            if anchor is not None and found.base_cycle is not None:
                anchored[k] += signed_delta(found.base_cycle - anchor.start_cycle) / found.clock_mhz
                placements[k].anchor_us = anchored[k]
    # The label's ends coincide within a group (one launch of every rank); several
    # launches stay apart where the anchors put them.
    members: dict[Any, list[int]] = {}
    for k, key in enumerate(groups if groups is not None else [0] * len(files)):
        members.setdefault(key, []).append(k)
    shifts = [0.0] * len(files)
    for group in members.values():
        if anchored is not None:  # keep the anchors' placement of the group as a whole
            target = float(np.median([anchored[k] + label_end[k] for k in group]))
        else:
            target = max(label_end[k] for k in group)
        for k in group:
            shifts[k] = target - label_end[k]
    lowest = min(shifts)
    shifts = [s - lowest for s in shifts]  # the earliest file starts at 0
    for placement in placements:  # the anchors' placement on the same origin, to compare
        if placement.anchor_us is not None:
            placement.anchor_us -= lowest

    for placement, shift, end in zip(placements, shifts, label_end, strict=True):
        placement.shift_us = shift
        placement.label_end_us = end
        placement.anchor_start_cycle = None  # the shift is taken at the decoded base
        placement.spread_us = placement.residual_us = 0.0
    # Residual over every occurrence all files of a group ran: with one clock per device
    # the cores of a rank agree at the aligned occurrence, so a rank's clock running at
    # another rate (drift) shows as ends that move away from the others' occurrence by
    # occurrence.
    used = min(found.occurrences() for found in ends)
    for group in members.values():
        for k in range(1, min(ends[g].occurrences() for g in group) + 1):
            per_file = {g: ends[g].ends(k) for g in group}
            medians = [shifts[g] + float(np.median(e)) for g, e in per_file.items() if e.size]
            common = float(np.median(medians))
            for g, e in per_file.items():
                if not e.size:
                    continue
                placement = placements[g]
                worst = float(np.max(np.abs(shifts[g] + e - common)))
                placement.residual_us = max(placement.residual_us or 0.0, worst)
                if k == n:
                    placement.spread_us = worst
    # One tick: the ends themselves are whole cycles.
    tick = max(1.0 / c for c in clocks)
    uncertainty = max((p.residual_us or 0.0) for p in placements) + tick
    method = f"label {spec}" if anchored is None else f"anchors + label {spec}"
    return Alignment(method, placements, spec=spec, clock=clock, occurrences_used=used,
                     uncertainty_us=uncertainty, notes=notes)
