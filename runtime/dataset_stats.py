"""``report`` and ``compare`` on a dataset: their figures computed in DuckDB, where the spans are.

A dataset of a cluster holds more spans than one Python process should: the statistics
are SQL aggregates over the table ``spans`` (runtime/query.py's connection: the dataset
and nothing else), and only their results — a row per label, a row per launch and label
— come back. They are the figures ``report`` and ``compare`` compute from a trace of the
same data (tests/runtime/test_dataset_stats.py):

- a row (a track of the trace) is a core's spans of one launch: (rank, tag, launch, core
  type, core);
- a label's self time is its total minus its direct children's (``parent_label``);
- p50 / p99 interpolate linearly (``quantile_cont``, numpy's default);
- a launch's time of a label is the largest per-core total over the launch's cores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .compare import LaunchTimes, MeasuredRun
from .labelpaths import disagreement, label_parents
from .query import connect, cores_filtered, rank_table, run_settings
from .report import Report
from .rollup import LabelStats
from .spans import PROCESSING, RunCounts, skipped_warnings

_ROW = "rank, tag, launch, core_type, core"

# Each label's total per row: small (labels x rows), kept for the counts too, so the
# dataset is read twice in all rather than once per figure.
_PER_ROW = f"""\
CREATE TEMP TABLE per_row AS
SELECT label, {_ROW}, count(*) AS spans, sum(dur_ns) AS ns FROM spans GROUP BY label, {_ROW}"""

_LABELS = """\
WITH rows_of AS (
    SELECT label, count(*) AS tracks, max(ns) FILTER (WHERE ns > 0) AS most,
           avg(ns) FILTER (WHERE ns > 0) AS mean
    FROM per_row GROUP BY label),
children AS (
    SELECT parent_label AS label, sum(dur_ns) AS ns FROM spans
    WHERE parent_label IS NOT NULL GROUP BY parent_label)
SELECT s.label, count(*) AS spans, sum(s.dur_ns) AS total_ns, avg(s.dur_ns) AS mean_ns,
       quantile_cont(s.dur_ns, 0.5) AS p50_ns, quantile_cont(s.dur_ns, 0.99) AS p99_ns,
       any_value(r.tracks) AS tracks, any_value(r.most) AS most, any_value(r.mean) AS mean,
       any_value(coalesce(c.ns, 0)) AS children_ns
FROM spans s JOIN rows_of r USING (label) LEFT JOIN children c USING (label)
GROUP BY s.label ORDER BY s.label"""

_LAUNCHES_HELD = "SELECT DISTINCT tag, launch FROM per_row"
_COUNTS = f"""\
SELECT count(DISTINCT rank), count(DISTINCT (tag, launch)), count(DISTINCT (rank, core_type, core)),
       count(DISTINCT ({_ROW})), coalesce(sum(spans), 0)
FROM per_row"""

# Spans whose label names a parent label (label_paths: child -> parent) that lie inside
# no span of it on their row, on rows that ran the parent (labelpaths.outside_parent: of
# the parent's spans started at or before the child, the latest end must be at or after
# the child's — a running maximum of the ends by start, then an ASOF join; a label nested
# in itself, P > P > child, has its child inside the first P). A span whose own parent span
# has that label lies inside it (the decoder nests spans properly, and rounding to ns keeps
# them nested): only the others are searched, a few where the names and the nesting agree.
_KEY = "rank, coalesce(tag, '') AS tag, launch, core_type, core"
_KEY_NAMES = "rank, tag, launch, core_type, core"
_SAME = " AND ".join(f"k.{c} = q.{c}" for c in ("rank", "tag", "launch", "core_type", "core", "parent"))
_OUTSIDE = f"""\
WITH parent_spans AS (
    SELECT {_KEY}, label AS parent, start_ns, end_ns FROM spans
    WHERE label IN (SELECT parent FROM label_paths)),
