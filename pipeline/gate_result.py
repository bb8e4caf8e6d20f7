"""A gate's result (`GateResult`) and what G3 reads of the machine (`cann_toolchain`).

Apart from the gates' evaluation (pipeline/gates.py) so that a check report read back
from the user's cache (optrace/cli/check_cache.py) is rebuilt, and its key computed,
without importing the layers or the analysis.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from optrace.codemods.evidence import Evidence
from optrace.engine.codes import OT451, OT452, OT453, OT454, OT455
from optrace.engine.diagnostics import Diagnostic

PASS = "pass"
FAIL = "fail"
NA = "n/a"
NOT_VERIFIABLE = "not verifiable here"
SYMBOLS = {PASS: "✓", FAIL: "✗", NA: "n/a", NOT_VERIFIABLE: "not verifiable here"}
TITLES = {"G1": "preprocess", "G2": "output order", "G3": "compile", "G4": "run + post-process",
          "G5": "paths"}
CODES = {"G1": OT451, "G2": OT452, "G3": OT453, "G4": OT454, "G5": OT455}


@dataclass
class GateResult:
    """One gate's status (pass / fail / n/a) with its summary and evidence."""

    gate: str
    status: str
    summary: str
    evidence: list[Evidence] = field(default_factory=list)

    @property
    def title(self) -> str:
        return TITLES[self.gate]

    @property
    def code(self) -> str:
        return CODES[self.gate]

    @property
    def symbol(self) -> str:
        return SYMBOLS[self.status]

    def finding(self) -> Diagnostic | None:
        if self.status != FAIL:
            return None
        bad = next((e for e in self.evidence if not e.ok), None)
        where = bad or (self.evidence[0] if self.evidence else Evidence(None, 0, ""))
        note = f": {bad.note}" if bad is not None else ""
        return Diagnostic(self.code, f"gate {self.gate} ({self.title}) fails{note}", where.path, where.line)

    def to_json(self, root: Path | None) -> dict[str, object]:
        return {"gate": self.gate, "title": self.title, "status": self.status, "symbol": self.symbol,
                "summary": self.summary, "evidence": [e.to_json(root) for e in self.evidence]}


def cann_toolchain() -> str | None:
    """Where a CANN toolchain is, if this machine has one."""
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        value = os.environ.get(var)
        if value and Path(value).is_dir():
            return value
    for exe in ("ccec", "bisheng"):
        found = shutil.which(exe)
        if found:
            return found
    default = Path("/usr/local/Ascend/ascend-toolkit/latest")
    return str(default) if default.is_dir() else None
