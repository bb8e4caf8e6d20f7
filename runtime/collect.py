"""``optrace collect``: a profiling directory (rank files + point map) to a Chrome trace.

A first pass places every rank file (:mod:`placement`: the ranks against each other, each
rank's launches one after the other on its tracks). Then the files are read, decoded and
formatted one after another and streamed into the trace rank by rank, each rank's
launches in time order, a block of rows at a time, so memory stays at about one rank
file's buffer and rows per process. Several processes (``-j N``; the default is one) take consecutive runs
of rank files, a bounded block of them at a time, and fall back to one process where they
would not gain; the trace has the same bytes whatever their number. A rank file that
cannot be used is reported (``path: message``) and the other ranks are still written.
"""

from __future__ import annotations

import bisect
import functools
import gzip
import itertools
import json
import math
import os
import re
import sys
from collections.abc import Callable, Container, Iterable
from pathlib import Path
from typing import Any

from .align import Alignment, AlignSpec

# the CLI's fast collect reaches these through this module (one lazy import at collect's start).
from .align import AlignmentError as AlignmentError
from .align import parse_align as parse_align
from .atomic import OutputError, atomic_output, output_target
from .chrome import (
    TRACE_FORMAT,
    TRACE_FORMAT_VERSION,
    ChromeTraceWriter,
    CoreFilter,
    EventSink,
    RenderedRank,
    RowScratch,
    label_matcher,
    name_rows,
    render_rank,
)
from .decode import DecodeOptions, RankDecode, decode_rank
from .errors import MergeError as MergeError  # for the CLI's fast collect, through this module
from .errors import ProfilingInputError
from .format import DEFAULT_CLOCK_MHZ, RankMeta
from .formats import PERFETTO
from .formats import output_format as output_format  # the CLI's fast collect checks --format
from .launches import launch_name
from .numbers import RANK, RANK_OFFSET_US, check_number
from .placement import KEEP_READ_BYTES, Placement, place_ranks, rank_process_name
from .pointmap import PointMap, load_point_map, resolve_point_map
from .rankfile import RankFileName, list_rank_files, read_rank_file
from .records import FrozenRecord, Record
from .trace_files import SizeWatch, write_files
from .workers import Channel, Ticks, Worker, can_fork

EXIT_OK = 0
EXIT_SKIPPED = 1
EXIT_BAD_INPUT = 2


# Plain classes, not dataclasses: see records.py (collect's start-up time).
class CollectOptions(FrozenRecord):
    __match_args__ = ("point_map", "clock_mhz", "ranks", "cores", "labels", "rank_offsets_us",
                      "ignore_fingerprint", "jobs", "format", "split", "align", "merge")
    __slots__ = __match_args__
    point_map: Path | None  # None: point_map.json beside the rank files
    clock_mhz: float | None  # None: each rank file's, else 50 MHz
    ranks: Container[int] | None
    cores: CoreFilter | None
    labels: list[str] | None
    rank_offsets_us: dict[int, float]
    ignore_fingerprint: bool
    jobs: int | None  # processes (see collect_processes); None: 1, 0: one per CPU (<= 4)
    format: str | None  # a name of formats.FORMATS; None: by the output's name (formats.output_format)
    split: str | int | None  # "rank", a size in bytes (trace_files.parse_split), None: one file
    align: AlignSpec | None  # --align LABEL[@N]
    merge: tuple[Path, ...]  # --merge: framework traces to write the device tracks into

    def __init__(
        self,
        point_map: Path | None = None,
        clock_mhz: float | None = None,
        ranks: Container[int] | None = None,
        cores: CoreFilter | None = None,
        labels: list[str] | None = None,
        rank_offsets_us: dict[int, float] | None = None,
        ignore_fingerprint: bool = False,
        jobs: int | None = None,
        format: str | None = None,
        split: str | int | None = None,
        align: AlignSpec | None = None,
        merge: tuple[Path, ...] = (),
    ) -> None:
        values = (point_map, clock_mhz, ranks, cores, labels, rank_offsets_us or {}, ignore_fingerprint, jobs,
                  format, split, align, tuple(merge))
        for name, value in zip(self.__match_args__, values, strict=True):
            object.__setattr__(self, name, value)


