"""``optrace compare BEFORE AFTER``: per-label deltas and the acceptance verdict.

The gain of a label is the relative reduction of its total time (sum of its span
durations over all cores), per rank-launch so runs with a different number of rank
files stay comparable. With an expected gain g (a magnitude, 30 for -30 %): achieved
when gain >= max(g/2, 1) %, partial when 0 < gain below that, not achieved otherwise
(domain.md §7). Runs recorded with different runtime settings (clock rate, barrier on /
off) measure different things and are refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import ProfilingInputError
from .spans import PROCESSING, SpanTable

ACHIEVED = "achieved"
PARTIAL = "partial"
NOT_ACHIEVED = "not achieved"


@dataclass(frozen=True)
class LabelDelta:
    label: str
    before_us: float  # per rank-launch
    after_us: float

    @property
    def delta_us(self) -> float:
        return self.after_us - self.before_us

    @property
    def gain(self) -> float | None:
        """Relative reduction in percent (positive = faster); None when absent before."""
        if self.before_us <= 0:
            return None
        return 100.0 * (self.before_us - self.after_us) / self.before_us


@dataclass(frozen=True)
class Comparison:
    before: str
    after: str
    label: str
    deltas: list[LabelDelta]
    gain: float
    expect: float | None
    verdict: str | None
    notes: list[str]


def verdict_for(gain: float, expect: float) -> str:
    threshold = max(abs(expect) / 2.0, 1.0)
    if gain >= threshold:
        return ACHIEVED
    if gain > 0:
        return PARTIAL
    return NOT_ACHIEVED


def check_settings(before: SpanTable, after: SpanTable) -> list[str]:
    """Refuse different clock / barrier settings; notes where they cannot be verified."""
    notes: list[str] = []
    b, a = before.settings, after.settings
    if b.clock_mhz and a.clock_mhz and b.clock_mhz != a.clock_mhz:
        raise ProfilingInputError(
            after.source,
            f"recorded at {sorted(a.clock_mhz)} MHz, {before.source} at {sorted(b.clock_mhz)} MHz: "
            "refusing to compare runs with different clock settings",
        )
    known_b = {x for x in b.barrier if x is not None}
    known_a = {x for x in a.barrier if x is not None}
    if known_b and known_a and known_b != known_a:
        def word(values: set[bool]) -> str:
            return "/".join("on" if v else "off" for v in sorted(values))

        raise ProfilingInputError(
            after.source,
            f"profiling barrier {word(known_a)}, but {word(known_b)} in {before.source}: "
            "refusing to compare runs with different runtime settings",
        )
    if None in b.barrier or None in a.barrier or not b.barrier or not a.barrier:
        notes.append("barrier setting not recorded for every rank: could not verify it matches")
    return notes


def _totals(table: SpanTable) -> dict[str, float]:
    sums = np.bincount(table.label, weights=table.dur, minlength=len(table.labels))
    return {label: float(sums[i]) / table.processes for i, label in enumerate(table.labels)}


def compare(
    before: SpanTable, after: SpanTable, label: str = PROCESSING, expect: float | None = None
) -> Comparison:
    notes = check_settings(before, after)
    totals_b, totals_a = _totals(before), _totals(after)
    if totals_b.get(label, 0.0) <= 0:
        raise ProfilingInputError(before.source, f"no '{label}' spans to compare")
    if label not in totals_a:
        raise ProfilingInputError(after.source, f"no '{label}' spans to compare")
    labels = sorted(set(totals_b) | set(totals_a))
    deltas = [LabelDelta(lab, totals_b.get(lab, 0.0), totals_a.get(lab, 0.0)) for lab in labels]
    chosen = next(d for d in deltas if d.label == label)
    gain = chosen.gain or 0.0
    if before.processes != after.processes:
        notes.append(f"{before.processes} vs {after.processes} rank-launches: totals are per rank-launch")
    return Comparison(
        before=before.source,
        after=after.source,
        label=label,
        deltas=deltas,
        gain=gain,
        expect=expect,
        verdict=verdict_for(gain, expect) if expect is not None else None,
        notes=notes + before.warnings[:5] + after.warnings[:5],
    )


def format_text(result: Comparison) -> str:
    width = max([len(d.label) for d in result.deltas] + [5])
    lines = [f"before: {result.before}", f"after:  {result.after}", ""]
    header = f"{'label':<{width}}  {'before':>12}  {'after':>12}  {'delta':>12}  {'gain':>8}"
    lines += [header, "-" * len(header)]
    for d in result.deltas:
        gain = f"{d.gain:+7.1f}%" if d.gain is not None else "     new"
        lines.append(f"{d.label:<{width}}  {d.before_us:>10.2f}µs  {d.after_us:>10.2f}µs  "
                     f"{d.delta_us:>+10.2f}µs  {gain}")
    lines += ["", f"gain on '{result.label}': {result.gain:+.2f}% (total time per rank-launch)"]
    if result.expect is not None:
        threshold = max(abs(result.expect) / 2.0, 1.0)
        lines.append(f"expected -{abs(result.expect):g}%: {result.verdict} "
                     f"(achieved needs >= {threshold:g}%)")
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


def comparison_json(result: Comparison) -> dict[str, Any]:
    return {
        "before": result.before,
        "after": result.after,
        "label": result.label,
        "gain_percent": result.gain,
        "expect_percent": result.expect,
        "verdict": result.verdict,
        "labels": [
            {"label": d.label, "before_us": d.before_us, "after_us": d.after_us,
             "delta_us": d.delta_us, "gain_percent": d.gain}
            for d in result.deltas
        ],
        "notes": result.notes,
    }
