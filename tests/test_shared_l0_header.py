"""An l0 function whose prototype lives in a shared header outside the operator
(fixtures/shared_l0_header: ops-nn's `common/inc/op_api/`): the declaration is threaded
with the definition; mode B when every call of it is the operator's own, else mode A with
the reason. `check` passes on apply's output, the plan's "edited" marks name the shared
header, and strip restores every byte."""

# ruff: noqa: E501  (expected texts are verbatim)

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from test_host_layers import cli, evidence, gates, snapshot

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "shared_l0_header"
OP = "norm/moe_norm_grad"
HEADER = "common/inc/op_api/moe_norm_grad.h"
OTHER = "norm/norm_common/op_api/aclnn_moe_norm_legacy.cpp"


def _run(tmp_path: Path, drop_other: bool) -> tuple[dict[str, object], dict[str, dict[str, object]], str]:
    repo = tmp_path / FIXTURE.name
    shutil.copytree(FIXTURE, repo)
    if drop_other:
        (repo / OTHER).unlink()
    op = repo / OP
    before = snapshot(repo)
    code, out, err = cli("plan", str(op), "--format", "json")
    assert code == 0, err
    plan = json.loads(out)["operators"][0]
    marked = {f["file"] for f in plan["outside"] if f["edited"]}
    assert HEADER in marked, marked
    code, _, err = cli("apply", str(op), "--write")
    assert code == 0, err
    header = (repo / HEADER).read_text()
    other = (repo / OTHER).read_bytes() if not drop_other else None
    code, out, err = cli("check", str(op), "--no-compile")
    assert code == 0, out + err
    g = gates(op)
    code, _, err = cli("strip", str(op), "--write")
    assert code == 0, err
    assert snapshot(repo) == before
    if other is not None:
        assert other == before[OTHER]  # another operator's caller: never edited
    return plan, g, header


def test_every_caller_the_operators_own_threads_the_shared_header_in_mode_b(tmp_path: Path) -> None:
    plan, g, header = _run(tmp_path, drop_other=True)
    assert plan["mode"] == "B"
    # the parameter may go on a line of its own (120 columns): compared without the line break
    flat = re.sub(r"/\*optrace<\*/\s+", "/*optrace<*/", header)
    assert re.search(r"aclOpExecutor \*executor/\*optrace<\*/,\s*const aclTensor \*profilingData = nullptr/\*>optrace\*/\);",
                     flat), header
    assert any(p.endswith("moe_norm_grad.h") and "MoeNormGrad signature: profiling output last" in n and ok
               for p, _l, n, ok in evidence(g["G2"]))


def test_a_caller_in_another_operator_chooses_mode_a_with_the_reason(tmp_path: Path) -> None:
    plan, g, header = _run(tmp_path, drop_other=False)
    assert plan["mode"] == "A"
    reason = str(plan["mode_reason"])
    assert "OT313 `MoeNormGrad` is declared in common/inc/op_api/moe_norm_grad.h, outside the operator" in reason
    assert f"{OTHER}:12 calls it too" in reason
    # mode A threads the same chain (a null tensor): the shared declaration too
    assert "profilingData = nullptr" in header
    assert g["G2"]["status"] == "pass"
