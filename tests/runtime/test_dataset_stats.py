"""``report`` and ``compare`` on a dataset (runtime/dataset_stats.py): computed in DuckDB,
the same figures as from a trace of the same data."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime import dataset
from optrace.runtime.collect import CollectOptions, collect
from optrace.runtime.compare import compare, comparison_json, launch_times
from optrace.runtime.dataset_stats import dataset_report, dataset_run
from optrace.runtime.demo import write_demo
from optrace.runtime.formats import load_spans
from optrace.runtime.report import build_report, format_text, report_json

duckdb = pytest.importorskip("duckdb", reason="DuckDB is the [query] extra (the [test] extra brings it)")
runner = CliRunner()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A before / after pair of demo data, each as a JSON trace and as a dataset."""
    root = tmp_path_factory.mktemp("stats")
    write_demo(root / "before", ranks=3, launches=6, aic=2, seed=0)
    write_demo(root / "after", ranks=3, launches=6, aic=2, seed=1, speedup=30)
    for name in ("before", "after"):
        collect(root / name, root / f"{name}.json")
        collect(root / name, root / f"{name}.ds", CollectOptions(format="parquet"))
    return root


def _close(a: Any, b: Any, path: str = "") -> None:
    """Equal, floats to 1e-9 relative (DuckDB sums in another order)."""
    if isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), f"{path}: {a} != {b}"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def test_report_numbers_are_the_traces(runs: Path) -> None:
    from_trace = build_report(load_spans(runs / "before.json"))
    from_dataset = dataset_report(runs / "before.ds")
    assert from_dataset.counts == from_trace.counts
    expected, found = report_json(from_trace), report_json(from_dataset)
    expected.pop("source"), found.pop("source")
    _close(expected, found)
    assert format_text(from_dataset).replace("before.ds", "before.json") == format_text(from_trace)


def test_launch_times_are_the_traces(runs: Path) -> None:
    trace = launch_times(load_spans(runs / "before.json"))
    found = dataset_run(runs / "before.ds").times
    order = [found.labels.index(label) for label in trace.labels]
    assert found.values[:, order] == pytest.approx(trace.values, rel=1e-12)
    assert found.ranks_per_launch == trace.ranks_per_launch


@pytest.mark.parametrize("before, after", [("before.ds", "after.ds"), ("before.ds", "after.json")])
def test_compare_is_the_traces(runs: Path, before: str, after: str) -> None:
    expected = comparison_json(compare(load_spans(runs / "before.json"), load_spans(runs / "after.json"),
                                       expect=20, fail_on_regression=5))
    b = dataset_run(runs / before) if before.endswith(".ds") else load_spans(runs / before)
    a = dataset_run(runs / after) if after.endswith(".ds") else load_spans(runs / after)
    found = comparison_json(compare(b, a, expect=20, fail_on_regression=5))
    for document in (expected, found):
        document.pop("before"), document.pop("after")
    _close(expected, found)
    assert found["verdict"] == "achieved"


def test_compare_refuses_other_clock_settings(runs: Path, tmp_path: Path) -> None:
    collect(runs / "after", tmp_path / "slow.ds", CollectOptions(format="parquet", clock_mhz=25.0))
    with pytest.raises(Exception, match="different clock settings"):
        compare(dataset_run(runs / "before.ds"), dataset_run(tmp_path / "slow.ds"))


def test_cli(runs: Path) -> None:
    result = runner.invoke(app, ["report", str(runs / "before.ds"), "--format", "json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["labels"][0]["label"] == "processing"
    refused = runner.invoke(app, ["report", str(runs / "before.ds"), "--html", str(runs / "r.html")])
    assert refused.exit_code == 2 and "--html / --png" in refused.stderr
    assert not (runs / "r.html").exists()
    pair = [str(runs / "before.ds"), str(runs / "after.ds")]
    result = runner.invoke(app, ["compare", *pair, "--expect", "20"])
    assert result.exit_code == 0 and "achieved" in result.stdout


def test_label_path_warning(tmp_path: Path) -> None:
    """A span outside the span its label names as its parent, on a core that ran it, is
    warned about as report warns about it in a trace."""
    out = tmp_path / "ds"
    (out / "rank=0").mkdir(parents=True)
    rows = [("processing", 0, None, 0, 100), ("processing gmm", 1, "processing", 10, 50),
            ("processing gmm", 0, None, 150, 200)]
    values = ", ".join(
        f"(0, NULL, 'AIC', 0, '{label}', {depth}, {'NULL' if parent is None else repr(parent)}, "
        f"{start}, {end}, {end - start}, NULL, 'ok')" for label, depth, parent, start, end in rows)
    columns = ", ".join(name for name, _, _ in dataset.COLUMNS)
    duckdb.execute(f"COPY (SELECT * FROM (VALUES {values}) AS t({columns})) TO "
                   f"'{out}/rank=0/{dataset.PART_NAME}' (FORMAT parquet)")
    (out / dataset.MARKER).write_text(json.dumps(dataset.marker()))
    found = dataset_report(out)
    assert found.warnings == ["label path and nesting disagree: 'processing gmm' spans lie outside "
                              "'processing', which their label names as their parent (1 spans)"]


def test_the_datasets_reader_gives_the_traces_spans(runs: Path) -> None:
    """The registry's reader for Parquet: the same spans, rows and launches as the trace
    of the same data, so a page or ``inspect`` reads a dataset as it reads a trace."""
    from_trace = load_spans(runs / "before.json")
    from_dataset = load_spans(runs / "before.ds")
    assert from_dataset.ts.size == from_trace.ts.size
    assert sorted(from_dataset.launches) == sorted(from_trace.launches)
    assert from_dataset.settings == from_trace.settings
    assert from_dataset.depth.max() == from_trace.depth.max()
    expected, found = report_json(build_report(from_trace)), report_json(build_report(from_dataset))
    expected.pop("source"), found.pop("source")
    _close(expected, found)


def test_inspect_on_a_dataset_says_what_reads_one(runs: Path) -> None:
    """inspect reports rank files' slots and drops, which a dataset does not hold: exit 2
    naming the commands that read it, not "no rank*.pt files"."""
    result = runner.invoke(app, ["inspect", str(runs / "before.ds")])
    assert result.exit_code == 2
    assert "a Parquet dataset" in result.stderr and "optrace report" in result.stderr
