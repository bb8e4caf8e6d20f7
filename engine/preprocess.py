"""The build-time preprocessor: `TRACE_POINT("label", "B"|"E")` -> integer ids.

Ids are a hash of (label, event type), not a running count, so adding a point anywhere
renumbers nothing else; the rare hash collision is resolved deterministically (sorted
keys probe upward). Comments and `#if 0` blocks are never read. The map carries a build
fingerprint (over every scanned source and the map itself); `--modify` writes the same
value into `OPTRACE_BUILD_FINGERPRINT`, which the runtime records in each slot, so a map
from another build is detected for sure (docs/preprocess.md). `--modify` rewrites only
regular files whose real location is inside the tree it was given (`modify_refusals`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from optrace.engine.codes import OT201, OT202, OT203, OT204, OT205, OT207, OT208
from optrace.engine.diagnostics import Diagnostic, Severity
from optrace.engine.discovery import CPP_EXTS, walk_files
from optrace.engine.model import TracePoint
from optrace.engine.source import blank_comments, blank_if0, decode, read_regular
from optrace.engine.vocabulary import TRACE_POINT_CALL, label_problem
from optrace.runtime.format import POINT_ID_SPACE, trace_point_hash

MAP_FORMAT_VERSION = 1
ID_SPACE = POINT_ID_SPACE  # positive int32: safe in every kernel integer type
FINGERPRINT_ID = 0  # reserved: the runtime's fingerprint record

_POINT_RE = re.compile(rb"\b" + TRACE_POINT_CALL)
_FINGERPRINT_DEFINE_RE = re.compile(
    rb"^([ \t]*#[ \t]*define[ \t]+OPTRACE_BUILD_FINGERPRINT[ \t]+)(\S+)", re.M
)
_PREPROCESSED_RE = re.compile(rb"\bMoeTracing\s*(?:<[^>]*>)?\s*\(\s*\d+")
# The core mix the entry scaffold passes to the write-back guard (runtime block
# OPTRACE_CORES_*): it decides the buffer's slot layout, so the map records it for the
# readers. Only the scaffold's guard declaration counts, not the block's own uses.
_CORE_MIX_RE = re.compile(
    rb"\bOptraceEntryEnd\s+\w+\s*\([^;{}]*?\bOPTRACE_CORES_(MIXED|AIV_ONLY|AIC_ONLY)\b[^;{}]*\)\s*;")
_CORE_MIXES = {b"MIXED": ("AIC", "AIV"), b"AIV_ONLY": ("AIV",), b"AIC_ONLY": ("AIC",)}


@dataclass
class PointMapResult:
    """What preprocess found: the points, their ids, the build fingerprint, the files scanned."""

    occurrences: list[TracePoint]
    ids: dict[tuple[str, str], int]
    fingerprint: int
    files: list[Path]
    diagnostics: list[Diagnostic] = field(default_factory=list)
    cores: tuple[str, ...] | None = None  # the entry scaffolds' core mix; None: none found

    @property
    def ok(self) -> bool:
        return not any(d.severity == Severity.ERROR for d in self.diagnostics)


def point_hash(label: str, event: str) -> int:
    """FNV-1a (32-bit) of `label NUL event`, folded into 1..2^31-1 — the one definition
    the device runtime's TRACE_POINT fallback and the decoder share (runtime/format.py)."""
    return trace_point_hash(label, event)


def assign_ids(keys: set[tuple[str, str]]) -> tuple[dict[tuple[str, str], int], list[str]]:
    """Hash ids; keys sharing a hash are sorted and all but the first probe upward."""
    by_hash: dict[int, list[tuple[str, str]]] = {}
    for key in keys:
        by_hash.setdefault(point_hash(*key), []).append(key)
    ids: dict[tuple[str, str], int] = {}
    used = set(by_hash)
    notes: list[str] = []
    for h in sorted(by_hash):
        group = sorted(by_hash[h])
        ids[group[0]] = h
        for key in group[1:]:
            probe = h
            while probe in used or probe == FINGERPRINT_ID:
                probe = probe % ID_SPACE + 1
            used.add(probe)
            ids[key] = probe
            notes.append(f"id collision: `{key[0]}` {key[1]} shares hash {h} with "
                         f"`{group[0][0]}` {group[0][1]}; it gets {probe}")
    return ids, notes


