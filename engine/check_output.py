"""`optrace check` reports as text, and as SARIF 2.1.0 for code-scanning tools."""

from __future__ import annotations

from optrace import __version__
from optrace.engine.check import CheckReport
from optrace.engine.diagnostics import Severity, display_path


def render_check_text(report: CheckReport, strict: bool) -> str:
    rel = display_path(report.op_dir, report.repo_root)
    lines = []
    if not report.instrumented:
        lines.append(f"{rel}: not instrumented (no trace points)")
    else:
        state = {"1": "ON", "0": "off"}.get(report.profiling_enabled, report.profiling_enabled)
        lines.append(f"{rel}: {report.points} points, {report.labels} labels; profiling compiled in: "
                     f"{state} (ENABLE_MOE_PROFILING); compile-checked files: {report.compile_checked}")
    for d in report.findings:
        sev = report.effective(d, strict)
        lines.append(f"  {d.format(report.repo_root)}  [{sev.value}]")
    errors = sum(1 for d in report.findings if report.effective(d, strict) == Severity.ERROR)
    warnings = sum(1 for d in report.findings if report.effective(d, strict) == Severity.WARNING)
    lines.append(f"  {errors} error(s), {warnings} warning(s)")
    return "\n".join(lines) + "\n"


_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


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
    return {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "optrace", "version": __version__,
                                "informationUri": "https://example.invalid/optrace",
                                "rules": [{"id": c} for c in sorted(codes)]}},
            "results": results,
        }],
    }
