"""Shared builders for runtime tests: point maps and synthetic rank buffers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from optrace.runtime.format import RankMeta
from optrace.runtime.pointmap import PointMap, parse_point_map
from optrace.runtime.rankfile import RankBuffer
from optrace.runtime.synth import SlotWriter, new_buffer

FP = 0xC0FFEE11

#: label -> (B id, E id)
LABELS = {
    "processing": (1, 2),
    "processing dispatch": (3, 4),
    "processing dispatch wait": (5, 6),
    "processing compute": (7, 8),
    "processing combine": (9, 10),
}


def point_map_document(fingerprint: int | None = FP) -> dict[str, Any]:
    points: dict[str, Any] = {}
    for n, (label, (b, e)) in enumerate(LABELS.items()):
        points[str(b)] = {"label": label, "file": "op_kernel/op.h", "line": 10 + 2 * n,
                          "event_type": "B", "event_id": n}
        points[str(e)] = {"label": label, "file": "op_kernel/op.h", "line": 11 + 2 * n,
                          "event_type": "E", "event_id": n}
    document: dict[str, Any] = {"format_version": 1, "points": points}
    if fingerprint is not None:
        document["fingerprint"] = fingerprint
    return document


def point_map(fingerprint: int | None = FP) -> PointMap:
    return parse_point_map("point_map.json", point_map_document(fingerprint))


def write_point_map(directory: Path, fingerprint: int | None = FP) -> Path:
    path = directory / "point_map.json"
    path.write_text(json.dumps(point_map_document(fingerprint)))
    return path


def well_formed_core(writer: SlotWriter, t0: int, loops: int = 3, scale: int = 10) -> int:
    """processing > (dispatch > wait), compute x loops (indexed), combine. Returns end time."""
    t = t0
    B, E = LABELS["processing"]
    writer.record(B, t)
    db, de = LABELS["processing dispatch"]
    wb, we = LABELS["processing dispatch wait"]
    writer.record(db, t + 1 * scale)
    writer.record(wb, t + 2 * scale)
    writer.record(we, t + 4 * scale)
    writer.record(de, t + 5 * scale)
    t += 5 * scale
    cb, ce = LABELS["processing compute"]
    for i in range(loops):
        writer.record(cb, t + scale, extra_id=1, index=i)
        writer.record(ce, t + 3 * scale, extra_id=1, index=i)
        t += 3 * scale
    mb, me = LABELS["processing combine"]
    writer.record(mb, t + scale)
    writer.record(me, t + 2 * scale)
    writer.record(E, t + 3 * scale)
    return t + 3 * scale


def rank_buffer(
    aic: int = 2,
    aiv: int = 4,
    spare: int = 0,
    *,
    words: int = 128,
    fingerprint: int | None = FP,
    loops: int = 3,
    skew: int = 7,
    start: int = 10_000,
    rank: int = 0,
    used: int | None = None,
) -> RankBuffer:
    """A rank buffer where the first ``used`` slots ran the well-formed core program."""
    slots = aic + aiv + spare
    data = new_buffer(slots, words)
    for s in range(slots if used is None else used):
        writer = SlotWriter(data[s], start + s * skew, fingerprint=fingerprint)
        well_formed_core(writer, start + s * skew + 3, loops)
    meta = RankMeta(rank=rank, slot_words=words, aic_cores=aic, aiv_cores=aiv,
                    format_version=1, clock_mhz=50.0, barrier=True, fingerprint=fingerprint)
    return RankBuffer(Path(f"rank{rank:03d}.pt"), meta, data)


def as_array(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def run_entry(argv: list[str], cwd: Path) -> tuple[int, bool, str, str]:
    """The console script's entry (optrace.cli.start.main) in a fresh interpreter: exit
    code, whether typer was imported, stdout, stderr. `finish` is replaced by sys.exit:
    the real one leaves by os._exit, which would skip the marker printed last."""
    code = (
        "import sys\n"
        "import optrace.cli.start\n"
        "from optrace.cli.start import main\n"
        "optrace.cli.start.finish = sys.exit\n"
        f"sys.argv = ['optrace', *{argv!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)\n"
        "else:\n"
        "    code = 0\n"
        "sys.stdout.flush()\n"
        "print('\\nMARK', 'TYPER' if 'typer' in sys.modules else 'NO-TYPER', code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd)
    out, _, mark = done.stdout.rpartition("\nMARK ")
    marker, exit_code = mark.split()
    return int(exit_code), marker == "TYPER", out, done.stderr