parents AS (
    SELECT {_KEY_NAMES}, parent, start_ns, max(reach) AS end_ns FROM (
        SELECT *, max(end_ns) OVER (PARTITION BY {_KEY_NAMES}, parent ORDER BY start_ns
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS reach
        FROM parent_spans)
    GROUP BY {_KEY_NAMES}, parent, start_ns),
ran AS (
    SELECT DISTINCT rank, tag, launch, core_type, core, parent FROM parents),
kids AS (
    SELECT {_KEY.replace("rank,", "s.rank,")}, s.label, p.parent, s.start_ns, s.end_ns
    FROM spans s JOIN label_paths p ON s.label = p.child
    WHERE s.parent_label IS DISTINCT FROM p.parent),
claimed AS (
    SELECT k.* FROM kids k SEMI JOIN ran q ON {_SAME})
SELECT k.label, k.parent, count(*) FROM claimed k
ASOF LEFT JOIN parents q ON {_SAME} AND k.start_ns >= q.start_ns
WHERE q.end_ns IS NULL OR q.end_ns < k.end_ns
GROUP BY k.label, k.parent ORDER BY k.label"""

# Per launch (tag, launch) and label: the largest per-core total; the launches in the
# order a trace of the dataset lists them (the lowest rank's, in time order).
_LAUNCHES = f"""\
WITH per_core AS (
    SELECT tag, launch, label, {_ROW.replace("tag, launch, ", "")}, sum(dur_ns) AS ns
    FROM spans GROUP BY tag, launch, label, rank, core_type, core)
SELECT tag, launch, label, max(ns) AS ns FROM per_core GROUP BY tag, launch, label"""

_LAUNCH_ORDER = """\
SELECT tag, launch, min(rank) AS first_rank, count(DISTINCT rank) AS ranks,
       arg_min(start_ns, (rank, start_ns)) AS first_start
FROM spans GROUP BY tag, launch ORDER BY first_rank, first_start"""


def dataset_report(directory: Path, top: int = 10) -> Report:
    """``report``'s figures for a dataset (see the module's doc)."""
    connection = connect(directory)
    try:
        connection.execute(_PER_ROW)
        rows = connection.execute(_LABELS).fetchall()
        ranks, _, cores, tracks, spans = connection.execute(_COUNTS).fetchall()[0]
        labels = [row[0] for row in rows]
        entries = rank_table(connection, directory)
        # The launches are the rank files' (their rank table entries), as a trace's launch
        # slices and a directory's files count them: one whose every record was dropped
        # holds no row but is a launch.
        launched = {(tag or "", launch) for tag, launch in connection.execute(_LAUNCHES_HELD).fetchall()}
        launched |= {(str(e.get("tag") or ""), e.get("launch") or 0) for e in entries}
        launches = len(launched)
        warnings = _outside_parent(connection, labels) + _skipped(connection, directory, entries)
    finally:
        connection.close()
    totals = {row[0]: row[2] / 1e3 for row in rows}
    processing_total = totals.get(PROCESSING) or None
    stats = []
    busy_self = 0.0
    for label, count, total_ns, mean_ns, p50_ns, p99_ns, n_tracks, most, mean, children_ns in rows:
        self_us = max(total_ns - children_ns, 0) / 1e3
        busy_self += self_us
        stats.append(LabelStats(
            label=label, count=int(count), total_us=total_ns / 1e3, mean_us=mean_ns / 1e3,
            p50_us=p50_ns / 1e3, p99_us=p99_ns / 1e3, self_us=self_us,
            share=(total_ns / 1e3) / processing_total if processing_total else None,
            imbalance=float(most / mean) if mean else 1.0, tracks=int(n_tracks)))
    hotspots = sorted(stats, key=lambda s: s.self_us, reverse=True)[:top]
    counts = RunCounts(int(ranks), max(1, int(launches)) if tracks else 0, int(cores), int(tracks),
                       int(spans))
    return Report(source=str(directory), counts=counts, processing_total_us=processing_total, stats=stats,
                  hotspots=hotspots, busy_self_us=busy_self, warnings=warnings)


def _outside_parent(connection: Any, labels: list[str]) -> list[str]:
    parents = label_parents(labels)
    pairs = [(labels[i], labels[p]) for i, p in enumerate(parents) if p >= 0]
    if not pairs:
        return []
    connection.register("label_paths", {"child": np.array([c for c, _ in pairs], dtype=object),
                                        "parent": np.array([p for _, p in pairs], dtype=object)})
    # The candidates first: where names and nesting agree there are none, and the search
    # (every parent span of every row) is not run at all.
    candidates = connection.execute(
        "SELECT count(*) FROM spans s JOIN label_paths p ON s.label = p.child "
        "WHERE s.parent_label IS DISTINCT FROM p.parent").fetchall()[0][0]
    found = connection.execute(_OUTSIDE).fetchall() if candidates else []
    return [f"{disagreement(child, parent)} ({count} spans)" for child, parent, count in found]


def _skipped(connection: Any, directory: Path, entries: list[dict[str, Any]]) -> list[str]:
    """What collect skipped of the rank files the dataset's parts hold (their rank table
    ``entries``' skipped records), worded as a trace's reader words it."""
    meta: dict[str, Any] = {"ranks": entries}
    if cores_filtered(connection, directory):
        meta["cores_filtered"] = True
    return skipped_warnings(directory, meta)


def dataset_run(directory: Path) -> MeasuredRun:
    """``compare``'s view of a dataset: its launch times and the settings its files record."""
    connection = connect(directory)
    try:
        per_launch = connection.execute(_LAUNCHES).fetchall()
        order = connection.execute(_LAUNCH_ORDER).fetchall()
        settings = run_settings(connection, directory)
        warnings = _skipped(connection, directory, rank_table(connection, directory))
    finally:
        connection.close()
    launches = [(tag, launch) for tag, launch, _, _, _ in order]
    where = {key: i for i, key in enumerate(launches)}
    labels = sorted({label for _, _, label, _ in per_launch})
    column = {label: j for j, label in enumerate(labels)}
    values = np.zeros((len(launches), len(labels)))
    for tag, launch, label, ns in per_launch:
        values[where[(tag, launch)], column[label]] = ns / 1e3
    times = LaunchTimes(labels, values, np.ones(len(labels), dtype=bool), [int(r[3]) for r in order])
    return MeasuredRun(str(directory), settings, warnings, times)
