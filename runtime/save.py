"""``save_profiling_data``: the host-side call after a launch, next to the op's caller.

It synchronises the device (torch_npu, imported only when the tensor lives on an NPU or
torch_npu is already loaded), copies the buffer to host memory, and writes
``rank{NNN}[_tag][_launchK].pt`` atomically with the metadata a reader needs (core
counts and slot layout taken from the tensor and the arguments, clock rate, barrier
setting, build fingerprint read from the buffer). Relative ``out_dir`` values resolve
against the caller's working directory at call time. Writing needs numpy only
(:mod:`pt_writer`); the file loads with ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .atomic import atomic_output
from .decode import scan_slots, signed_delta, wrap_min
from .format import DEFAULT_CLOCK_MHZ, FORMAT_VERSION, PROF_SIZE_PER_CORE, RankMeta
from .pointmap import POINT_MAP_NAME, PointMap, load_point_map
from .pt_writer import write_pt
from .rankfile import OPTRACE_KEY, rank_file_name
from .records import FrozenRecord

_lock = threading.Lock()
# (resolved out_dir, rank, tag) -> calls seen in this process, warm-up included.
_calls: Counter[tuple[str, int, str | None]] = Counter()


def reset_launch_counters() -> None:
    """Forget the per-process launch counts (tests; a new measurement session)."""
    with _lock:
        _calls.clear()


class SyncClocks(FrozenRecord):
    """The host clocks around the device sync (each a (monotonic ns, wall ns) pair).

    ``after`` is the anchor's reading. ``before`` and ``empty_sync_ns`` (how long a
    second sync, with nothing left to wait for, took) say how late it can be: None when
    there was no sync to measure (a numpy buffer without a simulated clock)."""

    __match_args__ = ("device_id", "before", "after", "empty_sync_ns")
    __slots__ = __match_args__
    device_id: int | None
    before: tuple[int, int] | None
    after: tuple[int, int]
    empty_sync_ns: int | None

    def __init__(self, device_id: int | None, before: tuple[int, int] | None, after: tuple[int, int],
                 empty_sync_ns: int | None) -> None:
        for name, value in zip(self.__match_args__, (device_id, before, after, empty_sync_ns), strict=True):
            object.__setattr__(self, name, value)


def _synchronize(tensor: Any, host_clock: Callable[[], tuple[int, int]] | None = None) -> SyncClocks:
    """Wait for the device before reading the buffer (gate G4): NPU tensors only, with
    the host clocks read right before and right after it, then after an empty sync.

    ``host_clock`` (a simulation's) is read as the real clocks would be: it stands for a
    simulated sync, so its window is recorded even without an NPU. The device id is the
    tensor's, else torch_npu's current device, else None (no NPU)."""
    device = getattr(tensor, "device", None)
    on_npu = getattr(device, "type", None) == "npu"
    read = host_clock or host_clocks
    if not on_npu and "torch_npu" not in sys.modules:
        if host_clock is None:  # nothing was synchronised: a window would measure nothing
            return SyncClocks(None, None, read(), None)
        before = read()
        after = read()
        return SyncClocks(None, before, after, read()[0] - after[0])
    # Lazy: importing torch_npu without CANN breaks `import torch`. Done before the
    # first reading: a first import takes long and would widen the window.
    import torch_npu

    before = read()
    torch_npu.npu.synchronize()
    after = read()  # at once: every statement before this adds to the anchor's error
    # The device is idle now: this sync's length is what a sync that did not wait takes
    # (Anchor.sync_waited). After the anchor's reading, so it does not move it.
    torch_npu.npu.synchronize()
    empty_sync_ns = read()[0] - after[0]
    index = getattr(device, "index", None) if on_npu else None
    if index is None:
        current = getattr(torch_npu.npu, "current_device", None)
        index = current() if current is not None else None
    device_id = int(index) if isinstance(index, int) and not isinstance(index, bool) else None
    return SyncClocks(device_id, before, after, empty_sync_ns)


def host_clocks() -> tuple[int, int]:
    """(monotonic ns, wall-clock ns since the epoch), read back to back."""
    return time.monotonic_ns(), time.time_ns()


def _boot_id() -> str | None:
    """This boot's id: monotonic clocks of two processes compare only within one boot."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def host_anchor(
    data: np.ndarray, aic: int, aiv: int, device_id: int | None, clocks: tuple[int, int],
    before: tuple[int, int] | None = None, empty_sync_ns: int | None = None,
) -> dict[str, Any] | None:
    """What places this rank on a host time axis (docs/runtime.md, "Ranks on one time
    axis"): the host clocks read right after the device sync, and the kernel's first
    start cycle and last recorded cycle in the buffer (the sync returns just after the
    kernel's end, so the last record is the device time closest to the host reading).
    With ``before`` (the clocks read right before the sync) and ``empty_sync_ns``, the
    window the kernel's end lies in when the sync waited for it (align.Anchor.sync_waited).
    None when no core wrote a record (nothing to place)."""
    layout = RankMeta(rank=0, slot_words=int(data.shape[1]), aic_cores=aic, aiv_cores=aiv).layout(
        int(data.shape[0]))
    scan = scan_slots(data, layout)
    live = [r for r in scan.reports if r.state not in ("unused", "corrupt")]
    if not live:
        return None
    start = wrap_min(np.array([r.start_cycle for r in live], dtype=np.uint64))
    # The latest record, read as a signed distance from the start (the counter may wrap).
    ends = [signed_delta(r.last_cycle - start) for r in live if r.records and r.last_cycle is not None]
    end = (start + max(ends)) % (1 << 64) if ends else start
    monotonic_ns, wall_ns = clocks
    anchor: dict[str, Any] = {
        "host_monotonic_ns": int(monotonic_ns),
        "host_wall_ns": int(wall_ns),
        "start_cycle": int(start),
        "end_cycle": int(end),
        "device_id": device_id,
        "host": socket.gethostname(),
        "boot_id": _boot_id(),
    }
    if before is not None and empty_sync_ns is not None:
        anchor.update(host_monotonic_before_ns=int(before[0]), host_wall_before_ns=int(before[1]),
                      empty_sync_ns=int(empty_sync_ns))
    return anchor


