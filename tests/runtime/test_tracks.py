"""One track per core: a trace has a process per rank and a thread per core, whatever the
number of launches; each rank file is a top-level ``launch K`` slice on its cores, a
rank's launches one after the other in device-clock order (or end to end, said in the
metadata, where their clocks do not place them). Readers find a span's launch by the
launch slice holding it, and still read traces of the layout before (a process per rank
file, tests/runtime/data/TRACES_V1.md)."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pftrace_check import read_pftrace, same_spans
from rt_helpers import FP, rank_buffer, write_point_map
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime import perfetto_read
from optrace.runtime.compare import compare
from optrace.runtime.demo import CLOCK_MHZ, write_demo
from optrace.runtime.formats import load_spans
from optrace.runtime.launches import LAUNCH_CATEGORY, LAUNCH_GAP_NS
from optrace.runtime.report import build_report, report_json
from optrace.runtime.save import reset_launch_counters, save_profiling_data
from optrace.runtime.trace_inspection import inspect_trace

DATA = Path(__file__).parent / "data"
TICK_NS = 1000 / CLOCK_MHZ


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    reset_launch_counters()


def invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def json_trace(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def tracks_of(document: dict[str, Any]) -> tuple[dict[tuple[int, int], list[dict[str, Any]]],
                                                 dict[tuple[int, int], list[dict[str, Any]]]]:
    """Per (pid, tid): its launch slices by start, and its spans."""
    launches: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    spans: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for event in document["traceEvents"]:
        if event["ph"] == "X":
            into = launches if event.get("cat") == LAUNCH_CATEGORY else spans
            into[(event["pid"], event["tid"])].append(event)
    return {k: sorted(v, key=lambda e: e["ts"]) for k, v in launches.items()}, dict(spans)


def check_launches_in_order(launches: list[tuple[str, float, float]], spans: list[tuple[float, float]],
                            count: int) -> list[str]:
    """A core's launch slices (name, start, end; µs) follow each other without overlap, and
    every span of the core lies in one of them. Returns their names in time order."""
    assert len(launches) == count
    for (_, _, end), (_, start, _) in itertools.pairwise(launches):
        assert end <= start + 1e-9, launches
    for ts, end in spans:
        assert any(a - 1e-9 <= ts and end <= b + 1e-9 for _, a, b in launches), (ts, end)
    return [name for name, _, _ in launches]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("demo") / "d"
    write_demo(directory, ranks=2, launches=8, aic=2, seed=3)
    return directory


def test_two_ranks_of_eight_launches_are_two_processes_a_track_per_core(demo: Path, tmp_path: Path) -> None:
    cores = 2 + 4  # AIC and twice as many AIV
    json_out, pf_out = tmp_path / "t.json", tmp_path / "t.pftrace"
    for out in (json_out, pf_out):
        result = invoke("collect", demo, "-o", out)
        assert result.exit_code == 0, result.output
        assert f"2 ranks, 8 launches each, {2 * cores} cores with spans" in result.output
    names = [f"launch {k}" for k in range(8)]

    document = json_trace(json_out)
    processes = {e["pid"]: e["args"]["name"] for e in document["traceEvents"]
                 if e.get("name") == "process_name"}
    assert processes == {0: "Rank 0", 1: "Rank 1"}
    threads = {(e["pid"], e["tid"]) for e in document["traceEvents"] if e.get("name") == "thread_name"}
    launches, spans = tracks_of(document)
    assert set(launches) == set(spans) == threads and len(threads) == 2 * cores
    for key, found in launches.items():
        assert check_launches_in_order([(e["name"], e["ts"], e["ts"] + e["dur"]) for e in found],
                                       [(e["ts"], e["ts"] + e["dur"]) for e in spans[key]], 8) == names
    # The demo's launches are 200,000 ticks apart on every device: so they are here.
    firsts = [e["ts"] for e in launches[(0, 0)]]
    assert np.diff(firsts) == pytest.approx(200_000 / CLOCK_MHZ, abs=0.1)
    placed = [(r["rank"], r["launch"], r["placed"]) for r in document["otherData"]["ranks"]]
    assert placed == [(rank, k, "first" if k == 0 else "cycles") for rank in (0, 1) for k in range(8)]
    assert document["otherData"]["version"] == 2

    parsed = same_spans(pf_out, json_out, TICK_NS)  # the same spans and launch slices, with the protos
    assert sorted(t.name for t in parsed.tracks.values() if t.kind == "process") == ["Rank 0", "Rank 1"]
    assert len([t for t in parsed.tracks.values() if t.kind == "thread"]) == 2 * cores
    assert parsed.sequences == 2 * cores  # a core's sequence serves all its rank's launches
    for uuid, found in parsed.launches.items():
        assert check_launches_in_order([(s.name, s.start_ns / 1000, s.end_ns / 1000) for s in found],
                                       [(s.start_ns / 1000, s.end_ns / 1000) for s in parsed.spans[uuid]],
                                       8) == names
    assert parsed.metadata["optrace"]["version"] == 2

    # The repository's own readers: 8 launches, a row per core and launch, spans in them.
    read = perfetto_read.read_spans(pf_out)
    assert len(read.launches) == 8 * 2 * cores and len(read.spans) == sum(map(len, spans.values()))
    for source in (json_out, pf_out):
        table = load_spans(source)
        assert table.processes == 2 and table.trace_tracks == 2 * cores
        assert sorted(table.launches) == sorted(names) and len(table.tracks) == 8 * 2 * cores
        assert table.tracks[0] == "Rank 0 (launch 0) / AIC 0"
        assert "launch 0" not in table.labels  # launch slices are no spans
        assert np.bincount(table.track_launch).tolist() == [2 * cores] * 8
        found = inspect_trace(source)
        assert (found["ranks"], found["launches"], found["cores"], found["trace_tracks"]) == (2, 8, 2 * cores,
                                                                                              2 * cores)


def test_pftrace_bytes_per_record_pay_a_track_once(demo: Path, tmp_path: Path) -> None:
    """What a track costs (descriptor, interning, clock) is paid once per core of a rank,
    not once per launch: more launches add their records and a launch slice per core."""
    sizes = {}
    for launches in (2, 8):
        directory = tmp_path / f"d{launches}"
        write_demo(directory, ranks=2, launches=launches, aic=2, seed=3)
        assert invoke("collect", directory, "-o", tmp_path / f"{launches}.pftrace").exit_code == 0
        sizes[launches] = (tmp_path / f"{launches}.pftrace").stat().st_size
    per_launch = (sizes[8] - sizes[2]) / 6
    records_per_launch = 2 * 6 * 10  # 2 ranks x 6 cores x 10 records (5 spans) a core
    # Was 53.7 bytes a record, a track's cost included. Left: the records (~14 bytes),
    # each core's launch slice (~33 bytes for 10 records) and the rank files' metadata.
    assert per_launch / records_per_launch < 25, per_launch


@pytest.mark.parametrize("case, why", [
    ("overlap", "its cycles overlap rank000.pt's"),
    ("backwards", "its cycles go back to before rank000.pt's start (the counter restarted)"),
    ("clock", "clock 100 MHz, rank000.pt 50 MHz"),
    ("fingerprint", "build fingerprint 0x00000007, rank000.pt 0xc0ffee11"),
    # 6e16 ticks (1.2e18 ns) later: placed by them, its times would pass what readers take
    ("years", "its cycles lie 38 years after rank000.pt's end (another counter)"),
])
def test_launches_their_clocks_cannot_place_are_laid_end_to_end(tmp_path: Path, case: str, why: str) -> None:
    directory = tmp_path / "p"
    first = rank_buffer(aic=1, aiv=0, start=1_000_000).data  # one AIC core, spans ~130 ticks long
    second = {"overlap": 1_000_050, "backwards": 10_000, "years": 1_000_000 + 6 * 10**16}.get(case, 2_000_000)
    data = rank_buffer(aic=1, aiv=0, start=second, fingerprint=7 if case == "fingerprint" else FP).data
    save_profiling_data(first, 0, directory, aic_cores=1, clock_mhz=50.0)
    save_profiling_data(data, 0, directory, aic_cores=1, clock_mhz=100.0 if case == "clock" else 50.0)
    write_point_map(directory)
    json_out, pf_out = tmp_path / "t.json", tmp_path / "t.pftrace"
    options = ["--ignore-fingerprint"] if case == "fingerprint" else []
    for out in (json_out, pf_out):
        result = invoke("collect", directory, "-o", out, *options)
        assert "1 launch laid end to end" in result.output and f"rank000_launch1.pt: {why}" in result.output
    entries = json_trace(json_out)["otherData"]["ranks"]
    assert [(e["file"], e["placed"], e.get("placed_why")) for e in entries] == [
        ("rank000.pt", "first", None), ("rank000_launch1.pt", "end to end", why)]
    launches, spans = tracks_of(json_trace(json_out))
    (slices,) = launches.values()
    check_launches_in_order([(e["name"], e["ts"], e["ts"] + e["dur"]) for e in slices],
                            [(e["ts"], e["ts"] + e["dur"]) for e in spans[(0, 0)]], 2)
    # After the first launch's last end, the gap, then the second launch's first span
    # (3 ticks after its first core's start, the launch's tick 0).
    gap_us = slices[1]["ts"] - (slices[0]["ts"] + slices[0]["dur"])
    assert LAUNCH_GAP_NS / 1000 <= gap_us <= LAUNCH_GAP_NS / 1000 + 4 * TICK_NS / 1000
    parsed = same_spans(pf_out, json_out, TICK_NS if case != "clock" else {"Rank 0": TICK_NS})
    assert [s.name for s in next(iter(parsed.launches.values()))] == ["launch 0", "launch 1"]
    if case == "clock":
        assert parsed.units == {1}  # launches at two rates: the rank's clock counts ns


def test_tagged_launches_interleave_by_their_cycles(tmp_path: Path) -> None:
    """Two ops of a step (tags), saved in turn: their launches interleave on the device,
    and so they do in the trace, each slice named with its tag."""
    directory = tmp_path / "p"
    for step in range(3):
        for n, tag in enumerate(("dispatch", "combine")):
            data = rank_buffer(aic=1, aiv=0, start=1_000_000 + 10_000 * (2 * step + n)).data
            save_profiling_data(data, 0, directory, aic_cores=1, tag=tag)
    write_point_map(directory)
    assert invoke("collect", directory, "-o", tmp_path / "t.json").exit_code == 0
    launches, _ = tracks_of(json_trace(tmp_path / "t.json"))
    assert [e["name"] for e in launches[(0, 0)]] == [
        f"{tag}, launch {step}" for step in range(3) for tag in ("dispatch", "combine")]
    assert {e["placed"] for e in json_trace(tmp_path / "t.json")["otherData"]["ranks"]} == {"first", "cycles"}


def test_split_rank_writes_a_file_per_rank_with_all_its_launches(demo: Path, tmp_path: Path) -> None:
    for suffix in (".json", ".pftrace"):
        result = invoke("collect", demo, "-o", tmp_path / f"t{suffix}", "--split", "rank")
        assert result.exit_code == 0, result.output
        parts = sorted(p.name for p in tmp_path.glob(f"t.rank*{suffix}"))
        assert parts == [f"t.rank000{suffix}", f"t.rank001{suffix}"]
        for rank, part in enumerate(parts):
            table = load_spans(tmp_path / part)
            assert table.processes == 1 and len(table.launches) == 8 and table.trace_tracks == 6
            assert {t.split(" ", 2)[1] for t in table.tracks} == {str(rank)}


def test_split_by_size_keeps_each_part_a_complete_trace(demo: Path, tmp_path: Path) -> None:
    for suffix in (".json", ".pftrace"):
        result = invoke("collect", demo, "-o", tmp_path / f"t{suffix}", "--split", "8k")
        assert result.exit_code == 0, result.output
        parts = sorted(tmp_path.glob(f"t.part*{suffix}"))
        assert len(parts) > 3
        spans = 0
        for part in parts:  # a rank's launches continue from part to part: each names its tracks
            if suffix == ".pftrace":
                parsed = read_pftrace(part)
                assert parsed.launches and all(parsed.tracks[t.parent].kind == "process"
                                               for t in parsed.tracks.values() if t.kind == "thread")
            spans += load_spans(part).ts.size
        assert spans == 2 * 8 * 6 * 5


@pytest.mark.slow
def test_several_processes_write_a_ranks_launches_as_one(demo: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """-j N: the bytes of one process, launches placed by the first pass (so any process
    can write any launch), a bad file in the middle of a rank included."""
    from optrace.runtime import collect as collect_module

    monkeypatch.setattr(collect_module, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(collect_module, "idle_cpus", lambda: 64.0)
    monkeypatch.setattr(collect_module, "SIDE_BY_SIDE_BLOCK", 1)
    directory = tmp_path / "d"
    write_demo(directory, ranks=3, launches=5, aic=1, seed=1)
    (directory / "rank001_launch2.pt").write_bytes(b"not a zip")
    one = collect_module.collect(directory, tmp_path / "one.json", collect_module.CollectOptions(jobs=1))
    for jobs in (2, 3):
        collect_module.collect(directory, tmp_path / "j.json", collect_module.CollectOptions(jobs=jobs))
        assert (tmp_path / "j.json").read_bytes() == (tmp_path / "one.json").read_bytes()
    assert one.exit_code == 2
    launches, _ = tracks_of(json_trace(tmp_path / "one.json"))
    assert [e["name"] for e in launches[(1, 0)]] == ["launch 0", "launch 1", "launch 3", "launch 4"]


def test_merge_json_lays_the_framework_beside_a_ranks_launches(tmp_path: Path) -> None:
    """Both launches of rank 0 are in the framework's kernel process, each inside its
    kernel slice, with a flow from each kernel slice to its launch."""
    from test_merge import DEVICE_PID, device_spans, framework_trace, kernel

    from optrace.runtime.synth import write_ranks

    directory = tmp_path / "p"
    runs = [write_ranks(directory, [0], op="MoeDistributeDispatch", launch=k, at=100_000 * k, seed=k)
            for k in range(2)]
    trace = framework_trace(tmp_path / "t.json", [kernel(r, 0) for r in runs])
    result = invoke("collect", directory, "-o", tmp_path / "m.json", "--merge", trace)
    assert result.exit_code == 0, result.output
    document = json_trace(tmp_path / "m.json")
    kernels = sorted((e for e in document["traceEvents"] if e["ph"] == "X"
                      and e.get("name") == "MoeDistributeDispatch" and e["pid"] == DEVICE_PID),
                     key=lambda e: e["ts"])
    with_slices = device_spans(document, launches=True)
    for k, file in enumerate(["rank000.pt", "rank000_launch1.pt"]):
        events = with_slices[file]
        assert {e["pid"] for e in events} == {DEVICE_PID}
        assert {e["name"] for e in events if e.get("cat") == LAUNCH_CATEGORY} == {f"launch {k}"}
        assert kernels[k]["ts"] <= min(e["ts"] for e in events)
        assert max(e["ts"] + e["dur"] for e in events) <= kernels[k]["ts"] + kernels[k]["dur"] + 1e-6
    flows = [e for e in document["traceEvents"] if e["ph"] == "f" and e.get("cat") == "optrace"]
    assert len(flows) == 2
    table = load_spans(tmp_path / "m.json")
    assert set(table.launches) >= {"launch 0", "launch 1"}


# ----------------------------------------------------------------------------- earlier traces

V1 = {"json": DATA / "trace_v1.json", "pftrace": DATA / "trace_v1.pftrace"}


@pytest.fixture(scope="module")
def same_demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The demo the version-1 traces were collected from, collected now."""
    root = tmp_path_factory.mktemp("v2")
    write_demo(root / "demo", ranks=2, launches=3, aic=1, seed=0)
    out = {}
    for kind in ("json", "pftrace"):
        out[kind] = root / f"trace.{kind}"
        assert invoke("collect", root / "demo", "-o", out[kind]).exit_code == 0
    return out