class RankOutcome(Record):
    """One rank file's contribution to the trace (or why it has none)."""

    __match_args__ = ("name", "path", "decoded", "error", "spans_written", "cores_written", "tracks",
                      "span_slots", "skipped_kept")
    __slots__ = __match_args__
    name: RankFileName
    path: Path
    decoded: RankDecode | None
    error: ProfilingInputError | None
    spans_written: int
    cores_written: int  # decoded.cores is emptied once they are in the trace
    tracks: list[tuple[int, str]]  # (slot, name) of the cores it wrote events on
    span_slots: list[int]  # the slots of those with spans (not a drop marker alone)
    skipped_kept: int | None  # with --cores: the skipped records of the cores kept

    def __init__(
        self,
        name: RankFileName,
        path: Path,
        decoded: RankDecode | None = None,
        error: ProfilingInputError | None = None,
        spans_written: int = 0,
        cores_written: int = 0,
        tracks: list[tuple[int, str]] | None = None,
        span_slots: list[int] | None = None,
        skipped_kept: int | None = None,
    ) -> None:
        self.name = name
        self.path = path
        self.decoded = decoded
        self.error = error
        self.spans_written = spans_written
        self.cores_written = cores_written
        self.tracks = [] if tracks is None else tracks
        self.span_slots = [] if span_slots is None else span_slots
        self.skipped_kept = skipped_kept


class NothingToWrite(Exception):
    """collect would write a trace without a single span (``--labels`` that match no label
    of the map): a warning, nothing written, exit 1 — an empty trace only hides the mistake."""


class CollectResult(Record):
    __match_args__ = ("output", "point_map", "outcomes", "events", "outputs", "written", "alignment",
                      "launch_notes")
    __slots__ = __match_args__
    output: Path
    point_map: PointMap
    outcomes: list[RankOutcome]  # in the order the files were written
    events: int
    outputs: list[Path]  # the files written: [output], or its parts with --split; [] if none
    written: bool  # False: no span decoded (or kept by --labels / --cores), no trace written
    alignment: Alignment | None  # where each rank was placed (None: not computed)
    launch_notes: list[str]  # launches their cycles do not place (laid end to end)

    def __init__(
        self, output: Path, point_map: PointMap, outcomes: list[RankOutcome], events: int,
        outputs: list[Path] | None = None, written: bool = True, alignment: Alignment | None = None,
        launch_notes: list[str] | None = None,
    ) -> None:
        self.output = output
        self.point_map = point_map
        self.outcomes = outcomes
        self.events = events
        self.outputs = ([output] if written else []) if outputs is None else outputs
        self.written = written
        self.alignment = alignment
        self.launch_notes = [] if launch_notes is None else launch_notes

    @property
    def errors(self) -> list[ProfilingInputError]:
        return [o.error for o in self.outcomes if o.error is not None]

    @property
    def exit_code(self) -> int:
        """2 when a rank file was unusable, 1 when records were skipped or repaired, or
        when there was no span to write."""
        if self.errors:
            return EXIT_BAD_INPUT
        if not self.written:
            return EXIT_SKIPPED
        for outcome in self.outcomes:
            d = outcome.decoded
            if d is not None and (d.skipped_records or d.repaired_spans or d.corrupt_slots or d.backwards):
                return EXIT_SKIPPED
        return EXIT_OK


class IntRanges:
    """Whole numbers as closed ranges, sorted and merged: ``--ranks 0-99999999999`` is
    kept as its two ends (a set of every number in it took gigabytes and never ended)."""

    __slots__ = ("ends", "starts")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        for lo, hi in sorted(ranges):
            if self.ends and lo <= self.ends[-1] + 1:
                self.ends[-1] = max(self.ends[-1], hi)
            else:
                self.starts.append(lo)
                self.ends.append(hi)

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int):
            return False
        at = bisect.bisect_right(self.starts, value) - 1
        return at >= 0 and value <= self.ends[at]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IntRanges) and (self.starts, self.ends) == (other.starts, other.ends)

    def __hash__(self) -> int:
        return hash((tuple(self.starts), tuple(self.ends)))

    def __repr__(self) -> str:
        return f"IntRanges({list(zip(self.starts, self.ends, strict=True))!r})"

    def __reduce__(self) -> tuple[type[IntRanges], tuple[list[tuple[int, int]]]]:
        return IntRanges, (list(zip(self.starts, self.ends, strict=True)),)


def parse_int_set(text: str, what: str) -> IntRanges:
    """``"0,2-4"`` -> 0, 2, 3 and 4 (as ranges: a range's size costs nothing)."""
    ranges: list[tuple[int, int]] = []
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
        ranges.append((lo, hi))
    return IntRanges(ranges)


def parse_core_filter(text: str) -> CoreFilter:
    """``"aic,aiv0-7,aiv17"``: a core type alone selects all its cores."""
    wanted: list[tuple[str, IntRanges | None]] = []
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
            number, offset = int(rank), float(value)
        except ValueError:
            raise ValueError(f"--rank-offsets: {part!r} is not RANK=MICROSECONDS") from None
        if not math.isfinite(offset):
            raise ValueError(f"--rank-offsets: {part!r}: the offset is not a finite number")
        # Finite and in range: a NaN or 1e308 offset would put NaN / inf in every timestamp.
        check_number(f"--rank-offsets rank {rank.strip()}", number, RANK)
        offsets[number] = check_number(f"--rank-offsets {part.strip()!r}", offset, RANK_OFFSET_US)
    return offsets


