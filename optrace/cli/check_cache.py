"""check's results in the user's cache, so that a pre-commit run over unchanged operators
costs a read of their files rather than their analysis.

What one operator's check derived (its report: findings, gates and the facts they rest
on, computed from the parsed structure, the include and call graphs and the plan) is an
entry of the user cache (kind ``check``), taken back while nothing it was derived from
changed (result_cache.py: what an entry's name covers, what is recorded while the check
runs and compared on a lookup). Besides what every entry's name holds, a check's holds
`--no-compile`. A hit rebuilds the report (pipeline/check_report.py) from the entry
without importing the parser, the layers or networkx.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optrace.cli import result_cache
from optrace.cli.result_cache import Recording, lookups, recording
from optrace.codemods.evidence import Evidence
from optrace.engine.diagnostics import Diagnostic, Severity
from optrace.engine.discovery import repo_index
from optrace.pipeline.check_report import CheckReport
from optrace.pipeline.gate_result import SYMBOLS, TITLES, GateResult

__all__ = ["FORMAT", "KIND", "Lookup", "Recording", "entry_name", "lookup", "lookups", "recording", "store"]

KIND = "check"
FORMAT = "optrace-check-cache"
SCHEMA = 5


def entry_name(op_dir: Path, repo_root: Path | None, compile_safety: bool) -> str:
    """The entry's name: everything the check depends on that is not a file it read."""
    return result_cache.entry_name(FORMAT, SCHEMA, op_dir, repo_root,
                                   b"compile" if compile_safety else b"no-compile")


@dataclass
class Lookup:
    """An operator's entry name and inputs, and its report when the entry held and still
    holds. Plain data: a worker process that checks the operator stores the entry."""

    name: str
    op_dir: Path
    report: CheckReport | None
    root: Path  # the repository discovery searches
    extra: dict[str, str]  # the repository index's state
    since_ns: int  # when the index's walk began (RepoIndex.built_ns)


def lookup(op_dir: Path, repo_root: Path | None, compile_safety: bool) -> Lookup | None:
    """The operator's cached report if nothing it was derived from changed; None when the
    operator cannot be cached (not an operator directory: the check says why). Inside
    `lookups()`, what several operators share (the index's state, shared inputs) is
    taken once: look every operator of a run up first, then check the misses."""
    dirs = result_cache.real_dirs(op_dir, repo_root)
    if dirs is None:
        return None
    real, given_root = dirs
    # The repository's searchable files stand in the entry as the index's state, as in
    # plan's: the files discovery answered from the index without opening them (a sample
    # newly naming the op) are inputs too.
    inputs = result_cache.index_inputs(op_dir, repo_root)
    if inputs is None:
        return None  # refused by the check
    name = entry_name(real, given_root, compile_safety)
    found = result_cache.lookup(KIND, FORMAT, SCHEMA, name, real, inputs.extra)
    report = None
    if found.payload is not None:
        try:
            report = report_from_json(found.payload)
        except (KeyError, TypeError, ValueError):
            report = None
    return Lookup(name, real, report, *inputs)


def store(found: Lookup, rec: Recording, report: CheckReport) -> bool:
    """Write the entry of a check that ran while `rec` recorded; False when it was not
    (a file it read changed while it ran, or the cache cannot be written)."""
    # The journal directories: check looks up journal files there by name, and a journal
    # appearing (an apply that did not finish) must reach the report. The files the
    # index hashed are covered by its state, not listed one by one.
    journals = [d / ".optrace" for d in (report.repo_root, report.op_dir)]
    if not repo_index(found.root).state_holds(found.extra["index"]):
        return False  # a file of the state hashed anew since: the answers may be of its new bytes
    return result_cache.store(KIND, FORMAT, result_cache.Lookup(found.name, found.op_dir), rec,
                              report_to_json(report), SCHEMA, journals, found.extra,
                              repo_index(found.root).hashed(), covered_since_ns=found.since_ns)


# --- the report as data ----------------------------------------------------------------------


def _path_or_none(path: Path | None) -> str | None:
    return os.fspath(path) if path is not None else None


def report_to_json(report: CheckReport) -> dict[str, object]:
    return {
        "op_dir": os.fspath(report.op_dir), "repo_root": os.fspath(report.repo_root),
        "instrumented": report.instrumented, "profiling_enabled": report.profiling_enabled,
        "points": report.points, "labels": report.labels, "compile_checked": report.compile_checked,
        "findings": [[d.code, d.message, _path_or_none(d.path), d.line, d.severity.value]
                     for d in report.findings],
        "gates": [[g.gate, g.status, g.summary,
                   [[_path_or_none(e.path), e.line, e.note, e.ok, e.gate, e.warning] for e in g.evidence]]
                  for g in report.gates],
    }


def _typed(value: Any, kind: type) -> Any:
    # bool is an int: a count must not be one, nor a flag an int
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"expected {kind.__name__}")
    return value


def _opt_path(value: Any) -> Path | None:
    if value is None:
        return None
    if not isinstance(value, str) or not os.path.isabs(value):
        raise TypeError("expected an absolute path")
    return Path(value)


def report_from_json(data: Any) -> CheckReport:
    """The report an entry holds; TypeError / ValueError for anything else."""
    if not isinstance(data, dict):
        raise TypeError("expected an object")
    op_dir, root = _opt_path(data["op_dir"]), _opt_path(data["repo_root"])
    if op_dir is None or root is None:
        raise TypeError("expected paths")
    report = CheckReport(op_dir, root, instrumented=_typed(data["instrumented"], bool),
                         profiling_enabled=_typed(data["profiling_enabled"], str),
                         points=_typed(data["points"], int), labels=_typed(data["labels"], int),
                         compile_checked=_typed(data["compile_checked"], int))
    for item in _typed(data["findings"], list):
        code, message, path, line, severity = _typed(item, list)
        report.findings.append(Diagnostic(_typed(code, str), _typed(message, str), _opt_path(path),
                                          _typed(line, int), Severity(severity)))
    for item in _typed(data["gates"], list):
        gate, status, summary, evidence = _typed(item, list)
        if gate not in TITLES or status not in SYMBOLS:
            raise ValueError("unknown gate or status")
        report.gates.append(GateResult(gate, status, _typed(summary, str), [
            Evidence(_opt_path(p), _typed(line, int), _typed(note, str), _typed(ok, bool),
                     _typed(g, str), _typed(warning, bool))
            for p, line, note, ok, g, warning in (_typed(e, list) for e in _typed(evidence, list))]))
    return report
