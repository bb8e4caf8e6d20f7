"""OT108 label-budget: keep each core type within the density bound (default 30 distinct
labels) by dropping the least informative regions first.

Order of removal: leaf regions only (a parent becomes a candidate once its children are
gone); never a file's last region while others remain; regions that repeat code planned
elsewhere first; then deeper before shallower; at one depth, plain regions before hot
ones and before the first region of an AIV role. Core-type bodies, the root and existing
points are never removed. Why: a deep operator offers hundreds of candidate regions, but
a trace with more than ~30 labels per core type is unreadable and eats the 1023-record
slot.
"""

from __future__ import annotations

from optrace.engine.model import Kind, Region, assign_labels
from optrace.rules.base import Example, Rule, RuleContext
from optrace.rules.density import labels_per_core

_REMOVABLE = (Kind.CALL, Kind.LOOP, Kind.WAIT, Kind.SYNC)


def _example(n: int) -> str:
    defs = "\n".join(
        f"__aicore__ inline void Step{i}() {{ for (uint32_t k = 0; k < 8; ++k) {{ Foo(k); }}"
        f" Bar(); Baz(); }}" for i in range(n))
    calls = "\n".join(f"    Step{i}();" for i in range(n))
    return defs + '\nextern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n' + calls + "\n}\n"


class LabelBudget(Rule):
    code = "OT108"
    name = "label-budget"
    VALID = (Example(_example(5), labels=("step0", "step4")),)
    INVALID = (
        Example(_example(30), labels=("step0", "step18"), absent=("step29",),
                finding="budget"),
    )

    def apply(self, ctx: RuleContext) -> None:
        target = ctx.analysis.config.density_target
        assign_labels(ctx.root)
        removed: dict[str, int] = {}
        while True:
            counts = {core: len(labels) for core, labels in labels_per_core(ctx.root).items()}
            over = {core for core, n in counts.items() if n > target}
            if not over:
                break
            victim = self._pick(ctx.root, over)
            if victim is None:
                break
            region, parent = victim
            parent.children.remove(region)
            for core in region.cores & over:
                removed[core] = removed.get(core, 0) + 1
        for core, n in sorted(removed.items()):
            ctx.report(f"{core}: {n} low-value region(s) dropped to meet the {target}-label "
                       "budget (density.target)", ctx.root)

    @staticmethod
    def _pick(root: Region, over: set[str]) -> tuple[Region, Region] | None:
        best: tuple[tuple[int, int, int, int, int], Region, Region] | None = None
        order = 0
        per_file: dict[object, int] = {}
        for region in root.walk():
            for path in region.files():
                per_file[path] = per_file.get(path, 0) + 1
        for region, parent in root.walk_with_parent():
            order += 1
            if parent is None or region.children or region.kind not in _REMOVABLE:
                continue
            if not region.cores & over:
                continue
            # Higher key = removed first.
            # Repeats of code planned elsewhere go first; then the deepest detail, so every
            # phase keeps its outline; a role's main work counts as hot (each AIV role
            # keeps its own phases).
            valued = region.hot or (region.role is not None and region.role != parent.role)
            # A file's last point goes last: every implementation header on the path keeps
            # at least one phase (the seed's "deep headers must be instrumented").
            last_in_file = any(per_file.get(path) == 1 for path in region.files())
            key = (0 if last_in_file else 1, 1 if region.shared_with else 0, region.depth,
                   0 if valued else 1, order)
            if best is None or key > best[0]:
                best = (key, region, parent)
        return (best[1], best[2]) if best else None
