"""Every rule's own examples are its tests (Fixit style), collected automatically."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from optrace.pipeline.rule_examples import check_example, check_rule_examples, plan_example
from optrace.rules.registry import builtin_rules, load_rules

RULES = builtin_rules()


@pytest.mark.parametrize("rule", RULES, ids=[r.code + "-" + r.name for r in RULES])
def test_rule_examples(rule: type) -> None:
    check_rule_examples(rule)


def test_codes_are_unique_and_documented() -> None:
    codes = [r.code for r in RULES]
    assert len(codes) == len(set(codes))
    for r in RULES:
        assert r.code.startswith("OT1") and r.name and r.code in r.describe()


def test_a_disabled_rule_does_not_run(tmp_path: Path) -> None:
    from optrace.rules.naming import Naming

    ex = Naming.INVALID[1]  # labels over the limit, which OT105 would cut
    plan = plan_example(ex, tmp_path, '[rules]\ndisable = ["OT105"]\n')
    assert not [d for d in plan.findings if d.code == "OT105"]
    assert ("dispatch-tokens-all-ranks-quant expert prepare-expert-windows-every-remote-rank token-copy"
            in {r.label for r in plan.root.walk()})


TEAM_RULE = '''
"""OT901 no-wait-at-root: a team rule that flags waits directly under processing."""
from optrace.engine.diagnostics import Severity
from optrace.engine.model import Kind
from optrace.rules.base import Example, Rule

class NoWaitAtRoot(Rule):
    code = "OT901"
    name = "no-wait-at-root"
    VALID = (Example('extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) { SyncAll(); }\\n',
                     labels=("barrier",)),)
    INVALID = (Example('extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) '
                       '{ CrossCoreWaitFlag(ready); }\\n',
                       labels=("wait",), finding="wait directly under processing"),)

    def apply(self, ctx):
        for child in ctx.root.children:
            if child.kind == Kind.WAIT:
                ctx.report("wait directly under processing", child, Severity.WARNING)

RULES = [NoWaitAtRoot]
'''


def test_team_rule_from_config_module_runs_with_its_examples(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "plugins"
    pkg.mkdir()
    (pkg / "team_rules.py").write_text(textwrap.dedent(TEAM_RULE))
    monkeypatch.syspath_prepend(str(pkg))
    sys.modules.pop("team_rules", None)
    rules = load_rules(("team_rules",))
    team = [r for r in rules if r.code == "OT901"]
    assert team, "the configured module's rule was not loaded"
    cfg = '[rules]\nmodules = ["team_rules"]\n'
    check_rule_examples(type(team[0]), cfg)
    # And a broken example of the team rule is caught, not silently passed.
    bad = type(team[0]).INVALID[0]
    with pytest.raises(AssertionError):
        check_example(type(team[0]), bad, True, cfg)


def test_rules_doc_is_current() -> None:
    from optrace.rules.docs import render

    doc = Path(__file__).resolve().parent.parent / "docs" / "rules.md"
    assert doc.read_text(encoding="utf-8") == render(), (
        "docs/rules.md is stale: python -m optrace.rules.docs > docs/rules.md")


def test_the_per_core_line_says_which_rule_let_a_count_over_the_budget(tmp_path: Path) -> None:
    """Phases kept because they hold handshakes: the plan says so, with the numbers, in text
    and JSON, and lists every region it dropped."""
    from optrace.pipeline.plan_output import plan_json, render_text
    from optrace.rules.label_budget import LabelBudget

    ex = LabelBudget.INVALID[2]  # 20 parts: Inits dropped, phases holding barriers kept
    plan = plan_example(ex, tmp_path)
    assert plan.over_budget == {"AIV": 41}
    text = render_text(plan)
    # the plan wraps at 120 columns: the line with its continuation lines
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("  AIV: "))
    line = " ".join([lines[at], *(ln.strip() for ln in lines[at + 1:at + 4] if ln.startswith("      "))])
    assert "41 phase / setup, budget 30" in line and "+ 20 handshakes" in line
    assert "11 over the budget: what is left holds handshakes" in line
    assert f"dropped by the label budget (20, {LabelBudget.code}" in text
    doc = plan_json(plan)
    assert doc["over_budget"] == {"AIV": 41}
    assert [d["label"] for d in doc["dropped"]] == [f"part{i}-init" for i in reversed(range(20))]  # type: ignore[union-attr]
