"""OT108 label-budget: keep each core type of each variant within the density bound
(default 30 distinct phase and setup labels; handshakes come on top) by dropping the
least informative regions first.

Regions have a cost class (docs/rules.md "Cost classes"): **setup** (`Init`, tiling
reads, scalar helpers, copies of a few counters outside any token / expert loop),
**handshake** (cross-core / cross-rank waits and notifies, barriers) and **phase** (the
work: communication and compute). Order of removal: leaf regions only (a parent becomes a
candidate once its children are gone); every setup region before anything else — never
a phase while setup is kept; then phases — regions that repeat code planned elsewhere
first, deeper before shallower, plain before hot ones, a file's last region last; then
the main work of each AIV role (its send / recv / compute core). A handshake is never
dropped and does not count toward the budget: a wait or notify left unbracketed hides
the imbalance a trace is for, and trading a phase for it would hide work, so a fused
MoE kernel keeps its phases and all of its waits (measured on UMDK's fused_deep_moe:
docs/trials/umdk-fused-deep-moe.md). A phase holding a handshake stays with it; when
such phases are all that is left and still too many, the budget is exceeded and OT108
says by how much. A region whose label another region keeps is not dropped (it would
gain nothing). A callee's `Init` is never kept while its `Process` (or another work
method) is dropped. Core-type bodies, the root and existing points are never removed.

Every region the budget drops is named where it was (an OT108 finding) and listed in the
plan — text ("dropped by the label budget") and JSON (`dropped`: label, file, line,
class, cores, why); the per-core summary says which rule let a count stand over the
budget (handshakes on top; phases kept because they hold handshakes; phases kept beside
setup regions that hold handshakes — such a setup region never goes, so neither does a
phase of its launch: a phase never goes while setup stays).

Variants (tiling-key / `if constexpr` / `#if` arms) never run in one launch, so the
budget holds per variant: a region counts in every variant it can run in. A run of
variant tests with no `else` is one dispatch when no two of its arms can run in one
launch: each earlier arm returns (`if (TILING_KEY_IS(1)) { ...; return; }
if (TILING_KEY_IS(2)) ...`; what follows a run whose arms all return is its last arm), or
they test one expression against different constants (`TILING_KEY_IS(n)`, `tilingKey ==
n`, `if constexpr (sizeof(T) == SIZE_32)` / `SIZE_64`). A variant's condition leaves out
the negation of a test of another constant of the same key (`KEY(2)`, not `!(KEY(1)) &&
KEY(2)`); constants are told apart by their spelling. Why: a deep
operator offers hundreds of candidate regions, but a trace with more than ~30 labels per
core type is unreadable and eats the 1023-record slot.
"""

from __future__ import annotations

import heapq
from collections import Counter
from pathlib import Path

from optrace.engine.codes import OT108
from optrace.engine.model import Dropped, Kind, Region, assign_labels
from optrace.rules.base import Example, Rule, RuleContext

_REMOVABLE = (Kind.CALL, Kind.LOOP, Kind.WAIT, Kind.SYNC)
_WORK_METHODS = ("Process", "Run", "Compute", "Execute", "operator()")


def _example(n: int) -> str:
    defs = "\n".join(
        f"__aicore__ inline void Step{i}() {{ for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) "
        f"{{ Foo(groupIdx); }} Bar(); Baz(); }}" for i in range(n))
    calls = "\n".join(f"    Step{i}();" for i in range(n))
    return defs + '\nextern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n' + calls + "\n}\n"


