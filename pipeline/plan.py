"""`plan_operator`: analysis -> raw tree -> rules -> the plan a user reviews."""

from __future__ import annotations

from pathlib import Path

from optrace.engine.analysis import Analysis, analyse_operator
from optrace.engine.model import Region, assign_labels
from optrace.engine.plan import Plan
from optrace.engine.planner import Planner
from optrace.rules.base import RuleContext
from optrace.rules.capacity import estimate
from optrace.rules.density import labels_per_core
from optrace.rules.registry import load_rules


def plan_operator(op_dir: Path, repo_root: Path | None = None) -> Plan:
    analysis = analyse_operator(op_dir, repo_root)
    return plan_from_analysis(analysis)


def plan_from_analysis(analysis: Analysis) -> Plan:
    planner = Planner(analysis)
    root = planner.build()
    assign_labels(root)
    ctx = RuleContext(analysis, root, planner.loops)
    cfg = analysis.config
    ctx.findings.extend(cfg.diagnostics)  # e.g. rule modules an untrusted config named (OT005)
    for rule in load_rules(cfg.rule_modules, cfg.disabled_rules):
        ctx.current = rule.code
        rule.apply(ctx)
        assign_labels(root)
    _resolve_shared(root)
    plan = Plan(analysis, root, planner.loops, planner.roles, ctx.findings)
    plan.per_core = labels_per_core(root)
    plan.capacity = estimate(root, cfg.trip_counts)
    return plan


def _resolve_shared(root: Region) -> None:
    """Point shared regions at the label under which their callee was first planned."""
    first_by_fn: dict[str, str] = {}
    for region in root.walk():
        if region.function and region.shared_with is None and region.function not in first_by_fn:
            first_by_fn[region.function] = region.label
    for region in root.walk():
        if region.shared_with is not None and region.function in first_by_fn:
            region.shared_with = first_by_fn[region.function]
