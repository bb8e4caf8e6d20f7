"""A label's path names its parent; collect and report say where the nesting disagrees,
and the demo's names and nesting agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from rt_helpers import LABELS as RT_LABELS
from rt_helpers import write_point_map
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime.demo import write_demo
from optrace.runtime.formats import load_spans
from optrace.runtime.labelpaths import label_parents, outside_parent
from optrace.runtime.save import save_profiling_data
from optrace.runtime.synth import SlotWriter, new_buffer

LABELS = ["processing", "processing combine", "processing combine wait", "processing gmm", "setup"]


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def test_the_parent_is_the_longest_label_the_words_start_with() -> None:
    assert label_parents(LABELS) == [-1, 0, 1, 0, -1]
    assert label_parents(["a b c", "a"]) == [1, -1]  # `a b` is no label: `a` is the parent
    assert label_parents(["processing", "processingx"]) == [-1, -1]  # words, not characters


def _spans(rows: list[tuple[int, int, float, float]]) -> tuple[np.ndarray, ...]:
    label, track, start, end = (np.array(c) for c in zip(*rows, strict=True))
    return label.astype(np.int32), track.astype(np.int32), start.astype(np.float64), end.astype(np.float64)


def test_a_child_outside_its_parent_is_counted_inside_or_elsewhere_is_not() -> None:
    rows = [
        (0, 0, 0, 100), (1, 0, 10, 50), (2, 0, 12, 20),  # nested as named
        (2, 0, 55, 60),  # `combine wait` after `combine` ended: outside
        (1, 1, 0, 10), (2, 1, 20, 30),  # another core: outside its own `combine`
        (2, 2, 0, 5),  # a core that never ran `combine`: no claim
        (3, 0, 60, 70),  # `gmm` inside `processing`
    ]
    assert outside_parent(LABELS, *_spans(rows)) == [("processing combine wait", "processing combine", 2)]
    # A parent recorded nowhere (another variant of the kernel): nothing to say.
    assert outside_parent(LABELS, *_spans([(2, 0, 0, 5), (0, 0, 0, 9)])) == []


Row = tuple[int, int, float, float]


def _outside_by_hand(labels: list[str], rows: list[Row]) -> list[tuple[str, str, int]]:
    """The rule span by span: a child span (its parent label recorded, on a core that ran
    it) is outside when no parent span starting by its start on its core ends by its end
    (the last of them may not: a parent label nested in itself)."""
    parents = label_parents(labels)
    out = []
    for child in sorted({r[0] for r in rows}):
        parent = parents[child] if 0 <= child < len(parents) else -1
        theirs = [r for r in rows if r[0] == parent]
        if parent < 0 or not theirs:
            continue
        cores = {r[1] for r in theirs}
        missing = 0
        for _, core, start, end in (r for r in rows if r[0] == child and r[1] in cores):
            before = [r for r in theirs if r[1] == core and r[2] <= start]
            missing += not any(r[3] >= end for r in before)
        if missing:
            out.append((labels[child], labels[parent], missing))
    return out


def test_outside_parent_is_the_rule_span_by_span() -> None:
    """Random spans (labels unnamed too, parents that overlap one another, cores without
    the parent) counted as the rule says, over the label groups."""
    rng = np.random.default_rng(4)
    # Track ids as a table's rows (0, 1, 2), and ids no table of rows has (negative, past
    # 2**24): the parent's cores are looked up one way or the other.
    track_ids = ([0, 1, 2], [-3, 7, 1 << 25], [5, -1, 0])
    for trial in range(300):
        n = int(rng.integers(1, 50))
        cores = track_ids[trial % len(track_ids)]
        rows = [(int(rng.integers(-1 if trial % 4 == 0 else 0, len(LABELS))), cores[int(rng.integers(0, 3))],
                 float(a), float(a + rng.integers(0, 12))) for a in rng.integers(0, 40, n)]
        rows.sort(key=lambda r: (r[1], r[2]))  # the hand rule's "last" is by (core, start), as given
        shuffled = [rows[k] for k in rng.permutation(n)]
        # the order of the spans given does not matter but for ties, which the sort keeps
        expected = _outside_by_hand(LABELS, rows)
        assert outside_parent(LABELS, *_spans(rows)) == expected
        # Integer times (a decoded rank's cycles) are searched by integer keys: the same rule.
        label, track, start, end = _spans(rows)
        assert outside_parent(LABELS, label, track.astype(np.int64), start.astype(np.int64),
                              end.astype(np.int64)) == expected
        if len({(r[1], r[2]) for r in rows if r[0] >= 0}) == len([r for r in rows if r[0] >= 0]):
            assert outside_parent(LABELS, *_spans(shuffled)) == expected


def test_a_parent_label_nested_in_itself_holds_its_children() -> None:
    # processing [5, 100] holds processing [10, 20] and, after it, combine [30, 40]: the
    # last `processing` started by 30 ended at 20, the first still holds it (a review's
    # find: collect and report said it lay outside, the dataset's SQL did not).
    rows = [(0, 0, 5, 100), (0, 0, 10, 20), (1, 0, 30, 40), (1, 0, 101, 110)]
    for kind in (np.float64, np.int64):
        label, track, start, end = _spans(rows)
        assert outside_parent(LABELS, label, track, start.astype(kind), end.astype(kind)) == [
            ("processing combine", "processing", 1)]  # the one after both ended


def test_a_child_ending_on_its_parents_last_cycle_in_float_times_is_inside() -> None:
    # Two spans ending on one cycle, read from a trace as ts + dur in µs: their ends
    # differ in the last bits (2469.24 + 19.54 < 2469.5 + 19.28 as floats).
    assert 2469.24 + 19.54 < 2469.5 + 19.28
    label = np.array([0, 1, 1], np.int32)
    track = np.array([0, 0, 0], np.int32)
    start = np.array([2469.24, 2469.5, 2470.0])
    end = np.array([2469.24 + 19.54, 2469.5 + 19.28, 2489.0])
    assert outside_parent(LABELS, label, track, start, end) == [("processing combine", "processing", 1)]
    # The same with an earlier `processing` on the core: more than one parent span a core
    # (the search by start, not the lookup of a core's one span).
    rows = (np.concatenate([[0], label]).astype(np.int32), np.concatenate([[0], track]).astype(np.int32),
            np.concatenate([[2400.0], start]), np.concatenate([[2410.0], end]))
    assert outside_parent(LABELS, *rows) == [("processing combine", "processing", 1)]


def test_the_demo_nests_as_it_names_and_a_sibling_layout_is_reported(tmp_path: Path) -> None:
    write_demo(tmp_path / "demo", ranks=2, launches=2, aic=2)
    table = load_spans(tmp_path / "demo")
    assert outside_parent(table.labels, table.label, table.track, table.ts, table.ts + table.dur) == []
    collected = invoke("collect", tmp_path / "demo", "-o", tmp_path / "t.json")
    assert collected.exit_code == 0 and "disagree" not in collected.output
    assert "disagree" not in invoke("report", tmp_path / "demo").output
    # The same trace with `combine wait` moved after `combine`: named inside, laid outside.
    wait = table.labels.index("processing combine wait")
    combine = table.labels.index("processing combine")
    moved = table.label == wait
    table.ts[moved] += (table.ts + table.dur)[table.label == combine].max() + 1.0
    assert outside_parent(table.labels, table.label, table.track, table.ts, table.ts + table.dur)[0][:2] == (
        "processing combine wait", "processing combine")


def test_collect_and_report_say_so_on_rank_files_laid_apart_from_their_names(tmp_path: Path) -> None:
    """`processing dispatch wait` recorded after `processing dispatch` ended, on every core."""
    directory = tmp_path / "prof"
    data = new_buffer(2, 64)
    for slot in range(2):
        writer = SlotWriter(data[slot], 1000, fingerprint=None)
        pb, pe = RT_LABELS["processing"]
        db, de = RT_LABELS["processing dispatch"]
        wb, we = RT_LABELS["processing dispatch wait"]
        for kind, at in ((pb, 1000), (db, 1010), (de, 1020), (wb, 1030), (we, 1040), (pe, 1050)):
            writer.record(kind, at)
    save_profiling_data(data, 0, directory, aic_cores=2, barrier=True, clock_mhz=50.0)
    write_point_map(directory, fingerprint=None)
    said = ("label path and nesting disagree: 'processing dispatch wait' spans lie outside "
            "'processing dispatch', which their label names as their parent")
    collected = invoke("collect", directory, "-o", tmp_path / "t.json")
    assert collected.exit_code == 0 and f"note: {said} (rank000.pt)" in collected.output, collected.output
    assert f"{said} (2 spans)" in invoke("report", directory).output
    assert f"{said} (2 spans)" in invoke("report", tmp_path / "t.json").output


def test_a_collect_checks_label_paths_without_importing_numpy_ma(tmp_path: Path) -> None:
    """np.unique's first call imports numpy.ma (~14 ms, a sixth of a cold collect of the
    8-rank benchmark): the label-path check of a collect goes without it, on a demo run
    (several `processing` spans a core: the search path) and on ids no table of rows has."""
    import subprocess
    import sys

    write_demo(tmp_path / "demo", ranks=2, launches=3, aic=2)
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from optrace.cli.collect_fast import fast_main\n"
        "from optrace.runtime.labelpaths import outside_parent\n"
        f"code = fast_main([{str(tmp_path / 'demo')!r}, '-o', {str(tmp_path / 't.json')!r}])\n"
        "f = lambda *c: np.array(c, np.float64)\n"
        "found = outside_parent(['a', 'a b'], np.array([0, 0, 1, 1]), np.array([-2, -2, 9, -2]),\n"
        "                       f(0, 10, 1, 11), f(5, 20, 2, 12))\n"
        "print('numpy.ma' in sys.modules, code, found)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False 0 []"


def test_integer_times_at_the_ends_of_their_range_keep_the_rule() -> None:
    """Integer keys only where every key fits: uint64 times past 2**63 (which int64 keys
    cannot hold) and, in damaged input, spans ending before they start near 2**63 (the
    key's width must cover the starts) are searched as the rule says."""
    labels = ["processing", "processing combine"]
    past = 2**63
    label = np.array([0, 1, 0, 1], np.int32)
    start = np.array([past + 10, past + 12, past + 10, past + 30], np.uint64)
    end = np.array([past + 15, past + 17, past + 15, past + 35], np.uint64)
    rows = [(int(a), 0, int(b), int(c)) for a, b, c in zip(label, start, end, strict=True)]
    expected = _outside_by_hand(labels, rows)
    assert expected == [("processing combine", "processing", 2)]
    assert outside_parent(labels, label, np.zeros(4, np.int64), start, end) == expected
    top = 2**63 - 1
    label = np.array([0, 0, 1, 0, 0, 1], np.int32)
    track = np.array([0, 0, 0, 1, 1, 1], np.int64)
    start = np.array([0, 1, 2, top - 60, top - 30, top - 5], np.int64)
    end = np.array([10, 10, 5, 0, 0, 0], np.int64)
    rows = [(int(a), int(t), int(b), int(c)) for a, t, b, c in zip(label, track, start, end, strict=True)]
    assert outside_parent(labels, label, track, start, end) == _outside_by_hand(labels, rows) == []


def test_every_reader_holds_a_child_inside_a_parent_label_nested_in_itself(tmp_path: Path) -> None:
    """processing [5, 200] > processing [10, 20], then dispatch [25, 60] > compute [30, 40]:
    compute's label names `processing` as its parent; the last `processing` started by 30
    ended at 20, the first holds it. collect, report on the rank files, on a trace and on
    a dataset (its SQL) all say nothing (a second review's find: the dataset said 2 spans
    lay outside)."""
    directory = tmp_path / "prof"
    data = new_buffer(2, 64)
    pb, pe = RT_LABELS["processing"]
    db, de = RT_LABELS["processing dispatch"]
    cb, ce = RT_LABELS["processing compute"]
    for slot in range(2):
        writer = SlotWriter(data[slot], 1000, fingerprint=None)
        for kind, at in ((pb, 1005), (pb, 1010), (pe, 1020), (db, 1025), (cb, 1030), (ce, 1040), (de, 1060),
                         (pe, 1200)):
            writer.record(kind, at)
    save_profiling_data(data, 0, directory, aic_cores=2, barrier=True, clock_mhz=50.0)
    write_point_map(directory, fingerprint=None)
    collected = invoke("collect", directory, "-o", tmp_path / "t.json")
    assert collected.exit_code == 0 and "label path" not in collected.output, collected.output
    assert invoke("collect", directory, "-o", tmp_path / "ds", "--format", "parquet").exit_code == 0
    for source in (directory, tmp_path / "t.json", tmp_path / "ds"):
        shown = invoke("report", source)
        assert shown.exit_code == 0 and "label path" not in shown.output, (source, shown.output)


def test_a_child_a_nanosecond_outside_its_parent_at_large_times_is_outside() -> None:
    # Float times (µs of a trace) are compared on the ns they stand for: a slack of a few
    # units in the last place is wider than a ns past ~1e9 µs and hid a child 1 ns out.
    base = 3e12  # µs: a rank placed days after another
    label = np.array([0, 1], np.int32)
    track = np.array([0, 0], np.int32)
    start = np.array([base + 0.005, base + 0.100])
    end = np.array([base + 0.100, base + 0.101])
    assert outside_parent(LABELS, label, track, start, end) == [("processing combine", "processing", 1)]


def test_collect_and_every_reader_judge_a_clock_past_a_gigahertz_on_the_same_ns(tmp_path: Path) -> None:
    """At 1500 MHz a cycle is 2/3 ns: `processing compute` over cycles [100, 101] after
    `processing` [5, 100] ends on the ns its parent ends on (67). collect judged cycles,
    the readers the trace's ns: collect noted it outside, report did not (a third review's
    find). Now every one judges the ns."""
    directory = tmp_path / "prof"
    data = new_buffer(2, 64)
    pb, pe = RT_LABELS["processing"]
    cb, ce = RT_LABELS["processing compute"]
    for slot in range(2):
        writer = SlotWriter(data[slot], 1000, fingerprint=None)
        for kind, at in ((pb, 1005), (pe, 1100), (cb, 1100), (ce, 1101)):
            writer.record(kind, at)
    save_profiling_data(data, 0, directory, aic_cores=2, barrier=True, clock_mhz=1500.0)
    write_point_map(directory, fingerprint=None)
    collected = invoke("collect", directory, "-o", tmp_path / "t.json")
    assert collected.exit_code == 0 and "label path" not in collected.output, collected.output
    for source in (directory, tmp_path / "t.json"):
        assert "label path" not in invoke("report", source).output
