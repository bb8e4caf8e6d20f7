"""OT109 handshake-partners: every cross-core / cross-rank handshake on the path is named
after its role and its partner: `gmm2 aic group wait-swiglu`, `dispatch aiv notify-gmm1`.

The planner brackets each handshake primitive it meets (`CrossCoreWaitFlag`,
`CrossCoreSetFlag`, `SyncAll`, ...) and names it by role only (`wait`, `notify`,
`barrier`). This rule finds the partner by matching flag / event ids where they are
constants or names (`CrossCoreSetFlag<...>(FLAG_X)` <-> `CrossCoreWaitFlag(FLAG_X)`):
the partner is the phase (the level-2 word) the other side runs in; within one phase, the
other side's core type. A handshake whose id matches nothing keeps the bare role and the
rule says so. Why: two waits named `wait` and `wait-2` tell a reader nothing; named by
partner, the trace reads as the pipeline it is.
"""

from __future__ import annotations

from optrace.engine.codes import OT109
from optrace.engine.model import Kind, Region, assign_labels
from optrace.rules.base import Example, Rule, RuleContext

_PAIR = """
constexpr uint16_t FLAG_READY = 3;
__aicore__ inline void Produce(GM_ADDR x) {
    for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) {
        for (uint32_t tileIdx = 0; tileIdx < tileNum; ++tileIdx) { DataCopy(dst, src, len); }
        CrossCoreSetFlag<0x2, PIPE_MTE3>(FLAG_READY);
    }
}
__aicore__ inline void Consume(GM_ADDR x) {
    for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) {
        CrossCoreWaitFlag(FLAG_READY);
        for (uint32_t tileIdx = 0; tileIdx < tileNum; ++tileIdx) { Mmad(c, a, b, p); }
    }
}
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);
    if ASCEND_IS_AIV {
        Produce(x);
        SyncAll();
    }
    if ASCEND_IS_AIC {
        Consume(x);
    }
}
"""

_SEND_WAIT = """
__aicore__ inline void SendCountsAndWait(GM_ADDR x) {
    for (uint32_t rankIdx = 0; rankIdx < rankNum; ++rankIdx) {
        DataCopy(peer[rankIdx], counts, 8);
    }
    uint32_t ready = 0;
    while (ready < rankNum) { DataCopy(status, peer, 8); ready = status.GetValue(0); }
}
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    SendCountsAndWait(x);
}
"""

_UNMATCHED = """
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    CrossCoreWaitFlag(FLAG_NOBODY_SETS);
    SyncAll();
}
"""


_ROLE_WORDS = frozenset({"wait", "notify", "barrier", "sync", "set", "done", "flag"})


class HandshakePartners(Rule):
    code = OT109
    name = "handshake-partners"
    VALID = (
        # A function that sends, then waits: two regions (never one labelled as a wait).
        Example(_SEND_WAIT, tree=("processing", "  send-counts @around:3", "  wait-counts @around:7")),
        Example(_PAIR, tree=(
            "processing",
            "  produce aiv",
            "    produce aiv group @inside:4",
            "      produce aiv group tile-copy @around:5",
            "      produce aiv group notify-consume @around:6",
            "  barrier aiv",
            "  consume aic",
            "    consume aic group",
            "      consume aic group wait-produce @around:11",
        )),
    )
    INVALID = (
        Example(_UNMATCHED, tree=("processing", "  wait", "  barrier"), finding="no partner"),
    )

    def apply(self, ctx: RuleContext) -> None:
        assign_labels(ctx.root)
        phase_of: dict[int, Region] = {}
        for top in ctx.root.children:
            for region in top.walk():
                phase_of[id(region)] = top
        shakes = [r for r in ctx.root.walk() if r.flag is not None and r.hot in ("wait", "notify")]
        renames: list[tuple[Region, str, Region | None]] = []
        order = {id(r): n for n, r in enumerate(ctx.root.walk())}
        for region in shakes:
            role = "wait" if region.hot == "wait" else "notify"
            other = "notify" if role == "wait" else "wait"
            partners = [p for p in shakes if p.flag == region.flag and p.hot == other]
            if not partners:
                ctx.report(f"`{region.flag}` has no partner on the planned path: named by its role only",
                           region)
                continue
            # One flag reused along the sequence: the partner is the nearest use of it.
            partner = min(partners, key=lambda p: abs(order[id(p)] - order[id(region)]))
            word, phase = self._partner_word(ctx.root, region, partner, phase_of)
            if word:
                renames.append((region, f"{role}-{word}", phase))
        # Named from the words as planned, all at once: a renamed partner is not a phase. The
        # partner phase is kept with the handshake: the naming rule (OT105) makes the word
        # follow that phase's final name.
        for region, word, phase in renames:
            region.words = [word, *region.words[1:]]
            region.partner = phase

    @staticmethod
    def _partner_word(root: Region, region: Region, partner: Region,
                      phase_of: dict[int, Region]) -> tuple[str, Region | None]:
        own = phase_of.get(id(region))
        theirs = phase_of.get(id(partner))
        if theirs is partner and partner.cost == "handshake":
            # A handshake at level 2 belongs to no phase: its side of the sequence is the
            # phase it ends (a notify: the one before it on its core) or starts (a wait:
            # the one after it).
            tops = root.children
            at = tops.index(partner)
            step = -1 if partner.hot == "notify" else 1
            near = [t for t in (tops[at + step::step] if step == 1 else tops[at - 1::-1] if at else [])
                    if t.cost != "handshake" and t.cores & partner.cores]
            theirs = near[0] if near else theirs
        own_word = own.words[0] if own is not None and own.words else ""
        if theirs is not None and theirs is not own and theirs.kind != Kind.ROOT and theirs.words:
            # The partner is named by its phase's name (role words, `wait-dispatch` ->
            # `dispatch`, are not a partner's name).
            word = "-".join(p for p in theirs.words[0].split("-") if p not in _ROLE_WORDS)
            if word and word != own_word:
                return word, theirs
        if partner.cores != region.cores and len(partner.cores) == 1:
            return next(iter(partner.cores)).lower(), None
        return "", None
