"""`optrace apply` and `optrace strip`: compute every operator's changes (in parallel),
then report them — a diff, a patch, a check — or commit each operator as a transaction
of its own, under the repository's write lock."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from optrace.cli.common import (
    EXIT_FINDINGS,
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    JOBS_HELP,
    REPO_ROOT_HELP,
    TRUST_HELP,
    apply_config_trust,
    err,
    operator_files,
    output_refused,
    run_parallel,
    run_summary,
    worker_count,
    write_stdout_bytes,
    write_user_output,
)
from optrace.cli.deferred import install as install_deferred
from optrace.engine.codes import OT044, OT045, OT047, OT300, OT999
from optrace.engine.diagnostics import shown_path
from optrace.runtime.terminal import safe_text

if TYPE_CHECKING:  # the pipeline is imported when a command runs, not with `optrace --help`
    from optrace.engine.transaction import Transaction
    from optrace.pipeline.apply import RunCommits


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
        return _EditOutcome(message=f"{shown_path(op_dir)}: {OT999} internal error while computing "
                            f"{compute}:\n{traceback.format_exc()}", code=EXIT_INTERNAL)
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


@dataclass
class _Prepared:
    """One operator of the run before anything is computed: what to tell the user first,
    the exit code so far, and — when it goes on — where it is and its transaction."""

    messages: list[str]
    code: int = EXIT_OK
    op_dir: Path | None = None
    journal: Transaction | None = None


def _prepare(op_dir: Path, repo_root: Path | None, write: bool) -> _Prepared:
    """Where the operator is and its journal. A run that died between files left a
    journal: with --write it is finished (rolled back) before anything is computed; its
    messages are shown when the operator's turn comes. A run that writes nothing recovers
    nothing: it refuses an operator optrace left half-written. A journal optrace did not
    record (a clone's) is never acted on."""
    from optrace.engine.diagnostics import InputError
    from optrace.engine.discovery import resolve_operator_dir, write_root
    from optrace.engine.journal import TransactionError, foreign_journal
    from optrace.engine.transaction import Transaction

    try:
        op_dir = resolve_operator_dir(op_dir)
    except InputError as exc:
        return _Prepared([exc.diagnostic.format()], EXIT_INPUT)
    root = write_root(op_dir, repo_root).resolve()
    txn = Transaction.of_operator(op_dir, root)
    if not write:
        state, path = txn.status()
        if state == "pending":
            return _Prepared([f"{shown_path(path or root)}: {OT044} {OT044.summary}; its files "
                              "may be half-written. This command writes nothing: run `optrace apply --write` "
                              "or `optrace strip --write` on it (each rolls the unfinished one back first), "
                              "then run this again"], EXIT_INPUT)
        foreign = foreign_journal(root, op_dir) if state == "foreign" else None
        notes = ([] if foreign is None else
                 [f"{shown_path(foreign.path)}: {foreign.code} warning: {foreign.message}"])
        return _Prepared(notes, EXIT_OK, op_dir, txn)
    try:
        report = txn.recover()
    except TransactionError as exc:
        return _Prepared([str(exc)], EXIT_INPUT)
    if report.foreign:
        return _Prepared([*report.messages(), *map(str, report.foreign)], EXIT_INPUT)
    return _Prepared(report.messages(), EXIT_OK, op_dir, txn)


@dataclass
class _EditRun:
    """The shared body of apply / strip: diff (default), --write, --check or --patch.

    Every operator is computed first, in a process pool, against the tree as it is; then,
    in the order given, each is reported and (--write) committed as its own transaction.
    Without --write nothing is written, so the outputs are those of computing the
    operators one after another. With --write an operator's result may be stale once an
    earlier one committed (a shared pybind.cpp, sample or build script): `RunCommits`
    rebases it onto the files as they are now — exactly what computing it now gives — or,
    when that cannot be known, it is computed again here. So the tree ends byte for byte
    as with one operator at a time."""

    compute: str  # "apply" or "strip"
    repo_root: Path | None
    write: bool
    check: bool
    patch: Path | None
    mode: str | None = None
    code: int = EXIT_OK
    patches: list[str] = field(default_factory=list)
    patched: list[Path] = field(default_factory=list)  # what the patch changes: inputs it must not replace
    recomputed: list[str] = field(default_factory=list)
    commits: RunCommits | None = None
    # How each operator ended: "changed" (a diff, a patch, --check's finding, a commit),
    # "unchanged" or "failed"; the run's closing line counts them.
    ends: list[str] = field(default_factory=list)

    def run(self, op_dirs: list[Path], jobs: int | None) -> int:
        sources = operator_files(op_dirs)
        if output_refused(self.patch, sources):  # before anything is recovered or computed
            return EXIT_INPUT
        prepared = [_prepare(op_dir, self.repo_root, self.write) for op_dir in op_dirs]
        render = not self.write and not self.check  # the diff (stdout or --patch): rendered by the workers
        work = [(p.op_dir, self.repo_root, self.compute, self.mode, render) for p in prepared if p.op_dir]
        title = "applying" if self.compute == "apply" else "stripping"
        outcomes = run_parallel(_edit_one, list(work), worker_count(jobs, len(work)), title)
        if self.write:
            from optrace.pipeline.apply import RunCommits

            self.commits = RunCommits(o.result for o in outcomes if o.result is not None)
        pending = iter(outcomes)
        for item in prepared:
            for message in item.messages:
                err(message)
            self.code = max(self.code, item.code)
            if item.op_dir is not None and item.journal is not None:
                self._report(item.op_dir, item.journal, next(pending))
            else:
                self.ends.append("failed")
        return self._finish(sources)

    def _report(self, op_dir: Path, journal: Transaction, outcome: _EditOutcome) -> None:
        """One operator's turn: its errors, then --check's findings, its commit, or its diff."""
        from optrace.engine.diagnostics import Severity

        if self.commits is not None and outcome.result is not None:
            rebased = self.commits.rebase(outcome.result)
            if rebased is None:  # not rebasable: compute it again, now, after the earlier commits
                self.recomputed.append(outcome.result.name)
            outcome = (_EditOutcome(rebased) if rebased is not None
                       else _edit_one(op_dir, self.repo_root, self.compute, self.mode))
        if outcome.result is None:
            err(outcome.message)
            self.code = max(self.code, outcome.code)
            self.ends.append("failed")
            return
        result = outcome.result
        for d in result.diagnostics:
            if d.severity == Severity.ERROR:
                err(d.format())
        if self.check:
            for path in sorted(result.changes):
                err(f"{shown_path(path)}: {OT300} would change ({self.compute})")
            if result.changes:
                self.code = max(self.code, EXIT_FINDINGS)
            self.ends.append("changed" if result.changes else "unchanged")
        elif self.write:
            self._commit(op_dir, journal, result)
        else:
            self._show(outcome)

    def _commit(self, op_dir: Path, journal: Transaction, result: Any) -> None:
        from optrace.engine.discovery import marked_repo_root
        from optrace.engine.journal import OutsideRoot, TransactionError

        assert self.commits is not None
        try:
            written = journal.commit(result.changes)
        except TransactionError as exc:
            err(str(exc))
            if isinstance(exc, OutsideRoot) and self.repo_root is None and marked_repo_root(op_dir) is None:
                err(f"{shown_path(op_dir)}: note: no .git or optrace.toml marks a repository above this "
                    "operator, so --write edits files inside its directory only; pass --repo-root DIR to "
                    "let it edit the files it found in DIR")
            self.code = max(self.code, EXIT_INPUT)
            self.ends.append("failed")
            return
        self.ends.append("changed" if written else "unchanged")
        self.commits.committed(result, written)
        typer.echo(safe_text(f"{result.name}: {len(written)} file(s) written"))

    def _show(self, outcome: _EditOutcome) -> None:
        """The diff on stdout, or kept for --patch."""
        from optrace.engine.edits import encode_patch, unified_diff

        result = outcome.result
        if outcome.diff is None:
            # One behaviour for diff, --patch and --write: a file outside the root (a
            # source linked out of it, a layer file the config names) is refused, by name.
            real_root = os.path.realpath(result.repo_root)
            outside = sorted(p for p in result.changes
                             if not Path(os.path.realpath(p)).is_relative_to(real_root))
            if outside:
                err(f"{shown_path(outside[0])}: {OT047} outside the repository root "
                    f"{shown_path(result.repo_root)}; not shown, nothing written (--repo-root DIR to widen "
                    "the root)")
                self.code = max(self.code, EXIT_INPUT)
                self.ends.append("failed")
                return
        diff = outcome.diff if outcome.diff is not None else unified_diff(result.changes, result.repo_root)
        self.ends.append("changed" if diff else "unchanged")
        if diff and result.summary:
            # What the diff does, before it: on stderr, so a diff piped into `git apply`
            # stays a patch.
            err("\n".join(safe_text(line) for line in result.summary))
        if self.patch is not None:
            self.patches.append(diff)
            self.patched.extend(result.changes)
        elif sys.stdout.isatty():  # shown, not piped into `git apply`: safe for the terminal
            write_stdout_bytes(encode_patch(safe_text(diff)))
        else:
            write_stdout_bytes(encode_patch(diff))

    def _finish(self, sources: list[Path]) -> int:
        from optrace.engine.edits import encode_patch

        if self.recomputed:
            # Correct either way, but the user should know why a parallel run was slow.
            err(f"note: computed again after earlier commits (they read files those commits wrote, e.g. a "
                f"shared kernel header): {', '.join(self.recomputed)}")
        # No operator got as far as its diff (every one refused: a config past its bound, a
        # link out of the root): no patch, so a patch file already there is kept, not emptied.
        refused = self.code >= EXIT_INPUT and len(self.patches) == 0
        if self.patch is not None and not refused and not write_user_output(
                self.patch, encode_patch("".join(self.patches)), sources + self.patched):
            self.code = EXIT_INPUT
        if len(self.ends) > 1:  # the last line of a run over several operators
            changed = "written" if self.write else "would change" if self.check else "with changes"
            err(run_summary(len(self.ends), [(self.ends.count("changed"), changed),
                                             (self.ends.count("unchanged"), "unchanged"),
                                             (self.ends.count("failed"), "failed")]))
        return self.code


def _edit_command(
    op_dirs: list[Path], repo_root: Path | None, write: bool, check: bool, patch: Path | None,
    compute: str, mode: Mode | None = None, jobs: int | None = None,
) -> int:
    """apply / strip in one of their four ways (see `_EditRun`)."""
    install_deferred()  # LibCST and importlib.metadata, imported at first use only
    if sum((write, check, patch is not None)) > 1:
        err("optrace: --write, --check and --patch are mutually exclusive")
        return EXIT_INPUT
    run = _EditRun(compute, repo_root, write, check, patch, mode.value if mode else None)
    return run.run(op_dirs, jobs)


_WRITE_HELP = "Apply the changes (atomically per operator)."


_WAIT_HELP = ("With --write: wait for another optrace process writing the same repository, "
              f"instead of stopping at once ({OT045}).")


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
            err(str(exc))
            return EXIT_INPUT
        return run()


_CHECK_HELP = "Write nothing; exit 1 when the tree differs from what this command would leave."


_PATCH_HELP = "Write the changes as a patch `git apply` accepts, and nothing else."


def apply(
    op_dirs: Annotated[list[Path], typer.Argument(help="Operator directories.")],
    mode: Annotated[
        Mode | None,
        typer.Option(help="B: profiling_data is a required output, one more return value. A: an "
                     "optional output, Python arity unchanged. Default: the mode recorded in the "
                     "instrumented tree, else chosen per operator (B when every layer can carry "
                     "the output, else A; `plan` shows which and why)."),
    ] = None,
    repo_root: Annotated[Path | None, typer.Option(help=REPO_ROOT_HELP)] = None,
    write: Annotated[bool, typer.Option("--write", help=_WRITE_HELP)] = False,
    check: Annotated[bool, typer.Option("--check", help=_CHECK_HELP)] = False,
    patch: Annotated[Path | None, typer.Option("--patch", help=_PATCH_HELP)] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help=JOBS_HELP)] = None,
    trust_config: Annotated[bool, typer.Option("--trust-config", help=TRUST_HELP)] = False,
    wait: Annotated[bool, typer.Option("--wait", help=_WAIT_HELP)] = False,
) -> None:
    """Instrument operators as planned, as a minimal diff: trace points (B + a scope guard
    that records the E on every exit), the generated runtime header beside the entry
    (included from *_base.h), and the kernel entry scaffold with its profiling_data output.
    Default: a summary (mode, files by layer, points, labels per core type) on stderr, then
    the diff, writing nothing."""
    apply_config_trust(trust_config)
    raise typer.Exit(_with_write_locks(op_dirs, repo_root, write, wait, lambda: _edit_command(
        op_dirs, repo_root, write, check, patch, "apply", mode, jobs)))


def strip(
    op_dirs: Annotated[list[Path], typer.Argument(help="Operator directories.")],
    repo_root: Annotated[Path | None, typer.Option(help=REPO_ROOT_HELP)] = None,
    write: Annotated[bool, typer.Option("--write", help=_WRITE_HELP)] = False,
    check: Annotated[bool, typer.Option("--check", help=_CHECK_HELP)] = False,
    patch: Annotated[Path | None, typer.Option("--patch", help=_PATCH_HELP)] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help=JOBS_HELP)] = None,
    trust_config: Annotated[bool, typer.Option("--trust-config", help=TRUST_HELP)] = False,
    wait: Annotated[bool, typer.Option("--wait", help=_WAIT_HELP)] = False,
) -> None:
    """Remove exactly what `apply` added (found by its markers), leaving the tree byte for
    byte as before; trace points written by hand stay. Default: print the diff."""
    apply_config_trust(trust_config)
    raise typer.Exit(_with_write_locks(op_dirs, repo_root, write, wait, lambda: _edit_command(
        op_dirs, repo_root, write, check, patch, "strip", None, jobs)))


def register(app: typer.Typer) -> None:
    """Add `apply` and `strip` to the application."""
    app.command()(apply)
    app.command()(strip)
