"""The command line: parses arguments and hands off to engine / runtime."""

from __future__ import annotations

import typer

from optrace.runtime.cli import register as register_runtime_commands

app = typer.Typer(no_args_is_help=True, add_completion=False)


@app.callback()
def _root() -> None:
    """optrace: instrument Ascend operators with trace points."""


register_runtime_commands(app)


def main() -> None:
    app()
