"""``optrace check`` without the CLI framework.

check is what the pre-commit hook runs on every commit, so its start-up counts; typer and
click cost more to import and parse than the rest of a small check, so the console
script hands ``check`` to :func:`fast_main` first. Only the plain spellings of
check's options are taken here; anything else (``--help``, a typo, a bad value, ``--``)
returns None and the full CLI handles it, with its usual help and usage errors. Both run
:func:`check_command`, so they behave the same.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from optrace.cli import check_cache
from optrace.cli.collect_fast import paths_as_bytes, positive_count, split_plain
from optrace.cli.common import (
    EXIT_FINDINGS,
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    CheckFormat,
    emit,
    end_command,
    err,
    operator_files,
    output_refused,
    run_parallel,
    run_summary,
    start_command,
    worker_count,
)
from optrace.engine import index_cache
from optrace.engine.codes import OT999
from optrace.engine.diagnostics import shown_path

if TYPE_CHECKING:
    from optrace.pipeline.check_report import CheckReport

_VALUE_OPTIONS = {"--repo-root": "repo_root", "--format": "format", "-o": "output", "--output": "output",
                  "-j": "jobs", "--jobs": "jobs"}
_FLAGS = {"--strict": "strict", "--no-compile": "no_compile", "--trust-config": "trust_config",
          "-v": "verbose", "--verbose": "verbose", "--no-cache": "no_cache"}


class CheckArgs(NamedTuple):
    op_dirs: list[Path]
    repo_root: Path | None
    fmt: CheckFormat
    output: Path | None
    strict: bool
    compile_safety: bool
    jobs: int | None
    trust_config: bool
    verbose: bool = False
    cache: bool = True


def parse_fast(argv: Sequence[str]) -> CheckArgs | None:
    """check's arguments in their plain spellings, or None for the full CLI to parse."""
    split = split_plain(argv, _VALUE_OPTIONS, _FLAGS)
    if split is None:
        return None
    values, positional = split
    op_dirs = [Path(p) for p in positional]
    fmt = values.get("format", "text")
    jobs = values.get("jobs")
    if not op_dirs or fmt not in {f.value for f in CheckFormat}:
        return None
    if jobs is not None and positive_count(jobs) is None:
        return None  # not a positive integer: the full CLI's usage error
    repo_root, output = values.get("repo_root"), values.get("output")
    return CheckArgs(op_dirs, Path(str(repo_root)) if repo_root is not None else None, CheckFormat(str(fmt)),
                     Path(str(output)) if output is not None else None, bool(values.get("strict")),
                     not values.get("no_compile"), positive_count(jobs) if jobs is not None else None,
                     bool(values.get("trust_config")), bool(values.get("verbose")),
                     not values.get("no_cache"))


def fast_main(argv: Sequence[str]) -> int | None:
    """Run check from its arguments (those after ``check``) and return its exit code, or
    None when the full CLI should parse them."""
    args = parse_fast(argv)
    if args is None:
        return None
    paths_as_bytes()
    start_command(args.trust_config)
    try:
        return check_command(args.op_dirs, args.repo_root, args.fmt, args.output, args.strict,
                              args.compile_safety, args.jobs, args.verbose, args.cache)
    finally:
        end_command()


class _CheckOutcome(NamedTuple):
    """One operator's check, as plain data (crosses process boundaries): its report, or
    the message for stderr and the exit code of its failure."""

    report: CheckReport | None
    message: str
    code: int


def _check_one(op_dir: Path, repo_root: Path | None, compile_safety: bool,
               found: check_cache.Lookup | None = None) -> _CheckOutcome:
    """One operator's check; with `found` (its missed cache entry), run while what it
    reads is recorded and, on success, kept in the user cache (check_cache.py)."""
    from optrace.cli.deferred import install as install_deferred
    from optrace.engine.diagnostics import InputError
    from optrace.pipeline.check import check_operator

    install_deferred()  # LibCST and importlib.metadata, imported at first use only

    try:
        if found is None:
            report = check_operator(op_dir, repo_root, compile_safety=compile_safety)
        else:
            with check_cache.recording() as read:
                report = check_operator(op_dir, repo_root, compile_safety=compile_safety)
            if report.cacheable:
                _keep(found, read, report)
        return _CheckOutcome(report, "", EXIT_OK)
    except InputError as exc:
        return _CheckOutcome(None, exc.diagnostic.format(), EXIT_INPUT)
    except Exception:  # one broken operator must not stop the others
        import traceback  # only on this path: its import (linecache, tokenize) is check start-up

        message = f"{shown_path(op_dir)}: {OT999} internal error while checking:\n{traceback.format_exc()}"
        return _CheckOutcome(None, message, EXIT_INTERNAL)


