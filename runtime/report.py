"""``optrace report``: per-label statistics, imbalance, hotspots, and a picture.

Statistics are per label over all tracks: count, total, mean, p50, p99 of the span
durations, share of the ``processing`` span's total, and per-core imbalance (the max of
the per-core totals over their mean, cores that have the label). Hotspots rank labels by
*self* time (children excluded), which is where time is actually spent. The pictures:
a self-contained HTML page (inline SVG, no script, no external assets) and, with the
``[report]`` extra, a PNG drawn by matplotlib; both can be written in one run.
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .atomic import atomic_output
from .rollup import LabelStats, PageData, ReportRollup
from .spans import PROCESSING, Closing, RunCounts, SpanTable, rank_of_track


@dataclass(frozen=True)
class Report:
    """`report`'s figures for one trace: per-label statistics, hot spots and warnings."""

    source: str
    counts: RunCounts
    processing_total_us: float | None
    stats: list[LabelStats]  # in label order (hierarchy reads top-down)
    hotspots: list[LabelStats]  # by self time, descending
    busy_self_us: float
    warnings: list[str]


def build_report(table: SpanTable, top: int = 10) -> Report:
    """report's figures of a table holding every span (one chunk)."""
    rollup = ReportRollup()
    rollup.add(table)
    return report_of(rollup, table.source, table.warnings, top)


def rolled_report(chunks: Iterable[SpanTable], closing: Closing, top: int = 10,
                  page: bool = False) -> tuple[Report, PageData | None]:
    """report's figures of a source read a rank at a time (spans.Closing complete once
    ``chunks`` are), and with ``page`` what its page and PNG draw."""
    rollup = ReportRollup(page_rows=_MAX_TRACKS if page else None)
    for table in chunks:
        rollup.add(table)
    return report_of(rollup, closing.source, closing.warnings, top), rollup.page() if page else None


def report_of(rollup: ReportRollup, source: str, warnings: list[str], top: int = 10) -> Report:
    """report's figures of what ``rollup`` was given, a rank at a time or all at once;
    ``warnings``: the source's own (the label-path check's follow)."""
    processing_total, stats, hotspots = rollup.stats(top)
    return Report(
        source=source,
        counts=rollup.rows.counts(),
        processing_total_us=processing_total,
        stats=stats,
        hotspots=hotspots,
        busy_self_us=rollup.busy_self,
        warnings=[*warnings, *rollup.label_path_warnings()],
    )


def _us(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.3f} s"
    if value >= 1e3:
        return f"{value / 1e3:.3f} ms"
    return f"{value:.2f} µs"


def format_text(report: Report) -> str:
    width = max([len(s.label) for s in report.stats] + [5])
    lines = [f"report for {report.source}: {report.counts.text()}"]
    if report.processing_total_us is not None:
        lines.append(f"processing total (all cores): {_us(report.processing_total_us)}")
    header = (f"{'label':<{width}}  {'count':>7}  {'total':>12}  {'mean':>11}  {'p50':>11}  "
              f"{'p99':>11}  {'share':>6}  {'imbal':>5}")
    lines += ["", header, "-" * len(header)]
    for s in report.stats:
        share = f"{100 * s.share:5.1f}%" if s.share is not None else "     -"
        lines.append(
            f"{s.label:<{width}}  {s.count:>7}  {_us(s.total_us):>12}  {_us(s.mean_us):>11}  "
            f"{_us(s.p50_us):>11}  {_us(s.p99_us):>11}  {share}  {s.imbalance:5.2f}"
        )
    lines += ["imbal: imbalance, the busiest core's total of the label over the mean core's "
              "(1.00: every core the same)"]
    lines += ["", "hotspots (self time: children excluded)"]
    hot = max([len(self_time_name(s.label)) for s in report.hotspots] + [width])
    for rank, s in enumerate(report.hotspots, 1):
        busy = 100 * s.self_us / report.busy_self_us if report.busy_self_us else 0.0
        name = self_time_name(s.label)
        lines.append(f"{rank:>3}. {name:<{hot}}  {_us(s.self_us):>12}  {busy:5.1f}% of busy time"
                     + (f"  (imbalance {s.imbalance:.2f})" if s.imbalance >= 1.2 else ""))
    if report.warnings:
        lines += ["", f"{len(report.warnings)} warnings:"] + [f"  {w}" for w in report.warnings[:20]]
        if len(report.warnings) > 20:
            lines.append(f"  ... and {len(report.warnings) - 20} more")
    return "\n".join(lines) + "\n"