def _selected_files(profiling_dir: Path, options: CollectOptions) -> list[tuple[RankFileName, Path]]:
    files = list_rank_files(profiling_dir)
    if options.ranks is not None:
        files = [(n, p) for n, p in files if n.rank in options.ranks]
        if not files:
            raise ProfilingInputError(profiling_dir, "no rank files match --ranks")
    return files


def _collect_merged(
    profiling_dir: Path, output: Path, options: CollectOptions, progress: Callable[[int, int], None] | None,
    files: list[tuple[RankFileName, Path]],
) -> CollectResult:
    """``--merge``: the device trace collected beside the output under a temporary name,
    placed where each launch's kernel slice is in the framework traces, then both written
    into the output as one trace (:mod:`merge`). Everything is in memory (the framework
    trace as read, the device trace): --merge is for a few ranks, not a cluster."""
    from . import merge  # only for --merge: a plain collect never pays its import (decimal, perfetto)

    # Refused before anything is read (runtime/atomic.py): an output that is a rank file,
    # the point map or a framework trace, a FIFO, a socket.
    inputs = [path for _, path in files] + [resolve_point_map(profiling_dir, options.point_map)]
    inputs += [path.expanduser() for path in options.merge]
    target = output_target(output, inputs)
    traces = [merge.read_framework_trace(path.expanduser()) for path in options.merge]
    metas: list[RankMeta | None] = []
    clocks: list[float] = []
    for name, path in files:
        try:
            meta: RankMeta | None = read_rank_file(path, name.rank).meta
        except ProfilingInputError:
            meta = None  # reported when the trace is written
        metas.append(meta)
        clock = options.clock_mhz or (meta.clock_mhz if meta is not None else None)
        clocks.append(float(clock or DEFAULT_CLOCK_MHZ))
    named = [(path.name, name.rank, name.launch) for name, path in files]
    plan = merge.plan_merge(traces, named, metas, clocks)
    # Where collect writes each file's launch: its rank's process (pid: the rank), its slices.
    device_launches = {p: (name.rank, launch_name(name.tag, name.launch))
                       for p, (name, _) in enumerate(files)}
    fmt = output_format(output, options.format)
    assert fmt.merge_suffix is not None  # refused with the options (cli/collect_fast.py)
    compressed = output.name.endswith(".gz")
    # Beside the file it becomes; a device or stream output (written through) has no
    # folder of its own to put it in: the system's temporary folder then.
    scratch = Path(os.environ.get("TMPDIR") or "/tmp")  # not tempfile: collect's start-up
    beside = scratch / output.name if target.through else target.real
    temporary = beside.with_name(f".{beside.name}.{os.getpid()}.device"
                                 + fmt.merge_suffix + (".gz" if compressed else ""))
    device_options = CollectOptions(**{name: getattr(options, name)
                                       for name in CollectOptions.__match_args__ if name != "merge"})
    try:
        try:
            result = collect(profiling_dir, temporary, device_options, progress, plan.alignment)
        except OutputError as exc:  # named as the output the user asked for, not our temporary
            raise OutputError(output, exc.message.replace(str(temporary), str(output))) from None
        if not result.written:
            return CollectResult(output, result.point_map, result.outcomes, 0, written=False,
                                 alignment=plan.alignment, launch_notes=result.launch_notes)
        raw = temporary.read_bytes()
        if compressed:
            raw = gzip.decompress(raw)
        with atomic_output(output, inputs=inputs) as handle:
            # No name in the header: it would be the temporary's (see chrome.py).
            sink: Any = (gzip.GzipFile(filename="", fileobj=handle, mode="wb", mtime=0) if compressed
                         else handle)
            if fmt is not PERFETTO:
                document = merge.merged_json(plan, json.loads(raw), device_launches)
                merge.check_finite(document)
                merge.write_json(sink, document)
            else:
                for chunk in merge.merged_pftrace(plan, raw, device_launches):
                    sink.write(chunk)
            if compressed:
                sink.close()
    finally:
        temporary.unlink(missing_ok=True)
    return CollectResult(output, result.point_map, result.outcomes, result.events, [output],
                         alignment=plan.alignment, launch_notes=result.launch_notes)


def trace_format(output: Path, requested: str | None) -> str:
    """The name of the output's format (:mod:`formats`): as asked, else by its name."""
    return output_format(output, requested).name


