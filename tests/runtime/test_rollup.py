"""The readers' figures a rank at a time (runtime/rollup.py) equal those of one table of
every span: report's statistics, page and warnings, compare's launch times, inspect's
rows — exact where the terms are (counts, extrema, percentiles), to the last bits where a
sum over ranks is added rank by rank."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optrace.runtime.compare import launch_times, run_of
from optrace.runtime.demo import write_demo
from optrace.runtime.formats import load_spans, span_chunks
from optrace.runtime.report import build_report, page_of, per_track_self, rolled_report, timeline_bins
from optrace.runtime.rollup import Durations, counted_percentiles
from optrace.runtime.save import reset_launch_counters
from optrace.runtime.spans import RunSettings, SpanTable, percentiles, run_counts


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    reset_launch_counters()


@given(st.lists(st.integers(0, 40), min_size=1, max_size=300), st.integers(1, 7))
@settings(max_examples=200, deadline=None)
def test_percentiles_from_counts_are_numpys_to_the_bit(ticks: list[int], pieces: int) -> None:
    values = np.array(ticks, dtype=np.float64) / 50.0  # whole ticks of a 50 MHz clock, in µs
    durations = Durations()
    for part in np.array_split(values, pieces):
        durations.add(part)
    for percents in ((50, 99), (0, 100), (25, 75, 99.9)):
        assert durations.percentiles(percents) == percentiles(values, percents)
        assert percentiles(values, percents) == [float(np.percentile(values, p)) for p in percents]


def test_percentiles_of_nothing_are_refused() -> None:
    with pytest.raises(ValueError):
        counted_percentiles(np.zeros(0), np.zeros(0, np.int64), (50,))


def close(a: Any, b: Any, path: str = "") -> None:
    """Equal, floats to 1e-9 relative (a sum added rank by rank)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), (path, a, b)
    else:
        assert a == b, (path, a, b)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("rollup") / "d"
    reset_launch_counters()
    write_demo(directory, ranks=3, launches=6, aic=2, seed=4)
    return directory


def _report_fields(report: Any) -> dict[str, Any]:
    return {"counts": report.counts.__dict__, "processing": report.processing_total_us,
            "stats": [s.__dict__ for s in report.stats], "hotspots": [s.label for s in report.hotspots],
            "busy": report.busy_self_us, "warnings": report.warnings, "source": report.source}


