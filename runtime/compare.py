"""``optrace compare BEFORE AFTER``: per-label changes with bootstrap intervals, the
acceptance verdict and a regression gate for CI.

The unit is the kernel launch. A label's time in one launch is the largest, over the
cores of that launch (every rank's), of the label's total on one core: the launch ends
when its slowest core does, so that is the label's share of the launch's device time
(docs/runtime.md says why not the median or the sum). Per label and run this gives one
value per launch; ``compare`` reports the change of their median and p99, each with a
95 % percentile-bootstrap interval that resamples launches (the cores of one launch share
its inputs, its data placement and its neighbours' traffic: they are not independent
samples). With fewer than :data:`MIN_LAUNCHES` launches in a run there is no interval:
point estimates only, and the output says so.

One sign convention wherever a user reads (text, JSON, ``--expect``): a **gain** is the
relative reduction of a time, positive = faster. The verdict (docs/runtime.md, "compare")
is taken on the interval of the gain of the median of ``--label``: with T = max(expected / 2, 1) %,
*achieved* when its lower bound >= T, *not achieved* when its upper bound <= 0, *partial*
when it lies inside (0, T), *inconclusive* otherwise. With point estimates the interval
is the one value, which is the seed's rule; the output prints the rule it applied with the
numbers. ``--fail-on-regression PCT`` flags a label when the interval of its median's gain
lies below 0 and its upper bound is below −PCT (it got slower by more than PCT).

Runs recorded with different runtime settings (clock rate, barrier on / off) measure
different things and are refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ProfilingInputError
from .numbers import EXPECT_PERCENT, REGRESSION_PERCENT, NumberError, Range, check_optional
from .rollup import LaunchRollup
from .spans import PROCESSING, Closing, RunSettings, SpanTable

ACHIEVED = "achieved"
PARTIAL = "partial"
NOT_ACHIEVED = "not achieved"
INCONCLUSIVE = "inconclusive"

#: Fewer launches than this in either run: point estimates only.
MIN_LAUNCHES = 5
CONFIDENCE = 0.95
RESAMPLES = 10_000
#: The bootstrap's generator is seeded: the same two runs give the same intervals.
BOOTSTRAP_SEED = 20261201
#: --expect and --fail-on-regression: finite, within these bounds (percent).
EXPECT_RANGE = EXPECT_PERCENT
REGRESSION_RANGE = REGRESSION_PERCENT

Interval = tuple[float, float]


class OptionError(ValueError):
    """A numeric option out of its documented range (the CLI: exit 2)."""


def check_percent(option: str, value: float | None, bounds: Range) -> None:
    """The one number check (runtime/numbers.py), as OptionError for compare's callers."""
    try:
        check_optional(option, value, bounds)
    except NumberError as exc:
        raise OptionError(str(exc)) from None


def threshold_for(expect: float) -> float:
    """T = max(|expected| / 2, 1) percent."""
    return max(abs(expect) / 2.0, 1.0)


def verdict_for_interval(low: float, high: float, expect: float) -> str:
    """The verdict on the interval [low, high] of the gain (percent)."""
    threshold = threshold_for(expect)
    if low >= threshold:
        return ACHIEVED
    if high <= 0:
        return NOT_ACHIEVED
    if low > 0 and high < threshold:
        return PARTIAL
    return INCONCLUSIVE


def verdict_for(gain: float, expect: float) -> str:
    """The verdict on a point estimate: achieved / partial / not achieved."""
    return verdict_for_interval(gain, gain, expect)


# --------------------------------------------------------------------------- launches


@dataclass(frozen=True)
class LaunchTimes:
    """One run: per launch (rows) and label (columns), the label's time in µs."""

    labels: list[str]
    values: np.ndarray  # float64 [launches, labels]
    present: np.ndarray  # bool [labels]: the label has spans in this run
    ranks_per_launch: list[int]