@pytest.mark.parametrize("kind", ["json", "pftrace"])
def test_inspect_reads_a_trace_of_a_process_per_rank_file(kind: str, same_demo: dict[str, Path]) -> None:
    result = invoke("inspect", V1[kind])
    assert result.exit_code == 0, result.output
    assert "trace · 2 ranks × 3 launches · 6 cores · clock 50 MHz" in result.output.splitlines()[0]
    assert "Rank 1 (launch 2) / AIV 1" in result.output and "18 tracks, 90 spans" in result.output
    old, new = inspect_trace(V1[kind]), inspect_trace(same_demo[kind])
    for key in ("ranks", "launches", "cores", "rank_files", "spans", "dropped"):
        assert old[key] == new[key], key
    # A track per core and rank file then, per core now.
    assert (old["trace_tracks"], new["trace_tracks"]) == (18, 6)
    assert sorted(t["track"] for t in old["tracks"]) == sorted(t["track"] for t in new["tracks"])
    assert sorted(t["spans"] for t in old["tracks"]) == sorted(t["spans"] for t in new["tracks"])


@pytest.mark.parametrize("kind", ["json", "pftrace"])
def test_report_reads_a_trace_of_a_process_per_rank_file(kind: str, same_demo: dict[str, Path]) -> None:
    result = invoke("report", V1[kind])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"report for {V1[kind]}: 2 ranks × 3 launches · 6 cores · 90 spans")
    old, new = (report_json(build_report(load_spans(path))) for path in (V1[kind], same_demo[kind]))
    assert old["processing_total_us"] == pytest.approx(4974.54)
    assert old["labels"] == new["labels"] and old["hotspots"] == new["hotspots"]


