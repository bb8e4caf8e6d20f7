"""`collect -o trace.pftrace`: native Perfetto protobuf, proved against Perfetto's protos.

Every trace here is parsed back with the official message definitions (pftrace_check):
all packets known, tracks declared before use, every B closed by its E on its track,
names through the interning tables, the sequence clock declared; and it holds the same
spans as the JSON trace of the same run (per track: names in order, start and duration
within one tick).
"""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzz_tally import SCALE, Tally, tally
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pftrace_check import read_json, read_pftrace, same_spans
from rt_helpers import FP, LABELS, rank_buffer, well_formed_core, write_point_map
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.cli.collect_fast import parse_fast, run_collect
from optrace.runtime import perfetto
from optrace.runtime.decode import decode_rank
from optrace.runtime.pointmap import load_point_map
from optrace.runtime.save import reset_launch_counters, save_profiling_data
from optrace.runtime.synth import SlotWriter, new_buffer


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    reset_launch_counters()


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def profiling_dir(tmp_path: Path, ranks: int = 2, clock_mhz: float = 50.0, name: str = "prof",
                  **kwargs: Any) -> Path:
    directory = tmp_path / name
    for rank in range(ranks):
        buffer = rank_buffer(rank=rank, **kwargs)
        save_profiling_data(buffer.data, rank, directory, aic_cores=kwargs.get("aic", 2), barrier=True,
                            clock_mhz=clock_mhz)
    write_point_map(directory)
    return directory


def both(tmp_path: Path, directory: Path, *options: Any, tick_ns: Any = 20.0, code: int = 0) -> Any:
    """Collect JSON and .pftrace with the same options; check they hold the same spans."""
    json_out, pf_out = tmp_path / "t.json", tmp_path / "t.pftrace"
    a = invoke("collect", directory, "-o", json_out, *options)
    b = invoke("collect", directory, "-o", pf_out, *options)
    assert (a.exit_code, b.exit_code) == (code, code), (a.output, b.output)
    assert a.output.replace("t.json", "X") == b.output.replace("t.pftrace", "X")
    return same_spans(pf_out, json_out, tick_ns)


def test_a_trace_parses_back_with_the_protos_and_matches_json(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path, ranks=3)
    parsed = both(tmp_path, directory)
    assert parsed.units == {20}  # 50 MHz: 20 ns a tick, declared on the sequence clock
    processes = sorted(t.name for t in parsed.tracks.values() if t.kind == "process")
    assert processes == ["Rank 0", "Rank 1", "Rank 2"]
    assert parsed.threads_in_order("Rank 1") == ["AIC 0", "AIC 1", "AIV 0", "AIV 1", "AIV 2", "AIV 3"]
    assert parsed.sequences == 18  # one packet sequence per core
    spans = parsed.by_name()[("Rank 0", "AIC 0")]
    compute = [s for s in spans if s.name == "processing compute"]
    assert [s.args["index"] for s in compute] == [0, 1, 2]
    assert all(s.args["extraId"] == 1 for s in compute)
    assert compute[0].src == "op_kernel/op.h:16"
    root = spans[0]
    assert (root.name, root.start_ns, root.end_ns - root.start_ns) == ("processing", 3 * 20, 170 * 20)
    meta = parsed.metadata["optrace"]
    assert meta["ranks"][0]["clock_mhz"] == 50.0 and meta["point_map_fingerprint"] == FP


def test_cli_choices_of_format(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path, ranks=1)
    assert invoke("collect", directory, "-o", tmp_path / "a.bin", "--format", "perfetto").exit_code == 0
    assert read_pftrace(tmp_path / "a.bin").spans
    assert invoke("collect", directory, "-o", tmp_path / "b.pftrace", "--format", "json").exit_code == 0
    assert read_json(tmp_path / "b.pftrace")[0]
    result = invoke("collect", directory, "-o", tmp_path / "c.x", "--format", "protobuf")
    assert result.exit_code == 2 and "json, perfetto or parquet" in result.output
    assert parse_fast(["d", "-o", "t.pftrace", "--format", "perfetto", "--split", "rank"]) == {
        "profiling_dir": Path("d"), "output": Path("t.pftrace"), "format": "perfetto", "split": "rank"}


