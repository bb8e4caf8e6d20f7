"""OT104 fold-depth: no label deeper than 7 levels; deeper regions fold into their
level-7 ancestor, which then covers their time.

Why: the trace format and the analysis workflow assume at most 7 levels; deeper
call chains are implementation detail of one phase.
"""

from __future__ import annotations

from optrace.engine.codes import OT104
from optrace.engine.model import Region, assign_labels
from optrace.rules.base import Example, Rule, RuleContext

_CHAIN = "\n".join(
    f"""__aicore__ inline void Level{i}() {{ SyncAll(); Level{i + 1}(); SyncAll(); }}"""
    for i in range(1, 9)
)


class FoldDepth(Rule):
    code = OT104
    name = "fold-depth"
    VALID = (
        Example(
            """
__aicore__ inline void Level2() { SyncAll(); }
__aicore__ inline void Level1() { SyncAll(); Level2(); }
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) { Level1(); }
""",
            tree=("processing", "  level1 @inside:3", "    level1 barrier @around:3",
                  "    level1 level2 @inside:2"),
        ),
    )
    INVALID = (
        Example(
            "__aicore__ inline void Level9() { SyncAll(); }\n" + _CHAIN
            + '\nextern "C" __global__ __aicore__ void demo_op(GM_ADDR x) { Level1(); }\n',
            tree=(
                "processing",
                "  level1",
                "    level1 barrier",
                "    level1 level2",
                "      level1 level2 barrier",
                "      level1 level2 level3",
                "        level1 level2 level3 barrier",
                "        level1 level2 level3 level4",
                "          level1 level2 level3 level4 barrier",
                "          level1 level2 level3 level4 level5",
                "            level1 level2 level3 level4 level5 barrier",
                # depth 7: Level6's own barriers and Level7.. fold into it; each level's
                # second barrier is named by the phase it ends (OT105)
                "            level1 level2 level3 level4 level5 level6",
                "            level1 level2 level3 level4 level5 barrier-level6",
                "          level1 level2 level3 level4 barrier-level5",
                "        level1 level2 level3 barrier-level4",
                "      level1 level2 barrier-level3",
                "    level1 barrier-level2",
            ),
            config="[naming]\nmax_length = 64\n",
            finding="folded",
        ),
    )

    def apply(self, ctx: RuleContext) -> None:
        assign_labels(ctx.root)
        limit = ctx.analysis.config.max_depth
        for region in ctx.root.walk():
            # Children past the limit — a region at depth 7, or one whose own words (a
            # core-type suffix) carry it past 7 — fold into this region.
            deep = [c for c in region.children if c.depth > limit]
            if region.depth >= limit:
                deep = list(region.children)
            if not deep:
                continue
            folded = sum(sum(1 for _ in c.walk()) for c in deep)
            region.children = [c for c in region.children if c not in deep]
            region.notes.append(f"{folded} deeper region(s) folded in")
            ctx.report(f"{folded} region(s) below depth {limit} folded into this one", region)

    @staticmethod
    def count(root: Region) -> int:
        return sum(1 for _ in root.walk())
