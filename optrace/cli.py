"""The command line: parses arguments and hands off to engine / runtime.

Exit codes (docs/cli.md): 0 clean (warnings allowed), 1 findings / changes needed,
2 bad usage or bad input, 3 internal error.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
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


@dataclass
class _PlanOutcome:
    """What planning one operator produced, as plain data (crosses process boundaries)."""

    text: str = ""
    doc: dict[str, object] | None = None
    messages: list[str] = field(default_factory=list)
    code: int = EXIT_OK


def _plan_one(op_dir: Path, repo_root: Path | None, as_json: bool, graph: Path | None) -> _PlanOutcome:
    from optrace.engine.diagnostics import InputError, Severity
    from optrace.engine.plan import plan_operator
    from optrace.engine.plan_output import plan_json, render_text, write_graph

    out = _PlanOutcome()
    try:
        result = plan_operator(op_dir, repo_root)
    except InputError as exc:
        out.messages.append(exc.diagnostic.format())
        out.code = EXIT_INPUT
        return out
    except Exception:  # one broken operator must not stop the others
        out.messages.append(f"{op_dir}: OT999 internal error while planning:\n{traceback.format_exc()}")
        out.code = EXIT_INTERNAL
        return out
    # stderr carries what needs attention; notes (info) stay in the plan itself.
    root = result.analysis.layers.repo_root
    out.messages.extend(d.format(root) for d in result.diagnostics if d.severity != Severity.INFO)
    if as_json:
        out.doc = plan_json(result)
    else:
        out.text = render_text(result)
    if graph is not None:
        try:
            write_graph(result, graph)
        except (OSError, RuntimeError) as exc:
            out.messages.append(f"{graph}: OT030 cannot write graph: {exc}")
            out.code = EXIT_INPUT
    return out


_PlanJob = tuple[Path, Path | None, bool, Path | None]


def _run_parallel(jobs: list[_PlanJob], workers: int) -> list[_PlanOutcome]:
    """Plan operators in a process pool (each one its own unit of failure), in order,
    with a progress bar on an interactive stderr."""
    from rich.progress import Progress

    show = sys.stderr.isatty() and len(jobs) > 3
    results: list[_PlanOutcome | None] = [None] * len(jobs)
    if workers <= 1:
        pending = ((i, _plan_one(*job)) for i, job in enumerate(jobs))
        iterator = pending
    else:
        pool = ProcessPoolExecutor(max_workers=workers)
        futures = {pool.submit(_plan_one, *job): i for i, job in enumerate(jobs)}
        iterator = ((futures[f], f.result()) for f in as_completed(futures))
    with Progress(transient=True, disable=not show, console=None) as progress:
        task = progress.add_task("planning", total=len(jobs))
        for i, outcome in iterator:
            results[i] = outcome
            progress.advance(task)
    if workers > 1:
        pool.shutdown()
    return [r for r in results if r is not None]


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
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write here, not stdout.")
    ] = None,
    graph: Annotated[
        Path | None,
        typer.Option(help="Write the call graph: .dot, .html (self-contained) or .svg "
                     "(needs Graphviz). With several operators, one file each."),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1,
                     help="Worker processes for several operators (default: all cores)."),
    ] = None,
) -> None:
    """Show the trace tree optrace would instrument: layers found and missing, the
    include tree, per-core-type labels with each point's file:line, and warnings.
    Reads only; writes nothing unless -o / --graph are given."""
    from optrace.engine.plan_output import plans_json

    as_json = fmt == PlanFormat.json
    work: list[_PlanJob] = []
    for op_dir in op_dirs:
        target = None
        if graph is not None:
            target = graph if len(op_dirs) == 1 else graph.with_name(
                f"{graph.stem}.{op_dir.resolve().name}{graph.suffix}")
        work.append((op_dir, repo_root, as_json, target))
    workers = min(jobs or os.cpu_count() or 1, len(work))
    outcomes = _run_parallel(work, workers)
    code = EXIT_OK
    for outcome in outcomes:
        for message in outcome.messages:
            _err(message)
        code = max(code, outcome.code)
    if as_json:
        rendered = plans_json([o.doc for o in outcomes if o.doc is not None])
    else:
        rendered = "\n".join(o.text for o in outcomes if o.text)
    if output is not None:
        try:
            output.write_text(rendered, encoding="utf-8")
        except OSError as exc:
            _err(f"{output}: OT030 cannot write: {exc.strerror or exc}")
            raise typer.Exit(EXIT_INPUT) from None
    else:
        sys.stdout.write(rendered)
    raise typer.Exit(code)


@app.command()
def preprocess(
    src_dir: Annotated[Path, typer.Argument(help="Kernel sources (the build tree's copy).")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write point_map.json into.")],
    modify: Annotated[
        bool,
        typer.Option("--modify", help="Rewrite each TRACE_POINT(...) in SRC_DIR with its id and "
                     "set OPTRACE_BUILD_FINGERPRINT (meant for the build-tree copy)."),
    ] = False,
) -> None:
    """Build step: turn TRACE_POINT labels into stable integer ids and write
    point_map.json (with the build fingerprint). Writes by default; on any error
    (bad label, unbalanced B/E, already-preprocessed sources) it writes nothing."""
    from optrace import __version__
    from optrace.engine.diagnostics import Severity
    from optrace.engine.preprocess import point_map_document, rewrite_sources, scan, write_atomic

    if not src_dir.is_dir():
        _err(f"{src_dir}: OT200 source directory does not exist")
        raise typer.Exit(EXIT_INPUT)
    src_dir = src_dir.resolve()
    result = scan(src_dir)
    for d in result.diagnostics:
        if d.severity != Severity.INFO:
            _err(d.format(src_dir))
    if not result.ok:
        _err(f"{src_dir}: OT200 nothing written")
        raise typer.Exit(EXIT_INPUT)
    doc = point_map_document(result, src_dir, f"optrace {__version__}")
    changed = rewrite_sources(result) if modify else {}
    try:
        out.mkdir(parents=True, exist_ok=True)
        for path, data in changed.items():
            write_atomic(path, data)
        write_atomic(out / "point_map.json", (json.dumps(doc, indent=1) + "\n").encode())
    except OSError as exc:
        _err(f"{exc.filename or out}: OT206 cannot write: {exc.strerror or exc}")
        raise typer.Exit(EXIT_INPUT) from None
    labels = len({o.label for o in result.occurrences})
    typer.echo(f"{len(result.occurrences)} points, {labels} labels, {len(result.files)} files; "
               f"fingerprint 0x{result.fingerprint:08x}; wrote {out / 'point_map.json'}"
               + (f"; rewrote {len(changed)} file(s)" if modify else ""))
    raise typer.Exit(EXIT_OK)


register_runtime_commands(app)


def main() -> None:
    try:
        app()
    except SystemExit:
        raise
    except Exception:
        _err("optrace: OT999 internal error:\n" + traceback.format_exc())
        sys.exit(EXIT_INTERNAL)