def launch_times(table: SpanTable) -> LaunchTimes:
    """Per launch and label: the largest per-core total of the label over the launch's
    cores (0 in a launch where no core ran it). Launches without any span are left out."""
    rollup = LaunchRollup()
    rollup.add(table)
    return times_of(rollup)


def times_of(rollup: LaunchRollup) -> LaunchTimes:
    """The launch times of what ``rollup`` was given (a rank at a time or all at once)."""
    labels, values, present, ranks = rollup.times()
    return LaunchTimes(labels, values, present, ranks)


@dataclass(frozen=True)
class MeasuredRun:
    """A run whose launch times were computed where its spans are (a dataset, in DuckDB:
    runtime/dataset_stats.py) instead of from a table of every span."""

    source: str
    settings: RunSettings
    warnings: list[str]
    times: LaunchTimes


Run = SpanTable | MeasuredRun


def run_of(rollup: LaunchRollup, closing: Closing) -> MeasuredRun:
    """The run ``rollup`` was given the spans of, its source's settings and warnings."""
    return MeasuredRun(closing.source, closing.settings, closing.warnings, times_of(rollup))


def _launch_times(run: Run) -> LaunchTimes:
    return run.times if isinstance(run, MeasuredRun) else launch_times(run)


# --------------------------------------------------------------------------- statistics


def _quantile_of_resamples(sorted_values: np.ndarray, picks: np.ndarray, q: float) -> np.ndarray:
    """The q-quantile (numpy's default, linear) of every resample, without sorting one.

    ``sorted_values`` is [labels, n], each row sorted; ``picks`` is [resamples, n], each
    row the drawn positions, sorted. A resample of a sorted row is then sorted as well,
    so its quantile is read at two fixed positions. Returns [labels, resamples].
    """
    n = picks.shape[1]
    position = q * (n - 1)
    low = math.floor(position)
    high = min(low + 1, n - 1)
    weight = position - low
    below: np.ndarray = sorted_values[:, picks[:, low]]
    result: np.ndarray = below * (1 - weight) + sorted_values[:, picks[:, high]] * weight
    return result


def _resample_picks(rng: np.random.Generator, n: int, resamples: int) -> np.ndarray:
    """[resamples, n]: n positions drawn with replacement per resample, sorted."""
    return np.sort(rng.integers(0, n, size=(resamples, n)), axis=1)


@dataclass(frozen=True)
class ChangeEstimates:
    """Relative changes (percent, positive = slower) of each label's quantiles."""

    quantiles: tuple[float, ...]
    before: np.ndarray  # [quantiles, labels] µs
    after: np.ndarray  # [quantiles, labels] µs
    change: np.ndarray  # [quantiles, labels] percent (nan where before is 0)
    low: np.ndarray | None  # [quantiles, labels] interval bounds; None: point estimates
    high: np.ndarray | None


