"""``optrace report``: per-label statistics, imbalance, hotspots, and a picture.

Statistics are per label over all tracks: count, total, mean, p50, p99 of the span
durations, share of the ``processing`` span's total, and per-core imbalance (the max of
the per-core totals over their mean, cores that have the label). Hotspots rank labels by
*self* time (children excluded), which is where time is actually spent. The picture is
a self-contained HTML page (inline SVG, no external assets) or, with the ``[report]``
extra, a PNG drawn by matplotlib.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .atomic import atomic_output
from .spans import PROCESSING, SpanTable


@dataclass(frozen=True)
class LabelStats:
    label: str
    count: int
    total_us: float
    mean_us: float
    p50_us: float
    p99_us: float
    self_us: float
    share: float | None  # of the processing total; None without a processing span
    imbalance: float  # max over mean of per-track totals
    tracks: int


@dataclass(frozen=True)
class Report:
    source: str
    processing_total_us: float | None
    stats: list[LabelStats]  # in label order (hierarchy reads top-down)
    hotspots: list[LabelStats]  # by self time, descending
    busy_self_us: float
    warnings: list[str]


def _groups(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort order, unique keys and group boundaries of an integer column."""
    order = np.argsort(keys, kind="stable")
    values, starts = np.unique(keys[order], return_index=True)
    bounds = np.append(starts, keys.size)
    return order, values, bounds


def build_report(table: SpanTable, top: int = 10) -> Report:
    stats: list[LabelStats] = []
    processing = table.labels.index(PROCESSING) if PROCESSING in table.labels else None
    processing_total = float(table.dur[table.label == processing].sum()) if processing is not None else None
    if processing_total == 0.0:
        processing_total = None
    order, values, bounds = _groups(table.label)
    for i, label_index in enumerate(values.tolist()):
        rows = order[bounds[i] : bounds[i + 1]]
        dur = table.dur[rows]
        per_track = np.bincount(table.track[rows], weights=dur)
        per_track = per_track[per_track > 0] if (per_track > 0).any() else per_track[:1]
        mean_track = float(per_track.mean()) if per_track.size else 0.0
        total = float(dur.sum())
        stats.append(
            LabelStats(
                label=table.labels[label_index],
                count=int(rows.size),
                total_us=total,
                mean_us=float(dur.mean()),
                p50_us=float(np.percentile(dur, 50)),
                p99_us=float(np.percentile(dur, 99)),
                self_us=float(table.self_time[rows].sum()),
                share=total / processing_total if processing_total else None,
                imbalance=float(per_track.max() / mean_track) if mean_track > 0 else 1.0,
                tracks=int(np.unique(table.track[rows]).size),
            )
        )
    stats.sort(key=lambda s: s.label)
    hotspots = sorted(stats, key=lambda s: s.self_us, reverse=True)[:top]
    return Report(
        source=table.source,
        processing_total_us=processing_total,
        stats=stats,
        hotspots=hotspots,
        busy_self_us=float(table.self_time.sum()),
        warnings=list(table.warnings),
    )


def _us(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.3f} s"
    if value >= 1e3:
        return f"{value / 1e3:.3f} ms"
    return f"{value:.2f} µs"


