"""`optrace plan`: the trace tree each operator would get, its layers and warnings,
planned in parallel for several operators; reads only. The typer command; what it runs
is plan_fast.py's `plan_command` (the console script takes plan's plain spellings there
without the CLI framework)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from optrace.cli.common import JOBS_HELP, TRUST_HELP, apply_config_trust
from optrace.cli.plan_fast import PlanFormat, plan_command

__all__ = ["PlanFormat", "plan", "register"]


def plan(
    op_dirs: Annotated[
        list[Path], typer.Argument(help="Operator directories (e.g. ascend_kernels/<op>).")
    ],
    repo_root: Annotated[
        Path | None,
        typer.Option(help="Repository to search for the operator's other layers (default: the "
                     "nearest ancestor with .git or optrace.toml, else the operator directory's "
                     "grandparent)."),
    ] = None,
    fmt: Annotated[PlanFormat, typer.Option("--format", help="text (for review) or json (everything; "
                                            "docs/plan-schema.md).")] = PlanFormat.text,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write here, not stdout.")
    ] = None,
    graph: Annotated[
        Path | None,
        typer.Option(help="Write the call graph, its format by the suffix: .dot / .gv, .html "
                     "(self-contained), or .svg / .png (drawn by Graphviz's dot, when installed). "
                     "With several operators, one file each (the op name before the suffix)."),
    ] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help=JOBS_HELP)] = None,
    trust_config: Annotated[bool, typer.Option("--trust-config", help=TRUST_HELP)] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Neither read nor write the repository "
                                           "index's user cache ($XDG_CACHE_HOME/optrace).")] = False,
) -> None:
    """Show the trace tree optrace would instrument: layers found and missing, the
    include tree, per-core-type labels with each point's file:line, and warnings.
    Reads only; writes nothing unless -o / --graph are given."""
    apply_config_trust(trust_config)
    raise typer.Exit(plan_command(op_dirs, repo_root, fmt == PlanFormat.json, output, graph, jobs, no_cache))


def register(app: typer.Typer) -> None:
    """Add `plan` to the application."""
    app.command()(plan)