def test_compare_reads_traces_of_a_process_per_rank_file(same_demo: dict[str, Path]) -> None:
    result = invoke("compare", V1["json"], V1["pftrace"])
    assert result.exit_code == 0, result.output
    assert "(3 launches)" in result.output
    old = compare(load_spans(V1["json"]), load_spans(V1["pftrace"]))
    across = compare(load_spans(V1["pftrace"]), load_spans(same_demo["json"]))
    launches = (old.launches_before, old.launches_after, across.launches_before, across.launches_after)
    assert launches == (3, 3, 3, 3)
    assert old.gain == pytest.approx(0.0, abs=1e-9) and across.gain == pytest.approx(0.0, abs=1e-9)


def test_the_version_1_samples_are_what_main_wrote() -> None:
    """The samples hold the layout they stand for: a process per rank file."""
    other = json_trace(V1["json"])["otherData"]
    assert other["version"] == 1 and len({r["pid"] for r in other["ranks"]}) == 6
    assert not any(e.get("cat") == LAUNCH_CATEGORY for e in json_trace(V1["json"])["traceEvents"])
    assert len(perfetto_read.read_spans(V1["pftrace"]).processes) == 6



def test_ranks_on_several_hosts_name_them(tmp_path: Path) -> None:
    """A rank's process names its host when the anchors say the ranks ran on several (a
    name that is not a host name is left out); rows and the per-rank sums still group by
    rank."""
    from optrace.runtime.pt_reader import load_pt
    from optrace.runtime.pt_writer import write_pt
    from optrace.runtime.spans import rank_of_track, run_counts

    directory = tmp_path / "d"
    write_demo(directory, ranks=3, launches=2, aic=1, seed=0)
    for path in sorted(directory.glob("rank*.pt")):
        rank = int(path.name[4:7])
        document = load_pt(path)
        document["meta"]["extra"]["anchor"]["host"] = ["node-a", "node-b.cluster", "bad host\x00"][rank]
        document["data"] = np.array(document["data"])
        with open(path, "wb") as handle:
            write_pt(document, handle)
    for out in (tmp_path / "t.json", tmp_path / "t.pftrace"):
        assert invoke("collect", directory, "-o", out).exit_code == 0
        table = load_spans(out)
        assert table.tracks[0] == "Rank 0 (node-a, launch 0) / AIC 0"
        assert {rank_of_track(t) for t in table.tracks} == {"Rank 0", "Rank 1", "Rank 2"}
        assert run_counts(table).text().startswith("3 ranks × 2 launches · 9 cores")
    parsed = read_pftrace(tmp_path / "t.pftrace")
    processes = sorted(t.name for t in parsed.tracks.values() if t.kind == "process")
    assert processes == ["Rank 0 (node-a)", "Rank 1 (node-b.cluster)", "Rank 2"]


