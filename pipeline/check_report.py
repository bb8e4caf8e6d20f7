"""`CheckReport`: check's findings for one operator, its gates and the facts they rest on.

Plain data with no analysis behind it: `check` renders it (pipeline/check_output.py) and
keeps it in the user's cache (optrace/cli/check_cache.py), from where it is rebuilt
without importing the parser, the layers or networkx.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from optrace.engine.diagnostics import Diagnostic, Severity
from optrace.pipeline.gate_result import GateResult


@dataclass
class CheckReport:
    """check's findings for one operator, its gates and the facts they rest on."""

    op_dir: Path
    repo_root: Path
    findings: list[Diagnostic] = field(default_factory=list)
    instrumented: bool = False
    profiling_enabled: str = "n/a"
    points: int = 0
    labels: int = 0
    compile_checked: int = 0
    gates: list[GateResult] = field(default_factory=list)
    # False when the report depends on more than the files (the compile check ran out of
    # time: on a busy machine): check keeps no cache entry of it.
    cacheable: bool = True

    def add(self, code: str, message: str, path: Path | None, line: int,
            severity: Severity | None = None) -> None:
        # No severity: the code's default from the registry (engine/codes.py).
        self.findings.append(Diagnostic(code, message, path, line, severity))

    def effective(self, d: Diagnostic, strict: bool) -> Severity:
        return Severity.ERROR if strict and d.severity == Severity.WARNING else d.severity

    def to_json(self, strict: bool) -> dict[str, object]:
        return {
            "op_dir": self.op_dir.relative_to(self.repo_root).as_posix()
            if self.op_dir.is_relative_to(self.repo_root) else str(self.op_dir),
            "instrumented": self.instrumented,
            "profiling_enabled": self.profiling_enabled,
            "points": self.points,
            "labels": self.labels,
            "compile_checked_files": self.compile_checked,
            "findings": [{**d.to_json(self.repo_root), "severity": self.effective(d, strict).value}
                         for d in self.findings],
            "gates": [g.to_json(self.repo_root) for g in self.gates],
        }

    def worst(self, strict: bool) -> Severity | None:
        sev = [d.severity for d in self.findings if d.severity != Severity.INFO]
        if not sev:
            return None
        if Severity.ERROR in sev or strict:
            return Severity.ERROR
        return Severity.WARNING
