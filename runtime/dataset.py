"""``collect --format parquet``: the decoded spans as a Parquet dataset, one partition per rank.

The layout is Hive's (``DIR/rank=N/part-0.parquet``), which DuckDB, Spark, Trino and
Polars read as one table with ``rank`` as a column; a file holds every span of one rank,
all its launches, one row per span (:data:`COLUMNS`). Each file's key-value metadata
holds the schema version, the point map, the rank's launches (clock, fingerprint,
placement: the trace's rank table entries) and the alignment; ``DIR/_optrace_dataset.json``
says what the folder is (engines skip names starting with ``_``).

DuckDB writes the files from the decoder's numpy arrays (no pandas, no pyarrow), one
rank in memory at a time. The dataset is written into a temporary directory and takes
its name at the end: a new one appears whole, an earlier dataset at that name is
replaced whole, anything else there is refused. DuckDB is the ``[query]`` extra's,
imported when a dataset is written or read.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from .atomic import OutputError, replace_directory
from .chrome import _quantised, label_matcher
from .collect import CollectOptions, RankOutcome, rank_entry
from .dataset_layout import (
    COLUMNS,
    MARKER,
    PART_NAME,
    PARTITION,
    SCHEMA_VERSION,
    is_dataset,
    require_duckdb,
)
from .decode import STATUS_NAMES, DecodeOptions, RankDecode, decode_rank
from .errors import ProfilingInputError
from .placement import Placement
from .pointmap import PointMap
from .rankfile import read_rank_file

_PARTITION_RE = re.compile(rf"{PARTITION}=\d+")


def _is_ours(path: Path) -> bool:
    """Only what a dataset holds: its marker and rank=N folders."""
    return is_dataset(path) and all(
        name == MARKER or (_PARTITION_RE.fullmatch(name) is not None and (path / name).is_dir())
        for name in os.listdir(path))


def check_output(output: Path, inputs: Sequence[Path]) -> None:
    """Refused before anything is decoded: DuckDB missing, a symlink or a non-directory at
    ``output``, a directory holding anything but an empty folder or an earlier dataset
    (the rank files, say)."""
    require_duckdb(output)
    try:
        st = os.lstat(output)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OutputError(output, f"cannot write: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode):
        raise OutputError(output, "a symlink; not followed (name the directory itself)")
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(output, "not a directory: a Parquet dataset is a directory; not written")
    if os.listdir(output) and not _is_ours(output):
        raise OutputError(output, "holds files that are not an optrace dataset; not written "
                          "(name a new or empty directory)")
    inside = [p for p in inputs if Path(os.path.abspath(p)).is_relative_to(os.path.abspath(output))]
    if inside:
        raise OutputError(output, f"holds an input ({inside[0]}); not written")


def parent_positions(slot: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Each span's parent (its position; -1 at depth 0). Spans are in begin order, slot
    by slot (the decoder's), so a span's parent is the last span one level up before it
    on its core."""
    parent = np.full(depth.size, -1, dtype=np.int64)
    for level in range(1, int(depth.max(initial=0)) + 1):
        child = np.flatnonzero(depth == level)
        above = np.flatnonzero(depth == level - 1)
        if not child.size or not above.size:
            continue
        k = np.searchsorted(above, child) - 1
        found = above[np.maximum(k, 0)]
        ok = (k >= 0) & (slot[found] == slot[child])
        parent[child[ok]] = found[ok]
    return parent


