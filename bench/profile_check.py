"""Profile `optrace check OPDIR` in-process, cold (an empty user cache, as bench_check.py's
cold row) against the same check with `--no-cache` (the repository index then already in
the cache, as bench_check.py's no-cache row has it): each under cProfile, after the
imports check itself makes before it runs (check_main's), and then the functions whose
cumulative time the cold check adds, largest first — what bench/results.md cites as what
is left of the cold check's target (issue #30: a cache so pre-commit stays fast).

Usage: python bench/profile_check.py OPDIR [--top 30]
(check OPDIR's repository as `optrace check` finds it; OPDIR instrumented or not)
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import os
import pstats
import tempfile
from pathlib import Path

from optrace.cli.check_fast import fast_main
from optrace.pipeline import check_output  # noqa: F401  (what check imports before it runs)


def profiled(argv: list[str], cache: Path) -> pstats.Stats:
    os.environ["XDG_CACHE_HOME"] = str(cache)
    gc.collect()
    profile = cProfile.Profile()
    with contextlib.redirect_stdout(io.StringIO()):  # the check's report: not this script's
        profile.enable()
        fast_main(argv)
        profile.disable()
    return pstats.Stats(profile, stream=io.StringIO())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("opdir", type=Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="optrace-profile-check-") as tmp:
        warm_index = Path(tmp) / "index-filled"
        with contextlib.redirect_stdout(io.StringIO()):
            fast_main(["--no-cache", str(args.opdir)])  # imports and first-use costs out (untimed)
            os.environ["XDG_CACHE_HOME"] = str(warm_index)
            fast_main(["--no-cache", str(args.opdir)])  # the repository index in this cache
        cold = profiled([str(args.opdir)], Path(tmp) / "empty")
        no_cache = profiled(["--no-cache", str(args.opdir)], warm_index)
    cold_cum = {k: v[3] for k, v in cold.stats.items()}  # type: ignore[attr-defined]
    plain_cum = {k: v[3] for k, v in no_cache.stats.items()}  # type: ignore[attr-defined]
    print(f"cold check {max(cold_cum.values()):.3f} s, check --no-cache {max(plain_cum.values()):.3f} s "
          "(cProfile's seconds: read the shares)\n")
    print(f"What the cold check adds, by cumulative time (top {args.top}):\n")
    keys = set(cold_cum) | set(plain_cum)
    added = sorted(((cold_cum.get(k, 0.0) - plain_cum.get(k, 0.0), k) for k in keys), reverse=True)
    for extra, (path, line, name) in added[: args.top]:
        print(f"{extra * 1000:8.1f} ms  (cold {cold_cum.get((path, line, name), 0.0) * 1000:7.1f}, no-cache "
              f"{plain_cum.get((path, line, name), 0.0) * 1000:7.1f})  {Path(path).name}:{line} {name}")
    out = io.StringIO()
    cold.stream = out  # type: ignore[attr-defined]
    cold.sort_stats("cumulative").print_stats(args.top)
    print("\nThe cold check, by cumulative time:\n" + out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
