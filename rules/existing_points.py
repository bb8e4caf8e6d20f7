"""OT101 keep-existing-points: trace points already in the source are kept, and a
planned region whose label an existing point already uses is not planned twice.

Why: engineers hand-place points; renaming or duplicating them breaks their saved
traces and comparisons. Existing pairs appear in the tree as `existing` regions.
"""

from __future__ import annotations

from optrace.engine.codes import OT101
from optrace.engine.diagnostics import Severity
from optrace.engine.model import Anchor, Kind, Region
from optrace.rules.base import Example, Rule, RuleContext


class KeepExistingPoints(Rule):
    code = OT101
    name = "keep-existing-points"
    VALID = (
        Example(
            """
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    SyncAll();
}
""",
            tree=("processing", "  barrier @around:3"),
        ),
    )
    INVALID = (
        Example(
            """
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    MoeTracing(TRACE_POINT("warmup", "B"));
    SyncAll();
    MoeTracing(TRACE_POINT("warmup", "E"));
}
""",
            tree=("processing", "  barrier @around:4", "  warmup @around:3"),
            finding="existing point pair `warmup` kept",
        ),
    )

    def apply(self, ctx: RuleContext) -> None:
        existing = ctx.analysis.existing
        if not existing:
            return
        begins: dict[str, list[object]] = {}
        ends_of: dict[str, list[object]] = {}  # grouped once: a search per label was quadratic
        for p in existing:
            if p.event == "B":
                begins.setdefault(p.label, []).append(p)
            elif p.event == "E":
                ends_of.setdefault(p.label, []).append(p)
        planned: dict[str, list[Region]] = {}
        for r in ctx.root.walk():
            planned.setdefault(r.label, []).append(r)
        for label, points in sorted(begins.items()):
            first = points[0]
            ends = ends_of.get(label, [])
            assert hasattr(first, "path")
            end_line = max((p.line for p in ends), default=first.line)  # type: ignore[attr-defined]
            anchor = Anchor(first.path, 0, 0, first.line, end_line, inside=False)  # type: ignore[attr-defined]
            # A label already in the source is instrumented: every planned region with that
            # label is (one label, one phase — wherever the calls are), so none is planned twice.
            same = [r for r in planned.get(label, []) if r.kind != Kind.ROOT]
            if same:
                for region in same:
                    region.kind = Kind.EXISTING
                    region.notes.append("already in the source; kept")
                ctx.report(f"existing point pair `{label}` kept", same[0])
                continue
            if label == "processing":
                ctx.root.notes.append("root point already in the source")
                continue
            region = Region(label.split(), Kind.EXISTING, ctx.root.cores, anchor,
                            "already in the source")
            region.notes.append("kept as written")
            # Existing labels are absolute paths: hang them off the root unchanged.
            ctx.root.children.append(region)
            ctx.report(f"existing point pair `{label}` kept", region)
            if not ends:
                ctx.report(f"existing point `{label}` has a B but no E", region, Severity.WARNING)