def scan(src_dir: Path) -> PointMapResult:
    """Every TRACE_POINT under src_dir (sorted paths), validated, with ids and fingerprint."""
    files = sorted(p for p in walk_files(src_dir) if p.suffix.lower() in CPP_EXTS)
    occurrences: list[TracePoint] = []
    diagnostics: list[Diagnostic] = []
    mixes: dict[tuple[str, ...], tuple[Path, int]] = {}  # core mix -> first place seen
    digest = hashlib.sha256()
    for path in files:
        try:
            raw = read_regular(path)
        except OSError as exc:
            diagnostics.append(Diagnostic(OT201, f"cannot read: {exc.strerror}", path, 0))
            continue
        digest.update(os.fsencode(path.relative_to(src_dir).as_posix()) + b"\0" + raw + b"\0")
        code = blank_if0(blank_comments(raw))
        line, counted = 1, 0  # counted on from the last point: from 0 each time was quadratic
        for m in _POINT_RE.finditer(code):
            line += code.count(b"\n", counted, m.start())
            counted = m.start()
            line_start = code.rfind(b"\n", 0, m.start()) + 1
            if code[line_start:m.start()].lstrip().startswith(b"#"):
                continue  # inside a macro definition: not a point of its own
            label, event = decode(m.group(1)), decode(m.group(2))
            indexed = code[m.end() : m.end() + 40].lstrip().startswith(b",")
            occurrences.append(TracePoint(label, event, path, line, m.start(), m.end(), indexed=indexed))
            problem = label_problem(label, event)
            if problem:
                diagnostics.append(Diagnostic(OT202, problem, path, line))
        for m in _CORE_MIX_RE.finditer(code):
            mixes.setdefault(_CORE_MIXES[m.group(1)], (path, code.count(b"\n", 0, m.start(1)) + 1))
    if not occurrences and files:
        for path in files:
            done = _PREPROCESSED_RE.search(blank_comments(read_regular(path)))
            if done:
                diagnostics.append(Diagnostic(
                    OT205, "sources are already preprocessed (MoeTracing with integer ids, no "
                    "TRACE_POINT); run on a fresh copy of the sources", path,
                    read_regular(path).count(b"\n", 0, done.start()) + 1))
                break
    keys = {(o.label, o.event) for o in occurrences}
    ids, notes = assign_ids(keys)
    for note in notes:
        diagnostics.append(Diagnostic(OT203, note, None, 0))
    _check_balance(occurrences, diagnostics)
    digest.update(json.dumps(sorted((k[0], k[1], v) for k, v in ids.items())).encode())
    fingerprint = int.from_bytes(digest.digest()[:4], "big") or 1
    cores = next(iter(mixes)) if len(mixes) == 1 else None
    if len(mixes) > 1:
        path, line = min(mixes.values())
        shown = ", ".join("/".join(mix) + f" ({p.relative_to(src_dir).as_posix()}:{ln})"
                          for mix, (p, ln) in sorted(mixes.items(), key=lambda kv: kv[1]))
        diagnostics.append(Diagnostic(
            OT207, f"kernel entries with different core mixes in one map ({shown}): the map "
            "records none, so readers take the mixed layout; pass aic_cores= / aiv_cores= to "
            "save_profiling_data for the single-type kernel's buffers", path, line))
    return PointMapResult(occurrences, ids, fingerprint, files, diagnostics, cores)


