"""`plan_operator`: analysis -> raw tree -> rules -> the plan a user reviews."""

from __future__ import annotations

import bisect
import re
from itertools import accumulate, islice
from pathlib import Path

import networkx as nx

from optrace.codemods.kernel_points import unplaceable
from optrace.codemods.registry import LAYERS
from optrace.engine.analysis import (
    BLOCKING_PRIMITIVES,
    SET_PRIMITIVES,
    Analysis,
    analyse_operator,
    unfollowed_calls,
)
from optrace.engine.codes import OT023, OT025
from optrace.engine.diagnostics import Diagnostic, Severity, display_path
from optrace.engine.model import Kind, Region, assign_labels
from optrace.engine.plan import Plan
from optrace.engine.planner import Planner
from optrace.rules.base import RuleContext
from optrace.rules.capacity import estimate
from optrace.rules.density import labels_per_core
from optrace.rules.label_budget import launch_variants, variant_members
from optrace.rules.naming import name_lint
from optrace.rules.registry import load_rules


def plan_operator(op_dir: Path, repo_root: Path | None = None) -> Plan:
    analysis = analyse_operator(op_dir, repo_root, LAYERS)
    return plan_from_analysis(analysis)


class AnalysedOnce:
    """One operator's analysis and plan, each computed at most once, for several readers
    of the same tree: apply proves its result by running strip and check on the tree as it
    would be, and both start from an analysis of those same bytes and a plan of it (an
    operator was analysed three times and planned twice per apply). A failure is kept and
    raised again to each reader, so each handles it as it does on its own. The plan leaves
    out its lint figures: neither strip nor check reads them."""

    def __init__(self, op_dir: Path, repo_root: Path | None) -> None:
        self._op_dir = op_dir
        self._repo_root = repo_root
        self._analysis: Analysis | Exception | None = None
        self._plan: Plan | Exception | None = None

    def analysis(self) -> Analysis:
        if self._analysis is None:
            try:
                self._analysis = analyse_operator(self._op_dir, self._repo_root, LAYERS)
            except Exception as exc:  # kept for the next reader, whatever it is
                self._analysis = exc
        if isinstance(self._analysis, Exception):
            raise self._analysis
        return self._analysis

    def plan(self) -> Plan:
        if self._plan is None:
            analysis = self.analysis()  # its failure is the analysis's, not the plan's
            try:
                self._plan = plan_from_analysis(analysis, lint=False)
            except Exception as exc:
                self._plan = exc
        if isinstance(self._plan, Exception):
            raise self._plan
        return self._plan


def plan_from_analysis(analysis: Analysis, lint: bool = True) -> Plan:
    """The plan of an analysed operator; `lint` false leaves its lint figures out (check
    reads the plan's findings, not its figures about itself)."""
    planner = Planner(analysis)
    root = planner.build()
    assign_labels(root)
    ctx = RuleContext(analysis, root, planner.loops)
    cfg = analysis.config
    ctx.findings.extend(cfg.diagnostics)  # e.g. rule modules an untrusted config named (OT005)
    for core, labels in labels_per_core(root).items():
        ctx.stats[f"candidates:{core}"] = len(labels)  # before the rules merge and drop
    for rule in load_rules(cfg.rule_modules, cfg.disabled_rules):
        ctx.current = rule.code
        rule.apply(ctx)
        assign_labels(root)
    _resolve_shared(root)
    ctx.findings.extend(fold_unplaceable(analysis, root))
    ctx.findings.extend(stop_reasons(analysis, root))
    plan = Plan(analysis, root, planner.loops, planner.roles, ctx.findings)
    plan.per_core = labels_per_core(root)
    plan.capacity = estimate(root, cfg.trip_counts)
    plan.variants = variants_of(root, planner.conditions)
    plan.dropped = ctx.dropped
    target = cfg.density_target
    plan.over_budget = {key.split(":", 1)[1]: n for key, n in ctx.stats.items()
                        if key.startswith("budget_kept:") and n > target}
    if lint:
        path = [analysis.entry_fn.id, *(fid for fid, _ in planner.expanded)]
        plan.lint = plan_lint(plan, ctx.stats, path)
        plan.lint["deepest_nesting"] = planner.deepest
    return plan


