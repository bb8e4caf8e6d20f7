"""``optrace query DIR "SQL"``: SQL over a dataset ``collect --format parquet`` wrote.

Thin: the runtime (runtime/query.py) opens the dataset as table ``spans`` with nothing
else readable and runs the query; this prints the rows. DuckDB is imported when the
command runs (the [query] extra), never by ``optrace --help``. Exit codes (cli.md): 0 the
rows printed, 2 usage, a directory that is not a dataset, or SQL that fails.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from optrace.cli.collect_fast import failure_code, paths_as_bytes
from optrace.runtime.terminal import safe_text

# The names here, not imported from the runtime: `--help` must not load it (nor DuckDB).
_PRESETS = "straggler, imbalance or phases"


def cmd_query(
    dataset: Annotated[Path, typer.Argument(
        help="A dataset: `collect PROFILING_DIR -o DIR --format parquet`.")],
    sql: Annotated[str | None, typer.Argument(help="The query; the dataset is the table `spans`.")] = None,
    preset: Annotated[str | None, typer.Option(
        "--preset", help=f"A named query instead of SQL: {_PRESETS} (docs/runtime.md shows their "
        "SQL).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="text, csv or json.")] = "text",
) -> None:
    """Run SQL (DuckDB) over a Parquet dataset of spans; it reads the dataset and nothing else."""
    paths_as_bytes()
    try:
        from optrace.runtime.query import OUTPUT_FORMATS, connect, query_sql, run, write_result

        if fmt not in OUTPUT_FORMATS:
            raise ValueError(f"--format must be {', '.join(OUTPUT_FORMATS)}, not {fmt!r}")
        text = query_sql(sql, preset)
    except ValueError as exc:
        print(safe_text(f"optrace: {exc}"), file=sys.stderr)
        raise typer.Exit(2) from None
    try:
        directory = dataset.expanduser()
        connection = connect(directory)
        try:
            write_result(run(connection, text, directory), fmt, sys.stdout)
        finally:
            connection.close()
    except BaseException as exc:
        code = failure_code(exc)
        if code is None:
            raise
        raise typer.Exit(code) from None


def register(app: typer.Typer) -> None:
    app.command("query")(cmd_query)
