"""``optrace collect``: a profiling directory (rank files + point map) to a Chrome trace.

Rank files are read, decoded and formatted one after another and streamed into the trace
in rank order, a block of rows at a time, so memory stays at about one rank's buffer and
rows per process. Several processes (``-j N``, default one per CPU) each take a consecutive
run of rank files; the trace has the same bytes whatever their number. A rank file that
cannot be used is reported (``path: message``) and the other ranks are still written.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .atomic import OutputError, output_target
from .chrome import (
    TRACE_FORMAT,
    TRACE_FORMAT_VERSION,
    ChromeTraceWriter,
    CoreFilter,
    EventPart,
    EventSink,
    RenderedRank,
    RowScratch,
    label_matcher,
    render_rank,
)
from .decode import DecodeOptions, RankDecode, decode_rank
from .errors import ProfilingInputError
from .numbers import RANK, RANK_OFFSET_US, check_number
from .pointmap import POINT_MAP_NAME, PointMap, load_point_map
from .rankfile import RankFileName, find_rank_files, read_rank_file
from .records import FrozenRecord, Record
from .trace_files import SizeWatch, write_files
from .workers import Channel, Ticks, Worker, can_fork

EXIT_OK = 0
EXIT_SKIPPED = 1
EXIT_BAD_INPUT = 2


# Plain classes, not dataclasses: see records.py (collect's start-up time).
class CollectOptions(FrozenRecord):
    __match_args__ = ("point_map", "clock_mhz", "ranks", "cores", "labels", "rank_offsets_us",
                      "ignore_fingerprint", "jobs", "format", "split")
    __slots__ = __match_args__
    point_map: Path | None  # None: point_map.json beside the rank files
    clock_mhz: float | None  # None: each rank file's, else 50 MHz
    ranks: frozenset[int] | None
    cores: CoreFilter | None
    labels: list[str] | None
    rank_offsets_us: dict[int, float]
    ignore_fingerprint: bool
    jobs: int | None  # processes (see collect_processes); None: 1, 0: one per CPU (<= 4)
    format: str | None  # "json" | "perfetto"; None: by the output's name (trace_format)
    split: str | int | None  # "rank", a size in bytes (trace_files.parse_split), None: one file

    def __init__(
        self,
        point_map: Path | None = None,
        clock_mhz: float | None = None,
        ranks: frozenset[int] | None = None,
        cores: CoreFilter | None = None,
        labels: list[str] | None = None,
        rank_offsets_us: dict[int, float] | None = None,
        ignore_fingerprint: bool = False,
        jobs: int | None = None,
        format: str | None = None,
        split: str | int | None = None,
    ) -> None:
        values = (point_map, clock_mhz, ranks, cores, labels, rank_offsets_us or {}, ignore_fingerprint, jobs,
                  format, split)
        for name, value in zip(self.__match_args__, values, strict=True):
            object.__setattr__(self, name, value)


class RankOutcome(Record):
    """One rank file's contribution to the trace (or why it has none)."""

    __match_args__ = ("name", "path", "decoded", "error", "spans_written", "cores_written")
    __slots__ = __match_args__
    name: RankFileName
    path: Path
    decoded: RankDecode | None
    error: ProfilingInputError | None
    spans_written: int
    cores_written: int  # decoded.cores is emptied once they are in the trace

    def __init__(
        self,
        name: RankFileName,
        path: Path,
        decoded: RankDecode | None = None,
        error: ProfilingInputError | None = None,
        spans_written: int = 0,
        cores_written: int = 0,
    ) -> None:
        self.name = name
        self.path = path
        self.decoded = decoded
        self.error = error
        self.spans_written = spans_written
        self.cores_written = cores_written


class NothingToWrite(Exception):
    """collect would write a trace without a single span (``--labels`` that match no label
    of the map): a warning, nothing written, exit 1 — an empty trace only hides the mistake."""


