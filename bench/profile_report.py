"""Profile `report`'s work on a trace in-process (load_spans, build_report, format_text),
in a process set up as the CLI's fast path sets up a reader (no cyclic GC, freed memory
kept): top 30 by cumulative time. What bench/results.md cites as what is left of the
readers' time (issue #28).

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
    from optrace.runtime.formats import load_spans
    from optrace.runtime.report import build_report, format_text

    profile = cProfile.Profile()
    profile.enable()
    table = load_spans(args.trace, None, None)
    format_text(build_report(table, top=10))
    profile.disable()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
