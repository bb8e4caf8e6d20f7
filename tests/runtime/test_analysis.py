"""`optrace inspect`, `report` and `compare`."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rt_helpers import LABELS, well_formed_core, write_point_map
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime.compare import ACHIEVED, NOT_ACHIEVED, PARTIAL, verdict_for
from optrace.runtime.demo import write_demo
from optrace.runtime.errors import ProfilingInputError
from optrace.runtime.format import RankMeta
from optrace.runtime.formats import load_spans
from optrace.runtime.report import build_report
from optrace.runtime.save import reset_launch_counters, save_profiling_data
from optrace.runtime.spans import SpanTable, load_trace
from optrace.runtime.synth import SlotWriter, new_buffer
from optrace.runtime.trace_inspection import inspect_trace


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    reset_launch_counters()


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def profiling_dir(directory: Path, *, scale: int = 10, ranks: int = 2, barrier: bool | None = True,
                  clock: float = 50.0) -> Path:
    for rank in range(ranks):
        data = new_buffer(6, 128)
        for s in range(6 if rank == 0 else 5):  # rank 1: one core unused
            writer = SlotWriter(data[s], 1000 + 5 * s, fingerprint=None)
            # core 3 works twice as long: imbalance
            well_formed_core(writer, 1003 + 5 * s, loops=4, scale=scale * (2 if s == 3 else 1))
        save_profiling_data(data, rank, directory, aic_cores=2, barrier=barrier, clock_mhz=clock)
    write_point_map(directory, fingerprint=None)
    return directory


# ----------------------------------------------------------------------------- inspect


def test_inspect_directory(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path / "p")
    result = invoke("inspect", directory)
    assert result.exit_code == 0, result.output
    assert "optrace format v1 · 2 AIC + 4 AIV slots · 128 words/slot (capacity 63)" in result.output
    assert "barrier on" in result.output
    assert "AIV 3 unused (1 slot)" in result.output  # rank 1's idle core
    line = next(ln for ln in result.output.splitlines() if ln.strip().startswith("AIC 1"))
    # 16 records (B, 4 dispatch, 8 compute, 2 combine, E; no fingerprint record in these
    # legacy-runtime buffers), 16/63 full; its start is 5 cycles = 0.10 µs after AIC 0's
    assert line.split()[2:5] == ["ok", "16", "25.4%"] and line.split()[-1] == "0.10"


def test_inspect_json_and_drops(tmp_path: Path) -> None:
    data = new_buffer(1, 16)
    writer = SlotWriter(data[0], 0, fingerprint=7)
    for i in range(20):
        writer.record(1 + i % 2, 10 + i)
    save_profiling_data(data, 0, tmp_path, aic_cores=1)
    result = invoke("inspect", tmp_path / "rank000.pt", "--format", "json")
    assert result.exit_code == 0
    slot = json.loads(result.output)[0]["slots"][0]
    assert (slot["state"], slot["records"], slot["dropped"], slot["fingerprint"]) == ("overflow", 7, 14, 7)


@pytest.mark.parametrize("suffix", [".json", ".pftrace"])
def test_inspect_trace_per_track_figures_equal_each_tracks_own_spans(tmp_path: Path, suffix: str) -> None:
    """The grouped one-pass figures are those of each track's spans taken alone."""
    write_demo(tmp_path / "demo", ranks=2, launches=3, aic=2, seed=3)
    trace = tmp_path / f"t{suffix}"
    assert invoke("collect", tmp_path / "demo", "-o", trace).exit_code == 0
    found = inspect_trace(trace)
    table = load_spans(trace)
    assert len(found["tracks"]) == len(table.tracks) > 4
    for index, row in enumerate(found["tracks"]):
        mine = table.track == index
        ts, dur, depth = table.ts[mine], table.dur[mine], table.depth[mine]
        assert row["spans"] == ts.size > 0
        assert row["first_us"] == pytest.approx(float(ts.min()))
        assert row["last_us"] == pytest.approx(float((ts + dur).max()))
        assert row["busy_us"] == pytest.approx(float(dur[depth == 0].sum()))


