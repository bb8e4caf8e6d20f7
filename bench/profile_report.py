"""Profile `report`'s work on a trace in-process as the CLI does it (the trace a rank at a
time into report's rollup, then the text), in a process set up as the CLI's fast path
sets up a reader (no cyclic GC, freed memory kept): top 30 by cumulative time, then by
own time. What bench/results.md cites as what is left of the readers' time (issue #28).

Usage: python bench/profile_report.py TRACE [--top 30]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
from pathlib import Path

from optrace.cli.start import keep_freed_memory


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    gc.disable()
    keep_freed_memory()
    from optrace.runtime.formats import fold_spans
    from optrace.runtime.report import format_text, report_of
    from optrace.runtime.rollup import ReportRollup

    profile = cProfile.Profile()
    profile.enable()
    rollup, closing = fold_spans(args.trace, ReportRollup)
    format_text(report_of(rollup, closing.source, closing.warnings, 10))
    profile.disable()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)
    pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
