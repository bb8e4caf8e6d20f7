"""What a dataset directory is (``collect --format parquet``): its marker file, its
partition folders, its schema version, and DuckDB, which writes and reads it. Small on
purpose: ``collect`` recognises a dataset among its inputs and outputs without importing
the dataset's writer or reader."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import ModuleType

from .errors import ProfilingInputError

#: Bumped when a column changes meaning or goes; a new column is added without a bump.
SCHEMA_VERSION = 1
MARKER = "_optrace_dataset.json"
PARTITION = "rank"
PART_NAME = "part-0.parquet"

EXTRA = "ascend-optrace[query]"

#: (column, DuckDB type, meaning): one row per span. ``rank`` is the partition's (the
#: folder name), not stored in the files, as Hive-style readers expect.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("launch", "INTEGER", "the launch's index in its rank (rank file rankNNN_launchK.pt)"),
    ("tag", "VARCHAR", "the rank file's tag (rankNNN_TAG.pt), NULL without one"),
    ("core_type", "VARCHAR", "AIC, AIV, or Core (a kernel of one core type)"),
    ("core", "INTEGER", "the core's index among its type"),
    ("label", "VARCHAR", "the trace point's label"),
    ("depth", "SMALLINT", "nesting depth on its core, 0 outermost"),
    ("parent_label", "VARCHAR", "the label of the span it lies in, NULL at depth 0"),
    ("start_ns", "BIGINT", "start on the trace's time axis (ranks placed as collect places them), ns"),
    ("end_ns", "BIGINT", "end, ns"),
    ("dur_ns", "BIGINT", "end_ns - start_ns"),
    ("loop_index", "INTEGER", "the loop iteration a span of an indexed point records, else NULL"),
    ("status", "VARCHAR", "ok, closed_by_parent (its E was missing) or unclosed"),
)


def require_duckdb(path: Path) -> ModuleType:
    """DuckDB, or ``path: ... needs the [query] extra`` (exit 2)."""
    try:
        import duckdb  # the [query] extra
    except ImportError:
        raise ProfilingInputError(path, f"a Parquet dataset needs DuckDB: pip install '{EXTRA}'") from None
    return duckdb


def is_dataset(path: Path) -> bool:
    """A directory ``collect --format parquet`` wrote (its marker file is there)."""
    try:
        return stat.S_ISREG(os.lstat(path / MARKER).st_mode)
    except OSError:
        return False
