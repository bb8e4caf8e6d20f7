"""One rank's launches on one timeline: which comes first, and where each starts.

A trace has one process per rank and one thread per core; each launch (a rank file) is a
top-level ``launch K`` slice on its cores' threads, the launches of a rank one after the
other. A device counts cycles from its boot, so the launches of one rank compare in raw
cycles: each is placed at its first cycle's distance from the launch before it, which
keeps the idle time between them as the device saw it. Where two launches cannot be
compared that way, the later one is laid end to end after the earlier one, a gap of
:data:`LAUNCH_GAP_NS` between them, and the trace's metadata says why:

- one of them has **no cycles** (no record, or the file cannot be read);
- another **clock** rate or another **build fingerprint**: another program or setting,
  whose counter says nothing about this one's;
- its cycles **go back** to before the earlier launch's start (the counter restarted: a
  reboot), or **overlap** it (they cannot both have run on this device then), or lie
  **years after** it (:data:`CYCLES_GAP_LIMIT_NS`: another counter).

Order: a tag's launches in their launch order (the order save numbered them in), the
launches of different tags interleaved by their first cycle (ops of one step). With
``collect --merge`` the framework trace places each launch (its kernel slice) instead of
the cycles, and only an overlap is laid end to end.

Every time here is an integer number of ns; within a rank all launch origins differ by a
multiple of the rank's unit (its clock's tick when all its launches share one that is a
whole number of ns), so a ``.pftrace`` keeps one tick-counting clock per core across the
rank's launches and its times equal the JSON trace's to the ns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from .decode import RECORD_SPREAD_LIMIT_NS, launch_base, scan_slots, signed_delta, spread_limit_cycles
from .rankfile import RankBuffer, RankFileName
from .records import Record

#: The gap between two launches laid end to end (their clocks do not place them).
LAUNCH_GAP_NS = 10_000
#: The furthest a launch's cycles place it after the launch before it (~3 years): no run
#: of one device is that long, so its counter is another's (corrupt, or a foreign file),
#: and placed by it the trace's times would pass what its readers take (1e18 ns).
CYCLES_GAP_LIMIT_NS = RECORD_SPREAD_LIMIT_NS
#: The category of the ``launch K`` slices (JSON ``cat``, TrackEvent category): readers
#: tell them from spans by it.
LAUNCH_CATEGORY = "optrace.launch"

FIRST = "first"
CYCLES = "cycles"
END_TO_END = "end to end"
FRAMEWORK = "framework trace"


def launch_name(tag: str | None, launch: int) -> str:
    """``launch 3``, or ``moe, launch 3`` for a tagged file: the slice's name, and the
    launch's name in report and compare."""
    return f"{tag}, launch {launch}" if tag else f"launch {launch}"


def tick_ns(clock_mhz: float) -> int | None:
    """ns per tick when a whole number (50 MHz: 20), else None."""
    unit = 1000.0 / clock_mhz
    whole = round(unit)
    return whole if whole >= 1 and abs(unit - whole) < 1e-9 * unit else None


def ticks_to_ns(ticks: int, clock_mhz: float) -> int:
    """``ticks`` in ns as the trace writers compute them (ticks x (1000 / MHz), rounded)."""
    unit = tick_ns(clock_mhz)
    return ticks * unit if unit is not None else round(ticks * (1000.0 / clock_mhz))


class LaunchRange(Record):
    """One launch's cycles: ``base`` (raw, the earliest core start: what the decoder
    counts from) and every record's time between ``lo`` and ``hi`` ticks from it."""

    __match_args__ = ("base", "lo", "hi", "clock_mhz", "fingerprint")
    __slots__ = __match_args__
    base: int
    lo: int
    hi: int
    clock_mhz: float
    fingerprint: int | None

    def __init__(self, base: int, lo: int, hi: int, clock_mhz: float, fingerprint: int | None) -> None:
        self.base = base
        self.lo = lo
        self.hi = hi
        self.clock_mhz = clock_mhz
        self.fingerprint = fingerprint


