"""`optrace report --html/--png`: charts with axes, units and scale, the hotspot section,
a page whose size does not grow with the spans; and the pages people open (the report,
`plan --graph x.html`) rendered by a real headless Chromium.

The browser tests need Debian's `chromium` (`apt-get install -y chromium`); `.ci/run`
installs it when CI=true, and there a missing browser fails the test instead of skipping
it. They are marked slow (a browser start takes a second or more on a shared machine).
"""

from __future__ import annotations

import itertools
import os
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from browser import Browser, find_chromium
from typer.testing import CliRunner
from wide_kernel import write_wide_kernel

from optrace.cli.app import app
from optrace.pipeline.graph_page import plan_boxes, stack
from optrace.pipeline.plan import plan_operator
from optrace.runtime.formats import load_spans
from optrace.runtime.report import (
    UNTRACED,
    build_report,
    nice_ticks,
    render_html,
    self_time_name,
    time_unit,
    timeline_bins,
)
from optrace.runtime.spans import RunSettings, SpanTable

FIXTURE_OP = (Path(__file__).parents[2] / "fixtures" / "umdk_style" / "src" / "cam" / "comm_operator"
              / "ascend_kernels" / "moe_fused_gmm")
UNIT = re.compile(r"\((µs|ms|s)\)$")


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def demo(directory: Path, ranks: int = 2, aic: int = 4, launches: int = 3) -> Path:
    result = invoke("demo-data", directory, "--ranks", ranks, "--aic", aic, "--launches", launches)
    assert result.exit_code == 0, result.output
    return directory


def cluster_table(ranks: int = 8, cores: int = 72, groups: int = 99) -> SpanTable:
    """The collect benchmark's shape (8 ranks x 72 cores, ~500 spans per core) as a span
    table: processing > (dispatch > wait, copy), compute, combine per group."""
    rng = np.random.default_rng(3)
    labels = ["processing", "processing dispatch", "processing dispatch wait",
              "processing dispatch copy", "processing compute", "processing combine"]
    tracks = [f"Rank {r} / {'AIC' if c < cores // 3 else 'AIV'} {c % (cores // 3)}"
              for r in range(ranks) for c in range(cores)]
    label, track, ts, dur = [], [], [], []
    for t in range(len(tracks)):
        start = rng.uniform(0, 5)
        per_group = [(1, 0.0, 2.2), (2, 0.1, 0.8), (3, 1.0, 1.1), (4, 2.3, 3.0), (5, 5.4, 0.6)]
        n = groups * len(per_group)
        group_start = start + 4 + 6.1 * np.repeat(np.arange(groups), len(per_group))
        offsets = np.tile([o for _, o, _ in per_group], groups)
        lengths = np.tile([d for _, _, d in per_group], groups) * rng.uniform(0.95, 1.05, n)
        label += [0, *np.tile([k for k, _, _ in per_group], groups).tolist()]
        track += [t] * (n + 1)
        ts += [start, *(group_start + offsets).tolist()]
        dur += [8 + 6.1 * groups, *lengths.tolist()]
    return SpanTable("cluster", labels, tracks, ranks, np.array(label, np.int32), np.array(track, np.int32),
                     np.array(ts), np.array(dur), RunSettings())


