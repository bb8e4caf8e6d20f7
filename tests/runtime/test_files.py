"""Rank-file names, point maps, atomic output and the Chrome writer's file handling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rt_helpers import point_map, rank_buffer

from optrace.runtime.atomic import atomic_output
from optrace.runtime.chrome import ChromeTraceWriter, label_matcher, render_rank
from optrace.runtime.decode import decode_rank
from optrace.runtime.errors import ProfilingInputError
from optrace.runtime.pointmap import load_point_map
from optrace.runtime.rankfile import RankFileName, find_rank_files, parse_rank_file_name, rank_file_name


@given(st.integers(0, 5000), st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9.-]{1,12}", fullmatch=True)),
       st.integers(0, 50))
def test_rank_file_names_round_trip(rank: int, tag: str | None, launch: int) -> None:
    name = rank_file_name(rank, tag, launch)
    assert parse_rank_file_name(name) == RankFileName(rank, tag, launch)


def test_rank_file_name_details() -> None:
    assert rank_file_name(3) == "rank003.pt"
    assert rank_file_name(3, "combine", 2) == "rank003_combine_launch2.pt"
    assert parse_rank_file_name("rank12.pt") == RankFileName(12, None, 0)  # legacy, unpadded
    assert parse_rank_file_name("rank000_launch1.pt") == RankFileName(0, None, 1)
    assert parse_rank_file_name("rank000.pt.tmp") is None
    assert parse_rank_file_name("point_map.json") is None
    with pytest.raises(ValueError):
        rank_file_name(0, "bad_tag")


def test_point_map_loading(tmp_path: Path) -> None:
    path = tmp_path / "point_map.json"
    path.write_text(json.dumps({"fingerprint": 5, "points": {
        "7": {"label": "a b", "file": "x.h", "line": 3, "event_type": "B"},
        "9": {"label": "a b", "event_type": "E"},
    }}))
    loaded = load_point_map(path)
    assert loaded.fingerprint == 5 and loaded.labels == ["a b"]
    assert loaded.points[7].source == "x.h:3" and loaded.points[9].source == ""
    import numpy as np

    assert loaded.lookup(np.array([7, 8, 9, 10], dtype=np.uint32)).tolist() == [0, -1, 1, -1]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"points": {"x": {"label": "a", "event_type": "B"}}}, "ids must be integers"),
        ({"points": {"1": {"event_type": "B"}}}, "missing 'label'"),
        ({"points": {"1": {"label": "a", "event_type": "B", "line": "3"}}}, "'line' must be a line number"),
        # a line JSON and a .pftrace would write apart (2**70; -5; true as 1)
        ({"points": {"1": {"label": "a", "event_type": "B", "line": 2**70}}}, "'line' must be a line number"),
        ({"points": {"1": {"label": "a", "event_type": "B", "line": -5}}}, "'line' must be a line number"),
        ({"points": {"1": {"label": "a", "event_type": "B", "line": True}}}, "'line' must be a line number"),
        ({"points": {"1": {"label": "a", "event_type": "B", "file": 7}}}, "'file' must be a path"),
        ({"points": {"1": {"label": "a", "event_type": "B", "file": "k\u0000.h"}}}, "holds a NUL character"),
        ({"points": {"1": {"label": "a", "event_type": "B", "file": "k\ud800.h"}}}, "no path's byte"),
        ({"points": {}, "fingerprint": -1}, "'fingerprint' must be a uint32"),
        ([], "not a point map"),
    ],
)
def test_point_map_errors(tmp_path: Path, document: object, message: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(document))  # \ud800 stays escaped: valid JSON, a lone surrogate read
    with pytest.raises(ProfilingInputError) as info:
        load_point_map(path)
    assert message in info.value.message and info.value.path == str(path)


def test_atomic_output_leaves_nothing_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_output(target) as handle:
        handle.write(b"partial")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]
    with atomic_output(target) as handle:
        handle.write(b"new")
    assert target.read_bytes() == b"new"


def test_writer_without_close_writes_nothing(tmp_path: Path) -> None:
    with ChromeTraceWriter(tmp_path / "t.json") as writer:
        writer.write_rendered(render_rank(0, decode_rank(rank_buffer(), point_map()), point_map()))
    assert list(tmp_path.iterdir()) == []


def test_label_matcher_follows_the_hierarchy() -> None:
    match = label_matcher(["processing dispatch"])
    assert match("processing dispatch") and match("processing dispatch wait")
    assert not match("processing") and not match("processing dispatcher")
    assert label_matcher(None)("anything")


@given(st.lists(st.integers(-(10**15), 10**15), min_size=1, max_size=50))
def test_fixed_point_rendering_matches_python(values: list[int]) -> None:
    import numpy as np

    from optrace.runtime.chrome import render_fixed3

    rendered = render_fixed3(np.array(values, dtype=np.int64))
    for row, value in zip(rendered, values, strict=True):
        text = row.tobytes().decode("ascii")
        assert text.strip() == ("-" if value < 0 else "") + f"{abs(value) // 1000}.{abs(value) % 1000:03d}"
        assert json.loads(text) == pytest.approx(value / 1000)  # valid JSON number, padding included


@given(st.lists(st.integers(0, 2**40), min_size=1, max_size=50))
def test_int_rendering_matches_python(values: list[int]) -> None:
    import numpy as np

    from optrace.runtime.chrome import render_int

    rendered = render_int(np.array(values, dtype=np.int64))
    assert [row.tobytes().decode().strip() for row in rendered] == [str(v) for v in values]


@st.composite
def _row_columns(draw: st.DrawFn) -> dict[str, object]:
    import numpy as np

    n = draw(st.integers(1, 40))
    big = draw(st.sampled_from([10**3, 10**7, 10**13, 2**62]))
    ints = st.lists(st.integers(0, big), min_size=n, max_size=n)
    return {
        "core_pos": np.sort(np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))),
        "ts_q": np.array(draw(ints), dtype=np.int64),
        "dur_q": np.array(draw(ints), dtype=np.int64),
        "high": np.array(draw(st.lists(st.integers(0, 2**32 - 1), min_size=n, max_size=n)), dtype=np.int64),
        "show": np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))),
        "status": np.array(draw(st.lists(st.sampled_from([0, 1, 2]), min_size=n, max_size=n)), dtype=np.int8),
        "point": np.array(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))),
    }


@given(_row_columns())
def test_word_rows_parse_as_the_reference_rows(columns: dict[str, object]) -> None:
    """The fast row builder (template + 4-byte stores) and the reference one give the same
    JSON objects for any values, including several digit groups and rows without index."""
    import numpy as np

    from optrace.runtime import chrome

    heads = chrome._text_table([f'{{"ph":"X","pid":0,"tid":{t},"ts":' for t in (0, 7, 123)])
    tails = np.concatenate([
        chrome._text_table(['"src":"a.h:1"},"name":"x"', '"src":"b.h:22"},"name":"phase two"',
                            '"src":"c"},"name":"y"']),
        np.full((3, 1), ord("}"), np.uint8)], axis=1)
    c: dict[str, np.ndarray] = columns  # type: ignore[assignment]
    tids = np.array([0, 7, 123])[c["core_pos"]]
    fast = chrome._rows_words(0, tids, c["ts_q"], c["dur_q"], c["high"], c["show"],
                              c["status"], c["point"], tails)
    slow = chrome._rows(heads[c["core_pos"]], c["ts_q"], c["dur_q"], c["high"], c["show"], c["status"],
                        tails[c["point"]])
    assert fast is not None

    def parsed(rows: np.ndarray) -> list[object]:
        return list(json.loads("[" + rows.tobytes().decode("ascii")[:-2] + "]"))

    assert parsed(fast) == parsed(slow)


def test_word_rows_leave_negative_timestamps_to_the_reference_builder() -> None:
    import numpy as np

    from optrace.runtime import chrome

    tails = chrome._text_table(['"name":"x"}'])
    one = np.array([0])
    assert chrome._rows_words(0, one, np.array([-5]), np.array([1]), one, one.astype(bool),
                              one.astype(np.int8), one, tails) is None


@pytest.mark.parametrize(
    "ids",
    [
        list(range(1, 15)),  # legacy ids: a table by id
        [(1 << 31) | (i * 2654435761 % (1 << 31)) for i in range(1, 61)],  # hashed: a modulus
        [(1 << 31) | (i * 2654435761 % (1 << 31)) for i in range(1, 301)],  # big map: sorted search
        [3, 65534],  # the largest id a table by id takes
        [3, 1 << 16],  # just past it
    ],
    ids=["legacy", "hashed", "big", "edge", "past-edge"],
)
def test_id_lookup_agrees_with_a_dictionary(ids: list[int]) -> None:
    import numpy as np

    from optrace.runtime.pointmap import Point, PointMap

    points = {i: Point(i, f"l{k // 2}", "BE"[k % 2]) for k, i in enumerate(ids)}
    loaded = PointMap.build("m.json", points)
    rng = np.random.default_rng(7)
    probes = np.concatenate([np.array(ids, np.int64), rng.integers(0, 1 << 32, 2000),
                             np.array([0, max(ids) + 1, (1 << 32) - 1]), rng.choice(ids, 500)])
    probes_u32 = probes.astype(np.uint32)
    index = {int(i): k for k, i in enumerate(loaded.ids.tolist())}
    expected = [index.get(int(i), -1) for i in probes_u32]
    assert loaded.lookup(probes_u32).tolist() == expected
    halves = probes_u32.astype(np.uint64).view(np.uint32).reshape(-1, 2)[:, 0]  # a strided view
    assert loaded.lookup(halves).tolist() == expected


@given(st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                          st.integers(-(2**70), 2**70).map(float)), min_size=1, max_size=30))
def test_times_round_to_ns_and_saturate(values: list[float]) -> None:
    """A time in ns rounds half to even; past ±2**62 (and ±inf) it saturates, NaN is 0."""
    import numpy as np

    from optrace.runtime.chrome import _quantised

    expected = [0 if v != v else int(max(-(2.0**62), min(2.0**62, float(np.rint(v))))) for v in values]
    assert _quantised(np.array(values, dtype=np.float64)).tolist() == expected


@pytest.mark.parametrize("point", [[-1], [2], [0, 5]])
def test_word_rows_refuse_a_point_without_its_tail(point: list[int]) -> None:
    """A point the tails have no row for is an IndexError, never another point's text."""
    import numpy as np

    from optrace.runtime import chrome

    tails = chrome._text_table(['"name":"a"}', '"name":"bb"}'])
    n = len(point)
    zeros = np.zeros(n, np.int64)
    with pytest.raises(IndexError):
        chrome._rows_words(0, zeros, zeros, zeros + 1, zeros + (5 << 8), np.ones(n, bool),
                           zeros.astype(np.int8), np.array(point), tails)


@pytest.mark.parametrize("name", ["rank2147483648.pt", "rank4294967296_moe_launch1.pt"])
def test_a_rank_past_31_bits_in_a_file_name_is_named(tmp_path: Path, name: str) -> None:
    # Past 2**31 - 1 a .pftrace's process id wrapped (two ranks on one track) and a
    # dataset's partition could not be read back: refused, naming the file, nothing written.
    directory = tmp_path / "p"
    directory.mkdir()
    (directory / name).write_bytes(b"")
    (directory / "rank000.pt").write_bytes(b"")
    with pytest.raises(ProfilingInputError) as info:
        find_rank_files(directory)
    assert info.value.path == str(directory / name) and "is past 2147483647" in info.value.message
    assert [n.rank for n, _ in find_rank_files(directory.parent)] == []