def launch_range(buffer: RankBuffer, clock_mhz: float) -> LaunchRange | None:
    """Where a rank file's records lie in its device's cycles; None without a record.
    The base is the decoder's (the earliest start of a slot in use), and every span the
    decoder makes lies between ``lo`` and ``hi`` (a clamped time is an earlier record's)."""
    scan = scan_slots(buffer.data, buffer.meta.layout(buffer.slots))
    live = [r for r in scan.reports if r.state not in ("unused", "corrupt")]
    if not live or not scan.cycles.size:
        return None
    starts = np.array([r.start_cycle for r in live], dtype=np.uint64)
    base = launch_base(starts, scan.cycles, clock_mhz)
    relative = (scan.cycles - np.uint64(base)).view(np.int64)
    # The decoder drops a record years from the base (a corrupt counter): its place says
    # nothing of the launch's.
    limit = spread_limit_cycles(clock_mhz)
    relative = relative[(relative <= limit) & (relative >= -limit)]
    if not relative.size:
        return None
    prints = Counter(r.fingerprint for r in scan.reports if r.fingerprint is not None)
    fingerprint = prints.most_common(1)[0][0] if prints else buffer.meta.fingerprint
    return LaunchRange(base, min(int(relative.min()), 0), int(relative.max()), clock_mhz, fingerprint)


class LaunchPlace(Record):
    """Where one launch is: ``offset_ns`` of its tick 0 from its rank's origin (with
    ``--merge``, from the trace's 0), and how it was placed (``why``: for end to end)."""

    __match_args__ = ("offset_ns", "how", "why")
    __slots__ = __match_args__
    offset_ns: int
    how: str
    why: str | None

    def __init__(self, offset_ns: int = 0, how: str = FIRST, why: str | None = None) -> None:
        self.offset_ns = offset_ns
        self.how = how
        self.why = why


class RankLaunches(Record):
    """A rank's launches (positions in the list given to :func:`lay_out`) in time order,
    each one's place, and the unit all their origins are a multiple of apart."""

    __match_args__ = ("rank", "positions", "places", "unit_ns")
    __slots__ = __match_args__
    rank: int
    positions: list[int]
    places: list[LaunchPlace]
    unit_ns: int

    def __init__(self, rank: int, positions: list[int], places: list[LaunchPlace], unit_ns: int) -> None:
        self.rank = rank
        self.positions = positions
        self.places = places
        self.unit_ns = unit_ns


def _order(names: Sequence[RankFileName], ranges: Sequence[LaunchRange | None],
           fixed: Sequence[int | None] | None) -> list[int]:
    """A rank's launches in time order (indices into ``names``)."""
    indices = sorted(range(len(names)), key=lambda k: (names[k].launch, names[k].tag or ""))
    if fixed is not None:
        return sorted(indices, key=lambda k: (fixed[k] is None, fixed[k] or 0))
    rank_of = {k: n for n, k in enumerate(indices)}
    chains: dict[str, list[int]] = {}
    for k in sorted(indices, key=lambda k: (names[k].tag or "", names[k].launch)):
        chains.setdefault(names[k].tag or "", []).append(k)
    heads = list(chains.values())

    def key(chain: list[int]) -> tuple[int, int, int]:
        found = ranges[chain[0]]
        # A launch without cycles goes right after the one before it in its chain.
        if found is None:
            return -1, 0, rank_of[chain[0]]
        return 0, found.base + found.lo, rank_of[chain[0]]

    order: list[int] = []
    while heads:
        chain = min(heads, key=key)
        order.append(chain.pop(0))
        heads = [c for c in heads if c]
    return order