class CollectResult(Record):
    __match_args__ = ("output", "point_map", "outcomes", "events", "outputs", "written")
    __slots__ = __match_args__
    output: Path
    point_map: PointMap
    outcomes: list[RankOutcome]
    events: int
    outputs: list[Path]  # the files written: [output], or its parts with --split; [] if none
    written: bool  # False: no span decoded (or kept by --labels / --cores), no trace written

    def __init__(
        self, output: Path, point_map: PointMap, outcomes: list[RankOutcome], events: int,
        outputs: list[Path] | None = None, written: bool = True,
    ) -> None:
        self.output = output
        self.point_map = point_map
        self.outcomes = outcomes
        self.events = events
        self.outputs = ([output] if written else []) if outputs is None else outputs
        self.written = written

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
            number, offset = int(rank), float(value)
        except ValueError:
            raise ValueError(f"--rank-offsets: {part!r} is not RANK=MICROSECONDS") from None
        # Finite and in range: a NaN or 1e308 offset would put NaN / inf in every timestamp.
        check_number(f"--rank-offsets rank {rank.strip()}", number, RANK)
        offsets[number] = check_number(f"--rank-offsets {part.strip()!r}", offset, RANK_OFFSET_US)
    return offsets


def resolve_point_map(profiling_dir: Path, explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    beside = profiling_dir / POINT_MAP_NAME
    if os.path.lexists(beside):  # a FIFO or a directory there is named when it is read
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


#: Output names that select the Perfetto protobuf format (``--format`` overrides).
PERFETTO_SUFFIXES = (".pftrace", ".pftrace.gz", ".perfetto-trace")


def trace_format(output: Path, requested: str | None) -> str:
    """``json`` or ``perfetto``: as asked, else by the output's name (``.pftrace``)."""
    if requested is not None:
        if requested not in ("json", "perfetto"):
            raise ValueError(f"--format must be json or perfetto, not {requested!r}")
        return requested
    return "perfetto" if output.name.endswith(PERFETTO_SUFFIXES) else "json"


def collect_processes(jobs: int | None, files: int, compress: bool) -> int:
    """Processes that each decode, format and write a run of ranks (see :mod:`workers`).

    Default one: more only pay where the CPUs really run side by side. On the 2-vCPU
    benchmark machine two busy processes each ran at half speed (a plain Python loop:
    0.19 s alone, 0.38 s beside another), and ``-j 2`` was slower than one process
    (0.10-0.13 s against 0.08 s of decoding and writing). 0 asks for one per CPU this
    process may use, at most 4. One for ``.gz`` output (a gzip stream is one sequence,
    compressed in order), and where :func:`workers.can_fork` says no."""
    if compress or not can_fork() or jobs is None:
        return 1
    if jobs == 0:
        affinity = getattr(os, "sched_getaffinity", None)
        jobs = min(4, len(affinity(0)) if affinity is not None else os.cpu_count() or 1)
    return max(1, min(jobs, files))


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
) -> CollectResult:
    """Decode every selected rank file and stream the trace to ``output``.

    With several processes (``options.jobs``), each takes a consecutive run of rank files
    and writes it into the trace at its place (:func:`_run_side_by_side`; for very large
    inputs into a temporary file appended at the end, :func:`_run_forked`), so the trace
    has the same bytes whatever the number of processes. Raises ProfilingInputError when
    nothing can be collected (no rank files, unusable point map); per-rank problems are
    in the result instead.
    """
    options = options or CollectOptions()
    fmt = trace_format(output, options.format)
    files = list_rank_files(profiling_dir)
    point_map = load_point_map(resolve_point_map(profiling_dir, options.point_map))
    if options.ranks is not None:
        files = [(n, p) for n, p in files if n.rank in options.ranks]
        if not files:
            raise ProfilingInputError(profiling_dir, "no rank files match --ranks")
    if options.labels and not any(map(label_matcher(options.labels), point_map.labels)):
        raise NothingToWrite(
            f"--labels {','.join(options.labels)}: no label of {point_map.path} is or lies below "
            f"them: nothing written"
        )
    # Refused before anything is decoded: an output that is a rank file or the point map,
    # a FIFO, a socket (runtime/atomic.py).
    inputs = [path for _, path in files] + [Path(point_map.path)]
    target = output_target(output, inputs)
    if target.through and options.split is not None:
        raise OutputError(output, "--split writes files beside the output: name a regular file")
    several_runs = len({n.run_key for n, _ in files}) > 1
    decode_options = DecodeOptions(options.clock_mhz, options.ignore_fingerprint)
    outcomes: list[RankOutcome] = [RankOutcome(name, path) for name, path in files]
    ranks_meta: list[dict[str, Any] | None] = [None] * len(files)
    # One process for .gz, .pftrace and --split (a rank at a time, written where it belongs).
    # A device is written through in order: one process too.
    one = output.name.endswith(".gz") or fmt != "json" or options.split is not None or target.through
    processes = collect_processes(options.jobs, len(files), one)
    sizes = [_size(path) for _, path in files]
    runs = rank_runs(sizes, processes)
    finished = 0

    def advance(ranks: int) -> None:
        nonlocal finished
        finished += ranks
        if progress is not None and ranks:
            progress(finished, len(files))

    def plan(position: int, scratch: RowScratch, sequences: Any = None) -> RenderedRank | None:
        """Read, decode and lay out one rank (sizes known, rows not yet formatted);
        ``sequences``: Perfetto output's packet sequence ids (None: Chrome JSON)."""
        outcome = outcomes[position]
        pid = position if several_runs else outcome.name.rank
        rendered, ranks_meta[position] = _plan_rank(
            outcome, pid, several_runs, point_map, decode_options, options, scratch, sequences
        )
        return rendered

    def other_data(positions: Iterable[int]) -> dict[str, Any]:
        return {
            "format": TRACE_FORMAT,
            "version": TRACE_FORMAT_VERSION,
            "point_map": str(point_map.path),
            "point_map_fingerprint": point_map.fingerprint,
            "ranks": [meta for meta in (ranks_meta[p] for p in positions) if meta is not None],
        }

    if fmt != "json" or options.split is not None:
        outputs, events = write_files(
            output, fmt, options.split, [path.stem for _, path in files], plan, other_data, advance,
            inputs)
        # No span in any rank: write_files wrote nothing (not even the empty parts).
        return CollectResult(output, point_map, outcomes, events, outputs, written=bool(outputs))

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

    def write(runs: list[range]) -> int:
        with ChromeTraceWriter(output) as writer:
            if len(runs) == 1:
                run(runs[0], writer.sink, advance)
            elif sum(sizes) <= SIDE_BY_SIDE_LIMIT * len(runs):
                _run_side_by_side(runs, writer, plan, outcomes, ranks_meta, advance, watch)
            else:
                _run_forked(runs, writer, run, outcomes, ranks_meta, advance)
            if not any(o.spans_written for o in outcomes):
                raise _NoSpans  # leaves the block: the temporary file is removed
            writer.close(other_data(range(len(files))))
        return writer.events

    try:
        events = write(runs)
    except _NoSpans:
        return CollectResult(output, point_map, outcomes, 0, written=False)
    except LayoutMismatch as exc:  # a bug, and nothing was written: once more, simply
        print(f"optrace: internal error: {exc}; collecting again in one process", file=sys.stderr)
        outcomes[:] = [RankOutcome(name, path) for name, path in files]
        ranks_meta[:] = [None] * len(files)
        finished = 0
        try:
            events = write([range(len(files))])
        except _NoSpans:
            return CollectResult(output, point_map, outcomes, 0, written=False)
    return CollectResult(output, point_map, outcomes, events)


