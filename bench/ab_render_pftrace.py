"""`.pftrace`'s own part of collect, two checkouts in one process: `perfetto.render_rank`
of this tree against that of another (`--before DIR`, its `runtime/perfetto.py` loaded
beside this one), over the same decoded ranks, alternating rounds; each round lays out
every rank with fresh packet sequences (every core new to its rank, as in a collect of
one launch a rank). CPU per rank, min and median over the rounds. What bench/results.md
cites for a change to the encoder (session 32), where the whole collect's noise on this
machine hides a few percent of it.

Usage: python bench/ab_render_pftrace.py RANK_DIR --before DIR [--ranks 16] [--rounds 15]
(RANK_DIR: rank files and their point map, e.g. bench_collect's `generate` at 64 ranks)
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path
from types import ModuleType

from optrace.cli.start import prepare_collect_process

prepare_collect_process()  # as collect runs: no cyclic GC, freed memory kept

import optrace.runtime.perfetto as after  # noqa: E402
from optrace.runtime.decode import DecodeOptions, RankDecode, decode_rank  # noqa: E402
from optrace.runtime.pointmap import PointMap, load_point_map, resolve_point_map  # noqa: E402
from optrace.runtime.rankfile import read_rank_file  # noqa: E402


def load_before(top: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("optrace.runtime.perfetto_before",
                                                  top / "runtime" / "perfetto.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_round(module: ModuleType, decoded: list[RankDecode], point_map: PointMap) -> float:
    sequences = module.Sequences()
    started = time.process_time()
    for rank, ranked in enumerate(decoded):
        module.render_rank(rank, f"rank {rank}", ranked, point_map, sequences)
    return time.process_time() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ranks_dir", type=Path)
    parser.add_argument("--before", type=Path, required=True, help="the other checkout (its top folder)")
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    point_map = load_point_map(resolve_point_map(args.ranks_dir, None))
    files = sorted(args.ranks_dir.glob("rank*.pt"))[: args.ranks]
    decoded = [decode_rank(read_rank_file(path, rank), point_map, DecodeOptions())
               for rank, path in enumerate(files)]
    sides = {"before": load_before(args.before.resolve()), "after": after}
    spent: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, module in sides.items():
            spent[name].append(one_round(module, decoded, point_map))
    print(f"render_rank of {len(decoded)} ranks, {args.rounds} alternating rounds, CPU ms a rank")
    for name, times in spent.items():
        print(f"{name}: min {min(times) / len(decoded) * 1e3:.3f}, "
              f"median {statistics.median(times) / len(decoded) * 1e3:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
