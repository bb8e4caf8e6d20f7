"""`Plan`: what planning produces — the trace tree a user reviews, with the analysis it
was planned from, the loops, roles, rule findings and capacity estimates.

Plain data: the rules fill it (through `optrace.pipeline.plan`), the codemods and output
writers read it. Planning itself (analysis -> raw tree -> rules) is `pipeline/plan.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from optrace.engine.analysis import Analysis
from optrace.engine.diagnostics import Diagnostic, Severity
from optrace.engine.model import Dropped, LoopInfo, Region
from optrace.engine.sharing import OutsideFile, outside_files

SLOT_CAPACITY = 1023  # records per core slot


@dataclass
class Estimate:
    """Records per core and launch (rule OT107): the known part and the loops whose trip
    counts were not given."""

    core: str
    records: int  # known part
    unknown_loops: tuple[str, ...]

    def text(self) -> str:
        base = f"{self.records} of {SLOT_CAPACITY}"
        if self.unknown_loops:
            return f"{base} + unknown (trip counts not given: {', '.join(self.unknown_loops)})"
        return base


@dataclass
class Plan:
    """One operator's trace plan: the analysis it came from, the trace tree, loops, roles and findings."""

    analysis: Analysis
    root: Region
    loops: list[LoopInfo]
    roles: dict[str, tuple[str, int]]
    findings: list[Diagnostic] = field(default_factory=list)
    per_core: dict[str, list[str]] = field(default_factory=dict)
    capacity: list[Estimate] = field(default_factory=list)
    # The plan lint: the tool's own figures about its tree, see pipeline/plan.py.
    lint: dict[str, object] = field(default_factory=dict)
    # Variants one launch may run (tiling-key / `if constexpr` / `#if` arms): condition and
    # distinct labels per core type of each; the label budget holds per variant.
    variants: list[dict[str, object]] = field(default_factory=list)
    # The regions the label budget dropped (OT108), each named.
    dropped: list[Dropped] = field(default_factory=list)
    # Per core type, the phase / setup labels one launch keeps when that is over the budget
    # (what is left holds handshakes, which the budget keeps).
    over_budget: dict[str, int] = field(default_factory=dict)
    _outside: list[OutsideFile] | None = None
    # The files (resolved) apply's host-layer edits touch in the mode it would use, once
    # that mode is known (the CLI's plan works it out): what "edited" marks. None: unknown.
    layer_edited: frozenset[Path] | None = None

    def outside_files(self) -> list[OutsideFile]:
        """Files read or edited outside the operator directory, with the other operators
        including them; computed when asked (it may read the repository's sources)."""
        if self._outside is None:
            anchors = {r.anchor.path for r in self.root.walk() if r.anchor is not None}
            edited = None if self.layer_edited is None else self.layer_edited | {p.resolve() for p in anchors}
            self._outside = outside_files(self.analysis, edited)
        return self._outside

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return [*self.analysis.diagnostics, *self.findings]

    def worst(self) -> Severity | None:
        order = [Severity.INFO, Severity.WARNING, Severity.ERROR]
        sev = [d.severity for d in self.diagnostics]
        return max(sev, key=order.index) if sev else None