def collect_processes(jobs: int | None, files: int, compress: bool) -> int:
    """Processes asked for that each decode, format and write runs of ranks (see
    :mod:`workers`; :func:`worth_processes` may then take fewer).

    Default one: more only pay where the CPUs really run side by side. On the 2-vCPU
    benchmark machine two busy processes each ran at half speed (a plain Python loop took
    twice as long beside another), and ``-j 2`` was slower than one process at decoding
    and writing. 0 asks for one per CPU this process may use, at most 4. One for ``.gz``
    output (a gzip stream is one sequence, compressed in order), and where
    :func:`workers.can_fork` says no."""
    if compress or not can_fork() or jobs is None:
        return 1
    if jobs == 0:
        jobs = min(4, _usable_cpus())
    return max(1, min(jobs, files))


def _usable_cpus() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def idle_cpus() -> float:
    """CPUs this process may use minus the load average of the last minute (runnable
    processes), at least 0; the CPU count where the platform has no load average."""
    cpus = _usable_cpus()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return float(cpus)
    return max(0.0, cpus - load)


#: Rank-file bytes (all of a collect's, summed, on disk and as records in memory) up to
#: which each file is read once: the placement's first pass reads it in full and keeps it
#: for the pass that writes it. Above it, a file is read twice so that only one rank is
#: held at a time.

#: Rank-file bytes below which one process does it all: the work is too small for the
#: forks and the hand-over between processes to pay.
MIN_PARALLEL_BYTES = 16 << 20


def worth_processes(asked: int, input_bytes: int) -> tuple[int, str | None]:
    """The processes to use of the ``asked`` ones, and why fewer (None: as asked).

    Each process beyond the first needs a CPU nobody else uses: on a busy machine
    (measured on the shared 2-vCPU one, load 5) two processes only take turns on the
    same CPUs and the hand-over between them is pure cost, so there ``-j N`` is one
    process by itself, and says why. Small inputs (:data:`MIN_PARALLEL_BYTES`) are one
    process too, without a word."""
    if asked <= 1:
        return 1, None
    if input_bytes < MIN_PARALLEL_BYTES:
        return 1, None  # quietly: the whole collect takes a blink either way
    idle = idle_cpus()
    room = 1 + int(idle)
    if room < asked:
        return room, f"{idle:.1f} of {_usable_cpus()} CPUs idle (load average)"
    return asked, None


def rank_runs(sizes: list[int], runs: int) -> list[range]:
    """Consecutive runs of files with about the same number of bytes each (the work is
    proportional to the records), at most ``runs`` of them, none empty: each cut is the
    file boundary nearest to its share of the bytes."""
    if not any(sizes):
        sizes = [1] * len(sizes)  # sizes unknown: split by count
    prefix = list(itertools.accumulate(sizes, initial=0))
    total = prefix[-1]
    bounds = [0]
    for k in range(1, min(runs, len(sizes))):
        target = total * k / runs
        lo = bounds[-1] + 1  # every run holds a file
        hi = len(sizes) - (min(runs, len(sizes)) - k)  # and leaves one for each run after it
        if lo > hi:
            break
        bounds.append(min(range(lo, hi + 1), key=lambda i: abs(prefix[i] - target)))
    bounds.append(len(sizes))
    return [range(lo, hi) for lo, hi in itertools.pairwise(bounds)]


