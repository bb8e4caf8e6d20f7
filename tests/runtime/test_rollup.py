"""The readers' figures a rank at a time (runtime/rollup.py) equal those of one table of
every span: report's statistics, page and warnings, compare's launch times, inspect's
rows — exact where the terms are (counts, extrema, percentiles), to the last bits where a
sum over ranks is added rank by rank."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optrace.runtime.compare import launch_times, measured_run
from optrace.runtime.demo import write_demo
from optrace.runtime.formats import load_spans, span_chunks
from optrace.runtime.report import build_report, page_of, per_track_self, rolled_report, timeline_bins
from optrace.runtime.rollup import Durations, counted_percentiles
from optrace.runtime.save import reset_launch_counters
from optrace.runtime.spans import RunSettings, SpanTable, percentiles


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    reset_launch_counters()


@given(st.lists(st.integers(0, 40), min_size=1, max_size=300), st.integers(1, 7))
@settings(max_examples=200, deadline=None)
def test_percentiles_from_counts_are_numpys_to_the_bit(ticks: list[int], pieces: int) -> None:
    values = np.array(ticks, dtype=np.float64) / 50.0  # whole ticks of a 50 MHz clock, in µs
    durations = Durations()
    for part in np.array_split(values, pieces):
        durations.add(part)
    for percents in ((50, 99), (0, 100), (25, 75, 99.9)):
        assert durations.percentiles(percents) == percentiles(values, percents)
        assert percentiles(values, percents) == [float(np.percentile(values, p)) for p in percents]


def test_percentiles_of_nothing_are_refused() -> None:
    with pytest.raises(ValueError):
        counted_percentiles(np.zeros(0), np.zeros(0, np.int64), (50,))


def close(a: Any, b: Any, path: str = "") -> None:
    """Equal, floats to 1e-9 relative (a sum added rank by rank)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), (path, a, b)
    else:
        assert a == b, (path, a, b)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("rollup") / "d"
    reset_launch_counters()
    write_demo(directory, ranks=3, launches=6, aic=2, seed=4)
    return directory


def _report_fields(report: Any) -> dict[str, Any]:
    return {"counts": report.counts.__dict__, "processing": report.processing_total_us,
            "stats": [s.__dict__ for s in report.stats], "hotspots": [s.label for s in report.hotspots],
            "busy": report.busy_self_us, "warnings": report.warnings, "source": report.source}


def test_a_directory_rank_by_rank_reports_what_its_whole_table_does(demo: Path) -> None:
    whole = load_spans(demo)
    chunks, closing = span_chunks(demo)
    report, page = rolled_report(chunks, closing, top=5, page=True)
    expected = build_report(whole, top=5)
    close(_report_fields(report), _report_fields(expected))
    # exact: counts and percentiles are not sums
    assert [(s.count, s.p50_us, s.p99_us, s.tracks) for s in report.stats] == \
        [(s.count, s.p50_us, s.p99_us, s.tracks) for s in expected.stats]
    assert closing.processes == whole.processes == 18
    assert closing.settings == whole.settings
    # the page: every row's self time per phase, and the timeline of the rows it shows
    assert page is not None
    full = page_of(whole)
    phases = [s.label for s in expected.hotspots]
    assert page.tracks == whole.tracks
    np.testing.assert_allclose(per_track_self(page, phases)[0], per_track_self(full, phases)[0], rtol=1e-12)
    shown = len(page.shown.tracks)
    assert shown == min(96, len(whole.tracks))
    for got, want in zip(timeline_bins(page.shown, shown, phases), timeline_bins(whole, shown, phases),
                         strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_directory_rank_by_rank_has_the_launch_times_of_its_whole_table(demo: Path) -> None:
    run = measured_run(*span_chunks(demo))
    whole = launch_times(load_spans(demo))
    assert run.times.labels == whole.labels
    np.testing.assert_array_equal(run.times.values, whole.values)  # maxima: exact
    np.testing.assert_array_equal(run.times.present, whole.present)
    assert run.times.ranks_per_launch == whole.ranks_per_launch == [3] * 6


def _table(labels: list[str], rows: list[str], spans: list[tuple[int, int, float, float]]) -> SpanTable:
    label, track, ts, dur = (np.array(c) for c in zip(*spans, strict=True))
    return SpanTable(source="t", labels=labels, tracks=rows, processes=1, label=label.astype(np.int32),
                     track=track.astype(np.int32), ts=ts.astype(np.float64), dur=dur.astype(np.float64),
                     settings=RunSettings())


def test_a_label_path_is_judged_by_the_runs_parent_not_the_ranks() -> None:
    """Rank 0 ran `a b` inside `a`; rank 1 ran `a b c` outside any `a b` — but it never
    ran `a b`, so its cores are not contradicted (the whole table's rule), though its own
    labels would name `a` the parent of `a b c`, and `a b c` lies outside it there."""
    rank0 = _table(["a", "a b", "a b c"], ["Rank 0 / AIC 0"],
                   [(0, 0, 0.0, 10.0), (1, 0, 1.0, 5.0), (2, 0, 2.0, 1.0)])
    rank1 = _table(["a", "a b c"], ["Rank 1 / AIC 0"], [(0, 0, 0.0, 10.0), (1, 0, 20.0, 1.0)])
    whole = _table(["a", "a b", "a b c"], ["Rank 0 / AIC 0", "Rank 1 / AIC 0"],
                   [(0, 0, 0.0, 10.0), (1, 0, 1.0, 5.0), (2, 0, 2.0, 1.0), (0, 1, 0.0, 10.0),
                    (2, 1, 20.0, 1.0)])
    from optrace.runtime.spans import Closing

    report, _ = rolled_report([rank0, rank1], Closing("t"))
    assert report.warnings == build_report(whole).warnings == []
    # ... and where the run's parent did run on the rank, the child outside it is counted
    rank1b = _table(["a", "a b", "a b c"], ["Rank 1 / AIC 0"],
                    [(0, 0, 0.0, 10.0), (1, 0, 1.0, 2.0), (2, 0, 5.0, 1.0)])
    whole_b = _table(["a", "a b", "a b c"], ["Rank 0 / AIC 0", "Rank 1 / AIC 0"],
                     [(0, 0, 0.0, 10.0), (1, 0, 1.0, 5.0), (2, 0, 2.0, 1.0), (0, 1, 0.0, 10.0),
                      (1, 1, 1.0, 2.0), (2, 1, 5.0, 1.0)])
    report_b, _ = rolled_report([rank0, rank1b], Closing("t"))
    assert report_b.warnings == build_report(whole_b).warnings
    assert len(report_b.warnings) == 1 and "(1 spans)" in report_b.warnings[0]