def _check_balance(occurrences: list[TracePoint], diagnostics: list[Diagnostic]) -> None:
    """A label with a B but no E anywhere (or the reverse) can never pair in a trace."""
    events: dict[str, set[str]] = {}
    first: dict[str, TracePoint] = {}
    for o in occurrences:
        events.setdefault(o.label, set()).add(o.event)
        first.setdefault(o.label, o)
    for label, kinds in sorted(events.items()):
        if kinds != {"B", "E"}:
            missing = "E" if "B" in kinds else "B"
            o = first[label]
            diagnostics.append(Diagnostic(OT204, f'label "{label}" has no "{missing}" point',
                                          o.path, o.line))


def point_map_document(result: PointMapResult, src_dir: Path, generator: str) -> dict[str, object]:
    """The legacy `points` schema plus format version, fingerprint and all locations."""
    points: dict[str, dict[str, object]] = {}
    for o in result.occurrences:
        pid = result.ids[(o.label, o.event)]
        rel = o.path.relative_to(src_dir).as_posix()
        entry = points.get(str(pid))
        if entry is None:
            begin = result.ids.get((o.label, "B"), pid)
            entry = {"label": o.label, "file": rel, "line": o.line, "event_type": o.event,
                     "event_id": begin, "locations": []}
            points[str(pid)] = entry
        if o.indexed:
            entry["indexed"] = True
        locations = entry["locations"]
        assert isinstance(locations, list)
        locations.append(f"{rel}:{o.line}")
    ordered = dict(sorted(points.items(), key=lambda kv: int(kv[0])))
    # "cores" is optional (maps without it read as mixed): format version 1 still.
    cores = {"cores": list(result.cores)} if result.cores is not None else {}
    return {"format_version": MAP_FORMAT_VERSION, "fingerprint": result.fingerprint,
            "generator": generator, **cores, "points": ordered}


def rewrite_sources(result: PointMapResult) -> dict[Path, bytes]:
    """New bytes for every file that changes under `--modify`: ids in place of
    TRACE_POINT(...), and the fingerprint in OPTRACE_BUILD_FINGERPRINT's definition."""
    by_file: dict[Path, list[TracePoint]] = {}
    for o in result.occurrences:
        by_file.setdefault(o.path, []).append(o)
    out: dict[Path, bytes] = {}
    for path in result.files:
        raw = read_regular(path)
        data = raw
        for o in sorted(by_file.get(path, []), key=lambda o: o.start, reverse=True):
            data = data[: o.start] + str(result.ids[(o.label, o.event)]).encode() + data[o.end :]
        data = _FINGERPRINT_DEFINE_RE.sub(
            lambda m: m.group(1) + f"{result.fingerprint}u".encode(), data
        )
        if data != raw:
            out[path] = data
    return out


def modify_refusals(paths: Iterable[Path], src_dir: Path) -> list[Diagnostic]:
    """The files `--modify` must not rewrite, one OT208 each; ``src_dir`` resolved.

    A build tree made of links (`cp -s`, a header linked in from the checked-in sources,
    a directory linked from elsewhere) reaches files that are not the build tree's own:
    rewriting one writes ids into the sources the tree was copied from. So a symlink,
    and a file whose real location is outside ``src_dir``, are refused; the caller
    writes nothing when any is (a hard link is a file of the tree: rewritten by a
    rename, it leaves the other name's bytes alone)."""
    refused: list[Diagnostic] = []
    for path in paths:
        if os.path.islink(path):
            refused.append(Diagnostic(
                OT208, f"a symlink (to {os.path.realpath(path)}): --modify rewrites only regular files "
                "inside the tree it is given; copy the file into the build tree", path, 0))
            continue
        real = Path(os.path.realpath(path))
        if not real.is_relative_to(src_dir):
            refused.append(Diagnostic(
                OT208, f"really {real}, outside {src_dir} (through a linked directory): --modify "
                "rewrites only regular files inside the tree it is given", path, 0))
    return refused