def collect(
    profiling_dir: Path,
    output: Path,
    options: CollectOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
    placement: Alignment | None = None,
) -> CollectResult:
    """Decode every selected rank file and stream the trace to ``output``.

    With several processes (``options.jobs``, see :func:`worth_processes`), the rank
    files go in blocks (:func:`side_by_side_blocks`); in each, every process takes a
    consecutive run and writes it into the trace at its place (:func:`_run_side_by_side`),
    so the trace has the same bytes whatever the number of processes. Raises ProfilingInputError when
    nothing can be collected (no rank files, unusable point map); per-rank problems are
    in the result instead.
    """
    options = options or CollectOptions()
    fmt = output_format(output, options.format)
    files = _selected_files(profiling_dir, options)
    point_map = load_point_map(resolve_point_map(profiling_dir, options.point_map))
    if options.merge and placement is None:
        return _collect_merged(profiling_dir, output, options, progress, files)
    if options.labels and not any(map(label_matcher(options.labels), point_map.labels)):
        raise NothingToWrite(
            f"--labels {','.join(options.labels)}: no label of {point_map.path} is or lies below "
            f"them: nothing written"
        )
    # Refused before anything is decoded: an output that is a rank file or the point map,
    # a FIFO, a socket (runtime/atomic.py).
    inputs = [path for _, path in files] + [Path(point_map.path)]
    dataset: Any = None
    if fmt.directory:
        from . import dataset  # only for --format parquet: DuckDB, an optional dependency

        dataset.check_output(output, inputs)
        through = False
    else:
        through = output_target(output, inputs).through
    if through and options.split is not None:
        raise OutputError(output, "--split writes files beside the output: name a regular file")
    decode_options = DecodeOptions(options.clock_mhz, options.ignore_fingerprint)
    # Small inputs are read once: the placement's pass keeps each file for the writing pass.
    small = sum(_size(path) for _, path in files) <= KEEP_READ_BYTES
    placed = place_ranks(files, point_map, decode_options, options.align, placement,
                         keep_bytes=KEEP_READ_BYTES if small else 0)
    files = placed.files  # rank by rank, each rank's launches in time order
    alignment = placed.alignment
    outcomes: list[RankOutcome] = [RankOutcome(name, path) for name, path in files]
    ranks_meta: list[dict[str, Any] | None] = [None] * len(files)
    # One process for .gz, .pftrace and --split (a rank at a time, written where it belongs).
    # A device is written through in order: one process too.
    one = output.name.endswith(".gz") or not fmt.side_by_side or options.split is not None or through
    asked = collect_processes(options.jobs, len(files), one)
    sizes = [_size(path) for _, path in files]
    processes, fewer = worth_processes(asked, sum(sizes))
    if fewer is not None:
        print(f"optrace: note: -j {asked}: {processes} process{'es' if processes > 1 else ''} "
              f"({fewer})", file=sys.stderr)
    finished = 0

    def advance(ranks: int) -> None:
        nonlocal finished
        finished += ranks
        if progress is not None and ranks:
            progress(finished, len(files))

    def plan(position: int, scratch: RowScratch, sequences: Any = None) -> RenderedRank | None:
        """Read, decode and lay out one rank file (sizes known, rows not yet formatted);
        ``sequences``: Perfetto output's packet sequences (None: Chrome JSON)."""
        rendered, ranks_meta[position] = _plan_rank(
            outcomes[position], placed, position, point_map, decode_options, options, scratch, sequences)
        return rendered

    def other_data(positions: Iterable[int]) -> dict[str, Any]:
        written = [p for p in positions if ranks_meta[p] is not None]  # the files in this trace
        return {
            "format": TRACE_FORMAT,
            "version": TRACE_FORMAT_VERSION,
            "layout": "a process per rank, a thread per core, launches as slices",
            "point_map": str(point_map.path),
            "point_map_fingerprint": point_map.fingerprint,
            "ranks": [ranks_meta[p] for p in written],
            "alignment": placed.alignment_metadata(written, options.rank_offsets_us),
            # --cores: the trace holds fewer cores than its rank table's counts are of
            **({"cores_filtered": True} if options.cores is not None else {}),
        }

    def names(positions: Iterable[int]) -> bytes:
        """The process and thread names of the ranks and cores written (JSON's last rows)."""
        threads: dict[int, dict[int, str]] = {}
        for p in positions:
            for slot, name in outcomes[p].tracks:
                threads.setdefault(outcomes[p].name.rank, {}).setdefault(slot, name)
        return name_rows([(rank, rank_process_name(rank, placed.host(rank)), sorted(cores.items()))
                          for rank, cores in threads.items()])

    notes = placed.notes()
    if dataset is not None:
        written = dataset.write_dataset(output, placed, outcomes, ranks_meta, point_map, decode_options,
                                        options, advance)
        return CollectResult(output, point_map, outcomes, written, written=bool(written), alignment=alignment,
                             launch_notes=notes)
    if not fmt.side_by_side or options.split is not None:
        outputs, events = write_files(
            output, fmt, options.split, [path.stem for _, path in files], plan, other_data, advance,
            inputs, [name.rank for name, _ in files], names)
        # No span in any rank: write_files wrote nothing (not even the empty parts).
        return CollectResult(output, point_map, outcomes, events, outputs, written=bool(outputs),
                             alignment=alignment, launch_notes=notes)

    watch = SizeWatch(output, sum(sizes))

    def run(positions: range, sink: EventSink, done: Callable[[int], None]) -> None:
        """Rank after rank: planned, then written at once (one rank in memory)."""
        scratch = RowScratch()  # a chunk is only valid until the next one
        for position in positions:
            rendered = plan(position, scratch)
            if rendered is not None:
                watch.add(sizes[position], rendered.size)
                sink.write_rendered(rendered)
            done(1)

    def write(processes: int) -> int:
        with ChromeTraceWriter(output) as writer:
            if processes == 1:
                run(range(len(files)), writer.sink, advance)
            else:
                for block in side_by_side_blocks(sizes, processes):
                    runs = [range(block.start + r.start, block.start + r.stop)
                            for r in rank_runs(sizes[block.start : block.stop], processes)]
                    _run_side_by_side(runs, writer, plan, outcomes, ranks_meta, advance, watch,
                                      sum(sizes[block.start : block.stop]))
                    for position in block:  # the workers' runs: each took its own copy
                        placed.take_buffer(position)
            if not any(o.spans_written for o in outcomes):
                raise _NoSpans  # leaves the block: the temporary file is removed
            writer.close(other_data(range(len(files))), names(range(len(files))))
        return writer.events

    try:
        events = write(processes)
    except _NoSpans:
        return CollectResult(output, point_map, outcomes, 0, written=False, launch_notes=notes)
    except LayoutMismatch as exc:  # a bug, and nothing was written: once more, simply
        print(f"optrace: internal error: {exc}; collecting again in one process", file=sys.stderr)
        outcomes[:] = [RankOutcome(name, path) for name, path in files]
        ranks_meta[:] = [None] * len(files)
        finished = 0
        try:
            events = write(1)
        except _NoSpans:
            return CollectResult(output, point_map, outcomes, 0, written=False, launch_notes=notes)
    return CollectResult(output, point_map, outcomes, events, alignment=alignment, launch_notes=notes)