def _setup_example(n: int, init: str = "a = 1; b = 2; c = 3; d = 4; e = 5; f = 6; g = 7; h = 8;",
                   process: str = "for (uint32_t expertIdx = 0; expertIdx < expertNum; ++expertIdx) "
                                  "{ SyncAll(); }", helpers: str = "") -> str:
    """n phases, each with its own helper class's `Init` (setup) and `Process` (work),
    run by the kernel class's `Process`: by default an Init of scalars and an expert loop
    holding a barrier. `helpers`: more methods of each part."""
    classes = "\n".join(
        f"class Part{i} {{\npublic:\n"
        f"    __aicore__ inline void Init(GM_ADDR x) {{ {init} }}\n{helpers}"
        f"    __aicore__ inline void Process() {{ {process} }}\n}};" for i in range(n))
    calls = "\n".join(f"        part{i}_.Init(x);\n        part{i}_.Process();" for i in range(n))
    members = "\n".join(f"    Part{i} part{i}_;" for i in range(n))
    return (classes + "\nclass Kernel {\npublic:\n    __aicore__ inline void Process(GM_ADDR x) {\n"
            + calls + "\n    }\n" + members + "\n};\n"
            'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n'
            "    Kernel op;\n    op.Process(x);\n}\n")


def _pinned_setup_example(n: int) -> str:
    """n parts whose `Init` (setup) ends on a barrier (a handshake: never dropped), each
    `Process` a loop over groups (work)."""
    return _setup_example(n, init="a = 1; b = 2; c = 3; SyncAll();",
                          process="for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) "
                                  "{ Foo(groupIdx); } Bar(); Baz();")


def _nested_setup_example(n: int) -> str:
    """n parts whose `Init` runs a `PrepareScalars` that holds two helpers with a loop
    each (a region with children: a phase by what it holds, but run by setup) and a
    `UbInit`; each `Process` a loop over groups (work)."""
    helpers = """    __aicore__ inline void PrepareScalars() {
        roundDepth = sD * (depthOut - 1) + 1; roundWidth = sW * (widthOut - 1) + 1;
        tail = widthOut - roundWidth; partHw = RoundUp(partW, blockLen) * partH;
        PrepareBaseScalars();
        PrepareStrides();
    }
    __aicore__ inline void PrepareBaseScalars() {
        for (uint32_t i = 0; i < 4; ++i) { strides[i] = roundDepth * i; }
        blockLen = roundWidth * 8; alignedLen = (blockLen + 31) / 32 * 32;
    }
    __aicore__ inline void PrepareStrides() {
        for (uint32_t i = 0; i < 4; ++i) { outStrides[i] = tail * i; }
        outLen = tail * 8; outAligned = (outLen + 31) / 32 * 32;
    }
    __aicore__ inline void UbInit() {
        for (uint32_t q = 0; q < queueNum; ++q) { pipe->InitBuffer(queues[q], 2, alignedLen); }
        pipe->InitBuffer(inQueue, 2, alignedLen); pipe->InitBuffer(tmpBuf, outAligned);
    }
"""
    return _setup_example(
        n, init="xGm.SetGlobalBuffer((__gm__ float*)x); PrepareScalars(); UbInit();",
        process="for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) "
                "{ Foo(groupIdx); } Bar(); Baz();",
        helpers=helpers)


def _variant_example(n: int) -> str:
    """Two tiling-key arms of n phases each: 2n labels in all, n per launch."""
    defs = "\n".join(
        f"__aicore__ inline void Arm{a}Step{i}() {{ for (uint32_t groupIdx = 0; groupIdx < groupNum; "
        f"++groupIdx) {{ Foo(groupIdx); }} Bar(); Baz(); }}" for a in range(2) for i in range(n))
    arms = [("\n".join(f"        Arm{a}Step{i}();" for i in range(n))) for a in range(2)]
    return (defs + '\nextern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n'
            f"    if (TILING_KEY_IS(1)) {{\n{arms[0]}\n    }} else {{\n{arms[1]}\n    }}\n}}\n")


