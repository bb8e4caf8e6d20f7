"""``optrace demo-data DIR``: a small profiling directory to try collect / report /
compare on, without an Ascend device.

The buffers are written by :class:`synth.SlotWriter` (the runtime block's own writes,
fingerprint record included) and saved by :func:`save.save_profiling_data`, so the
files are what an instrumented operator leaves behind. The program they describe is a
1C2V MoE layer: per launch, every AIV core dispatches its tokens and waits for the
others' (``dispatch`` > ``dispatch wait``), the AIC cores run the grouped matmuls once
the tokens are there (``gmm``, one indexed span per expert group), and the AIV cores wait
for them and combine (``combine`` > ``combine wait``). Phase times vary from launch to
launch (log-normal, 5 % coefficient of variation) and some cores are busier than others,
so ``report`` shows an imbalance and ``compare`` has launches to resample; the core
loads are the workload and do not depend on the seed.
``speedup`` makes the matmuls that much faster: ``processing`` gains less, because
dispatch and combine do not change.

Every rank of a launch starts at the same time, on a simulated host whose device sync
(:func:`synth.simulated_sync`) was called ``SYNC_WINDOW_NS`` before it returned, the
kernel still running, and returned ``SYNC_LATENCY_NS`` after the kernel's last record:
``collect`` places the ranks by these anchors, with an uncertainty of the window plus
one tick.
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .atomic import OutputError, atomic_directory, atomic_output
from .format import trace_point_hash
from .pointmap import POINT_MAP_NAME
from .rankfile import find_rank_files, rank_file_name
from .save import save_profiling_data
from .synth import SlotWriter, new_buffer, simulated_sync

DEMO_FINGERPRINT = 0x0D3A0DA7
SOURCE = "op_kernel/moe_demo.h"
CLOCK_MHZ = 50.0
SLOT_WORDS = 128
#: label -> (line of its B point, indexed)
LABELS: dict[str, tuple[int, bool]] = {
    "processing": (40, False),
    "processing dispatch": (52, False),
    "processing dispatch wait": (61, False),
    "processing gmm": (88, True),
    "processing combine wait": (120, False),
    "processing combine": (131, False),
}
#: Phase lengths in cycles (50 MHz: 50 cycles = 1 µs).
DISPATCH, DISPATCH_WAIT, GMM_GROUP, COMBINE_WAIT_MIN, COMBINE = 1500, 2500, 2000, 100, 2000
GROUPS = 4
CV = 0.05
LIMITS = {"ranks": (1, 64), "launches": (1, 1000), "aic": (1, 64)}
#: The simulated host's sync: called 30 µs before it returned, 5 µs after the kernel's
#: end; an empty sync takes 10 µs. Rank r's device counter reads RANK_EPOCH * (r + 1) at
#: the host's monotonic HOST_ZERO_NS.
SYNC_WINDOW_NS, SYNC_LATENCY_NS, EMPTY_SYNC_NS = 30_000, 5_000, 10_000
RANK_EPOCH, HOST_ZERO_NS = 1_000_000, 10**12


@dataclass(frozen=True)
class DemoData:
    """What the demo wrote: its folder, rank files, launches and cores."""

    directory: Path
    files: int
    ranks: int
    launches: int
    aic: int
    aiv: int


def point_map_document() -> dict[str, object]:
    points: dict[str, object] = {}
    for label, (line, indexed) in LABELS.items():
        pair = trace_point_hash(label, "B")
        for kind, at in (("B", line), ("E", line + 6)):
            point = trace_point_hash(label, kind)
            points[str(point)] = {"label": label, "file": SOURCE, "line": at, "event_type": kind,
                                  "event_id": pair, "locations": [f"{SOURCE}:{at}"],
                                  **({"indexed": True} if indexed else {})}
    return {"format_version": 1, "fingerprint": DEMO_FINGERPRINT, "generator": "optrace demo-data",
            "points": points}


def _ids(label: str) -> tuple[int, int]:
    return trace_point_hash(label, "B"), trace_point_hash(label, "E")


def check_demo_options(ranks: int, launches: int, aic: int, speedup: float) -> None:
    for name, value in (("ranks", ranks), ("launches", launches), ("aic", aic)):
        low, high = LIMITS[name]
        if not low <= value <= high:
            raise ValueError(f"--{name} must be from {low} to {high}, not {value}")
    if not math.isfinite(speedup) or not 0 <= speedup < 100:
        raise ValueError(f"--speedup must be a finite percentage from 0 to below 100, not {speedup!r}")


def write_demo(
    directory: Path,
    *,
    ranks: int = 2,
    launches: int = 8,
    aic: int = 4,
    seed: int = 0,
    speedup: float = 0.0,
) -> DemoData:
    """Write ``ranks`` x ``launches`` rank files (``aic`` AIC and 2 x ``aic`` AIV cores
    each) and their point map into ``directory``: a new directory, or one holding no rank
    files and none of the names written (not a symlink to one). All of them or none:
    they are written into a temporary directory and moved into place at the end
    (:func:`atomic.atomic_directory`); on any failure ``directory`` is as it was, and
    the error names it (or the file under it), never the temporary."""
    check_demo_options(ranks, launches, aic, speedup)
    _check_target(directory, [rank_file_name(rank, None, launch)
                              for launch in range(launches) for rank in range(ranks)] + [POINT_MAP_NAME])
    with atomic_directory(directory) as into:
        files = _write_files(into, ranks, launches, aic, seed, speedup)
    return DemoData(directory, files, ranks, launches, aic, 2 * aic)


def _check_target(directory: Path, names: list[str]) -> None:
    """Before anything is computed: ``directory`` is new, or a directory (not a link to
    one) with no rank files and nothing at the names demo-data writes (a FIFO, a
    directory, a link planted at point_map.json would otherwise be opened, written
    into or followed)."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OutputError(directory, f"cannot read: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise OutputError(directory, "a symlink; not followed (name the directory itself)")
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(directory, "not a directory")
    if find_rank_files(directory):
        raise OutputError(directory, "already holds rank files: choose an empty or new directory")
    for name in names:
        try:
            mode = os.lstat(directory / name).st_mode
        except FileNotFoundError:
            continue
        kind = next((what for test, what in _KINDS if test(mode)), "something")
        raise OutputError(directory / name, f"{kind} is there already; not overwritten: choose an "
                          "empty or new directory")