class _NoSpans(Exception):
    """Raised inside the trace writer to leave without writing (see CollectResult.written)."""


#: Rank-file bytes each process lays out at a time when several write side by side:
#: a process holds its share of a block laid out (~1.5x the rank files) until it is
#: written, so this bounds the memory -j adds. Measured at 128 ranks of the benchmark
#: (1.2 MB rank files), peak PSS of -j 2 over -j 1: a whole run per process at once (as
#: before) 7.3x, blocks of 6 MiB per process 1.85x, 2 MiB 1.41x, 1 MiB (a rank each)
#: 1.35x; each block forks the extra processes anew.
SIDE_BY_SIDE_BLOCK = 1 << 20


def side_by_side_blocks(sizes: list[int], processes: int) -> list[range]:
    """Consecutive blocks of files, each of about ``processes`` x SIDE_BY_SIDE_BLOCK
    bytes and at least ``processes`` files (fewer in the last), handled one after another."""
    blocks: list[range] = []
    start = 0
    while start < len(sizes):
        stop, held = start, 0
        while stop < len(sizes) and (stop - start < processes or held + sizes[stop]
                                     <= processes * SIDE_BY_SIDE_BLOCK):
            held += sizes[stop]
            stop += 1
        blocks.append(range(start, stop))
        start = stop
    return blocks

_PlanFunction = Callable[[int, RowScratch], RenderedRank | None]


def _run_layout(planned: list[RenderedRank | None]) -> tuple[int, int]:
    """Bytes of a run's chunks and their number."""
    kept = [r for r in planned if r is not None]
    return sum(r.size for r in kept), sum(r.chunk_count for r in kept)


def _run_bytes(layout: tuple[int, int], leading: bool) -> int:
    """Bytes an EventSink writes for a run laid out as ``layout``: the chunks, ",\n"
    between two, and one before the first when the trace already has an event."""
    size, count = layout
    return size + 2 * (count - 1) + (2 if leading else 0) if count else 0