def format_text(report: Report) -> str:
    width = max([len(s.label) for s in report.stats] + [5])
    lines = [f"report for {report.source}"]
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
    lines += ["", "hotspots (self time: children excluded)"]
    for rank, s in enumerate(report.hotspots, 1):
        busy = 100 * s.self_us / report.busy_self_us if report.busy_self_us else 0.0
        lines.append(f"{rank:>3}. {s.label:<{width}}  {_us(s.self_us):>12}  {busy:5.1f}% of busy time"
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

_PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac", "#1f77b4", "#2ca02c", "#d62728", "#9467bd"]
_MAX_TRACKS = 96
_MAX_RECTS = 40_000


def _phase_colours(table: SpanTable, report: Report) -> dict[str, str]:
    ranked = [s.label for s in report.hotspots] + [s.label for s in report.stats]
    colours: dict[str, str] = {}
    for label in ranked:
        if label not in colours:
            colours[label] = _PALETTE[len(colours) % len(_PALETTE)]
    return colours


def per_track_self(table: SpanTable, labels: list[str]) -> tuple[np.ndarray, list[str]]:
    """[tracks, len(labels)+1] self time per track for the given labels, then 'other'."""
    index = {table.labels.index(lab): i for i, lab in enumerate(labels)}
    column = np.array([index.get(i, len(labels)) for i in range(len(table.labels))] or [0], dtype=np.int64)
    matrix = np.zeros((len(table.tracks), len(labels) + 1))
    if table.label.size:
        np.add.at(matrix, (table.track, column[table.label]), table.self_time)
    return matrix, [*labels, "other"]


def _track_label(label_w: int, y: int, name: str) -> str:
    return f'<text x="{label_w - 6}" y="{y + 11}" text-anchor="end">{html.escape(name)}</text>'


def write_html(table: SpanTable, report: Report, path: Path) -> None:
    """One self-contained page: summary, per-core stacked bars, per-core timeline."""
    colours = _phase_colours(table, report)
    top_labels = [s.label for s in report.hotspots[:8]]
    matrix, names = per_track_self(table, top_labels)
    colour_of = {**colours, "other": "#cccccc"}
    tracks = list(range(min(len(table.tracks), _MAX_TRACKS)))
    row_h, label_w, plot_w = 16, 190, 860
    # stacked bars: self time per core, split by phase
    total_max = float(matrix.sum(axis=1).max()) if matrix.size else 0.0
    bars: list[str] = []
    for row, t in enumerate(tracks):
        x = float(label_w)
        y = 20 + row * row_h
        bars.append(_track_label(label_w, y, table.tracks[t]))
        for j, name in enumerate(names):
            value = float(matrix[t, j])
            if value <= 0 or total_max <= 0:
                continue
            w = plot_w * value / total_max
            bars.append(
                f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h - 3}" fill="{colour_of[name]}">'
                f"<title>{html.escape(name)}: {_us(value)}</title></rect>"
            )
            x += w
    bars_h = 30 + len(tracks) * row_h
    # timeline: spans of depth <= 2 on the first tracks
    t_end = float((table.ts + table.dur).max()) if table.ts.size else 0.0
    t_start = float(table.ts.min()) if table.ts.size else 0.0
    span = max(t_end - t_start, 1e-9)
    rects: list[str] = []
    shown = np.flatnonzero((table.track < len(tracks)) & (table.depth <= 2))
    widths = plot_w * table.dur[shown] / span
    shown = shown[np.argsort(-widths, kind="stable")][:_MAX_RECTS]  # widest first survive the cap
    for i in sorted(shown.tolist(), key=lambda k: (int(table.depth[k]), k)):
        depth = int(table.depth[i])
        x = label_w + plot_w * (float(table.ts[i]) - t_start) / span
        w = max(plot_w * float(table.dur[i]) / span, 0.5)
        y = 20 + int(table.track[i]) * row_h + depth * 4
        label = table.labels[int(table.label[i])]
        rects.append(
            f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h - 3 - depth * 4}" '
            f'fill="{colours.get(label, "#999")}"><title>{html.escape(label)}: '
            f"{_us(float(table.dur[i]))} at {float(table.ts[i]):.2f} µs</title></rect>"
        )
    labels_txt = [_track_label(label_w, 20 + r * row_h, table.tracks[t]) for r, t in enumerate(tracks)]
    legend = "".join(
        f'<span class="key"><i style="background:{colour_of[n]}"></i>{html.escape(n)}</span>' for n in names
    )
    rows = "".join(
        f"<tr><td>{html.escape(s.label)}</td><td>{s.count}</td><td>{_us(s.total_us)}</td>"
        f"<td>{_us(s.mean_us)}</td><td>{_us(s.p50_us)}</td><td>{_us(s.p99_us)}</td>"
        f"<td>{'' if s.share is None else f'{100 * s.share:.1f}%'}</td><td>{s.imbalance:.2f}</td></tr>"
        for s in report.stats
    )
    more = (f"<p>Showing {len(tracks)} of {len(table.tracks)} cores.</p>"
            if len(tracks) < len(table.tracks) else "")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>optrace report</title>
<style>
body{{font:13px system-ui,sans-serif;margin:24px;color:#222}} table{{border-collapse:collapse}}
td,th{{padding:2px 10px;border-bottom:1px solid #eee;text-align:right}}
td:first-child,th:first-child{{text-align:left}}
svg text{{font:11px system-ui,sans-serif}} .key{{margin-right:14px;white-space:nowrap}}
.key i{{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}}
</style></head><body>
<h1>optrace report</h1><p>{html.escape(report.source)}</p>
<h2>Self time per core, by phase</h2><p>{legend}</p>{more}
<svg width="{label_w + plot_w + 20}" height="{bars_h}" xmlns="http://www.w3.org/2000/svg">{"".join(bars)}</svg>
<h2>Timeline (depth &le; 2)</h2>
<svg width="{label_w + plot_w + 20}" height="{bars_h}" xmlns="http://www.w3.org/2000/svg">{"".join(labels_txt)}{"".join(rects)}</svg>
<h2>Labels</h2>
<table><tr><th>label</th><th>count</th><th>total</th><th>mean</th><th>p50</th><th>p99</th><th>share</th><th>imbalance</th></tr>
{rows}</table>
</body></html>
"""
    with atomic_output(path) as handle:
        handle.write(page.encode("utf-8", "replace"))  # a non-UTF-8 path shows as U+FFFD


class MissingExtra(Exception):
    """An optional dependency is not installed (the message says how to get it)."""


def require_matplotlib() -> None:
    """Fail before any work when --png cannot be honoured."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise MissingExtra(
            "--png needs matplotlib: pip install 'ascend-optrace[report]' (or use --html FILE)"
        )


def write_png(table: SpanTable, report: Report, path: Path) -> None:
    """Stacked bars of self time per core by phase (needs the ``[report]`` extra)."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    top_labels = [s.label for s in report.hotspots[:8]]
    matrix, names = per_track_self(table, top_labels)
    tracks = list(range(min(len(table.tracks), _MAX_TRACKS)))
    colours = {**_phase_colours(table, report), "other": "#cccccc"}
    fig, ax = plt.subplots(figsize=(11, max(2.5, 0.22 * len(tracks) + 1.5)))
    left = np.zeros(len(tracks))
    for j, name in enumerate(names):
        values = matrix[tracks, j]
        ax.barh([table.tracks[t] for t in tracks], values, left=left, color=colours[name], label=name)
        left += values
    ax.invert_yaxis()
    ax.set_xlabel("self time (µs)")
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title("optrace: self time per core by phase")
    fig.tight_layout()
    with atomic_output(path) as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)

