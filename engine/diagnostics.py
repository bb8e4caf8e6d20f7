"""Findings with a location: errors are values until the CLI prints them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from optrace.engine.codes import Severity, default_severity

__all__ = ["Diagnostic", "InputError", "Severity", "display_path", "shown_path"]


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
        """Where: relative to `root` when given (as machine output names files), else as
        a person reads it, relative to the working directory (`shown_path`)."""
        if self.path is None:
            return "<optrace>"
        shown = display_path(self.path, root) if root is not None else shown_path(self.path)
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
        # The common case by text (a plan's JSON shows ~1,000 paths an operator of a large
        # repository, and `relative_to` splits both paths into parts every time): both
        # absolute POSIX paths, which pathlib keeps normalised, `path` strictly below `root`.
        if isinstance(path, PurePosixPath) and isinstance(root, PurePosixPath):
            text, top = str(path), str(root)
            if top.startswith("/") and not top.startswith("//") and len(top) > 1 and \
                    text.startswith(top) and text[len(top):len(top) + 1] == "/":
                return text[len(top) + 1:]
        try:
            return path.relative_to(root).as_posix()
        except ValueError:
            pass
    return path.as_posix()


def shown_path(path: Path | str) -> str:
    """A path as text output shows it: relative to the working directory when inside it
    (a path the user can paste from where they ran optrace), else absolute. Machine
    output (JSON, SARIF) keeps `display_path`'s repository-relative paths instead."""
    full = Path(os.path.abspath(path))
    try:
        cwd = Path.cwd()
    except OSError:  # the working directory was removed: nothing to be relative to
        return full.as_posix()
    # The working directory as the shell spells it ($PWD, through a link) and as the
    # kernel does; operator directories are resolved, so either may be the prefix.
    for base in {cwd, Path(os.path.realpath(cwd))}:
        if full == base:
            return "."
        if full.is_relative_to(base):
            return full.relative_to(base).as_posix()
    return full.as_posix()
