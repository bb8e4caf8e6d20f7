"""The rule framework: what a planning rule is, how it reports, and how rules are found.

A rule reshapes or checks the trace tree; it never touches source text. Each rule is a
class with a stable `code` (OT1xx), a `name`, a docstring saying what and why, and its
own `VALID` / `INVALID` examples (tiny kernels) that the test suite runs automatically.
Teams add rules without forking optrace: register a module under the `optrace.rules`
entry-point group of an installed package, or list it in `[rules] modules` of
`optrace.toml` / `[tool.optrace.rules]`; the module exposes `RULES`.

Importing a module is running its code, so a repository's config does not get to do it
on its own (issue 14): `[rules] modules` are imported only when the user trusts that
config — `--trust-config`, or the repository listed under `[trust] repositories` in the
user-level config (`~/.config/optrace/config.toml`) — and only from the installed
`sys.path` (`python -m optrace` drops the current directory from it). Untrusted, they are
skipped and the plan says which (OT005); a trusted module that does not exist, does not
import or has no rules stops the operator with `path:line: OT004` (exit 2). Entry points
are installed code, loaded as always.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, ClassVar

from optrace.engine.diagnostics import Diagnostic, InputError, Severity
from optrace.engine.model import Region

if TYPE_CHECKING:
    from optrace.engine.analysis import Analysis
    from optrace.engine.model import LoopInfo


@dataclass(frozen=True)
class Example:
    """A one-file kernel and what the plan must (not) contain once the rule has run.

    `labels` must all be planned; `absent` must not be; `finding` is a substring of a
    message this rule must report (INVALID examples) — VALID examples expect no finding.
    `config` is `optrace.toml` text for the example's repository.
    """

    source: str
    labels: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    finding: str = ""
    config: str = ""


@dataclass
class RuleContext:
    analysis: Analysis
    root: Region
    loops: list[LoopInfo]
    findings: list[Diagnostic] = field(default_factory=list)
    current: str = ""

    def report(self, message: str, region: Region | None = None,
               severity: Severity = Severity.INFO, line: int = 0) -> None:
        anchor = region.anchor if region is not None else None
        self.findings.append(
            Diagnostic(self.current, message, anchor.path if anchor else None,
                       anchor.line if anchor else line, severity)
        )


class Rule:
    """Base class: subclasses set `code`, `name` and implement `apply`."""

    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    VALID: ClassVar[tuple[Example, ...]] = ()
    INVALID: ClassVar[tuple[Example, ...]] = ()

    def apply(self, ctx: RuleContext) -> None:
        raise NotImplementedError

    @classmethod
    def describe(cls) -> str:
        """The rule's documentation: its own docstring, else its module's (one rule per
        module is the norm, and the module docstring is where the rationale lives)."""
        import sys

        doc = cls.__doc__ if cls.__doc__ and cls.__doc__ != Rule.__doc__ else None
        doc = doc or sys.modules[cls.__module__].__doc__ or ""
        return doc.strip()


def builtin_rules() -> list[type[Rule]]:
    from optrace.rules import (
        capacity,
        density,
        existing_points,
        fold_depth,
        label_budget,
        lift_main_flow,
        merge_thin_wrappers,
        naming,
    )

    # Order matters: structure first (lift, merge, fold), then names, then checks.
    return [
        lift_main_flow.LiftMainFlow,
        merge_thin_wrappers.MergeThinWrappers,
        fold_depth.FoldDepth,
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
            raise InputError(Diagnostic("OT004", f"rule module `{mod_name}`: {problem}", None, 0,
                                        Severity.ERROR))
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


def rule_module_problem(name: str) -> str:
    """Why module `name` cannot give rules ("" when it can): it is not found, fails to
    import, or has no non-empty `RULES` of Rule subclasses. Imports it (its code runs)."""
    try:
        if not name or importlib.util.find_spec(name) is None:
            return "no such module on the installed path"
        module = importlib.import_module(name)
    except Exception as exc:  # a module's own error at import: reported, not a traceback
        return f"cannot be imported ({type(exc).__name__}: {exc})"
    rules = getattr(module, "RULES", None)
    if not isinstance(rules, list | tuple) or not rules:
        return "has no RULES list (or an empty one)"
    if not all(isinstance(r, type) and issubclass(r, Rule) for r in rules):
        return "RULES holds something that is not an optrace Rule class"
    return ""


def _rules_of(obj: object) -> list[type[Rule]]:
    if isinstance(obj, type) and issubclass(obj, Rule):
        return [obj]
    rules = getattr(obj, "RULES", None)
    if rules is None:
        raise ImportError(f"{getattr(obj, '__name__', obj)!r} has no RULES list")
    return list(rules)
