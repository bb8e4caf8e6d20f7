"""Readers that scale: a ``.pftrace`` decoded as columns a chunk at a time reads what the
packet-by-packet reader reads (spans, launch slices, drop markers, slices left open,
across chunk boundaries); nesting depth and self time as columns equal the stack walked
span by span; progress shows on a terminal only; ``inspect`` reads its trace once."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime import json_rows, perfetto_read, progress, spans
from optrace.runtime import perfetto as pf
from optrace.runtime.demo import write_demo
from optrace.runtime.save import reset_launch_counters

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    reset_launch_counters()


def invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def read_all(path: Path) -> tuple[Any, ...]:
    found = perfetto_read.read_spans(path)
    return (sorted(found.spans), sorted(found.launches), sorted(found.instants), found.unclosed,
            {uuid: found.track_name(uuid) for uuid in found.threads}, found.metadata)


def packet_by_packet(monkeypatch: pytest.MonkeyPatch) -> None:
    """No packet decoded as columns: every one read field by field."""
    parse = perfetto_read._parse_events

    def none_fast(buffer: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, ...]:
        *columns, fast = parse(buffer, starts)
        return (*columns, np.zeros_like(fast))

    monkeypatch.setattr(perfetto_read, "_parse_events", none_fast)


@pytest.fixture(scope="module")
def demo_pftrace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reset_launch_counters()
    root = tmp_path_factory.mktemp("demo")
    write_demo(root / "d", ranks=2, launches=3, aic=2, seed=1)
    out = root / "t.pftrace"
    result = invoke("collect", root / "d", "-o", out)
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("chunk", [1 << 19, 7, 1])
def test_columns_read_what_the_packet_by_packet_reader_reads(
    demo_pftrace: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """On collect's traces of both layouts, in one chunk and in chunks of a few packets
    (slices open across a chunk's end carried to the next)."""
    for path in (demo_pftrace, DATA / "trace_v1.pftrace"):
        with monkeypatch.context() as patch:
            packet_by_packet(patch)
            expected = read_all(path)
        with monkeypatch.context() as patch:
            patch.setattr(perfetto_read, "_CHUNK", chunk)
            got = read_all(path)
        assert got == expected
        assert got[0] and (got[1] or path.name == "trace_v1.pftrace")  # version 1: no launch slices


def test_collects_event_packets_are_read_as_columns(demo_pftrace: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Almost every packet of a collected trace takes the column path (the point of it):
    packets read one by one are the descriptors, interned data, clocks and launch begins."""
    one_by_one = []
    packet = perfetto_read._packet

    def counted(data: bytes, i: int, *rest: Any) -> Any:
        one_by_one.append(i)
        return packet(data, i, *rest)

    monkeypatch.setattr(perfetto_read, "_packet", counted)
    found = perfetto_read.read_spans(demo_pftrace)
    data = demo_pftrace.read_bytes()
    packets = sum(1 for _ in perfetto_read.fields(data, 0, len(data)))
    # every span's begin and end, and every launch's end, as columns
    assert len(one_by_one) == packets - 2 * len(found.spans) - len(found.launches)


Span = tuple[int, str, int, int]


def _stream(rng: np.random.Generator, tracks: int, events: int) -> tuple[bytes, list[Span], int]:
    """A trace of random begins and ends (some ends with nothing open, some begins never
    ended) on ``tracks`` sequences in collect's event layout, and what a stack per track
    makes of it: (track uuid, name, start ns, end ns) in the order ends come, and how many
    begins stay open."""
    u, b, s = pf.uint_field, pf.bytes_field, pf.string_field
    out = [pf.packet(b(60, u(1, 1 << 20) + b(3, u(1, 1) + s(6, "Rank 0"))))]
    names = {1: "a", 2: "b", 3: "c"}
    interned = b(12, b"".join(b(2, u(1, iid) + s(2, name)) for iid, name in names.items()))
    for track in range(tracks):
        uuid = (1 << 20) + 1 + track
        out.append(pf.packet(b(60, u(1, uuid) + u(5, 1 << 20) + b(4, u(1, 1) + u(2, track + 1)
                                                                   + s(5, f"AIC {track}")))))
        out.append(pf.packet(u(10, track + 1), u(13, 1), b(59, u(58, 64) + b(11, u(11, uuid))), interned))
        clocks = b(1, u(1, 64) + u(2, 0) + u(3, 1) + u(4, 2)) + b(1, u(1, 6) + u(2, 1000 * (track + 1)))
        out.append(pf.packet(u(10, track + 1), b(6, clocks)))
    clock = [1000 * (t + 1) for t in range(tracks)]
    stacks: list[list[tuple[str, int]]] = [[] for _ in range(tracks)]
    spans: list[Span] = []
    for _ in range(events):
        track = int(rng.integers(tracks))
        delta = int(rng.choice([0, 1, 5, 200, 70_000]))
        clock[track] += 2 * delta
        if rng.random() < 0.55:
            iid = int(rng.integers(1, 4))
            body = u(10, iid) + (u(34, 5) if rng.random() < 0.5 else b"") + u(9, 1)
            stacks[track].append((names[iid], clock[track]))
        else:
            body = u(9, 2)
            if stacks[track]:
                name, start = stacks[track].pop()
                spans.append(((1 << 20) + 1 + track, name, start, clock[track]))
        out.append(pf.packet(u(8, delta), u(10, track + 1), b(11, body)))
    return b"".join(out), spans, sum(map(len, stacks))


@pytest.mark.parametrize("seed", range(6))
def test_begins_and_ends_pair_as_a_stack_per_track(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   seed: int) -> None:
    rng = np.random.default_rng(seed)
    data, expected, unclosed = _stream(rng, tracks=int(rng.integers(1, 5)), events=int(rng.integers(50, 400)))
    path = tmp_path / "t.pftrace"
    path.write_bytes(data)
    monkeypatch.setattr(perfetto_read, "_CHUNK", int(rng.integers(1, 60)))
    found = perfetto_read.read_spans(path)
    assert found.spans == expected  # ends' order kept too
    assert found.unclosed == unclosed
    with monkeypatch.context() as patch:
        packet_by_packet(patch)
        slow = perfetto_read.read_spans(path)
    assert slow.spans == expected and slow.unclosed == unclosed


@pytest.mark.parametrize("seed", range(40))
def test_nested_events_pair_a_level_at_a_time_as_the_stack_pairs_them(seed: int) -> None:
    """A chunk whose tracks never close more slices than they opened is paired a level at
    a time: the same begins and ends as the general pairing (which clamps each track's
    depth at 0 and sorts by track and level); a chunk with an end with nothing open, or
    nesting deeper than the levels scanned, is left to the general pairing."""
    rng = np.random.default_rng(seed)
    tracks, kinds = [], []
    for track in sorted(rng.choice(1 << 20, int(rng.integers(1, 6)), replace=False).tolist()):
        depth, limit = 0, int(rng.integers(1, 20))
        for _ in range(int(rng.integers(0, 200))):
            opens = depth == 0 or (depth < limit and rng.random() < 0.55)
            if not opens and seed % 4 == 0 and rng.random() < 0.02:
                depth += 1  # an end with nothing open, once in a while
            depth += 1 if opens else -1
            tracks.append(track)
            kinds.append(opens)
    t, is_begin = np.array(tracks, np.int64), np.array(kinds, bool)
    general = perfetto_read._paired(t, is_begin)
    nested = perfetto_read._paired_as_nested(t, is_begin)
    running = [0]
    for k in range(t.size):  # the depth walked, each track from 0
        running.append((0 if k == 0 or t[k] != t[k - 1] else running[-1]) + (1 if is_begin[k] else -1))
    fits = min(running[1:], default=0) >= 0 and max(running, default=0) < perfetto_read._LEVELS_SCANNED
    assert (nested is not None) == fits
    if nested is not None:
        assert sorted(zip(*map(np.ndarray.tolist, nested), strict=True)) == \
            sorted(zip(*map(np.ndarray.tolist, general), strict=True))


def _varint_walked(buffer: bytes, at: int, hi: int) -> tuple[int, int, bool]:
    """A varint at ``at`` read a byte at a time, as _varints defines it: its value (the
    bytes read, 0xFF past the buffer, wrapping at 64 bits), where it ends (after its
    first byte where none ended), and whether it ended before ``hi`` within 10 bytes."""
    def byte(i: int) -> int:
        return buffer[i] if i < len(buffer) else 0xFF
    b = byte(at)
    value, end, done = b & 0x7F, at + 1, b < 0x80 and at < hi
    if b >= 0x80 and at + 1 < hi:
        for k in range(1, 10):
            b = byte(at + k)
            value |= ((b & 0x7F) << (7 * k)) & (2**64 - 1)
            if b < 0x80:
                end, done = at + k + 1, True
                break
            if at + k + 1 >= hi:
                break
    return value, end, done


@pytest.mark.parametrize("seed", range(30))
def test_varints_read_as_columns_are_the_bytes_walked(seed: int) -> None:
    """Varints of every length, most or few of them going on past each byte (read for all
    of them, then for those going), ends before, at and past their bound and the buffer's."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    carried = rng.random()  # the share of bytes that carry on: few to nearly all
    data = np.where(rng.random(n) < carried, rng.integers(0x80, 256, n), rng.integers(0, 0x80, n))
    buffer = data.astype(np.uint8)
    at = rng.integers(0, n + 3, int(rng.integers(1, 200)))
    hi = at + rng.integers(-1, 13, at.size)
    value, end, done = perfetto_read._varints(lambda where: perfetto_read._byte(buffer, where), at, hi)
    walked = [_varint_walked(buffer.tobytes(), a, h) for a, h in zip(at.tolist(), hi.tolist(), strict=True)]
    assert list(zip(value.tolist(), end.tolist(), done.tolist(), strict=True)) == walked


def _blocks(rng: np.random.Generator) -> bytes:
    """Sequences written a block at a time (collect's shape: a core's events in a row),
    each on its own clock — none (raw timestamps), incremental, absolute — with what makes
    a run leave the common way: a tick past 2**40, interned ids past 16 bits, names
    interned again between two runs, begins naming ids never interned, events with a name
    of their own (read one by one), a sequence coming back after another's block."""
    u, b, s = pf.uint_field, pf.bytes_field, pf.string_field
    out = [pf.packet(b(60, u(1, 1 << 20) + b(3, u(1, 1) + s(6, "Rank 0"))))]
    sequences = int(rng.integers(1, 5))
    modes = [str(rng.choice(["raw", "incremental", "absolute"])) for _ in range(sequences)]
    clock = [0] * sequences
    for block in range(int(rng.integers(1, 8))):
        q = int(rng.integers(sequences))
        uuid = (1 << 20) + 1 + q
        big = bool(rng.random() < 0.2)
        first_iid = (1 << 16) if big else 1
        # a few names, or one of two sets enough for the reader to keep their table by
        # content (the same content on several sequences, as collect interns a rank's
        # labels on every core; the second set lacks ids 1 and 2 of the first)
        pool = int(rng.integers(0, 3))
        if pool < 2:
            names = {first_iid + 2 * pool + k: f"p{pool}.{k}" for k in range(40)}
        else:
            names = {first_iid + k: f"n{k}.{block}" for k in range(3)}
        interned = b(12, b"".join(b(2, u(1, iid) + s(2, name)) for iid, name in names.items()))
        if clock[q] == 0 or rng.random() < 0.3:  # (again) from the start: descriptor, defaults, clock
            thread = b(4, u(1, 1) + u(2, q + 1) + s(5, f"AIC {q}"))
            out.append(pf.packet(b(60, u(1, uuid) + u(5, 1 << 20) + thread)))
            out.append(pf.packet(u(10, q + 1), u(13, 1), b(59, u(58, 64) + b(11, u(11, uuid))), interned))
            clock[q] = 1000 * (q + 1)
            if modes[q] != "raw":
                mine = u(1, 64) + u(2, clock[q]) + u(4, 3) + (u(3, 1) if modes[q] == "incremental" else b"")
                out.append(pf.packet(u(10, q + 1), b(6, b(1, mine) + b(1, u(1, 6) + u(2, 7 * q)))))
        else:  # names interned again on the running sequence
            out.append(pf.packet(u(10, q + 1), interned))
        for _ in range(int(rng.integers(1, 120))):
            delta = int(rng.choice([1, 3, 700, 1 << 41])) if rng.random() < 0.05 else int(rng.integers(0, 50))
            clock[q] += delta
            stamp = delta if modes[q] == "incremental" else clock[q]
            roll = rng.random()
            if roll < 0.45:
                iid = first_iid + int(rng.choice([0, 1, 2, 3, 8]))
                body = u(10, iid) + u(9, 1)
            elif roll < 0.5:
                body = s(23, "own name") + u(9, 1)
            else:
                body = u(9, 2)
            out.append(pf.packet(u(8, stamp), u(10, q + 1), b(11, body)))
    return b"".join(out)


@pytest.mark.parametrize("seed", range(80))
def test_runs_on_their_sequences_read_as_packet_by_packet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          seed: int) -> None:
    """Runs of column packets on one sequence each, their columns computed for a whole
    chunk at once, read what the packet-by-packet reader reads, in whole and small chunks."""
    rng = np.random.default_rng(100 + seed)
    path = tmp_path / "t.pftrace"
    path.write_bytes(_blocks(rng))
    with monkeypatch.context() as patch:
        packet_by_packet(patch)
        expected = perfetto_read.read_spans(path)
    for chunk in (1 << 17, int(rng.integers(1, 40))):
        with monkeypatch.context() as patch:
            patch.setattr(perfetto_read, "_CHUNK", chunk)
            found = perfetto_read.read_spans(path)
        assert found.spans == expected.spans  # ends' order kept too
        assert (found.unclosed, found.launches, found.instants) == (expected.unclosed, expected.launches,
                                                                     expected.instants)


def _laminar(rng: np.random.Generator, tracks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ts: list[float] = []
    dur: list[float] = []
    track: list[int] = []

    def build(lo: int, hi: int, depth: int, t: int) -> None:
        k = int(rng.integers(0, 4)) if depth < 5 else 0
        if hi - lo < 2 * k:
            return
        cuts = np.sort(rng.choice(np.arange(lo, hi + 1), size=2 * k, replace=False))
        for a, b in zip(cuts[::2].tolist(), cuts[1::2].tolist(), strict=True):
            ts.append(a / 1000)
            dur.append((b - a) / 1000)
            track.append(t)
            build(a, b, depth + 1, t)

    for t in range(tracks):
        build(0, 300, 0, t)
    order = rng.permutation(len(ts))  # the walk sorts them; so must the columns
    return (np.array(track, np.int32)[order], np.array(ts)[order], np.array(dur)[order])


@pytest.mark.parametrize("scanned", [0, 2, spans._SCANNED_LEVELS])
def test_nesting_as_columns_is_the_stack_walk(scanned: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parents found level by level (shallow nesting) or by a search (deeper), as the
    stack walk finds them."""
    monkeypatch.setattr(spans, "_SCANNED_LEVELS", scanned)
    rng = np.random.default_rng(7)
    columns = 0
    for trial in range(400):
        if trial % 2:
            track, ts, dur = _laminar(rng, int(rng.integers(1, 4)))
        else:  # overlapping, touching, of no length: the walk's answer either way
            n = int(rng.integers(1, 40))
            track = rng.integers(0, 3, n).astype(np.int32)
            ts, dur = rng.integers(0, 20, n) / 1000, rng.integers(0, 10, n) / 1000
        depth, self_time = spans._depth_and_self_time(track, ts, dur)
        walked = spans._depth_and_self_time_walked(track, ts, dur)
        assert (depth == walked[0]).all()
        assert np.allclose(self_time, walked[1])
        columns += spans._nested(track, ts, dur) is not None
    assert columns > 150  # the laminar half is done as columns


def test_spans_that_do_not_nest_are_walked() -> None:
    # b starts inside a and ends after it: not a laminar family
    track, ts, dur = np.zeros(2, np.int32), np.array([0.0, 1.0]), np.array([2.0, 2.0])
    assert spans._nested(track, ts, dur) is None
    assert spans._depth_and_self_time(track, ts, dur)[0].tolist() == [0, 1]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_on_a_terminal_after_a_second_and_clears(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0, 0.5, 1.5, 1.6, 2.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    terminal = _Terminal()
    shown = progress.Progress("reading t.pftrace", terminal)  # started at 0.0
    shown.update(10, 100)  # at 0.5: too early
    assert terminal.getvalue() == ""
    shown.update(50, 100)  # at 1.5
    shown.update(60, 100)  # at 1.6: too soon after the last line
    shown.update(90, 100)  # at 2.0
    assert terminal.getvalue() == "\rreading t.pftrace: 50 %\rreading t.pftrace: 90 %"
    shown.close()
    assert terminal.getvalue().endswith("\r" + " " * len("reading t.pftrace: 90 %") + "\r")


def test_progress_says_nothing_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "QUIET_FOR", 0.0)
    monkeypatch.setattr(progress, "EVERY", 0.0)
    piped = io.StringIO()
    quiet = progress.Progress("reading t.pftrace", piped)
    quiet.update(1, 2)
    quiet.close()
    assert piped.getvalue() == ""


def test_the_pftrace_reader_reports_progress_by_chunk(demo_pftrace: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(perfetto_read, "_CHUNK", 50)
    calls: list[tuple[int, int]] = []
    perfetto_read.read_spans(demo_pftrace, lambda done, total: calls.append((done, total)))
    size = demo_pftrace.stat().st_size
    assert len(calls) > 3 and calls[-1] == (size, size)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_inspect_reads_its_trace_once(demo_pftrace: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from optrace.runtime import regular

    reads: list[str] = []
    for module in (perfetto_read, spans, json_rows):
        for name in ("read_maybe_gzip", "map_maybe_gzip", "load_json"):
            if hasattr(module, name):
                real = getattr(module, name)

                def counted(path: Path, *rest: Any, _real: Any = real) -> Any:
                    reads.append(str(path))
                    return _real(path, *rest)

                monkeypatch.setattr(module, name, counted)
    assert regular  # the bounded reader both go through
    json_trace = tmp_path / "t.json"
    assert invoke("collect", demo_pftrace.parent / "d", "-o", json_trace).exit_code == 0
    reads.clear()
    for path in (demo_pftrace, json_trace):
        result = invoke("inspect", path)
        assert result.exit_code == 0, result.output
        assert "2 ranks × 3 launches" in result.output
    assert reads == [str(demo_pftrace), str(json_trace)]


# ----------------------------------------------------------------------------- runs of short packets
#
# _read finds a long run of collect's short event packets with numpy (_short_run). These
# check it finds the same packets as stepping through them one by one, on traces made
# to trip it (stray "0A xx 40" bytes inside packets, runs across its windows, a packet
# running past the file), and that a corrupted packet inside a run is refused as before.


def stepped_through(data: bytes) -> tuple[list[int], list[int]]:
    """The candidates (``0x0A len<128``) and other packets, stepping one packet at a time
    (the loop _read had before it found runs with numpy)."""
    short: list[int] = []
    other: list[int] = []
    i = 0
    while i < len(data):
        if data[i] == 0x0A and i + 1 < len(data) and data[i + 1] < 0x80:
            short.append(i)
            i += 2 + data[i + 1]
        else:
            assert data[i] == 0x0A  # these traces hold packets only
            other.append(i)
            size, j = perfetto_read._varint(data, i + 1)
            i = j + size
    return short, other


def packets_seen(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int], Any]:
    """The candidates and other packets _read hands to _chunk, and what it read."""
    short: list[int] = []
    other: list[int] = []
    chunk = perfetto_read._chunk

    def seen(data: bytes, buffer: np.ndarray, starts: np.ndarray, others: list[int], *rest: Any) -> None:
        short.extend(starts.tolist())
        other.extend(others)
        chunk(data, buffer, starts, others, *rest)

    with monkeypatch.context() as patch:
        patch.setattr(perfetto_read, "_chunk", seen)
        found = read_all(path)
    return short, other, found


def _tricky(rng: np.random.Generator, tracks: int, events: int) -> bytes:
    """_stream's trace with timestamps of 10 (0x0A) and sequence ids of 64 (0x40): event
    packets holding "0A 50 40" (a short packet of 80 bytes, if it were one), between
    long packets (interned data of 130 bytes and more) and short ones of other fields."""
    u, b, s = pf.uint_field, pf.bytes_field, pf.string_field
    out = [pf.packet(b(60, u(1, 1 << 20) + b(3, u(1, 1) + s(6, "Rank 0"))))]
    for track in range(tracks):
        seq = 64 + track * 17  # 64: the byte 0x40
        uuid = (1 << 20) + 1 + track
        out.append(pf.packet(b(60, u(1, uuid) + u(5, 1 << 20) + b(4, u(1, 1) + u(2, track + 1)))))
        names = b"".join(b(2, u(1, iid) + s(2, f"name {iid} " + "x" * int(rng.integers(0, 60))))
                         for iid in range(1, 4))
        out.append(pf.packet(u(10, seq), u(13, 1), b(59, u(58, 64) + b(11, u(11, uuid))), b(12, names)))
        clocks = b(1, u(1, 64) + u(2, 0) + u(3, 1) + u(4, 2)) + b(1, u(1, 6) + u(2, 1000 * (track + 1)))
        out.append(pf.packet(u(10, seq), b(6, clocks)))
    seqs = [64 + track * 17 for track in range(tracks)]
    for _ in range(events):
        seq = seqs[int(rng.integers(tracks))]
        delta = int(rng.choice([10, 10, 1, 0x0A0A, 300, 70_000]))
        if rng.random() < 0.5:
            body = u(10, int(rng.integers(1, 4))) + (u(34, 5) if rng.random() < 0.3 else b"") + u(9, 1)
        else:
            body = u(9, 2)
        out.append(pf.packet(u(8, delta), u(10, seq), b(11, body)))
        if rng.random() < 0.01:  # a long packet in the run: the run stops there
            out.append(pf.packet(u(10, seq), b(12, b(2, u(1, 9) + s(2, "y" * 140)))))
        if rng.random() < 0.01:  # a short packet not starting with a timestamp
            out.append(pf.packet(u(10, seq), b(12, b(2, u(1, 9) + s(2, "z")))))
    return b"".join(out)


@pytest.mark.parametrize("seed", range(8))
def test_runs_found_as_columns_are_the_packets_stepped_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    path = tmp_path / "t.pftrace"
    data = _tricky(rng, tracks=int(rng.integers(1, 4)), events=int(rng.integers(200, 3000)))
    path.write_bytes(data)
    expected_short, expected_other = stepped_through(data)
    assert any(data[k + 3 : k + 6] == b"\x0a\x50\x40" for k in expected_short)  # the stray candidates
    with monkeypatch.context() as patch:
        patch.setattr(perfetto_read, "_STEPPED", 1 << 30)  # no run found as columns
        slow = packets_seen(path, patch)
    assert slow[:2] == (expected_short, expected_other)
    runs: list[int] = []
    short_run = perfetto_read._short_run

    def counted(buffer: np.ndarray, i: int, seen: perfetto_read._Window) -> tuple[np.ndarray, int]:
        found, end = short_run(buffer, i, seen)
        runs.append(found.size)
        return found, end

    monkeypatch.setattr(perfetto_read, "_short_run", counted)
    # windows of a few packets: runs cross them, and stray candidates sit at their ends
    monkeypatch.setattr(perfetto_read, "_STEPPED", int(rng.integers(1, 8)))
    monkeypatch.setattr(perfetto_read, "_LONG_RUN", int(rng.integers(1, 300)))  # then fewer steps
    monkeypatch.setattr(perfetto_read, "_WINDOW_FIRST", int(rng.integers(3, 40)))
    monkeypatch.setattr(perfetto_read, "_WINDOW_LAST", int(rng.integers(40, 300)))
    monkeypatch.setattr(perfetto_read, "_CHUNK", int(rng.integers(50, 2000)))
    fast = packets_seen(path, monkeypatch)
    assert sum(runs) > len(expected_short) // 2  # most packets were found as columns
    assert fast == slow


def test_runs_found_as_columns_on_collected_traces(demo_pftrace: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The packets, and what is read, with runs found as columns from their second packet
    on, or never."""
    for path in (demo_pftrace, DATA / "trace_v1.pftrace"):
        with monkeypatch.context() as patch:
            patch.setattr(perfetto_read, "_STEPPED", 1 << 30)
            slow = packets_seen(path, patch)
        with monkeypatch.context() as patch:
            patch.setattr(perfetto_read, "_STEPPED", 1)
            patch.setattr(perfetto_read, "_WINDOW_FIRST", 64)
            fast = packets_seen(path, patch)
        assert fast == slow
        assert slow[0] == stepped_through(path.read_bytes())[0]


def _refusal(path: Path, monkeypatch: pytest.MonkeyPatch, stepped: int) -> str:
    with monkeypatch.context() as patch:
        patch.setattr(perfetto_read, "_STEPPED", stepped)
        patch.setattr(perfetto_read, "_WINDOW_FIRST", 64)
        with pytest.raises(perfetto_read.ProfilingInputError) as refused:
            perfetto_read.read_spans(path)
    return str(refused.value)


def test_a_corrupted_packet_inside_a_run_is_refused_as_before(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    data = _tricky(rng, tracks=2, events=2000)
    short, _ = stepped_through(data)
    # SLICE_END packets of a 1-byte timestamp: [0A 08 40 ts 50 seq 5A 02 48 02]
    middle = [k for k in short[len(short) // 3 : 2 * len(short) // 3] if data[k + 1] == 8]
    at = middle[len(middle) // 2]
    assert data[at + 6 : at + 10] == b"\x5a\x02\x48\x02"
    cases = {
        # the event's type field as wire type 7: refused where the packet is read
        "wire type": data[: at + 8] + b"\x4f" + data[at + 9 :],
        # the packet's length past the file's end: the run stops there
        "past the end": data[: at + 1] + b"\x7f" + data[at + 2 : at + 60],
        # cut inside a packet of the run
        "cut": data[: at + 5],
        # the track event's length past its packet
        "past the packet": data[: at + 7] + b"\x09" + data[at + 8 :],
    }
    messages = {}
    for case, corrupted in cases.items():
        path = tmp_path / f"{case}.pftrace"
        path.write_bytes(corrupted)
        message = _refusal(path, monkeypatch, 1 << 30)  # stepped through, as before runs
        assert message == _refusal(path, monkeypatch, 1)
        assert message == _refusal(path, monkeypatch, 64)
        assert message.startswith(f"{path}: not a readable Perfetto trace: ")
        messages[case] = message.split(": not a readable Perfetto trace: ")[1]
    assert messages["wire type"] == "wire type 7"
    assert messages["past the end"] == messages["cut"] == "packet runs past the end of the file"
    assert messages["past the packet"] == "packet runs past its end"


# ----------------------------------------------------------------------------- the span table's sorts


def test_ids_by_first_use_are_np_unique_in_order_of_first_place() -> None:
    rng = np.random.default_rng(12)
    for _ in range(300):
        size = int(rng.integers(1, 30))
        n = int(rng.integers(0, 80))
        runs = int(rng.choice([4, 40]))  # short runs, and long ones as a table's tracks have
        ids = np.repeat(rng.integers(0, size, n), rng.integers(1, runs, n))
        if rng.random() < 0.5:
            ids = rng.permutation(ids)
        unique, first = np.unique(ids, return_index=True)
        assert spans._by_first_use(ids, size).tolist() == unique[np.argsort(first)].tolist()


def test_row_start_longest_order_is_the_lexsort() -> None:
    rng = np.random.default_rng(11)
    for _ in range(300):
        n = int(rng.integers(0, 60))
        row = rng.integers(0, int(rng.integers(1, 5)), n).astype(np.int32)
        start = rng.integers(0, int(rng.integers(1, 30)), n).astype(np.int64) * 1000  # ties, often
        end = start + rng.integers(1, 5, n) * 1000
        expected = np.lexsort((-end, start, row)) if n else start
        assert spans._by_row_start_longest(row, start, end).tolist() == expected.tolist()
    far = np.array([0, 1 << 62, 5], np.int64)  # (row, start) not one integer: the lexsort itself
    row = np.array([1, 0, 1], np.int32)
    expected = np.lexsort((-(far + 1), far, row))
    assert spans._by_row_start_longest(row, far, far + 1).tolist() == expected.tolist()


@pytest.mark.parametrize("many_tracks", [False, True])
@pytest.mark.parametrize("one_a_track", [False, True])
def test_launch_slices_holding_spans_as_when_sorted_together(many_tracks: bool, one_a_track: bool) -> None:
    """A track's spans searched among its slices, as slices and spans sorted together
    find them (spans outside every slice, on a track without slices, slices starting
    together, a span starting as a slice does; one slice a track, a trace's usual shape)."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        tracks = int(rng.integers(1, 6)) + (300 if many_tracks else 0)
        k = int(rng.integers(1, 8))  # launch_rows has slices (or does not call it)
        s_track = rng.integers(0, tracks, k)
        if one_a_track:
            s_track = rng.permutation(tracks)[:k]
            k = s_track.size
        s_start = rng.integers(0, 20, k).astype(np.float64)
        s_end = s_start + rng.integers(0, 10, k)
        s_launch = rng.integers(0, 3, k)
        n = int(rng.integers(0, 80))
        track = rng.integers(0, tracks, n)
        ts = rng.integers(0, 25, n).astype(np.float64)
        end = ts + rng.integers(0, 6, n)
        expected = spans._held_by_sorted(track, ts, end, s_track, s_start, s_end, s_launch)
        got = spans._held_by(track, ts, end, s_track, s_start, s_end, s_launch)
        assert got.tolist() == expected.tolist()


@pytest.mark.parametrize("shape", ["one launch a track", "some tracks without", "spans outside", "several"])
def test_launch_rows_said_of_tracks_are_those_said_of_spans(shape: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows found a track at a time (every span of a track in its one launch slice) are
    the rows found span by span: names, launches, each span's row, the slices' rows; and
    where a track's spans fall partly outside its slice, or a track has several, the
    per-track way steps aside."""
    rng = np.random.default_rng(11)
    took = 0
    for _ in range(150):
        tracks = int(rng.integers(1, 40))
        real = [(f"p{t % 3}", f"Rank {t % 3}", f"AIV {t}") for t in range(tracks)]
        sliced = rng.permutation(tracks)[: tracks if shape != "some tracks without" else max(1, tracks // 2)]
        if shape == "several":
            sliced = np.concatenate([sliced, sliced[:1]])
        s_start = rng.integers(0, 50, sliced.size).astype(np.float64)
        s_end = s_start + rng.integers(20, 40, sliced.size)
        names = [f"launch {int(x)}" for x in rng.integers(0, 3, sliced.size)]
        slices = [(int(t), float(a), float(b), n)
                  for t, a, b, n in zip(sliced, s_start, s_end, names, strict=True)]
        n = int(rng.integers(1, 200))
        track = rng.integers(0, tracks, n)
        begin_of = dict(zip(sliced.tolist(), s_start.tolist(), strict=False))
        ts = np.array([begin_of.get(int(t), 0.0) + float(rng.integers(0, 10)) for t in track])
        end = ts + rng.integers(0, 10, n)
        if shape == "spans outside":
            end[rng.random(n) < 0.05] += 100
        fallback: list[str | None] = [None] * tracks
        got = spans.launch_rows(track, ts, end, real, slices, fallback)
        # the times in ns, divided by launch_rows (a track at a time where it can)
        in_ns = spans.launch_rows(track, (ts * 1000).astype(np.int64), (end * 1000).astype(np.int64), real,
                                  slices, fallback, per_us=1000.0)
        assert in_ns.names == got.names and in_ns.by_track == got.by_track
        assert in_ns.track.tolist() == got.track.tolist()
        with monkeypatch.context() as patch:
            patch.setattr(spans, "_launch_by_track", lambda *a: None)
            expected = spans.launch_rows(track, ts, end, real, slices, fallback)
        took += spans._launch_by_track(track, ts, end, *_slice_columns(slices, got.launches)) is not None
        assert got.names == expected.names and got.launches == expected.launches
        assert got.track.tolist() == expected.track.tolist()
        assert got.track_launch.tolist() == expected.track_launch.tolist()
        assert got.by_track == expected.by_track
    # the per-track way is taken where it applies, and only there
    assert (took > 100) == (shape in ("one launch a track", "some tracks without")), took


Slice = tuple[int, float, float, str]


def _slice_columns(slices: list[Slice], launches: list[str]) -> tuple[np.ndarray, ...]:
    ids = {name: k for k, name in enumerate(launches)}
    return (np.array([t for t, _, _, _ in slices], np.int64), np.array([a for _, a, _, _ in slices]),
            np.array([b for _, _, b, _ in slices]), np.array([ids[n] for _, _, _, n in slices], np.int64))


@pytest.mark.parametrize("scanned", [0, spans._SCANNED_LEVELS])
def test_nesting_on_many_tracks_or_far_track_ids_is_the_stack_walk(scanned: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The other ways _nested counts: tracks past 16 bits, more tracks than spans / 256."""
    monkeypatch.setattr(spans, "_SCANNED_LEVELS", scanned)
    rng = np.random.default_rng(9)
    columns = 0
    for trial in range(60):
        track, ts, dur = _laminar(rng, int(rng.integers(150, 250)))
        # times in 1/1024 units: exact in floats, so touching siblings do not overlap
        ts, dur = np.round(ts * 1000) / 1024, np.round(dur * 1000) / 1024
        assert np.unique(track).size > 64
        if trial % 2:
            track = track.astype(np.int64) + (1 << 16)
        walked = spans._depth_and_self_time_walked(track, ts, dur)
        depth, self_time = spans._depth_and_self_time(track, ts, dur)
        assert (depth == walked[0]).all()
        assert np.allclose(self_time, walked[1])
        columns += spans._nested(track, ts, dur) is not None
    assert columns == 60


def test_percentiles_are_numpys_to_the_bit() -> None:
    """report's p50 / p99 are np.percentile's (linear) bit for bit: floats, float32,
    integers past 2**32, ties, one value, a NaN, any percent from 0 to 100."""
    rng = np.random.default_rng(7)
    for trial in range(3000):
        n = int(rng.integers(1, 40)) if trial % 10 else int(rng.integers(1, 3000))
        kind = trial % 5
        values: np.ndarray
        if kind == 0:
            values = rng.random(n) * 1000
        elif kind == 1:
            values = rng.integers(0, 20, n).astype(np.float64)
        elif kind == 2:
            values = (rng.random(n) * 100).astype(np.float32)
        elif kind == 3:
            values = rng.integers(0, 1 << 40, n)
        else:
            values = rng.standard_normal(n)
        if kind == 4 and trial % 7 == 0:
            values[rng.integers(0, n)] = np.nan
        percents = (50.0, 99.0) if trial % 3 else (float(rng.integers(0, 101)), 37.5, 0.0, 100.0)
        want = [float(v) for v in np.percentile(values, percents)]
        got = spans.percentiles(values, percents)
        assert np.array_equal(np.array(got), np.array(want), equal_nan=True), (trial, want, got)


def test_the_readers_do_without_numpy_ma(tmp_path: Path) -> None:
    """np.unique and np.percentile import numpy.ma on first use (~14 ms of a reader's
    start): report (text and HTML) and compare, on a trace and on directories, go
    without it."""
    import subprocess
    import sys

    write_demo(tmp_path / "a", ranks=2, launches=3, aic=2)
    write_demo(tmp_path / "b", ranks=2, launches=3, aic=2, seed=1)
    assert invoke("collect", tmp_path / "a", "-o", tmp_path / "a.pftrace").exit_code == 0
    for argv in (["report", "a.pftrace"], ["report", "a", "--html", "r.html"], ["compare", "a", "b"],
                 ["compare", "a.pftrace", "b", "--format", "json"], ["inspect", "a.pftrace"]):
        code = (
            "import sys\n"
            "from optrace.cli.readers_fast import fast_main\n"
            f"code = fast_main({argv[0]!r}, {argv[1:]!r})\n"
            "print('numpy.ma' in sys.modules, code)\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
        assert done.stdout.strip().splitlines()[-1] == "False 0", (argv, done.stdout[-300:], done.stderr)


def _fields_walked(data: bytes, lo: int, hi: int, schema: Any) -> list[Any]:
    """perfetto_read.fields as defined: every key, value and length a varint read by
    _varint; the refusal's type and message where it refuses."""
    out: list[Any] = []
    i = lo
    try:
        while i < hi:
            key, i = perfetto_read._varint(data, i)
            number, wire = key >> 3, key & 7
            if schema is not None and schema[1].get(number, wire) != wire:
                raise perfetto_read._wrong_wire(schema, number, wire)
            if wire == 0:
                value, i = perfetto_read._varint(data, i)
                out.append((number, value, i))
            elif wire == 2:
                size, i = perfetto_read._varint(data, i)
                if i + size > hi:
                    raise perfetto_read._Truncated("field runs past its message")
                out.append((number, i, i + size))
                i += size
            elif wire in (1, 5):
                i += 8 if wire == 1 else 4
            else:
                raise perfetto_read._Truncated(f"wire type {wire}")
        if i != hi:
            raise perfetto_read._Truncated("message runs past its end")
    except (perfetto_read._Truncated, perfetto_read._Malformed) as exc:
        out.append((type(exc).__name__, str(exc)))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_fields_read_a_short_varint_in_place_as_varint_reads_it(seed: int) -> None:
    """Keys, values and lengths of one byte are read in place: the same fields, ends and
    refusals as every varint read by _varint, bytes random or of protobuf's usual keys,
    messages that end inside a varint or past the buffer."""
    rng = np.random.default_rng(seed)
    usual = np.array([0x08, 0x10, 0x12, 0x1A, 0x22, 0x05, 0x81, 0x01, 0x02, 0x7F, 0xFF], np.uint8)
    for trial in range(3000):
        n = int(rng.integers(0, 30))
        data = (rng.integers(0, 256, n, dtype=np.uint8) if trial % 2 else rng.choice(usual, n)).tobytes()
        lo = int(rng.integers(0, n + 1))
        hi = int(rng.integers(lo, n + 4))
        schema = perfetto_read._DESCRIPTOR if trial % 3 == 0 else None
        found: list[Any] = []
        try:
            found.extend(perfetto_read.fields(data, lo, hi, schema))
        except (perfetto_read._Truncated, perfetto_read._Malformed) as exc:
            found.append((type(exc).__name__, str(exc)))
        assert found == _fields_walked(data, lo, hi, schema), (data, lo, hi)
