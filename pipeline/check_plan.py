"""Checks that need the plan of an instrumented tree: points inside tile or spin-wait loops, hot
phases left without points, density and buffer capacity (OT106 / OT107 as warnings).

Kept apart from the per-file checks in `pipeline/check.py`: these read the call graph and
loop classification, the others only the text.
"""

from __future__ import annotations

from pathlib import Path

from optrace.engine.codes import OT106, OT107, OT408, OT412, OT413
from optrace.engine.diagnostics import Diagnostic, InputError, Severity
from optrace.engine.model import Kind, LoopInfo
from optrace.engine.plan import Plan
from optrace.pipeline.plan import plan_operator


def plan_findings(op_dir: Path, repo_root: Path | None) -> list[Diagnostic]:
    try:
        plan = plan_operator(op_dir, repo_root)
    except InputError as exc:
        return [exc.diagnostic]
    return findings_from_plan(plan)


def findings_from_plan(plan: Plan) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    # Tile loops per file, found once: hundreds of points times hundreds of loops compared
    # paths a third of a second on a 17k-line operator.
    loops: dict[Path, list[LoopInfo]] = {}
    for lp in plan.loops:
        if lp.classification in ("tile", "spin"):
            loops.setdefault(lp.path, []).append(lp)
    for point in plan.analysis.existing:
        src = plan.analysis.parsed.get(point.path)
        if src is None:
            continue
        offset = src.src.line_starts[point.line - 1] if point.line <= len(src.src.line_starts) else 0
        around = [lp for lp in loops.get(point.path, ()) if lp.start < offset < lp.end]
        inside = max(around, key=lambda lp: lp.start) if around else None  # the innermost
        if inside is None:
            continue
        if inside.classification == "spin":
            out.append(Diagnostic(
                OT413, f'"{point.label}" {point.event} is inside a spin-wait loop on `{inside.var}` '
                f"(line {inside.line}): it records on every poll; bracket the whole loop instead",
                point.path, point.line))
        else:
            out.append(Diagnostic(
                OT408, f'"{point.label}" {point.event} is inside a tile loop over `{inside.var}` '
                f"(line {inside.line}): one record per tile distorts the timing and fills the slot",
                point.path, point.line))
    instrumented = bool(plan.analysis.existing)
    for region in plan.root.walk():
        if instrumented and region.hot and region.kind not in (Kind.EXISTING, Kind.ROOT) and region.anchor:
            out.append(Diagnostic(
                OT412, f'hot phase "{region.label}" ({region.hot}) has no points of its own',
                region.anchor.path, region.anchor.line))
    for d in plan.findings:
        if d.code in (OT106, OT107) and d.severity == Severity.WARNING:
            out.append(d)
    return out
