"""OT105 naming: labels are lowercase `[a-z0-9-]` words, unique among siblings.

Why: the preprocessor and the collector key on labels; an illegal character or two
siblings with one label make a trace ambiguous. Duplicates get `-2`, `-3`.
"""

from __future__ import annotations

import re

from optrace.engine.model import Region, assign_labels
from optrace.rules.base import Example, Rule, RuleContext

_BAD = re.compile(r"[^a-z0-9-]+")


class Naming(Rule):
    code = "OT105"
    name = "naming"
    VALID = (
        Example(
            """
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    SyncAll();
    CrossCoreWaitFlag(tokenReady);
}
""",
            labels=("sync-all", "wait-token-ready"),
        ),
    )
    INVALID = (
        Example(
            """
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {
    SyncAll();
    SyncAll();
}
""",
            labels=("sync-all", "sync-all-2"),
            finding="renamed",
        ),
    )

    def apply(self, ctx: RuleContext) -> None:
        self._visit(ctx, ctx.root)
        assign_labels(ctx.root)

    def _visit(self, ctx: RuleContext, node: Region) -> None:
        seen: dict[str, int] = {}
        same: dict[str, list[Region]] = {}
        functions: dict[str, str | None] = {}
        for child in node.children:
            clean = [_BAD.sub("-", w.lower()).strip("-") or "phase" for w in child.words]
            child.words = clean
            key = " ".join(clean)
            # Two calls of one function are one phase (e.g. both arms of `if constexpr`).
            if key in seen and child.function is not None and functions.get(key) == child.function:
                self._visit(ctx, child)
                continue
            functions.setdefault(key, child.function)
            # Variants (tiling-key arms, `#if` arms) never run in one launch: each arm's
            # `init` / `process` is that variant's init / process, under one label.
            if key in seen and all(child.exclusive_with(o) for o in same[key]):
                same[key].append(child)
                self._visit(ctx, child)
                continue
            same.setdefault(key, []).append(child)
            if key in seen:
                seen[key] += 1
                # Number the region's own word, not a trailing core-type word.
                child.words = [f"{clean[0]}-{seen[key]}", *clean[1:]]
                ctx.report(f"duplicate sibling label `{key}` renamed `{' '.join(child.words)}`",
                           child)
            else:
                seen[key] = 1
            self._visit(ctx, child)