def test_a_directory_rank_by_rank_reports_what_its_whole_table_does(demo: Path) -> None:
    whole = load_spans(demo)
    chunks, closing = span_chunks(demo)
    report, page = rolled_report(chunks, closing, top=5, page=True)
    expected = build_report(whole, top=5)
    close(_report_fields(report), _report_fields(expected))
    assert report.counts == run_counts(whole)  # the counts' definition on a table of every span
    # exact: counts and percentiles are not sums
    assert [(s.count, s.p50_us, s.p99_us, s.tracks) for s in report.stats] == \
        [(s.count, s.p50_us, s.p99_us, s.tracks) for s in expected.stats]
    assert closing.processes == whole.processes == 18
    assert closing.settings == whole.settings
    # the page: every row's self time per phase, and the timeline of the rows it shows
    assert page is not None
    full = page_of(whole)
    phases = [s.label for s in expected.hotspots]
    assert page.tracks == whole.tracks
    np.testing.assert_allclose(per_track_self(page, phases)[0], per_track_self(full, phases)[0], rtol=1e-12)
    shown = len(page.shown.tracks)
    assert shown == min(96, len(whole.tracks))
    for got, want in zip(timeline_bins(page.shown, shown, phases), timeline_bins(whole, shown, phases),
                         strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_directory_rank_by_rank_has_the_launch_times_of_its_whole_table(demo: Path) -> None:
    from optrace.runtime.formats import fold_spans
    from optrace.runtime.rollup import LaunchRollup

    run = run_of(*fold_spans(demo, LaunchRollup))
    whole = launch_times(load_spans(demo))
    assert run.times.labels == whole.labels
    np.testing.assert_array_equal(run.times.values, whole.values)  # maxima: exact
    np.testing.assert_array_equal(run.times.present, whole.present)
    assert run.times.ranks_per_launch == whole.ranks_per_launch == [3] * 6


def _table(labels: list[str], rows: list[str], spans: list[tuple[int, int, float, float]]) -> SpanTable:
    label, track, ts, dur = (np.array(c) for c in zip(*spans, strict=True))
    return SpanTable(source="t", labels=labels, tracks=rows, processes=1, label=label.astype(np.int32),
                     track=track.astype(np.int32), ts=ts.astype(np.float64), dur=dur.astype(np.float64),
                     settings=RunSettings())


def test_a_label_path_is_judged_by_the_runs_parent_not_the_ranks() -> None:
    """Rank 0 ran `a b` inside `a`; rank 1 ran `a b c` outside any `a b` — but it never
    ran `a b`, so its cores are not contradicted (the whole table's rule), though its own
    labels would name `a` the parent of `a b c`, and `a b c` lies outside it there."""
    rank0 = _table(["a", "a b", "a b c"], ["Rank 0 / AIC 0"],
                   [(0, 0, 0.0, 10.0), (1, 0, 1.0, 5.0), (2, 0, 2.0, 1.0)])
    rank1 = _table(["a", "a b c"], ["Rank 1 / AIC 0"], [(0, 0, 0.0, 10.0), (1, 0, 20.0, 1.0)])
    whole = _table(["a", "a b", "a b c"], ["Rank 0 / AIC 0", "Rank 1 / AIC 0"],
                   [(0, 0, 0.0, 10.0), (1, 0, 1.0, 5.0), (2, 0, 2.0, 1.0), (0, 1, 0.0, 10.0),
                    (2, 1, 20.0, 1.0)])
    from optrace.runtime.spans import Closing

    report, _ = rolled_report([rank0, rank1], Closing("t"))
    assert report.warnings == build_report(whole).warnings == []
    # ... and where the run's parent did run on the rank, the child outside it is counted
    rank1b = _table(["a", "a b", "a b c"], ["Rank 1 / AIC 0"],
                    [(0, 0, 0.0, 10.0), (1, 0, 1.0, 2.0), (2, 0, 5.0, 1.0)])
    whole_b = _table(["a", "a b", "a b c"], ["Rank 0 / AIC 0", "Rank 1 / AIC 0"],
                     [(0, 0, 0.0, 10.0), (1, 0, 1.0, 5.0), (2, 0, 2.0, 1.0), (0, 1, 0.0, 10.0),
                      (1, 1, 1.0, 2.0), (2, 1, 5.0, 1.0)])
    report_b, _ = rolled_report([rank0, rank1b], Closing("t"))
    assert report_b.warnings == build_report(whole_b).warnings
    assert len(report_b.warnings) == 1 and "(1 spans)" in report_b.warnings[0]


# ----------------------------------------------------------------------------- a .pftrace a rank at a time


@pytest.fixture(scope="module")
def demo_trace(demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from typer.testing import CliRunner

    from optrace.cli.app import app

    out = tmp_path_factory.mktemp("rollup_trace") / "t.pftrace"
    result = CliRunner().invoke(app, ["collect", str(demo), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def want_present(table: SpanTable) -> list[bool]:
    return (np.bincount(table.label, minlength=len(table.labels)) > 0).tolist()


def _regroup_refused(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every time a .pftrace is read whole after all."""
    from optrace.runtime import perfetto_read

    regrouped: list[str] = []
    real = perfetto_read.read_spans

    def whole(path: Path, *rest: Any) -> Any:
        regrouped.append(str(path))
        return real(path, *rest)

    monkeypatch.setattr(perfetto_read, "read_spans", whole)
    return regrouped


def _rank_by_rank_is_whole(trace: Path, whole: SpanTable) -> None:
    """``trace`` read a rank at a time (three ranks) gives what its whole table does: the
    rows in order, the report, the page (every row's self time per phase; the timeline
    of the rows it shows, 40 of 108: two ranks'), the settings and the launch times."""
    from optrace.runtime.formats import fold_spans
    from optrace.runtime.report import report_of
    from optrace.runtime.rollup import LaunchRollup, ReportRollup

    expected = build_report(whole, top=5)
    tables, closing = span_chunks(trace)
    chunks = list(tables)
    assert [len({t.split(" / ")[0].split(" (")[0] for t in c.tracks}) for c in chunks] == [1, 1, 1]
    assert [t for c in chunks for t in c.tracks] == whole.tracks  # the rows, in the whole table's order
    rollup, closing = fold_spans(trace, lambda: ReportRollup(page_rows=40))
    report = report_of(rollup, closing.source, closing.warnings, 5)
    close(_report_fields(report), _report_fields(expected))
    page, full = rollup.page(), page_of(whole)
    phases = [s.label for s in expected.hotspots]
    assert page.tracks == whole.tracks and len(page.shown.tracks) == 40
    np.testing.assert_allclose(per_track_self(page, phases)[0], per_track_self(full, phases)[0], rtol=1e-12)
    shown, everything = timeline_bins(page.shown, 40, phases), timeline_bins(whole, 40, phases)
    for got, want in zip(shown, everything, strict=True):
        np.testing.assert_array_equal(got, want)
    assert closing.settings == whole.settings and closing.trace_tracks == whole.trace_tracks
    launches, _ = fold_spans(trace, LaunchRollup)
    labels, values, present, ranks = launches.times()
    assert present.tolist() == want_present(whole)
    want = launch_times(whole)
    assert labels == whole.labels and ranks == want.ranks_per_launch
    np.testing.assert_array_equal(values, want.values)


@pytest.mark.parametrize("chunk", [1 << 17, 50, 3])
def test_a_pftrace_rank_by_rank_reports_what_its_whole_table_does(
    demo_trace: Path, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read a process at a time however the packets fall into the reader's chunks (a
    process whole once the read is past it), and never read whole again."""
    from optrace.runtime import perfetto_read

    whole = load_spans(demo_trace)
    monkeypatch.setattr(perfetto_read, "_CHUNK", chunk)
    regrouped = _regroup_refused(monkeypatch)
    _rank_by_rank_is_whole(demo_trace, whole)
    assert regrouped == []


@pytest.fixture(scope="module")
def demo_json(demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from typer.testing import CliRunner

    from optrace.cli.app import app

    out = tmp_path_factory.mktemp("rollup_json") / "t.json"
    result = CliRunner().invoke(app, ["collect", str(demo), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _json_read_whole(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every time a JSON trace is read whole (as one table)."""
    from optrace.runtime import spans

    whole: list[str] = []
    real = spans.read_trace_events

    def counted(path: Path) -> Any:
        whole.append(str(path))
        return real(path)

    monkeypatch.setattr(spans, "read_trace_events", counted)
    return whole


@pytest.mark.parametrize("block", [1 << 24, 300, 7])
def test_a_json_trace_rank_by_rank_reports_what_its_whole_table_does(
    demo_json: Path, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read a process at a time however its lines fall into the reader's blocks (a line
    longer than a block makes the block longer), and never read whole again."""
    from optrace.runtime import json_rows

    whole = load_spans(demo_json)
    monkeypatch.setattr(json_rows, "_BLOCK", block)
    read_whole = _json_read_whole(monkeypatch)
    tables, closing = span_chunks(demo_json)
    list(tables)
    assert closing.processes == whole.processes and closing.warnings == whole.warnings
    _rank_by_rank_is_whole(demo_json, whole)
    assert read_whole == []


def _moved(text: str, kind: str) -> str:
    """collect's JSON laid out otherwise: the names first, or rank 1's first launch
    after rank 2's events, or an event line the strict parser refuses."""
    head, rest = text.split("\n", 1)
    lines, closing = rest.rstrip("\n").rsplit("\n", 1)
    events = lines.split(",\n")
    if kind == "names first":
        names = [e for e in events if '"ph":"M"' in e]
        events = names + [e for e in events if '"ph":"M"' not in e]
    elif kind == "interleaved":
        one = [k for k, e in enumerate(events) if '"pid":1,' in e and '"ph":"X"' in e][:40]
        moved = [events[k] for k in one]
        events = [e for k, e in enumerate(events) if k not in set(one)]
        last = max(k for k, e in enumerate(events) if '"pid":2,' in e and '"ph":"X"' in e)
        events = events[: last + 1] + moved + events[last + 1 :]
    elif kind == "a fault in a name":
        k = next(k for k, e in enumerate(events) if '"thread_name"' in e and '"pid":1,' in e)
        events[k] = events[k].replace('"tid":', '"tid":[1],"x":', 1)
    else:
        k = next(k for k, e in enumerate(events) if '"pid":1,' in e and '"ph":"X"' in e and '"src"' in e)
        events[k] = events[k][:-1] + ',"dur":"soon"}'  # the last of two keys counts
    return head + "\n" + ",\n".join(events) + "\n" + closing + "\n"


@pytest.mark.parametrize("kind", ["names first", "interleaved", "a fault", "a fault in a name"])
def test_a_json_trace_not_laid_out_a_process_at_a_time_is_read_whole(
    demo_json: Path, tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optrace.runtime import spans
    from optrace.runtime.errors import ProfilingInputError
    from optrace.runtime.formats import fold_spans
    from optrace.runtime.perfetto_read import Regroup
    from optrace.runtime.report import report_of
    from optrace.runtime.rollup import ReportRollup

    trace = tmp_path / "t.json"
    trace.write_text(_moved(demo_json.read_text(), kind))
    found = spans.json_parts(trace)
    if found is not None:
        with pytest.raises(Regroup):
            list(found[0])
    read_whole = _json_read_whole(monkeypatch)
    if kind.startswith("a fault"):
        with pytest.raises(ProfilingInputError) as raised:
            fold_spans(trace, ReportRollup)
        with pytest.raises(ProfilingInputError) as whole_raised:
            load_spans(trace)
        assert str(raised.value) == str(whole_raised.value)
        assert ("malformed complete event" if kind == "a fault" else "tid must be") in str(raised.value)
        return
    whole = load_spans(trace)
    rollup, closing = fold_spans(trace, lambda: ReportRollup(page_rows=96))
    assert read_whole == [str(trace)] * 2
    report = report_of(rollup, closing.source, closing.warnings)
    close(_report_fields(report), _report_fields(build_report(whole)))
    assert rollup.rows.names == whole.tracks


def test_inspect_of_a_pftrace_rank_by_rank_prints_what_the_whole_table_gives(
    demo_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optrace.runtime import spans
    from optrace.runtime.perfetto_read import Regroup
    from optrace.runtime.trace_inspection import inspect_trace

    streamed = inspect_trace(demo_trace)

    def refuse(path: Path) -> Any:
        raise Regroup("test")

    monkeypatch.setattr(spans, "perfetto_chunks",
                        lambda path, nested=True: (map(refuse, [path]), spans.Closing(str(path))))
    regrouped = _regroup_refused(monkeypatch)
    whole = inspect_trace(demo_trace)
    assert regrouped == [str(demo_trace)]
    close(streamed, whole)
    assert streamed["ranks"] == 3 and streamed["launches"] == 6 and streamed["trace_tracks"] == 18


def _interleaved_trace(path: Path) -> Path:
    """Two ranks whose packets interleave (rank 0's second launch after rank 1's): not
    collect's layout, so a reader a process at a time cannot give rank 0 out whole."""
    spans = [(label, 100 * k + start, 100 * k + end) for k in range(20)
             for label, start, end in (("processing", 10, 90), ("processing compute", 50, 60))]
    return _custom_trace(path, [*_launch(10, 0, spans), *_launch(20, 0, spans),
                                *_launch(10, 10_000, spans, name="launch 1")])


def test_a_pftrace_whose_ranks_interleave_is_read_whole_after_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optrace.runtime import perfetto_read
    from optrace.runtime.formats import fold_spans
    from optrace.runtime.report import report_of
    from optrace.runtime.rollup import ReportRollup

    trace = _interleaved_trace(tmp_path / "i.pftrace")
    whole = load_spans(trace)
    assert whole.tracks == ["Rank 0 (launch 0) / AIC 0", "Rank 0 (launch 1) / AIC 0",
                            "Rank 1 (launch 0) / AIC 0"]
    monkeypatch.setattr(perfetto_read, "_CHUNK", 16)  # rank 0 given out before its second launch is read
    tables, _ = span_chunks(trace)
    with pytest.raises(perfetto_read.Regroup):
        list(tables)
    regrouped = _regroup_refused(monkeypatch)
    rollup, closing = fold_spans(trace, lambda: ReportRollup(page_rows=96))
    assert regrouped == [str(trace)]
    report = report_of(rollup, closing.source, closing.warnings)
    close(_report_fields(report), _report_fields(build_report(whole)))
    assert rollup.rows.names == whole.tracks


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_inspect_of_a_directory_written_a_rank_file_at_a_time_is_what_all_at_once_gives(
    demo: Path, tmp_path: Path, fmt: str
) -> None:
    """One rank file unreadable among them: its error in its place, exit 2, the same bytes."""
    import json
    import shutil

    from typer.testing import CliRunner

    from optrace.cli.app import app
    from optrace.runtime.inspection import format_text, inspect_path, inspection_json

    directory = tmp_path / "d"
    shutil.copytree(demo, directory)
    broken = sorted(directory.glob("rank*.pt"))[3]
    broken.write_bytes(b"not a rank file")
    result = CliRunner().invoke(app, ["inspect", str(directory), "--format", fmt])
    assert result.exit_code == 2
    everything = inspect_path(directory)
    expected = (json.dumps(inspection_json(everything), indent=2, default=str) + "\n" if fmt == "json"
                else format_text(everything))
    assert result.stdout == expected
    assert broken.name in result.stderr


@pytest.mark.parametrize("kind", ["trace", "directory"])
def test_compares_tables_skip_the_nesting_it_never_reads(demo: Path, demo_trace: Path, kind: str) -> None:
    from optrace.runtime.formats import fold_spans
    from optrace.runtime.rollup import LaunchRollup, ReportRollup

    seen: list[tuple[int, int]] = []

    class Watched(LaunchRollup):
        def add(self, table: SpanTable) -> None:
            seen.append((table.ts.size, table.depth.size))
            super().add(table)

    source = demo_trace if kind == "trace" else demo
    rollup, _ = fold_spans(source, Watched)
    assert seen and all(spans and depth == 0 for spans, depth in seen)
    np.testing.assert_array_equal(rollup.times()[1], launch_times(load_spans(source)).values)
    report, _ = fold_spans(source, ReportRollup)  # report's tables are nested
    assert report.busy_self > 0


# ----------------------------------------------------------------------------- traces laid out otherwise


# ns, track uuid, type (1 begin, 2 end, 3 instant), name, launch?
Event = tuple[int, int, int, "str | None", bool]


CUT: Any = ("cut",)  # in a custom trace's events: where the reader may end a chunk


def _custom_trace(path: Path, events: list[Event], *, processes_last: bool = False) -> Path:
    """Ranks 0..2 (process uuid r + 1, its core's track 10 (r + 1)) and ``events``, with
    the process descriptors first (as collect writes them) or last (after the threads')."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    from optrace.runtime.launches import LAUNCH_CATEGORY

    trace = pb.Trace()

    def processes() -> None:
        for rank in range(3):
            packet = trace.packet.add()
            packet.track_descriptor.uuid = rank + 1
            packet.track_descriptor.process.pid = rank + 1
            packet.track_descriptor.process.process_name = f"Rank {rank}"

    if not processes_last:
        processes()
    for rank in range(3):
        packet = trace.packet.add()
        packet.track_descriptor.uuid = 10 * (rank + 1)
        packet.track_descriptor.parent_uuid = rank + 1
        packet.track_descriptor.thread.pid = rank + 1
        packet.track_descriptor.thread.tid = 1
        packet.track_descriptor.thread.thread_name = "AIC 0"
    for event in events:
        if event is CUT:
            # A packet the reader's short-packet loop stops at: where it may end a chunk.
            packet = trace.packet.add()
            packet.track_descriptor.uuid = 999
            packet.track_descriptor.name = "a descriptor past 128 bytes " * 8
            continue
        ns, track, kind, name, launch = event
        packet = trace.packet.add()
        packet.timestamp = ns
        packet.trusted_packet_sequence_id = 1
        packet.track_event.type = kind
        packet.track_event.track_uuid = track
        if name is not None:
            packet.track_event.name = name
        if launch:
            packet.track_event.categories.append(LAUNCH_CATEGORY)
    if processes_last:
        processes()
    path.write_bytes(trace.SerializeToString())
    return path


def _launch(track: int, t0: int, spans: list[tuple[str, int, int]], name: str = "launch 0") -> list[Event]:
    """A launch slice on ``track`` from t0 holding ``spans`` (label, start, end after t0), in
    the order a stack writes them."""
    marks: list[tuple[int, int, int, str | None]] = []  # (ns, order, type, name): ends before begins
    for label, start, end in spans:
        marks += [(t0 + start, 1, 1, label), (t0 + end, 0, 2, None)]
    ordered = sorted(marks, key=lambda m: (m[0], m[1]))
    body = [(ns, track, kind, label, False) for ns, _, kind, label in ordered]
    last = max([t0 + end for _, _, end in spans] + [t0 + 1])
    return [(t0, track, 1, name, True), *body, (last, track, 2, None, False)]


def _same_as_whole(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """report, compare's launch times and inspect read a process at a time equal the whole
    table's (the whole read forced by a source that regroups at once)."""
    from optrace.runtime import spans
    from optrace.runtime.formats import fold_spans
    from optrace.runtime.perfetto_read import Regroup
    from optrace.runtime.report import report_of
    from optrace.runtime.rollup import LaunchRollup, ReportRollup
    from optrace.runtime.trace_inspection import inspect_trace

    def read() -> tuple[Any, ...]:
        report, closing = fold_spans(trace, lambda: ReportRollup(page_rows=96))
        launches, _ = fold_spans(trace, LaunchRollup)
        labels, values, present, ranks = launches.times()
        figures = _report_fields(report_of(report, closing.source, closing.warnings))
        return (present.tolist(), figures, report.rows.names,
                dict(zip(labels, np.sort(values, axis=0).T.tolist(), strict=True)), sorted(ranks),
                inspect_trace(trace))

    streamed = read()

    def refuse(path: Path) -> Any:
        raise Regroup("test")

    with monkeypatch.context() as patch:
        patch.setattr(spans, "perfetto_chunks",
                      lambda path, nested=True: (map(refuse, [path]), spans.Closing(str(path))))
        whole = read()
    close(list(streamed), list(whole))


def test_a_rank_whose_launch_holds_no_span_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1's core only dropped records: its launch slice and drop marker, no span."""
    events = [*_launch(10, 0, [("processing", 10, 90), ("processing compute", 20, 50)]),
              (0, 20, 1, "launch 0", True), (40, 20, 3, "optrace: 12 records dropped", False),
              (100, 20, 2, None, False)]
    trace = _custom_trace(tmp_path / "t.pftrace", events)
    _same_as_whole(trace, monkeypatch)
    from optrace.runtime.trace_inspection import inspect_trace

    assert inspect_trace(trace)["dropped"] == 12


def test_ranks_interleaved_within_one_chunk_are_read_whole(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0's events, rank 1's, rank 0's again — all in one of the reader's chunks, so no
    rank was given out before it came back: the label-path warnings and rows still in
    the whole table's order."""
    first = _launch(10, 0, [("a", 0, 50)])
    second = _launch(20, 0, [("b", 0, 50), ("b y", 60, 70)])
    third = _launch(10, 1000, [("a", 0, 10), ("a x", 60, 70)], name="launch 1")
    fourth = _launch(20, 1000, [("b", 0, 50)], name="launch 1")
    trace = _custom_trace(tmp_path / "t.pftrace", [*first, *second, *third, *fourth])
    _same_as_whole(trace, monkeypatch)
    assert len(build_report(load_spans(trace)).warnings) == 3  # not optrace's, 'b y', 'a x'


def test_a_rank_whose_drop_marker_comes_before_another_ranks_launch_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0's drop marker, rank 1's launch, then rank 0's: read in chunks of one packet,
    rank 0 would be given out (or ordered) before rank 1, whose spans come first."""
    from optrace.runtime import perfetto_read

    monkeypatch.setattr(perfetto_read, "_CHUNK", 1)
    # rank 0's launch begins, its drop marker; rank 1's whole launch; rank 0's spans and end
    rank0 = _launch(10, 0, [("a", 10, 50)])
    events = [rank0[0], (1, 10, 3, "optrace: 3 records dropped", False), CUT,
              *_launch(20, 0, [("b", 0, 50)]), CUT, *rank0[1:]]
    trace = _custom_trace(tmp_path / "u.pftrace", events)
    assert load_spans(trace).tracks == ["Rank 1 / AIC 0", "Rank 0 / AIC 0"]  # by their first spans
    _same_as_whole(trace, monkeypatch)


@pytest.mark.parametrize("chunk", [1 << 17, 4])
def test_process_names_that_come_after_the_spans_name_the_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    from optrace.runtime import perfetto_read

    events = [*_launch(10, 0, [("processing", 10, 90)]), CUT, *_launch(20, 0, [("processing", 10, 80)]), CUT,
              *_launch(30, 0, [("processing", 10, 70)])]
    trace = _custom_trace(tmp_path / "t.pftrace", events, processes_last=True)
    monkeypatch.setattr(perfetto_read, "_CHUNK", chunk)
    _same_as_whole(trace, monkeypatch)
    assert load_spans(trace).tracks == ["Rank 0 / AIC 0", "Rank 1 / AIC 0", "Rank 2 / AIC 0"]


@pytest.mark.parametrize("at_once", [1, 7, 4096])
def test_inspects_text_written_a_few_rows_at_a_time_is_the_documents_text(
    demo_trace: Path, demo_json: Path, monkeypatch: pytest.MonkeyPatch, at_once: int
) -> None:
    """inspect writes a trace's text a batch of rows at a time, without its document:
    the text of the document inspect_trace gives (--format json's), byte for byte, for a
    .pftrace and a JSON trace of several ranks and launches."""
    from optrace.runtime import trace_inspection

    monkeypatch.setattr(trace_inspection, "_LINES_AT_ONCE", at_once)
    for trace in (demo_trace, demo_json):
        written: list[str] = []
        trace_inspection.write_trace_text(trace, written.append)
        expected = trace_inspection.format_trace_text(trace_inspection.inspect_trace(trace))
        assert "".join(written) == expected
        assert (len(written) > 1) == (at_once < 4096)  # in batches, or (a demo's rows) at once
        assert "core × launch rows" in expected


def _sequenced_trace(path: Path, reused: bool) -> Path:
    """Ranks 0..3, each a core (track 10 (r + 1)) on a packet sequence of its own (100 + r:
    state cleared, its track by default, the name `processing` interned as iid 1), a launch
    of one span each, a chunk's end between two ranks; with ``reused``, rank 3's events on
    rank 0's sequence (its interned name, on rank 3's track)."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    from optrace.runtime.launches import LAUNCH_CATEGORY

    trace = pb.Trace()
    for rank in range(4):
        packet = trace.packet.add()
        packet.track_descriptor.uuid = rank + 1
        packet.track_descriptor.process.pid = rank + 1
        packet.track_descriptor.process.process_name = f"Rank {rank}"
        packet = trace.packet.add()
        packet.track_descriptor.uuid = 10 * (rank + 1)
        packet.track_descriptor.parent_uuid = rank + 1
        packet.track_descriptor.thread.pid = rank + 1
        packet.track_descriptor.thread.tid = 1
        packet.track_descriptor.thread.thread_name = "AIC 0"
    for rank in range(4):
        sequence = 100 if reused and rank == 3 else 100 + rank
        if sequence == 100 + rank:
            packet = trace.packet.add()
            packet.trusted_packet_sequence_id = sequence
            packet.sequence_flags = 1  # incremental state cleared
            packet.trace_packet_defaults.track_event_defaults.track_uuid = 10 * (rank + 1)
            name = packet.interned_data.event_names.add()
            name.iid, name.name = 1, "processing"
        t0 = 1000 * (rank + 1)
        marks = ((t0, 1, True), (t0 + 10, 1, False), (t0 + 90, 2, False), (t0 + 100, 2, False))
        for ns, kind, launch in marks:
            packet = trace.packet.add()
            packet.timestamp = ns
            packet.trusted_packet_sequence_id = sequence
            packet.track_event.type = kind
            if sequence != 100 + rank:
                packet.track_event.track_uuid = 10 * (rank + 1)
            if kind == 1 and launch:
                packet.track_event.name = "launch 0"
                packet.track_event.categories.append(LAUNCH_CATEGORY)
            elif kind == 1:
                packet.track_event.name_iid = 1
        packet = trace.packet.add()  # a packet the short-packet loop stops at: a chunk may end
        packet.track_descriptor.uuid = 999
        packet.track_descriptor.name = "a descriptor past 128 bytes " * 8
    path.write_bytes(trace.SerializeToString())
    return path


@pytest.mark.parametrize("reused", [False, True])
def test_a_sequence_named_again_after_its_process_was_read_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reused: bool
) -> None:
    """A process at a time, the states of the packet sequences of processes given out are
    let go; a sequence that packets name again (rank 3's events on rank 0's sequence,
    named by its interned ids) sends the trace to the whole read, which gives it its
    names: the same report, rows and inspect as the whole table."""
    from optrace.runtime import perfetto_read

    monkeypatch.setattr(perfetto_read, "_CHUNK", 1)
    monkeypatch.setattr(perfetto_read, "_RETIRED_AT_ONCE", 1)
    trace = _sequenced_trace(tmp_path / "t.pftrace", reused)
    whole = load_spans(trace)
    assert whole.labels == ["processing"] and len(whole.tracks) == 4
    from optrace.runtime.formats import fold_spans
    from optrace.runtime.rollup import ReportRollup

    regrouped = _regroup_refused(monkeypatch)
    fold_spans(trace, ReportRollup)
    assert regrouped == ([str(trace)] if reused else [])  # read whole only when reused
    _same_as_whole(trace, monkeypatch)
