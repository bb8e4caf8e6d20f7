"""The rules a plan runs, in order: the built-in ones, then teams' rules (modules a
trusted config names, then the `optrace.rules` entry points), minus the disabled ones."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from importlib.machinery import PathFinder
from typing import Any

from optrace.engine.codes import OT004
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
            raise InputError(Diagnostic(OT004, f"rule module `{mod_name}`: {problem}", None, 0))
        try:
            classes.extend(_rules_of(importlib.import_module(mod_name)))
        except (ImportError, TypeError) as exc:
            raise InputError(Diagnostic(OT004, f"rule module `{mod_name}`: {exc}", None, 0)) from exc
    for ep in entry_points(group="optrace.rules"):
        classes.extend(_rules_of_entry_point(ep))
    seen: set[str] = set()
    out: list[Rule] = []
    for cls in classes:
        if cls.code in disabled or cls.name in disabled or cls.code in seen:
            continue
        seen.add(cls.code)
        out.append(cls())
    return out


def entry_points(group: str) -> list[Any]:
    """The installed distributions' entry points of `group` (importlib.metadata's).

    Asking importlib.metadata reads the metadata of every installed distribution, and teams
    rarely install rule plugins: so the distributions on `sys.path` are looked at first,
    and only when one declares the group in its `entry_points.txt` (the packaging spec's
    file), or where they cannot be listed (a zipped path entry, a finder of its own), is
    importlib.metadata asked."""
    if not _may_declare(group):
        return []
    if not _reader:
        raise RuntimeError(f"a distribution on sys.path declares [{group}], and no reader of "
                           "installed entry points is installed: call optrace.cli.deferred.install() "
                           "first (the optrace command does)")
    return _reader[0](group)


# How installed entry points are read: importlib.metadata, which is slow to import (it
# pulls in the email package), so the CLI hands it over to be imported when asked
# (optrace/cli/deferred.py).
EntryPointsReader = Callable[[str], list[Any]]
_reader: list[EntryPointsReader] = []


def use_entry_points_reader(reader: EntryPointsReader) -> None:
    """Install how installed entry points are read (the CLI and the tests do)."""
    _reader[:] = [reader]


def _may_declare(group: str) -> bool:
    header = f"[{group}]".encode()
    for finder in sys.meta_path:
        if getattr(finder, "find_distributions", None) is not None and finder is not PathFinder:
            return True  # distributions importlib.metadata finds elsewhere: ask it
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as it:
                listed = [(e.name, e.name.lower()) for e in it]
        except NotADirectoryError:
            return True  # a zip / egg on the path: importlib.metadata reads inside it
        except OSError:
            continue  # absent: nothing installed there
        if entry.lower().endswith(".egg") or any(low.endswith(".egg") for _, low in listed):
            return True  # an unpacked egg keeps its metadata in EGG-INFO/: ask importlib.metadata
        # importlib.metadata matches these suffixes in any case (`Bar-1.0.DIST-INFO`)
        names = [name for name, low in listed if low.endswith((".dist-info", ".egg-info"))]
        for name in names:
            try:
                with open(os.path.join(entry or ".", name, "entry_points.txt"), "rb") as f:
                    if header in f.read():
                        return True
            except OSError:
                continue
    return False


def _rules_of_entry_point(ep: Any) -> list[type[Rule]]:
    """The rules an installed distribution declares, or OT004 naming the distribution and
    the entry point when it cannot be used (missing module, bad RULES, an import that
    raises): a broken plugin is the user's input, not optrace's crash."""
    dist = getattr(getattr(ep, "dist", None), "name", None) or "an installed distribution"
    try:
        return _rules_of(ep.load())
    except Exception as exc:  # whatever the plugin's import raises
        raise InputError(Diagnostic(
            OT004, f"rule plugin `{getattr(ep, 'name', '?')} = {getattr(ep, 'value', '?')}` of "
            f"{dist} (entry point group optrace.rules) cannot be used: {type(exc).__name__}: {exc}; "
            "fix or uninstall that distribution", None, 0)) from exc


def _rules_of(obj: object) -> list[type[Rule]]:
    if isinstance(obj, type) and issubclass(obj, Rule):
        return [obj]
    rules = getattr(obj, "RULES", None)
    if rules is None:
        raise ImportError(f"{getattr(obj, '__name__', obj)!r} has no RULES list")
    if not isinstance(rules, list | tuple):
        raise TypeError(f"RULES of {getattr(obj, '__name__', obj)!r} is a {type(rules).__name__}, "
                        "not a list of Rule classes")
    bad = [r for r in rules if not (isinstance(r, type) and issubclass(r, Rule))]
    if bad:
        raise TypeError(f"RULES of {getattr(obj, '__name__', obj)!r} holds {bad[0]!r}, not a Rule class")
    return list(rules)