def rank_columns(decoded: RankDecode, point_map: PointMap, origin_ns: int, launch: int, tag: str | None,
                 options: CollectOptions) -> dict[str, np.ndarray]:
    """One rank file's spans as the dataset's columns (``--cores`` / ``--labels`` applied)."""
    spans = decoded.spans
    parent = parent_positions(spans.slot, spans.depth)
    mask = np.ones(spans.slot.size, dtype=bool)
    if options.cores is not None:
        core_filter = options.cores
        slot_ok = np.array([core_filter(r.core_type, r.core_index) for r in decoded.slots] or [True])
        mask &= slot_ok[spans.slot]
    if options.labels:
        mask &= _label_filter(point_map, options.labels)[spans.label]
    keep = np.flatnonzero(mask)
    labels = np.array(point_map.labels or [""], dtype=object)
    slots = decoded.slots
    types = np.array([r.core_type for r in slots] or [""], dtype=object)
    indices = np.array([r.core_index for r in slots] or [0], dtype=np.int32)
    scale = 1000.0 / decoded.clock_mhz  # as the traces round them (chrome.py)
    with np.errstate(over="ignore", invalid="ignore"):
        start_ns = _quantised(spans.start[keep] * scale) + origin_ns
        end_ns = _quantised(spans.end[keep] * scale) + origin_ns
    slot = spans.slot[keep]
    point = spans.point[keep]
    high = spans.high[keep].astype(np.int64)
    indexed = np.array([point_map.points[i].indexed for i in point_map.ids.tolist()] or [False])
    has_parent = parent[keep] >= 0
    parent_label = np.where(has_parent, labels[spans.label[np.maximum(parent[keep], 0)]], None)
    status_names = np.array([STATUS_NAMES[k] for k in sorted(STATUS_NAMES)], dtype=object)
    n = keep.size
    return {
        "launch": np.full(n, launch, dtype=np.int32),
        "tag": np.full(n, tag, dtype=object),
        "core_type": types[slot],
        "core": indices[slot],
        "label": labels[spans.label[keep]],
        "depth": spans.depth[keep].astype(np.int16),
        "parent_label": parent_label,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "dur_ns": end_ns - start_ns,
        "loop_index": (high >> 8).astype(np.int32),
        "has_index": (high != 0) | indexed[point],
        "status": status_names[spans.status[keep]],
    }


def _label_filter(point_map: PointMap, labels: list[str]) -> np.ndarray:
    matcher = label_matcher(labels)
    return np.array([matcher(label) for label in point_map.labels] or [True], dtype=bool)


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _select() -> str:
    """The columns in order, typed; loop_index NULL where the point carries no index."""
    parts = []
    for name, kind, _ in COLUMNS:
        value = "CASE WHEN has_index THEN loop_index END" if name == "loop_index" else name
        parts.append(f"CAST({value} AS {kind}) AS {name}")
    return ", ".join(parts)


def point_map_document(point_map: PointMap) -> dict[str, Any]:
    """The point map as the metadata carries it (what a reader needs to name a span)."""
    return {
        "path": str(point_map.path),
        "fingerprint": point_map.fingerprint,
        "points": {str(i): {"label": p.label, "type": p.event_type, "file": p.file, "line": p.line,
                            "indexed": p.indexed}
                   for i, p in sorted(point_map.points.items())},
    }


def write_dataset(
    output: Path,
    placed: Placement,
    outcomes: list[RankOutcome],
    ranks_meta: list[dict[str, Any] | None],
    point_map: PointMap,
    decode_options: DecodeOptions,
    options: CollectOptions,
    advance: Callable[[int], None],
) -> int:
    """Decode every rank file and write the dataset; returns the spans written (0: none,
    and nothing written)."""
    duckdb = require_duckdb(output)
    try:
        return _write(duckdb, output, placed, outcomes, ranks_meta, point_map, decode_options, options,
                      advance)
    except _Nothing:
        return 0


