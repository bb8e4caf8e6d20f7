"""Write device buffers from Python exactly as the runtime block does (tests, bench, demos).

:class:`SlotWriter` mirrors ``MoeTracing`` in codemods/templates/moe_tracing_runtime.h,
with or without optrace's overflow guard and fingerprint record, so the legacy layout
(including its self-overwriting overflow) can be produced too. The host end-to-end test
checks the C++ runtime against the same reader, so the two writers cannot drift apart
unnoticed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from .atomic import atomic_output, write_output
from .format import PROF_SIZE_PER_CORE, capacity, fingerprint_word, pack_event, trace_point_hash
from .pt_reader import load_pt
from .pt_writer import write_pt
from .save import save_profiling_data


class SlotWriter:
    """One core's slot: ``record`` is ``MoeTracing(id, extraId, index)`` at ``cycle``."""

    def __init__(
        self,
        slot: np.ndarray,
        start_cycle: int,
        *,
        fingerprint: int | None = None,
        guard: bool | None = None,
    ) -> None:
        if slot.dtype != np.int64 or slot.ndim != 1:
            raise ValueError("a slot is a 1-d int64 array")
        self.slot = slot
        self.words = slot.size
        self.cap = capacity(self.words)
        # optrace's runtime has the guard and the fingerprint record; legacy has neither.
        self.guard = fingerprint is not None if guard is None else guard
        slot[0] = 1
        slot[self.words - 1] = np.array(start_cycle % (1 << 64), dtype=np.uint64).view(np.int64)
        if fingerprint is not None:
            self._write(fingerprint_word(fingerprint), start_cycle)

    def _write(self, word: int, cycle: int) -> None:
        # Same statements as MoeTracing: n = buf[0]; [guard] write; buf[0] = n + 1.
        n = int(self.slot[0])
        if not self.guard or n <= self.cap:
            # Without the guard, past capacity the event index runs into the timestamp
            # area (the legacy overflow); writes outside the slot are left out here.
            if 0 <= n < self.words:
                self.slot[n] = word
            ts_index = self.words - 1 - n
            if 0 <= ts_index < self.words:
                self.slot[ts_index] = np.array(cycle % (1 << 64), dtype=np.uint64).view(np.int64)
        self.slot[0] = n + 1

    def record(self, point_id: int, cycle: int, extra_id: int = 0, index: int = 0) -> None:
        self._write(pack_event(point_id, extra_id, index), cycle)


def new_buffer(slots: int, slot_words: int = PROF_SIZE_PER_CORE) -> np.ndarray:
    """A zeroed ``[slots, slot_words]`` int64 buffer, as the GM output is allocated."""
    return np.zeros((slots, slot_words), dtype=np.int64)


#: The simulated host's wall clock at its monotonic clock's 0 (ns since the epoch).
WALL_AT_MONOTONIC_ZERO_NS = 1_700_000_000 * 10**9


def simulated_sync(host_ns: int, window_ns: int, empty_sync_ns: int) -> Callable[[], tuple[int, int]]:
    """A ``host_clock`` for :func:`save.save_profiling_data` around a simulated device
    sync: save reads it right before the sync (``window_ns`` before ``host_ns``), right
    after it (``host_ns``, the anchor's reading) and after an empty sync
    (``empty_sync_ns`` later). Monotonic ns; the wall clock counts the same time."""
    if window_ns < 0 or empty_sync_ns < 0:
        raise ValueError("a sync window and an empty sync's length are not negative")
    readings: Iterator[int] = iter((host_ns - window_ns, host_ns, host_ns + empty_sync_ns))

    def clock() -> tuple[int, int]:
        now = next(readings)
        return now, WALL_AT_MONOTONIC_ZERO_NS + now

    return clock


#: Labels of :func:`write_ranks`' program, with the line of their B point.
CLUSTER_LABELS = {"step": 20, "step compute": 24, "step barrier": 30}
CLUSTER_SOURCE = "op_kernel/cluster_demo.h"


def cluster_point_map() -> dict[str, object]:
    """The point map of :func:`write_ranks`' program (ids as ``TRACE_POINT`` hashes them)."""
    points: dict[str, object] = {}
    for label, line in CLUSTER_LABELS.items():
        for kind, at in (("B", line), ("E", line + 2)):
            points[str(trace_point_hash(label, kind))] = {
                "label": label, "file": CLUSTER_SOURCE, "line": at, "event_type": kind,
                "event_id": trace_point_hash(label, "B")}
    return {"format_version": 1, "points": points}


class ClusterRun:
    """What :func:`write_ranks` wrote: per rank, the true time (ticks) its kernel started
    and its last record, the device clock it counted on."""

    def __init__(self, starts: list[int], ends: list[int], epochs: list[int], drifts: list[float]) -> None:
        self.starts = starts
        self.ends = ends
        self.epochs = epochs
        self.drifts = drifts


