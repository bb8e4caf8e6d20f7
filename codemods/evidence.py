"""What a gate rests on: one fact at a place (`Evidence`).

Apart from the layers (codemods/layer.py) so that a report read back from the user's
cache (optrace/cli/check_cache.py) is rebuilt without importing the analysis.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from optrace.engine.diagnostics import display_path


@dataclass(frozen=True)
class Evidence:
    """One fact a gate rests on, at a place: ok, or what is wrong there."""

    path: Path | None
    line: int
    note: str
    ok: bool = True
    gate: str = ""  # set for layers speaking for several gates (the callers: G4 and G5)
    # ok for its gate, and still for the user to hear: a defect of the operator that
    # predates optrace and that its output neither causes nor worsens (a warning, OT456)
    warning: bool = False

    def to_json(self, root: Path | None) -> dict[str, object]:
        return {"path": display_path(self.path, root) if self.path else None, "line": self.line,
                "note": self.note, "ok": self.ok, "warning": self.warning}