def estimate_changes(
    before: np.ndarray,
    after: np.ndarray,
    quantiles: tuple[float, ...] = (0.5, 0.99),
    *,
    intervals: bool = True,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = BOOTSTRAP_SEED,
) -> ChangeEstimates:
    """Point estimates and percentile-bootstrap intervals of the relative change of
    per-label quantiles from ``before`` [launches, labels] to ``after``.

    Launches are resampled with replacement, each run on its own; one set of draws
    serves every label (each label is resampled by launch; statistics across labels are
    not formed, so sharing the draws is harmless and saves the work).
    """
    if before.ndim != 2 or after.ndim != 2 or before.shape[1] != after.shape[1]:
        raise ValueError("before and after are [launches, labels] with the same labels")
    sorted_b = np.sort(before.T, axis=1)
    sorted_a = np.sort(after.T, axis=1)
    once_b = np.arange(before.shape[0])[None, :]  # every launch drawn once
    once_a = np.arange(after.shape[0])[None, :]
    point_b = np.stack([_quantile_of_resamples(sorted_b, once_b, q)[:, 0] for q in quantiles])
    point_a = np.stack([_quantile_of_resamples(sorted_a, once_a, q)[:, 0] for q in quantiles])
    with np.errstate(divide="ignore", invalid="ignore"):
        change = np.where(point_b > 0, 100.0 * (point_a / point_b - 1.0), np.nan)
    if not intervals:
        return ChangeEstimates(quantiles, point_b, point_a, change, None, None)
    rng = np.random.default_rng(seed)
    picks_b = _resample_picks(rng, before.shape[0], resamples)
    picks_a = _resample_picks(rng, after.shape[0], resamples)
    tail = (1.0 - confidence) / 2.0
    lows, highs = [], []
    for q in quantiles:
        b = _quantile_of_resamples(sorted_b, picks_b, q)
        a = _quantile_of_resamples(sorted_a, picks_a, q)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = 100.0 * (a / b - 1.0)
        # A resample whose before-quantile is 0 has no relative change: no interval.
        defined = np.isfinite(ratio).all(axis=1)
        ordered = np.sort(np.where(np.isfinite(ratio), ratio, 0.0), axis=1)
        every = np.arange(resamples)[None, :]
        lows.append(np.where(defined, _quantile_of_resamples(ordered, every, tail)[:, 0], np.nan))
        highs.append(np.where(defined, _quantile_of_resamples(ordered, every, 1.0 - tail)[:, 0], np.nan))
    return ChangeEstimates(quantiles, point_b, point_a, change, np.stack(lows), np.stack(highs))


def flag_regressions(low: np.ndarray, high: np.ndarray, percent: float) -> np.ndarray:
    """Labels whose change (percent, positive = slower) is significant — the interval
    lies above 0 — and whose lower bound exceeds ``percent``."""
    with np.errstate(invalid="ignore"):
        flagged: np.ndarray = (low > 0) & (low > percent) & np.isfinite(high)
    return flagged


# --------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class LabelChange:
    """One label's medians and p99s in the two runs compared, and how much it changed."""

    label: str
    median_before_us: float | None  # None: no span of the label in that run
    median_after_us: float | None
    p99_before_us: float | None
    p99_after_us: float | None
    median_change: float | None  # percent, positive = slower; None: new, gone or 0 before
    median_interval: Interval | None
    p99_change: float | None
    p99_interval: Interval | None
    regression: bool = False

    @property
    def gain(self) -> float | None:
        """Relative reduction of the median in percent (positive = faster)."""
        return _minus(self.median_change)

    @property
    def gain_interval(self) -> Interval | None:
        return _negated(self.median_interval)

    @property
    def p99_gain(self) -> float | None:
        return _minus(self.p99_change)

    @property
    def p99_gain_interval(self) -> Interval | None:
        return _negated(self.p99_interval)


#: A run's warnings compare repeats in its notes; report prints them all.
_WARNINGS_SHOWN = 5


def _first_warnings(warnings: list[str]) -> list[str]:
    """A run's first warnings, and how many more there are (its report prints them all)."""
    more = len(warnings) - _WARNINGS_SHOWN
    return warnings[:_WARNINGS_SHOWN] + ([f"... and {more} more warnings (optrace report lists them)"]
                                         if more > 0 else [])


def _minus(change: float | None) -> float | None:
    """The gain from a change: 0.0 - x, not -x, so that no change reads 0.0 and not -0.0
    (the sign a slowdown has, in the text and in the JSON)."""
    return None if change is None else 0.0 - change


def _negated(interval: Interval | None) -> Interval | None:
    """The interval of the gain from that of the change: one sign convention everywhere
    a user reads (text, JSON, --expect): positive = less time, faster."""
    return None if interval is None else (0.0 - interval[1], 0.0 - interval[0])


