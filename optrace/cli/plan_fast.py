"""``optrace plan`` without the CLI framework, and the body both spellings run.

A second `plan` of an unchanged repository is answered from the user cache (plan_cache.py)
in the time it takes to walk the repository; typer and click would add about as much
again to import and to build the command from its signature. So the console script hands
`plan` to :func:`fast_main` first: the plain spellings of plan's options are taken here,
anything else (``--help``, ``--graph``, ``-o``, a typo, a bad value) returns None and the
full CLI parses it, with its usual help and usage errors. Both run :func:`plan_command`,
so they behave the same.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from optrace.cli import plan_cache, result_cache
from optrace.cli.collect_fast import paths_as_bytes, positive_count, split_plain
from optrace.cli.common import (
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    emit,
    end_command,
    err,
    operator_files,
    output_refused,
    run_parallel,
    run_summary,
    start_command,
    worker_count,
    write_user_output,
)
from optrace.cli.deferred import install as install_deferred
from optrace.engine.codes import OT030, OT044, OT999
from optrace.engine.diagnostics import shown_path
from optrace.engine.index_cache import enabled as cache_enabled
from optrace.engine.index_cache import reading_only

if TYPE_CHECKING:
    from optrace.cli.plan_cache import PlanEntry
    from optrace.engine.plan import Plan
    from optrace.pipeline.plan_output import PlannedMode

_VALUE_OPTIONS = {"--repo-root": "repo_root", "--format": "format", "-j": "jobs", "--jobs": "jobs"}
_FLAGS = {"--trust-config": "trust_config", "--no-cache": "no_cache"}


class PlanArgs(NamedTuple):
    op_dirs: list[Path]
    repo_root: Path | None
    as_json: bool
    jobs: int | None
    trust_config: bool
    no_cache: bool


def parse_fast(argv: Sequence[str]) -> PlanArgs | None:
    """plan's arguments in their plain spellings, or None for the full CLI to parse
    (and `-o` / `--graph`, which always plan: nothing a hit saves)."""
    split = split_plain(argv, _VALUE_OPTIONS, _FLAGS)
    if split is None:
        return None
    values, positional = split
    fmt, jobs, repo_root = values.get("format", "text"), values.get("jobs"), values.get("repo_root")
    if not positional or fmt not in {f.value for f in PlanFormat}:
        return None
    if jobs is not None and positive_count(jobs) is None:
        return None  # not a positive integer: the full CLI's usage error
    return PlanArgs([Path(p) for p in positional], Path(str(repo_root)) if repo_root is not None else None,
                    fmt == PlanFormat.json, positive_count(jobs) if jobs is not None else None,
                    bool(values.get("trust_config")), bool(values.get("no_cache")))


def fast_main(argv: Sequence[str]) -> int | None:
    """Run plan from its arguments (those after ``plan``) and return its exit code, or
    None when the full CLI should parse them."""
    args = parse_fast(argv)
    if args is None:
        return None
    paths_as_bytes()
    start_command(args.trust_config)
    try:
        return plan_command(args.op_dirs, args.repo_root, args.as_json, None, None, args.jobs, args.no_cache)
    finally:
        end_command()


class PlanFormat(StrEnum):
    text = "text"
    json = "json"


@dataclass
class _PlanOutcome:
    """What planning one operator produced, as plain data (crosses process boundaries)."""

    text: str = ""
    doc: dict[str, object] | None = None
    messages: list[str] = field(default_factory=list)
    code: int = EXIT_OK
    graph: tuple[Path, bytes] | None = None  # written by the parent, after every operator is read


def _plan_one(op_dir: Path, repo_root: Path | None, as_json: bool, graph: Path | None,
              entry: PlanEntry | None = None) -> _PlanOutcome:
    """One operator's plan; with `entry` (its missed cache entry), planned while what it
    reads is recorded, and kept in the cache when it succeeded."""
    if entry is None:
        return _planned(op_dir, repo_root, as_json, graph)
    with plan_cache.recording() as rec:
        out = _planned(op_dir, repo_root, as_json, graph)
    if out.code == EXIT_OK and out.graph is None:
        try:
            plan_cache.store(entry, rec, None if as_json else out.text, out.doc, out.messages)
        except (OSError, ValueError):
            pass  # not kept: the next plan runs again
    return out


def _planned(op_dir: Path, repo_root: Path | None, as_json: bool, graph: Path | None) -> _PlanOutcome:
    from optrace.engine.diagnostics import InputError, Severity
    from optrace.engine.journal import foreign_journal, pending_journal
    from optrace.pipeline.plan import plan_operator
    from optrace.pipeline.plan_output import graph_bytes, plan_json, render_text
    out = _PlanOutcome()
    try:
        result = plan_operator(op_dir, repo_root)
    except InputError as exc:
        out.messages.append(exc.diagnostic.format())
        out.code = EXIT_INPUT
        return out
    except Exception:  # one broken operator must not stop the others
        out.messages.append(f"{shown_path(op_dir)}: {OT999} internal error while planning:\n"
                            f"{traceback.format_exc()}")
        out.code = EXIT_INTERNAL
        return out
    # stderr carries what needs attention; notes (info) stay in the plan itself.
    root = result.analysis.layers.repo_root
    pending = pending_journal(root, result.analysis.layers.op_dir)
    if pending is not None:
        out.messages.append(f"{shown_path(pending)}: {OT044} warning: {OT044.summary}; the plan may show "
                            "half-written code (the next apply / strip --write rolls it back first)")
    foreign = foreign_journal(root, result.analysis.layers.op_dir)
    if foreign is not None:
        out.messages.append(f"{shown_path(foreign.path)}: {foreign.code} warning: {foreign.message}")
    out.messages.extend(d.format() for d in result.diagnostics if d.severity != Severity.INFO)
    mode = _plan_mode(result)
    if as_json:
        out.doc = plan_json(result, mode)
    else:
        out.text = render_text(result, mode)
    if graph is not None:
        try:
            out.graph = (graph, graph_bytes(result, graph))
        except (OSError, RuntimeError) as exc:  # Graphviz missing or failing (.svg)
            out.messages.append(f"{shown_path(graph)}: {OT030} cannot write graph: {exc}")
            out.code = EXIT_INPUT
    return out


def _plan_mode(plan: Plan) -> PlannedMode:
    """The mode `apply` would use, and why: recorded in the tree, else chosen per operator
    by the probe (`probe_mode`: apply's choice, its reason and its edited files, without
    the Python layers' LibCST edits)."""
    from optrace.codemods.kernel_entry import recorded_mode
    from optrace.engine.diagnostics import InputError
    from optrace.pipeline.apply import probe_mode
    from optrace.pipeline.layers import layer_carries
    from optrace.pipeline.plan_output import PlannedMode

    recorded = recorded_mode(plan.analysis.entry_fn.src.raw)
    if recorded is not None:
        try:
            plan.layer_edited = layer_carries(plan, recorded)
        except InputError:
            pass  # the marks stay unknown; check says what is wrong with the tree
        return PlannedMode(recorded, "recorded in the instrumented tree")
    try:
        mode, why, plan.layer_edited = probe_mode(plan)
    except InputError as exc:
        d = exc.diagnostic
        # The plan names files relative to the repository root (JSON too): so does its mode.
        return PlannedMode("none", f"apply would refuse: {d.format(plan.analysis.layers.repo_root)}")
    reason = why.message.split(": ", 1)[1]
    if mode == "A":
        reason += f" ({why.location(plan.analysis.layers.repo_root)})"
    return PlannedMode(mode, reason)


_PlanJob = tuple[Path, Path | None, bool, Path | None]


def _cached_or_planned(work: list[_PlanJob], repo_root: Path | None, as_json: bool, jobs: int | None,
                       use_cache: bool) -> list[_PlanOutcome]:
    """Each operator's outcome, in order: from the user cache where nothing its plan read
    changed (looked up here, in one process: a hit costs a read of its files), planned
    in parallel otherwise (and then kept)."""
    entries: list[PlanEntry | None] = [None] * len(work)
    done: dict[int, _PlanOutcome] = {}
    if use_cache:
        shared = result_cache.shared_name_part()
        with result_cache.lookups():  # inputs the operators share are read once
            for i, (op_dir, _root, _json, _graph) in enumerate(work):
                try:
                    entry = plan_cache.lookup(op_dir, repo_root, as_json, shared)
                except (OSError, ValueError):
                    entry = None  # the cache is an optimisation, never a reason to fail
                if entry is not None and entry.hit:
                    done[i] = _PlanOutcome(entry.text or "", entry.doc, list(entry.messages))
                else:
                    entries[i] = entry
    todo = [i for i in range(len(work)) if i not in done]
    if todo:
        install_deferred()  # LibCST and importlib.metadata, imported at first use only
    planned = run_parallel(_plan_one, [(*work[i], entries[i]) for i in todo],
                           worker_count(jobs, len(todo)), "planning") if todo else []
    done.update(zip(todo, planned, strict=True))
    return [done[i] for i in range(len(work))]


def _index_once(op_dirs: list[Path], repo_root: Path | None, workers: int, no_cache: bool) -> None:
    """One repository index per run: with workers, built here first, so they find it in
    the user cache (and, forked, in memory) instead of each walking and reading the
    repository again. A directory that is no operator is left for its worker to refuse."""
    from optrace.engine.diagnostics import InputError
    from optrace.engine.discovery import default_repo_root, repo_index, resolve_operator_dir
    from optrace.engine.index_cache import set_enabled

    if no_cache:  # (not set otherwise: OPTRACE_NO_CACHE=1 turns it off as --no-cache does)
        set_enabled(False)
    if workers < 2:
        return
    roots: set[Path] = set()
    for op_dir in op_dirs:
        try:
            roots.add((repo_root or default_repo_root(resolve_operator_dir(op_dir))).resolve())
        except InputError:
            continue
    for root in sorted(roots):
        repo_index(root).warm()


def plan_command(op_dirs: list[Path], repo_root: Path | None, as_json: bool, output: Path | None,
                 graph: Path | None, jobs: int | None, no_cache: bool) -> int:
    """The body of `plan`: each operator's plan (from the user cache where it holds),
    its warnings on stderr, the plans to `output` or stdout, graphs to `graph`; the exit
    code. The config's trust is the caller's (`start_command`)."""
    from optrace.pipeline.plan_doc import plans_json

    if graph is not None:  # before any work: nothing planned, nothing written
        from optrace.pipeline.plan_output import graph_refusal

        refusal = graph_refusal(graph)
        if refusal is not None:
            err(f"{shown_path(graph)}: {OT030} {refusal}")
            return EXIT_INPUT

    work: list[_PlanJob] = []
    for op_dir in op_dirs:
        target = None
        if graph is not None:
            target = graph if len(op_dirs) == 1 else graph.with_name(
                f"{graph.stem}.{op_dir.resolve().name}{graph.suffix}")
        work.append((op_dir, repo_root, as_json, target))
    sources = operator_files(op_dirs)
    if any([output_refused(output, sources), *(output_refused(w[3], sources) for w in work)]):
        return EXIT_INPUT
    workers = worker_count(jobs, len(work))
    # plan writes no file it reads (its outputs, written below, are refused over any of
    # them): the index's store takes each file's signature once for the run, not at every
    # operator's question (index_cache.reading_only; forked workers go on with it).
    with reading_only():
        _index_once(op_dirs, repo_root, workers, no_cache)
        # With -o, every operator is planned: the output must not replace a file the plan
        # reads, which only a plan that ran has read (runtime/regular.py tracks them).
        outcomes = _cached_or_planned(work, repo_root, as_json, jobs,
                                      use_cache=not no_cache and cache_enabled() and graph is None
                                      and output is None)
    code = EXIT_OK
    for outcome in outcomes:
        for message in outcome.messages:
            err(message)
        code = max(code, outcome.code)
    # Here, not in the workers: every operator's files are read by now, and no output may
    # replace one of them (a host layer another operator found, say). All are checked
    # before any is written: a refused one leaves nothing written.
    graphs = [o.graph for o in outcomes if o.graph is not None]
    if any([output_refused(output, sources), *(output_refused(g[0], sources) for g in graphs)]):
        return EXIT_INPUT
    for target, data in graphs:
        if not write_user_output(target, data, sources):
            code = max(code, EXIT_INPUT)
    if as_json:
        rendered = plans_json([o.doc for o in outcomes if o.doc is not None])
    else:
        rendered = "\n".join(o.text for o in outcomes if o.text)
    if not emit(rendered, output, sources, text=not as_json):
        return EXIT_INPUT
    if len(op_dirs) > 1:
        failed = sum(1 for o in outcomes if o.code >= EXIT_INPUT)
        err(run_summary(len(op_dirs), [(len(op_dirs) - failed, "planned"), (failed, "failed")]))
    return code