@pytest.mark.parametrize("category", ["packed iids", "inline name"])
def test_the_pftrace_reader_tells_launch_slices_by_their_category_however_written(
    tmp_path: Path, category: str
) -> None:
    """Another producer may pack the category ids or name the category inline: a launch
    slice is one either way; a slice of another category is a span."""
    from optrace.runtime import perfetto as pf

    u, b, s = pf.uint_field, pf.bytes_field, pf.string_field
    process = pf.packet(b(60, u(1, 1 << 20) + b(3, u(1, 1) + s(6, "Rank 0"))))
    thread = pf.packet(b(60, u(1, (1 << 20) + 1) + u(5, 1 << 20) + b(4, u(1, 1) + u(2, 1) + s(5, "AIC 0"))))
    interned = b(12, b(1, u(1, 1) + s(2, "optrace.launch")) + b(1, u(1, 2) + s(2, "other"))
                 + b(2, u(1, 1) + s(2, "processing")))
    state = pf.packet(u(10, 1), u(13, 1), b(59, u(58, 64) + b(11, u(11, (1 << 20) + 1))), interned)
    clocks = b(1, u(1, 64) + u(2, 0) + u(3, 1) + u(4, 1)) + b(1, u(1, 6) + u(2, 1000))
    clock = pf.packet(u(10, 1), b(6, clocks))
    launch_category = b"\x1a\x01\x01" if category == "packed iids" else s(22, "optrace.launch")

    def event(delta: int, body: bytes) -> bytes:
        return pf.packet(u(8, delta), u(10, 1), b(11, body))

    events = [event(0, launch_category + u(9, 1) + s(23, "launch 0")),
              event(5, u(9, 1) + u(10, 1)), event(10, u(9, 2)),
              event(1, u(3, 2) + u(9, 1) + s(23, "marker")), event(1, u(9, 2)),
              event(4, u(9, 2))]
    path = tmp_path / "other.pftrace"
    path.write_bytes(pf.root_descriptor() + process + thread + state + clock + b"".join(events))
    found = perfetto_read.read_spans(path)
    assert [(name, start, end) for _, name, start, end in found.launches] == [("launch 0", 1000, 1021)]
    assert sorted(name for _, name, _, _ in found.spans) == ["marker", "processing"]
    table = load_spans(path)
    assert table.launches == ["launch 0"] and sorted(table.labels) == ["marker", "processing"]
