"""The readers' figures built a rank at a time: ``report``'s label statistics and page,
``compare``'s launch times and ``inspect``'s rows, from span tables that each hold whole
rows (a rank's cores of one or more launches), never every span at once.

A cluster's trace has tens of millions of spans; a table of all of them (~36 bytes a
span, its nesting on top) made the readers' memory grow with the ranks. What the figures
need of the spans is small: per label its count, sums and the distinct durations with
their counts (a percentile read from those is the one numpy reads from every duration:
durations are whole clock ticks, so their distinct values are few and saturate); per
row its first start, last end and busy time; per launch and label the busiest core's
total. Each figure is exact where its terms are (counts, extrema, percentiles); a sum
over ranks is added rank by rank, so it may differ from one sum of every span in the
last bits.

A table holding every span (a JSON trace, read whole anyway) is one chunk: the figures
are those of one pass. Readers feed the chunks in the order of the trace's rows; the
run's settings, warnings and counts the source knows only at its end come with its
:class:`spans.Closing`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from .labelpaths import disagreement, label_parents, outside_parent
from .spans import PROCESSING, RunCounts, RunSettings, SpanTable, rank_of_track, unique_small

#: Distinct durations of one label held in pieces before they are merged: bounds the
#: pieces' overhead without merging at every rank.
_MERGE_PIECES = 32


class Durations:
    """One label's durations as distinct values and their counts (exact)."""

    __slots__ = ("counts", "pieces", "values")

    def __init__(self) -> None:
        self.values = np.zeros(0)
        self.counts = np.zeros(0, np.int64)
        self.pieces: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, durations: np.ndarray) -> None:
        self.pieces.append(distinct(durations))
        if len(self.pieces) >= _MERGE_PIECES:
            self._merge()

    def _merge(self) -> None:
        if not self.pieces:
            return
        values = np.concatenate([self.values, *(v for v, _ in self.pieces)])
        counts = np.concatenate([self.counts, *(c for _, c in self.pieces)])
        self.pieces = []
        order = np.argsort(values, kind="stable")
        values, counts = values[order], counts[order]
        first = np.ones(values.size, bool)
        first[1:] = values[1:] != values[:-1]
        at = np.flatnonzero(first)
        self.values = values[at]
        self.counts = np.add.reduceat(counts, at) if at.size else counts[:0]

    def percentiles(self, percents: tuple[float, ...]) -> list[float]:
        self._merge()
        return counted_percentiles(self.values, self.counts, percents)


def distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and how often each comes (NaN last, each its own value, as
    np.sort puts them; not np.unique, which imports numpy.ma on its first call)."""
    ordered = np.sort(values)
    if not ordered.size:
        return ordered, np.zeros(0, np.int64)
    first = np.ones(ordered.size, bool)
    first[1:] = ordered[1:] != ordered[:-1]
    at = np.flatnonzero(first)
    counts = np.diff(np.append(at, ordered.size))
    return ordered[at], counts.astype(np.int64)


def counted_percentiles(values: np.ndarray, counts: np.ndarray, percents: tuple[float, ...]) -> list[float]:
    """spans.percentiles (numpy's linear method, to the bit) of the durations ``values``
    repeated ``counts`` times: the same two order statistics per percent, read from the
    running counts instead of a partition of every duration."""
    n = int(counts.sum())
    if n == 0:
        raise ValueError("no durations")
    if np.isnan(values[-1]):
        return [math.nan] * len(percents)
    ends = np.cumsum(counts)

    def at(k: int) -> np.float64:
        value: np.float64 = values[int(np.searchsorted(ends, k % n, side="right"))]
        return value

    out = []
    for percent in percents:
        position = (n - 1) * (percent / 100)
        low = -1 if position >= n - 1 else math.floor(position)  # past the end: the last, twice
        a, b = at(low), at(-1 if low < 0 else low + 1)
        t = np.float64(position - low)
        diff = b - a
        out.append(float(b - diff * (1 - t) if t >= 0.5 else a + diff * t))
    return out


@dataclass
class _Label:
    count: int = 0
    total: float = 0.0
    self_total: float = 0.0
    durations: Durations = field(default_factory=Durations)
    # Per-core totals of the label: their greatest, and the sum and number of those > 0.
    core_max: float = 0.0
    core_sum: float = 0.0
    core_count: int = 0
    tracks: int = 0


def _groups(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort order, unique keys and group boundaries of an integer column (ids of labels:
    a count of each, and a sort by radix where they fit in 16 bits)."""
    if keys.size and int(keys.min()) >= 0 and int(keys.max()) < 1 << 16:
        order = np.argsort(keys.astype(np.uint16), kind="stable")
        counts = np.bincount(keys)
        values = np.flatnonzero(counts)
        bounds = np.concatenate([[0], np.cumsum(counts[values])])
        return order, values, bounds
    order = np.argsort(keys, kind="stable")
    values, starts = np.unique(keys[order], return_index=True)
    bounds = np.append(starts, keys.size)
    return order, values, bounds


class Rows:
    """What counts the rows seen so far: ranks, cores, launches, spans; and with
    ``named``, the rows' names in order (a page's or inspect's; report and compare need
    only the counts)."""

    def __init__(self, named: bool = True) -> None:
        # The names a table at a time: the process's part, then its threads' (every rank's
        # cores alike: one tuple for all of them), joined when asked for — 36,864 rows'
        # names held whole were most of inspect's state at 512 ranks.
        self._names: list[tuple[str, tuple[str, ...]]] = []
        self._threads: dict[tuple[str, ...], tuple[str, ...]] = {}
        self.named = named
        self.rows = 0
        # per rank its cores' names: one set for every rank of the same cores (512 ranks of
        # 72 cores held 512 sets of 72), one string for every rank's
        self.cores: dict[str, frozenset[str]] = {}
        self._core_sets: dict[frozenset[str], frozenset[str]] = {}
        self.launches: dict[str, int] = {}
        self.spans = 0
        self._spanless_tracks: set[tuple[str, str]] = set()  # a drop marker's alone

    def add(self, table: SpanTable) -> int:
        """Count the chunk's rows; returns the first one's place among all rows."""
        base = self.rows
        self.rows += len(table.tracks)
        if self.named and table.tracks:
            head = table.tracks[0].split(" / ", 1)[0] + " / "
            if not all(name.startswith(head) for name in table.tracks):
                head = ""
            threads = tuple(name[len(head) :] for name in table.tracks)
            self._names.append((head, self._threads.setdefault(threads, threads)))
        seen: dict[str, set[str]] = {}
        for name in table.tracks:
            core = sys.intern(name.split(" / ", 1)[1]) if " / " in name else ""
            seen.setdefault(rank_of_track(name), set()).add(core)
        for rank, cores in seen.items():
            held = self.cores.get(rank)
            every = frozenset(cores if held is None else held | cores)
            self.cores[rank] = self._core_sets.setdefault(every, every)
        for launch in table.launches:
            self.launches.setdefault(launch, len(self.launches))
        self.spans += int(table.ts.size)
        return base

    def add_spanless(self, name: str) -> bool:
        """A row after the chunk's last: a core's track that holds no span, only its drop
        marker (inspect lists it with its drops). Ranks and cores stay those with spans,
        as every reader counts them. True when the core's track is one no row counted
        yet (a chunk holds a rank's every launch, so its cores with spans are in by now):
        a track of the trace all the same."""
        self.rows += 1
        if self.named:
            self._names.append(("", (name,)))
        core = name.split(" / ", 1)[1] if " / " in name else ""
        rank = rank_of_track(name)
        held = self.cores.get(rank)
        if (held is not None and core in held) or (rank, core) in self._spanless_tracks:
            return False
        self._spanless_tracks.add((rank, core))
        return True

    @property
    def names(self) -> list[str]:
        """The rows' names in order (``named``)."""
        return [head + thread for head, threads in self._names for thread in threads]

    def counts(self) -> RunCounts:
        """spans.run_counts of the table all chunks would make."""
        return RunCounts(len(self.cores), max(1, len(self.launches)) if self.rows else 0,
                         sum(len(cores) for cores in self.cores.values()), self.rows, self.spans)


@dataclass
class PageData:
    """What report's page and PNG draw: every row's name, the self time of each (row,
    label) that has any, and the spans of the first ``shown`` rows (the timeline)."""

    tracks: list[str]
    labels: list[str]
    self_row: np.ndarray  # int64 row
    self_label: np.ndarray  # int64 index into labels
    self_us: np.ndarray  # float64
    shown: SpanTable  # rows 0 .. shown-1 of the whole, their spans only


@dataclass(frozen=True)
class LabelStats:
    """One label's span count, total, mean and percentiles (report's table)."""

    label: str
    count: int
    total_us: float
    mean_us: float
    p50_us: float
    p99_us: float
    self_us: float
    share: float | None  # of the processing total; None without a processing span
    imbalance: float  # max over mean of per-track totals
    tracks: int


class ReportRollup:
    """report's figures (report.build_report), a chunk at a time; with ``page_rows``, what
    its page draws too (rows past that many only as self time per row and label)."""

    nested = True

    def __init__(self, page_rows: int | None = None) -> None:
        self.rows = Rows(named=page_rows is not None)
        self.label_ids: dict[str, int] = {}
        self.labels: list[_Label] = []
        self.busy_self = 0.0
        # (child, the parent its chunk named, spans outside) per chunk: see label_path_warnings.
        self.outside: list[tuple[str, str, int]] = []
        self.page_rows = page_rows
        self._self: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._shown: list[tuple[np.ndarray, ...]] = []

    def _label(self, name: str) -> int:
        found = self.label_ids.get(name)
        if found is None:
            found = self.label_ids[name] = len(self.labels)
            self.labels.append(_Label())
        return found

    def add(self, table: SpanTable) -> None:
        base = self.rows.add(table)
        ids = np.array([self._label(name) for name in table.labels] or [0], np.int64)
        order, values, bounds = _groups(table.label)
        for i, local in enumerate(values.tolist()):
            rows = order[bounds[i] : bounds[i + 1]]
            dur = table.dur[rows]
            tracks = table.track[rows]
            stats = self.labels[int(ids[local])]
            stats.count += int(rows.size)
            stats.total += float(dur.sum())
            stats.self_total += float(table.self_time[rows].sum())
            stats.durations.add(dur)
            per_track = np.bincount(tracks, weights=dur)
            positive = per_track[per_track > 0]
            if positive.size:
                stats.core_max = max(stats.core_max, float(positive.max()))
                stats.core_sum += float(positive.sum())
                stats.core_count += int(positive.size)
            stats.tracks += int(np.count_nonzero(np.bincount(tracks)))
        self.busy_self += float(table.self_time.sum())
        self.outside += outside_parent(table.labels, table.label, table.track, table.ts, table.ts + table.dur)
        if self.page_rows is not None and table.label.size:
            self._page(table, base, ids)

    def _page(self, table: SpanTable, base: int, ids: np.ndarray) -> None:
        labels = max(len(table.labels), 1)
        pairs = table.track.astype(np.int64) * labels + table.label
        order, keys, bounds = _groups(pairs)
        sums = np.add.reduceat(table.self_time[order], bounds[:-1]) if keys.size else np.zeros(0)
        self._self.append((keys // labels + base, ids[keys % labels], sums))
        assert self.page_rows is not None
        if base < self.page_rows:
            keep = np.flatnonzero(table.track < self.page_rows - base)
            self._shown.append((ids[table.label[keep]], table.track[keep].astype(np.int64) + base,
                                table.ts[keep], table.dur[keep], table.depth[keep], table.self_time[keep]))

    def stats(self, top: int) -> tuple[float | None, list[LabelStats], list[LabelStats]]:
        """(processing's total, the labels' statistics by label, the hot spots)."""
        names = list(self.label_ids)
        processing = self.label_ids.get(PROCESSING)
        processing_total = self.labels[processing].total if processing is not None else None
        if processing_total == 0.0:
            processing_total = None
        rows: list[LabelStats] = []
        for name, stats in zip(names, self.labels, strict=True):
            if not stats.count:
                continue
            p50, p99 = stats.durations.percentiles((50, 99))
            mean_core = stats.core_sum / stats.core_count if stats.core_count else 0.0
            rows.append(LabelStats(
                label=name, count=stats.count, total_us=stats.total, mean_us=stats.total / stats.count,
                p50_us=p50, p99_us=p99, self_us=stats.self_total,
                share=stats.total / processing_total if processing_total else None,
                imbalance=stats.core_max / mean_core if mean_core > 0 else 1.0, tracks=stats.tracks))
        rows.sort(key=lambda s: s.label)
        return processing_total, rows, sorted(rows, key=lambda s: s.self_us, reverse=True)[:top]

    def label_path_warnings(self) -> list[str]:
        """labelpaths.outside_parent's findings over every chunk, as report words them.

        A chunk names a child's parent among its own labels; the run's may be a longer
        one the chunk never ran. Then the chunk's cores ran no span of the run's parent,
        and a core that did not run the parent is not contradicted by a child (the
        whole-table check's rule): its count is not the run's and is left out."""
        names = list(self.label_ids)
        parents = label_parents(names)
        totals: dict[str, int] = {}
        for child, parent, count in self.outside:
            wanted = parents[self.label_ids[child]]
            if wanted >= 0 and names[wanted] == parent:
                totals[child] = totals.get(child, 0) + count
        return [f"{disagreement(child, names[parents[self.label_ids[child]]])} ({totals[child]} spans)"
                for child in names if totals.get(child)]

    def page(self) -> PageData:
        assert self.page_rows is not None
        empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
        parts = self._self or [empty]
        shown = self._shown or [(*empty[:2], np.zeros(0), np.zeros(0), np.zeros(0, np.int32), np.zeros(0))]
        label, track, ts, dur, depth, self_time = (np.concatenate(c) for c in zip(*shown, strict=True))
        labels = list(self.label_ids)
        table = SpanTable(source="", labels=labels, tracks=self.rows.names[: self.page_rows], processes=1,
                          label=label.astype(np.int32), track=track.astype(np.int32), ts=ts, dur=dur,
                          settings=RunSettings(), depth=depth, self_time=self_time)
        row, label_of, self_us = (np.concatenate(c) for c in zip(*parts, strict=True))
        return PageData(self.rows.names, labels, row, label_of, self_us, table)


class LaunchRollup:
    """compare's launch times (compare.launch_times), a chunk at a time: per launch and
    label the largest per-core total, the labels with spans, each launch's ranks."""

    nested = False  # sums of durations: no depth or self time needed

    def __init__(self) -> None:
        self.label_ids: dict[str, int] = {}
        self.launch_ids: dict[str, int] = {}
        self.values = np.zeros((0, 0))
        self.present: set[str] = set()
        self.processes: dict[int, set[str]] = {}

    def add(self, table: SpanTable) -> None:
        for name in table.labels:
            self.label_ids.setdefault(name, len(self.label_ids))
        for name in table.launches:
            self.launch_ids.setdefault(name, len(self.launch_ids))
        if not table.label.size:
            return
        n_labels = len(table.labels)
        # Per (core, label) present: the label's total on that core, summed as
        # compare.launch_times always summed it (a bincount in span order).
        pairs, inverse = unique_small(table.track.astype(np.int64) * n_labels + table.label)
        totals = np.bincount(inverse.ravel(), weights=table.dur, minlength=pairs.size)
        track, label = pairs // n_labels, pairs % n_labels
        launch_of = np.array([self.launch_ids[n] for n in table.launches] or [0], np.int64)
        label_of = np.array([self.label_ids[n] for n in table.labels], np.int64)
        launch = launch_of[table.track_launch[track]]
        shape = (len(self.launch_ids), len(self.label_ids))
        if self.values.shape != shape:
            grown = np.zeros(shape)
            grown[: self.values.shape[0], : self.values.shape[1]] = self.values
            self.values = grown
        np.maximum.at(self.values, (launch, label_of[label]), totals)
        self.present.update(table.labels[k] for k in np.flatnonzero(np.bincount(table.label)).tolist())
        # the pairs are sorted, so their tracks are: each once
        for t in track[np.flatnonzero(np.diff(track, prepend=-1))].tolist():
            self.processes.setdefault(int(launch_of[table.track_launch[t]]), set()).add(
                table.tracks[t].split(" / ", 1)[0])

    def times(self) -> tuple[list[str], np.ndarray, np.ndarray, list[int]]:
        """(labels, values [launches with spans, labels], present [labels], ranks per launch)."""
        labels = list(self.label_ids)
        used = sorted(self.processes)
        values = self.values[used] if self.values.size else np.zeros((0, len(labels)))
        present = np.array([name in self.present for name in labels], dtype=bool)
        return labels, values, present, [len(self.processes[k]) for k in used]


@dataclass
class InspectRow:
    track: str
    spans: int
    first_us: float | None
    last_us: float | None
    busy_us: float


class InspectRollup:
    """inspect's rows (trace_inspection.inspect_trace): per row its spans, first start,
    last end and busy time (its top-level spans), and the drops found in its chunk."""

    nested = True

    def __init__(self) -> None:
        self.rows = Rows()
        self._columns: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._spanless: list[int] = []  # per chunk, its rows with a drop marker and no span
        self._chunk_rows: frozenset[str] = frozenset()
        self.drops: dict[str, int] = {}
        self.spanless_tracks = 0  # the trace's tracks that hold a drop marker and no span

    def add(self, table: SpanTable, instants: Iterable[tuple[str, float, int]] = ()) -> None:
        """``instants``: the chunk's drop markers, (trace track, µs, records dropped)."""
        self.rows.add(table)
        n = len(table.tracks)
        track = table.track.astype(np.intp, copy=False)
        per_track = np.bincount(track, minlength=n)
        first = np.full(n, np.inf)
        np.minimum.at(first, track, table.ts)
        last = np.full(n, -np.inf)
        np.maximum.at(last, track, table.ts + table.dur)
        busy = np.bincount(track, weights=np.where(table.depth == 0, table.dur, 0.0), minlength=n)
        self._columns.append((per_track, first, last, busy))
        self._spanless.append(0)
        self._chunk_rows = frozenset(table.tracks)
        for track_name, at, count in instants:
            self.add_drop(table.row_at(track_name, at), count)

    def add_drop(self, key: str, count: int) -> None:
        """A drop marker of the chunk added last, on row `key`: a row of its own after the
        chunk's where the core holds no span there (every record of it dropped)."""
        if key not in self.drops and key not in self._chunk_rows and self._spanless:
            self._spanless[-1] += 1
            self.spanless_tracks += self.rows.add_spanless(key)
        self.drops[key] = self.drops.get(key, 0) + count

    @property
    def found(self) -> Iterator[InspectRow]:
        """The rows in order (columns held, a row's object made as it is shown)."""
        names = iter(self.rows.names)
        for (per_track, first, last, busy), spanless in zip(self._columns, self._spanless, strict=True):
            for spans, a, b, c in zip(per_track.tolist(), first.tolist(), last.tolist(), busy.tolist(),
                                      strict=True):
                yield InspectRow(next(names), spans, a if spans else None, b if spans else None,
                                 c if spans else 0.0)
            for _ in range(spanless):
                yield InspectRow(next(names), 0, None, None, 0.0)