def report_json(report: Report) -> dict[str, Any]:
    def row(s: LabelStats) -> dict[str, Any]:
        return {k: getattr(s, k) for k in LabelStats.__dataclass_fields__}

    return {
        "source": report.source,
        "processing_total_us": report.processing_total_us,
        "labels": [row(s) for s in report.stats],
        "hotspots": [s.label for s in report.hotspots],
        "warnings": report.warnings,
    }


# ----------------------------------------------------------------------------- pictures
#
# Every chart is horizontal rows against one linear time axis: ticks at round values
# (1, 2 or 5 x 10^k), the unit in the axis title (µs, ms or s, whichever keeps the tick
# values short), light grid lines at the ticks. The HTML page aggregates (self time per
# label, per rank, per core; a timeline of fixed bins per core), so its size depends on
# the number of cores shown, not on the number of spans: a few hundred kB for 8 ranks of
# 72 cores where one rectangle per span would be tens of MB.

_PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#1f77b4", "#2ca02c", "#d62728", "#9467bd"]
_OTHER_COLOUR = "#bab0ac"
_MAX_TRACKS = 96  # rows of the per-core charts (the page says how many it leaves out)
PAGE_ROWS = _MAX_TRACKS
_TOP_PHASES = 8  # labels coloured on their own; the rest are "other"
TIMELINE_BINS = 120  # per core: each bin coloured by the label with the most self time in it
_LABEL_W, _PLOT_W, _ROW_H, _TOP, _AXIS_H = 210, 820, 16, 8, 44


def time_unit(max_us: float) -> tuple[str, float]:
    """The unit an axis reaching ``max_us`` is labelled in, and µs per that unit."""
    if max_us >= 1e6:
        return "s", 1e6
    if max_us >= 1e3:
        return "ms", 1e3
    return "µs", 1.0


def nice_ticks(maximum: float, count: int = 5) -> list[float]:
    """0, then round steps (1, 2 or 5 x 10^k) until ``maximum`` is covered: about
    ``count`` intervals, the last tick >= maximum (the axis ends there)."""
    if not maximum > 0 or not math.isfinite(maximum):
        return [0.0, 1.0]
    raw = maximum / count
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1.0, 2.0, 5.0, 10.0) if m * magnitude >= raw * (1 - 1e-12))
    intervals = max(1, math.ceil(maximum / step - 1e-9))
    return [round(i * step, 12) for i in range(intervals + 1)]


class _Axis:
    """A linear time axis from 0 to the last round tick at or above ``max_us``."""

    def __init__(self, max_us: float, title: str) -> None:
        self.unit, self.per_unit = time_unit(max_us)
        self.ticks = nice_ticks(max_us / self.per_unit)
        self.end_us = self.ticks[-1] * self.per_unit
        self.title = f"{title} ({self.unit})"

    def x(self, us: float) -> float:
        return _LABEL_W + _PLOT_W * us / self.end_us


def _phase_order(report: Report) -> list[str]:
    """Labels coloured on their own: the biggest by self time."""
    return [s.label for s in report.hotspots[:_TOP_PHASES]]


def _phase_columns(table: SpanTable, phases: list[str]) -> np.ndarray:
    """For each label index of ``table``: its column among ``phases``, len(phases) for other."""
    index = {label: i for i, label in enumerate(phases)}
    return np.array([index.get(label, len(phases)) for label in table.labels] or [0], dtype=np.int64)


#: What the self time of the outermost span is: time inside ``processing`` that no traced
#: phase covers. A bar labelled ``processing`` read as "processing took this long".
UNTRACED = "untraced"


def self_time_name(label: str) -> str:
    """How a label's self time is named on a chart or in a hot-spot list."""
    return UNTRACED if label == PROCESSING else label