def write_ranks(
    directory: Path,
    skews: list[int],
    *,
    drifts: list[float] | None = None,
    occurrences: int = 4,
    period: int = 5000,
    aic: int = 2,
    aiv: int = 4,
    jitter: int = 0,
    anchors: bool = True,
    sync_latency_ns: int | Sequence[int] = 0,
    sync_windows_ns: int | Sequence[int] = 40_000,
    empty_sync_ns: int = 15_000,
    op: str | None = None,
    clock_mhz: float = 50.0,
    seed: int = 0,
    launch: int = 0,
    at: int = 0,
    warmup: int = 0,
) -> ClusterRun:
    """Ranks of one launch whose clocks disagree by known amounts (tests, demos).

    True time is in ticks. Rank ``r``'s kernel starts at ``skews[r]``; every core runs
    ``occurrences`` steps of "step compute" (a length of its own) then "step barrier",
    which every core of every rank leaves at the same true time (``k * period``, plus up
    to ``jitter`` ticks per core). Each device counts from its own epoch (a random
    boot), at a rate off by ``drifts[r]`` (0.001 = 1000 ppm fast). With ``anchors`` the
    rank files carry host anchors read ``sync_latency_ns`` after the last record, on one
    host's clocks (its monotonic and wall clock both count true time: true tick 0 is
    host monotonic 1e12 ns and wall clock 1.7e18 ns). The sync was called
    ``sync_windows_ns`` before that reading (a latency within the window: the kernel was
    still running), and an empty sync takes ``empty_sync_ns``: a window under twice that
    reads as a sync that did not wait (align.Anchor.sync_waited). The latency and the
    window are one value for every rank or one per rank. ``launch`` names the files' launch,
    ``at`` moves it that many ticks later in true time (several launches), ``warmup`` is
    recorded as save's warm-up count.
    """
    rng = np.random.default_rng(seed)
    drifts = [0.0] * len(skews) if drifts is None else drifts
    if len(drifts) != len(skews):
        raise ValueError("one drift per rank")
    windows = _per_rank(sync_windows_ns, len(skews), "sync window")
    latencies = _per_rank(sync_latency_ns, len(skews), "sync latency")
    directory.mkdir(parents=True, exist_ok=True)
    ids = {label: (trace_point_hash(label, "B"), trace_point_hash(label, "E")) for label in CLUSTER_LABELS}
    tick_ns = 1000.0 / clock_mhz
    starts, ends, epochs = [], [], []
    per_rank = zip(skews, drifts, windows, latencies, strict=True)
    for rank, (skew, drift, window, latency) in enumerate(per_rank):
        epoch = int(rng.integers(1 << 40, 1 << 50))

        def device(true: int, epoch: int = epoch, drift: float = drift) -> int:
            return epoch + round(true * (1.0 + drift))

        data = new_buffer(aic + aiv, 256)
        last = at + skew
        for slot in range(aic + aiv):
            start = at + skew + slot  # launch skew between cores of one rank
            writer = SlotWriter(data[slot], device(start))
            t = start + 5
            for k in range(1, occurrences + 1):
                leave = at + k * period + int(rng.integers(0, jitter + 1))
                if t + 40 >= leave:
                    raise ValueError("period too short for the skews")
                compute_end = t + 10 + int(rng.integers(0, (leave - t) // 2))
                writer.record(ids["step"][0], device(t))
                writer.record(ids["step compute"][0], device(t + 1))
                writer.record(ids["step compute"][1], device(compute_end))
                writer.record(ids["step barrier"][0], device(compute_end + 1))
                writer.record(ids["step barrier"][1], device(leave))
                writer.record(ids["step"][1], device(leave + 1))
                t = leave + 5
            last = max(last, t - 4)
        starts.append(at + skew)
        ends.append(last)
        epochs.append(epoch)
        host_ns = round(last * tick_ns) + latency + 10**12  # the host clock's own zero
        clocks = simulated_sync(host_ns, window, empty_sync_ns)
        path = save_profiling_data(data, rank, directory, aic_cores=aic, aiv_cores=aiv, clock_mhz=clock_mhz,
                                   op=op, host_clock=clocks, launch=launch)
        if (not anchors or warmup) and path is not None:
            _edit_meta(path, anchors, warmup)
    write_output(directory / "point_map.json", (json.dumps(cluster_point_map(), indent=1) + "\n").encode())
    return ClusterRun(starts, ends, epochs, list(drifts))


def _per_rank(value: int | Sequence[int], ranks: int, what: str) -> list[int]:
    values = [value] * ranks if isinstance(value, int) else list(value)
    if len(values) != ranks:
        raise ValueError(f"one {what} per rank")
    return values


def _edit_meta(path: Path, anchor: bool, warmup: int) -> None:
    """Rewrite a rank file without its anchor (files from before anchors existed), or
    with a warm-up count (save's own would skip the calls)."""
    document = load_pt(path)
    if not anchor:
        document["meta"]["extra"].pop("anchor", None)
    document["meta"]["extra"]["warmup"] = warmup
    document["data"] = np.array(document["data"])
    with atomic_output(path) as handle:
        write_pt(document, handle)
