"""`optrace preprocess`: the build step turning TRACE_POINT labels into ids and writing
point_map.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from optrace.cli.common import (
    EXIT_INPUT,
    EXIT_OK,
    err,
    output_refused,
)
from optrace.engine.codes import OT200, OT206
from optrace.engine.diagnostics import shown_path


def preprocess(
    src_dir: Annotated[Path, typer.Argument(help="Kernel sources (the build tree's copy).")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write point_map.json into.")],
    modify: Annotated[
        bool,
        typer.Option("--modify", help="Rewrite each TRACE_POINT(...) in SRC_DIR with its id and "
                     "set OPTRACE_BUILD_FINGERPRINT (meant for the build-tree copy; only its own "
                     "regular files: a symlink or a file outside SRC_DIR is refused)."),
    ] = False,
) -> None:
    """Build step: turn TRACE_POINT labels into stable integer ids and write
    point_map.json (with the build fingerprint). Writes by default; on any error
    (bad label, unbalanced B/E, already-preprocessed sources; with --modify, a file to
    rewrite that is a symlink or lies outside SRC_DIR) it writes nothing."""
    from optrace import __version__
    from optrace.engine.diagnostics import Severity
    from optrace.engine.preprocess import modify_refusals, point_map_document, rewrite_sources, scan
    from optrace.runtime.atomic import OutputError, write_output

    if not src_dir.is_dir():
        err(f"{shown_path(src_dir)}: {OT200} source directory does not exist")
        raise typer.Exit(EXIT_INPUT)
    src_dir = src_dir.resolve()
    result = scan(src_dir)
    for d in result.diagnostics:
        if d.severity != Severity.INFO:
            err(d.format())
    if not result.ok:
        err(f"{shown_path(src_dir)}: {OT200} nothing written")
        raise typer.Exit(EXIT_INPUT)
    doc = point_map_document(result, src_dir, f"optrace {__version__}")
    changed = rewrite_sources(result) if modify else {}
    # Every file to rewrite is checked before the first is written: none or all.
    refused = modify_refusals(changed, src_dir)
    for d in refused:
        err(d.format())
    if refused:
        err(f"{shown_path(src_dir)}: {OT200} nothing written")
        raise typer.Exit(EXIT_INPUT)
    map_path = out / "point_map.json"
    if output_refused(map_path, list(result.files), OT206):  # e.g. --out names a source
        raise typer.Exit(EXIT_INPUT)
    try:
        for path, data in changed.items():  # the build tree's sources, rewritten in place
            # Never through a link, even one made since the check above.
            write_output(path, data, rewrite=True)
        write_output(map_path, (json.dumps(doc, indent=1) + "\n").encode(), inputs=result.files)
    except OutputError as exc:
        err(f"{shown_path(exc.path)}: {OT206} {exc.message}")
        raise typer.Exit(EXIT_INPUT) from None
    labels = len({o.label for o in result.occurrences})
    typer.echo(f"{len(result.occurrences)} points, {labels} labels, {len(result.files)} files; "
               f"fingerprint 0x{result.fingerprint:08x}; wrote {shown_path(out / 'point_map.json')}"
               + (f"; rewrote {len(changed)} file(s)" if modify else ""))
    raise typer.Exit(EXIT_OK)


def register(app: typer.Typer) -> None:
    """Add `preprocess` to the application."""
    app.command()(preprocess)
