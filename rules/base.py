"""The rule framework: what a planning rule is, how it reports, and how rules are found.

A rule reshapes or checks the trace tree; it never touches source text. Each rule is a
class with a stable `code` (OT1xx), a `name`, a docstring saying what and why, and its
own `VALID` / `INVALID` examples (tiny kernels) that the test suite runs automatically.
Which rules run, in which order, is `rules/registry.py`. Teams add rules without forking
optrace: register a module under the `optrace.rules` entry-point group of an installed
package, or list it in `[rules] modules` of `optrace.toml` / `[tool.optrace.rules]`; the
module exposes `RULES`.

Importing a module is running its code, so a repository's config does not get to do it
on its own: `[rules] modules` are imported only when the user trusts that
config — `--trust-config`, or the repository listed under `[trust] repositories` in the
user-level config (`~/.config/optrace/config.toml`) — and only from the installed
`sys.path` (`python -m optrace` drops the current directory from it). Untrusted, they are
skipped and the plan says which (OT005); a trusted module that does not exist, does not
import or has no rules stops the operator with `path:line: OT004` (exit 2; the check is
`engine/config.py`'s, where the config is read). Entry points are installed code, loaded
as always.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import ClassVar

from optrace.engine.analysis import Analysis
from optrace.engine.diagnostics import Diagnostic, Severity
from optrace.engine.model import Dropped, LoopInfo, Region


@dataclass(frozen=True)
class Example:
    """A one-file kernel and what the plan must (not) contain once the rule has run.

    `labels` must all be planned; `absent` must not be; `finding` is a substring of a
    message this rule must report (INVALID examples) — VALID examples expect no finding.
    `config` is `optrace.toml` text for the example's repository. `tree`, when given, is
    the whole expected tree, one region a line, nested by two spaces a level; a line may
    end in ` @inside:<line>` / ` @around:<line>` to state where its points go (the line
    of the example's source, 1-based). `dropped`, when given, is every label the label
    budget drops, in the order it drops them; `variants` the plan's variant conditions, in
    order, as the plan shows them.
    """

    source: str
    tree: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    finding: str = ""
    config: str = ""
    dropped: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()


@dataclass
class RuleContext:
    """What a rule is handed: the analysis, the tree it reshapes, the loops, and where it leaves findings."""

    analysis: Analysis
    root: Region
    loops: list[LoopInfo]
    findings: list[Diagnostic] = field(default_factory=list)
    current: str = ""
    # Figures rules leave for the plan lint (e.g. the budget's dropped regions by class).
    stats: dict[str, int] = field(default_factory=dict)
    # The regions the label budget dropped, each named (the plan lists them).
    dropped: list[Dropped] = field(default_factory=list)

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
        doc = cls.__doc__ if cls.__doc__ and cls.__doc__ != Rule.__doc__ else None
        doc = doc or sys.modules[cls.__module__].__doc__ or ""
        return doc.strip()