@dataclass(frozen=True)
class Comparison:
    """Two runs compared label by label, with how many launches each had."""

    before: str
    after: str
    label: str
    launches_before: int
    launches_after: int
    intervals: bool  # False: fewer than MIN_LAUNCHES launches in a run, point estimates
    changes: list[LabelChange]
    gain: float
    gain_interval: Interval | None
    expect: float | None
    verdict: str | None
    fail_on_regression: float | None
    regressions: list[str]
    notes: list[str] = field(default_factory=list)

    @property
    def threshold(self) -> float | None:
        return None if self.expect is None else threshold_for(self.expect)

    @property
    def rule(self) -> str | None:
        """The verdict's rule with this comparison's numbers, e.g. `lower bound 17.9 % ≥
        max(20 / 2, 1) = 10 %`; None without --expect."""
        if self.expect is None or self.verdict is None:
            return None
        t = threshold_for(self.expect)
        limit = f"max({abs(self.expect):g} / 2, 1) = {t:g} %"
        if self.gain_interval is None:
            low = high = self.gain
            lower = upper = "gain"
        else:
            low, high = self.gain_interval
            lower, upper = "lower bound", "upper bound"
        if self.verdict == ACHIEVED:
            return f"{lower} {low:.1f} % ≥ {limit}"
        if self.verdict == NOT_ACHIEVED:
            return f"{upper} {high:.1f} % ≤ 0 %"
        if self.verdict == PARTIAL:
            return (f"{lower} {low:.1f} % > 0 % and {upper} {high:.1f} % < {limit}" if lower != upper
                    else f"0 % < gain {low:.1f} % < {limit}")
        # Straddles 0 (neither all ≤ 0 nor all > 0) or T.
        where = "0 %" if low < 0 else f"{t:g} %"
        return (f"interval [{low:.1f}, {high:.1f}] % straddles {where} "
                f"(achieved needs its lower bound ≥ {limit})")

    @property
    def failed(self) -> bool:
        """Exit 1: a verdict other than achieved, or a flagged regression."""
        return (self.verdict not in (None, ACHIEVED)) or bool(self.regressions)


def check_settings(before: Run, after: Run) -> list[str]:
    """Refuse different clock / barrier settings; notes where they cannot be verified."""
    notes: list[str] = []
    b, a = before.settings, after.settings
    if b.clock_mhz and a.clock_mhz and b.clock_mhz != a.clock_mhz:
        raise ProfilingInputError(
            after.source,
            f"recorded at {sorted(a.clock_mhz)} MHz, {before.source} at {sorted(b.clock_mhz)} MHz: "
            "refusing to compare runs with different clock settings",
        )
    known_b = {x for x in b.barrier if x is not None}
    known_a = {x for x in a.barrier if x is not None}
    if known_b and known_a and known_b != known_a:
        def word(values: set[bool]) -> str:
            return "/".join("on" if v else "off" for v in sorted(values))

        raise ProfilingInputError(
            after.source,
            f"profiling barrier {word(known_a)}, but {word(known_b)} in {before.source}: "
            "refusing to compare runs with different runtime settings",
        )
    if None in b.barrier or None in a.barrier or not b.barrier or not a.barrier:
        notes.append("barrier setting not recorded for every rank: could not verify it matches")
    return notes


def _aligned(times: LaunchTimes, labels: list[str]) -> tuple[np.ndarray, np.ndarray]:
    index = {label: i for i, label in enumerate(times.labels)}
    values = np.zeros((times.values.shape[0], len(labels)))
    present = np.zeros(len(labels), dtype=bool)
    for j, label in enumerate(labels):
        if label in index:
            values[:, j] = times.values[:, index[label]]
            present[j] = times.present[index[label]]
    return values, present


def _opt(value: float, keep: bool) -> float | None:
    return float(value) if keep and math.isfinite(value) else None