class Charts(HTMLParser):
    """Per <svg class="chart">: its rectangles, x-axis tick positions and values, the
    axis title and the row names of the y axis."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: list[dict[str, Any]] = []
        self._group: list[str] = []
        self._text: str | None = None
        self._x: float = 0.0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg" and a.get("class") == "chart":
            self.charts.append({"id": a.get("id"), "rects": 0, "ticks": [], "title": None, "rows": []})
        elif tag == "g":
            self._group.append(a.get("class") or "")
        elif tag == "rect" and self._group and self._group[-1] == "plot":
            self.charts[-1]["rects"] += 1
        elif tag == "text":
            self._text = a.get("class") or "tick"
            self._x = float(a.get("x") or 0)

    def handle_endtag(self, tag: str) -> None:
        if tag == "g":
            self._group.pop()
        elif tag == "text":
            self._text = None

    def handle_data(self, data: str) -> None:
        if self._text is None or not self._group:
            return
        where = self._group[-1]
        if where == "axis x-axis" and self._text == "axis-title":
            self.charts[-1]["title"] = data
        elif where == "axis x-axis":
            self.charts[-1]["ticks"].append((self._x, float(data)))
        elif where == "axis y-axis":
            self.charts[-1]["rows"].append(data)


def parse_charts(page: str) -> list[dict[str, Any]]:
    parser = Charts()
    parser.feed(page)
    return parser.charts


def check_axes(chart: dict[str, Any]) -> None:
    """Round ticks from 0, left to right at equal steps, a title with its unit."""
    xs = [x for x, _ in chart["ticks"]]
    values = [v for _, v in chart["ticks"]]
    assert len(values) >= 2 and values[0] == 0, chart
    assert values == sorted(values) and xs == sorted(xs) and len(set(xs)) == len(xs), chart
    steps = np.diff(values)
    assert np.allclose(steps, steps[0]), chart  # a linear scale
    assert UNIT.search(chart["title"] or ""), chart


# ----------------------------------------------------------------------------- scale


def test_nice_ticks_and_units() -> None:
    assert nice_ticks(9.3) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(100) == [0, 20, 40, 60, 80, 100]
    assert nice_ticks(0.037) == [0, 0.01, 0.02, 0.03, 0.04]
    assert nice_ticks(0) == [0, 1] and nice_ticks(float("nan")) == [0, 1]
    for top in (0.3, 7, 12.5, 999, 1234.5, 5e7):
        ticks = nice_ticks(top)
        assert ticks[-1] >= top and ticks[-2] < top and 2 <= len(ticks) <= 11
    assert time_unit(999) == ("µs", 1.0) and time_unit(2500) == ("ms", 1e3) and time_unit(3e6) == ("s", 1e6)


def test_timeline_bins_pick_the_label_with_most_self_time() -> None:
    # one core: processing 0-100 µs, compute 10-40, combine 60-62 (too short to win a bin
    # of 10 µs against processing's own 8 µs there), nothing on core 1
    table = SpanTable("t", ["processing", "processing compute", "processing combine"], ["Rank 0 / AIC 0",
                      "Rank 0 / AIC 1"], 1, np.array([0, 1, 2], np.int32), np.array([0, 0, 0], np.int32),
                      np.array([0.0, 10.0, 60.0]), np.array([100.0, 30.0, 2.0]), RunSettings())
    dominant, start, end = timeline_bins(table, 2, ["processing compute", "processing"], bins=10)
    assert (start, end) == (0.0, 100.0)
    assert dominant[0].tolist() == [1, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    assert dominant[1].tolist() == [-1] * 10
    third = timeline_bins(table, 1, ["processing combine"], bins=10)[0]
    assert third[0].tolist() == [1] * 10  # processing and compute are both "other" now


# ----------------------------------------------------------------------------- pages


def test_report_html_and_png_in_one_run(tmp_path: Path) -> None:
    directory = demo(tmp_path / "d")
    result = invoke("report", directory, "--html", tmp_path / "r.html", "--png", tmp_path / "r.png")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert result.exit_code == 2 and "pip install 'ascend-optrace[report]'" in result.output
        assert not (tmp_path / "r.html").exists()  # refused before doing any work
        return
    assert result.exit_code == 0, result.output
    assert f"wrote {tmp_path / 'r.html'}" in result.output and f"wrote {tmp_path / 'r.png'}" in result.output
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in (tmp_path / "r.html").read_text()


def test_report_html_and_png_to_one_file_is_refused(tmp_path: Path) -> None:
    # One path for both: the chart was written over the page, and report said it wrote both.
    pytest.importorskip("matplotlib", reason="--png needs matplotlib (the [report] extra; [test] brings it)")
    directory = demo(tmp_path / "d")
    result = invoke("report", directory, "--html", tmp_path / "r.out", "--png", tmp_path / "." / "r.out")
    assert result.exit_code == 2 and "--html and --png name one file" in result.output, result.output
    assert not (tmp_path / "r.out").exists()


def test_every_chart_has_axes_units_scale_and_a_hotspot_section(tmp_path: Path) -> None:
    table = load_spans(demo(tmp_path / "d"))
    report = build_report(table, top=4)
    page = render_html(table, report)
    charts = {c["id"]: c for c in parse_charts(page)}
    assert set(charts) == {"hotspots", "per-rank", "per-core", "timeline"}
    for chart in charts.values():
        check_axes(chart)
        assert chart["rects"] > 0
    # `processing`'s self time is time no phase covers: named so, not "processing".
    assert charts["hotspots"]["rows"] == [self_time_name(s.label) for s in report.hotspots]
    assert "processing" not in charts["hotspots"]["rows"] and UNTRACED in page
    # Every figure's meaning where it appears, and a legend beside each chart it colours.
    assert "Imbalance: the busiest" in page and "Self time: a span's time minus" in page
    assert page.count('<div class="with-key">') == 3
    assert charts["per-rank"]["rows"] == ["Rank 0", "Rank 1"]
    assert charts["per-core"]["rows"] == table.tracks == charts["timeline"]["rows"]
    # the scale covers the data: the last tick is at or past the biggest value
    largest = charts["hotspots"]["ticks"][-1][1]
    unit = UNIT.search(charts["hotspots"]["title"]).group(1)  # type: ignore[union-attr]
    assert largest * {"µs": 1, "ms": 1e3, "s": 1e6}[unit] >= report.hotspots[0].self_us
    assert "<h2>Hotspots (self time: children excluded)</h2>" in page
    for s in report.hotspots:
        assert f"<td>{self_time_name(s.label)}</td>" in page


def test_html_stays_under_1_mb_for_8_ranks() -> None:
    table = cluster_table()
    assert table.label.size > 250_000  # one rectangle each would be ~40 MB of SVG
    page = render_html(table, build_report(table)).encode()
    assert len(page) <= 1_000_000, len(page)
    assert page.decode().count("Showing the first 96 of 576 ") == 2  # the core charts and the timeline
    charts = {c["id"]: c for c in parse_charts(page.decode())}
    assert len(charts["per-rank"]["rows"]) == 8
    # twice the spans (two launches' worth on the same cores): the page does not grow
    double = cluster_table(groups=198)
    assert len(render_html(double, build_report(double)).encode()) < 1.1 * len(page)


# ----------------------------------------------------------------------------- in a browser


def keep_artifact(name: str, data: bytes, tmp_path: Path) -> None:
    """A screenshot a reviewer can look at: into $OPTRACE_ARTIFACTS (.ci/run sets it),
    else beside the test's other files."""
    folder = Path(os.environ.get("OPTRACE_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


@pytest.fixture(scope="module")
def browser() -> Any:
    executable = find_chromium()
    if executable is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is missing: .ci/run installs it (apt-get install -y chromium)")
        pytest.skip("no chromium here (Debian: apt-get install -y chromium; .ci/run installs it in CI)")
    with Browser(executable) as running:
        yield running


CHART_GEOMETRY = """[...document.querySelectorAll('svg.chart')].map(svg => {
  const box = e => {
    if (!e) return [0, 0]; const b = e.getBoundingClientRect(); return [b.width, b.height]; };
  const marks = [...svg.querySelectorAll('g.plot rect')].filter(r => {
    const b = r.getBoundingClientRect(); return b.width > 0 && b.height > 0; }).length;
  const ticks = [...svg.querySelectorAll('g.x-axis text')].map(t => t.getBoundingClientRect().width);
  const colours = new Set([...svg.querySelectorAll('g.plot rect')].map(r => getComputedStyle(r).fill));
  return {id: svg.id, svg: box(svg), plot: box(svg.querySelector('g.plot')),
          x: box(svg.querySelector('g.x-axis')), y: box(svg.querySelector('g.y-axis')),
          marks: marks, ticks: ticks, colours: colours.size};
})"""


@pytest.mark.slow
def test_report_page_in_chromium(browser: Any, tmp_path: Path) -> None:
    directory = demo(tmp_path / "d", ranks=8, aic=4, launches=2)
    assert invoke("report", directory, "--html", tmp_path / "r.html").exit_code == 0
    page = browser.new_page()
    page.load(tmp_path / "r.html")
    charts = page.evaluate(CHART_GEOMETRY)
    assert page.errors() == []
    assert [c["id"] for c in charts] == ["hotspots", "per-rank", "per-core", "timeline"]
    for chart in charts:
        assert chart["svg"][0] > 800 and chart["plot"][0] > 100 and chart["plot"][1] > 10, chart
        assert chart["x"][0] > 800 and chart["y"][1] > 10, chart  # both axes laid out
        assert chart["marks"] > 0 and all(w > 0 for w in chart["ticks"]) and len(chart["ticks"]) >= 3, chart
        assert chart["colours"] > 1 or chart["id"] == "hotspots"  # phases told apart
    png = page.screenshot()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert page.drawn_fraction(png) > 0.05  # text, bars and axes: far from a blank page
    keep_artifact("report-page.png", png, tmp_path)


# Per box shown: its rectangle, its core badge and each text's bounds, as the page lays
# them out; and whether the document scrolls sideways.
GRAPH_GEOMETRY = """(() => {
  const edges = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
  const de = document.documentElement;
  const boxes = [...document.querySelectorAll('g.node')].filter(g => g.style.display !== 'none')
    .map(g => ({id: +g.id.slice(1), box: edges(g.querySelector('rect.box')),
                badge: g.querySelector('rect.core') ? edges(g.querySelector('rect.core')) : null,
                texts: [...g.querySelectorAll('text')].map(t => [t.getAttribute('class'), t.textContent,
                                                                ...edges(t)])}));
  const svg = document.getElementById('graph');
  return {scroll: de.scrollWidth, client: de.clientWidth, boxes: boxes,
          scale: svg.getBoundingClientRect().width / +svg.getAttribute('width'),
          traced: document.querySelectorAll('g.node.traced').length};
})()"""


def check_graph_page(page: Any, boxes: list[Any], label: str) -> dict[str, Any]:
    """What the issue asks of the page at the window's size, read from the page: no
    horizontal scroll (nor a drawing scaled down to fit), no two boxes overlapping, every
    text inside its box (the name left of the core badge); the boxes shown and their tops."""
    seen = page.evaluate(GRAPH_GEOMETRY)
    assert seen["scroll"] <= seen["client"], (label, seen["scroll"], seen["client"])
    # Drawn at its own size: the page scales a drawing too wide for a narrower window down,
    # which would hide a layout too wide for this one.
    assert abs(seen["scale"] - 1) < 1e-3, (label, seen["scale"])
    rects = sorted(seen["boxes"], key=lambda b: b["box"][1])
    for a, b in itertools.combinations(rects, 2):
        (l1, t1, r1, b1), (l2, t2, r2, b2) = a["box"], b["box"]
        assert min(r1, r2) <= max(l1, l2) or min(b1, b2) <= max(t1, t2), (label, a["id"], b["id"])
    for shown in seen["boxes"]:
        left, top, right, bottom = shown["box"]
        assert right <= seen["client"], (label, shown["id"], right)
        for cls, text, tl, tt, tr, tb in shown["texts"]:
            assert tr > tl, (label, text)  # drawn, with a font
            assert left - 0.5 <= tl and tr <= right + 0.5 and top - 0.5 <= tt and tb <= bottom + 0.5, \
                (label, shown["id"], cls, text, (tl, tt, tr, tb), shown["box"])
            if cls == "name" and shown["badge"]:
                assert tr <= shown["badge"][0], (label, text)
    # The script stacks the rows as the layout in Python does.
    tops = {b["id"]: b["box"][1] for b in seen["boxes"]}
    return {"tops": tops, "count": len(tops), "traced": seen["traced"]}


def graph_pages(tmp_path: Path) -> list[tuple[str, Path]]:
    return [("plan-graph-page", FIXTURE_OP),
            ("plan-graph-page-wide", write_wide_kernel(tmp_path / "wide", stages=4, fanout=2, depth=6))]


@pytest.mark.slow
def test_plan_graph_page_in_chromium(browser: Any, tmp_path: Path) -> None:
    """At 1400 x 900, expanded, with every group collapsed, and with one group opened
    again: the UMDK-style fixture and a generated kernel deeper and wider than it, whose
    names are longer than any box."""
    for name, op in graph_pages(tmp_path):
        target = tmp_path / f"{name}.html"
        result = invoke("plan", op, "--graph", target)
        assert result.exit_code == 0, result.output
        _g, boxes = plan_boxes(plan_operator(op))
        groups = {i for i, b in enumerate(boxes) if b.group}
        page = browser.new_page()
        page.load(target, width=1400, height=900)
        expanded = check_graph_page(page, boxes, f"{name} expanded")
        assert expanded["count"] == len(boxes) and expanded["traced"] >= 4
        page.evaluate("document.getElementById('collapse-all').click()")
        collapsed = check_graph_page(page, boxes, f"{name} collapsed")
        python = stack(boxes, groups)
        assert set(collapsed["tops"]) == set(python) and collapsed["count"] < len(boxes)
        first = min(collapsed["tops"])
        for i, top in collapsed["tops"].items():  # the same rows, the same gaps
            assert abs((top - collapsed["tops"][first]) - (python[i] - python[first])) < 0.6, (name, i)
        png = page.screenshot()
        assert page.drawn_fraction(png) > 0.01
        keep_artifact(f"{name}.png", png, tmp_path)
        # A click on a group's head opens it: its members come back, still apart.
        head = min(groups)
        page.evaluate(f"document.getElementById('n{head}').dispatchEvent(new MouseEvent('click'))")
        opened = check_graph_page(page, boxes, f"{name} one group open")
        assert set(opened["tops"]) == set(stack(boxes, groups - {head}))
        assert opened["count"] > collapsed["count"]
        assert page.errors() == []


@pytest.mark.slow
def test_the_browser_check_sees_errors_and_blank_pages(browser: Any, tmp_path: Path) -> None:
    """The checks above can fail: a script error and an empty page are caught."""
    (tmp_path / "bad.html").write_text("<!DOCTYPE html><html><body><script>undefinedFunction()</script>"
                                       "</body></html>")
    page = browser.new_page()
    page.load(tmp_path / "bad.html")
    page.evaluate("1")
    assert any("undefinedFunction" in e for e in page.errors())
    assert page.drawn_fraction(page.screenshot()) == 0.0
