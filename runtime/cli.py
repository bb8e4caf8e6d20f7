"""Runtime commands (collect, inspect, report, compare) for the optrace CLI."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the runtime commands to the top-level app (filled in by the runtime work)."""
