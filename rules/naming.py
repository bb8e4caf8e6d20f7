"""OT105 naming: labels are lowercase `[a-z0-9-]` words, at most `naming.max_length`
characters in all (default 32), and siblings are told apart by what they are, never by a
counter.

A label is the whole `TRACE_POINT` string, `<phase> <aic|aiv> [<sub>...]`: what a reader
sees in the trace. Words come from the code's own names, shortened by the planner (fillers
such as `process` / `impl` dropped; a long name keeps its phase words). A label still over
the limit has its own words cut to their first part, deepest first; one still over is
reported. Two siblings calling one function are one phase (both arms of an
`if constexpr`); siblings in different variants (tiling-key / `#if` arms) share a label
(one launch runs one arm). Other siblings of one name keep it — they are the same kind of
step run one after another — and the rule says so: no `-2` suffix, which would tell the
reader nothing; distinct waits are named by their partner (OT109).
"""

from __future__ import annotations

import re

from optrace.engine.diagnostics import Severity
from optrace.engine.model import Region, assign_labels
from optrace.rules.base import Example, Rule, RuleContext

_BAD = re.compile(r"[^a-z0-9-]+")

_LONG = """
__aicore__ inline void DispatchTokensToAllRanksWithQuantisation(GM_ADDR x) {
    for (uint32_t expertIdx = 0; expertIdx < expertNum; ++expertIdx) {
        PrepareExpertWindowsForEveryRemoteRank(x);
        SyncAll();
    }
}
__aicore__ inline void PrepareExpertWindowsForEveryRemoteRank(GM_ADDR x) {
    for (uint32_t tokenIdx = 0; tokenIdx < tokenNum; ++tokenIdx) { DataCopy(dst, src, len); }
    SyncAll();
}
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    DispatchTokensToAllRanksWithQuantisation(x);
}
"""


class Naming(Rule):
    code = "OT105"
    name = "naming"
    VALID = (
        # Long names shortened to their phase words (`dispatch`), else their first two
        # words (`prepare-expert`); within a 64-character limit nothing is cut further.
        Example(_LONG, tree=(
            "processing",
            "  dispatch @inside:2",
            "    dispatch expert @inside:3",
            "      dispatch expert prepare-expert @inside:8",
            "        dispatch expert prepare-expert token-copy @around:9",
            "        dispatch expert prepare-expert barrier @around:10",
            "      dispatch expert barrier @around:5",
        ), config="[naming]\nmax_length = 64\n"),
    )
    INVALID = (
        Example(
            """
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    SyncAll();
    SyncAll();
}
""",
            tree=("processing", "  barrier @around:3", "  barrier @around:4"),
            finding="repeats",
        ),
        # Over 24 characters: words are cut to their first part, the region's own first
        # (`token-copy` -> `token`), then its ancestors' (`prepare-expert` -> `prepare`,
        # which renames its whole subtree); `... prepare barrier` still does not fit and
        # is reported.
        Example(_LONG, tree=(
            "processing",
            "  dispatch",
            "    dispatch expert",
            "      dispatch expert prepare",
            "        dispatch expert prepare token",
            "        dispatch expert prepare barrier",
            "      dispatch expert barrier",
        ), config="[naming]\nmax_length = 24\n", finding="longer than 24"),
    )

    def apply(self, ctx: RuleContext) -> None:
        self._visit(ctx, ctx.root)
        assign_labels(ctx.root)
        limit = ctx.analysis.config.label_max
        for region, chain in _chains(ctx.root, []):
            if len(region.label) > limit:
                self._fit(ctx, region, chain, limit)
        assign_labels(ctx.root)

    def _visit(self, ctx: RuleContext, node: Region) -> None:
        same: dict[str, list[Region]] = {}
        functions: dict[str, str | None] = {}
        reported: set[str] = set()
        for child in node.children:
            clean = [_BAD.sub("-", w.lower()).strip("-") or "phase" for w in child.words]
            child.words = clean
            key = " ".join(clean)
            # Two calls of one function are one phase (e.g. both arms of `if constexpr`);
            # variants (tiling-key / `#if` arms) never run in one launch: each arm's
            # `init` / `process` is that variant's, under one label.
            fine = key not in same or (child.function is not None and functions.get(key) == child.function) \
                or all(child.exclusive_with(o) for o in same[key])
            if not fine and self._tell_apart(node, child, same[key]):
                key = " ".join(child.words)
                fine = key not in same
            functions.setdefault(key, child.function)
            same.setdefault(key, []).append(child)
            if not fine and key not in reported:
                reported.add(key)
                ctx.report(f"sibling label `{key}` repeats: the same kind of step run again, one "
                           "label (no counter suffix)", child)
            self._visit(ctx, child)

    @staticmethod
    def _tell_apart(node: Region, child: Region, others: list[Region]) -> bool:
        """Two different functions shortened to one word (`GmmDequantSwigluQuant` and
        `GmmDequant` -> `gmm-dequant`): the one whose full name has a word the other's
        lacks takes it as its second part (`gmm-swiglu`) — on every sibling of that name,
        so both core types of one phase keep one word."""
        for mine, theirs in ((child, others[0]), (others[0], child)):
            if not mine.full_word or not theirs.full_word or mine.full_word == theirs.full_word:
                continue
            extra = [w for w in mine.full_word.split("-") if w not in theirs.full_word.split("-")]
            if not extra:
                continue
            old = mine.words[0]
            new = f"{old.split('-')[0]}-{extra[0]}"
            for sib in node.children:
                if sib.words and sib.words[0] == old and sib.full_word == mine.full_word:
                    sib.words = [new, *sib.words[1:]]
            return True
        return False

    def _fit(self, ctx: RuleContext, region: Region, chain: list[Region], limit: int) -> None:
        """Cut words to their first part, the region's own first, then its ancestors'
        from the deepest up (an ancestor's cut renames its whole subtree, consistently)."""
        top = chain[0] if chain else region
        for node in [region, *reversed(chain)]:
            for i in range(len(node.words) - 1, -1, -1):
                if len(_label(region, chain)) <= limit:
                    return
                parts = node.words[i].split("-")
                if len(parts) > 1:
                    old = node.words[i]
                    node.words[i] = parts[0]
                    if node is top and i == 0:
                        # A phase's word is cut on every level-2 region of that phase (its
                        # other core type too): one phase, one name.
                        for sib in ctx.root.children:
                            if sib.words and sib.words[0] == old:
                                sib.words[0] = parts[0]
        label = _label(region, chain)
        if len(label) > limit:
            ctx.report(f"label `{label}` is longer than {limit} characters (naming.max_length)",
                       region, Severity.WARNING)


def _label(region: Region, chain: list[Region]) -> str:
    return " ".join(w for r in [*chain, region] for w in r.words)


def _chains(node: Region, chain: list[Region]) -> list[tuple[Region, list[Region]]]:
    out = [(node, chain)]
    for child in node.children:
        out += _chains(child, [*chain, node] if node.words else chain)
    return out
