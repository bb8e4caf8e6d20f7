"""``optrace query DIR "SQL"``: DuckDB over a dataset ``collect --format parquet`` wrote.

The dataset is the table ``spans`` (runtime/dataset.py's columns, ``rank`` from the
folder names). The query reads the dataset and nothing else: DuckDB is told the
dataset's files (``allowed_paths``), then external access is switched off
(``enable_external_access = false``: no other file, no URL, no extension, no COPY ... TO)
and the configuration locked, so the SQL cannot switch it back on. A few questions ship
as named queries (:data:`PRESETS`, documented with their SQL in docs/runtime.md).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .dataset_layout import COLUMNS, MARKER, PART_NAME, PARTITION, SCHEMA_VERSION, is_dataset, require_duckdb
from .errors import ProfilingInputError
from .launches import launch_name
from .regular import load_json
from .spans import RunSettings, SpanTable, checked_clock, rank_entries, with_launch

#: DuckDB's memory (its buffer manager; hash tables and sorts past it spill to disk):
#: ``OPTRACE_DUCKDB_MEMORY`` overrides it (DuckDB's spelling: 2GB, 500MB).
MEMORY_LIMIT = "512MB"
MEMORY_ENV = "OPTRACE_DUCKDB_MEMORY"

#: Rows fetched from DuckDB at a time when streaming CSV / JSON out.
BATCH = 10_000

#: Named queries: ``--preset NAME``. Each reads only ``spans``.
PRESETS: dict[str, tuple[str, str]] = {
    "straggler": (
        "Per label and rank: its time per launch against the median rank's, the worst launch, "
        "and the first launch it was more than 10 % slower (the slowest 20)",
        """\
WITH per_rank AS (
    SELECT label, launch, rank, sum(dur_ns) AS ns
    FROM spans GROUP BY label, launch, rank),
typical AS (
    SELECT label, launch, median(ns) AS median_ns
    FROM per_rank GROUP BY label, launch),
ratio AS (
    SELECT p.label, p.rank, p.launch, p.ns / t.median_ns AS x
    FROM per_rank p JOIN typical t USING (label, launch)
    WHERE t.median_ns > 0)
SELECT label, rank,
       round(median(x), 3) AS vs_median,
       round(max(x), 3) AS worst,
       arg_max(launch, x) AS worst_launch,
       min(launch) FILTER (WHERE x > 1.1) AS slow_since
FROM ratio
GROUP BY label, rank
ORDER BY vs_median DESC, worst DESC, label, rank
LIMIT 20""",
    ),
    "imbalance": (
        "Per label and core type: each core's time per launch, its mean, p99 and maximum over "
        "every core of every rank, and the maximum against the mean",
        """\
WITH per_core AS (
    SELECT label, core_type, rank, launch, core, sum(dur_ns) AS ns
    FROM spans GROUP BY label, core_type, rank, launch, core)
SELECT label, core_type,
       count(DISTINCT rank) AS ranks,
       round(avg(ns) / 1e3, 3) AS mean_us,
       round(quantile_cont(ns, 0.99) / 1e3, 3) AS p99_us,
       round(max(ns) / 1e3, 3) AS max_us,
       round(max(ns) / avg(ns), 3) AS max_vs_mean
FROM per_core
GROUP BY label, core_type
ORDER BY max_vs_mean DESC, label, core_type""",
    ),
    "phases": (
        "Per label: its spans, total time, mean, median and p99 duration, outer labels first",
        """\
SELECT label, min(depth) AS depth,
       count(*) AS spans,
       round(sum(dur_ns) / 1e6, 3) AS total_ms,
       round(avg(dur_ns) / 1e3, 3) AS mean_us,
       round(quantile_cont(dur_ns, 0.5) / 1e3, 3) AS p50_us,
       round(quantile_cont(dur_ns, 0.99) / 1e3, 3) AS p99_us