_KINDS = ((stat.S_ISLNK, "a symlink"), (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a file"))


def _write_files(directory: Path, ranks: int, launches: int, aic: int, seed: int, speedup: float) -> int:
    """The rank files and the point map, into ``directory``; returns the rank files written."""
    rng = np.random.default_rng(seed)
    sigma = math.sqrt(math.log1p(CV * CV))
    aiv = 2 * aic
    # Busier cores: each core's share of the tokens. It is the workload (the routing), so
    # the same for every seed: runs with different seeds are re-measurements of it.
    workload = np.random.default_rng(DEMO_FINGERPRINT)
    load_aic = 1.0 + 0.25 * workload.random((ranks, aic))
    load_aiv = 1.0 + 0.15 * workload.random((ranks, aiv))
    gmm_scale = 1.0 - speedup / 100.0
    files = 0
    for launch in range(launches):
        # Per launch and phase, one factor for every core of every rank: the launch's
        # inputs and the machine's state at that moment (cores of a launch move together).
        factor = rng.lognormal(-sigma * sigma / 2, sigma, size=4)
        dispatch_end = DISPATCH * factor[0] * load_aiv.max() + DISPATCH_WAIT * factor[1]
        for rank in range(ranks):
            data = new_buffer(aic + aiv, SLOT_WORDS)
            start = RANK_EPOCH * (rank + 1) + 200_000 * launch
            last = start  # the rank's last record: what the host reading follows
            gmm_ends = []
            for core in range(aic):
                skew = 3 * core
                writer = SlotWriter(data[core], start + skew, fingerprint=DEMO_FINGERPRINT)
                t = start + skew + 5
                b, e = _ids("processing")
                writer.record(b, t)
                t = start + int(dispatch_end) + 20
                gb, ge = _ids("processing gmm")
                for group in range(GROUPS):
                    jitter = rng.lognormal(0.0, 0.02)
                    length = int(GMM_GROUP * gmm_scale * factor[2] * load_aic[rank, core] * jitter)
                    writer.record(gb, t, extra_id=1, index=group)
                    writer.record(ge, t + length, extra_id=1, index=group)
                    t += length + 10
                writer.record(e, t + 5)
                last = max(last, t + 5)
                gmm_ends.append(t)
            gmm_end = max(gmm_ends)
            for core in range(aiv):
                skew = 2 * core
                writer = SlotWriter(data[aic + core], start + skew, fingerprint=DEMO_FINGERPRINT)
                t = start + skew + 5
                writer.record(_ids("processing")[0], t)
                writer.record(_ids("processing dispatch")[0], t + 5)
                t += 10
                send = int(DISPATCH * factor[0] * load_aiv[rank, core])
                wb, we = _ids("processing dispatch wait")
                writer.record(wb, t + send)
                t = max(start + int(dispatch_end), t + send + 10)
                writer.record(we, t)
                writer.record(_ids("processing dispatch")[1], t + 5)
                # `combine wait` is the start of `combine`, as its label path says (and
                # `dispatch wait` of `dispatch`): the names and the nesting agree.
                mb, me = _ids("processing combine")
                writer.record(mb, t + 8)
                cb, ce = _ids("processing combine wait")
                writer.record(cb, t + 10)
                t = max(gmm_end + 20, t + 10 + COMBINE_WAIT_MIN)
                writer.record(ce, t)
                length = int(COMBINE * factor[3] * load_aiv[rank, core])
                writer.record(me, t + 5 + length)
                writer.record(_ids("processing")[1], t + 10 + length)
                last = max(last, t + 10 + length)
            true_ns = round((last - RANK_EPOCH * (rank + 1)) * 1000 / CLOCK_MHZ)
            host_ns = HOST_ZERO_NS + true_ns + SYNC_LATENCY_NS
            save_profiling_data(data, rank, directory, launch=launch, aic_cores=aic, aiv_cores=aiv,
                                barrier=True, clock_mhz=CLOCK_MHZ,
                                host_clock=simulated_sync(host_ns, SYNC_WINDOW_NS, EMPTY_SYNC_NS))
            files += 1
    with atomic_output(directory / POINT_MAP_NAME) as handle:
        handle.write((json.dumps(point_map_document(), indent=1) + "\n").encode())
    return files