def _why_apart(name: str, found: LaunchRange | None, before: str, earlier: LaunchRange | None) -> str | None:
    """Why a launch cannot be placed by its cycles after the one before it (None: it can)."""
    if found is None:
        return "no cycles (no record)"
    if earlier is None:
        return f"no cycles in {before} before it"
    if found.clock_mhz != earlier.clock_mhz:
        return f"clock {found.clock_mhz:g} MHz, {before} {earlier.clock_mhz:g} MHz"
    if found.fingerprint != earlier.fingerprint:
        return f"build fingerprint {_print(found.fingerprint)}, {before} {_print(earlier.fingerprint)}"
    start = signed_delta(found.base - earlier.base) + found.lo
    if start < earlier.lo:
        return f"its cycles go back to before {before}'s start (the counter restarted)"
    if start < earlier.hi:
        return f"its cycles overlap {before}'s"
    if ticks_to_ns(start - earlier.hi, found.clock_mhz) > CYCLES_GAP_LIMIT_NS:
        years = ticks_to_ns(start - earlier.hi, found.clock_mhz) / 3.15576e16
        return f"its cycles lie {years:.3g} years after {before}'s end (another counter)"
    return None


def _print(fingerprint: int | None) -> str:
    return "none" if fingerprint is None else f"{fingerprint:#010x}"


def lay_out_rank(
    rank: int,
    files: Sequence[tuple[int, RankFileName, str]],
    ranges: Sequence[LaunchRange | None],
    clocks: Sequence[float],
    fixed_ns: Sequence[int | None] | None = None,
) -> RankLaunches:
    """One rank's launches (``files``: (position, name, file name) each) in time order,
    placed: by their cycles, else end to end (see the module's doc); with ``fixed_ns``
    (``--merge``) where it puts each launch's tick 0, unless that overlaps the launch
    before it."""
    names = [name for _, name, _ in files]
    order = _order(names, ranges, fixed_ns)
    units = {tick_ns(c) for c in clocks}
    unit = units.pop() if len(units) == 1 else None
    if unit is None or (fixed_ns is not None and any(f is not None and f % unit for f in fixed_ns)):
        unit = 1

    def end_ns(k: int, offset: int) -> int:
        found = ranges[k]
        return offset + (ticks_to_ns(found.hi, clocks[k]) if found is not None else 0)

    def start_ns(k: int, offset: int) -> int:
        found = ranges[k]
        return offset + (ticks_to_ns(found.lo, clocks[k]) if found is not None else 0)

    places: dict[int, LaunchPlace] = {}
    previous: int | None = None
    for k in order:
        if previous is None:
            first = fixed_ns[k] if fixed_ns is not None else None
            places[k] = LaunchPlace(first or 0, FRAMEWORK if first is not None else FIRST)
            previous = k
            continue
        before = places[previous]
        wanted = fixed_ns[k] if fixed_ns is not None else None
        why: str | None
        if fixed_ns is not None:
            why = None if wanted is not None else "not placed by the framework trace"
            if wanted is not None and start_ns(k, wanted) < end_ns(previous, before.offset_ns):
                why = f"the framework trace puts it inside {files[previous][2]}"
        else:
            why = _why_apart(files[k][2], ranges[k], files[previous][2], ranges[previous])
        if why is None and wanted is not None:
            places[k] = LaunchPlace(wanted, FRAMEWORK)
        elif why is None:
            found, earlier = ranges[k], ranges[previous]
            assert found is not None and earlier is not None
            places[k] = LaunchPlace(before.offset_ns + ticks_to_ns(signed_delta(found.base - earlier.base),
                                                                   clocks[k]), CYCLES)
        else:
            offset = end_ns(previous, before.offset_ns) + LAUNCH_GAP_NS - start_ns(k, 0)
            places[k] = LaunchPlace(-(-offset // unit) * unit, END_TO_END, why)
        # Rounded to whole ns, two launches whose cycles touch may meet 1 ns apart the
        # wrong way: the later one moves up by that much.
        overlap = end_ns(previous, before.offset_ns) - start_ns(k, places[k].offset_ns)
        if overlap > 0:
            places[k].offset_ns += -(-overlap // unit) * unit
        previous = k
    return RankLaunches(rank, [files[k][0] for k in order], [places[k] for k in order], unit)