def _cached(op_dir: Path, repo_root: Path | None, compile_safety: bool) -> check_cache.Lookup | None:
    """The operator's cache entry; None when it has none (or the cache cannot be read:
    it is an optimisation, never a reason for check to fail)."""
    try:
        return check_cache.lookup(op_dir, repo_root, compile_safety)
    except (OSError, ValueError):
        return None


def _keep(found: check_cache.Lookup, read: check_cache.Recording, report: CheckReport) -> None:
    try:
        check_cache.store(found, read, report)
    except (OSError, ValueError):
        pass  # not kept: the next check runs again


def _cached_or_checked(op_dirs: list[Path], repo_root: Path | None, compile_safety: bool, jobs: int | None,
                       cache: bool) -> list[_CheckOutcome]:
    """Each operator's outcome, in order: from the user cache where nothing its check read
    changed — every operator looked up here first, in one process, so the inputs they
    share (the repository index's state) are taken once and every entry is answered for
    the repository as the run found it — the others checked in parallel (and kept)."""
    found: list[check_cache.Lookup | None] = [None] * len(op_dirs)
    done: dict[int, _CheckOutcome] = {}
    if cache:
        with check_cache.lookups():
            for i, op_dir in enumerate(op_dirs):
                entry = _cached(op_dir, repo_root, compile_safety)
                if entry is not None and entry.report is not None:
                    done[i] = _CheckOutcome(entry.report, "", EXIT_OK)
                else:
                    found[i] = entry
    todo = [i for i in range(len(op_dirs)) if i not in done]
    checked = run_parallel(_check_one, [(op_dirs[i], repo_root, compile_safety, found[i]) for i in todo],
                           worker_count(jobs, len(todo)), "checking") if todo else []
    done.update(zip(todo, checked, strict=True))
    return [done[i] for i in range(len(op_dirs))]


def check_command(op_dirs: list[Path], repo_root: Path | None, fmt: CheckFormat, output: Path | None,
                   strict: bool, compile_safety: bool, jobs: int | None, verbose: bool = False,
                   cache: bool = True) -> int:
    """The body of `check` (and of `pre-commit`, on the operators the files map to). As
    text, what needs fixing comes first: the operators that could not be checked and every
    error and warning go to stderr, flushed, before the report (summary and one line per
    gate; `verbose`: the passing evidence and notes too) is written. JSON and SARIF hold
    everything. `cache`: take and keep each operator's report in the user cache."""
    from optrace.engine.diagnostics import Severity
    from optrace.pipeline.check_output import check_errors_text

    sources = operator_files(op_dirs)
    if output_refused(output, sources):
        return EXIT_INPUT
    cache = cache and index_cache.enabled()  # OPTRACE_NO_CACHE=1: as --no-cache
    if not cache:
        # The repository index's store is the user cache too: `--no-cache` neither reads
        # nor writes it (nor check's entries), for this command only (workers included).
        index_cache.set_enabled(False)
    try:
        outcomes = _cached_or_checked(op_dirs, repo_root, compile_safety, jobs, cache)
    finally:
        if not cache:
            index_cache.reset_enabled()
    reports = [o.report for o in outcomes if o.report is not None]
    code = max([EXIT_OK, *(o.code for o in outcomes)])
    if any(r.worst(strict) == Severity.ERROR for r in reports):
        code = max(code, EXIT_FINDINGS)
    findings = check_errors_text(reports, strict) if fmt == CheckFormat.text else ""
    for message in [o.message for o in outcomes if o.message] + findings.splitlines():
        err(message)
    sys.stderr.flush()  # before the report: a reader (or a hook's log) sees the errors first
    rendered = _render(reports, fmt, strict, verbose)
    if output is not None and findings:
        rendered = findings + rendered  # a report file stands alone: the errors head it
    written = emit(rendered, output, sources, text=fmt == CheckFormat.text)
    if len(op_dirs) > 1:
        failing = sum(1 for r in reports if r.worst(strict) == Severity.ERROR)
        err(run_summary(len(op_dirs), [(len(reports) - failing, "passed"), (failing, "with errors"),
                                       (len(outcomes) - len(reports), "not checked")]))
    return code if written else EXIT_INPUT


def _render(reports: list[CheckReport], fmt: CheckFormat, strict: bool, verbose: bool) -> str:
    from optrace.pipeline.check_output import render_check_text, sarif_document

    if fmt == CheckFormat.text:
        return "".join(render_check_text(r, strict, verbose) for r in reports)
    if fmt == CheckFormat.json:
        return json.dumps({"version": 1, "operators": [r.to_json(strict) for r in reports]}, indent=2) + "\n"
    return json.dumps(sarif_document(reports, strict), indent=2) + "\n"
