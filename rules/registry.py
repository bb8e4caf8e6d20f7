"""The rules a plan runs, in order: the built-in ones, then teams' rules (modules a
trusted config names, then the `optrace.rules` entry points), minus the disabled ones."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from optrace.engine.config import rule_module_problem
from optrace.engine.diagnostics import Diagnostic, InputError
from optrace.rules import (
    capacity,
    density,
    existing_points,
    fold_depth,
    handshakes,
    label_budget,
    lift_main_flow,
    merge_thin_wrappers,
    naming,
    same_span,
)
from optrace.rules.base import Rule


def builtin_rules() -> list[type[Rule]]:
    # Order matters: structure first (lift, merge, fold), then names, then checks.
    return [
        lift_main_flow.LiftMainFlow,
        merge_thin_wrappers.MergeThinWrappers,
        same_span.SameSpan,
        fold_depth.FoldDepth,
        # Partners are named from the phases' final words, so after the structure rules.
        handshakes.HandshakePartners,
        naming.Naming,
        # Existing points are matched by final label, so after the rules that shape labels.
        existing_points.KeepExistingPoints,
        label_budget.LabelBudget,
        density.Density,
        capacity.Capacity,
    ]


def load_rules(modules: tuple[str, ...] = (), disabled: frozenset[str] = frozenset()) -> list[Rule]:
    """Built-in rules, then plugin rules (config modules, then entry points), minus disabled.

    `modules` are imported as given: the caller decides they may be (engine/config.py
    passes only those of a trusted config). One that cannot be used is an InputError
    (OT004), not a traceback."""
    classes = builtin_rules()
    for mod_name in modules:
        problem = rule_module_problem(mod_name)
        if problem:
            raise InputError(Diagnostic("OT004", f"rule module `{mod_name}`: {problem}", None, 0))
        classes.extend(_rules_of(importlib.import_module(mod_name)))
    for ep in entry_points(group="optrace.rules"):
        classes.extend(_rules_of(ep.load()))
    seen: set[str] = set()
    out: list[Rule] = []
    for cls in classes:
        if cls.code in disabled or cls.name in disabled or cls.code in seen:
            continue
        seen.add(cls.code)
        out.append(cls())
    return out


def _rules_of(obj: object) -> list[type[Rule]]:
    if isinstance(obj, type) and issubclass(obj, Rule):
        return [obj]
    rules = getattr(obj, "RULES", None)
    if rules is None:
        raise ImportError(f"{getattr(obj, '__name__', obj)!r} has no RULES list")
    return list(rules)