class _NoSpans(Exception):
    """Raised inside the trace writer to leave without writing (see CollectResult.written)."""


_RunFunction = Callable[[range, EventSink, Callable[[int], None]], None]


def _run_forked(
    runs: list[range],
    writer: ChromeTraceWriter,
    run: _RunFunction,
    outcomes: list[RankOutcome],
    ranks_meta: list[dict[str, Any] | None],
    advance: Callable[[int], None],
) -> None:
    """The first run here, the others in forked children writing unnamed temporary files
    beside the trace; their parts are appended in order, so the bytes are those of one
    process."""
    parts = [EventPart(writer.path.parent) for _ in runs[1:]]
    ticks = Ticks()
    children: list[Worker] = []
    writer.flush()  # a child must not inherit buffered bytes of the trace

    def in_child(positions: range, part: EventPart) -> tuple[list[Any], int, bool]:
        run(positions, part.sink, lambda _ranks: ticks.tick())
        part.file.flush()
        ticks.child_done()  # before the result: the parent reads results after the ticks end
        back = [(p, outcomes[p], ranks_meta[p]) for p in positions]
        return back, part.sink.events, part.sink.wrote

    try:
        for positions, part in zip(runs[1:], parts, strict=True):
            children.append(Worker(functools.partial(in_child, positions, part)))
        ticks.parent_side()

        def done_here(ranks: int) -> None:
            advance(ranks + (ticks.drain() or 0))

        run(runs[0], writer.sink, done_here)
        while (more := ticks.drain(block=True)) is not None:
            advance(more)
        for child, part in zip(children, parts, strict=True):
            back, part.sink.events, part.sink.wrote = child.result()
            for position, outcome, meta in back:
                outcomes[position], ranks_meta[position] = outcome, meta
        for part in parts:
            writer.append(part)
    finally:
        for child in children:
            child.cancel()
        for part in parts:
            part.close()
        ticks.close()


