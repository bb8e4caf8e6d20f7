"""``optrace collect``: a profiling directory (rank files + point map) to a Chrome trace.

Rank files are read, decoded and formatted one after another (with ``-j N``, N threads
read and decode ahead) and streamed into the trace in rank order, a block of rows at a
time, so memory stays at about one rank's buffer and rows. A rank file that cannot be
used is reported (``path: message``) and the other ranks are still written.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .chrome import (
    TRACE_FORMAT,
    TRACE_FORMAT_VERSION,
    ChromeTraceWriter,
    CoreFilter,
    render_rank,
)
from .decode import DecodeOptions, RankDecode, decode_rank
from .errors import ProfilingInputError
from .pointmap import POINT_MAP_NAME, PointMap, load_point_map
from .rankfile import RankFileName, find_rank_files, read_rank_file

EXIT_OK = 0
EXIT_SKIPPED = 1
EXIT_BAD_INPUT = 2


@dataclass(frozen=True)
class CollectOptions:
    point_map: Path | None = None  # None: point_map.json beside the rank files
    clock_mhz: float | None = None  # None: each rank file's, else 50 MHz
    ranks: frozenset[int] | None = None
    cores: CoreFilter | None = None
    labels: list[str] | None = None
    rank_offsets_us: dict[int, float] = field(default_factory=dict)
    ignore_fingerprint: bool = False
    jobs: int | None = None  # threads decoding ahead; None or 0: none (see decode_workers)


@dataclass
class RankOutcome:
    """One rank file's contribution to the trace (or why it has none)."""

    name: RankFileName
    path: Path
    decoded: RankDecode | None = None
    error: ProfilingInputError | None = None
    spans_written: int = 0


@dataclass
class CollectResult:
    output: Path
    point_map: PointMap
    outcomes: list[RankOutcome]
    events: int

    @property
    def errors(self) -> list[ProfilingInputError]:
        return [o.error for o in self.outcomes if o.error is not None]

    @property
    def exit_code(self) -> int:
        """2 when a rank file was unusable, 1 when records were skipped or repaired."""
        if self.errors:
            return EXIT_BAD_INPUT
        for outcome in self.outcomes:
            d = outcome.decoded
            if d is not None and (d.skipped_records or d.repaired_spans or d.corrupt_slots or d.backwards):
                return EXIT_SKIPPED
        return EXIT_OK


def parse_int_set(text: str, what: str) -> frozenset[int]:
    """``"0,2-4"`` -> {0, 2, 3, 4}."""
    values: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if match is None:
            raise ValueError(f"{what}: {part!r} is not a number or a range like 2-5")
        lo, hi = int(match[1]), int(match[2] or match[1])
        if hi < lo:
            raise ValueError(f"{what}: empty range {part!r}")
        values.update(range(lo, hi + 1))
    return frozenset(values)


def parse_core_filter(text: str) -> CoreFilter:
    """``"aic,aiv0-7,aiv17"``: a core type alone selects all its cores."""
    wanted: list[tuple[str, frozenset[int] | None]] = []
    for part in text.split(","):
        part = part.strip().lower().replace(" ", "")
        if not part:
            continue
        match = re.fullmatch(r"(aic|aiv|core)([\d,-]*)", part)
        if match is None:
            raise ValueError(f"--cores: {part!r} is not like aic, aiv3 or aiv0-7")
        kind = match[1].upper() if match[1] != "core" else "Core"
        wanted.append((kind, parse_int_set(match[2], "--cores") if match[2] else None))

    def accept(core_type: str, index: int) -> bool:
        return any(core_type == kind and (ids is None or index in ids) for kind, ids in wanted)

    return accept