def _write(duckdb: ModuleType, output: Path, placed: Placement, outcomes: list[RankOutcome],
           ranks_meta: list[dict[str, Any] | None], point_map: PointMap, decode_options: DecodeOptions,
           options: CollectOptions, advance: Callable[[int], None]) -> int:
    spans = 0
    map_text = json.dumps(point_map_document(point_map), sort_keys=True)
    with replace_directory(output) as into:
        connection = duckdb.connect()
        try:
            for rank, group in itertools.groupby(range(len(outcomes)), key=lambda p: outcomes[p].name.rank):
                positions = list(group)
                parts = []
                for position in positions:
                    outcome = outcomes[position]
                    try:
                        buffer = (placed.take_buffer(position)
                                  or read_rank_file(outcome.path, outcome.name.rank))
                        decoded = decode_rank(buffer, point_map, decode_options)
                    except ProfilingInputError as exc:
                        outcome.error = exc
                        advance(1)
                        continue
                    outcome.decoded = decoded
                    origin_ns = placed.origin_ns(position, decoded, options.rank_offsets_us.get(rank, 0.0))
                    name = outcome.name
                    columns = rank_columns(decoded, point_map, origin_ns, name.launch, name.tag, options)
                    outcome.spans_written = int(columns["launch"].size)
                    outcome.cores_written = len(decoded.cores)
                    outcome.tracks = _tracks(decoded, columns)
                    outcome.span_slots = [slot for slot, _ in outcome.tracks]  # spans' cores alone
                    decoded.release_spans()
                    ranks_meta[position] = rank_entry(outcome, decoded, placed, position, options.cores)
                    parts.append(columns)
                    advance(1)
                rows = sum(int(p["launch"].size) for p in parts)
                written = [p for p in positions if ranks_meta[p] is not None]
                if not written:  # no file of the rank could be read: collect names them
                    continue
                # A rank whose records were all dropped still writes its part, without a
                # row: its rank table entries are where a reader learns what was skipped.
                entries = [entry for p in written if (entry := ranks_meta[p]) is not None]
                alignment = placed.alignment_metadata(written, options.rank_offsets_us)
                metadata = {
                    "optrace_dataset_version": str(SCHEMA_VERSION),
                    "optrace_point_map": map_text,
                    "optrace_ranks": json.dumps(entries, sort_keys=True),
                    # The clock each launch's cycles were read with: launch -> MHz.
                    "optrace_clock_mhz": json.dumps({str(e["launch"]): e["clock_mhz"] for e in entries}),
                    "optrace_alignment": json.dumps(alignment, sort_keys=True, default=str),
                    # --cores: the part holds fewer cores than its rank table's counts are of
                    **({"optrace_cores_filtered": "true"} if options.cores is not None else {}),
                }
                folder = into / f"{PARTITION}={rank}"
                folder.mkdir()
                table = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
                connection.register("rank_spans", table)
                kv = ", ".join(f"{key}: {_sql_text(value)}" for key, value in metadata.items())
                connection.execute(f"COPY (SELECT {_select()} FROM rank_spans) TO "
                                   f"{_sql_text(str(folder / PART_NAME))} "
                                   f"(FORMAT parquet, COMPRESSION zstd, KV_METADATA {{{kv}}})")
                connection.unregister("rank_spans")
                spans += rows
        finally:
            connection.close()
        if not spans:
            raise _Nothing
        (into / MARKER).write_text(json.dumps(marker(), indent=2) + "\n", encoding="utf-8")
    return spans


def _tracks(decoded: RankDecode, columns: dict[str, np.ndarray]) -> list[tuple[int, str]]:
    names = {(c.core_type, c.core_index): (c.slot, c.name) for c in decoded.cores}
    seen = set(zip(columns["core_type"].tolist(), columns["core"].tolist(), strict=True))
    return sorted(names[key] for key in seen if key in names)


class _Nothing(Exception):
    """No span in any rank: nothing is written (collect says so)."""


def marker() -> dict[str, Any]:
    """What ``_optrace_dataset.json`` says: the schema, for a reader that opens no file."""
    return {
        "dataset": "optrace spans",
        "version": SCHEMA_VERSION,
        "partitioning": f"hive: {PARTITION}=N/{PART_NAME}",
        "columns": [{"name": PARTITION, "type": "INTEGER", "meaning": "the rank (from the folder name)"}]
        + [{"name": n, "type": t, "meaning": m} for n, t, m in COLUMNS],
    }
