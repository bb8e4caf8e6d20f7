"""OT105 naming: labels are lowercase `[a-z0-9-]` words, at most `naming.max_length`
characters in all (default 32), and siblings are told apart by what they are, never by a
counter.

A label is the whole `TRACE_POINT` string, `<phase> <aic|aiv> [<sub>...]`: what a reader
sees in the trace. Words come from the code's own names, shortened by the planner (fillers
such as `process` / `impl` dropped; a long name keeps its phase words). A label still over
the limit has its words cut to their first part — its own, then its ancestors' from the
deepest up, the phase's level-2 word last (on both core types) — never into a name a
sibling already has; one still over folds into its parent (reported), so the limit
always holds. Two siblings calling
one function are one phase (both arms of an `if constexpr`); siblings in different
variants (tiling-key / `#if` arms) share a label (one launch runs one arm). Two
different functions shortened to one word are told apart by a word of the full name the
other lacks (`gmm-swiglu` / `gmm-dequant`). Other siblings of one name keep it — they are the same kind of
step run one after another — and the rule says so: no `-2` suffix, which would tell the
reader nothing; distinct waits are named by their partner (OT109).
"""

from __future__ import annotations

import re

from optrace.engine.codes import OT105
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
    code = OT105
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
        # (`token-copy` -> `token`), then its ancestors' but the phase's (`prepare-expert`
        # -> `prepare`, which renames its subtree); `dispatch expert prepare token` (29)
        # and `... barrier` still do not fit and fold into `dispatch expert prepare`.
        Example(_LONG, tree=(
            "processing",
            "  dispatch",
            "    dispatch expert",
            "      dispatch expert prepare @inside:8",
            "      dispatch expert barrier",
        ), config="[naming]\nmax_length = 24\n", finding="folded into its parent"),
    )

    def apply(self, ctx: RuleContext) -> None:
        self._visit(ctx, ctx.root)
        assign_labels(ctx.root)
        limit = ctx.analysis.config.label_max
        folded: set[int] = set()
        for region, chain in _chains(ctx.root, []):
            if any(id(r) in folded for r in [*chain, region]):
                continue
            if len(_label(region, chain)) > limit and not self._fit(ctx, region, chain, limit):
                folded.add(id(region))
        assign_labels(ctx.root)

    def _visit(self, ctx: RuleContext, node: Region) -> None:
        same: dict[str, list[Region]] = {}
        functions: dict[str, str | None] = {}
        reported: set[str] = set()
        for n, child in enumerate(node.children):
            clean = [_BAD.sub("-", w.lower()).strip("-") or "phase" for w in child.words]
            child.words = clean
            key = " ".join(clean)
            # Two calls of one function are one phase (e.g. both arms of `if constexpr`);
            # variants (tiling-key / `#if` arms) never run in one launch: each arm's
            # `init` / `process` is that variant's, under one label.
            fine = key not in same or (child.function is not None and functions.get(key) == child.function) \
                or all(child.exclusive_with(o) for o in same[key])
            if not fine and self._tell_apart(node, child, same[key]):
                # Renamed (this sibling or the earlier one): index the siblings again.
                same.clear()
                for sib in node.children[:n]:
                    same.setdefault(" ".join(sib.words), []).append(sib)
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

    def _fit(self, ctx: RuleContext, region: Region, chain: list[Region], limit: int) -> bool:
        """Cut words to their first part: the region's own, then its ancestors' from the
        deepest up, then the phase's level-2 word (on every level-2 region of that phase,
        both core types) — never into a name a sibling already has. A region still over the
        limit is folded into its parent (which then covers its time): the limit holds.
        False when folded."""
        parents = [ctx.root, *chain]
        undo: list[tuple[Region, int, str]] = []
        for depth in range(len(chain), -1, -1):
            node = region if depth == len(chain) else chain[depth]
            siblings = parents[depth].children
            for i in range(len(node.words) - 1, -1, -1):
                if len(_label(region, chain)) <= limit:
                    return True
                parts = node.words[i].split("-")
                if len(parts) == 1:
                    continue
                cut = [*node.words[:i], parts[0], *node.words[i + 1:]]
                if any(s is not node and s.words == cut and s.function != node.function
                       and not (s.hot == node.hot and node.hot in ("wait", "sync", "notify"))
                       for s in siblings):
                    continue  # two different phases of one name would tell the reader nothing
                old = node.words[i]
                targets = [node]
                if depth == 0 and i == 0:  # one phase, one name on every core type
                    targets += [s for s in siblings if s is not node and s.words and s.words[0] == old]
                for target in targets:
                    undo.append((target, i, target.words[i]))
                    target.words[i] = parts[0]
        label = _label(region, chain)
        if len(label) <= limit:
            return True
        for target, i, old_word in reversed(undo):  # cuts that did not help are undone
            target.words[i] = old_word
        parent = chain[-1] if chain else ctx.root
        if region in parent.children:
            parent.children.remove(region)
            parent.notes.append(f"`{label}` folded in: longer than {limit} characters")
            ctx.report(f"label `{label}` is longer than {limit} characters (naming.max_length): "
                       "folded into its parent", parent, Severity.WARNING)
        return False


def _label(region: Region, chain: list[Region]) -> str:
    return " ".join(w for r in [*chain, region] for w in r.words)


def _chains(node: Region, chain: list[Region]) -> list[tuple[Region, list[Region]]]:
    out = [(node, chain)]
    for child in node.children:
        out += _chains(child, [*chain, node] if node.words else chain)
    return out
