"""``optrace query DIR "SQL"`` (runtime/query.py, optrace/cli/query.py): SQL over a dataset
that reads the dataset and nothing else."""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest
from pftrace_check import read_pftrace
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime import dataset
from optrace.runtime.collect import CollectOptions, collect
from optrace.runtime.demo import write_demo
from optrace.runtime.query import PRESETS

pytest.importorskip("duckdb", reason="DuckDB is the [query] extra (the [test] extra brings it)")
runner = CliRunner()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("query")
    write_demo(root / "demo", ranks=3, launches=4, aic=2, seed=3)
    collect(root / "demo", root / "ds", CollectOptions(format="parquet"))
    collect(root / "demo", root / "trace.pftrace")
    return root


def query(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["query", *args])
    return result.exit_code, result.stdout, result.stderr


def test_count_is_the_pftraces_spans(data: Path) -> None:
    code, out, _ = query(str(data / "ds"), "SELECT count(*) AS n FROM spans", "--format", "json")
    assert code == 0
    parsed = read_pftrace(data / "trace.pftrace")  # Perfetto's own protos
    in_trace = sum(len(spans) for spans in parsed.spans.values())
    assert in_trace > 0
    assert json.loads(out) == [{"n": in_trace}]


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_csv('{outside}')",
    "SELECT * FROM read_json('{marker}')",  # inside the dataset's folder, but not the dataset
    "SELECT * FROM read_parquet('{ds}/*/*.parquet')",  # its files, but by a glob DuckDB was not given
    "COPY (SELECT * FROM spans) TO '{written}'",
    "ATTACH '{written}' AS other",
    "SET enable_external_access = true",
    "INSTALL httpfs",
])
def test_nothing_but_the_dataset_is_read_or_written(data: Path, tmp_path: Path, sql: str) -> None:
    outside = tmp_path / "secret.csv"
    outside.write_text("a,b\n1,2\n")
    written = tmp_path / "out.csv"
    text = sql.format(outside=outside, marker=data / "ds" / dataset.MARKER, ds=data / "ds", written=written)
    code, out, err = query(str(data / "ds"), text)
    assert code == 2, out
    assert "the query failed" in err and ("disabled" in err or "Cannot change" in err)
    assert "1,2" not in out and not written.exists()


def test_formats_hold_the_same_rows(data: Path) -> None:
    sql = "SELECT rank, launch, label, sum(dur_ns) AS ns FROM spans GROUP BY ALL ORDER BY ALL"
    _, as_json, _ = query(str(data / "ds"), sql, "--format", "json")
    _, as_csv, _ = query(str(data / "ds"), sql, "--format", "csv")
    code, as_text, _ = query(str(data / "ds"), sql)
    assert code == 0
    rows = json.loads(as_json)
    assert [{k: str(v) for k, v in r.items()} for r in rows] == list(csv.DictReader(io.StringIO(as_csv)))
    lines = as_text.splitlines()
    assert lines[0].split() == ["rank", "launch", "label", "ns"]
    assert lines[-1] == f"({len(rows)} rows)" and len(lines) == len(rows) + 3


def _per_rank(data: Path) -> dict[tuple[str, int], dict[int, int]]:
    _, out, _ = query(str(data / "ds"), "SELECT label, launch, rank, dur_ns FROM spans", "--format", "json")
    sums: dict[tuple[str, int], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for row in json.loads(out):
        sums[(row["label"], row["launch"])][row["rank"]] += row["dur_ns"]
    return sums


def test_straggler_preset(data: Path) -> None:
    """Its ratios are each rank's time against the median rank's, computed here in Python."""
    ratios: dict[tuple[str, int], list[float]] = defaultdict(list)
    for (label, _), by_rank in _per_rank(data).items():
        median = statistics.median(by_rank.values())
        for rank, ns in by_rank.items():
            ratios[(label, rank)].append(ns / median)
    expected = sorted(((round(statistics.median(x), 3), label, rank) for (label, rank), x in ratios.items()),
                      key=lambda t: -t[0])
    code, out, _ = query(str(data / "ds"), "--preset", "straggler", "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == min(20, len(expected))
    assert (rows[0]["vs_median"], rows[0]["label"], rows[0]["rank"]) == expected[0]
    assert [r["vs_median"] for r in rows] == [e[0] for e in expected[: len(rows)]]


def test_imbalance_and_phases_presets(data: Path) -> None:
    code, out, _ = query(str(data / "ds"), "--preset", "phases", "--format", "json")
    assert code == 0
    phases = {r["label"]: r for r in json.loads(out)}
    counting = "SELECT label, count(*) AS n FROM spans GROUP BY label"
    _, counted, _ = query(str(data / "ds"), counting, "--format", "json")
    spans = {r["label"]: r["n"] for r in json.loads(counted)}
    assert {label: r["spans"] for label, r in phases.items()} == spans
    code, out, _ = query(str(data / "ds"), "--preset", "imbalance", "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert {(r["label"], r["core_type"]) for r in rows} >= {("processing gmm", "AIC")}
    assert all(r["max_us"] >= r["p99_us"] >= 0 and r["max_vs_mean"] >= 1 for r in rows)
    assert all(r["ranks"] == 3 for r in rows)


def test_presets_are_documented_with_their_sql() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "runtime.md").read_text()
    for name, (_, sql) in PRESETS.items():
        assert f"--preset {name}" in docs
        assert sql in docs, f"docs/runtime.md does not show the {name} preset's SQL as it is"


@pytest.mark.parametrize("args, message", [
    ([], "give the SQL or --preset NAME"),
    (["SELECT 1", "--preset", "phases"], "give the SQL or --preset NAME"),
    (["--preset", "slowest"], "--preset must be straggler, imbalance, phases"),
    (["SELECT 1", "--format", "xml"], "--format must be text, csv, json"),
])
def test_usage(data: Path, args: list[str], message: str) -> None:
    code, _, err = query(str(data / "ds"), *args)
    assert code == 2 and message in err


def test_not_a_dataset(data: Path, tmp_path: Path) -> None:
    code, _, err = query(str(data / "demo"), "SELECT 1")
    assert code == 2 and "not an optrace dataset" in err
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / dataset.MARKER).write_text(json.dumps({"version": dataset.SCHEMA_VERSION + 1}))
    code, _, err = query(str(newer), "SELECT 1")
    assert code == 2 and "a newer optrace wrote it" in err


def test_spark_straggler_is_the_preset_in_spark_sql() -> None:
    """docs/runtime.md's Spark SQL is the preset with Spark's spellings, nothing else."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "runtime.md").read_text()
    spark = (PRESETS["straggler"][1].replace("arg_max(", "max_by(")
             .replace("USING (label, launch)", "ON p.label = t.label AND p.launch = t.launch"))
    assert f'spark.sql("""\n{spark}\n""")' in docs


def test_duckdb_memory_is_capped(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sql = "SELECT current_setting('memory_limit') AS m, current_setting('enable_progress_bar') AS bar"
    _, out, _ = query(str(data / "ds"), sql, "--format", "json")
    assert json.loads(out) == [{"m": "488.2 MiB", "bar": False}]
    monkeypatch.setenv("OPTRACE_DUCKDB_MEMORY", "100MB")
    _, out, _ = query(str(data / "ds"), sql, "--format", "json")
    assert json.loads(out)[0]["m"] == "95.3 MiB"
