"""OT107 capacity: estimated records per core per launch against the 1023-record slot.

Each region costs two records (B and E) times the trip counts of the phase loops around
it. Trip counts come from `[tool.optrace] trip_counts` (by loop variable or label);
unknown counts are shown as unknown, never guessed. Over capacity is a warning: the
overflow guard drops the excess and the decoder reports it.

One launch runs one variant (one arm of each tiling-key / `if constexpr` / `#if`
dispatch, `Region.variant`), so the need is the largest variant's, not the sum of all
arms: per dispatch, the arm that needs most.
"""

from __future__ import annotations

from optrace.engine.codes import OT107
from optrace.engine.diagnostics import Severity
from optrace.engine.model import Region
from optrace.engine.plan import SLOT_CAPACITY, Estimate
from optrace.rules.base import Example, Rule, RuleContext

FINGERPRINT_RECORDS = 1


def _cost(region: Region, trip_counts: dict[str, int]) -> tuple[int, set[str]]:
    """Records one region writes per launch (its B and E times the loops around it), or
    the loops whose trip counts are missing."""
    loops = list(region.loop_vars)
    if region.index_var:  # a loop region's own points run once per iteration
        loops.append(region.index_var)
    missing = {v for v in loops if v not in trip_counts and region.label not in trip_counts}
    if missing:
        return 0, missing
    factor = 1
    for v in loops:
        factor *= trip_counts.get(v, 1)
    if region.label in trip_counts and not loops:
        factor = trip_counts[region.label]
    return 2 * factor, set()


def _largest_variant(regions: list[Region], depth: int, trip_counts: dict[str, int]) -> tuple[int, set[str]]:
    """Records of the regions common to the variant at `depth` (their variant path has
    `depth` arms), plus, per dispatch nested right below it, its most demanding arm.
    Unknown loops are gathered from every arm: any of them may be the launch's."""
    records, unknown = 0, set()
    arms: dict[str, dict[int, list[Region]]] = {}
    for region in regions:
        if len(region.variant) == depth:
            cost, missing = _cost(region, trip_counts)
            records += cost
            unknown |= missing
        else:
            dispatch, arm = region.variant[depth]
            arms.setdefault(dispatch, {}).setdefault(arm, []).append(region)
    for by_arm in arms.values():
        best = 0
        for members in by_arm.values():
            cost, missing = _largest_variant(members, depth + 1, trip_counts)
            best = max(best, cost)
            unknown |= missing
        records += best
    return records, unknown


def estimate(root: Region, trip_counts: dict[str, int]) -> list[Estimate]:
    """Per core type, the records of the launch's most demanding variant."""
    out: list[Estimate] = []
    for core in sorted({c for r in root.walk() for c in r.cores}):
        regions = [r for r in root.walk() if core in r.cores]
        records, unknown = _largest_variant(regions, 0, trip_counts)
        out.append(Estimate(core, FINGERPRINT_RECORDS + records, tuple(sorted(unknown))))
    return out


_LOOP = """
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) {
        SyncAll();
    }
}
"""


_TOKENS = """
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) {
        for (uint32_t tokenIdx = 0; tokenIdx < tokenCnt; ++tokenIdx) { DataCopy(d, s, n); SyncAll(); }
    }
}
"""


class Capacity(Rule):
    code = OT107
    name = "capacity"
    VALID = (Example(_LOOP, tree=("processing", "  group @inside:3", "    group barrier @around:4"),
                     config="[trip_counts]\ngroupIdx = 16\n"),
             # A per-token loop is a tile loop (its trip count is the tokens): its barrier
             # is bracketed once around the whole loop, so 4096 tokens cost 2 records.
             Example(_TOKENS, tree=("processing", "  group @inside:3", "    group token-copy @around:4"),
                     config="[trip_counts]\ngroupIdx = 16\ntokenIdx = 4096\n"),)
    INVALID = (
        Example(_LOOP, tree=("processing", "  group @inside:3", "    group barrier @around:4"),
                config="[trip_counts]\ngroupIdx = 4000\n", finding="exceeds the 1023-record slot"),
    )

    def apply(self, ctx: RuleContext) -> None:
        for est in estimate(ctx.root, ctx.analysis.config.trip_counts):
            if est.records > SLOT_CAPACITY:
                ctx.report(
                    f"{est.core}: about {est.records} records per launch exceeds the "
                    f"{SLOT_CAPACITY}-record slot; the overflow guard will drop the excess",
                    ctx.root, Severity.WARNING)
