"""`optrace compare` as a CI gate: how often `--fail-on-regression 0` flags a label of two
runs from the same distribution (A/A), and how often it catches a planted regression
(power), with this generator — per-launch times log-normal with 5 %
coefficient of variation, 8 labels — at 20 launches per run and fewer. Also the time of
one comparison's statistics (8 labels, 20 launches, 10,000 resamples).

The statistics are `compare`'s own functions (`estimate_changes`, `flag_regressions`);
tests/runtime/test_compare_stats.py runs the 200-seed version through `compare()`.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from optrace.runtime.compare import estimate_changes, flag_regressions

LABELS = 8
CV = 0.05


def launches(rng: np.random.Generator, n: int) -> np.ndarray:
    sigma = math.sqrt(math.log1p(CV * CV))
    return 10.0 * np.arange(1, LABELS + 1) * rng.lognormal(-sigma * sigma / 2, sigma, size=(n, LABELS))


def flagged(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    est = estimate_changes(before, after)
    assert est.low is not None and est.high is not None
    return flag_regressions(est.low[0], est.high[0], 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=1000)
    ap.add_argument("--launches", default="5,10,20,50")
    args = ap.parse_args()
    rows = []
    for n in (int(x) for x in args.launches.split(",")):
        false_positives = 0
        caught = {5: 0, 10: 0}
        for seed in range(args.seeds):
            rng = np.random.default_rng(seed)
            before, after = launches(rng, n), launches(rng, n)
            false_positives += int(flagged(before, after).sum())
            for pct in caught:
                planted = after.copy()
                planted[:, 3] *= 1 + pct / 100
                caught[pct] += bool(flagged(before, planted)[3])
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            estimate_changes(before, after)
            times.append(time.perf_counter() - t0)
        rows.append((n, false_positives / (args.seeds * LABELS), caught[10] / args.seeds,
                     caught[5] / args.seeds, min(times)))
    print(f"| launches per run | A/A: labels flagged by `--fail-on-regression 0` ({args.seeds} seeds x "
          f"{LABELS} labels) | power: 10 % regression flagged | power: 5 % | statistics of one "
          "comparison (10,000 resamples, best of 20) | target |")
    print("|---:|---:|---:|---:|---:|---|")
    for n, rate, power10, power5, seconds in rows:
        target = "<= 5 %, >= 95 %" if n == 20 else ""
        print(f"| {n} | {100 * rate:.2f} % | {100 * power10:.1f} % | {100 * power5:.1f} % | "
              f"{1000 * seconds:.1f} ms | {target} |")

if __name__ == "__main__":
    main()
