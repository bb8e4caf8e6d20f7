"""`apply` without --write shows what its diff does before the diff: the mode and why,
the files by layer, the points each file gets, the labels per core type — on stderr, so
the diff on stdout stays a patch `git apply` takes."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.pipeline.plan import plan_operator

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OP = "src/cam/comm_operator/ascend_kernels/moe_fused_gmm"


def test_the_summary_names_mode_layers_points_and_labels(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "umdk_style"
    shutil.copytree(FIXTURES / "umdk_style", repo)
    monkeypatch.chdir(repo)
    res = CliRunner().invoke(app, ["apply", OP])
    assert res.exit_code == 0, res.stderr
    summary = res.stderr.splitlines()
    assert all(len(line) <= 120 for line in summary)  # read at 120 columns, as the plan
    # a row past 120 columns goes on with its path on a line of its own, four deeper
    joined: list[str] = []
    for line in summary:
        if line.startswith("      ") and joined:
            joined[-1] += "  " + line.strip()
        else:
            joined.append(line)
    summary = joined
    assert summary[0].startswith("moe_fused_gmm: mode B: ")
    diffed = re.findall(r"^\+\+\+ b/(\S+)", res.stdout, re.M)
    assert summary[1].startswith(f"{len(diffed)} file(s), by layer (paths under ")
    # every file of the diff is listed once, under its layer (past one screen, counted)
    rows = [ln for ln in summary[2:] if ln.startswith("  ") and not ln.startswith("  ... ")]
    more = next((int(m.group(1)) for ln in summary if (m := re.match(r"  \.\.\. and (\d+) more", ln))), 0)
    listed = [w.rstrip(",") for ln in rows for w in ln.split("  ")[-1].split(", ")]
    assert len(listed) + more == len(diffed) == len(set(listed)) + more
    layers = {ln.split("  ")[1].strip() for ln in rows}
    assert {"kernel points", "op-def", "build hook", "python callers", "generated"} <= layers
    # points per file: the B points the diff adds to it
    for ln in rows:
        m = re.search(r"(\d+) points?  (\S+)$", ln)
        if m is None:
            continue
        added = re.findall(r"^\+.*TRACE_POINT\(\"[^\"]*\", \"B\"\)", _file_diff(res.stdout, m.group(2)), re.M)
        assert len(added) == int(m.group(1)), ln
    assert any(re.search(r"\d+ points?  ", ln) for ln in rows)
    # labels per core type, as the plan counts them
    plan = plan_operator(repo / OP)
    expected = ", ".join(f"{core} {len(labels)}" for core, labels in sorted(plan.per_core.items()))
    assert summary[-1] == f"labels per core type: {expected}"
    assert len(summary) <= 40  # one screen
    # the diff alone is on stdout (what `git apply` reads), the summary nowhere in it
    assert res.stdout.startswith("diff --git ") and summary[0] not in res.stdout


def _file_diff(diff: str, rel: str) -> str:
    """The part of the diff for the file whose path ends in `rel`."""
    parts = re.split(r"^(?=diff --git )", diff, flags=re.M)
    return next((p for p in parts if re.search(r"^\+\+\+ b/\S*" + re.escape(rel) + r"$", p, re.M)), "")
