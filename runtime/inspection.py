"""``optrace inspect``: what a rank file holds, slot by slot, without any point map.

Per core: state, records, fill %, drops, first and last cycle, start offset (launch
skew). Runs of unused slots collapse into one line, so a 72-slot rank stays readable.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .decode import SlotReport, scan_slots, signed_delta, wrap_min
from .errors import ProfilingInputError
from .format import DEFAULT_CLOCK_MHZ, RankMeta, capacity
from .rankfile import find_rank_files, read_rank_file


@dataclass
class RankInspection:
    """One rank file as `inspect` reads it: its metadata, slots, base cycle, or why it could not."""

    path: Path
    meta: RankMeta | None = None
    slots: list[SlotReport] | None = None
    base_cycle: int = 0
    error: ProfilingInputError | None = None


def inspect_file(path: Path) -> RankInspection:
    try:
        buffer = read_rank_file(path)
    except ProfilingInputError as exc:
        return RankInspection(path, error=exc)
    scan = scan_slots(buffer.data, buffer.meta.layout(buffer.slots))
    live = [r.start_cycle for r in scan.reports if r.state not in ("unused", "corrupt")]
    base = wrap_min(np.array(live, dtype=np.uint64)) if live else 0
    return RankInspection(path, buffer.meta, scan.reports, base)


def inspect_path(path: Path) -> list[RankInspection]:
    """A rank file, or every rank file of a profiling directory."""
    return list(iter_inspect(path))


def iter_inspect(path: Path) -> Iterator[RankInspection]:
    """:func:`inspect_path` a rank file at a time (what a directory's files hold is
    printed as it is read, not kept: 512 ranks of 72 cores are 37k slot reports). The
    path is checked before the first is read."""
    if path.is_dir():
        files = find_rank_files(path)
        if not files:
            raise ProfilingInputError(path, "no rank*.pt files")
        return (inspect_file(p) for _, p in files)
    if not path.exists() and not path.is_symlink():  # a looping link: reading it says so
        raise ProfilingInputError(path, "no such file or directory")
    return iter([inspect_file(path)])


def _describe(meta: RankMeta, slots: int) -> str:
    kind = "legacy file" if meta.legacy else f"optrace format v{meta.format_version}"
    layout = (f"{meta.aic_cores} AIC + {meta.aiv_cores} AIV slots" if meta.typed_layout
              else f"{slots} slots (core types not recorded)")
    spare = slots - meta.aic_cores - meta.aiv_cores if meta.typed_layout else 0
    if spare > 0:
        layout += f" + {spare} spare"
    parts = [kind, layout, f"{meta.slot_words} words/slot (capacity {capacity(meta.slot_words)})"]
    if meta.clock_mhz is not None:
        parts.append(f"clock {meta.clock_mhz:g} MHz")
    if meta.barrier is not None:
        parts.append(f"barrier {'on' if meta.barrier else 'off'}")
    if meta.fingerprint is not None:
        parts.append(f"fingerprint {meta.fingerprint:#010x}")
    if meta.tag:
        parts.append(f"tag {meta.tag}")
    if meta.launch:
        parts.append(f"launch {meta.launch}")
    return " · ".join(parts)


def _flush_unused(pending: list[SlotReport], lines: list[str]) -> None:
    """One line for a run of unused slots."""
    if not pending:
        return
    first, last = pending[0].name, pending[-1].name
    what = first if len(pending) == 1 else f"{first} .. {last}"
    lines.append(f"  {what} unused ({len(pending)} slot{'s' if len(pending) > 1 else ''})")
    pending.clear()


def format_text(results: list[RankInspection]) -> str:
    lines: list[str] = []
    for result in results:
        if result.error is not None:
            lines.append(f"{result.path}: ERROR {result.error.message}")
            continue
        assert result.meta is not None and result.slots is not None
        meta, slots = result.meta, result.slots
        clock = meta.clock_mhz or DEFAULT_CLOCK_MHZ
        lines.append(f"{result.path}: {_describe(meta, len(slots))}")
        lines.append(f"  {'core':<10} {'state':<9} {'records':>7} {'fill':>7} {'dropped':>7} "
                     f"{'first cycle':>20} {'last cycle':>20} {'busy µs':>10} {'start +µs':>10}")
        pending: list[SlotReport] = []
        for s in slots:
            if s.state == "unused":
                pending.append(s)
                continue
            _flush_unused(pending, lines)
            first = "-" if s.first_cycle is None else str(s.first_cycle)
            last = "-" if s.last_cycle is None else str(s.last_cycle)
            busy = ("-" if s.first_cycle is None or s.last_cycle is None
                    else f"{signed_delta(s.last_cycle - s.first_cycle) / clock:.2f}")
            offset = ("-" if s.state == "corrupt"
                      else f"{signed_delta(s.start_cycle - result.base_cycle) / clock:.2f}")
            lines.append(
                f"  {s.name:<10} {s.state:<9} {s.records:>7} {100 * s.fill:>6.1f}% {s.dropped:>7} "
                f"{first:>20} {last:>20} {busy:>10} {offset:>10}"
            )
            if s.message:
                lines.append(f"    {s.message}")
        _flush_unused(pending, lines)
        used = [s for s in slots if s.state not in ("unused",)]
        dropped = sum(s.dropped for s in slots)
        lines.append(f"  {len(used)} cores used, {len(slots) - len(used)} unused, "
                     f"{sum(s.records for s in slots)} records, {dropped} dropped")
    return "\n".join(lines) + "\n"


def inspection_json(results: list[RankInspection]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for result in results:
        if result.error is not None:
            out.append({"path": str(result.path), "error": result.error.message})
            continue
        assert result.meta is not None and result.slots is not None
        out.append({
            "path": str(result.path),
            "meta": result.meta.to_dict(),
            "slots": [
                {"slot": s.slot, "core": s.name, "state": s.state, "counter": s.counter,
                 "records": s.records, "dropped": s.dropped, "fill": s.fill,
                 "fingerprint": s.fingerprint, "start_cycle": s.start_cycle,
                 "first_cycle": s.first_cycle, "last_cycle": s.last_cycle,
                 "start_offset_cycles": (None if s.state == "corrupt"
                                         else signed_delta(s.start_cycle - result.base_cycle)),
                 "message": s.message}
                for s in result.slots
            ],
        })
    return out
