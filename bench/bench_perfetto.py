"""Benchmark: Perfetto protobuf (``.pftrace``) against Chrome JSON, and how it is encoded.

1. Formats. ``optrace collect`` writes ``.json`` and ``.pftrace`` of the same generated
   runs (bench_collect's workload: 72 cores x 994 records a rank, legacy layout) at 8, 64
   and 512 ranks: bytes per record, wall time from process start (best of N, both
   formats alternating in the same session), peak memory (PSS summed over the command's
   processes, sampled every ms; bench_collect.MEASURE_MEMORY).
2. Encoders, on the 8-rank run, in one process, ranks decoded beforehand: optrace's numpy
   encoder (runtime/perfetto.py) against the same packets built as messages of the
   ``perfetto`` package's protos and serialised by ``protobuf`` (the library way: one
   message per packet); their bytes, and what the library would add to ``collect``: its
   import time and its install size.

Usage: python bench/bench_perfetto.py [--ranks 8,64,512] [--runs 10] [--checkout] [--keep DIR]
Prints markdown tables. Targets: <= 20 bytes per record at 8 ranks, time <= the
JSON path's, peak memory at 512 ranks <= 1.5x the 8-rank figure.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_collect import (  # noqa: E402
    _NEUTRAL_DIR,
    compile_bytecode,
    generate,
    installed_copy,
    measure_memory,
)

# Wall and CPU (user + system, the command's processes) of one run of a command.
TIMER = r"""
import json, resource, subprocess, sys, time
t = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
wall = time.perf_counter() - t
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": wall, "cpu": used.ru_utime + used.ru_stime, "rc": done.returncode}))
"""


def timed(command: list[str], output: Path) -> dict[str, float]:
    import json

    output.unlink(missing_ok=True)  # every run writes a new file (as bench_collect.measure)
    done = subprocess.run([sys.executable, "-c", TIMER, *command], capture_output=True, text=True,
                          check=True, cwd=_NEUTRAL_DIR)
    result: dict[str, float] = json.loads(done.stdout)
    if result["rc"] not in (0, 1):
        raise SystemExit(f"{command} failed with exit code {result['rc']}")
    return result


def best_times(runs: int, commands: dict[str, tuple[list[str], Path]]) -> dict[str, dict[str, float]]:
    """Best wall and best CPU time of each command over ``runs`` rounds, the commands
    alternating (a shared machine: the CPU time is the steadier of the two)."""
    best = {name: {"wall": float("inf"), "cpu": float("inf")} for name in commands}
    for _ in range(runs):
        for name, (command, output) in commands.items():
            result = timed(command, output)
            for key in ("wall", "cpu"):
                best[name][key] = min(best[name][key], result[key])
    return best


def formats(work: Path, sizes: list[int], runs: int, script: list[str]) -> list[dict[str, Any]]:
    rows = []
    for ranks in sizes:
        data = work / f"r{ranks}"
        data.mkdir(exist_ok=True)
        records = generate(data, ranks, 72) * ranks * 72
        outputs = {"json": work / f"r{ranks}.json", "pftrace": work / f"r{ranks}.pftrace"}
        commands = {name: ([*script, "collect", str(data), "-o", str(path)], path)
                    for name, path in outputs.items()}
        n = runs if ranks <= 8 else max(2, runs // 3) if ranks <= 64 else 2
        times = best_times(n, commands)
        row: dict[str, Any] = {"ranks": ranks, "records": records, "runs": n}
        for name, (command, path) in commands.items():
            memory = measure_memory(1 if ranks > 64 else 3, command, path)
            row[name] = {**times[name], "bytes": path.stat().st_size, "pss_kb": memory["pss_kb"]}
            path.unlink()
        shutil.rmtree(data)
        rows.append(row)
        print(f"  {ranks} ranks done", file=sys.stderr, flush=True)
    return rows


# ----------------------------------------------------------------------------- library


def library_trace(decoded: list[Any], point_map: Any) -> bytes:
    """The packets optrace writes, as protobuf messages of Perfetto's protos."""
    import numpy as np
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    from optrace.runtime import perfetto

    trace = pb.Trace()
    root = trace.packet.add().track_descriptor
    root.uuid, root.process_ordering, root.thread_ordering = 0, 1, 1
    sequence = 0
    for pid, rank in enumerate(decoded):
        spans = rank.spans
        process = trace.packet.add().track_descriptor
        process.uuid = perfetto.process_uuid(pid)
        process.process.pid, process.process.process_name = pid, f"Rank {pid}"
        process.sibling_order_rank = pid
        b_at, e_at = perfetto.event_places(spans.depth, None, rank)
        span_of = np.empty(2 * b_at.size, dtype=np.int64)
        span_of[b_at] = span_of[e_at] = np.arange(b_at.size)
        is_b = np.zeros(2 * b_at.size, dtype=bool)
        is_b[b_at] = True
        time_of = np.where(is_b, spans.start[span_of], spans.end[span_of])
        for core in rank.cores:
            sequence += 1
            uuid = perfetto.thread_uuid(pid, core.slot)
            thread = trace.packet.add().track_descriptor
            thread.uuid, thread.parent_uuid = uuid, perfetto.process_uuid(pid)
            thread.sibling_order_rank = core.slot
            thread.thread.pid, thread.thread.tid, thread.thread.thread_name = pid, core.slot, core.name
            state = trace.packet.add()
            state.trusted_packet_sequence_id, state.sequence_flags = sequence, 1
            state.trace_packet_defaults.timestamp_clock_id = 64
            state.trace_packet_defaults.track_event_defaults.track_uuid = uuid
            points = np.unique(core.point)
            for label in np.unique(point_map.label_index[points]).tolist():
                state.interned_data.event_names.add(iid=label + 1, name=point_map.labels[label])
            for name, iid in perfetto.ANNOTATIONS.items():
                state.interned_data.debug_annotation_names.add(iid=iid, name=name)
            state.interned_data.event_categories.add(iid=perfetto.LAUNCH_CATEGORY_IID, name="optrace.launch")
            for position in points.tolist():
                p = point_map.points[int(point_map.ids[position])]
                state.interned_data.source_locations.add(
                    iid=position + 1, file_name=p.file, line_number=p.line)
            clock = trace.packet.add()
            clock.trusted_packet_sequence_id = sequence
            clock.clock_snapshot.clocks.add(
                clock_id=64, timestamp=0, is_incremental=True, unit_multiplier_ns=20)
            clock.clock_snapshot.clocks.add(clock_id=6, timestamp=int(core.start[0]) * 20)
            lo = int(np.searchsorted(spans.slot, core.slot))
            first, last = 2 * lo, 2 * (lo + core.start.size)
            previous = int(time_of[first])
            launch = trace.packet.add()  # the launch's slice around the core's spans
            launch.timestamp, launch.trusted_packet_sequence_id = 0, sequence
            launch.track_event.type, launch.track_event.name = 1, "launch 0"
            launch.track_event.category_iids.append(perfetto.LAUNCH_CATEGORY_IID)
            for event in range(first, last):
                span = int(span_of[event])
                now = int(time_of[event])
                packet = trace.packet.add()
                packet.timestamp = now - previous
                previous = now
                packet.trusted_packet_sequence_id = sequence
                if is_b[event]:
                    packet.track_event.type = 1
                    packet.track_event.name_iid = int(spans.label[span]) + 1
                    packet.track_event.source_location_iid = int(spans.point[span]) + 1
                    high = int(spans.high[span])
                    if high:
                        packet.track_event.debug_annotations.add(name_iid=1, int_value=high >> 8)
                else:
                    packet.track_event.type = 2
            end = trace.packet.add()
            end.timestamp, end.trusted_packet_sequence_id, end.track_event.type = 0, sequence, 2
    return bytes(trace.SerializeToString())