def test_inspect_bad_file(tmp_path: Path) -> None:
    (tmp_path / "rank000.pt").write_bytes(b"nope")
    result = invoke("inspect", tmp_path / "rank000.pt")
    assert result.exit_code == 2 and "rank000.pt: ERROR not a zip-format" in result.output
    assert invoke("inspect", tmp_path / "missing.pt").exit_code == 2


# ----------------------------------------------------------------------------- report


def test_report_from_directory_and_trace_agree(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path / "p")
    assert invoke("collect", directory, "-o", tmp_path / "t.json").exit_code == 0
    from_dir = build_report(load_spans(directory))
    from_trace = build_report(load_spans(tmp_path / "t.json"))
    for a, b in zip(from_dir.stats, from_trace.stats, strict=True):
        assert a.label == b.label and a.count == b.count
        assert a.total_us == pytest.approx(b.total_us, abs=1e-2)
        assert a.self_us == pytest.approx(b.self_us, abs=1e-2)


def test_report_statistics(tmp_path: Path) -> None:
    report = build_report(load_spans(profiling_dir(tmp_path / "p")))
    by_label = {s.label: s for s in report.stats}
    processing = by_label["processing"]
    assert processing.count == 11 and processing.share == pytest.approx(1.0)
    # scale 10: processing lasts 200 cycles = 4 µs; core 3 (AIV 1) twice that.
    assert processing.p50_us == pytest.approx(4.0)
    assert processing.total_us == pytest.approx(9 * 4.0 + 2 * 8.0)
    assert processing.imbalance == pytest.approx(8.0 / ((9 * 4.0 + 2 * 8.0) / 11))
    compute = by_label["processing compute"]
    assert compute.count == 44 and compute.mean_us == pytest.approx((36 * 0.4 + 8 * 0.8) / 44)
    wait = by_label["processing dispatch wait"]
    assert by_label["processing dispatch"].self_us == pytest.approx(
        by_label["processing dispatch"].total_us - wait.total_us)
    # per core: compute 4 x 20 cycles of self time, processing's own 200 - 130 = 70
    assert [s.label for s in report.hotspots[:2]] == ["processing compute", "processing"]


