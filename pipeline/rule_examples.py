"""Run a rule's own VALID / INVALID examples: used by optrace's tests and by teams that
write their own rules (`from optrace.pipeline.rule_examples import check_rule_examples`)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from optrace.engine.config import trusting_config
from optrace.engine.model import Region
from optrace.engine.plan import Plan
from optrace.pipeline.plan import plan_operator
from optrace.rules.base import Example, Rule

EXAMPLE_OP = "demo_op"


def plan_example(example: Example, workdir: Path, extra_config: str = "") -> Plan:
    """Write the example as a one-file operator in its own repository and plan it."""
    repo = workdir / "repo"
    kernel = repo / EXAMPLE_OP / "op_kernel"
    kernel.mkdir(parents=True, exist_ok=True)
    (kernel / f"{EXAMPLE_OP}.cpp").write_text(example.source, encoding="utf-8")
    (repo / "optrace.toml").write_text(example.config + "\n" + extra_config, encoding="utf-8")
    with trusting_config():  # the example's config is the test's own: its rule modules load
        return plan_operator(repo / EXAMPLE_OP, repo)


def check_example(rule: type[Rule], example: Example, valid: bool, extra_config: str = "") -> None:
    """Raise AssertionError with a readable reason when the example does not hold."""
    with tempfile.TemporaryDirectory(prefix="optrace-rule-") as tmp:
        plan = plan_example(example, Path(tmp), extra_config)
        labels = {r.label for r in plan.root.walk()}
        if example.tree:
            got = tree_lines(plan.root)
            want = list(example.tree)
            placed = [g if " @" in w else g.split(" @")[0] for g, w in zip(got, want, strict=False)]
            assert placed == want and len(got) == len(want), (
                f"{rule.code} {rule.name} example: planned tree\n" + "\n".join(got)
                + "\nexpected\n" + "\n".join(want))
        own = [d.message for d in plan.findings if d.code == rule.code]
        where = f"{rule.code} {rule.name} {'VALID' if valid else 'INVALID'} example"
        if example.dropped:
            got_dropped = [d.label for d in plan.dropped]
            assert got_dropped == list(example.dropped), (
                f"{where}: the budget dropped {got_dropped}, expected {list(example.dropped)}")
        if example.variants:
            got_variants = [str(v["condition"]) for v in plan.variants]
            assert got_variants == list(example.variants), (
                f"{where}: variants {got_variants}, expected {list(example.variants)}")
        missing = [lb for lb in example.labels if lb not in labels]
        assert not missing, f"{where}: labels {missing} not planned; planned {sorted(labels)}"
        present = [lb for lb in example.absent if lb in labels]
        assert not present, f"{where}: labels {present} should not be planned"
        if valid:
            assert not own, f"{where}: expected no finding, got {own}"
        else:
            assert any(example.finding in m for m in own), (
                f"{where}: expected a finding containing {example.finding!r}, got {own}")


def tree_lines(region: Region, indent: str = "") -> list[str]:
    """`label @inside:line` / `label @around:line`, nested by two spaces a level."""
    anchor = region.anchor
    where = f" @{'inside' if anchor.inside else 'around'}:{anchor.line}" if anchor else ""
    out = [f"{indent}{region.label}{where}"]
    for child in region.children:
        out += tree_lines(child, indent + "  ")
    return out


def check_rule_examples(rule: type[Rule], extra_config: str = "") -> None:
    """Every VALID and INVALID example of one rule; a rule without examples fails."""
    assert rule.VALID and rule.INVALID, f"{rule.code} {rule.name} needs VALID and INVALID examples"
    for ex in rule.VALID:
        check_example(rule, ex, True, extra_config)
    for ex in rule.INVALID:
        check_example(rule, ex, False, extra_config)