def _to_numpy(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach"):  # a torch tensor, on any device
        return np.asarray(value.detach().cpu().numpy())
    return np.asarray(value)


def _as_slots(parts: list[np.ndarray], slot_words: int) -> np.ndarray:
    rows = []
    for i, part in enumerate(parts):
        if part.dtype == np.uint64:
            part = part.view(np.int64)
        if part.dtype != np.int64:
            raise TypeError(f"profiling tensor {i} has dtype {part.dtype}, expected int64")
        if part.ndim == 1:
            if part.size % slot_words:
                raise ValueError(
                    f"profiling tensor {i} has {part.size} elements, not a multiple of "
                    f"slot_words={slot_words}"
                )
            part = part.reshape(-1, slot_words)
        if part.ndim != 2 or part.shape[1] != slot_words:
            raise ValueError(
                f"profiling tensor {i} has shape {tuple(part.shape)}, expected [slots, {slot_words}]"
            )
        rows.append(part)
    return rows[0] if len(rows) == 1 else np.concatenate(rows)


def _buffer_fingerprint(data: np.ndarray) -> int | None:
    """The most common fingerprint among slots that start with the fingerprint record."""
    counters = data[:, 0]
    first = data[:, 1]
    has = (counters >= 2) & ((first & 0xFFFFFFFF) == 0)
    if not has.any():
        return None
    values, counts = np.unique((first[has].view(np.uint64) >> np.uint64(32)), return_counts=True)
    value = int(values[np.argmax(counts)])
    return value or None  # 0: built without `optrace preprocess --modify`, i.e. unknown


def resolve_out_dir(out_dir: str | os.PathLike[str]) -> Path:
    """``~`` expanded; relative paths against the current working directory, now."""
    path = Path(out_dir).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    return path.resolve()


def save_profiling_data(
    tensor: Any,
    rank: int,
    out_dir: str | os.PathLike[str],
    *,
    tag: str | None = None,
    launch: int | None = None,
    point_map: str | os.PathLike[str] | None = None,
    barrier: bool | None = None,
    clock_mhz: float = DEFAULT_CLOCK_MHZ,
    aic_cores: int | None = None,
    aiv_cores: int | None = None,
    warmup: int = 0,
    slot_words: int | None = None,
    aiv_roles: Mapping[int, str] | None = None,
    op: str | None = None,
    host_clock: Callable[[], tuple[int, int]] | None = None,
) -> Path | None:
    """Save one launch's profiling buffer; returns the file written (None for warm-up).

    ``tensor``: the op's ``profiling_data`` output (torch tensor on any device, or numpy),
    flat or ``[slots, slot_words]``, or the legacy list ``[aic_tensor, aiv_tensor]``.
    ``aic_cores`` is the AIV slot offset the kernel used (``GetBlockNum()`` at launch);
    with a single tensor it defaults to a third of the slots (1 AIC : 2 AIV), and
    ``aiv_cores`` to the remaining slots. ``slot_words`` defaults to the tensor's second
    dimension, or ``PROF_SIZE_PER_CORE`` for a flat tensor. A ``point_map`` whose
    ``"cores"`` names one core type (a kernel declared AIV-only or AIC-only: its core i
    wrote slot i) makes every slot that type's unless ``aic_cores`` / ``aiv_cores`` say
    otherwise. ``barrier`` records
    ``ENABLE_MOE_PROFILING_BARRIER`` (None: not stated). ``warmup=N`` skips the first N
    calls per (out_dir, rank, tag); later calls get ``_launch1``, ``_launch2``... unless
    ``launch`` is given. ``point_map`` is copied beside the rank files. ``op`` is the
    operator's name as the framework's profiler shows it (``collect --merge`` matches
    the launch to that kernel slice; any spelling: names compare by their normal form).

    Right after the device sync the host clocks are read (``host_clock``, default
    :func:`host_clocks`: a simulation passes its own) and stored with the kernel's start
    cycle and device id as the rank's anchor, which ``collect`` uses to place ranks. They
    are also read right before the sync and after a second, empty one: the window the
    anchor's error lies in. ``host_clock`` is read three times, in that order, even
    without an NPU (it simulates the sync).
    """
    if not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be a non-negative int, not {rank!r}")
    if not clock_mhz > 0:
        raise ValueError(f"clock_mhz must be positive, not {clock_mhz!r}")
    if op is not None and (not isinstance(op, str) or not op.strip()):
        raise ValueError(f"op must be a non-empty operator name, not {op!r}")
    directory = resolve_out_dir(out_dir)
    key = (str(directory), rank, tag)
    with _lock:
        call = _calls[key]
        _calls[key] += 1
    if call < warmup:
        return None
    launch_index = call - warmup if launch is None else launch

    first = tensor if not isinstance(tensor, (list, tuple)) else (tensor[0] if tensor else None)
    # The clocks are read inside, around the sync: every statement between the sync and
    # the reading adds to the anchor's error (the copy to host below is slow for a
    # big buffer).
    synced = _synchronize(first, host_clock)
    legacy_list = isinstance(tensor, (list, tuple))
    parts = [_to_numpy(t) for t in tensor] if legacy_list else [_to_numpy(tensor)]
    if legacy_list and len(parts) not in (1, 2):
        raise ValueError(f"expected [aic_tensor, aiv_tensor], got {len(parts)} tensors")
    if slot_words is None:  # a 2-d tensor says it; a flat one uses the runtime's default
        slot_words = int(parts[0].shape[1]) if parts[0].ndim == 2 else PROF_SIZE_PER_CORE
    data = _as_slots(parts, slot_words)
    slots = int(data.shape[0])
    # Read (and so validate) the map before writing anything: it may fix the layout.
    loaded = load_point_map(resolve_out_dir(point_map)) if point_map is not None else None
    single = loaded.cores if loaded is not None and loaded.cores and len(loaded.cores) == 1 else None
    two_tensors = legacy_list and len(parts) == 2  # [aic, aiv]: the shapes say the split
    if single is not None and aic_cores is None and aiv_cores is None and not two_tensors:
        aic_cores, aiv_cores = (0, slots) if "AIV" in single else (slots, 0)
    if legacy_list and len(parts) == 2:
        shape_aic = int(parts[0].size // slot_words)
        aic = shape_aic if aic_cores is None else aic_cores
    else:
        aic = slots // 3 if aic_cores is None else aic_cores
    aiv = slots - aic if aiv_cores is None else aiv_cores
    if aic < 0 or aiv < 0 or aic + aiv > slots:
        raise ValueError(f"aic_cores={aic} + aiv_cores={aiv} do not fit the buffer's {slots} slots")

    fingerprint = _buffer_fingerprint(data)
    extra: dict[str, Any] = {"saved_at": time.time(), "pid": os.getpid(), "warmup": warmup}
    anchor = host_anchor(data, aic, aiv, synced.device_id, synced.after, synced.before, synced.empty_sync_ns)
    if anchor is not None:
        extra["anchor"] = anchor
    if op is not None:
        extra["op"] = op
    meta = RankMeta(
        rank=rank,
        slot_words=slot_words,
        aic_cores=aic,
        aiv_cores=aiv,
        format_version=FORMAT_VERSION,
        clock_mhz=float(clock_mhz),
        barrier=barrier,
        fingerprint=fingerprint,
        tag=tag,
        launch=launch_index,
        aiv_roles={str(k): str(v) for k, v in (aiv_roles or {}).items()},
        extra=extra,
    )
    target = directory / rank_file_name(rank, tag, launch_index)
    with atomic_output(target) as handle:
        write_pt({OPTRACE_KEY: FORMAT_VERSION, "meta": meta.to_dict(), "data": data}, handle)

    if point_map is not None and loaded is not None:
        _copy_point_map(resolve_out_dir(point_map), loaded, directory, fingerprint)
    return target


def _copy_point_map(source: Path, loaded: PointMap, directory: Path, fingerprint: int | None) -> None:
    """Copy the map beside the rank files; ``loaded`` is what ``source`` held (read
    before the rank file was written, so something collect cannot read is refused)."""
    destination = directory / POINT_MAP_NAME
    if source == destination:
        return
    if fingerprint is not None and loaded.fingerprint not in (None, fingerprint):
        warnings.warn(
            f"{source}: fingerprint {loaded.fingerprint:#010x} differs from the buffer's "
            f"{fingerprint:#010x}: this map comes from another build",
            stacklevel=3,
        )
    with atomic_output(destination) as handle, open(source, "rb") as src:
        shutil.copyfileobj(src, handle)