def page_of(table: SpanTable | PageData) -> PageData:
    """What the page draws of a table holding every span (a page's data passes through)."""
    if isinstance(table, PageData):
        return table
    rollup = ReportRollup(page_rows=_MAX_TRACKS)
    rollup.add(table)
    return rollup.page()


def per_track_self(page: PageData, labels: list[str]) -> tuple[np.ndarray, list[str]]:
    """[rows, len(labels)+1] self time per row for the given labels, then 'other'
    (names as the charts show them: ``processing``'s self time is untraced time)."""
    index = {label: i for i, label in enumerate(labels)}
    column = np.array([index.get(label, len(labels)) for label in page.labels] or [0], dtype=np.int64)
    matrix = np.zeros((len(page.tracks), len(labels) + 1))
    if page.self_us.size:
        np.add.at(matrix, (page.self_row, column[page.self_label]), page.self_us)
    return matrix, [*map(self_time_name, labels), "other"]


def per_process_self(page: PageData, matrix: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """``per_track_self`` summed over the cores of each rank, its launches together
    ("Rank 0" of "Rank 0 (launch 3) / AIC 3"; a process not named by rank stands alone)."""
    names: dict[str, int] = {}
    group = np.array([names.setdefault(rank_of_track(t), len(names)) for t in page.tracks] or [0],
                     dtype=np.int64)
    summed = np.zeros((len(names), matrix.shape[1]))
    if len(page.tracks):
        np.add.at(summed, group[: len(page.tracks)], matrix)
    return summed, list(names)


def timeline_bins(table: SpanTable, tracks: int, phases: list[str],
                  bins: int = TIMELINE_BINS) -> tuple[np.ndarray, float, float]:
    """[tracks, bins]: per core and time bin, the column (``phases`` order, then other)
    of the label with the most self time in that bin, -1 where nothing ran; and the
    first start and last end in µs. A span's self time is spread evenly over it."""
    dominant = np.full((tracks, bins), -1, dtype=np.int64)
    keep = np.flatnonzero((table.track < tracks) & (table.dur > 0))
    if keep.size == 0:
        return dominant, 0.0, 0.0
    start_us = float(table.ts[keep].min())
    end_us = float((table.ts[keep] + table.dur[keep]).max())
    width = max(end_us - start_us, 1e-9) / bins
    ts = table.ts[keep] - start_us
    end = ts + table.dur[keep]
    first = np.clip((ts / width).astype(np.int64), 0, bins - 1)
    last = np.clip(np.ceil(end / width).astype(np.int64) - 1, first, bins - 1)
    counts = last - first + 1
    span = np.repeat(np.arange(keep.size), counts)  # one row per (span, bin it touches)
    offset = np.arange(span.size) - np.repeat(np.cumsum(counts) - counts, counts)
    bin_of = first[span] + offset
    overlap = np.minimum(end[span], (bin_of + 1) * width) - np.maximum(ts[span], bin_of * width)
    density = table.self_time[keep] / table.dur[keep]
    column = _phase_columns(table, phases)[table.label[keep]]
    cube = np.zeros((tracks, bins, len(phases) + 1))
    weight = np.clip(overlap, 0, None) * density[span]
    np.add.at(cube, (table.track[keep][span], bin_of, column[span]), weight)
    busy = cube.sum(axis=2) > 0
    dominant[busy] = cube.argmax(axis=2)[busy]
    return dominant, start_us, end_us


def _svg_chart(chart_id: str, caption: str, rows: list[str], axis: _Axis, marks: list[str]) -> str:
    """Rows named on the left (y axis), ``marks`` in the plot, the time axis below."""
    bottom = _TOP + len(rows) * _ROW_H
    width, height = _LABEL_W + _PLOT_W + 30, bottom + _AXIS_H
    grid, ticks = [], []
    for value in axis.ticks:
        x = axis.x(value * axis.per_unit)
        grid.append(f'<line x1="{x:.1f}" y1="{_TOP}" x2="{x:.1f}" y2="{bottom}"/>')
        ticks.append(f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 5}"/>'
                     f'<text x="{x:.1f}" y="{bottom + 17}" text-anchor="middle">{value:g}</text>')
    names = "".join(
        f'<text x="{_LABEL_W - 6}" y="{_TOP + i * _ROW_H + 11}" text-anchor="end">{html.escape(name)}</text>'
        for i, name in enumerate(rows)
    )
    return (
        f'<svg class="chart" id="{chart_id}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(caption)}" '
        'xmlns="http://www.w3.org/2000/svg">'
        f'<g class="grid">{"".join(grid)}</g>'
        f'<g class="plot">{"".join(marks)}</g>'
        f'<g class="axis y-axis"><line x1="{_LABEL_W}" y1="{_TOP}" x2="{_LABEL_W}" y2="{bottom}"/>{names}</g>'
        f'<g class="axis x-axis"><line x1="{_LABEL_W}" y1="{bottom}" x2="{_LABEL_W + _PLOT_W}" '
        f'y2="{bottom}"/>{"".join(ticks)}'
        f'<text class="axis-title" x="{_LABEL_W + _PLOT_W / 2:.0f}" y="{bottom + 36}" '
        f'text-anchor="middle">{html.escape(axis.title)}</text></g></svg>'
    )