FROM spans
GROUP BY label
ORDER BY depth, total_ms DESC, label""",
    ),
}

OUTPUT_FORMATS = ("text", "csv", "json")


class QueryError(ProfilingInputError):
    """The SQL failed (a syntax error, an unknown column, a file it may not read): exit 2."""


_PART_DIR = re.compile(rf"{PARTITION}=(\d+)")
_RANK_MOST = 2**31 - 1  # a rank is a 31-bit number (the partition's INTEGER)


def dataset_files(directory: Path) -> list[Path]:
    """The dataset's Parquet files (regular files, no link followed), rank by rank."""
    if not directory.exists():
        raise ProfilingInputError(directory, "no such directory")
    if not is_dataset(directory):
        raise ProfilingInputError(directory, f"not an optrace dataset (no {MARKER}): write one with "
                                  "`optrace collect PROFILING_DIR -o DIR --format parquet`")
    document = load_json(directory / MARKER, "config")  # a small JSON file: config's bound
    version = document.get("version") if isinstance(document, dict) else None
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ProfilingInputError(directory / MARKER, f"dataset version {version!r}: this optrace reads "
                                  f"version {SCHEMA_VERSION} and older (a newer optrace wrote it)")
    found: list[tuple[int, Path]] = []
    for entry in os.scandir(directory):
        match = _PART_DIR.fullmatch(entry.name)
        if match is None or not entry.is_dir(follow_symlinks=False):
            continue
        if str(int(match[1])) != match[1] or int(match[1]) > _RANK_MOST:
            # `rank=01` beside `rank=1` is rank 1 twice (every span counted twice); past 31
            # bits the partition's INTEGER cannot hold it
            raise ProfilingInputError(Path(entry.path), f"not a rank's folder: {PARTITION}=N has N from 0 to "
                                      f"{_RANK_MOST}, written without leading zeros")
        for part in os.scandir(entry.path):
            if part.name.endswith(".parquet") and stat.S_ISREG(part.stat(follow_symlinks=False).st_mode):
                found.append((int(match[1]), Path(part.path)))
    if not found:
        raise ProfilingInputError(directory, f"no {PARTITION}=N/{PART_NAME} files in the dataset")
    return [path for _, path in sorted(found)]


def sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def connect(directory: Path) -> Any:
    """A DuckDB connection where ``spans`` is the dataset and nothing else can be read."""
    duckdb = require_duckdb(directory)
    files = [os.path.abspath(p) for p in dataset_files(directory)]
    connection = duckdb.connect()
    try:
        # No progress bar on stderr (DuckDB draws one for a long query, terminal or not);
        # the memory DuckDB may hold, past which it spills to its temporary files.
        connection.execute("SET enable_progress_bar = false")
        connection.execute(f"SET memory_limit = {sql_text(os.environ.get(MEMORY_ENV) or MEMORY_LIMIT)}")
        connection.execute(f"SET allowed_paths = [{', '.join(map(sql_text, files))}]")
        connection.execute("SET enable_external_access = false")
        connection.execute("SET lock_configuration = true")
        try:
            connection.execute(
                f"CREATE VIEW spans AS SELECT * FROM read_parquet([{', '.join(map(sql_text, files))}], "
                f"hive_partitioning = true, hive_types = {{'{PARTITION}': INTEGER}})")
            found = {name: kind for name, kind, *_ in connection.execute("DESCRIBE spans").fetchall()}
        except duckdb.Error as exc:
            raise ProfilingInputError(directory, f"its parts cannot be read as one table: {str(exc).strip()}"
                                      ) from None
        _check_columns(directory, found)
        _check_values(connection, directory, files)
    except BaseException:
        connection.close()
        raise
    return connection


# The columns every span has a value in (the others are NULL where the schema says).
_REQUIRED = ("launch", "core_type", "core", "label", "depth", "start_ns", "end_ns", "dur_ns", "status")


def _check_values(connection: Any, directory: Path, files: list[str]) -> None:
    """No NULL where every span has a value, no negative duration: read from the files'
    statistics (a column without them is counted), so a part written by something else
    is refused here rather than failing a report's arithmetic (exit 3) or summing below 0."""
    listed = ", ".join(map(sql_text, files))
    wanted = ", ".join(map(sql_text, _REQUIRED))
    rows = connection.execute(
        f"SELECT path_in_schema, sum(stats_null_count), bool_or(stats_null_count IS NULL), "
        f"min(TRY_CAST(stats_min_value AS BIGINT)) FROM parquet_metadata([{listed}]) "
        f"WHERE path_in_schema IN ({wanted}) GROUP BY path_in_schema").fetchall()
    for name, nulls, unknown, lowest in rows:
        if unknown:
            nulls = connection.execute(f'SELECT count(*) FROM spans WHERE "{name}" IS NULL').fetchall()[0][0]
        if nulls:
            raise ProfilingInputError(directory, f"{nulls} spans without a `{name}` (NULL): every span "
                                      "has one")
        if name == "dur_ns" and lowest is not None and lowest < 0:
            raise ProfilingInputError(directory, "a span of negative `dur_ns`: no span ends before it starts")


