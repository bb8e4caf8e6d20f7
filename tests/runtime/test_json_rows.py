"""A JSON trace's span rows read as columns (runtime/json_rows.py) give what the
whole-document parser gives: the same table, or the same refusal, on collect's traces and
on every byte of them changed."""

from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rt_helpers import FP, LABELS, well_formed_core, write_point_map
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime import json_rows, spans
from optrace.runtime.demo import write_demo
from optrace.runtime.errors import ProfilingInputError
from optrace.runtime.perfetto_read import Regroup
from optrace.runtime.save import reset_launch_counters, save_profiling_data
from optrace.runtime.synth import SlotWriter, new_buffer


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    reset_launch_counters()


def invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def whole(path: Path) -> spans.SpanTable:
    """The table as the whole-document parser reads it."""
    return spans._trace_table(path, spans._whole_events(spans.read_trace_json(path)))


def outcome(read: Any, path: Path) -> Any:
    """A table's every field, or the refusal's message."""
    try:
        table = read(path)
    except ProfilingInputError as exc:
        return ("refused", str(exc))
    return (table.source, table.labels, table.tracks, table.processes, table.launches, table.launch_rows,
            table.trace_tracks, table.warnings, table.settings, table.label.dtype, table.track.dtype,
            table.label.tolist(), table.track.tolist(), table.ts.tolist(), table.dur.tolist(),
            table.track_launch.tolist())


def _flagged_dir(root: Path) -> Path:
    """A rank of unclosed and closed-by-parent spans, a slot that overflowed (its drop
    marker), indexed spans and long plain cores beside them."""
    directory = root / "flagged"
    (p_b, p_e), (d_b, d_e), (w_b, w_e) = (LABELS["processing"], LABELS["processing dispatch"],
                                          LABELS["processing dispatch wait"])
    data = new_buffer(6, 256)
    writer = SlotWriter(data[0], 1000, fingerprint=FP)
    for i, (point, t) in enumerate([(p_b, 1010), (d_b, 1020), (w_b, 1030), (d_e, 1040), (99, 1045),
                                    (w_e, 1050), (d_b, 1060), (p_e, 1070), (p_b, 1080)]):
        writer.record(point, t, index=i if point == d_b else 0)
    well_formed_core(SlotWriter(data[1], 1005, fingerprint=FP), 1006, loops=80)  # overflows
    for slot in (2, 3, 4):
        well_formed_core(SlotWriter(data[slot], 990 + slot, fingerprint=FP), 995 + slot, loops=12)
    save_profiling_data(data, 0, directory, aic_cores=2)
    write_point_map(directory)
    return directory


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    reset_launch_counters()
    root = tmp_path_factory.mktemp("json_rows")
    write_demo(root / "demo", ranks=2, launches=3, aic=2, seed=3)
    found = {}
    for name, source in (("demo", root / "demo"), ("flagged", _flagged_dir(root))):
        out = root / f"{name}.json"
        result = invoke("collect", source, "-o", out)
        assert result.exit_code in (0, 1), result.output
        found[name] = out
    return found


@pytest.mark.parametrize("name", ["demo", "flagged"])
def test_collects_rows_read_as_columns_are_the_parsers_table(traces: dict[str, Path], name: str) -> None:
    path = traces[name]
    events = spans.read_trace_events(path)
    assert events.spans is not None and events.whole is None
    # Every span row is read as columns: only names, launch slices and drop markers go
    # through the parser.
    assert events.spans.index.size == spans.load_trace(path).label.size
    assert all(e.get("ph") != "X" or e.get("cat") == "optrace.launch" for _, e in events.parsed)
    assert outcome(spans.load_trace, path) == outcome(whole, path)


def test_the_flagged_rank_has_what_the_test_is_about(traces: dict[str, Path]) -> None:
    text = traces["flagged"].read_text()
    for needed in ('"unclosed":true', '"closed_by_parent":true', '"index":', "records dropped"):
        assert needed in text