_CONTRADICTIONS = """
__aicore__ inline void Deep(GM_ADDR x) {
    for (uint32_t expertIdx = 0; expertIdx < expertNum; ++expertIdx) { SyncAll(); }
}
__aicore__ inline void Flat(GM_ADDR x) {
    for (uint32_t groupIdx = 0; groupIdx < groupNum; ++groupIdx) { SyncAll(); }
}
__aicore__ inline void Tail(GM_ADDR x) {
    for (uint32_t rankIdx = 0; rankIdx < rankNum; ++rankIdx) { SyncAll(); }
}
__aicore__ inline void Extra(GM_ADDR x) {
    for (uint32_t stageIdx = 0; stageIdx < stageNum; ++stageIdx) { SyncAll(); }
}
template <int FLAG>
__global__ __aicore__ void demo_op(GM_ADDR x) {
    if constexpr (FLAG & 1) {
        if constexpr (FLAG & 1) {
            Deep(x);
        } else {
            Flat(x);
        }
    } else {
        Tail(x);
    }
    if constexpr (FLAG & 1) {
        Extra(x);
    }
}
"""


class LabelBudget(Rule):
    code = OT108
    name = "label-budget"
    VALID = (
        Example(_example(5), tree=("processing", *(f"  step{i}" for i in range(5)))),
        # 2 x 20 labels, 21 per launch: within the budget of each variant.
        Example(_variant_example(20), labels=("arm0-step0", "arm0-step19", "arm1-step0", "arm1-step19")),
        # The budget holds per variant, and variants are shown as a launch can select them:
        # `FLAG & 1 && FLAG & 1` once (a repeated test), `FLAG & 1 && !(FLAG & 1)` (`Flat`'s
        # arm) never (no launch runs it), and `Extra`'s arm, which asserts the same test as
        # `Deep`'s, merged with it. Each region is still planned (one tree, all arms).
        Example(_CONTRADICTIONS, tree=(
            "processing",
            "  deep @inside:2", "    deep expert @inside:3", "      deep expert barrier @around:3",
            "  flat @inside:5", "    flat group @inside:6", "      flat group barrier @around:6",
            "  tail @inside:8", "    tail rank @inside:9", "      tail rank barrier @around:9",
            "  extra @inside:11", "    extra stage @inside:12", "      extra stage barrier @around:12",
        ), variants=("FLAG & 1", "!(FLAG & 1)")),
    )
    INVALID = (
        Example(_example(30), tree=("processing", *(f"  step{i}" for i in range(29))),
                finding="budget"),
        # The region the budget drops is named, with its class and why (the last step:
        # the deepest detail goes first, then by order).
        Example(_example(30), absent=("step29",), dropped=("step29",),
                finding='"step29" (phase, AIV) dropped: 31 labels in one launch, budget 30'),
        # 20 parts: 20 Inits (setup) and 20 Processes (each an expert loop with a barrier
        # inside): 61 phase / setup labels and 20 handshakes. Every Init goes before any
        # phase (and no Init outlives its Process); what is left is phases holding a
        # handshake, which stay with it: 41 labels, over the budget, and the plan says so.
        Example(_setup_example(20), tree=(
            "processing",
            *[ln for i in range(20) for ln in
              (f"  part{i}", f"    part{i} expert", f"      part{i} expert barrier")],
        ), dropped=tuple(f"part{i}-init" for i in reversed(range(20))),
            finding="they hold handshakes"),
        # 16 parts whose Init ends on a barrier: those setup regions can never go (their
        # handshake stays), so no phase goes either — a phase never goes while setup
        # stays; the budget is exceeded and the plan says why.
        Example(_pinned_setup_example(16), labels=("part0", "part15"),
                finding="a phase never goes while setup stays"),
        # 12 parts whose Init runs `PrepareScalars` (holding two helpers with loops) and
        # `UbInit`: 73 labels with `processing`. What setup runs is setup, so the whole
        # Init subtree goes before any phase: the helpers first (deepest), then `ub` and
        # `prepare` from the last part back, until 30 are left; every part's work stays.
        Example(_nested_setup_example(12), tree=(
            "processing",
            *[ln for i in range(12) for ln in
              ((f"  part{i}-init", f"    part{i}-init prepare", f"    part{i}-init ub", f"  part{i}")
               if i < 2 else (f"  part{i}-init", f"    part{i}-init prepare", f"  part{i}") if i == 2
               else (f"  part{i}-init", f"  part{i}"))],
        ), dropped=(
            *[f"part{i}-init prepare {w}" for i in reversed(range(12)) for w in ("strides", "base-scalars")],
            *[f"part{i}-init {w}" for i in reversed(range(3, 12)) for w in ("ub", "prepare")],
            "part2-init ub",
        ), finding="(setup, AIV) dropped"),
    )

    def apply(self, ctx: RuleContext) -> None:
        target = ctx.analysis.config.density_target
        assign_labels(ctx.root)
        variants = launch_variants(ctx.root)
        # Per (core type, variant): how many regions carry each label (a label may repeat).
        per_core: dict[tuple[str, int], Counter[str]] = {}
        per_file: Counter[Path] = Counter()
        parents: dict[int, Region] = {}
        member: dict[int, list[int]] = {}
        members = variant_members(ctx.root, variants)
        # Dropped regions leave their parent's list at the end (`gone`; a parent's live
        # children counted meanwhile): taking each out of a list as it went, comparing
        # regions field by field, grew with the square of a wide tree.
        live: dict[int, int] = {}
        gone: set[int] = set()
        by_label: dict[str, list[Region]] = {}
        for region, parent in ctx.root.walk_with_parent():
            member[id(region)] = members[id(region)]
            live[id(region)] = len(region.children)
            by_label.setdefault(region.label, []).append(region)
            for core in region.cores:
                for v in member[id(region)]:
                    counted = per_core.setdefault((core, v), Counter())
                    if region.cost != "handshake":  # handshakes come on top
                        counted[region.label] += 1
            per_file.update(region.files())
            if parent is not None:
                parents[id(region)] = parent
        over = {key for key, c in per_core.items() if len(c) > target}
        if not over:
            return
        ctx.stats["budget_over"] = 1
        # Setup regions that can never go: they hold a handshake (never dropped), so they
        # never become leaves. Their launch keeps its phases too: a phase never goes while
        # setup stays; the budget is exceeded instead, and the plan says why.
        pinned: set[tuple[str, int]] = set()

        def holds_handshake(region: Region) -> bool:
            return any(r.cost == "handshake" for r in region.walk() if r is not region)

        for region in ctx.root.walk():
            if region.cost == "setup" and region is not ctx.root and holds_handshake(region):
                pinned.update((core, v) for core in region.cores for v in member[id(region)])
        kept_for_setup = 0

        def key(region: Region, order: int) -> tuple[int, ...]:
            parent = parents[id(region)]
            # Setup goes first, whatever else holds; then a file's last point goes last
            # (every implementation header on the path keeps a phase); repeats of code
            # planned elsewhere first; the deepest detail first, so every phase keeps its
            # outline; a role's main work is hot. An AIV role's main work (the send / recv
            # / compute cores) goes last. (Handshakes are never candidates.)
            role_main = region.role is not None and region.role != parent.role and region.cost == "phase"
            klass = 4 if region.cost == "setup" else 1 if role_main else 2
            last_in_file = any(per_file[p] == 1 for p in region.files())
            valued = region.hot or (region.role is not None and region.role != parent.role)
            return (klass, 0 if last_in_file else 1, 1 if region.shared_with else 0, region.depth,
                    0 if valued else 1, order)

        heap: list[tuple[tuple[int, ...], int, Region]] = []
        order = {id(r): n for n, r in enumerate(ctx.root.walk())}

        def push(region: Region) -> None:
            if region.cost == "handshake":
                return  # kept, and not counted (the docstring says why)
            if region.kind in _REMOVABLE and not live[id(region)] and id(region) in parents:
                k = key(region, order[id(region)])
                heapq.heappush(heap, (tuple(-x for x in k), order[id(region)], region))

        def over_for(region: Region) -> bool:
            return any((core, v) in over for core in region.cores for v in member[id(region)])

        def remove(region: Region, why: str) -> None:
            # Every region the budget drops is named where it was, with its class and why.
            ctx.report(f'"{region.label}" ({region.cost}, {"/".join(sorted(region.cores))}) dropped: {why}',
                       region)
            anchor = region.anchor
            ctx.dropped.append(Dropped(region.label, anchor.path if anchor else None,
                                       anchor.line if anchor else 0, region.cost,
                                       tuple(sorted(region.cores)), why))
            parent = parents[id(region)]
            gone.add(id(region))
            live[id(parent)] -= 1
            per_file.subtract(region.files())
            for core in region.cores:
                for v in member[id(region)]:
                    counts = per_core[(core, v)]
                    counts[region.label] -= 1
                    if counts[region.label] == 0:
                        del counts[region.label]
            removed[region.cost] += 1
            if not live[id(parent)]:
                push(parent)

        def prune() -> None:
            for region in {id(parents[g]): parents[g] for g in gone}.values():
                region.children[:] = [c for c in region.children if id(c) not in gone]

        for region in ctx.root.walk():
            push(region)
        removed: Counter[str] = Counter()
        dropped_work: set[str] = set()
        phase_variants: list[set[int]] = []  # the over-budget variants each dropped phase left
        while over and heap:
            neg, n, region = heapq.heappop(heap)
            if live[id(region)] or id(region) in gone or id(region) not in parents or not over_for(region):
                continue
            current = key(region, n)
            if tuple(-x for x in current) != neg:
                push(region)  # its key dropped since it was queued (a file became last)
                continue
            if region.cost == "phase" and any((core, v) in pinned for core in region.cores
                                              for v in member[id(region)] if (core, v) in over):
                kept_for_setup += 1
                continue
            group = [region]
            if region.cost != "setup" and all(per_core[(core, v)][region.label] > 1 for core in region.cores
                                              for v in member[id(region)] if (core, v) in over):
                # Its label stays with other regions: dropping it alone gains nothing, so
                # the label goes with all its regions (when they are all leaves) or stays.
                group = [r for r in by_label[region.label] if id(r) in parents and id(r) not in gone]
                if any(live[id(r)] or r.kind not in _REMOVABLE or r.cost != region.cost for r in group):
                    continue
            counts = sorted({len(per_core[(core, v)]) for core in region.cores for v in member[id(region)]
                             if (core, v) in over})
            why = f"{counts[-1]} labels in one launch, budget {target} (density.target)"
            for dropped in group:
                if dropped.cost == "phase":
                    phase_variants.append({v for core in dropped.cores for v in member[id(dropped)]
                                           if (core, v) in over})
                remove(dropped, why)
            fn = ctx.analysis.index.functions.get(region.function or "")
            if fn is not None and fn.scope and fn.name in _WORK_METHODS:
                dropped_work.add(fn.scope)
            touched = {(core, v) for r in group for core in r.cores for v in member[id(r)]}
            over -= {k for k in touched & over if len(per_core[k]) <= target}
        prune()
        # A class whose work is gone keeps no Init: its setup would time nothing a reader sees.
        for region in list(ctx.root.walk()):
            fn = ctx.analysis.index.functions.get(region.function or "")
            if (fn is not None and fn.name == "Init" and fn.scope in dropped_work
                    and not live[id(region)] and id(region) in parents):
                remove(region, f"the work of `{fn.scope}` was dropped, so its Init would time nothing "
                               "a reader sees")
        prune()
        ctx.stats["phases_dropped"] = removed["phase"]
        # The invariant, measured: a phase dropped from a variant whose setup is still there
        # (0: setup goes first, and a setup region that cannot go keeps its launch's phases).
        kept_setup = {v for r in ctx.root.walk() if r.cost == "setup" for v in member.get(id(r), [])}
        ctx.stats["phases_dropped_while_setup_kept"] = sum(1 for vs in phase_variants if vs & kept_setup)
        ctx.stats["setup_dropped"] = removed["setup"]
        ctx.stats["handshakes_dropped"] = removed["handshake"]
        for cost in ("setup", "handshake", "phase"):
            if removed[cost]:
                ctx.report(f"{removed[cost]} {cost} region(s) dropped to meet the {target}-label budget "
                           "(density.target; setup first)", ctx.root)
        # Sorted: a set of strings iterates in the hash seed's order, and these keys reach the
        # plan's JSON (`over_budget`) in this order — the same plan must print the same bytes.
        for core in sorted({core for core, _ in per_core}):
            # What one launch of each core type counts against the budget after the drops.
            ctx.stats[f"budget_kept:{core}"] = max(len(c) for (k, _), c in per_core.items() if k == core)
        if over:
            worst = max(len(per_core[k]) for k in over)
            cores = sorted({core for core, _ in over})
            why = "they hold handshakes"
            if kept_for_setup:
                why += (f"; {kept_for_setup} phase(s) kept beside setup regions that hold handshakes "
                        "(a phase never goes while setup stays)")
            ctx.report(f"{worst} phase / setup labels for {'/'.join(cores)}, over the {target}-label budget "
                       f"(density.target): what is left of them is kept because {why}", ctx.root)


