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

import heapq
from collections import Counter
from pathlib import Path

from optrace.engine.model import Kind, Region, assign_labels
from optrace.rules.base import Example, Rule, RuleContext

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
        # Per core type: how many regions carry each label (a label may repeat).
        per_core: dict[str, Counter[str]] = {}
        per_file: Counter[Path] = Counter()
        parents: dict[int, Region] = {}
        for region, parent in ctx.root.walk_with_parent():
            for core in region.cores:
                per_core.setdefault(core, Counter())[region.label] += 1
            per_file.update(region.files())
            if parent is not None:
                parents[id(region)] = parent
        over = {core for core, c in per_core.items() if len(c) > target}
        if not over:
            return

        def key(region: Region, order: int) -> tuple[int, int, int, int, int]:
            parent = parents[id(region)]
            # A file's last point goes last: every implementation header on the path keeps
            # a phase. Repeats of code planned elsewhere go first; then the deepest detail,
            # so every phase keeps its outline; a role's main work counts as hot.
            last_in_file = any(per_file[p] == 1 for p in region.files())
            valued = region.hot or (region.role is not None and region.role != parent.role)
            return (0 if last_in_file else 1, 1 if region.shared_with else 0, region.depth,
                    0 if valued else 1, order)

        heap: list[tuple[tuple[int, int, int, int, int], int, Region]] = []
        order = {id(r): n for n, r in enumerate(ctx.root.walk())}

        def push(region: Region) -> None:
            if region.kind in _REMOVABLE and not region.children and id(region) in parents:
                k = key(region, order[id(region)])
                heapq.heappush(heap, (tuple(-x for x in k), order[id(region)], region))  # type: ignore[misc]

        for region in ctx.root.walk():
            push(region)
        removed: Counter[str] = Counter()
        while over and heap:
            neg, n, region = heapq.heappop(heap)
            if region.children or not region.cores & over:
                continue
            current = key(region, n)
            if tuple(-x for x in current) != neg:
                push(region)  # its key dropped since it was queued (a file became last)
                continue
            parent = parents[id(region)]
            parent.children.remove(region)
            per_file.subtract(region.files())
            for core in region.cores:
                counts = per_core[core]
                counts[region.label] -= 1
                if counts[region.label] == 0:
                    del counts[region.label]
                if core in over:
                    removed[core] += 1
            over = {core for core in over if len(per_core[core]) > target}
            if not parent.children:
                push(parent)
        for core, n in sorted(removed.items()):
            ctx.report(f"{core}: {n} low-value region(s) dropped to meet the {target}-label "
                       "budget (density.target)", ctx.root)