def test_the_fast_path_writes_pftrace_without_protobuf_or_typer(tmp_path: Path) -> None:
    """Writing needs numpy only: protobuf, the perfetto package and typer stay unimported."""
    import subprocess

    directory = profiling_dir(tmp_path, ranks=1)
    code = (
        "import sys\n"
        "from optrace.cli.collect_fast import fast_main\n"
        f"code = fast_main([{str(directory)!r}, '-o', {str(tmp_path / 't.pftrace')!r}])\n"
        "heavy = ('google', 'perfetto', 'typer', 'click')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy), code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[] 0"
    assert read_pftrace(tmp_path / "t.pftrace").spans


@pytest.mark.parametrize("clock_mhz, unit", [(50.0, 20), (1000.0, 1), (100.0, 10), (19.2, 1), (1600.0, 1)])
def test_the_clock_is_declared_from_the_run(tmp_path: Path, clock_mhz: float, unit: int) -> None:
    """A whole number of ns a tick is the sequence clock's unit; any other rate is
    written in ns (rounded), still within a tick of the JSON."""
    directory = profiling_dir(tmp_path, ranks=2, clock_mhz=clock_mhz)
    parsed = both(tmp_path, directory, tick_ns=1000.0 / clock_mhz)
    assert parsed.units == {unit}


def test_repaired_dropped_and_unknown_records(tmp_path: Path) -> None:
    """Unclosed and closed-by-parent spans keep their flags; an overflowed slot gets its
    instant; unknown ids and unmatched Es are left out, as in JSON."""
    directory = tmp_path / "prof"
    (p_b, p_e), (d_b, d_e), (w_b, w_e) = (LABELS["processing"], LABELS["processing dispatch"],
                                          LABELS["processing dispatch wait"])
    data = new_buffer(4, 32)
    writer = SlotWriter(data[0], 1000, fingerprint=FP)
    for i, (point, t) in enumerate([(p_b, 1010), (d_b, 1020), (w_b, 1030), (d_e, 1040), (99, 1045),
                                    (w_e, 1050), (d_b, 1060), (p_e, 1070), (p_b, 1080)]):
        writer.record(point, t, index=i if point == d_b else 0)
    writer = SlotWriter(data[1], 1005, fingerprint=FP)
    well_formed_core(writer, 1006, loops=6)  # overflows 32 words: 6 records dropped
    writer = SlotWriter(data[3], 990, fingerprint=FP)
    well_formed_core(writer, 995, loops=1)
    save_profiling_data(data, 0, directory, aic_cores=2)
    write_point_map(directory)
    parsed = both(tmp_path, directory, code=1)
    flags = [(s.name, tuple(sorted(k for k in s.args if k in ("unclosed", "closed_by_parent"))))
             for s in parsed.by_name()[("Rank 0", "AIC 0")]]
    assert ("processing dispatch wait", ("closed_by_parent",)) in flags
    assert any(f == ("unclosed",) for _, f in flags)
    (marks,) = parsed.instants.values()
    assert marks[0][0] == "optrace: 6 records dropped (slot full)" and marks[0][2] == {"dropped": 6}
    described = [t.description for t in parsed.tracks.values() if t.description]
    assert described == ["optrace: 6 records dropped (slot full)"]


def test_a_core_with_only_a_drop_is_named_by_its_own_rank(tmp_path: Path) -> None:
    """Slot 3 overflowed with nothing but unknown ids on both ranks (a drop, no span):
    rank 0's kernel has 2 AIC cores, so it is AIV 1 there, and rank 1's has 4, so it is
    AIC 3 there. Each rank's track has its own core's name, as in JSON (a second
    review's finding: the names cached per slot gave rank 1 rank 0's)."""
    directory = tmp_path / "prof"
    for rank, aic in ((0, 2), (1, 4)):
        data = new_buffer(6, 32)
        well_formed_core(SlotWriter(data[0], 1000, fingerprint=FP), 1005, loops=1)
        writer = SlotWriter(data[3], 1000, fingerprint=FP)
        for i in range(30):
            writer.record(99, 1001 + i)  # an id the map does not know
        save_profiling_data(data, rank, directory, aic_cores=aic)
    write_point_map(directory)
    parsed = both(tmp_path, directory, code=1)
    assert parsed.threads_in_order("Rank 0") == ["AIC 0", "AIV 1"]
    assert parsed.threads_in_order("Rank 1") == ["AIC 0", "AIC 3"]
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    named = {(e["pid"], e["args"]["name"]) for e in events if e.get("name") == "thread_name"}
    assert {(0, "AIV 1"), (1, "AIC 3")} <= named


def test_filters_offsets_and_launches(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path, ranks=3)
    both(tmp_path, directory, "--labels", "processing dispatch", "--cores", "aic,aiv1-2")
    both(tmp_path, directory, "--labels", "processing compute")  # parents filtered out
    both(tmp_path, directory, "--ranks", "1-2", "--rank-offsets", "1=12.5,2=-1000000")
    for _ in range(2):
        save_profiling_data(rank_buffer(rank=0).data, 0, tmp_path / "runs", aic_cores=2, tag="moe")
    write_point_map(tmp_path / "runs")
    parsed = both(tmp_path, tmp_path / "runs")
    assert {t.name for t in parsed.tracks.values() if t.kind == "process"} == {"Rank 0"}
    for slices in parsed.launches.values():  # a tagged launch's slice has the tag in its name
        assert [s.name for s in slices] == ["moe, launch 0", "moe, launch 1"]


def test_big_values_and_padded_varints(tmp_path: Path) -> None:
    """Indices past one and two varint bytes, extraIds, a gap past 2**35 ticks, and
    enough cores that sequence ids need two bytes (padded for the smaller ones)."""
    directory = tmp_path / "prof"
    cb, ce = LABELS["processing compute"]
    pb_, pe = LABELS["processing"]
    for rank in range(3):
        data = new_buffer(60, 64)
        for slot in range(60):
            writer = SlotWriter(data[slot], 10**12 + slot, fingerprint=FP)
            t = 10**12 + slot + 5
            writer.record(pb_, t)
            for i, index in enumerate([0, 127, 128, 16383, 16384, (1 << 24) - 1]):
                writer.record(cb, t + 10 * i + 1, extra_id=i * 50 % 256, index=index)
                writer.record(ce, t + 10 * i + 9, extra_id=i * 50 % 256, index=index)
            writer.record(pe, t + (1 << 36) + slot)
        save_profiling_data(data, rank, directory, aic_cores=20)
    write_point_map(directory)
    parsed = both(tmp_path, directory)
    assert parsed.sequences == 180
    spans = parsed.by_name()[("Rank 2", "AIV 39")]
    assert [s.args.get("index") for s in spans if s.name == "processing compute"] == [
        None, 127, 128, 16383, 16384, (1 << 24) - 1]  # high word 0 on a point not marked indexed
    assert spans[0].end_ns - spans[0].start_ns == ((1 << 36) + 59) * 20


def test_legacy_rank_files(tmp_path: Path) -> None:
    directory = tmp_path / "prof"
    directory.mkdir()
    from optrace.runtime.pt_writer import write_pt

    for rank in range(2):
        buffer = rank_buffer(rank=rank, fingerprint=None)
        write_pt([buffer.data[:2], buffer.data[2:]], directory / f"rank{rank:03d}.pt")
    write_point_map(directory, fingerprint=None)
    both(tmp_path, directory)


LABEL_POINTS = list(LABELS.values())


@st.composite
def core_records(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    """(point id, cycle step, index): mostly well nested, sometimes not at all."""
    records: list[tuple[int, int, int]] = []
    stack: list[int] = []
    for _ in range(draw(st.integers(0, 40))):
        choice = draw(st.integers(0, 9))
        step = draw(st.sampled_from([0, 0, 1, 5, 127, 128, 300, 20000]))
        if choice < 5 or not stack:
            label = draw(st.integers(0, len(LABEL_POINTS) - 1))
            stack.append(label)
            records.append((LABEL_POINTS[label][0], step, draw(st.integers(0, 300))))
        elif choice < 9:
            records.append((LABEL_POINTS[stack.pop()][1], step, 0))
        else:  # anything: an E of another label, an unknown id
            records.append((draw(st.sampled_from([LABEL_POINTS[0][1], LABEL_POINTS[3][1], 77])), step, 0))
    return records


@pytest.fixture(scope="module")
def round_trip_tally() -> Iterator[Tally]:
    with tally("collect: generated ranks to .json and .pftrace", "a collect of a generated rank") as counts:
        yield counts


@pytest.mark.slow  # fuzzing: 40 generated ranks collected and parsed back
@settings(max_examples=40 * SCALE, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(cores=st.lists(core_records(), min_size=1, max_size=5), data=st.data())
def test_any_decoded_rank_round_trips(tmp_path_factory: pytest.TempPathFactory, round_trip_tally: Tally,
                                      cores: list[list[tuple[int, int, int]]], data: st.DataObject) -> None:
    """Whatever the decoder made of a buffer (repairs, drops, empty cores), the
    .pftrace parses back and holds the JSON trace's spans."""
    tmp_path = tmp_path_factory.mktemp("fuzz")
    directory = tmp_path / "prof"
    data_words = 2 + 2 * 24
    buffer = new_buffer(len(cores) + 1, data_words)
    for slot, records in enumerate(cores):
        writer = SlotWriter(buffer[slot], 1000 + 7 * slot, fingerprint=FP)
        t = 1000 + 7 * slot
        for point, step, index in records:
            t += step
            writer.record(point, t, index=index)
    save_profiling_data(buffer, 0, directory, aic_cores=1)
    write_point_map(directory)
    labels = data.draw(st.sampled_from([[], ["--labels", "processing dispatch"], ["--cores", "aiv"]]))
    json_out, pf_out = tmp_path / "t.json", tmp_path / "t.pftrace"
    a = invoke("collect", directory, "-o", json_out, *labels)
    b = invoke("collect", directory, "-o", pf_out, *labels)
    for result in (a, b):
        uncaught = not isinstance(result.exception, (SystemExit, type(None)))
        crashed = result.exit_code not in (0, 1, 2) or uncaught
        round_trip_tally.count("crash" if crashed else result.exit_code)
    assert a.exit_code == b.exit_code and a.exit_code in (0, 1), (a.output, b.output)
    if "nothing written" in a.stderr:  # no span decoded or kept: neither format writes a trace
        assert "nothing written" in b.stderr and not json_out.exists() and not pf_out.exists()
        return
    same_spans(pf_out, json_out, 20.0)


def test_event_places_agree_with_the_records(tmp_path: Path) -> None:
    """Where the decoder kept each record as one B or E, the writer takes the records'
    order; the depth-based order it uses otherwise gives the same places."""
    pmap = load_point_map(write_point_map(tmp_path))
    decoded = decode_rank(rank_buffer(aic=3, aiv=6, loops=5), pmap)
    assert decoded.repaired_spans == 0 and decoded.unmatched_e == 0
    from_records = perfetto.event_places(decoded.spans.depth, None, decoded)
    from_depth = perfetto.event_places(decoded.spans.depth, None)
    assert all(np.array_equal(a, b) for a, b in zip(from_records, from_depth, strict=True))
    selected = np.flatnonzero(decoded.spans.label == pmap.labels.index("processing compute"))
    from_records = perfetto.event_places(decoded.spans.depth, selected, decoded)
    from_depth = perfetto.event_places(decoded.spans.depth, selected)
    assert all(np.array_equal(a, b) for a, b in zip(from_records, from_depth, strict=True))


def test_varints_match_protobufs_own() -> None:
    from google.protobuf.internal import encoder

    # every length's first and last value (lengths 1 to 5 take their own branches)
    edges = [v for bits in range(7, 71, 7) for v in (2**bits - 1, 2**bits) if v < 2**64]
    for value in [0, 1, 300, 3 << 20 | 17, (512 << 20) + 73, *edges, 2**63 - 1, 2**64 - 1]:
        out: list[bytes] = []
        encoder._VarintEncoder()(out.append, value, True)  # type: ignore[attr-defined]
        assert perfetto.varint(value) == b"".join(out)
        length = perfetto.varint_length(np.array([value], dtype=np.uint64))[0]
        assert length == len(b"".join(out))
    assert perfetto.varint(-1) == perfetto.varint(2**64 - 1)


# ----------------------------------------------------------------------------- size


def bench_like(directory: Path, ranks: int = 1, cores: int = 72) -> int:
    """The benchmark's core program (bench/bench_collect.py): 994 records a core."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        from bench_collect import generate
    finally:
        sys.path.pop(0)
    return int(generate(directory, ranks, cores)) * ranks * cores


@pytest.mark.slow  # the benchmark's workload, collected and measured
def test_bytes_per_record_on_the_benchmark_workload(tmp_path: Path) -> None:
    directory = tmp_path / "prof"
    directory.mkdir()
    records = bench_like(directory, ranks=2)
    assert invoke("collect", directory, "-o", tmp_path / "t.pftrace").exit_code == 0
    assert invoke("collect", directory, "-o", tmp_path / "t.json").exit_code == 0
    per_record = (tmp_path / "t.pftrace").stat().st_size / records
    assert per_record <= 20, per_record
    assert (tmp_path / "t.json").stat().st_size / records > 4 * per_record
    same_spans(tmp_path / "t.pftrace", tmp_path / "t.json", 20.0)


# ----------------------------------------------------------------------------- split / warning


@pytest.mark.parametrize("suffix", [".json", ".pftrace", ".json.gz", ".pftrace.gz"])
def test_split_by_rank_and_by_size(tmp_path: Path, suffix: str) -> None:
    directory = profiling_dir(tmp_path, ranks=4, loops=30, words=512)
    whole = tmp_path / f"whole{suffix}"
    assert invoke("collect", directory, "-o", whole).exit_code == 0
    result = invoke("collect", directory, "-o", tmp_path / f"r{suffix}", "--split", "rank")
    assert result.exit_code == 0 and "wrote 4 files" in result.output
    parts = [tmp_path / f"r.rank{rank:03d}{suffix}" for rank in range(4)]
    assert all(p.is_file() for p in parts) and not (tmp_path / f"r{suffix}").exists()
    raw = whole.read_bytes()
    bound = int(len(gzip.decompress(raw) if suffix.endswith(".gz") else raw) * 0.6)  # 2 ranks a file
    result = invoke("collect", directory, "-o", tmp_path / f"s{suffix}", "--split", str(bound))
    assert result.exit_code == 0, result.output
    sized = sorted(tmp_path.glob(f"s.part*{suffix}"))
    assert len(sized) == 2
    assert all(len(gzip.decompress(p.read_bytes()) if suffix.endswith(".gz") else p.read_bytes()) <= bound
               for p in sized)
    for group in (parts, sized):
        if ".pftrace" in suffix:
            def starts(path: Path) -> dict[Any, list[tuple[str, int]]]:
                return {k: [(s.name, s.start_ns) for s in v] for k, v in read_pftrace(path).by_name().items()}

            assert {k: v for p in group for k, v in starts(p).items()} == starts(whole)
            metas = [r for p in group for r in read_pftrace(p).metadata["optrace"]["ranks"]]
        else:
            spans = {k: v for p in group for k, v in read_json(p)[0].items()}
            assert spans == read_json(whole)[0]
            metas = [r for p in group for r in read_json(p)[2]["ranks"]]
        assert [m["rank"] for m in metas] == [0, 1, 2, 3]


def test_a_rank_bigger_than_the_split_size_gets_its_own_file(tmp_path: Path, capfd: Any) -> None:
    directory = profiling_dir(tmp_path, ranks=2, loops=30, words=512)
    code = run_collect(directory, tmp_path / "t.json", split="1k")
    assert code == 0
    assert len(list(tmp_path.glob("t.part*.json"))) == 2
    assert "alone needs" in capfd.readouterr().err


def test_bad_split_is_a_usage_error(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path, ranks=1)
    for value in ("ranks", "12q", "10"):
        result = invoke("collect", directory, "-o", tmp_path / "t.json", "--split", value)
        assert result.exit_code == 2 and "--split" in result.output, value


@pytest.mark.parametrize("options", [[], ["-j", "2"], ["--split", "rank"]])
def test_a_big_json_trace_is_warned_about_before_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: list[str]
) -> None:
    from optrace.runtime import trace_files

    directory = profiling_dir(tmp_path, ranks=3, loops=30, words=512)
    monkeypatch.setattr(trace_files, "JSON_WARN_BYTES", 20_000)
    seen: list[tuple[str, int]] = []

    def written() -> int:  # bytes of the trace files so far, finished or being written
        return sum(p.stat().st_size for p in tmp_path.glob("*t*.json*"))

    monkeypatch.setattr(trace_files, "warn", lambda message: seen.append((message, written())))
    assert invoke("collect", directory, "-o", tmp_path / "t.json", *options).exit_code == 0
    assert len(seen) == 1 and seen[0][1] < 100, seen  # once, before the events are written
    assert ".pftrace" in seen[0][0] and "--split" in seen[0][0]
    seen.clear()
    assert invoke("collect", directory, "-o", tmp_path / "t.pftrace", *options).exit_code == 0
    monkeypatch.setattr(trace_files, "JSON_WARN_BYTES", 10**9)
    assert invoke("collect", directory, "-o", tmp_path / "u.json").exit_code == 0
    assert seen == []


def test_the_writer_leaves_nothing_behind_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = profiling_dir(tmp_path, ranks=2)
    calls = {"n": 0}
    original = perfetto.render_rank

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")
        return original(*args, **kwargs)

    monkeypatch.setattr(perfetto, "render_rank", failing)
    result = invoke("collect", directory, "-o", tmp_path / "t.pftrace")
    assert result.exit_code == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prof"]


# ----------------------------------------------------------------------------- reading


def test_report_and_compare_read_pftrace_as_they_read_json(tmp_path: Path) -> None:
    """The reader needs neither protobuf nor the perfetto package; it finds what the
    protos find, and report / compare give what they give for the JSON trace."""
    from optrace.runtime.perfetto_read import read_spans

    directory = tmp_path / "prof"
    directory.mkdir()
    bench_like(directory, ranks=2, cores=12)
    for name in ("t.json", "t.pftrace", "t.pftrace.gz"):
        assert invoke("collect", directory, "-o", tmp_path / name).exit_code == 0
    found = read_spans(tmp_path / "t.pftrace")
    parsed = read_pftrace(tmp_path / "t.pftrace")
    mine = sorted((*found.track_name(t).split(" / "), n, a, b) for t, n, a, b in found.spans)
    protos = sorted((*parsed.track_name(t), s.name, s.start_ns, s.end_ns)
                    for t, spans in parsed.spans.items() for s in spans)
    assert mine == protos
    assert found.metadata["format"] == "optrace-perfetto"

    def report(path: Path) -> dict[str, Any]:
        result = invoke("report", path, "--format", "json")
        assert result.exit_code == 0, result.output
        document = json.loads(result.output)
        return {row["label"]: {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}
                for row in document["labels"]}

    assert report(tmp_path / "t.pftrace") == report(tmp_path / "t.json") == report(tmp_path / "t.pftrace.gz")
    result = invoke("compare", tmp_path / "t.json", tmp_path / "t.pftrace", "--format", "json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["launches"]["before"] == document["launches"]["after"]
    rows = document["labels"]
    assert rows and all(row[f"{q}_before_us"] == pytest.approx(row[f"{q}_after_us"], rel=1e-9)
                        for row in rows for q in ("median", "p99"))


def test_a_broken_pftrace_is_bad_input(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path, ranks=1)
    assert invoke("collect", directory, "-o", tmp_path / "t.pftrace").exit_code == 0
    raw = (tmp_path / "t.pftrace").read_bytes()
    (tmp_path / "cut.pftrace").write_bytes(raw[: len(raw) // 2])
    result = invoke("report", tmp_path / "cut.pftrace")
    assert result.exit_code == 2 and "not a readable Perfetto trace" in result.output


def test_inspect_a_trace_in_either_format(tmp_path: Path) -> None:
    directory = tmp_path / "prof"
    data = new_buffer(3, 32)
    well_formed_core(SlotWriter(data[0], 1005, fingerprint=FP), 1006, loops=6)  # 6 records dropped
    well_formed_core(SlotWriter(data[1], 1000, fingerprint=FP), 1003, loops=2)
    save_profiling_data(data, 0, directory, aic_cores=1)
    write_point_map(directory)
    found = {}
    for name in ("t.json", "t.pftrace"):
        assert invoke("collect", directory, "-o", tmp_path / name).exit_code == 1
        result = invoke("inspect", tmp_path / name, "--format", "json")
        assert result.exit_code == 0, result.output
        found[name] = json.loads(result.output)
        text = invoke("inspect", tmp_path / name).output
        assert "Rank 0 / AIC 0" in text and "6 records dropped" in text
    a, b = found["t.json"], found["t.pftrace"]
    assert a["format"] == "optrace-chrome" and b["format"] == "optrace-perfetto"
    assert [(t["track"], t["spans"], t["dropped"]) for t in a["tracks"]] == [
        (t["track"], t["spans"], t["dropped"]) for t in b["tracks"]] == [
        ("Rank 0 / AIC 0", 8, 6), ("Rank 0 / AIV 0", 6, 0)]
    for x, y in zip(a["tracks"], b["tracks"], strict=True):
        assert x["busy_us"] == pytest.approx(y["busy_us"], abs=0.02)
