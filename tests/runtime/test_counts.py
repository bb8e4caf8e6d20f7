"""Ranks, launches, cores and spans are counted apart and printed the same way by every
command: a rank file is one launch of one rank, so a 2-rank × 8-launch directory has 2
ranks, 8 launches and the cores of 2 ranks — not 16 ranks of 192 cores."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime.demo import write_demo


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def _check_counts(tmp_path: Path, ranks: int, launches: int, aic: int) -> None:
    demo = tmp_path / "demo"
    write_demo(demo, ranks=ranks, launches=launches, aic=aic, seed=2)
    cores = ranks * aic * 3  # twice as many AIV as AIC
    expected = f"{ranks} ranks × {launches} launches · {cores} cores"
    traces = [tmp_path / "t.json", tmp_path / "t.pftrace"]
    for trace in traces:
        result = invoke("collect", demo, "-o", trace)
        assert result.exit_code == 0, result.output
        assert f"{ranks} ranks, {launches} launches each" in result.output, result.output
    for source in (demo, *traces):
        text = invoke("report", source).output
        assert text.splitlines()[0].startswith(f"report for {source}: {expected} · "), text[:300]
    for trace in traces:
        shown = invoke("inspect", trace).output.splitlines()[0]
        assert f"trace · {expected} · clock" in shown, shown
        found = json.loads(invoke("inspect", trace, "--format", "json").output)
        assert (found["ranks"], found["launches"], found["cores"], found["rank_files"]) == (
            ranks, launches, cores, ranks * launches)
    page = tmp_path / "r.html"
    assert invoke("report", traces[1], "--html", page).exit_code == 0
    summary = re.search(r"<p>(\d+ ranks[^<]*)", page.read_text(encoding="utf-8"))
    assert summary is not None and summary.group(1).startswith(expected), summary
    compared = invoke("compare", demo, traces[0]).output
    assert f"before: {demo} ({launches} launches)" in compared and f"({launches} launches)" in compared


def test_two_ranks_of_eight_launches_are_counted_as_such(tmp_path: Path) -> None:
    _check_counts(tmp_path, 2, 8, 4)


@pytest.mark.slow
def test_sixty_four_ranks_of_a_hundred_launches_are_counted_as_such(tmp_path: Path) -> None:
    _check_counts(tmp_path, 64, 100, 1)
