"""The typer application: its root options and the commands each module registers.

Exit codes (docs/cli.md): 0 clean (warnings allowed), 1 findings / changes needed,
2 bad usage or bad input, 3 internal error.
"""

from __future__ import annotations

import sys
import traceback
from typing import Annotated

import typer

from optrace.cli import check, edit, plan, preprocess, query, runtime
from optrace.cli.common import EXIT_INTERNAL, EXIT_OK, end_command, err, start_command
from optrace.engine.codes import OT999

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    help="Instrument Ascend (CANN / AscendC) operators with trace points, and turn what the "
    "device records into Chrome / Perfetto traces.",
)


def _show_version(value: bool) -> None:
    if value:
        from optrace import __version__

        typer.echo(f"optrace {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_show_version,
                           help="Print optrace's version and exit.")
    ] = False,
) -> None:
    """optrace: instrument Ascend operators with trace points."""
    # --trust-config holds for one command: off before it, and off again once it ended
    # (several commands may run in one process: tests, library callers).
    start_command(False)
    ctx.call_on_close(end_command)


# The order of `optrace --help`: the instrumenting commands, then the build step and the
# runtime's, and SQL over a collected dataset.
for module in (plan, edit, check, preprocess, runtime, query):
    module.register(app)


def main() -> None:
    """The full CLI (start.py runs collect's and check's plain spellings without it)."""
    try:
        app()
    except SystemExit:
        raise
    except Exception:
        err(f"optrace: {OT999} internal error:\n" + traceback.format_exc())
        sys.exit(EXIT_INTERNAL)