def fold_unplaceable(analysis: Analysis, root: Region) -> list[Diagnostic]:
    """Regions whose code does not parse (a macro taking a type, say: its points could
    land mid-expression) are taken out of the tree: their time is counted in the nearest
    parent that can be placed, and their children, which may parse, move up to it keeping
    their labels. One warning each, naming both places. The root (the entry) is placed by
    the entry scaffold, never here."""
    out: list[Diagnostic] = []
    root_dir = analysis.layers.repo_root

    def where(region: Region) -> str:
        a = region.anchor
        return f"{display_path(a.path, root_dir)}:{a.line}" if a is not None else "the kernel entry"

    def visit(node: Region) -> None:
        kept: list[Region] = []
        queue = list(node.children)
        while queue:
            child = queue.pop(0)
            if unplaceable(analysis.parsed, child):
                out.append(Diagnostic(
                    OT025, f'the points of "{child.label}" cannot be placed at {where(child)}: the code '
                    f'there does not parse; its time is counted in "{node.label}" ({where(node)})',
                    child.anchor.path if child.anchor else None, child.anchor.line if child.anchor else 0,
                    Severity.WARNING))
                for grand in child.children:
                    grand.words = [*child.words, *grand.words]
                queue[:0] = child.children  # placed in its stead, in order
                continue
            kept.append(child)
            visit(child)
        node.children = kept

    visit(root)
    if out:
        assign_labels(root)
    return out


def is_thin(root: Region) -> bool:
    """Nothing but setup below the root: the trace would time the launch and its Init."""
    return not any(r.kind != Kind.ROOT and r.cost != "setup" for r in root.walk())


def stop_reasons(analysis: Analysis, root: Region) -> list[Diagnostic]:
    """OT023 for each call from the entry and its steps the call graph could not follow: a
    note on a full tree, a warning on a thin one (that call is where the trace stops). A
    thin tree with no such call says that what it reached holds no phase work."""
    thin = is_thin(root)
    severity = Severity.WARNING if thin else Severity.INFO
    out = [Diagnostic(OT023, f"`{u.call}` is not followed: {u.why}", u.path, u.line, severity)
           for u in unfollowed_calls(analysis)]
    g = analysis.callgraph
    # Recursion: each function is planned once, so a call back into the chain is where
    # its expansion stops (a few cycles named; Johnson's search yields them lazily). It
    # searches with the nodes numbered in discovery order from the entry: on the
    # functions' names it picks components' first nodes from sets of strings, whose
    # order changes from one process to the next, and so did the cycles named.
    nodes = list(g)  # discovery order from the entry
    numbered = nx.relabel_nodes(g, {n: i for i, n in enumerate(nodes)})
    for found_ids in islice(nx.simple_cycles(numbered), 5):
        found = [nodes[i] for i in found_ids]
        start = min(range(len(found)), key=lambda i: found_ids[i])
        cycle = found[start:] + found[:start]  # from the function the walk met first
        first, back = cycle[0], cycle[-1]
        where = Path(str(g.nodes[back].get("file", "")))
        labels = [str(g.nodes[n].get("label", n)) for n in cycle]
        # Overloads and specialisations share a name: tell them apart by their line.
        shown = [f"{lab} (line {g.nodes[n].get('line', '?')})" if labels.count(lab) > 1 else lab
                 for n, lab in zip(cycle, labels, strict=True)]
        names = " -> ".join((*shown, shown[0]))
        out.append(Diagnostic(
            OT023, f"recursion {names}: the call back into `{shown[0]}` is "
            "not followed (its body is planned once)",
            where, int(g.edges[back, first].get("line", 0)), Severity.INFO))
    if thin and not out:
        entry = analysis.entry_fn
        reached = analysis.callgraph.number_of_nodes() - 1
        out.append(Diagnostic(
            OT023, f"the tree stops at the root: the {reached} function(s) the entry reaches hold no "
            "phase work optrace can see (no loop over experts / groups, no wait, no call of real size)",
            entry.src.path, entry.line, Severity.WARNING))
    return out


