"""The command line: parses arguments and hands off to engine / runtime.

Exit codes (docs/cli.md): 0 clean (warnings allowed), 1 findings / changes needed,
2 bad usage or bad input, 3 internal error.
"""

from __future__ import annotations

import sys
import traceback
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from optrace.runtime.cli import register as register_runtime_commands

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 3

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Instrument Ascend (CANN / AscendC) operators with trace points, and turn what the "
    "device records into Chrome / Perfetto traces.",
)


@app.callback()
def _root() -> None:
    """optrace: instrument Ascend operators with trace points."""


class PlanFormat(StrEnum):
    text = "text"
    json = "json"


def _err(message: str) -> None:
    typer.echo(message, err=True)


@app.command()
def plan(
    op_dirs: Annotated[
        list[Path], typer.Argument(help="Operator directories (e.g. ascend_kernels/<op>).")
    ],
    repo_root: Annotated[
        Path | None,
        typer.Option(help="Repository to search for the op's other layers (default: the "
                     "nearest ancestor with .git or optrace.toml)."),
    ] = None,
    fmt: Annotated[PlanFormat, typer.Option("--format", help="text or json.")] = PlanFormat.text,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here, not stdout.")] = None,
    graph: Annotated[
        Path | None,
        typer.Option(help="Write the call graph: .dot, .html (self-contained) or .svg "
                     "(needs Graphviz). With several operators, one file each."),
    ] = None,
) -> None:
    """Show the trace tree optrace would instrument: layers found and missing, the
    include tree, per-core-type labels with each point's file:line, and warnings.
    Reads only; writes nothing unless -o / --graph are given."""
    from optrace.engine.diagnostics import InputError, Severity
    from optrace.engine.plan import plan_operator
    from optrace.engine.plan_output import plan_json, plans_json, render_text, write_graph

    code = EXIT_OK
    texts: list[str] = []
    docs: list[dict[str, object]] = []
    for op_dir in op_dirs:
        try:
            result = plan_operator(op_dir, repo_root)
        except InputError as exc:
            _err(exc.diagnostic.format())
            code = max(code, EXIT_INPUT)
            continue
        except Exception:  # one broken operator must not stop the others
            _err(f"{op_dir}: OT999 internal error while planning:\n{traceback.format_exc()}")
            code = max(code, EXIT_INTERNAL)
            continue
        # stderr carries what needs attention; notes (info) stay in the plan itself.
        for d in result.diagnostics:
            if d.severity != Severity.INFO:
                _err(d.format(result.analysis.layers.repo_root))
        if fmt == PlanFormat.json:
            docs.append(plan_json(result))
        else:
            texts.append(render_text(result))
        if graph is not None:
            target = graph if len(op_dirs) == 1 else graph.with_name(
                f"{graph.stem}.{result.analysis.layers.op_name}{graph.suffix}")
            try:
                write_graph(result, target)
            except (OSError, RuntimeError) as exc:
                _err(f"{target}: OT030 cannot write graph: {exc}")
                code = max(code, EXIT_INPUT)
    rendered = plans_json(docs) if fmt == PlanFormat.json else "\n".join(texts)
    if output is not None:
        try:
            output.write_text(rendered, encoding="utf-8")
        except OSError as exc:
            _err(f"{output}: OT030 cannot write: {exc.strerror or exc}")
            raise typer.Exit(EXIT_INPUT) from None
    else:
        sys.stdout.write(rendered)
    raise typer.Exit(code)


register_runtime_commands(app)


def main() -> None:
    try:
        app()
    except SystemExit:
        raise
    except Exception:
        _err("optrace: OT999 internal error:\n" + traceback.format_exc())
        sys.exit(EXIT_INTERNAL)
