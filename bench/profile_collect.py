"""Profile `collect` of the 8-rank benchmark (bench_collect's workload) to each output
format, in-process after the imports, as bench_floor.py's decoding measures it (a
process set up as the CLI's collect sets it up: prepare_collect_process). Each format
in a fresh process, its first collect (what a user's command pays), under cProfile:
the CPU seconds of that call and its top functions by own time. What bench/results.md
cites as what separates `.pftrace` from JSON (issue #28: `.pftrace` <= 1.05x JSON).

Usage: python bench/profile_collect.py [--ranks 8] [--top 25] [--formats json,pftrace]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_collect import generate  # noqa: E402

# In a fresh interpreter: the first collect of a process, as the command runs it.
ONE = r"""
import cProfile, io, pstats, sys, time
from optrace.cli.start import prepare_collect_process
prepare_collect_process()
from pathlib import Path
from optrace.runtime.collect import collect
source, output, top = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
profile = cProfile.Profile()
started = time.process_time()
profile.enable()
collect(source, output)
profile.disable()
spent = time.process_time() - started
text = io.StringIO()
pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(top)
print(f"{output.suffix}: {spent:.3f} s CPU under cProfile, {output.stat().st_size:,} bytes")
print(text.getvalue())
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--formats", default="json,pftrace")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="optrace-profile-collect-") as tmp:
        data = Path(tmp) / "ranks"
        data.mkdir()
        records = generate(data, args.ranks, 72) * args.ranks * 72
        print(f"collect of {args.ranks} ranks ({records:,} records), each format's first call in a fresh "
              f"process, after the imports")
        for fmt in args.formats.split(","):
            done = subprocess.run([sys.executable, "-c", ONE, str(data), str(Path(tmp) / f"trace.{fmt}"),
                                   str(args.top)], capture_output=True, text=True, check=True)
            print(done.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