def variants_of(root: Region, conditions: dict[tuple[str, int], str]) -> list[dict[str, object]]:
    """Each variant a launch may run, with its condition and distinct labels per core type
    (empty when the kernel has no variant dispatch: the merged tree is the one variant).
    Conditions are simplified before they are shown: a repeated conjunct once, a variant
    whose condition contradicts itself (`A && !(A)`) left out, identical ones merged."""
    variants = launch_variants(root)
    members = variant_members(root, variants)
    merged: dict[str, dict[str, set[str]]] = {}
    shown: dict[frozenset[tuple[str, bool]], str] = {}
    # Each variant's labels per core type, from one walk (a walk per variant was the
    # square of the tree's size).
    per_variant: list[dict[str, set[str]]] = [{} for _ in variants]
    for region in root.walk():
        for v in members[id(region)]:
            for core in region.cores:
                per_variant[v].setdefault(core, set()).add(region.label)
    for v, arms in enumerate(variants):
        if not arms:
            continue
        condition = simplify_condition([conditions.get(arm, "?") for arm in arms])
        if condition is None:
            continue  # no launch can run it
        key = condition_key(condition)
        condition = shown.setdefault(key, condition)  # the first spelling of the same test
        labels = merged.setdefault(condition, {})
        for core, found in per_variant[v].items():
            labels.setdefault(core, set()).update(found)
    return [{"condition": condition, "labels": {core: len(v) for core, v in sorted(labels.items())}}
            for condition, labels in merged.items()]


