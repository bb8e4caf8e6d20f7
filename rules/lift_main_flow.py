"""OT102 lift-main-flow: the kernel class's `Process()` called from the entry *is* the
`processing` phase; its children become level 2 instead of nesting one level deeper.

Why: every kernel's entry does `op.Init(...); op.Process();`. A `process` level under
`processing` adds depth (the budget is 7) and says nothing.
"""

from __future__ import annotations

from optrace.engine.codes import OT102
from optrace.engine.model import Kind
from optrace.rules.base import Example, Rule, RuleContext

_MAIN_METHODS = ("Process", "Run", "Compute", "Execute", "operator()")

_EXAMPLE = """
class DemoKernel {
public:
    __aicore__ inline void Process() {
        SyncAll();
        for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) {
            SyncAll();
        }
    }
};
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    DemoKernel op;
    op.Process();
}
"""


class LiftMainFlow(Rule):
    code = OT102
    name = "lift-main-flow"
    VALID = (
        Example(
            """
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    SyncAll();
}
""",
            tree=("processing @inside:2", "  barrier @around:3"),
        ),
    )
    INVALID = (
        # No `demo-kernel` level: Process's barrier and group loop sit at level 2.
        Example(_EXAMPLE, tree=("processing @inside:11", "  barrier @around:5", "  group @inside:6",
                                "    group barrier @around:7"), finding="lifted"),
    )

    def apply(self, ctx: RuleContext) -> None:
        root = ctx.root
        new_children = []
        main_classes: set[str] = set()
        # A main flow kept whole (it has no phases of its own) is kept whole at every call.
        kept_whole = {c.function for c in root.children if c.shared_with is None and not c.children}
        for child in root.children:
            fn = ctx.analysis.index.functions.get(child.function or "")
            main = (child.kind == Kind.CALL and fn is not None and fn.name in _MAIN_METHODS
                    and bool(fn.scope) and child.cores == root.cores)
            if main and fn is not None:
                main_classes.add(fn.scope)
            if main and fn is not None and (
                # A class whose code is not planned here (outside the operator) is one
                # region; a second call of the planned one has its phases already.
                child.children or (child.shared_with and child.function not in kept_whole)
            ):
                ctx.report(f"`{fn.display}` is the main flow: its phases lifted to level 2", child)
                for grandchild in child.children:
                    grandchild.also_variants += child.also_variants  # still run in those launches
                new_children.extend(child.children)
            else:
                new_children.append(child)
        root.children = new_children
        # The main class's Init is the operator's own setup: `init`, not `<class>-init`.
        for child in root.children:
            fn = ctx.analysis.index.functions.get(child.function or "")
            if child.kind == Kind.CALL and fn is not None and fn.name == "Init" and (
                fn.scope in main_classes
            ):
                child.words = ["init", *child.words[1:]]
