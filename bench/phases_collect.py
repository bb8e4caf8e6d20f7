"""Where one `collect` spends its CPU, in-process, by phase: the placement pass, reading
the rank files, decoding, and each format's own part (JSON: `render_rank`, then the
rows formatted and written by the sink; `.pftrace`: `render_rank`, of it
`encode_events`, then the write). Timers around the functions (no profiler: cProfile
weighs `.pftrace`'s many small per-core calls far more than they cost). A process set
up as the CLI's collect sets it up; the output removed first, as the benchmarks do.
What bench/results.md cites as each format's own part (session 32).

Usage: python bench/phases_collect.py RANK_DIR OUTPUT(.json|.pftrace)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from optrace.cli.start import prepare_collect_process

prepare_collect_process()

import optrace.runtime.chrome as chrome  # noqa: E402
import optrace.runtime.collect as collect  # noqa: E402
import optrace.runtime.perfetto as perfetto  # noqa: E402

spent: dict[str, float] = {}


def timed(owner: Any, name: str, key: str) -> None:
    function: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[key] = spent.get(key, 0.0) + time.process_time() - started

    setattr(owner, name, wrapper)


def main() -> int:
    source, output = Path(sys.argv[1]), Path(sys.argv[2])
    timed(collect, "place_ranks", "place")
    timed(collect, "read_rank_file", "read")
    timed(collect, "decode_rank", "decode")
    timed(collect, "render_rank", "render_json")
    timed(chrome.EventSink, "write_rendered", "write_json")
    timed(perfetto, "render_rank", "render_pftrace")
    timed(perfetto, "encode_events", "encode_events")
    timed(perfetto.PerfettoTraceWriter, "write_rendered", "write_pftrace")
    output.unlink(missing_ok=True)
    started = time.process_time()
    collect.collect(source, output)
    total = time.process_time() - started
    print(f"{output.suffix}: total {total:.3f} s CPU; " + ", ".join(f"{k} {v:.3f}" for k, v in spent.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