def _stacked_bars(chart_id: str, caption: str, rows: list[str], matrix: np.ndarray,
                  names: list[str], axis_title: str) -> str:
    """One bar per row, split by phase (class k<column> colours it)."""
    axis = _Axis(float(matrix.sum(axis=1).max()) if matrix.size else 0.0, axis_title)
    marks: list[str] = []
    for r in range(len(rows)):
        x = float(_LABEL_W)
        for j, name in enumerate(names):
            value = float(matrix[r, j])
            if value <= 0:
                continue
            w = _PLOT_W * value / axis.end_us
            marks.append(f'<rect class="k{j}" x="{x:.2f}" y="{_TOP + r * _ROW_H + 1}" width="{w:.2f}" '
                         f'height="{_ROW_H - 3}"><title>{html.escape(rows[r])}, {html.escape(name)}: '
                         f"{_us(value)}</title></rect>")
            x += w
    return _svg_chart(chart_id, caption, rows, axis, marks)


def _hotspot_chart(report: Report) -> str:
    axis = _Axis(max((s.self_us for s in report.hotspots), default=0.0), "self time, all cores")
    marks = []
    for r, s in enumerate(report.hotspots):
        share = 100 * s.self_us / report.busy_self_us if report.busy_self_us else 0.0
        j = r if r < _TOP_PHASES else _TOP_PHASES
        marks.append(f'<rect class="k{j}" x="{_LABEL_W}" y="{_TOP + r * _ROW_H + 1}" '
                     f'width="{_PLOT_W * s.self_us / axis.end_us:.2f}" height="{_ROW_H - 3}">'
                     f"<title>{html.escape(s.label)}: {_us(s.self_us)} ({share:.1f} % of busy time)"
                     "</title></rect>")
    return _svg_chart("hotspots", "self time per label", [self_time_name(s.label) for s in report.hotspots],
                      axis, marks)


def _timeline_chart(table: SpanTable, rows: list[str], phases: list[str]) -> str:
    dominant, start_us, end_us = timeline_bins(table, len(rows), phases)
    axis = _Axis(end_us - start_us, "time since the first span")
    bins = dominant.shape[1]
    bin_w = _PLOT_W * (end_us - start_us) / axis.end_us / bins
    marks: list[str] = []
    for r in range(len(rows)):
        line = dominant[r].tolist()
        b = 0
        while b < bins:  # one rectangle per run of bins of the same label
            e = b
            while e + 1 < bins and line[e + 1] == line[b]:
                e += 1
            if line[b] >= 0:
                marks.append(f'<rect class="k{line[b]}" x="{_LABEL_W + b * bin_w:.1f}" '
                             f'y="{_TOP + r * _ROW_H + 1}" width="{(e - b + 1) * bin_w:.1f}" '
                             f'height="{_ROW_H - 3}"/>')
            b = e + 1
    return _svg_chart("timeline", "timeline per core", rows, axis, marks)


