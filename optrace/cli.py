"""The command line: parses arguments and hands off to engine / runtime.

Exit codes (docs/cli.md): 0 clean (warnings allowed), 1 findings / changes needed,
2 bad usage or bad input, 3 internal error.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from optrace.deferred import install as install_deferred
from optrace.runtime_cli import register as register_runtime_commands

if TYPE_CHECKING:
    from optrace.engine.plan import Plan

from optrace.commands import (
    EXIT_FINDINGS,
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    CheckFormat,
    apply_config_trust,
    check_command,
    operator_files,
    output_refused,
    run_parallel,
    worker_count,
    write_stdout_bytes,
    write_user_output,
)
from optrace.commands import emit as _emit_or_false

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
    apply_config_trust(False)
    ctx.call_on_close(lambda: apply_config_trust(False))


_TRUST_HELP = ("Let the repository's config import the rule modules it names ([rules] modules): "
               "running code a clone brings. Without it they are skipped, and the plan says so.")


class PlanFormat(StrEnum):
    text = "text"
    json = "json"


def _err(message: str) -> None:
    typer.echo(message, err=True)


def emit(rendered: str, output: Path | None, inputs: list[Path]) -> None:
    """The report to `-o FILE` (exit 2 if it cannot be written), else stdout."""
    if not _emit_or_false(rendered, output, inputs):
        raise typer.Exit(EXIT_INPUT)


@dataclass
class _PlanOutcome:
    """What planning one operator produced, as plain data (crosses process boundaries)."""

    text: str = ""
    doc: dict[str, object] | None = None
    messages: list[str] = field(default_factory=list)
    code: int = EXIT_OK


def _plan_one(op_dir: Path, repo_root: Path | None, as_json: bool, graph: Path | None) -> _PlanOutcome:
    from optrace.engine.diagnostics import InputError, Severity
    from optrace.engine.journal import foreign_journal, pending_journal
    from optrace.pipeline.plan import plan_operator
    from optrace.pipeline.plan_output import plan_json, render_text, write_graph
    from optrace.runtime.atomic import OutputError

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
    pending = pending_journal(root, result.analysis.layers.op_dir)
    if pending is not None:
        out.messages.append(f"{pending}: OT044 warning: an apply / strip of this operator did not "
                            "finish; the plan may show half-written code (the next apply / strip "
                            "--write rolls it back first)")
    foreign = foreign_journal(root, result.analysis.layers.op_dir)
    if foreign is not None:
        out.messages.append(f"{foreign.path}: {foreign.code} warning: {foreign.message}")
    out.messages.extend(d.format(root) for d in result.diagnostics if d.severity != Severity.INFO)
    mode = _plan_mode(result)
    if as_json:
        out.doc = plan_json(result, mode)
    else:
        out.text = render_text(result, mode)
    if graph is not None:
        try:
            write_graph(result, graph, [*result.analysis.parsed, *operator_files([op_dir])])
        except OutputError as exc:
            out.messages.append(f"{exc.path}: OT030 {exc.message}")
            out.code = EXIT_INPUT
        except (OSError, RuntimeError) as exc:  # Graphviz missing or failing (.svg)
            out.messages.append(f"{graph}: OT030 cannot write graph: {exc}")
            out.code = EXIT_INPUT
    return out


def _plan_mode(plan: Plan) -> tuple[str, str]:
    """The mode `apply` would use, and why: recorded in the tree, else chosen per operator."""
    from optrace.codemods.kernel_entry import recorded_mode
    from optrace.engine.diagnostics import InputError
    from optrace.pipeline.apply import choose_mode

    recorded = recorded_mode(plan.analysis.entry_fn.src.raw)
    if recorded is not None:
        return recorded, "recorded in the instrumented tree"
    try:
        mode, why = choose_mode(plan)
    except InputError as exc:
        d = exc.diagnostic
        return "none", f"apply would refuse: {d.format(plan.analysis.layers.repo_root)}"
    reason = why.message.split(": ", 1)[1]
    if mode == "A":
        reason += f" ({why.location(plan.analysis.layers.repo_root)})"
    return mode, reason


_PlanJob = tuple[Path, Path | None, bool, Path | None]
_JOBS_HELP = "Worker processes for several operators (default: all cores)."


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
    trust_config: Annotated[bool, typer.Option("--trust-config", help=_TRUST_HELP)] = False,
) -> None:
    """Show the trace tree optrace would instrument: layers found and missing, the
    include tree, per-core-type labels with each point's file:line, and warnings.
    Reads only; writes nothing unless -o / --graph are given."""
    from optrace.pipeline.plan_output import plans_json

    apply_config_trust(trust_config)
    install_deferred()  # LibCST and importlib.metadata, imported at first use only

    as_json = fmt == PlanFormat.json
    work: list[_PlanJob] = []
    for op_dir in op_dirs:
        target = None
        if graph is not None:
            target = graph if len(op_dirs) == 1 else graph.with_name(
                f"{graph.stem}.{op_dir.resolve().name}{graph.suffix}")
        work.append((op_dir, repo_root, as_json, target))
    sources = operator_files(op_dirs)
    if any([output_refused(output, sources), *(output_refused(w[3], sources) for w in work)]):
        raise typer.Exit(EXIT_INPUT)
    outcomes = run_parallel(_plan_one, list(work), worker_count(jobs, len(work)), "planning")
    code = EXIT_OK
    for outcome in outcomes:
        for message in outcome.messages:
            _err(message)
        code = max(code, outcome.code)
    if as_json:
        rendered = plans_json([o.doc for o in outcomes if o.doc is not None])
    else:
        rendered = "\n".join(o.text for o in outcomes if o.text)
    emit(rendered, output, sources)
    raise typer.Exit(code)


class Mode(StrEnum):
    A = "A"
    B = "B"


@dataclass
class _EditOutcome:
    """What computing apply / strip for one operator produced, as plain data (crosses
    process boundaries): its changes (without the plan), or the message of its failure."""

    result: Any = None  # OperatorChanges
    message: str = ""
    code: int = EXIT_OK
    diff: str | None = None  # the result's patch, when asked for (then `changes` stays behind)


def _edit_one(op_dir: Path, repo_root: Path | None, compute: str, mode: str | None,
              want_diff: bool = False) -> _EditOutcome:
    from optrace.engine.diagnostics import InputError
    from optrace.engine.edits import EditError, unified_diff
    from optrace.pipeline import apply as apply_module

    try:
        result = (apply_module.apply_changes(op_dir, repo_root, mode) if compute == "apply"
                  else apply_module.strip_changes(op_dir, repo_root))
    except InputError as exc:
        return _EditOutcome(message=exc.diagnostic.format(), code=EXIT_INPUT)
    except EditError as exc:
        return _EditOutcome(message=f"{exc}", code=EXIT_INTERNAL)
    except Exception:  # one broken operator must not stop the others
        return _EditOutcome(message=f"{op_dir}: OT999 internal error while computing {compute}:\n"
                            f"{traceback.format_exc()}", code=EXIT_INTERNAL)
    result.plan = None  # parse trees do not cross processes, and nothing below needs them
    if want_diff:
        # The diff of a run that writes nothing is rendered where the operator was
        # computed (in parallel); only its text crosses back. Should rendering fail, the
        # changes go back instead and the caller renders (and fails) as it always did.
        try:
            diff = unified_diff(result.changes, result.repo_root)
        except Exception:  # reported by the caller, as it always was
            return _EditOutcome(result)
        result.changes, result.provenance = {}, None
        return _EditOutcome(result, diff=diff)
    return _EditOutcome(result)


def _edit_command(
    op_dirs: list[Path], repo_root: Path | None, write: bool, check: bool, patch: Path | None,
    compute: str, mode: Mode | None = None, jobs: int | None = None,
) -> int:
    """The shared body of apply / strip: diff (default), --write, --check or --patch.

    Every operator is computed first, in a process pool, against the tree as it is; then,
    in the order given, each is reported and (--write) committed as its own transaction.
    Without --write nothing is written, so the outputs are those of computing the
    operators one after another. With --write an operator's result may be stale once an
    earlier one committed (a shared pybind.cpp, sample or build script): `RunCommits`
    rebases it onto the files as they are now — exactly what computing it now gives — or,
    when that cannot be known, it is computed again here. So the tree ends byte for byte
    as with one operator at a time."""
    from optrace.engine.diagnostics import InputError, Severity
    from optrace.engine.discovery import marked_repo_root, resolve_operator_dir, write_root
    from optrace.engine.edits import encode_patch, unified_diff
    from optrace.engine.journal import OutsideRoot, TransactionError, foreign_journal, operator_journal_name
    from optrace.engine.transaction import Transaction
    from optrace.pipeline.apply import RunCommits

    install_deferred()  # LibCST and importlib.metadata, imported at first use only

    if sum((write, check, patch is not None)) > 1:
        _err("optrace: --write, --check and --patch are mutually exclusive")
        return EXIT_INPUT
    sources = operator_files(op_dirs)
    if output_refused(patch, sources):  # before anything is recovered or computed
        return EXIT_INPUT
    code = EXIT_OK
    patches: list[str] = []
    patched: list[Path] = []  # the files the patch changes: inputs it must not replace
    mode_ = mode.value if mode else None
    # Per operator, in order: where it is and its journal. A run that died between files
    # left a journal: with --write it is finished (rolled back) before anything is
    # computed; its messages are shown when the operator's turn comes. A run that writes
    # nothing recovers nothing: it refuses an operator optrace left half-written. A
    # journal optrace did not record (a clone's) is never acted on.
    prepared: list[tuple[list[str], int, Path | None, Transaction | None]] = []
    for op_dir in op_dirs:
        try:
            op_dir = resolve_operator_dir(op_dir)
        except InputError as exc:
            prepared.append(([exc.diagnostic.format()], EXIT_INPUT, None, None))
            continue
        root = write_root(op_dir, repo_root).resolve()
        txn = Transaction(root / ".optrace", operator_journal_name(op_dir))
        if not write:
            state, path = txn.status()
            if state == "pending":
                prepared.append(([f"{path}: OT044 an apply / strip of this operator did not finish; "
                                  "its files may be half-written. This command writes nothing: run "
                                  "`optrace apply --write` or `optrace strip --write` on it (each rolls "
                                  "the unfinished one back first), then run this again"],
                                 EXIT_INPUT, None, None))
                continue
            foreign = foreign_journal(root, op_dir) if state == "foreign" else None
            notes = [] if foreign is None else [f"{foreign.path}: {foreign.code} warning: {foreign.message}"]
            prepared.append((notes, EXIT_OK, op_dir, txn))
            continue
        try:
            report = txn.recover()
        except TransactionError as exc:
            prepared.append(([str(exc)], EXIT_INPUT, None, None))
            continue
        if report.foreign:
            prepared.append(([*report.messages(), *map(str, report.foreign)], EXIT_INPUT, None, None))
            continue
        prepared.append((report.messages(), EXIT_OK, op_dir, txn))
    render = not write and not check  # the diff (stdout or --patch): rendered by the workers
    work = [(op_dir, repo_root, compute, mode_, render) for _, _, op_dir, _ in prepared if op_dir is not None]
    title = "applying" if compute == "apply" else "stripping"
    computed = run_parallel(_edit_one, list(work), worker_count(jobs, len(work)), title)
    run = RunCommits(o.result for o in computed if o.result is not None) if write else None
    pending = iter(computed)
    recomputed: list[str] = []
    for messages, failure, resolved, journal in prepared:
        for message in messages:
            _err(message)
        code = max(code, failure)
        if resolved is None or journal is None:
            continue
        outcome = next(pending)
        if run is not None and outcome.result is not None:
            rebased = run.rebase(outcome.result)
            # Not rebasable: compute it again, now, after the earlier commits.
            if rebased is None:
                recomputed.append(outcome.result.name)
            outcome = (_EditOutcome(rebased) if rebased is not None
                       else _edit_one(resolved, repo_root, compute, mode_))
        if outcome.result is None:
            _err(outcome.message)
            code = max(code, outcome.code)
            continue
        result = outcome.result
        for d in result.diagnostics:
            if d.severity == Severity.ERROR:
                _err(d.format(result.repo_root))
        if check:
            if result.changes:
                for path in sorted(result.changes):
                    _err(f"{_rel(path, result.repo_root)}: OT300 would change ({compute})")
                code = max(code, EXIT_FINDINGS)
            continue
        if write:
            assert run is not None
            try:
                written = journal.commit(result.changes)
            except TransactionError as exc:
                _err(str(exc))
                if isinstance(exc, OutsideRoot) and repo_root is None and marked_repo_root(resolved) is None:
                    _err(f"{resolved}: note: no .git or optrace.toml marks a repository above this operator, "
                         "so --write edits files inside its directory only; pass --repo-root DIR to let "
                         "it edit the files it found in DIR")
                code = max(code, EXIT_INPUT)
                continue
            run.committed(result, written)
            typer.echo(f"{result.name}: {len(written)} file(s) written")
            continue
        if outcome.diff is None:
            # One behaviour for diff, --patch and --write: a file outside the root (a
            # source linked out of it, a layer file the config names) is refused, by name.
            real_root = os.path.realpath(result.repo_root)
            outside = sorted(p for p in result.changes
                             if not Path(os.path.realpath(p)).is_relative_to(real_root))
            if outside:
                _err(f"{outside[0]}: OT047 outside the repository root {result.repo_root}; not shown, "
                     "nothing written (--repo-root DIR to widen the root)")
                code = max(code, EXIT_INPUT)
                continue
        diff = outcome.diff if outcome.diff is not None else unified_diff(result.changes, result.repo_root)
        if patch is not None:
            patches.append(diff)
            patched.extend(result.changes)
        else:
            write_stdout_bytes(encode_patch(diff))
    if recomputed:
        # Correct either way, but the user should know why a parallel run was slow.
        _err(f"note: computed again after earlier commits (they read files those commits "
             f"wrote, e.g. a shared kernel header): {', '.join(recomputed)}")
    # No operator got as far as its diff (every one refused: a config past its bound, a
    # link out of the root): no patch, so a patch file already there is kept, not emptied.
    refused = code >= EXIT_INPUT and len(patches) == 0
    if patch is not None and not refused and not write_user_output(
            patch, encode_patch("".join(patches)), sources + patched):
        return EXIT_INPUT
    return code


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


_WRITE_HELP = "Apply the changes (atomically per operator)."
_WAIT_HELP = ("With --write: wait for another optrace process writing the same repository, "
              "instead of stopping at once (OT045).")


def _with_write_locks(op_dirs: list[Path], repo_root: Path | None, write: bool, wait: bool,
                      run: Callable[[], int]) -> int:
    """`run()` holding the write lock of every repository a --write run writes (taken in
    sorted order, before anything is recovered or computed, released after the last
    commit); another process holding one: OT045 naming it, nothing done — or --wait."""
    if not write:
        return run()
    from contextlib import ExitStack

    from optrace.engine.diagnostics import InputError
    from optrace.engine.discovery import resolve_operator_dir, write_root
    from optrace.engine.journal import TransactionError
    from optrace.engine.transaction import repository_lock

    roots: set[Path] = set()
    for op_dir in op_dirs:
        try:
            roots.add(write_root(resolve_operator_dir(op_dir), repo_root).resolve())
        except InputError:
            continue  # reported by the run itself
    with ExitStack() as locks:
        try:
            for root in sorted(roots):
                locks.enter_context(repository_lock(root, wait=wait))
        except TransactionError as exc:
            _err(str(exc))
            return EXIT_INPUT
        return run()
_CHECK_HELP = "Write nothing; exit 1 when the tree differs from what this command would leave."
_PATCH_HELP = "Write the changes as a patch `git apply` accepts, and nothing else."


@app.command()
def apply(
    op_dirs: Annotated[list[Path], typer.Argument(help="Operator directories.")],
    mode: Annotated[
        Mode | None,
        typer.Option(help="B (default): profiling_data is a required output, one more return value. "
                     "A: optional output, Python arity unchanged. Recorded in the tree; "
                     "re-applying without --mode keeps it."),
    ] = None,
    repo_root: Annotated[Path | None, typer.Option(help="Repository root (see `plan`).")] = None,
    write: Annotated[bool, typer.Option("--write", help=_WRITE_HELP)] = False,
    check: Annotated[bool, typer.Option("--check", help=_CHECK_HELP)] = False,
    patch: Annotated[Path | None, typer.Option("--patch", help=_PATCH_HELP)] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help=_JOBS_HELP)] = None,
    trust_config: Annotated[bool, typer.Option("--trust-config", help=_TRUST_HELP)] = False,
    wait: Annotated[bool, typer.Option("--wait", help=_WAIT_HELP)] = False,
) -> None:
    """Instrument operators as planned, as a minimal diff: trace points (B + a scope guard
    that records the E on every exit), the runtime block in *_base.h, and the kernel
    entry scaffold with its profiling_data output. Default: print the diff, write nothing."""
    apply_config_trust(trust_config)
    raise typer.Exit(_with_write_locks(op_dirs, repo_root, write, wait, lambda: _edit_command(
        op_dirs, repo_root, write, check, patch, "apply", mode, jobs)))


@app.command()
def strip(
    op_dirs: Annotated[list[Path], typer.Argument(help="Operator directories.")],
    repo_root: Annotated[Path | None, typer.Option(help="Repository root (see `plan`).")] = None,
    write: Annotated[bool, typer.Option("--write", help=_WRITE_HELP)] = False,
    check: Annotated[bool, typer.Option("--check", help=_CHECK_HELP)] = False,
    patch: Annotated[Path | None, typer.Option("--patch", help=_PATCH_HELP)] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help=_JOBS_HELP)] = None,
    trust_config: Annotated[bool, typer.Option("--trust-config", help=_TRUST_HELP)] = False,
    wait: Annotated[bool, typer.Option("--wait", help=_WAIT_HELP)] = False,
) -> None:
    """Remove exactly what `apply` added (found by its markers), leaving the tree byte for
    byte as before; trace points written by hand stay. Default: print the diff."""
    apply_config_trust(trust_config)
    raise typer.Exit(_with_write_locks(op_dirs, repo_root, write, wait, lambda: _edit_command(
        op_dirs, repo_root, write, check, patch, "strip", None, jobs)))


@app.command()
def check(
    op_dirs: Annotated[list[Path], typer.Argument(help="Operator directories.")],
    repo_root: Annotated[Path | None, typer.Option(help="Repository root (see `plan`).")] = None,
    fmt: Annotated[CheckFormat, typer.Option("--format", help="text, json or sarif.")] = CheckFormat.text,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here, not stdout.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Warnings count as errors.")] = False,
    compile_safety: Annotated[
        bool, typer.Option(" /--no-compile", help="Skip the libclang compile-safety pass.")
    ] = True,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, help=_JOBS_HELP),
    ] = None,
    trust_config: Annotated[bool, typer.Option("--trust-config", help=_TRUST_HELP)] = False,
) -> None:
    """Check trace points and the kernel side of gate G2: label syntax and depth, the root
    `processing`, B/E pairing and nesting (every exit path), the profiling_data parameter,
    and whether the code optrace inserted compiles (libclang against the AscendC host stub).
    Each operator's summary says whether profiling is compiled in. Exit 1 on errors."""
    apply_config_trust(trust_config)
    raise typer.Exit(check_command(op_dirs, repo_root, fmt, output, strict, compile_safety, jobs))