def _run_side_by_side(
    runs: list[range],
    writer: ChromeTraceWriter,
    plan: _PlanFunction,
    outcomes: list[RankOutcome],
    ranks_meta: list[dict[str, Any] | None],
    advance: Callable[[int], None],
    watch: SizeWatch | None = None,
    block_bytes: int = 0,
) -> None:
    """Each run in its own process (the first here), all writing into the trace at once
    (after what the trace holds already: :func:`collect` calls this once per block).

    Each process reads, decodes and lays out its ranks, which fixes their size in bytes
    (:class:`RenderedRank`); the parent turns the sizes into offsets, and every process
    formats and writes its rows at its offset through its own file descriptor. The
    bytes are those of one process; each process checks it wrote exactly what it laid
    out, and :func:`collect` starts over in one process if not."""
    writer.flush()  # a child must not inherit buffered bytes of the trace
    start = writer.tell()
    path = writer.temporary_path
    ticks = Ticks()
    children: list[tuple[Worker, Channel, Channel]] = []

    def in_child(positions: range, up: Channel, down: Channel, earlier: list[Channel]) -> Any:
        for channel in earlier:  # another child's: it must see EOF if its parent dies
            channel.close()
        up.keep_writing_end()  # so that a parent that dies is an EOF here, not a wait
        down.keep_reading_end()
        scratch = RowScratch()
        planned = [plan(position, scratch) for position in positions]
        up.send(_run_layout(planned))
        offset, leading = down.receive()
        with open(path, "r+b", buffering=1 << 20) as out:  # its own file offset
            out.seek(offset)
            sink = EventSink(out)
            sink.wrote = leading
            for rendered in planned:
                if rendered is not None:
                    sink.write_rendered(rendered)
                ticks.tick()
            out.flush()
            written = out.tell() - offset
        ticks.child_done()  # before the result: the parent reads results after the ticks end
        return [(p, outcomes[p], ranks_meta[p]) for p in positions], sink.events, written

    channels: list[Channel] = []
    try:
        for positions in runs[1:]:
            up, down = Channel(), Channel()
            earlier = list(channels)
            channels += [up, down]
            children.append((Worker(functools.partial(in_child, positions, up, down, earlier)), up, down))
            up.keep_reading_end()
            down.keep_writing_end()
        ticks.parent_side()
        scratch = RowScratch()
        planned = [plan(position, scratch) for position in runs[0]]
        layouts = [_run_layout(planned)]
        for worker, up, _ in children:
            try:
                layouts.append(up.receive())
            except EOFError:
                worker.result()  # raises what the child raised
                raise
        if watch is not None:  # the block laid out: its size is known before writing
            watch.add(block_bytes, sum(layout[0] for layout in layouts))
        # Each run right after the previous one; ",\n" before a run's first chunk when
        # the trace holds an event already (an earlier block's, an earlier run's).
        already = writer.sink.wrote
        expected = [_run_bytes(layouts[0], already)]
        offset = start + expected[0]
        leading = already or layouts[0][1] > 0
        for (worker, _, down), layout in zip(children, layouts[1:], strict=True):
            try:
                down.send((offset, leading))
            except OSError:  # the child is gone: say why, not "broken pipe"
                worker.result()
                raise
            expected.append(_run_bytes(layout, leading))
            offset += expected[-1]
            leading = leading or layout[1] > 0
        for rendered in planned:
            if rendered is not None:
                writer.sink.write_rendered(rendered)
            advance(1 + (ticks.drain() or 0))
        writer.flush()
        written = [writer.tell() - start]
        while (more := ticks.drain(block=True)) is not None:
            advance(more)
        for worker, _, _ in children:
            back, events, child_written = worker.result()
            written.append(child_written)
            writer.sink.events += events
            for position, outcome, meta in back:
                outcomes[position], ranks_meta[position] = outcome, meta
        if written != expected:
            raise LayoutMismatch(f"runs wrote {written} bytes, laid out {expected}")
        writer.sink.wrote = leading
        writer.seek(offset)
    finally:
        for worker, _, _ in children:
            worker.cancel()
        for channel in channels:
            channel.close()
        ticks.close()


class LayoutMismatch(RuntimeError):
    """A process wrote another number of bytes than it laid out (a bug): collect starts
    over in one process rather than write a trace with a gap or an overlap."""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # reported when the file is read


def _plan_rank(
    outcome: RankOutcome,
    placed: Placement,
    position: int,
    point_map: PointMap,
    decode_options: DecodeOptions,
    options: CollectOptions,
    scratch: RowScratch,
    sequences: Any = None,
) -> tuple[RenderedRank | None, dict[str, Any] | None]:
    """Read, decode and lay out one rank file: its rows to write (formatted as they are
    written) or, given Perfetto ``sequences``, its packets; and its entry of the trace's
    rank table; (None, None) when the file could not be used (``outcome.error`` says why)."""
    name = outcome.name
    try:
        buffer = placed.take_buffer(position) or read_rank_file(outcome.path, name.rank)
        decoded = decode_rank(buffer, point_map, decode_options)
    except ProfilingInputError as exc:
        outcome.error = exc
        return None, None
    outcome.decoded = decoded
    # The placement (anchors, --align, the launch's place in its rank), then --rank-offsets
    # as a manual correction.
    origin_ns = placed.origin_ns(position, decoded, options.rank_offsets_us.get(name.rank, 0.0))
    launch = launch_name(name.tag, name.launch)
    if sequences is not None:
        from . import perfetto  # only for .pftrace: a JSON collect never pays its import

        rendered = perfetto.render_rank(
            name.rank, rank_process_name(name.rank, placed.host(name.rank)), decoded, point_map, sequences,
            launch=launch, labels=options.labels, core_filter=options.cores, origin_ns=origin_ns,
            unit_ns=placed.unit_ns[position])
    else:
        rendered = render_rank(name.rank, decoded, point_map, launch=launch, labels=options.labels,
                               core_filter=options.cores, origin_ns=origin_ns, scratch=scratch)
    outcome.spans_written = rendered.spans
    outcome.tracks = rendered.tracks
    outcome.span_slots = rendered.span_slots
    # The rows keep what they need: keep the counts, not the rank's span arrays, so a
    # collect of many ranks holds one rank's spans per process instead of every rank's.
    outcome.cores_written = len(decoded.cores)
    decoded.release_spans()
    return rendered, rank_entry(outcome, decoded, placed, position, options.cores)