def render_html(data: SpanTable | PageData, report: Report) -> str:
    """The report page: summary, hotspots, self time per rank and per core by phase, a
    binned timeline per core, the label table. Self-contained (inline SVG and CSS, no
    script, no external asset)."""
    page = page_of(data)
    phases = _phase_order(report)
    matrix, names = per_track_self(page, phases)
    colours = [*(_PALETTE[i % len(_PALETTE)] for i in range(len(phases))), _OTHER_COLOUR]
    shown = min(len(page.tracks), _MAX_TRACKS)
    core_rows = page.tracks[:shown]
    by_process, processes = per_process_self(page, matrix)
    what = "core × launch rows" if report.counts.launches > 1 else "cores"
    more = (f"<p>Showing the first {shown} of {len(page.tracks)} {what} (the rank chart sums all). "
            "Every row: <code>optrace inspect</code>; other rows: collect a part "
            "(<code>optrace collect --ranks R --cores C</code>) and report that trace.</p>"
            if shown < len(page.tracks) else "")
    keys = "".join(f'<span class="key"><i class="k{j}"></i>{html.escape(n)}</span>'
                   for j, n in enumerate(names))
    legend = f'<div class="keys">{keys}</div>'

    def with_key(chart: str) -> str:  # the legend beside the chart it explains, not a screen away
        return f'<div class="with-key">{chart}{legend}</div>'

    style_keys = "".join(f".k{j}{{fill:{c};background:{c}}}" for j, c in enumerate(colours))
    hot_rows = "".join(
        f"<tr><td>{rank}</td><td>{html.escape(self_time_name(s.label))}</td><td>{_us(s.self_us)}</td>"
        f"<td>{100 * s.self_us / report.busy_self_us if report.busy_self_us else 0.0:.1f}%</td>"
        f"<td>{s.imbalance:.2f}</td></tr>"
        for rank, s in enumerate(report.hotspots, 1)
    )
    rows = "".join(
        f"<tr><td>{html.escape(s.label)}</td><td>{s.count}</td><td>{_us(s.total_us)}</td>"
        f"<td>{_us(s.mean_us)}</td><td>{_us(s.p50_us)}</td><td>{_us(s.p99_us)}</td>"
        f"<td>{'' if s.share is None else f'{100 * s.share:.1f}%'}</td><td>{s.imbalance:.2f}</td></tr>"
        for s in report.stats
    )
    summary = report.counts.text()
    if report.processing_total_us is not None:
        summary += f"; processing total (all cores) {_us(report.processing_total_us)}"
    warnings = (f"<p>{len(report.warnings)} warnings (see the text report).</p>" if report.warnings else "")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>optrace report</title>