def _conjuncts(text: str) -> list[str]:
    """The top-level `&&` terms of a condition, whitespace folded, outer parentheses off."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and text.startswith("&&", i):
            out.append(text[start:i])
            start = i + 2
    out.append(text[start:])
    return [_unwrap(" ".join(t.split())) for t in out if t.strip()]


def _unwrap(term: str) -> str:
    while term.startswith("(") and term.endswith(")") and _closes_at_end(term):
        term = term[1:-1].strip()
    return term


def _closes_at_end(term: str) -> bool:
    depth = 0
    for i, ch in enumerate(term):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and i < len(term) - 1:
            return False
    return True


def simplify_condition(parts: list[str]) -> str | None:
    """The conjunction of `parts` with repeated terms once, or None when one term is the
    negation of another (`X` and `!(X)`): that variant cannot run."""
    terms: list[str] = []
    seen: set[tuple[str, bool]] = set()
    for part in parts:
        for term in _conjuncts(part):
            if _truth(term) not in seen:  # `!(A)` and `!A` are one test
                seen.add(_truth(term))
                terms.append(term)
    truths = [_truth(t) for t in terms]
    if {x for x, holds in truths if holds} & {x for x, holds in truths if not holds}:
        return None
    return " && ".join(terms)


def condition_key(condition: str) -> frozenset[tuple[str, bool]]:
    """What a simplified condition asserts, order aside: `A && B` and `B && A` are one."""
    return frozenset(_truth(t) for t in _conjuncts(condition))


def _truth(term: str) -> tuple[str, bool]:
    """(the expression a term tests, whether it must hold): `!(X)`, `!X`, `(X) == 0` and
    `X == false` say X does not hold; `X != 0` and `X == true` that it does."""
    term = _unwrap(term)
    if term.startswith("!") and not term.startswith("!="):
        inner, holds = _truth(term[1:].strip())
        return inner, not holds
    m = re.fullmatch(r"(.+?)\s*(==|!=)\s*(0|false|nullptr)", term)
    if m is not None:
        inner, holds = _truth(m.group(1))
        return inner, holds if m.group(2) == "!=" else not holds
    m = re.fullmatch(r"(.+?)\s*==\s*true", term)
    if m is not None:
        return _truth(m.group(1))
    return term, True


def plan_lint(plan: Plan, stats: dict[str, int], path: list[str]) -> dict[str, object]:
    """The plan's figures about itself (docs/plan-schema.md "lint"): regressions show here
    first. Not proof — the expected trees of the fixtures are."""
    root = plan.root
    # Planned regions and those already in the source (an instrumented tree lints alike).
    regions = [r for r in root.walk() if r.kind != Kind.ROOT]
    # Spans by file: comparing Paths pairwise was a tenth of a check's planning.
    spans: dict[str, dict[Path, list[tuple[int, int]]]] = {"tile": {}, "spin": {}}
    for lp in plan.loops:
        if lp.classification in spans:
            spans[lp.classification].setdefault(lp.path, []).append((lp.start, lp.end))
    # Per file, the loops by start and the furthest end among those starting so far: a
    # region is inside a loop when one starting before it ends at or after its end (one
    # bisection a region, not a look at every loop of its file).
    reach: dict[str, dict[Path, tuple[list[int], list[int]]]] = {}
    for kind, by_path in spans.items():
        for file, loops in by_path.items():
            loops.sort()
            ends = list(accumulate((end for _, end in loops), max))
            reach.setdefault(kind, {})[file] = ([start for start, _ in loops], ends)

    def inside(kind: str) -> list[Region]:
        out = []
        for r in regions:
            if r.anchor is None or r.anchor.path not in reach.get(kind, {}):
                continue
            starts, ends = reach[kind][r.anchor.path]
            before = bisect.bisect_left(starts, r.anchor.start)
            if before and ends[before - 1] >= r.anchor.end:
                out.append(r)
        return out

    in_tile = inside("tile")
    longest = max((r.label for r in root.walk()), key=len, default="")
    same_span = sum(1 for r, parent in root.walk_with_parent()
                    if r.same_span and parent is not None and parent.children == [r])
    setup = sum(1 for r in regions if r.cost == "setup")
    dropped = stats.get("phases_dropped", 0)
    unbracketed = _unbracketed(plan, regions, path)
    return {
        "points_in_tile_loops": len(in_tile),
        "points_in_spin_loops": len(inside("spin")),
        "longest_label": longest,
        "longest_label_length": len(longest),
        "same_span_levels": same_span,
        "setup_share": round(setup / len(regions), 2) if regions else 0.0,
        "phases_dropped": dropped,
        "phases_dropped_while_setup_kept": stats.get("phases_dropped_while_setup_kept", 0),
        "unbracketed_handshakes": unbracketed,
        "handshakes_not_bracketed": len(unbracketed),  # the count, for corpus summaries
        # Names (OT105): each 0 on a plan that reads well.
        **name_lint(root, stats),
    }


def _unbracketed(plan: Plan, regions: list[Region], path: list[str]) -> list[str]:
    """Handshake primitives in functions on the planned path with no region bracketing
    them: a handshake region, a tile loop's region, or a region of a function whose whole
    business is waiting (`file:line name`)."""
    an = plan.analysis
    shakes = [r for r in regions
              if r.cost == "handshake" or r.tile_loop or r.hot in ("wait", "sync", "notify")]
    brackets: dict[Path, list[tuple[int, int]]] = {}
    for r in shakes:
        if r.anchor is not None:
            brackets.setdefault(r.anchor.path, []).append((r.anchor.start, r.anchor.end))
    # A wait function traced at its call sites brackets every handshake in its body.
    whole = {r.function for r in shakes if r.function and not r.tile_loop}
    out: list[str] = []
    for fid in dict.fromkeys(path):
        fn = an.index.functions.get(fid)
        if fn is None or fid in whole:
            continue
        for call in fn.nodes_in(fn.body, ("call_expression",)):
            site = an.call_site(fn, call)
            if site.callees or (site.name not in BLOCKING_PRIMITIVES and site.name not in SET_PRIMITIVES):
                continue
            at = call.start_byte
            if not any(start <= at < end for start, end in brackets.get(fn.src.path, ())):
                where = display_path(fn.src.path, an.layers.repo_root)
                out.append(f"{where}:{fn.src.line_of(at)} {site.name}")
    return out


def _resolve_shared(root: Region) -> None:
    """Point shared regions at the label under which their callee was first planned."""
    first_by_fn: dict[str, str] = {}
    for region in root.walk():
        if region.function and region.shared_with is None and region.function not in first_by_fn:
            first_by_fn[region.function] = region.label
    for region in root.walk():
        if region.shared_with is not None and region.function in first_by_fn:
            region.shared_with = first_by_fn[region.function]