def parse_rank_offsets(text: str) -> dict[int, float]:
    """``"1=12.5,2=-3"``: microseconds added to every timestamp of that rank."""
    offsets: dict[int, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        rank, sep, value = part.partition("=")
        try:
            if not sep:
                raise ValueError
            offsets[int(rank)] = float(value)
        except ValueError:
            raise ValueError(f"--rank-offsets: {part!r} is not RANK=MICROSECONDS") from None
    return offsets


def resolve_point_map(profiling_dir: Path, explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    beside = profiling_dir / POINT_MAP_NAME
    if beside.is_file():
        return beside
    raise ProfilingInputError(
        profiling_dir, f"no {POINT_MAP_NAME} beside the rank files: pass --point-map MAP"
    )


def list_rank_files(profiling_dir: Path) -> list[tuple[RankFileName, Path]]:
    if not profiling_dir.exists():
        raise ProfilingInputError(profiling_dir, "no such directory")
    if not profiling_dir.is_dir():
        raise ProfilingInputError(profiling_dir, "not a directory (expected a profiling directory)")
    files = find_rank_files(profiling_dir)
    if not files:
        raise ProfilingInputError(profiling_dir, "no rank*.pt files")
    return files


def _process_name(name: RankFileName, several_runs: bool) -> str:
    if not several_runs:
        return f"Rank {name.rank}"
    parts = [p for p in (name.tag, f"launch {name.launch}" if name.launch else None) if p]
    return f"Rank {name.rank} ({', '.join(parts) or 'launch 0'})"


def decode_workers(jobs: int | None, files: int) -> int:
    """Threads reading and decoding ranks ahead of the writer; by default none. Measured
    on the benchmark (8 ranks x 72 cores, 2 cores): one thread ahead is no faster than
    none (the GIL is held between numpy calls), costs ~17 MB more (a malloc arena per
    thread plus a second rank in flight), and is slower when the machine is busy."""
    return max(0, min(jobs or 0, files - 1))


_Work = TypeVar("_Work")


def _in_order(
    work: Callable[[int, RankFileName, Path], _Work], files: list[tuple[RankFileName, Path]], workers: int
) -> Iterator[_Work]:
    """``work`` over the files, results in file order: with workers, on threads at most
    ``workers`` files ahead of the consumer, so memory stays a few ranks' worth whatever the
    number of files; without, in the caller's thread.

    One short-lived thread per file rather than concurrent.futures: its import (logging
    included) costs ~8 ms, which collect's start-up budget cannot spare."""
    if workers <= 0:
        for position, (name, path) in enumerate(files):
            yield work(position, name, path)
        return
    import threading

    pending: deque[tuple[threading.Thread, list[Any]]] = deque()

    def start(position: int, name: RankFileName, path: Path) -> None:
        box: list[Any] = [None, None]  # result, exception

        def run() -> None:
            try:
                box[0] = work(position, name, path)
            except BaseException as exc:  # re-raised in the consumer's thread
                box[1] = exc

        thread = threading.Thread(target=run, name=f"optrace-rank-{position}", daemon=True)
        thread.start()
        pending.append((thread, box))

    def take() -> _Work:
        thread, box = pending.popleft()
        thread.join()
        if box[1] is not None:
            raise box[1]
        result: _Work = box[0]
        return result

    try:
        for position, (name, path) in enumerate(files):
            start(position, name, path)
            if len(pending) > workers:  # one being consumed + `workers` ahead
                yield take()
        while pending:
            yield take()
    finally:
        for thread, _ in pending:  # an error or an abandoned generator: no thread outlives us
            thread.join()


def collect(
    profiling_dir: Path,
    output: Path,
    options: CollectOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> CollectResult:
    """Decode every selected rank file and stream the trace to ``output``.

    Raises ProfilingInputError when nothing can be collected (no rank files, unusable
    point map); per-rank problems are in the result instead.
    """
    options = options or CollectOptions()
    files = list_rank_files(profiling_dir)
    point_map = load_point_map(resolve_point_map(profiling_dir, options.point_map))
    if options.ranks is not None:
        files = [(n, p) for n, p in files if n.rank in options.ranks]
        if not files:
            raise ProfilingInputError(profiling_dir, "no rank files match --ranks")
    several_runs = len({n.run_key for n, _ in files}) > 1
    decode_options = DecodeOptions(options.clock_mhz, options.ignore_fingerprint)

    def work(position: int, name: RankFileName, path: Path) -> RankOutcome:
        """Read and decode one rank: no shared state, so with `-j N` it can run ahead on a
        worker thread while the main thread formats and writes the previous rank."""
        outcome = RankOutcome(name, path)
        try:
            outcome.decoded = decode_rank(read_rank_file(path, name.rank), point_map, decode_options)
        except ProfilingInputError as exc:
            outcome.error = exc
        return outcome

    outcomes: list[RankOutcome] = []
    ranks_meta: list[dict[str, Any]] = []
    with ChromeTraceWriter(output) as writer:
        for position, outcome in enumerate(_in_order(work, files, decode_workers(options.jobs, len(files)))):
            outcomes.append(outcome)
            decoded = outcome.decoded
            name = outcome.name
            pid = position if several_runs else name.rank
            if decoded is not None:
                outcome.spans_written = writer.write_rendered(render_rank(
                    pid,
                    _process_name(name, several_runs),
                    decoded,
                    point_map,
                    labels=options.labels,
                    core_filter=options.cores,
                    offset_us=options.rank_offsets_us.get(name.rank, 0.0),
                ))
                ranks_meta.append(
                    {
                        "pid": pid,
                        "rank": name.rank,
                        "tag": name.tag,
                        "launch": name.launch,
                        "file": outcome.path.name,
                        "clock_mhz": decoded.clock_mhz,
                        "barrier": decoded.meta.barrier,
                        "fingerprint": decoded.fingerprint,
                        "legacy": decoded.meta.legacy,
                        "skipped_records": decoded.skipped_records,
                    }
                )
            if progress is not None:
                progress(position + 1, len(files))
        writer.close(
            {
                "format": TRACE_FORMAT,
                "version": TRACE_FORMAT_VERSION,
                "point_map": str(point_map.path),
                "point_map_fingerprint": point_map.fingerprint,
                "ranks": ranks_meta,
            }
        )
    return CollectResult(output, point_map, outcomes, writer.events)


def summary_lines(result: CollectResult) -> list[str]:
    """The human summary: what was written, then every skipped record with its reason."""
    spans = sum(o.spans_written for o in result.outcomes)
    decoded = [o.decoded for o in result.outcomes if o.decoded is not None]
    cores = sum(len(d.cores) for d in decoded)
    unused = sum(d.unused_slots for d in decoded)
    lines = [
        f"wrote {result.output}: {len(decoded)} ranks, {cores} cores with spans, "
        f"{spans} spans ({unused} unused core slots)"
    ]
    skipped = sum(d.skipped_records for d in decoded)
    if skipped:
        dropped = sum(d.dropped for d in decoded)
        unknown = sum(sum(d.unknown_ids.values()) for d in decoded)
        unmatched = sum(d.unmatched_e for d in decoded)
        lines.append(
            f"skipped {skipped} records: {dropped} dropped or overwritten (slot full), "
            f"{unknown} with unknown ids, {unmatched} unmatched E"
        )
    for outcome in result.outcomes:
        if outcome.decoded is not None:
            for issue in outcome.decoded.issues:
                lines.append(f"  {outcome.path}: {issue}")
    return lines


def note_lines(result: CollectResult) -> list[str]:
    notes: dict[str, list[str]] = {}
    for outcome in result.outcomes:
        if outcome.decoded is not None:
            for note in outcome.decoded.notes:
                notes.setdefault(note, []).append(outcome.path.name)
    return [f"note: {note} ({', '.join(files)})" for note, files in notes.items()]