def rank_entry(outcome: RankOutcome, decoded: RankDecode, placed: Placement, position: int,
               cores: CoreFilter | None) -> dict[str, Any]:
    """A rank file's entry of the trace's rank table (the dataset's metadata too). With
    ``--cores`` its skipped records are those of the cores kept (what the trace's figures
    miss), beside those of every core; ``outcome.skipped_kept`` gets the first."""
    name = outcome.name
    if cores is not None:
        outcome.skipped_kept = decoded.skipped_on(cores)
    every = {} if cores is None else {"skipped_records": outcome.skipped_kept,
                                      "skipped_records_every_core": decoded.skipped_records}
    return {
        "pid": name.rank,
        "rank": name.rank,
        "tag": name.tag,
        "launch": name.launch,
        "file": outcome.path.name,
        "clock_mhz": decoded.clock_mhz,
        "barrier": decoded.meta.barrier,
        "fingerprint": decoded.fingerprint,
        "legacy": decoded.meta.legacy,
        "skipped_records": decoded.skipped_records,
        **every,
        **placed.launch_metadata(position),
    }


def summary_lines(result: CollectResult) -> list[str]:
    """The human summary: what was written, then every skipped record with its reason."""
    spans = sum(o.spans_written for o in result.outcomes)
    decoded = [o.decoded for o in result.outcomes if o.decoded is not None]
    # A rank's cores with spans, whatever the number of its launches (a core whose records
    # were all dropped has a track, its drop marker, and no span).
    cores = len({(o.name.rank, slot) for o in result.outcomes for slot in o.span_slots})
    unused = sum(d.unused_slots for d in decoded)
    outputs = result.outputs
    wrote = str(outputs[0]) if len(outputs) == 1 else (
        f"{len(outputs)} files" + (f" ({outputs[0]} ... {outputs[-1]})" if outputs else ""))
    # A rank file is one launch of one rank: ranks and launches are counted apart (a rank's
    # launches of every tag are its launches, as the trace lays them on its tracks).
    launches: dict[int, int] = {}
    for o in result.outcomes:
        if o.decoded is not None:
            launches[o.name.rank] = launches.get(o.name.rank, 0) + 1
    per_rank = set(launches.values())
    each = (f", {per_rank.pop()} launches each" if len(per_rank) == 1 and max(launches.values()) > 1
            else f", {len(decoded)} launches in all" if len(decoded) > len(launches) else "")
    # The readers count the ranks that hold spans: say how many where some hold none (every
    # record of theirs dropped), so the two counts are told apart.
    spanned = len({o.name.rank for o in result.outcomes if o.span_slots})
    ranks = f"{len(launches)} ranks" + (f" ({spanned} with spans)" if spanned != len(launches) else "")
    lines = [
        f"wrote {wrote}: {ranks}{each}, {cores} cores with spans, "
        f"{spans} spans ({unused} unused core slots)"
    ] if result.written else []
    if result.written:
        lines += result.launch_notes
    skipped = sum(d.skipped_records for d in decoded)
    if skipped:
        dropped = sum(d.dropped for d in decoded)
        unknown = sum(sum(d.unknown_ids.values()) for d in decoded)
        unmatched = sum(d.unmatched_e for d in decoded)
        kept = [o.skipped_kept for o in result.outcomes if o.skipped_kept is not None]
        # --cores: the trace misses those of its cores alone (its rank table counts them)
        in_trace = (f" ({sum(kept)} of them on the cores --cores kept)"
                    if kept and sum(kept) != skipped else "")
        far = sum(d.far_records for d in decoded)
        lines.append(
            f"skipped {skipped} records{in_trace}: {dropped} dropped or overwritten (slot full), "
            f"{unknown} with unknown ids, {unmatched} unmatched E"
            + (f", {far} years from their launch's start" if far else "")
        )
    for outcome in result.outcomes:
        if outcome.decoded is not None:
            for issue in outcome.decoded.issues:
                lines.append(f"  {outcome.path}: {issue}")
    if result.written and result.alignment is not None:
        lines.extend(result.alignment.summary_lines())
    return lines


def note_lines(result: CollectResult) -> list[str]:
    notes: dict[str, list[str]] = {}
    for outcome in result.outcomes:
        if outcome.decoded is not None:
            for note in outcome.decoded.notes:
                notes.setdefault(note, []).append(outcome.path.name)
    # A cluster's note names a few of its files, not thousands.
    return [f"note: {note} ({', '.join(files[:4])}{f' and {len(files) - 4} more' if len(files) > 4 else ''})"
            for note, files in notes.items()]
