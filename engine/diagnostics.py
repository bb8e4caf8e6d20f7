"""Findings with a location: errors are values until the CLI prints them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from optrace.engine.codes import Severity, default_severity

__all__ = ["Diagnostic", "InputError", "Severity", "display_path"]


@dataclass(frozen=True, init=False)
class Diagnostic:
    """`path:line: CODE message`, the one shape every finding takes.

    Without a severity the code's default from the registry (engine/codes.py) applies.
    """

    code: str
    message: str
    path: Path | None
    line: int
    severity: Severity

    def __init__(self, code: str, message: str, path: Path | None = None, line: int = 0,
                 severity: Severity | None = None) -> None:
        # frozen: the generated __setattr__ refuses, so set the fields as dataclasses does.
        object.__setattr__(self, "code", code)
        object.__setattr__(self, "message", message)
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "line", line)
        object.__setattr__(self, "severity", severity if severity is not None else default_severity(code))

    def location(self, root: Path | None = None) -> str:
        if self.path is None:
            return "<optrace>"
        shown = display_path(self.path, root)
        return f"{shown}:{self.line}" if self.line else shown

    def format(self, root: Path | None = None) -> str:
        return f"{self.location(root)}: {self.code} {self.message}"

    def to_json(self, root: Path | None = None) -> dict[str, object]:
        return {
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
            "path": display_path(self.path, root) if self.path else None,
            "line": self.line,
        }


class InputError(Exception):
    """Bad input that stops work on one operator (exit code 2), with its location."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.format())
        self.diagnostic = diagnostic


def display_path(path: Path, root: Path | None) -> str:
    """Paths relative to the repository root when inside it, POSIX-style."""
    if root is not None:
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            pass
    return path.as_posix()