_INTEGERS = frozenset({"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                       "UINTEGER", "UBIGINT"})


def _family(kind: str) -> str:
    """A column type as the readers' SQL takes it: any whole number as one (a part another
    engine wrote may hold a depth as INTEGER, a time as BIGINT or INT64), text as text."""
    return "integer" if kind in _INTEGERS else kind


def _check_columns(directory: Path, found: dict[str, str]) -> None:
    """Every column of the schema, of its type: a part written by something else (a column
    gone or of another type) is refused here, not met as an error in the middle of a
    report's SQL (exit 3)."""
    for name, kind in ((PARTITION, "INTEGER"), *((n, k) for n, k, _ in COLUMNS)):
        if name not in _REQUIRED and found.get(name, "").strip('"') == "NULL":
            continue  # a column that may be NULL, NULL in every part: of no type, and harmless
        if _family(found.get(name, "")) != _family(kind):
            have = f"is {found[name]}" if name in found else "is missing"
            raise ProfilingInputError(directory, f"not the dataset's columns: `{name}` {have}, version "
                                      f"{SCHEMA_VERSION} has it {kind}")


def kv_metadata(connection: Any, directory: Path, key: str) -> list[str]:
    """The value of ``key`` in every file's key-value metadata (files the connection may read)."""
    listed = ", ".join(sql_text(os.path.abspath(f)) for f in dataset_files(directory))
    rows = connection.execute(f"SELECT decode(value) FROM parquet_kv_metadata([{listed}]) "
                              f"WHERE decode(key) = {sql_text(key)}").fetchall()
    return [row[0] for row in rows]


def rank_table(connection: Any, directory: Path) -> list[dict[str, Any]]:
    """The rank table entries the dataset's parts record (`optrace_ranks`), checked as a
    trace's are (spans.rank_entries): a part's metadata is data; what is not a JSON list
    of such objects is refused (exit 2), naming the dataset."""
    entries: list[Any] = []
    for text in kv_metadata(connection, directory, "optrace_ranks"):
        try:
            listed = json.loads(text)
        except (ValueError, RecursionError):
            raise ProfilingInputError(directory, "a part's optrace_ranks metadata is not JSON") from None
        if not isinstance(listed, list):
            raise ProfilingInputError(directory, "a part's optrace_ranks metadata is not a list")
        entries.extend(listed)
    return rank_entries(directory, {"ranks": entries})


def cores_filtered(connection: Any, directory: Path) -> bool:
    """Whether the dataset was collected with `--cores` (its parts say so)."""
    return any(text == "true" for text in kv_metadata(connection, directory, "optrace_cores_filtered"))


def run_settings(connection: Any, directory: Path) -> RunSettings:
    """The clock and barrier setting each launch was recorded with (its rank table entry)."""
    settings = RunSettings()
    for entry in rank_table(connection, directory):
        if entry.get("clock_mhz") is not None:
            settings.clock_mhz.add(checked_clock(directory, entry["clock_mhz"]))
        barrier = entry.get("barrier")
        settings.barrier.add(barrier if isinstance(barrier, bool) else None)
    return settings


# A row of the table: one core of one launch of one rank, as a trace lays them out.
_ROWS = """\
SELECT DISTINCT rank, coalesce(tag, '') AS tag, launch, core_type, core FROM spans
ORDER BY rank, tag, launch, core_type, core"""
_LABELS = "SELECT DISTINCT label FROM spans ORDER BY label"
_SPANS = """\
SELECT dense_rank() OVER (ORDER BY rank, coalesce(tag, ''), launch, core_type, core) - 1 AS row,
       dense_rank() OVER (ORDER BY label) - 1 AS label_id, start_ns, end_ns
FROM spans ORDER BY row, start_ns, end_ns DESC"""


def load_dataset(directory: Path) -> SpanTable:
    """Every span of a dataset in memory, its rows named as a trace's (``Rank 0 / AIC 1``;
    ``Rank 0 (launch 3) / AIC 1`` where it holds several launches): what ``inspect`` and the
    pages read. ``report`` and ``compare`` compute on a dataset in DuckDB instead, in
    DuckDB's memory, whatever the number of spans."""
    connection = connect(directory)
    try:
        rows = connection.execute(_ROWS).fetchall()
        labels = [label for label, in connection.execute(_LABELS).fetchall()]
        columns = connection.execute(_SPANS).fetchnumpy()
        settings = run_settings(connection, directory)
    finally:
        connection.close()
    several = len({(tag, launch) for _, tag, launch, _, _ in rows}) > 1
    launch_ids: dict[str, int] = {}
    tracks: list[str] = []
    track_launch: list[int] = []
    for rank, tag, launch, core_type, core in rows:
        process = f"Rank {rank}"
        launch_id = launch_name(tag or None, launch)
        tracks.append(f"{with_launch(process, launch_id) if several else process} / {core_type} {core}")
        track_launch.append(launch_ids.setdefault(launch_id, len(launch_ids)))
    starts = np.asarray(columns["start_ns"], dtype=np.float64)
    return SpanTable(
        source=str(directory),
        labels=labels,
        tracks=tracks,
        processes=len({(rank, tag, launch) for rank, tag, launch, _, _ in rows}),
        label=np.asarray(columns["label_id"], dtype=np.int32),
        track=np.asarray(columns["row"], dtype=np.int32),
        ts=starts / 1000.0,
        dur=(np.asarray(columns["end_ns"], dtype=np.float64) - starts) / 1000.0,
        settings=settings,
        launches=list(launch_ids),
        track_launch=np.array(track_launch, dtype=np.int32),
    )


class Result:
    """A query's column names and its rows, fetched in batches."""

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor
        self.columns: list[str] = [d[0] for d in cursor.description or []]

    def batches(self) -> Iterator[list[tuple[Any, ...]]]:
        while rows := self.cursor.fetchmany(BATCH):
            yield rows


def run(connection: Any, sql: str, directory: Path) -> Result:
    """The query's result; QueryError (``DIR: the query failed: ...``) with DuckDB's message."""
    duckdb = require_duckdb(directory)
    try:
        return Result(connection.execute(sql))
    except duckdb.Error as exc:
        raise QueryError(directory, f"the query failed: {str(exc).strip()}") from None


def query_sql(sql: str | None, preset: str | None) -> str:
    """The SQL to run: as given, or a preset's; ValueError for neither, both, an unknown one."""
    if (sql is None) == (preset is None):
        raise ValueError("give the SQL or --preset NAME (not both)")
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"--preset must be {', '.join(PRESETS)}, not {preset!r}")
        return PRESETS[preset][1]
    assert sql is not None
    return sql


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return str(value)


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return str(value)  # Decimal, dates, blobs: as DuckDB prints them


def write_result(result: Result, fmt: str, out: TextIO) -> int:
    """The rows as text (an aligned table), CSV or JSON (a list of objects); returns their number."""
    rows = 0
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(result.columns)
        for batch in result.batches():
            writer.writerows([[("" if v is None else v) for v in row] for row in batch])
            rows += len(batch)
        return rows
    if fmt == "json":
        out.write("[")
        for batch in result.batches():
            for row in batch:
                item = {c: _json_value(v) for c, v in zip(result.columns, row, strict=True)}
                out.write(("\n  " if not rows else ",\n  ") + json.dumps(item, ensure_ascii=False))
                rows += 1
        out.write("\n]\n" if rows else "]\n")
        return rows
    table = [[_cell(v) for v in row] for batch in result.batches() for row in batch]
    out.write(format_table(result.columns, table))
    return len(table)


def format_table(columns: Sequence[str], table: list[list[str]]) -> str:
    """Columns padded to their widest cell, numbers to the right; the row count last."""
    widths = [max([len(c), *(len(r[i]) for r in table)]) for i, c in enumerate(columns)]
    numeric = [all(_is_number(r[i]) for r in table) and bool(table) for i in range(len(columns))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if n else c.ljust(w)
                         for c, w, n in zip(cells, widths, numeric, strict=True)).rstrip()

    buffer = io.StringIO()
    buffer.write(line(columns) + "\n")
    buffer.write(line(["-" * w for w in widths]) + "\n")
    for row in table:
        buffer.write(line(row) + "\n")
    buffer.write(f"({len(table)} row{'s' if len(table) != 1 else ''})\n")
    return buffer.getvalue()


def _is_number(text: str) -> bool:
    if text == "NULL":
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True
