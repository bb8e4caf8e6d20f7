"""``collect --format parquet`` (runtime/dataset.py): a Parquet dataset partitioned by rank,
written by DuckDB from the decoder's arrays, whole or not at all."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.cli.collect_fast import run_collect
from optrace.runtime import dataset
from optrace.runtime.collect import CollectOptions, collect
from optrace.runtime.demo import write_demo
from optrace.runtime.errors import ProfilingInputError
from optrace.runtime.spans import load_trace

duckdb = pytest.importorskip("duckdb", reason="DuckDB is the [query] extra (the [test] extra brings it)")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("demo")
    write_demo(root / "demo", ranks=2, launches=3, aic=2, seed=1)
    return root / "demo"


def _rows(directory: Path, sql: str) -> list[tuple[object, ...]]:
    files = f"read_parquet('{directory}/*/*.parquet', hive_partitioning = true)"
    rows: list[tuple[object, ...]] = duckdb.sql(sql.replace("spans", files)).fetchall()
    return rows


def test_partitions_columns_and_metadata(demo: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    result = collect(demo, out, CollectOptions(format="parquet"))
    assert result.written and result.exit_code == 0
    assert sorted(os.listdir(out)) == [dataset.MARKER, "rank=0", "rank=1"]
    assert os.listdir(out / "rank=1") == [dataset.PART_NAME]
    described = duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{out}/rank=0/{dataset.PART_NAME}', "
                           "hive_partitioning = false)").fetchall()
    assert [(r[0], r[1]) for r in described] == [(n, t) for n, t, _ in dataset.COLUMNS]
    assert _rows(out, "SELECT count(*) FROM spans") == [(result.events,)]
    assert _rows(out, "SELECT DISTINCT rank, launch FROM spans ORDER BY ALL") == [
        (r, k) for r in (0, 1) for k in (0, 1, 2)]
    kv = dict(duckdb.sql(f"SELECT decode(key), decode(value) FROM parquet_kv_metadata("
                         f"'{out}/rank=1/{dataset.PART_NAME}')").fetchall())
    assert kv["optrace_dataset_version"] == str(dataset.SCHEMA_VERSION)
    ranks = json.loads(kv["optrace_ranks"])
    assert [(e["rank"], e["launch"]) for e in ranks] == [(1, 0), (1, 1), (1, 2)]
    assert json.loads(kv["optrace_clock_mhz"]) == {"0": 50.0, "1": 50.0, "2": 50.0}
    assert json.loads(kv["optrace_alignment"])["method"] == "anchors"
    points = json.loads(kv["optrace_point_map"])["points"]
    assert {p["label"] for p in points.values()} >= {"processing", "processing gmm"}
    marker = json.loads((out / dataset.MARKER).read_text())
    assert marker["version"] == dataset.SCHEMA_VERSION and marker["columns"][0]["name"] == "rank"


def test_spans_are_the_traces(demo: Path, tmp_path: Path) -> None:
    """Every span at the time the JSON trace of the same data puts it (ns), with its label."""
    collect(demo, tmp_path / "ds", CollectOptions(format="parquet"))
    collect(demo, tmp_path / "t.json")
    table = load_trace(tmp_path / "t.json")
    from_trace = sorted(zip([table.labels[i] for i in table.label.tolist()],
                            (table.ts * 1000).round().astype(int).tolist(),
                            (table.dur * 1000).round().astype(int).tolist(), strict=True))
    assert _rows(tmp_path / "ds", "SELECT label, start_ns, dur_ns FROM spans ORDER BY ALL") == from_trace


def test_parent_labels_and_loop_index(demo: Path, tmp_path: Path) -> None:
    collect(demo, tmp_path / "ds", CollectOptions(format="parquet"))
    parents = dict(_rows(tmp_path / "ds", "SELECT DISTINCT label, parent_label FROM spans"))
    assert parents["processing"] is None
    assert parents["processing gmm"] == "processing"
    assert all(parents[label] == label.rsplit(" ", 1)[0] for label in parents if label.count(" "))
    # A loop's iterations are numbered from 0 on each core of each launch; a span of a
    # point without an index has none.
    loops = _rows(tmp_path / "ds", "SELECT min(loop_index), max(loop_index), count(*) FILTER (loop_index IS "
                  "NULL) FROM spans WHERE label = 'processing gmm'")
    assert loops[0][:2] == (0, 3) and loops[0][2] == 0
    assert _rows(tmp_path / "ds", "SELECT count(loop_index) FROM spans WHERE depth = 0") == [(0,)]


def test_filters_apply(demo: Path, tmp_path: Path) -> None:
    collect(demo, tmp_path / "ds", CollectOptions(format="parquet", cores=lambda kind, _: kind == "AIC",
                                                  labels=["processing gmm"]))
    kept = _rows(tmp_path / "ds", "SELECT DISTINCT core_type, label FROM spans")
    assert kept == [("AIC", "processing gmm")]


def test_a_dataset_is_replaced_whole(demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "ds"
    collect(demo, out, CollectOptions(format="parquet", ranks=frozenset({0})))
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    calls = 0
    real = dataset.rank_columns

    def failing(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        if calls == 4:  # rank 1's first launch: rank 0's file is written already
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(dataset, "rank_columns", failing)
    with pytest.raises(ProfilingInputError, match="No space left"):
        collect(demo, out, CollectOptions(format="parquet"))
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(os.listdir(tmp_path)) == ["ds"]  # no temporary left
    monkeypatch.setattr(dataset, "rank_columns", real)
    collect(demo, out, CollectOptions(format="parquet"))
    assert sorted(os.listdir(out)) == [dataset.MARKER, "rank=0", "rank=1"]
    assert sorted(os.listdir(tmp_path)) == ["ds"]


@pytest.mark.parametrize("setup, message", [
    (lambda p: (p.mkdir(), (p / "notes.txt").write_text("mine")), "not an optrace dataset"),
    (lambda p: p.write_text("a file"), "not a directory"),
    (lambda p: p.symlink_to(p.parent), "symlink"),
])
def test_refused_outputs_are_left_alone(demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       setup: object, message: str) -> None:
    out = tmp_path / "ds"
    setup(out)  # type: ignore[operator]
    before = sorted(os.listdir(tmp_path))
    assert run_collect(demo, out, format="parquet") == 2
    assert message in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == before


def test_the_profiling_directory_is_refused(demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(os.listdir(demo))
    assert run_collect(demo, demo, format="parquet") == 2
    assert "not an optrace dataset" in capsys.readouterr().err
    assert sorted(os.listdir(demo)) == before


@pytest.mark.parametrize("extra, message", [
    ({"split": "rank"}, "--split splits a trace file"),
    ({"merge": [Path("trace_view.json")]}, "--merge writes one trace"),
    ({"format": "csv"}, "--format must be json, perfetto or parquet"),
])
def test_options_a_dataset_cannot_take(demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       extra: dict[str, object], message: str) -> None:
    options: dict[str, object] = {"format": "parquet", **extra}
    assert run_collect(demo, tmp_path / "ds", **options) == 2  # type: ignore[arg-type]
    assert message in capsys.readouterr().err
    assert not (tmp_path / "ds").exists()


def test_without_duckdb_says_which_extra(demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "duckdb", None)
    assert run_collect(demo, tmp_path / "ds.parquet") == 2
    assert "pip install 'ascend-optrace[query]'" in capsys.readouterr().err
    assert not (tmp_path / "ds.parquet").exists()


def _tampered(good: Path, out: Path, select: str) -> Path:
    """A copy of the dataset `good` whose rank 0 part is rewritten by `select` (over its
    rows, as `part`): a part another tool wrote, or one edited by hand."""
    shutil.copytree(good, out)
    part = out / "rank=0" / dataset.PART_NAME
    connection = duckdb.connect()
    connection.execute(f"CREATE TABLE part AS SELECT * FROM read_parquet('{part}')")
    part.unlink()
    connection.execute(f"COPY ({select}) TO '{part}' (FORMAT parquet)")
    connection.close()
    return out


@pytest.mark.parametrize("case, words", [
    ("no label column", "`label` is missing"),
    ("a NULL duration", "spans without a `dur_ns` (NULL)"),
    ("a NULL label", "spans without a `label` (NULL)"),
    ("a negative duration", "a span of negative `dur_ns`"),
    ("a rank past 31 bits", "not a rank's folder"),
    ("a rank with a leading zero", "not a rank's folder"),
])
def test_a_tampered_dataset_is_refused_naming_it(demo: Path, tmp_path: Path, case: str, words: str) -> None:
    """A part without a column, NULL where every span has a value, a negative duration, a
    folder that is no rank's (`rank=01` beside `rank=1`: every span twice): report and
    compare exit 2 naming the dataset (they raised from DuckDB or the arithmetic: exit 3)."""
    good = tmp_path / "good"
    collect(demo, good, CollectOptions(format="parquet"))
    bad = tmp_path / "bad"
    columns = [name for name, _, _ in dataset.COLUMNS]
    if case == "no label column":
        _tampered(good, bad, f"SELECT {', '.join(c for c in columns if c != 'label')} FROM part")
    elif case.startswith("a NULL"):
        name = "dur_ns" if "duration" in case else "label"
        first = "start_ns = (SELECT min(start_ns) FROM part)"
        _tampered(good, bad, "SELECT " + ", ".join(
            f"CASE WHEN {first} THEN NULL ELSE {c} END AS {c}" if c == name else c for c in columns)
            + " FROM part")
    elif case == "a negative duration":
        _tampered(good, bad, "SELECT " + ", ".join(
            "-dur_ns AS dur_ns" if c == "dur_ns" else c for c in columns) + " FROM part")
    else:
        shutil.copytree(good, bad)
        name = "rank=3000000000" if "31 bits" in case else "rank=01"
        shutil.copytree(bad / "rank=1", bad / name)
    runner = CliRunner()
    for args in (["report", str(bad)], ["compare", str(good), str(bad)]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and words in result.output and str(bad) in result.output, result.output
