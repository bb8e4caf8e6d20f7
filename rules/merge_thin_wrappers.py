"""OT103 merge-thin-wrappers: a region whose only content is one other region, with no
sync or communication of its own, merges with it (one pair of points, not two).

The outer call keeps its name (it is closer to the caller's vocabulary) unless only the
inner one is a handshake or a transfer (wait, sync, notify, send, recv), which keeps its
own word; compute words of the inner class (quant, dequant, matmul) do not displace the
caller's name for the phase. Core-type bodies (`aic` / `aiv`) are never merged away.
"""

from __future__ import annotations

from optrace.engine.codes import OT103
from optrace.engine.model import Kind, Region
from optrace.rules.base import Example, Rule, RuleContext

_WRAPPED = """
__aicore__ inline void SendTokens(GM_ADDR dst) {
    for (uint32_t tokenIdx = 0; tokenIdx < tokenNum; ++tokenIdx) {
        DataCopy(dst, src, len);
        SyncAll();
    }
}
__aicore__ inline void DispatchPhase(GM_ADDR dst) {
    SendTokens(dst);
}
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    DispatchPhase(x);
}
"""


_KEEP_INNER = ("wait", "sync", "notify", "send", "recv")


class MergeThinWrappers(Rule):
    code = OT103
    name = "merge-thin-wrappers"
    VALID = (
        Example(
            """
__aicore__ inline void SendTokens(GM_ADDR dst) {
    for (uint32_t tokenIdx = 0; tokenIdx < tokenNum; ++tokenIdx) { SyncAll(); }
}
__aicore__ inline void RecvTokens(GM_ADDR dst) {
    for (uint32_t tokenIdx = 0; tokenIdx < tokenNum; ++tokenIdx) { SyncAll(); }
}
__aicore__ inline void DispatchPhase(GM_ADDR dst) {
    SendTokens(dst);
    RecvTokens(dst);
}
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    DispatchPhase(x);
}
""",
            # Two calls inside: not a thin wrapper. The token loops are tile loops,
            # bracketed around the whole loop (a barrier inside: never per token); each is
            # its function's one statement, so the call's region is the loop's (OT110).
            tree=("processing", "  dispatch @inside:8", "    dispatch send-tokens @inside:2",
                  "    dispatch recv-tokens @inside:5"),
        ),
    )
    INVALID = (
        # DispatchPhase wraps SendTokens, whose one statement is its token loop: one
        # region for the three levels (the loop's copy and barrier bracketed as a whole).
        Example(_WRAPPED, tree=("processing", "  send-tokens @inside:8"),
                finding="merged"),
    )

    def apply(self, ctx: RuleContext) -> None:
        self._visit(ctx, ctx.root)

    def _visit(self, ctx: RuleContext, node: Region) -> None:
        for child in node.children:
            self._visit(ctx, child)
        if node.kind != Kind.CALL or len(node.children) != 1:
            return
        inner = node.children[0]
        if inner.kind != Kind.CALL:
            return
        if inner.shared_with is not None:
            # A one-line wrapper around code planned under another caller: its one call is
            # the same span, one level too many; the wrapper's own region stays.
            if inner.same_span and not inner.children:
                node.children = []
                node.notes.append(f"its one call, `{' '.join(inner.words)}`, covers the same span "
                                  f"(planned under `{inner.shared_with}`): one region")
                ctx.report(f"thin wrapper `{' '.join(node.words)}` keeps its region; the call it wraps "
                           "covers the same span", node)
            return
        outer_word = node.words[0] if node.words else ""
        inner_word = inner.words[0] if inner.words else ""
        # A handshake or transfer keeps its word (`wait` must read as a wait); a compute
        # word of the inner class does not displace the caller's name for the phase.
        if inner.hot in _KEEP_INNER and not node.hot:
            node.words = [inner_word, *node.words[1:]]
            node.hot = inner.hot
            node.full_word = inner.full_word
        ctx.report(f"thin wrapper `{outer_word}` merged with `{inner_word}`", node)
        node.children = inner.children
        node.also_variants += inner.also_variants
        node.notes.append(f"merged with {inner_word} ({inner.reason})")