def test_report_cli_text_html_png(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path / "p")
    result = invoke("report", directory, "--html", tmp_path / "r.html")
    assert result.exit_code == 0, result.output
    assert "hotspots (self time: children excluded)" in result.output
    assert "processing compute" in result.output
    page = (tmp_path / "r.html").read_text()
    assert "http" not in page.replace("http://www.w3.org/2000/svg", "")  # no external assets

    class RectCounter(HTMLParser):
        rects = 0

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "rect":
                self.rects += 1

    counter = RectCounter()
    counter.feed(page)
    assert counter.rects > 11 * 4  # bars and timeline for every core
    assert "Rank 1 / AIV 2" in page
    png = invoke("report", directory, "--png", tmp_path / "r.png")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert png.exit_code == 2 and "pip install 'ascend-optrace[report]'" in png.output
        assert "hotspots" not in png.output  # refused before doing the work
    else:
        assert png.exit_code == 0 and (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_report_json(tmp_path: Path) -> None:
    result = invoke("report", profiling_dir(tmp_path / "p"), "--format", "json")
    document = json.loads(result.output)
    assert {row["label"] for row in document["labels"]} == set(LABELS)


def test_report_bad_inputs(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{")
    result = invoke("report", tmp_path / "bad.json")
    assert result.exit_code == 2 and "bad.json: not a readable JSON trace" in result.output
    assert invoke("report", tmp_path / "nope").exit_code == 2
    (tmp_path / "x.pt").write_bytes(b"")
    assert "optrace inspect" in invoke("report", tmp_path / "x.pt").output


def test_self_time_and_depth_from_trace(tmp_path: Path) -> None:
    events = [
        {"name": "processing", "ph": "X", "pid": 0, "tid": 0, "ts": 0, "dur": 10},
        {"name": "a", "ph": "X", "pid": 0, "tid": 0, "ts": 1, "dur": 4},
        {"name": "b", "ph": "X", "pid": 0, "tid": 0, "ts": 1, "dur": 2},
        {"name": "a", "ph": "X", "pid": 0, "tid": 0, "ts": 6, "dur": 3},
        {"name": "processing", "ph": "X", "pid": 0, "tid": 1, "ts": 0, "dur": 5},
    ]
    (tmp_path / "t.json").write_text(json.dumps({"traceEvents": events}))
    table = load_trace(tmp_path / "t.json")
    assert table.depth.tolist() == [0, 1, 2, 1, 0]
    assert table.self_time.tolist() == [3, 2, 2, 3, 5]
    assert table.warnings and "runtime settings unknown" in table.warnings[0]


# ----------------------------------------------------------------------------- compare


@pytest.mark.parametrize(
    ("gain", "expect", "verdict"),
    [(15.0, 30, ACHIEVED), (14.9, 30, PARTIAL), (0.5, 1, PARTIAL), (1.0, 1, ACHIEVED),
     (0.0, 30, NOT_ACHIEVED), (-5.0, 30, NOT_ACHIEVED), (40.0, -30, ACHIEVED)],
)
def test_verdict_rule(gain: float, expect: float, verdict: str) -> None:
    assert verdict_for(gain, expect) == verdict


def test_compare_directories(tmp_path: Path) -> None:
    before = profiling_dir(tmp_path / "before", scale=10)
    after = profiling_dir(tmp_path / "after", scale=7)  # everything 30 % faster
    result = invoke("compare", before, after, "--expect", "30")
    assert result.exit_code == 0, result.output
    assert "gain on 'processing': +30.0 %" in result.output
    assert "expected gain 30 %: achieved: gain 30.0 % ≥ max(30 / 2, 1) = 15 %" in result.output
    result = invoke("compare", before, after, "--expect", "70")
    assert result.exit_code == 1 and "partial" in result.output
    result = invoke("compare", after, before, "--expect", "10")
    assert result.exit_code == 1 and "not achieved" in result.output
    assert invoke("compare", before, after).exit_code == 0  # deltas only


def test_compare_trace_with_directory_and_json(tmp_path: Path) -> None:
    before = profiling_dir(tmp_path / "before", scale=10)
    after = profiling_dir(tmp_path / "after", scale=9)
    assert invoke("collect", before, "-o", tmp_path / "before.json.gz").exit_code == 0
    result = invoke("compare", tmp_path / "before.json.gz", after, "--label", "processing compute",
                    "--format", "json")
    document = json.loads(result.output)
    assert document["gain_percent"] == pytest.approx(10.0, abs=0.1)


def test_compare_refuses_different_settings(tmp_path: Path) -> None:
    before = profiling_dir(tmp_path / "before", barrier=True)
    after = profiling_dir(tmp_path / "after", barrier=False)
    result = invoke("compare", before, after)
    assert result.exit_code == 2
    assert "refusing to compare runs with different runtime settings" in result.output
    clocked = profiling_dir(tmp_path / "clock", clock=100.0)
    result = invoke("compare", before, clocked)
    assert result.exit_code == 2 and "different clock settings" in result.output


def test_compare_missing_label(tmp_path: Path) -> None:
    before = profiling_dir(tmp_path / "before")
    result = invoke("compare", before, before, "--label", "nope")
    assert result.exit_code == 2 and "no 'nope' spans" in result.output


def test_empty_table_is_an_error(tmp_path: Path) -> None:
    data = new_buffer(2, 16)
    data[0, 0] = -1
    save_profiling_data(data, 0, tmp_path, aic_cores=1)
    (tmp_path / "rank001.pt").write_bytes(b"")
    write_point_map(tmp_path)
    with pytest.raises(ProfilingInputError):
        load_spans(tmp_path / "nowhere")
    table = load_spans(tmp_path)
    assert isinstance(table, SpanTable) and table.ts.size == 0
    assert any("rank001.pt: empty file" in w for w in table.warnings)
    assert RankMeta(rank=0).legacy
    assert np.isfinite(table.dur).all()