def compare(
    before: Run,
    after: Run,
    label: str = PROCESSING,
    expect: float | None = None,
    fail_on_regression: float | None = None,
    *,
    resamples: int = RESAMPLES,
) -> Comparison:
    check_percent("--expect", expect, EXPECT_RANGE)
    check_percent("--fail-on-regression", fail_on_regression, REGRESSION_RANGE)
    notes = check_settings(before, after)
    times_b, times_a = _launch_times(before), _launch_times(after)
    labels = sorted(
        {lab for lab, p in zip(times_b.labels, times_b.present, strict=True) if p}
        | {lab for lab, p in zip(times_a.labels, times_a.present, strict=True) if p}
    )
    values_b, present_b = _aligned(times_b, labels)
    values_a, present_a = _aligned(times_a, labels)
    if label not in labels or not present_b[labels.index(label)]:
        raise ProfilingInputError(before.source, f"no '{label}' spans to compare")
    if not present_a[labels.index(label)]:
        raise ProfilingInputError(after.source, f"no '{label}' spans to compare")
    n_b, n_a = values_b.shape[0], values_a.shape[0]
    intervals = min(n_b, n_a) >= MIN_LAUNCHES
    if fail_on_regression is not None and not intervals:
        few, count = (before, n_b) if n_b < MIN_LAUNCHES else (after, n_a)
        raise ProfilingInputError(
            few.source,
            f"{count} launch{'es' if count != 1 else ''}: --fail-on-regression needs at least "
            f"{MIN_LAUNCHES} launches per run to tell a regression from noise",
        )
    estimates = estimate_changes(values_b, values_a, intervals=intervals, resamples=resamples)
    if estimates.low is not None and estimates.high is not None and fail_on_regression is not None:
        flagged = flag_regressions(estimates.low[0], estimates.high[0], fail_on_regression)
    else:
        flagged = np.zeros(len(labels), dtype=bool)
    changes: list[LabelChange] = []
    for j, lab in enumerate(labels):
        both = bool(present_b[j] and present_a[j])

        def interval(q: int, j: int = j, both: bool = both) -> Interval | None:
            if estimates.low is None or estimates.high is None or not both:
                return None
            low, high = float(estimates.low[q, j]), float(estimates.high[q, j])
            return (low, high) if math.isfinite(low) and math.isfinite(high) else None

        changes.append(LabelChange(
            label=lab,
            median_before_us=_opt(estimates.before[0, j], bool(present_b[j])),
            median_after_us=_opt(estimates.after[0, j], bool(present_a[j])),
            p99_before_us=_opt(estimates.before[1, j], bool(present_b[j])),
            p99_after_us=_opt(estimates.after[1, j], bool(present_a[j])),
            median_change=_opt(estimates.change[0, j], both),
            median_interval=interval(0),
            p99_change=_opt(estimates.change[1, j], both),
            p99_interval=interval(1),
            regression=bool(flagged[j] and both),
        ))
    chosen = next(c for c in changes if c.label == label)
    gain = chosen.gain if chosen.gain is not None else 0.0
    gain_interval = chosen.gain_interval
    verdict = None
    if expect is not None:
        low, high = gain_interval if gain_interval is not None else (gain, gain)
        verdict = verdict_for_interval(low, high, expect)
    if not intervals:
        notes.append(
            f"fewer than {MIN_LAUNCHES} launches per run ({n_b} before, {n_a} after): point estimates "
            "only, no intervals" + (" (the verdict too)" if expect is not None else "")
        )
    if set(times_b.ranks_per_launch) != set(times_a.ranks_per_launch):
        notes.append(f"ranks per launch differ ({_spread(times_b.ranks_per_launch)} before, "
                     f"{_spread(times_a.ranks_per_launch)} after)")
    return Comparison(
        before=before.source,
        after=after.source,
        label=label,
        launches_before=n_b,
        launches_after=n_a,
        intervals=intervals,
        changes=changes,
        gain=gain,
        gain_interval=gain_interval,
        expect=expect,
        verdict=verdict,
        fail_on_regression=fail_on_regression,
        regressions=[c.label for c in changes if c.regression],
        notes=notes + _first_warnings(before.warnings) + _first_warnings(after.warnings),
    )


def _spread(values: list[int]) -> str:
    low, high = min(values, default=0), max(values, default=0)
    return str(low) if low == high else f"{low}-{high}"


# --------------------------------------------------------------------------- output