@pytest.mark.parametrize("name", ["demo", "flagged"])
def test_inspect_report_and_compare_print_the_same_a_process_at_a_time_as_a_table_or_parsed(
        traces: dict[str, Path], name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read a process at a time (the drop markers with their rank), as one table of
    columns, or by the parser alone: the same output, byte for byte."""
    trace = traces[name]
    found = spans.json_parts(trace)
    assert found is not None and len(list(found[0])) == {"demo": 2, "flagged": 1}[name]  # no regroup
    commands = [["inspect", trace], ["inspect", trace, "--format", "json"], ["report", trace],
                ["compare", trace, trace, "--format", "json"]]
    by_part = [invoke(*c) for c in commands]
    assert all(r.exit_code == 0 for r in by_part), [r.output for r in by_part]
    if name == "flagged":  # the overflowed slot's drops, on its row
        import json

        found = json.loads(by_part[1].output)
        assert found["dropped"] > 0 and any(t["dropped"] for t in found["tracks"])
    monkeypatch.setattr(json_rows, "read_parts", lambda path, names, told=None: None)
    assert [invoke(*c).output for c in commands] == [r.output for r in by_part]
    monkeypatch.setattr(json_rows, "read_events", lambda path, told=None: None)
    assert [invoke(*c).output for c in commands] == [r.output for r in by_part]


def test_a_gzipped_trace_is_read_as_columns(traces: dict[str, Path], tmp_path: Path) -> None:
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(traces["demo"].read_bytes()))
    assert spans.read_trace_events(packed).spans is not None
    found = spans.json_parts(packed)
    assert found is not None and len(list(found[0])) == 2  # a process at a time
    assert outcome(spans.load_trace, packed)[1:] == outcome(whole, traces["demo"])[1:]


#: Bytes a change puts in: each of them means something to JSON or to the layout.
_BYTES = b'0123456789 -+.eE"\\{}[],:\nx\t\x00\xff'


@pytest.mark.parametrize("name", ["demo", "flagged"])
def test_every_change_of_a_byte_reads_as_the_parser_reads_it(traces: dict[str, Path], tmp_path: Path,
                                                              name: str) -> None:
    """A byte changed anywhere (mostly within span rows): the table or the refusal is
    the whole-document parser's. 400 changes a trace, seeded."""
    original = traces[name].read_bytes()
    rng = random.Random(f"json_rows {name}")
    path = tmp_path / "changed.json"
    columns = 0
    for _ in range(400):
        data = bytearray(original)
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            at = rng.randrange(len(data)) if rng.random() < 0.1 else rng.randrange(len(data) * 3 // 4)
            data[at] = rng.choice(_BYTES)
        path.write_bytes(bytes(data))
        found = json_rows.read_events(path)
        columns += found is not None and found.spans is not None
        assert outcome(spans.load_trace, path) == outcome(whole, path), bytes(data[max(0, at - 80) : at + 80])
    assert columns > 80  # changes that leave valid JSON leave its rows to the columns


def _row(tid: str, ts: str, dur: str, args: str, tail: str, pid: str = "0") -> str:
    return f'{{"ph":"X","pid":{pid},"tid":{tid},"ts":{ts},"dur":{dur},"args":{{{args}{tail}'


def _trace(rows: list[str], closing: str = '],"otherData":{"format":"optrace-chrome"}}\n') -> bytes:
    return ('{"traceEvents":[\n' + ",\n".join(rows) + "\n" + closing).encode()


def _at(t: int, args: str, tail: str) -> str:
    return _row("   1", f"{t:4d}.500", "   1.000", args, tail)


_ARGS, _TAIL = '"index":  12,"extraId":   0,', '"src":"k.h:1"},"name":"a"       }'


def _plain(ts_width: int = 4) -> list[str]:
    return [_row("   1", f"{t:{ts_width}d}.500", "   1.000", _ARGS, _TAIL) for t in range(10, 30)]


def _among(row: str, ts_width: int = 4) -> list[str]:
    """``row`` amid plain rows of its width (one run: it is judged by their layout)."""
    plain = _plain(ts_width)
    assert all(len(r) == len(row) for r in plain), (row, plain[0])
    return [*plain[:10], row, *plain[10:]]


_PLAIN = _plain()


@pytest.mark.parametrize(
    "rows, closing",
    [
        # A name that also sets ts (JSON keeps the last), or a category.
        (_among(_row("   1", "  40.500", "   1.000", _ARGS, '"src":"k.h:1"},"name":"a","ts":9}')), None),
        (_among(_row("   1", "  40.500", "   1.000", _ARGS, '"src":"k1"},"name":"a","cat":"c"}')), None),
        # A leading zero in a tid or a time, a space inside a number, an exponent in args.
        (_among(_row("  01", "  40.500", "   1.000", _ARGS, _TAIL)), None),
        (_among(_row("0001", "  40.500", "   1.000", _ARGS, _TAIL)), None),
        (_among(_row("   1", "  04.500", "   1.000", _ARGS, _TAIL)), None),
        (_among(_row("   1", "  4 .500", "   1.000", _ARGS, _TAIL)), None),
        (_among(_row("   1", "  40.500", "   1.000", '"index":1e999,"extraId":  0,', _TAIL)), None),
        # A time of 16 digits in a column that wide: read by the parser (a double's rounding).
        (_among(_row("   1", "1234567890123457.500", "   1.000", _ARGS, _TAIL), ts_width=16), None),
        # A name that is not a string; args that do not close; a NUL in a label.
        ([_at(t, "", '"src":"k"},"name":7 }') for t in range(10, 30)], None),
        ([_at(t, '"a":{', '"src":"k"},"name":"a" }') for t in range(10, 30)], None),
        ([_at(t, "", '"src":"k"},"name":"\\u0000"}') for t in range(10, 30)], None),
        # traceEvents named again after the events; otherData not an object.
        (_PLAIN, '],"traceEvents":[],"otherData":{}}\n'),
        (_PLAIN, '],"otherData":[1]}\n'),
        (_PLAIN, "]}\n"),
        # A last row with a comma; an empty document.
        ([*_PLAIN, ""], None),
        ([], None),
    ],
)
def test_rows_that_do_not_hold_the_layout_read_as_the_parser_reads_them(tmp_path: Path, rows: list[str],
                                                                        closing: str | None) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(_trace(rows) if closing is None else _trace(rows, closing))
    assert outcome(spans.load_trace, path) == outcome(whole, path)
    found = json_rows.read_events(path)
    if found is not None and found.spans is not None and len(rows) == 21:  # one row amid plain ones
        assert [i for i, _ in found.parsed] == [10, 20]


@pytest.mark.parametrize("digits", [4, 12])
def test_plain_rows_are_columns_and_times_are_the_parsers_doubles(tmp_path: Path, digits: int) -> None:
    path = tmp_path / "t.json"
    rng = random.Random(digits)
    times = [f"{rng.randrange(10 ** rng.randrange(1, digits + 1)):{digits}d}.{rng.randrange(1000):03d}"
             for _ in range(300)]
    rows = [_row("   1", t, "   0.001", "", '"src":"k.h:1"},"name":"a" }') for t in times]
    path.write_bytes(_trace(rows))
    found = json_rows.read_events(path)
    # The last row, without its comma, is a run of its own: parsed.
    assert found is not None and found.spans is not None and found.spans.index.size == len(rows) - 1
    assert spans.load_trace(path).ts.tolist() == [float(t) for t in times]
    assert outcome(spans.load_trace, path) == outcome(whole, path)


def test_many_distinct_args_are_judged_by_their_shape(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the distinct texts a run may have, the args are judged by their shape; a
    leading zero, which the shape hides, is still refused (and the parser says so)."""
    monkeypatch.setattr(json_rows, "_MOST_DISTINCT", 4)
    path = tmp_path / "t.json"
    rows = [_at(t, f'"index":{t:4d},"extraId":   0,', '"src":"k"},"name":"a"}') for t in range(10, 40)]
    path.write_bytes(_trace(rows))
    found = json_rows.read_events(path)
    assert found is not None and found.spans is not None and found.spans.index.size == len(rows) - 1
    assert outcome(spans.load_trace, path) == outcome(whole, path)
    for bad, valid in (('"index":0015', False), ('"index":1e99', True), ('"index":1E+5', True),
                       ('"index":1e999', False)):
        path.write_bytes(_trace([r.replace('"index":  15', bad) for r in rows]))
        found = json_rows.read_events(path)
        # The row whose shape hides something goes to the parser, which takes it or not.
        assert (found is not None and [i for i, _ in found.parsed] == [5, 29]) if valid else found is None
        assert outcome(spans.load_trace, path) == outcome(whole, path)


def test_a_file_not_laid_out_one_event_a_line_is_parsed_whole(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    for text in ('{"traceEvents":[{"ph":"X","pid":0,"tid":0,"ts":1,"dur":1,"name":"a"}]}',
                 '{"traceEvents":[\n{"ph":"X","pid":0,\n"tid":0,"ts":1,"dur":1,"name":"a"}\n]}\n',
                 '{"traceEvents":[\n{"ph":"X","pid":0,"tid":0,"ts":1,"dur":1,"name":"a"}\n\n]}\n'):
        path.write_text(text)
        assert json_rows.read_events(path) is None
        assert outcome(spans.load_trace, path) == outcome(whole, path)
    assert np.array_equal(spans.load_trace(path).ts, [1.0])


def test_two_texts_of_one_hash_are_not_taken_for_one() -> None:
    """Rows are grouped by a hash of their words; a row whose words differ from its
    group's text is judged on its own text, never given the other's verdict."""
    k, mask = 0x9E3779B97F4A7C15, 2**64 - 1
    a0, a1 = int.from_bytes(b'"src":"a', "little"), int.from_bytes(b'"},"name', "little")
    b0 = a0 + 1
    b1 = a1 ^ ((a0 * k) & mask) ^ ((b0 * k) & mask)  # the same hash, other words
    rows = np.array([[a0, a1], [b0, b1], [a0, a1], [b0, b1]], dtype=np.uint64)
    texts = {rows[0].tobytes(): 5, rows[1].tobytes(): 7}
    judged: list[bytes] = []
    value, ok = json_rows._judged(rows.T.copy(), lambda row: rows[row].tobytes(),
                                  lambda text: judged.append(text) or texts[text])
    assert value.tolist() == [5, 7, 5, 7] and ok.all() and sorted(judged) == sorted(texts)


@pytest.mark.parametrize("width", [1, 7, 8, 9, 15, 16, 17, 23])
@pytest.mark.parametrize("after", [0, 3, 64])
def test_a_runs_words_are_its_rows_padded_with_zeros(width: int, after: int) -> None:
    """A run's word columns are read from the file's bytes in place, a row's last word
    reaching past its end (into its newline and the next line), or from a padded copy
    where that word would reach past the file: either way each row's bytes padded with
    zeros, never a byte of what follows it. More rows than a block of the transpose."""
    rng = np.random.default_rng(width * 100 + after)
    count, step, start = json_rows._TRANSPOSED + 5, width + 2, 3
    raw = rng.integers(1, 256, start + count * step - 2 + after, dtype=np.uint8)
    rows = json_rows._Rows(raw, start, count, width, step)
    expected = np.zeros((count, rows.padded), dtype=np.uint8)
    for k in range(count):
        expected[k, :width] = raw[start + k * step : start + k * step + width]
    assert rows.padded == -(-width // 8) * 8
    assert np.array_equal(rows.words, expected.view(np.uint64).T)
    assert np.array_equal(rows.bytes, expected[:, :width])


@pytest.mark.parametrize("line", [
    '{"name":"process_name","ph":"M","pid":0,"args":{"name":"Rank 0"}}',
    '{"name":"process_sort_index","ph":"M","pid":0,"args":{"sort_index":1e999}}',
    '{"name":"process_sort_index","ph":"M","pid":0,"args":{"sort_index":1' + "0" * 30 + "}}",
    '{"name":"process_name","ph":"M","pid":0,"args":{"name":"R\\ud800"}}',
    '{"name":"process_name","ph":"M","pid":0,"args":{"name":"R\\u0000"}}',
    '{"name":"process_name","ph":"M","pid":0,"args":{"name":"R\xe9"}}',
    '{"ph":"X","pid":0,"tid":1,"ts":-0.5,"dur":1.0,"name":"launch 0","cat":"optrace.launch"}',
    '{"ph":"X","pid":0,"tid":1,"ts":0.5,"dur":NaN,"name":"launch 0","cat":"optrace.launch"}',
])
def test_lines_parsed_together_read_as_each_parsed_alone(tmp_path: Path, line: str) -> None:
    """Names and launch slices of the plain shape are parsed as one array; a line that
    only looks plain (an exponent past the float range, an integer past the bound, an
    escape) is parsed alone by the strict parser, which takes or refuses it."""
    path = tmp_path / "t.json"
    path.write_bytes(_trace([*_PLAIN, line, line.replace('"pid":0', '"pid":1')]))
    assert outcome(spans.load_trace, path) == outcome(whole, path)
    data = path.read_bytes().replace(b"R\xc3\xa9", b"R\xe9")  # not UTF-8
    path.write_bytes(data)
    assert outcome(spans.load_trace, path) == outcome(whole, path)


def test_a_name_that_is_no_text_keys_drops_as_the_parser_read_does(traces: dict[str, Path], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """inspect keys a drop marker by the names as text (str of a name that is none), a
    table by the text names only: read a process at a time, both as the parser reads."""
    text = traces["flagged"].read_text()
    assert '"args":{"name":"AIC 1"}' in text
    trace = tmp_path / "t.json"
    trace.write_text(text.replace('"args":{"name":"AIC 1"}', '"args":{"name":7}'))
    found = spans.json_parts(trace)
    assert found is not None and found[2].title(True, (0, 1), "") == "7"
    commands = [["inspect", trace, "--format", "json"], ["report", trace]]
    by_part = [invoke(*c).output for c in commands]
    monkeypatch.setattr(json_rows, "read_parts", lambda path, names, told=None: None)
    monkeypatch.setattr(json_rows, "read_events", lambda path, told=None: None)
    assert [invoke(*c).output for c in commands] == by_part


def _outputs(trace: Path) -> list[tuple[int, str]]:
    commands = [["inspect", trace], ["inspect", trace, "--format", "json"], ["report", trace],
                ["compare", trace, trace, "--format", "json"]]
    return [(r.exit_code, r.output) for r in (invoke(*c) for c in commands)]


_X = '{"ph":"X","pid":%s,"tid":0,"ts":%s,"dur":%s,"name":"%s"%s}'
_SLICE = ',"cat":"optrace.launch"'


@pytest.mark.parametrize("name, text", [
    # Bytes of a surrogate in a name event at the end: not UTF-8 to the strict parser.
    ("surrogate", b'{"traceEvents":[\n' + (_X % (0, 1, 1, "a", "")).encode() + b',\n'
     b'{"name":"process_name","ph":"M","pid":0,"args":{"name":"R"},"x\xed\xa0\x80":1}\n],"otherData":{}}\n'),
    # Not the opening of a trace; a comma before nothing after the events.
    ("opening", ('{"traceEventz":[\n' + _X % (0, 1, 1, "a", "") + '\n],"otherData":{}}\n').encode()),
    ("comma", ('{"traceEvents":[\n' + _X % (0, 1, 1, "a", "") + '\n],}\n').encode()),
    # A process without launch slices among processes with them, the rank table giving
    # it a launch: one table puts its spans in no launch of the rank table.
    ("unsliced", ('{"traceEvents":[\n' + ",\n".join([
        _X % (0, 0, 10, "launch 0", _SLICE), _X % (0, 100, 10, "launch 1", _SLICE),
        _X % (0, 1, 5, "processing", ""), _X % (0, 101, 5, "processing", ""),
        _X % (1, 1, 5, "processing", ""), _X % (1, 2, 5, "processing", "")])
        + '\n],"otherData":{"ranks":[{"pid":1,"launch":0}]}}\n').encode()),
    # Two processes of one name, a drop marker on one of them.
    ("one name", ('{"traceEvents":[\n' + ",\n".join([
        _X % (0, 0, 10, "launch 0", _SLICE), _X % (0, 100, 10, "launch 1", _SLICE),
        _X % (0, 1, 5, "processing", ""), _X % (0, 101, 5, "processing", ""),
        '{"name":"optrace: 7 records dropped","ph":"i","s":"t","pid":0,"tid":0,"ts":102}',
        _X % (1, -1000, 10, "launch 0", _SLICE), _X % (1, -900, 10, "launch 1", _SLICE),
        _X % (1, -999, 5, "processing", ""), _X % (1, -899, 5, "processing", ""),
        '{"name":"process_name","ph":"M","pid":0,"args":{"name":"R"}}',
        '{"name":"process_name","ph":"M","pid":1,"args":{"name":"R"}}'])
        + '\n],"otherData":{}}\n').encode()),
])
def test_documents_the_strict_parser_reads_otherwise_are_read_as_it_reads_them(
        tmp_path: Path, name: str, text: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "t.json"
    trace.write_bytes(text)
    by_part = _outputs(trace)
    monkeypatch.setattr(json_rows, "read_parts", lambda path, names, told=None: None)
    monkeypatch.setattr(json_rows, "read_events", lambda path, told=None: None)
    assert _outputs(trace) == by_part
    assert [code for code, _ in by_part] == ([0] * 4 if name in ("unsliced", "one name") else [2] * 4)


@pytest.mark.parametrize("depth", [150, 948, 990])
def test_a_deeply_nested_line_is_left_to_the_whole_documents_parse(tmp_path: Path, depth: int) -> None:
    """The parser's nesting bound is its recursion limit, which a line parsed alone would
    meet a few levels after the whole document does: a deep line is never parsed alone
    (read_events gives the document up, a read a process at a time regroups), so only
    the whole document's parse judges it."""
    rows = [_row("   1", f"{t:4d}.500", "   1.000", "", '"src":"k"},"name":"a" }') for t in range(10, 30)]
    rows[5] = ('{"ph":"X","pid":0,"tid":1,"ts":1.5,"dur":1.0,"name":"a","args":{"x":'
               + "[" * depth + "]" * depth + "}}")
    trace = tmp_path / "t.json"
    trace.write_bytes(_trace(rows))
    assert json_rows.read_events(trace) is None
    found = spans.json_parts(trace)
    assert found is not None
    with pytest.raises(Regroup):
        list(found[0])
    if depth < 500:  # far from the bound: the same table, read whole
        assert outcome(spans.load_trace, trace) == outcome(whole, trace)


def test_a_row_of_another_process_among_a_runs_rows_is_read_whole(
        traces: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row its run's layout refuses (another pid, so read by the parser) among rank 0's
    rows: rank 0's rows after it come after another process's event."""
    lines = traces["demo"].read_text().split("\n")
    # In rank 0's last run (its last launch): no row of rank 0 follows that run's.
    k = max(k for k, line in enumerate(lines) if line.startswith('{"ph":"X","pid":0,"tid":   1,"ts":'))
    lines[k - 3] = lines[k - 3].replace('"pid":0,', '"pid":1,', 1)
    trace = tmp_path / "t.json"
    trace.write_text("\n".join(lines))
    found = spans.json_parts(trace)
    assert found is not None
    with pytest.raises(Regroup):
        list(found[0])
    by_part = _outputs(trace)
    monkeypatch.setattr(json_rows, "read_parts", lambda path, names, told=None: None)
    monkeypatch.setattr(json_rows, "read_events", lambda path, told=None: None)
    assert _outputs(trace) == by_part


def test_metadata_of_many_objects_still_reads_as_columns_a_process_at_a_time(
        traces: dict[str, Path], tmp_path: Path) -> None:
    """A cluster's rank table has an object per rank file (512 ranks: thousands): the
    metadata is parsed at its own depth, not held to a line's bound of brackets."""
    text = traces["demo"].read_text()
    assert text.count('"otherData":{') == 1
    many = ",".join(f'{{"rank":{k}}}' for k in range(600))
    trace = tmp_path / "t.json"
    trace.write_text(text.replace('"otherData":{', '"otherData":{"many":[' + many + "],", 1))
    events = json_rows.read_events(trace)
    assert events is not None and events.spans is not None
    found = spans.json_parts(trace)
    assert found is not None and len(list(found[0])) == 2
    assert outcome(spans.load_trace, trace) == outcome(whole, trace)