def encoders(work: Path) -> dict[str, Any]:
    """numpy encoder vs protos + protobuf on the 8-rank run (ranks decoded beforehand)."""
    from optrace.runtime import perfetto
    from optrace.runtime.decode import decode_rank
    from optrace.runtime.pointmap import load_point_map
    from optrace.runtime.rankfile import find_rank_files, read_rank_file

    data = work / "enc"
    data.mkdir(exist_ok=True)
    records = generate(data, 8, 72) * 8 * 72
    point_map = load_point_map(data / "point_map.json")
    decoded = [decode_rank(read_rank_file(path, name.rank), point_map)
               for name, path in find_rank_files(data)]

    def ours() -> int:
        sequences = perfetto.Sequences()
        size = 0
        for pid, rank in enumerate(decoded):
            for chunk in perfetto.render_rank(pid, f"Rank {pid}", rank, point_map, sequences).chunks:
                size += len(chunk)
        return size

    def best(fn: Any, runs: int) -> tuple[float, Any]:
        times, result = [], None
        for _ in range(runs):
            started = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - started)
        return min(times), result

    ours_s, ours_bytes = best(ours, 5)
    library_s, library_bytes = best(lambda: len(library_trace(decoded, point_map)), 2)
    shutil.rmtree(data)
    python = sys.executable
    imports = min(_wall([python, "-c", "from perfetto.protos.perfetto.trace import perfetto_trace_pb2"])
                  for _ in range(5)) - min(_wall([python, "-c", "pass"]) for _ in range(5))
    installed = sum(_dist_bytes(name) for name in ("perfetto", "protobuf"))
    return {"records": records, "ours_s": ours_s, "ours_bytes": ours_bytes, "library_s": library_s,
            "library_bytes": library_bytes, "import_s": imports, "install_bytes": installed}