<style>
body{{font:13px system-ui,sans-serif;margin:24px;color:#222}} table{{border-collapse:collapse}}
td,th{{padding:2px 10px;border-bottom:1px solid #eee;text-align:right}}
td:first-child,th:first-child,.hot td:nth-child(2),.hot th:nth-child(2){{text-align:left}}
svg text{{font:11px system-ui,sans-serif;fill:#222}} .axis line{{stroke:#444}} .grid line{{stroke:#e4e4e4}}
.axis-title{{font-weight:600}} .key{{margin-right:14px;white-space:nowrap}}
.key i{{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}}
.with-key{{display:flex;align-items:flex-start;gap:12px}} .with-key svg{{flex:none}}
.keys{{display:flex;flex-direction:column;gap:3px;position:sticky;top:8px}} .def{{color:#555;max-width:900px}}
{style_keys}
</style></head><body>
<h1>optrace report</h1><p>{html.escape(report.source)}</p><p>{summary}</p>{warnings}
<h2>Hotspots (self time: children excluded)</h2>
<p class="def">Self time: a span's time minus its child spans'; <i>{html.escape(UNTRACED)}</i> is
time inside <code>processing</code> that no traced phase covers. Imbalance: the busiest
core's total of the label over the mean core's (1.00: every core the same).</p>
{_hotspot_chart(report)}
<table class="hot"><tr><th>#</th><th>label</th><th>self time</th><th>of busy time</th><th>imbalance</th></tr>
{hot_rows}</table>
<h2>Self time per rank, by phase</h2>
{with_key(_stacked_bars("per-rank", "self time per rank by phase", processes, by_process, names,
                        "self time, all cores of the rank"))}
<h2>Self time per core, by phase</h2>{more}
{with_key(_stacked_bars("per-core", "self time per core by phase", core_rows, matrix[:shown], names,
                        "self time"))}
<h2>Timeline per core</h2>
<p>{TIMELINE_BINS} bins per core, each coloured by the label with the most self time in it.</p>{more}
{with_key(_timeline_chart(page.shown, core_rows, phases))}
<h2>Labels</h2>
<p class="def">Total: the label's spans summed over every core; share: of <code>processing</code>'s
total; imbalance: the busiest core's total of the label over the mean core's.</p>
<table><tr><th>label</th><th>count</th><th>total</th><th>mean</th><th>p50</th><th>p99</th><th>share</th><th>imbalance</th></tr>
{rows}</table>
</body></html>
"""


def write_html(data: SpanTable | PageData, report: Report, path: Path) -> None:
    """The self-contained HTML page (:func:`render_html`)."""
    write_output(path, render_html(data, report).encode("utf-8", "replace"))  # non-UTF-8 path: U+FFFD


def write_output(path: Path, data: bytes) -> None:
    """The one place report writes a file (atomically: a reader sees the old file or the new)."""
    with atomic_output(path) as handle:
        handle.write(data)


class MissingExtra(Exception):
    """An optional dependency is not installed (the message says how to get it)."""


def require_matplotlib() -> None:
    """Fail before any work when --png cannot be honoured."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise MissingExtra(
            "--png needs matplotlib: pip install 'ascend-optrace[report]' (or use --html FILE)"
        )


def render_png(data: SpanTable | PageData, report: Report) -> bytes:
    """The HTML page's three bar charts as one PNG (needs the ``[report]`` extra): hotspots,
    self time per rank and per core by phase, each with its time axis in µs, ms or s."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    page = page_of(data)
    phases = _phase_order(report)
    matrix, names = per_track_self(page, phases)
    by_process, processes = per_process_self(page, matrix)
    shown = min(len(page.tracks), _MAX_TRACKS)
    colours = [*(_PALETTE[i % len(_PALETTE)] for i in range(len(phases))), _OTHER_COLOUR]
    heights = [max(1.5, 0.22 * n + 1.0) for n in (len(report.hotspots), len(processes), shown)]
    fig, axes = plt.subplots(3, 1, figsize=(11, sum(heights) + 1), height_ratios=heights)
    hot_unit, hot_scale = time_unit(max((s.self_us for s in report.hotspots), default=0.0))
    axes[0].barh([s.label for s in report.hotspots], [s.self_us / hot_scale for s in report.hotspots],
                 color=[colours[min(i, len(phases))] for i in range(len(report.hotspots))])
    axes[0].set_xlabel(f"self time, all cores ({hot_unit})")
    axes[0].set_title("hotspots (self time: children excluded)")
    for ax, rows, values, title in (
        (axes[1], processes, by_process, "self time per rank by phase"),
        (axes[2], page.tracks[:shown], matrix[:shown], "self time per core by phase"
         + (f" (first {shown} of {len(page.tracks)})" if shown < len(page.tracks) else "")),
    ):
        unit, scale = time_unit(float(values.sum(axis=1).max()) if values.size else 0.0)
        left = np.zeros(len(rows))
        for j, name in enumerate(names):
            ax.barh(rows, values[:, j] / scale, left=left, color=colours[j], label=name)
            left += values[:, j] / scale
        ax.set_xlabel(f"self time ({unit})")
        ax.set_title(title)
    axes[1].legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small")  # beside, not over
    for ax in axes:
        ax.margins(x=0.02, y=0.01)
        ax.set_xlim(left=0)
        ax.invert_yaxis()
        ax.tick_params(axis="y", labelsize="small")
        ax.grid(axis="x", color="#e4e4e4")
        ax.set_axisbelow(True)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def write_png(data: SpanTable | PageData, report: Report, path: Path) -> None:
    write_output(path, render_png(data, report))