def _us(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}µs"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:+.1f}%"


def _interval(value: Interval | None) -> str:
    return "" if value is None else f"[{value[0]:+.1f}, {value[1]:+.1f}]"


def _change(change: LabelChange, value: float | None, before: float | None, after: float | None) -> str:
    if before is None:
        return "new"
    if after is None:
        return "gone"
    return _pct(value)


def format_text(result: Comparison) -> str:
    lines = [f"before: {result.before} ({result.launches_before} launches)",
             f"after:  {result.after} ({result.launches_after} launches)", ""]
    what = ("time per launch: the slowest core's total of the label; median (p50) and p99 over launches;\n"
            "gain: how much less time after than before, in % of before (positive = faster)")
    if result.intervals:
        what += f";\n[brackets]: {100 * CONFIDENCE:g} % bootstrap interval of the gain, resampling launches"
    lines += [what, ""]
    rows = [("label", "p50 before", "p50 after", "gain p50", "", "p99 before", "p99 after", "gain p99", "")]
    for c in result.changes:
        rows.append((
            c.label + (" !" if c.regression else ""),
            _us(c.median_before_us), _us(c.median_after_us),
            _change(c, c.gain, c.median_before_us, c.median_after_us), _interval(c.gain_interval),
            _us(c.p99_before_us), _us(c.p99_after_us),
            _change(c, c.p99_gain, c.p99_before_us, c.p99_after_us), _interval(c.p99_gain_interval),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("-" * len(lines[-1]))
    gain = f"gain on '{result.label}': {result.gain:+.1f} %"
    if result.gain_interval is not None:
        gain += f" [{result.gain_interval[0]:+.1f}, {result.gain_interval[1]:+.1f}]"
    lines += ["", gain + " (less median time per launch; positive = faster)"]
    if result.expect is not None and result.rule is not None:
        lines.append(f"expected gain {abs(result.expect):g} %: {result.verdict}: {result.rule}")
    if result.fail_on_regression is not None:
        gate = f"regression gate {result.fail_on_regression:g} %: "
        rule = (f"a label fails when its gain's interval lies below 0 and its upper bound below "
                f"-{result.fail_on_regression:g} %")
        if result.regressions:
            gate += "FAILED: " + ", ".join(result.regressions) + f" (marked !; {rule})"
        else:
            gate += f"passed ({rule}: none does)"
        lines.append(gate)
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines) + "\n"


def _json_interval(value: Interval | None) -> list[float] | None:
    return None if value is None else [value[0], value[1]]


def comparison_json(result: Comparison) -> dict[str, Any]:
    return {
        "before": result.before,
        "after": result.after,
        "label": result.label,
        "launches": {"before": result.launches_before, "after": result.launches_after},
        "statistic": "per launch, the slowest core's total of the label; median and p99 over launches",
        "intervals": (
            {"confidence": CONFIDENCE, "method": "percentile bootstrap, resampling launches",
             "resamples": RESAMPLES, "seed": BOOTSTRAP_SEED} if result.intervals else None
        ),
        "sign": "gain: positive = less time after than before (faster), in % of before",
        "gain_percent": result.gain,
        "gain_interval": _json_interval(result.gain_interval),
        "expect_percent": None if result.expect is None else abs(result.expect),
        "threshold_percent": result.threshold,
        "verdict": result.verdict,
        "rule": result.rule,
        "fail_on_regression_percent": result.fail_on_regression,
        "regressions": result.regressions,
        "labels": [
            {"label": c.label,
             "median_before_us": c.median_before_us, "median_after_us": c.median_after_us,
             "median_gain_percent": c.gain,
             "median_gain_interval": _json_interval(c.gain_interval),
             "p99_before_us": c.p99_before_us, "p99_after_us": c.p99_after_us,
             "p99_gain_percent": c.p99_gain,
             "p99_gain_interval": _json_interval(c.p99_gain_interval),
             "regression": c.regression}
            for c in result.changes
        ],
        "notes": result.notes,
    }
