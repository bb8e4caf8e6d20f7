"""Each fixture's plan against its golden, reviewed by hand (tests/golden/*.plan.txt).

Regenerate after an intended change with `OPTRACE_UPDATE_GOLDEN=1 python -m pytest
tests/test_fixture_plans.py`, then review the diff like any other code change.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from optrace.pipeline.plan import plan_operator
from optrace.pipeline.plan_output import plan_json, render_text
from optrace.rules.naming import Naming

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
GOLDEN = Path(__file__).resolve().parent / "golden"

OPERATORS = {
    "umdk_moe_fused_gmm": FIXTURES / "umdk_style/src/cam/comm_operator/ascend_kernels/moe_fused_gmm",
    "umdk_moe_gate_bias": FIXTURES / "umdk_style/src/cam/comm_operator/ascend_kernels/moe_gate_bias",
    "msopgen_moe_token_permute": FIXTURES / "msopgen_style/moe_token_permute",
    "direct_moe_gating_topk": FIXTURES / "direct_launch/csrc/ops/moe_gating_topk",
    "l0op_moe_norm_grad": FIXTURES / "l0op_style/norm/moe_norm_grad",
}


def rendered(op_dir: Path) -> str:
    # From the operator's directory: the root above it is shown whole (text output shows
    # paths relative to where it runs), then named <repo>, wherever pytest runs.
    with contextlib.chdir(op_dir):
        plan = plan_operator(op_dir)
        return render_text(plan).replace(str(plan.analysis.layers.repo_root), "<repo>")


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_plan_matches_golden(name: str) -> None:
    text = rendered(OPERATORS[name])
    golden = GOLDEN / f"{name}.plan.txt"
    if os.environ.get("OPTRACE_UPDATE_GOLDEN"):
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")


def test_umdk_fixture_structure() -> None:
    """The properties a reviewer checked by hand, asserted directly."""
    doc = plan_json(plan_operator(OPERATORS["umdk_moe_fused_gmm"]))
    assert doc["mixed"] and doc["missing_layers"] == []
    files = set()
    work: dict[str, set[str]] = {}  # per core type: phase / setup labels (handshakes come on top)
    shakes: dict[str, set[str]] = {}

    def visit(r: dict[str, object]) -> None:
        files.add(str(r["file"]))
        for core in r["cores"]:  # type: ignore[attr-defined]
            (shakes if r["cost"] == "handshake" else work).setdefault(str(core), set()).add(str(r["label"]))
        if r["covers"]:
            files.add(str(r["covers"]))
        for c in r["children"]:  # type: ignore[attr-defined]
            visit(c)

    visit(doc["tree"])  # type: ignore[arg-type]
    for sub in ("gemm/", "epilogue/", "raw_distributed/"):
        assert any(sub in f for f in files), sub
    counts = doc["labels_per_core"]
    assert counts["AIC"] >= 10 and counts["AIV"] >= 10  # type: ignore[index]
    assert len(work["AIC"]) <= 30 and len(work["AIV"]) <= 30
    labels = set(doc["labels"]["AIV"]) | set(doc["labels"]["AIC"])  # type: ignore[index]
    # Phases named from the code's names: `dispatcher.Process()` -> `dispatcher`;
    # GmmDequantSwigluQuant and GmmDequant without the operator's own word (`gmm`, of
    # moe_fused_gmm), cut to a phase word where a label needs it: `swiglu` and `dequant`;
    # each core type's body is the phase's level, and the handshakes follow those names.
    assert "dispatcher aiv" in labels
    assert "swiglu aic" in labels and "swiglu aiv" in labels
    assert "swiglu aic group" in labels and "dequant aic group" in labels
    assert "notify-swiglu aiv" in labels
    assert all(len(label) <= 32 for label in labels)
    assert not any(label.split()[-1][-2:] in ("-2", "-3") for label in labels)  # no counter suffixes
    lint = plan_operator(OPERATORS["umdk_moe_fused_gmm"]).lint
    assert (lint["labels_with_repeated_word"], lint["sibling_label_clashes"]) == (0, 0)
    # One launch runs one `if constexpr (TPL_LARGE_EP)` arm: the plan lists both variants,
    # each within the label budget on its own (handshakes come on top).
    variants = doc["variants"]
    assert [v["condition"] for v in variants] == ["TPL_LARGE_EP", "!(TPL_LARGE_EP)"]  # type: ignore[index]
    assert all(n - len(shakes.get(core, ())) <= 30  # type: ignore[union-attr]
               for v in variants for core, n in v["labels"].items())  # type: ignore[index,union-attr]
    lint = doc["lint"]
    assert lint["points_in_tile_loops"] == 0 and lint["same_span_levels"] == 0  # type: ignore[index]
    assert lint["phases_dropped_while_setup_kept"] == 0  # type: ignore[index]
    # Innermost tile loops (block_mmad's kIdx, epilogue tiles) never get points.
    loops = {(Path(lp["file"]).name, lp["var"]): lp["class"] for lp in doc["loops"]}  # type: ignore[union-attr,index]
    # (block_mmad's kIdx loop sits inside the loopIdx tile loop: never entered at all)
    assert loops[("grouped_matmul_dequant_swiglu_quant.h", "loopIdx")] == "tile"
    assert ("block_mmad.h", "kIdx") not in loops
    assert all(v == "tile" for (f, var), v in loops.items() if var == "tileIdx")
    # The CRLF + GBK header is analysed like any other.
    assert any("moe_token_dispatch.h" in f for f in files)
    assert json.dumps(doc)  # serialisable


@pytest.mark.slow  # plans a fixture in three child processes, each under its own hash seed
def test_plan_does_not_depend_on_hash_seed() -> None:
    op = OPERATORS["umdk_moe_fused_gmm"]
    outs = []
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        res = subprocess.run([sys.executable, "-m", "optrace", "plan", str(op), "--format", "json"],
                             capture_output=True, env=env, check=True)
        outs.append(res.stdout)
    assert outs[0] == outs[1] == outs[2]


@pytest.mark.slow  # copies a fixture and plans it in four child processes, each under its own hash seed
def test_over_budget_lists_core_types_in_one_order_whatever_the_hash_seed(tmp_path: Path) -> None:
    """A budget both core types stay over (2 labels, the fixture's AIC and AIV keep 6 each):
    `over_budget` came out in a set's order, AIV before AIC under some seeds."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "umdk_style", repo)
    (repo / "optrace.toml").write_text("[density]\nmin = 1\nmax = 2\ntarget = 2\n")
    op = repo / OPERATORS["umdk_moe_fused_gmm"].relative_to(FIXTURES / "umdk_style")
    outs = []
    for seed in ("1", "2", "3", "4"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "XDG_CACHE_HOME": str(tmp_path / "cache")}
        command = [sys.executable, "-m", "optrace", "plan", str(op), "--format", "json", "--no-cache"]
        res = subprocess.run(command, capture_output=True, env=env, check=False, cwd=tmp_path)
        outs.append(res.stdout)
        over = json.loads(res.stdout)["operators"][0]["over_budget"]
        assert list(over) == ["AIC", "AIV"], (seed, over)
    assert len(set(outs)) == 1


def test_naming_skips_only_the_cuts_it_would_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    """Naming does not try giving back a cut that is sure to take a label past the limit;
    trying every one of them instead (the check answering no) must give the same plan, and
    on this fixture the check does answer yes (19 of its 26 questions)."""
    op = OPERATORS["umdk_moe_fused_gmm"]
    answers: list[bool] = []
    sure = Naming._sure_too_long

    def counted(self: Naming, *args: Any) -> bool:
        answer = sure(self, *args)
        answers.append(answer)
        return answer

    monkeypatch.setattr(Naming, "_sure_too_long", counted)
    skipping = json.dumps(plan_json(plan_operator(op)))
    assert True in answers and False in answers
    monkeypatch.setattr(Naming, "_sure_too_long", lambda self, *args: False)
    trying = json.dumps(plan_json(plan_operator(op)))
    assert skipping == trying