def _wall(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, cwd=_NEUTRAL_DIR)
    return time.perf_counter() - started


def _dist_bytes(name: str) -> int:
    dist = importlib.metadata.distribution(name)
    total = 0
    for file in dist.files or []:
        path = Path(str(dist.locate_file(file)))
        if path.is_file():
            total += path.stat().st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ranks", default="8,64,512")
    parser.add_argument("--runs", type=int, default=10, help="best of N at 8 ranks (fewer above)")
    parser.add_argument("--checkout", action="store_true", help="time the development checkout")
    parser.add_argument("--keep", type=Path, help="work here and keep it")
    parser.add_argument("--no-encoders", action="store_true", help="skip the protos + protobuf comparison")
    args = parser.parse_args()
    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="optrace-pftrace-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        installed = None if args.checkout else installed_copy(work)
        if installed is None:
            compile_bytecode()
            script = [sys.executable, "-m", "optrace"]
        else:
            script = [installed[1]]
        rows = formats(work, [int(r) for r in args.ranks.split(",")], args.runs, script)
        encoded = None if args.no_encoders else encoders(work)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    mib = 1024.0
    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; optrace "
          f"{'from a wheel in a fresh venv' if installed else 'from the checkout'}; 72 cores x 994 records "
          "a rank (bench_collect's workload)")
    print()
    print("| ranks | records | JSON: bytes/record, wall / CPU, peak memory "
          "| .pftrace: bytes/record, wall / CPU, peak memory | .pftrace / JSON: size, wall, CPU "
          "| per rank (.pftrace): bytes, CPU |")
    print("|---:|---:|---|---|---|---|")
    base = next((r["pftrace"]["pss_kb"] for r in rows if r["ranks"] == 8), None)
    for row in rows:
        j, p, records = row["json"], row["pftrace"], row["records"]
        print(f"| {row['ranks']} | {records:,} | {j['bytes'] / records:.1f} B, {j['wall']:.3f} / "
              f"{j['cpu']:.3f} s, {j['pss_kb'] / mib:.0f} MiB | **{p['bytes'] / records:.1f} B**, "
              f"**{p['wall']:.3f} / {p['cpu']:.3f} s**, **{p['pss_kb'] / mib:.0f} MiB** "
              f"| {p['bytes'] / j['bytes']:.2f}x, {p['wall'] / j['wall']:.2f}x, {p['cpu'] / j['cpu']:.2f}x "
              f"| {p['bytes'] / row['ranks'] / 1e6:.2f} MB, {1000 * p['cpu'] / row['ranks']:.1f} ms |")
    print()
    verdicts = []
    for row in rows:
        if row["ranks"] == 8:
            per = row["pftrace"]["bytes"] / row["records"]
            verdicts.append(f"<= 20 bytes/record at 8 ranks: {per:.1f} ({'met' if per <= 20 else 'NOT met'})")
        wall = row["pftrace"]["wall"] / row["json"]["wall"]
        cpu = row["pftrace"]["cpu"] / row["json"]["cpu"]
        verdicts.append(f"time <= JSON at {row['ranks']} ranks: wall {wall:.2f}x "
                        f"({'met' if wall <= 1 else 'NOT met'}), CPU {cpu:.2f}x "
                        f"({'met' if cpu <= 1 else 'NOT met'})")
        if base and row["ranks"] == 512:
            growth = row["pftrace"]["pss_kb"] / base
            verdicts.append(f"memory at 512 ranks <= 1.5x the 8-rank figure: {growth:.2f}x "
                            f"({'met' if growth <= 1.5 else 'NOT met'})")
    for verdict in verdicts:
        print(f"target: {verdict}")
    if encoded:
        e = encoded
        print()
        print("| encoder (8 ranks, 572,544 records, decoded beforehand) | encoding time | bytes "
              "| bytes/record | added to collect's start-up | added to the install |")
        print("|---|---:|---:|---:|---:|---:|")
        print(f"| **optrace's numpy encoder** (runtime/perfetto.py) | **{e['ours_s'] * 1000:.0f} ms** "
              f"| {e['ours_bytes']:,} | {e['ours_bytes'] / e['records']:.1f} | 0 | 0 |")
        print(f"| `perfetto` protos + `protobuf` {_version('protobuf')} (a message per packet; "
              f"{e['library_s'] / e['ours_s']:.0f}x slower) | {e['library_s'] * 1000:.0f} ms "
              f"| {e['library_bytes']:,} | {e['library_bytes'] / e['records']:.1f} "
              f"| {e['import_s'] * 1000:.0f} ms (importing perfetto_trace_pb2) "
              f"| {e['install_bytes'] / 1e6:.1f} MB |")


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    main()