def launch_variants(root: Region) -> list[tuple[tuple[str, int], ...]]:
    """The variants one launch may run: each maximal combination of variant arms the
    regions sit in (a region outside every dispatch runs in all). One, `()`, when the
    kernel has no variant dispatch."""
    tuples = {t: frozenset(t) for r in root.walk() for t in (r.variant, *r.also_variants) if t}
    # A combination is maximal unless another holds all its arms: the candidates are the
    # combinations holding its rarest arm (comparing every pair grew with the square of
    # the combinations, and a header pasted N times over has N^2 of them).
    holding: dict[tuple[str, int], list[frozenset[tuple[str, int]]]] = {}
    for arms in tuples.values():
        for arm in arms:
            holding.setdefault(arm, []).append(arms)
    maximal = []
    for t, arms in tuples.items():
        rarest = min(arms, key=lambda arm: len(holding[arm]))
        if not any(arms < other for other in holding[rarest]):
            maximal.append(t)
    return sorted(maximal) or [()]


def variant_members(root: Region, variants: list[tuple[tuple[str, int], ...]]) -> dict[int, list[int]]:
    """id(region) -> the indexes of the variants it runs in: those its own arms allow, and
    those of other call sites reaching an ancestor's code (one function reached from two
    variants is planned once and counts in both).

    A combination of arms allows a variant unless the variant picks another arm of one of
    its dispatches; the variants each combination allows are a bit set, computed once per
    combination."""
    choosing: dict[tuple[str, int], int] = {}  # (dispatch, arm) -> the variants choosing it
    deciding: dict[str, int] = {}  # dispatch -> the variants choosing any of its arms
    for v, arms in enumerate(variants):
        for dispatch, arm in dict(arms).items():
            choosing[(dispatch, arm)] = choosing.get((dispatch, arm), 0) | 1 << v
            deciding[dispatch] = deciding.get(dispatch, 0) | 1 << v
    every = (1 << len(variants)) - 1
    allowed: dict[tuple[tuple[str, int], ...], int] = {}

    def allows(combination: tuple[tuple[str, int], ...]) -> int:
        mask = allowed.get(combination)
        if mask is None:
            mask = every
            for dispatch, arm in combination:
                mask &= choosing.get((dispatch, arm), 0) | (every & ~deciding.get(dispatch, 0))
            allowed[combination] = mask
        return mask

    out: dict[int, list[int]] = {}
    todo: list[tuple[Region, int]] = [(root, 0)]
    while todo:
        node, inherited = todo.pop()
        extra = inherited
        for combination in node.also_variants:
            extra |= allows(combination)
        mask = allows(node.variant) | extra
        members = []
        while mask:
            low = mask & -mask
            members.append(low.bit_length() - 1)
            mask ^= low
        out[id(node)] = members
        todo.extend((child, extra) for child in node.children)
    return out