@app.command("pre-commit")
def pre_commit(
    files: Annotated[
        list[Path] | None,
        typer.Argument(help="Staged files, as pre-commit passes them (after `--`, so a name "
                       "starting with `-` stays a file)."),
    ] = None,
    repo_root: Annotated[
        Path | None,
        typer.Option(help="Repository the files belong to (default: the one holding the "
                     "current directory)."),
    ] = None,
    fmt: Annotated[CheckFormat, typer.Option("--format", help="text, json or sarif.")] = CheckFormat.text,
    strict: Annotated[bool, typer.Option("--strict", help="Warnings count as errors.")] = False,
    compile_safety: Annotated[
        bool, typer.Option(" /--no-compile", help="Skip the libclang compile-safety pass.")
    ] = True,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help=_JOBS_HELP)] = None,
    trust_config: Annotated[bool, typer.Option("--trust-config", help=_TRUST_HELP)] = False,
) -> None:
    """Run `check` on the operators the given files belong to: a file inside an operator
    directory belongs to it; any other file (pybind, a sample, the build script, a wrapper
    elsewhere) to every operator whose plan lists it. No operator: nothing runs, exit 0.
    This is what the `optrace-check` pre-commit hook calls."""
    from optrace.pipeline.pre_commit import operators_for_files, repository_of

    apply_config_trust(trust_config)
    cwd = Path.cwd()
    root = repository_of(cwd, repo_root)
    staged = operators_for_files(list(files or []), root, cwd)
    op_dirs = staged.sorted_operators()
    if not op_dirs:
        raise typer.Exit(EXIT_OK)
    raise typer.Exit(check_command(op_dirs, repo_root, fmt, None, strict, compile_safety, jobs))


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
    from optrace.engine.preprocess import point_map_document, rewrite_sources, scan
    from optrace.runtime.atomic import OutputError, write_output

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
    map_path = out / "point_map.json"
    if output_refused(map_path, list(result.files), "OT206"):  # e.g. --out names a source
        raise typer.Exit(EXIT_INPUT)
    try:
        for path, data in changed.items():  # the build tree's sources, rewritten in place
            write_output(path, data)
        write_output(map_path, (json.dumps(doc, indent=1) + "\n").encode(), inputs=result.files)
    except OutputError as exc:
        _err(f"{exc.path}: OT206 {exc.message}")
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
