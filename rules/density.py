"""OT106 density: about 15-20 distinct labels per core type; fewer than 10 or more than
30 on the path one core type executes is a warning (bounds configurable). The upper
bound counts phase and setup labels: handshakes come on top, as in the label budget
(OT108), which keeps every one of them.

Below the minimum is said only when the kernel offered at least that many candidate
regions (the planner's tree before the rules): a small kernel with six places worth a
point is not under-instrumented, and a warning there is noise.

Why: too few points hide where time goes; too many cost records (1023 per core) and
distort what they measure.
"""

from __future__ import annotations

from optrace.engine.codes import OT106
from optrace.engine.diagnostics import Severity
from optrace.engine.model import Region
from optrace.rules.base import Example, Rule, RuleContext


def labels_per_core(root: Region) -> dict[str, list[str]]:
    out: dict[str, set[str]] = {}
    for region in root.walk():
        for core in region.cores:
            out.setdefault(core, set()).add(region.label)
    return {core: sorted(labels) for core, labels in sorted(out.items())}


_MANY = "\n".join(f"    Phase{i}();" for i in range(12))
# Phases of work (a group loop and two calls each): the budget may drop them, where it
# keeps every handshake.
_DEFS = "\n".join(f"__aicore__ inline void Phase{i}() {{ for (uint32_t groupIdx = 0; groupIdx < groupNum; "
                  f"++groupIdx) {{ Foo(groupIdx); }} Bar(); Baz(); }}" for i in range(12))


class Density(Rule):
    code = OT106
    name = "density"
    VALID = (
        Example(
            _DEFS + '\nextern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n'
            + _MANY + "\n}\n",
            tree=("processing", *(f"  phase{i} @inside:{i + 1}" for i in range(12))),
        ),
        # One candidate region: nothing more to trace, no warning.
        Example(
            """
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    SyncAll();
}
""",
            tree=("processing", "  barrier"),
        ),
    )
    INVALID = (
        # 12 candidates, a budget of 6 labels: below the minimum of 10, said.
        Example(
            _DEFS + '\nextern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n'
            + _MANY + "\n}\n",
            tree=("processing", *(f"  phase{i}" for i in range(5))),
            config="[density]\ntarget = 6\n",
            finding="below 10",
        ),
    )

    def apply(self, ctx: RuleContext) -> None:
        cfg = ctx.analysis.config
        handshakes: dict[str, set[str]] = {}
        for region in ctx.root.walk():
            if region.cost == "handshake":
                for core in region.cores:
                    handshakes.setdefault(core, set()).add(region.label)
        for core, labels in labels_per_core(ctx.root).items():
            n = len(labels)
            shakes = handshakes.get(core, set())
            work = len(set(labels) - shakes)
            if n < cfg.density_min and ctx.stats.get(f"candidates:{core}", 0) >= cfg.density_min:
                ctx.report(f"{core}: {n} distinct labels, below {cfg.density_min}", ctx.root,
                           Severity.WARNING)
            elif work > cfg.density_max:
                ctx.report(f"{core}: {work} distinct phase / setup labels (and {n - work} handshake "
                           f"labels), above {cfg.density_max}", ctx.root, Severity.WARNING)