#: Rank-file bytes per process up to which the processes write side by side into the
#: trace (each holds its whole run laid out, ~1.5x the rank files: 200 MB at this
#: limit); above it each rank is written as soon as it is laid out and the runs of the
#: other processes are appended at the end (a copy of their bytes, but one rank in memory).
SIDE_BY_SIDE_LIMIT = 128 << 20

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
) -> None:
    """Each run in its own process (the first here), all writing into the trace at once.

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
        if watch is not None:  # every run laid out: the trace's size is known before writing
            watch.add(watch.file_bytes, sum(layout[0] for layout in layouts))
        # Each run right after the previous one; ",\n" before a run's first chunk when
        # an earlier run wrote anything.
        expected = [_run_bytes(layouts[0], False)]
        offset = start + expected[0]
        leading = layouts[0][1] > 0
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
    pid: int,
    several_runs: bool,
    point_map: PointMap,
    decode_options: DecodeOptions,
    options: CollectOptions,
    scratch: RowScratch,
    sequences: Any = None,
) -> tuple[RenderedRank | None, dict[str, Any] | None]:
    """Read, decode and lay out one rank: its rows to write (formatted as they are
    written) or, given Perfetto ``sequences``, its packets; and its entry of the trace's
    rank table; (None, None) when the file could not be used (``outcome.error`` says why)."""
    name = outcome.name
    try:
        decoded = decode_rank(read_rank_file(outcome.path, name.rank), point_map, decode_options)
    except ProfilingInputError as exc:
        outcome.error = exc
        return None, None
    outcome.decoded = decoded
    offset_us = options.rank_offsets_us.get(name.rank, 0.0)
    if sequences is not None:
        from . import perfetto  # only for .pftrace: a JSON collect never pays its import

        rendered = perfetto.render_rank(pid, _process_name(name, several_runs), decoded, point_map, sequences,
                                        labels=options.labels, core_filter=options.cores, offset_us=offset_us)
    else:
        rendered = render_rank(
            pid,
            _process_name(name, several_runs),
            decoded,
            point_map,
            labels=options.labels,
            core_filter=options.cores,
            offset_us=offset_us,
            scratch=scratch,
        )
    outcome.spans_written = rendered.spans
    # The rows keep what they need: keep the counts, not the rank's span arrays, so a
    # collect of many ranks holds one rank's spans per process instead of every rank's.
    outcome.cores_written = len(decoded.cores)
    decoded.release_spans()
    meta = {
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
    return rendered, meta


def summary_lines(result: CollectResult) -> list[str]:
    """The human summary: what was written, then every skipped record with its reason."""
    spans = sum(o.spans_written for o in result.outcomes)
    decoded = [o.decoded for o in result.outcomes if o.decoded is not None]
    cores = sum(o.cores_written for o in result.outcomes)
    unused = sum(d.unused_slots for d in decoded)
    outputs = result.outputs
    wrote = str(outputs[0]) if len(outputs) == 1 else (
        f"{len(outputs)} files" + (f" ({outputs[0]} ... {outputs[-1]})" if outputs else ""))
    lines = [
        f"wrote {wrote}: {len(decoded)} ranks, {cores} cores with spans, "
        f"{spans} spans ({unused} unused core slots)"
    ] if result.written else []
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
