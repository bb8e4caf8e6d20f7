"""`compare`'s statistics: launches as the unit, bootstrap intervals, the verdict on an
interval, the regression gate — and its A/A false-positive rate and power."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from optrace.runtime.compare import (
    ACHIEVED,
    EXPECT_RANGE,
    INCONCLUSIVE,
    NOT_ACHIEVED,
    PARTIAL,
    REGRESSION_RANGE,
    OptionError,
    check_percent,
    compare,
    estimate_changes,
    launch_times,
    verdict_for_interval,
)
from optrace.runtime.errors import ProfilingInputError
from optrace.runtime.numbers import Range
from optrace.runtime.spans import RunSettings, SpanTable

LABELS = [f"label{i}" for i in range(8)]
LAUNCHES = 20
CV = 0.05
SEEDS = 200


def lognormal_launches(rng: np.random.Generator, launches: int = LAUNCHES, labels: int = len(LABELS),
                       cv: float = CV) -> np.ndarray:
    """Per-launch times [launches, labels] in µs, log-normal with coefficient of variation
    ``cv`` around a per-label mean (10, 20, ... µs)."""
    sigma = math.sqrt(math.log1p(cv * cv))
    means = 10.0 * np.arange(1, labels + 1)
    return means * rng.lognormal(-sigma * sigma / 2, sigma, size=(launches, labels))


def table(times: np.ndarray, source: str = "run", cores: int = 1) -> SpanTable:
    """A span table with one launch per row of ``times`` (one rank, ``cores`` cores): label
    j's span on each core, laid end to end; core 0 takes the row's time, the others less."""
    launches, n_labels = times.shape
    tracks = [f"Rank 0 (launch {k}) / AIV {c}" for k in range(launches) for c in range(cores)]
    label_col, track_col, ts_col, dur_col = [], [], [], []
    for k in range(launches):
        for c in range(cores):
            t = 0.0
            for j in range(n_labels):
                dur = times[k, j] * (1.0 if c == 0 else 0.5)
                label_col.append(j)
                track_col.append(k * cores + c)
                ts_col.append(t)
                dur_col.append(dur)
                t += dur
    return SpanTable(
        source=source, labels=LABELS[:n_labels], tracks=tracks, processes=launches,
        label=np.array(label_col, np.int32), track=np.array(track_col, np.int32),
        ts=np.array(ts_col), dur=np.array(dur_col), settings=RunSettings(),
    )


# ----------------------------------------------------------------------------- the unit


def test_launch_time_is_the_slowest_core_over_every_rank_of_the_launch() -> None:
    # launch 0 runs on two ranks; label a: core totals 3+1 (rank 0 AIC 0), 2 (rank 0 AIV 0),
    # 5 (rank 1 AIC 0) -> 5; label b only on rank 0 in launch 0, nowhere in launch 1.
    tracks = ["Rank 0 (launch 0) / AIC 0", "Rank 0 (launch 0) / AIV 0", "Rank 1 (launch 0) / AIC 0",
              "Rank 0 (launch 1) / AIC 0"]
    spans = [(0, 0, 3.0), (0, 0, 1.0), (0, 1, 2.0), (0, 2, 5.0), (1, 0, 7.0), (0, 3, 4.0)]
    t = SpanTable(
        source="x", labels=["a", "b", "unused"], tracks=tracks, processes=3,
        label=np.array([s[0] for s in spans], np.int32), track=np.array([s[1] for s in spans], np.int32),
        ts=np.arange(len(spans), dtype=float) * 10, dur=np.array([s[2] for s in spans]),
        settings=RunSettings(),
    )
    assert t.launches == ["Rank 0 (launch 0)", "Rank 1 (launch 0)", "Rank 0 (launch 1)"]  # by process
    t.launches, t.track_launch = ["launch 0", "launch 1"], np.array([0, 0, 0, 1], np.int32)
    times = launch_times(t)
    assert times.values.tolist() == [[5.0, 7.0, 0.0], [4.0, 0.0, 0.0]]
    assert times.present.tolist() == [True, True, False]
    assert times.ranks_per_launch == [2, 1]


# ----------------------------------------------------------------------------- verdict


@pytest.mark.parametrize(
    ("low", "high", "expect", "verdict"),
    [(15.0, 40.0, 30, ACHIEVED), (1.0, 1.5, 1, ACHIEVED), (-3.0, 0.0, 30, NOT_ACHIEVED),
     (2.0, 14.0, 30, PARTIAL), (0.0, 14.0, 30, INCONCLUSIVE), (2.0, 20.0, 30, INCONCLUSIVE),
     (-1.0, 20.0, 30, INCONCLUSIVE), (0.2, 0.9, 0, PARTIAL), (14.9, 14.9, 30, PARTIAL),
     (15.0, 15.0, -30, ACHIEVED)],
)
def test_verdict_on_the_interval_of_the_gain(low: float, high: float, expect: float, verdict: str) -> None:
    assert verdict_for_interval(low, high, expect) == verdict


@pytest.mark.parametrize(
    ("option", "value", "bounds"),
    [("--expect", math.nan, EXPECT_RANGE), ("--expect", math.inf, EXPECT_RANGE),
     ("--expect", 101.0, EXPECT_RANGE), ("--fail-on-regression", -1.0, REGRESSION_RANGE),
     ("--fail-on-regression", 1e4, REGRESSION_RANGE), ("--fail-on-regression", math.inf, REGRESSION_RANGE)],
)
def test_numeric_options_must_be_finite_and_in_range(option: str, value: float, bounds: Range) -> None:
    with pytest.raises(OptionError, match=f"{option} must be a finite number"):
        check_percent(option, value, bounds)


# ----------------------------------------------------------------------------- intervals


def test_intervals_are_reproducible_and_cover_a_planted_change() -> None:
    rng = np.random.default_rng(7)
    before, after = lognormal_launches(rng), lognormal_launches(rng) * 0.8
    first = estimate_changes(before, after)
    again = estimate_changes(before, after)
    assert first.low is not None and first.high is not None and again.low is not None
    assert np.array_equal(first.low, again.low)  # seeded
    # the median change against numpy's own median
    expected = 100 * (np.median(after, axis=0) / np.median(before, axis=0) - 1)
    assert np.allclose(first.change[0], expected)
    assert (first.low[0] < -20 + 5).all() and (first.high[0] > -20 - 5).all()
    assert (first.low <= first.change).all() and (first.change <= first.high).all()


def test_bootstrap_is_fast() -> None:
    rng = np.random.default_rng(0)
    before, after = lognormal_launches(rng, 200, 64), lognormal_launches(rng, 200, 64)
    start = time.perf_counter()
    estimate_changes(before, after)
    assert time.perf_counter() - start < 2.0  # 10,000 resamples of 200 launches x 64 labels


def test_few_launches_give_point_estimates_and_the_gate_refuses() -> None:
    rng = np.random.default_rng(1)
    before, after = table(lognormal_launches(rng, 4), "b"), table(lognormal_launches(rng, 20) * 0.5, "a")
    result = compare(before, after, label="label0", expect=30)
    assert not result.intervals and result.gain_interval is None
    assert all(c.median_interval is None for c in result.changes)
    assert result.verdict == ACHIEVED  # the point estimate: ~50 % >= 15 %
    assert any("fewer than 5 launches per run (4 before, 20 after)" in n for n in result.notes)
    with pytest.raises(ProfilingInputError, match="4 launches: --fail-on-regression needs at least 5"):
        compare(before, after, label="label0", fail_on_regression=5)


def test_compare_verdicts_on_generated_runs() -> None:
    rng = np.random.default_rng(2)
    before = lognormal_launches(rng)
    faster = compare(table(before), table(lognormal_launches(rng) * 0.7), label="label0", expect=30)
    assert faster.verdict == ACHIEVED and faster.gain_interval is not None
    assert faster.gain_interval[0] >= 15 and not faster.failed
    slower = compare(table(before), table(lognormal_launches(rng) * 1.2), label="label0", expect=30)
    assert slower.verdict == NOT_ACHIEVED and slower.failed
    same = compare(table(before), table(lognormal_launches(rng)), label="label0", expect=30)
    assert same.verdict in (NOT_ACHIEVED, INCONCLUSIVE) and same.failed
    small = compare(table(before), table(lognormal_launches(rng) * 0.95), label="label0", expect=30)
    assert small.verdict == PARTIAL  # clearly faster, clearly below 15 %


def test_compare_uses_the_slowest_core() -> None:
    rng = np.random.default_rng(3)
    times = lognormal_launches(rng)
    result = compare(table(times, cores=3), table(times * 1.5, cores=3), label="label0")
    change = result.changes[0]
    assert change.median_before_us == pytest.approx(float(np.median(times[:, 0])))
    assert change.median_change == pytest.approx(50.0)


# ----------------------------------------------------------------------------- A/A and power


def _flagged(before: np.ndarray, after: np.ndarray) -> list[str]:
    return compare(table(before), table(after), label="label0", fail_on_regression=0).regressions


@pytest.mark.slow  # a simulation: 200 seeds of A/A and A/B comparisons
def test_a_a_false_positive_rate_and_power() -> None:
    """Over 200 seeds of the fixed generator (log-normal, 5 % CV, 20 launches per run,
    8 labels): identical distributions flag <= 5 % of labels with --fail-on-regression 0;
    a 10 % regression planted in one label is flagged in >= 95 % of seeds."""
    false_positives = 0
    detected = 0
    for seed in range(SEEDS):
        rng = np.random.default_rng(seed)
        before, after = lognormal_launches(rng), lognormal_launches(rng)
        false_positives += len(_flagged(before, after))
        planted = after.copy()
        planted[:, 3] *= 1.10
        detected += "label3" in _flagged(before, planted)
    rate = false_positives / (SEEDS * len(LABELS))
    power = detected / SEEDS
    print(f"A/A false-positive rate {rate:.2%}, power {power:.1%}")
    assert rate <= 0.05
    assert power >= 0.95
