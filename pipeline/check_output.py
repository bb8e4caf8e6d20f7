"""`optrace check` reports as text, and as SARIF 2.1.0 for code-scanning tools.

Text puts what needs fixing first: the errors and warnings of every operator go to stderr
(`check_errors_text`) before the report is written. The report then gives each
operator's summary line and gates G1–G5, one line each with ✓ / ✗ / n/a / not
verifiable here; a failing gate shows the evidence that fails it (`file:line`), and
`--verbose` all of it, passing evidence and notes included. In SARIF every gate is a
result whose `kind` says pass / fail / notApplicable / review (not verifiable here); a
failing gate is also an error-level finding of its own code (OT451..OT455).
"""

from __future__ import annotations

from optrace import __version__
from optrace.engine.codes import CODES
from optrace.engine.diagnostics import Severity, display_path, shown_path
from optrace.pipeline.check_report import CheckReport


def check_errors_text(reports: list[CheckReport], strict: bool) -> str:
    """What needs fixing, for stderr ahead of anything else: every operator's errors, then
    its warnings, one `path:line: CODE message [severity]` line each."""
    lines = []
    for report in reports:
        for wanted in (Severity.ERROR, Severity.WARNING):
            lines += [f"{d.format()}  [{wanted.value}]" for d in report.findings
                      if report.effective(d, strict) == wanted]
    return "".join(line + "\n" for line in lines)


def render_check_text(report: CheckReport, strict: bool, verbose: bool = False) -> str:
    """One operator for a reader: its summary, one line per gate (with the evidence that
    fails it; all of it with `verbose`), and the count of errors and warnings, which
    `check_errors_text` lists. `verbose` adds the notes (info findings)."""
    lines = []
    if not report.instrumented:
        lines.append(f"{shown_path(report.op_dir)}: not instrumented (no trace points)")
    else:
        state = {"1": "ON", "0": "off"}.get(report.profiling_enabled, report.profiling_enabled)
        lines.append(f"{shown_path(report.op_dir)}: {report.points} points, {report.labels} labels; "
                     f"profiling compiled in: {state} (ENABLE_MOE_PROFILING); compile-checked files: "
                     f"{report.compile_checked}")
    if not report.instrumented and report.gates and not verbose:
        lines.append(f"  {report.gates[0].gate}–{report.gates[-1].gate}: n/a  not instrumented")
    for gate in report.gates if report.instrumented or verbose else []:
        lines.append(f"  {gate.gate} {gate.title}: {gate.symbol}  {gate.summary}")
        for ev in gate.evidence:
            if verbose or not ev.ok:
                where = (shown_path(ev.path) + (f":{ev.line}" if ev.line else "")) if ev.path else "-"
                mark = "  <- ✗" if not ev.ok else "  <- warning" if ev.warning else ""
                lines.append(f"      {where}: {ev.note}{mark}")
    if verbose:
        lines += [f"  {d.format()}  [info]" for d in report.findings
                  if report.effective(d, strict) == Severity.INFO]
    errors = sum(1 for d in report.findings if report.effective(d, strict) == Severity.ERROR)
    warnings = sum(1 for d in report.findings if report.effective(d, strict) == Severity.WARNING)
    lines.append(f"  {errors} error(s), {warnings} warning(s)" + (" (listed first, on stderr)"
                                                                   if errors + warnings else ""))
    return "\n".join(lines) + "\n"


_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_GATE_KIND = {"pass": "pass", "fail": "fail", "n/a": "notApplicable", "not verifiable here": "review"}


def _gate_results(report: CheckReport, codes: set[str]) -> list[dict[str, object]]:
    """One SARIF result per gate (its status as `kind`), located at its first evidence."""
    out: list[dict[str, object]] = []
    for gate in report.gates:
        rule = f"{gate.code}"
        codes.add(rule)
        result: dict[str, object] = {
            "ruleId": rule,
            "kind": _GATE_KIND[gate.status],
            "level": "error" if gate.status == "fail" else "none",
            "message": {"text": f"{gate.gate} {gate.title}: {gate.symbol} {gate.summary}"},
            "properties": {"gate": gate.gate, "status": gate.status,
                           "evidence": [e.to_json(report.repo_root) for e in gate.evidence]},
        }
        located = [e for e in gate.evidence if e.path is not None]
        if located:
            result["locations"] = [{"physicalLocation": {
                "artifactLocation": {"uri": display_path(e.path, report.repo_root), "uriBaseId": "%SRCROOT%"},
                **({"region": {"startLine": e.line}} if e.line else {}),
            }} for e in located if e.path is not None][:1]
            result["relatedLocations"] = [{"id": i, "message": {"text": e.note}, "physicalLocation": {
                "artifactLocation": {"uri": display_path(e.path, report.repo_root), "uriBaseId": "%SRCROOT%"},
                **({"region": {"startLine": e.line}} if e.line else {}),
            }} for i, e in enumerate(located) if e.path is not None]
        out.append(result)
    return out


def _rule(code: str) -> dict[str, object]:
    """A SARIF rule from the code registry: its title and the page that documents it."""
    known = CODES.get(code)
    if known is None:  # a team's own rule code
        return {"id": code}
    return {"id": code, "shortDescription": {"text": known.summary},
            "defaultConfiguration": {"level": _LEVEL[known.severity]},
            # The page in the repository (the project has no published docs URL to point to).
            "properties": {"doc": f"docs/{known.doc}"}}


def sarif_document(reports: list[CheckReport], strict: bool) -> dict[str, object]:
    results = []
    codes: set[str] = set()
    for report in reports:
        for d in report.findings:
            codes.add(d.code)
            result: dict[str, object] = {
                "ruleId": d.code,
                "level": _LEVEL[report.effective(d, strict)],
                "message": {"text": d.message},
            }
            if d.path is not None:
                region = {"startLine": d.line} if d.line else {}
                result["locations"] = [{"physicalLocation": {
                    "artifactLocation": {"uri": display_path(d.path, report.repo_root),
                                         "uriBaseId": "%SRCROOT%"},
                    **({"region": region} if region else {}),
                }}]
            results.append(result)
        results.extend(_gate_results(report, codes))
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "optrace", "version": __version__,
                                "informationUri": "https://example.invalid/optrace",
                                "rules": [_rule(c) for c in sorted(codes)]}},
            "results": results,
        }],
    }
