"""OT107 capacity: estimated records per core per launch against the 1023-record slot.

Each region costs two records (B and E) times the trip counts of the phase loops around
it. Trip counts come from `[tool.optrace] trip_counts` (by loop variable or label);
unknown counts are shown as unknown, never guessed. Over capacity is a warning: the
overflow guard drops the excess and the decoder reports it.
"""

from __future__ import annotations

from optrace.engine.diagnostics import Severity
from optrace.engine.model import Region
from optrace.engine.plan import SLOT_CAPACITY, Estimate
from optrace.rules.base import Example, Rule, RuleContext

FINGERPRINT_RECORDS = 1


def estimate(root: Region, trip_counts: dict[str, int]) -> list[Estimate]:
    out: list[Estimate] = []
    for core in sorted({c for r in root.walk() for c in r.cores}):
        known = FINGERPRINT_RECORDS
        unknown: set[str] = set()
        for region in root.walk():
            if core not in region.cores:
                continue
            factor = 1
            loops = list(region.loop_vars)
            if region.index_var:  # a loop region's own points run once per iteration
                loops.append(region.index_var)
            missing = [v for v in loops if v not in trip_counts and region.label not in trip_counts]
            if missing:
                unknown.update(missing)
                continue
            for v in loops:
                factor *= trip_counts.get(v, 1)
            if region.label in trip_counts and not loops:
                factor = trip_counts[region.label]
            known += 2 * factor
        out.append(Estimate(core, known, tuple(sorted(unknown))))
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
    code = "OT107"
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
