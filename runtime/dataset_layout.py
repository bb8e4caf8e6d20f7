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
