"""OT110 same-span: levels that cover the same span collapse into one.

Same span: a region whose B comes right after its parent's B and whose E right before
its parent's E, with no statement of the parent's body running outside it — a call whose
callee is one core-type body per core (`gmm` > `gmm aic`), a call whose callee's only
statement is one wait. Such a level costs two records and a depth and tells the reader
nothing its child does not. A call made only of core-type bodies gives way to them (each
takes the call's words: `gmm aic`, `gmm aiv`); a call whose only statement is a handshake
becomes that handshake, under the call's name; a call whose only statement is a tile
loop is that loop's bracket (its region, with the loop's notes; never a point inside the
loop). Other same-span pairs (a thin wrapper
around one call) are OT103's; the plan lint counts what is left.
"""

from __future__ import annotations

from optrace.engine.codes import OT110
from optrace.engine.model import Kind, Region
from optrace.rules.base import Example, Rule, RuleContext

_BODIES = """
template <class Core> struct Gemm;
struct GroupGemm {
    template <class Core> __aicore__ inline void operator()(GM_ADDR x);
};
template <> __aicore__ inline void GroupGemm::operator()<AscendC::AIC>(GM_ADDR x) {
    for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) {
        CrossCoreWaitFlag(FLAG_SWIGLU);
        for (uint32_t tileIdx = 0; tileIdx < tileNum; ++tileIdx) { Mmad(c, a, b, p); }
    }
}
template <> __aicore__ inline void GroupGemm::operator()<AscendC::AIV>(GM_ADDR x) {
    for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) {
        for (uint32_t rowIdx = 0; rowIdx < rowNum; ++rowIdx) { DataCopy(d, s, n); Muls(d, d, 2, n); }
        CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_SWIGLU);
    }
}
__aicore__ inline void Gmm1(GM_ADDR x) {
    GroupGemm gemm;
    gemm(x);
}
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    Gmm1(x);
}
"""

_WAIT_ONLY = """
__aicore__ inline void WaitDispatchDone() {
    CrossCoreWaitFlag(FLAG_DISPATCH);
}
__aicore__ inline void Dispatch(GM_ADDR x) {
    for (uint32_t expertIdx = 0; expertIdx < expertNum; ++expertIdx) { SyncAll(); }
    CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_DISPATCH);
}
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    Dispatch(x);
    WaitDispatchDone();
}
"""


_TILE_ONLY = """
__aicore__ inline void DequantStep(uint32_t j) {
    CrossCoreWaitFlag(FLAG_C2V);
    Muls(d, s, scale, n); Adds(d, d, bias, n); Cast(o, d, n);
    CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_V2C);
}
__aicore__ inline void ComputeTiles(uint32_t groupIdx) {
    for (uint32_t tileIdx = 0; tileIdx < tileNum; ++tileIdx) { DequantStep(tileIdx); }
}
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) {
        ComputeTiles(groupIdx);
        SyncAll();
    }
}
"""


class SameSpan(Rule):
    code = OT110
    name = "same-span"
    VALID = (
        Example(_WAIT_ONLY.replace("    CrossCoreWaitFlag(FLAG_DISPATCH);\n",
                                   "    CrossCoreWaitFlag(FLAG_DISPATCH);\n    SyncAll();\n"),
                tree=("processing", "  dispatch", "    dispatch expert", "      dispatch expert barrier",
                      "    dispatch notify", "  wait-dispatch-done @inside:2",
                      # the wait says nothing its parent does not (OT105): named by its primitive
                      "    wait-dispatch-done cross-core @around:3",
                      "    wait-dispatch-done barrier @around:4")),
    )
    INVALID = (
        # `gmm1` (a thin wrapper merged with the `gemm(x)` call, OT103) is, on each core,
        # exactly that core's body: one level, `gmm1 aic` / `gmm1 aiv`.
        Example(_BODIES, tree=(
            "processing",
            "  gmm1 aic @inside:6",
            "    gmm1 aic group @inside:7",
            "      gmm1 aic group wait-aiv @around:8",
            "  gmm1 aiv @inside:12",
            "    gmm1 aiv group @inside:13",
            "      gmm1 aiv group row-copy @around:14",
            "      gmm1 aiv group notify-aic @around:15",
        ), finding="same span"),
        # `ComputeTiles`' one statement is its tile loop (waits inside): the call's
        # region brackets the loop, one level.
        Example(_TILE_ONLY, tree=("processing", "  group @inside:11",
                                  "    group compute-tiles @inside:7",
                                  "    group barrier @around:13"), finding="tile loop cover the same span"),
        # `WaitDispatchDone` is its one wait: one region, in its body.
        Example(_WAIT_ONLY, tree=("processing", "  dispatch", "    dispatch expert",
                                  "      dispatch expert barrier", "    dispatch notify",
                                  "  wait-dispatch @inside:2"), finding="same span"),
    )

    def apply(self, ctx: RuleContext) -> None:
        self._visit(ctx, ctx.root)

    def _visit(self, ctx: RuleContext, node: Region) -> None:
        out: list[Region] = []
        for child in node.children:
            self._visit(ctx, child)
            bodies = child.children
            if (child.kind == Kind.CALL and bodies and all(b.kind == Kind.BODY for b in bodies)
                    and child.shared_with is None):
                for body in bodies:
                    body.words = [*child.words, *body.words]
                    body.hot = body.hot or child.hot
                    body.also_variants += child.also_variants
                    body.full_word = child.full_word
                    body.notes.append(f"the call `{' '.join(child.words)}` covers the same span: its "
                                      "level is this body's")
                ctx.report(f"`{' '.join(child.words)}` and its core-type bodies cover the same span: "
                           "one level", child)
                out.extend(bodies)
                continue
            only = bodies[0] if len(bodies) == 1 else None
            if (child.kind == Kind.CALL and only is not None and only.same_span
                    and only.kind in (Kind.WAIT, Kind.SYNC) and not only.children):
                child.children = []
                child.kind, child.hot, child.cost, child.flag = only.kind, only.hot, only.cost, only.flag
                child.notes.append(f"its one statement, `{only.words[0]}`, covers the same span: one region")
                ctx.report(f"`{' '.join(child.words)}` and `{only.words[0]}` cover the same span: one level",
                           child)
            elif (child.kind == Kind.CALL and only is not None and only.same_span and only.tile_loop
                    and not only.children):
                # A function whose one statement is a tile loop: the call is the loop's
                # bracket (`OneTileCompute()` around its `for (j ...)` of dequant steps).
                child.children = []
                child.tile_loop, child.hot = True, child.hot or only.hot
                child.notes += [f"its one statement, the tile loop `{only.words[0]}`, covers the same span: "
                                "one region", *only.notes]
                ctx.report(f"`{' '.join(child.words)}` and its tile loop cover the same span: one level",
                           child)
            out.append(child)
        node.children = out
