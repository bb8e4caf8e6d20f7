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
from optrace.runtime import perfetto as pf
from optrace.runtime import perfetto_read, progress, spans
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


def test_nesting_as_columns_is_the_stack_walk() -> None:
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
    for module in (perfetto_read, spans):
        for name in ("read_maybe_gzip", "load_json"):
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
