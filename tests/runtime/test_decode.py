"""Decoder: slot classification, fingerprint, unknown ids, nesting policy, time base."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fuzz_tally import SCALE, Tally, tally
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rt_helpers import FP, LABELS, point_map, rank_buffer, well_formed_core

from optrace.runtime.decode import (
    STATUS_CLOSED_BY_PARENT,
    STATUS_OK,
    STATUS_UNCLOSED,
    DecodeOptions,
    decode_rank,
    nest,
    nest_stack,
    nest_vectorised,
    scan_slots,
)
from optrace.runtime.errors import ProfilingInputError
from optrace.runtime.format import (
    RankMeta,
    SlotLayout,
    capacity,
    pack_event,
    trace_point_hash,
    unpack_event,
)
from optrace.runtime.rankfile import RankBuffer
from optrace.runtime.synth import SlotWriter, new_buffer


def test_event_word_packing() -> None:
    word = pack_event(0x12345678, extra_id=0x1AB, index=0x123456)
    assert unpack_event(word) == (0x12345678, 0xAB, 0x123456)  # extraId masked to 8 bits
    assert pack_event(1, 0, 1 << 23) < 0  # high bit set: stored as a negative int64
    assert unpack_event(pack_event(1, 0, 1 << 23)) == (1, 0, 1 << 23)


def test_trace_point_hash_is_the_preprocessor_id() -> None:
    value = trace_point_hash("processing", "B")
    assert 0 < value < 2**31 and value != trace_point_hash("processing", "E")
    preprocess = pytest.importorskip("optrace.engine.preprocess", reason="no preprocess module in this build")
    for label in ("processing", "dispatch aiv token-copy", "a"):
        for kind in "BE":
            assert trace_point_hash(label, kind) == preprocess.point_hash(label, kind)


def test_well_formed_rank() -> None:
    decoded = decode_rank(rank_buffer(), point_map())
    assert decoded.issues == [] and decoded.skipped_records == 0
    assert decoded.fingerprint == FP
    assert [c.name for c in decoded.cores] == ["AIC 0", "AIC 1", "AIV 0", "AIV 1", "AIV 2", "AIV 3"]
    labels = point_map().labels
    core = decoded.cores[0]
    names = [labels[i] for i in core.label]
    assert names == [
        "processing", "processing dispatch", "processing dispatch wait",
        "processing compute", "processing compute", "processing compute", "processing combine",
    ]
    assert core.depth.tolist() == [0, 1, 2, 1, 1, 1, 1]
    assert (core.status == STATUS_OK).all()
    compute = [i for i, n in enumerate(names) if n == "processing compute"]
    assert [int(core.high[i]) >> 8 for i in compute] == [0, 1, 2]
    assert all(int(core.high[i]) & 0xFF == 1 for i in compute)
    # Base = the earliest core start; core k starts 7k cycles later (launch skew).
    assert [c.start_offset for c in decoded.cores] == [7 * k for k in range(6)]
    assert core.start[0] == 3  # first record 3 cycles after the core's start


def test_unused_and_spare_slots() -> None:
    decoded = decode_rank(rank_buffer(aic=2, aiv=4, spare=2, used=5), point_map())
    states = [s.state for s in decoded.slots]
    assert states == ["ok"] * 5 + ["unused"] * 3
    assert decoded.unused_slots == 3 and decoded.issues == []
    assert decoded.slots[-1].name == "Spare 7"


def test_guarded_overflow_counts_drops() -> None:
    data = new_buffer(1, 32)
    writer = SlotWriter(data[0], 100, fingerprint=FP)
    for i in range(40):
        well_formed_core(writer, 100 + 1000 * i, loops=1)
    cap = capacity(32)
    assert data[0, 0] == 1 + 1 + 40 * 10  # counter starts at 1; fingerprint + 10 per round
    decoded = decode_rank(RankBuffer(Path("r.pt"), RankMeta(rank=0, slot_words=32, aic_cores=1), data),
                          point_map())
    slot = decoded.slots[0]
    assert slot.state == "overflow" and slot.records == cap and slot.dropped == 1 + 40 * 10 - cap
    assert decoded.dropped == slot.dropped and decoded.skipped_records == slot.dropped
    assert f"{slot.dropped} records dropped" in slot.message
    # The truncated tail leaves open spans: closed at the last timestamp and flagged.
    assert decoded.repaired_spans > 0
    assert STATUS_UNCLOSED in decoded.cores[0].status.tolist()


def test_legacy_overflow_keeps_only_intact_records() -> None:
    words = 32
    cap = capacity(words)
    data = new_buffer(1, words)
    writer = SlotWriter(data[0], 100)  # legacy: no guard, no fingerprint
    for i in range(cap + 5):
        writer.record(3 if i % 2 == 0 else 4, 200 + i)
    decoded = decode_rank(RankBuffer(Path("r.pt"), RankMeta(rank=0, slot_words=words, aic_cores=1), data),
                          point_map())
    slot = decoded.slots[0]
    assert slot.state == "clobbered"
    # record k >= cap overwrote record 2*cap-1-k: records cap-5 .. cap-1 are gone
    assert slot.records == cap - 5 and slot.dropped == 10
    spans = decoded.cores[0]
    assert spans.start.tolist() == [100 + k for k in range(0, cap - 5, 2)]  # intact pairs only


@pytest.mark.parametrize(
    ("counter", "state", "needle"),
    [(-3, "corrupt", "negative"), (1 << 40, "corrupt", "past what the layout can explain"),
     (1, "empty", ""), (0, "unused", "")],
)
def test_counter_classification(counter: int, state: str, needle: str) -> None:
    data = new_buffer(1, 16)
    data[0, 0] = counter
    scan = scan_slots(data, SlotLayout(1, 1, 0))
    assert scan.reports[0].state == state and needle in scan.reports[0].message
    assert scan.events.size == 0


def test_legacy_counter_past_double_capacity_is_corrupt() -> None:
    data = new_buffer(1, 16)
    data[0, 0] = 2 * capacity(16) + 2  # without a guard this cannot come from the runtime
    data[0, 1] = pack_event(3)  # not a fingerprint record
    scan = scan_slots(data, SlotLayout(1, 1, 0))
    assert scan.reports[0].state == "corrupt"


def test_map_from_another_build_is_refused_or_flagged() -> None:
    buffer = rank_buffer()
    stale = point_map(fingerprint=0x1234)
    with pytest.raises(ProfilingInputError) as info:
        decode_rank(buffer, stale)
    assert info.value.path == "rank000.pt" and "another build" in info.value.message
    decoded = decode_rank(buffer, stale, DecodeOptions(ignore_fingerprint=True))
    assert any("another build" in issue for issue in decoded.issues)


def test_legacy_buffer_with_fingerprinted_map_is_noted() -> None:
    decoded = decode_rank(rank_buffer(fingerprint=None), point_map())
    assert decoded.fingerprint is None and decoded.issues == []
    assert any("legacy runtime" in note for note in decoded.notes)


def test_unknown_ids_are_counted_and_diagnosed() -> None:
    buffer = rank_buffer(aic=1, aiv=0, fingerprint=None)
    writer_data = buffer.data[0]
    n = int(writer_data[0])
    writer_data[n] = pack_event(99)
    writer_data[writer_data.size - 1 - n] = writer_data[writer_data.size - n]
    writer_data[0] = n + 1
    decoded = decode_rank(buffer, point_map())
    assert decoded.unknown_ids == {99: 1}
    assert any("1 records with 1 ids not in the point map (99)" in i and "another build" in i
               for i in decoded.issues)


def test_ids_outside_the_id_space_are_corrupt() -> None:
    data = new_buffer(1, 32)
    writer = SlotWriter(data[0], 0, fingerprint=None)
    writer.record(0x80000001, 5)
    writer.record(0xFFFFFFFF, 9)
    decoded = decode_rank(RankBuffer(Path("r.pt"), RankMeta(rank=0, slot_words=32, aic_cores=1), data),
                          point_map())
    assert sum(decoded.unknown_ids.values()) == 2
    assert any("these records are corrupt" in issue for issue in decoded.issues)


def test_fingerprint_zero_means_not_preprocessed() -> None:
    decoded = decode_rank(rank_buffer(fingerprint=0), point_map())
    assert decoded.fingerprint is None and decoded.issues == []
    assert any("not preprocessed with `optrace preprocess --modify`" in n for n in decoded.notes)


def test_slots_disagreeing_on_fingerprint() -> None:
    buffer = rank_buffer(aic=1, aiv=1)
    buffer.data[1, 1] = pack_event(0, 0x22, 0x33)  # another fingerprint in slot 1
    decoded = decode_rank(buffer, point_map(fingerprint=None))
    assert any("disagree on the build fingerprint" in issue for issue in decoded.issues)


def test_timestamps_going_backwards_are_clamped() -> None:
    data = new_buffer(1, 32)
    writer = SlotWriter(data[0], 0, fingerprint=FP)
    b, e = LABELS["processing"]
    cb, ce = LABELS["processing compute"]
    writer.record(b, 10)
    writer.record(cb, 50)
    writer.record(ce, 40)  # backwards
    writer.record(e, 60)
    decoded = decode_rank(RankBuffer(Path("r.pt"), RankMeta(rank=0, slot_words=32, aic_cores=1), data),
                          point_map())
    core = decoded.cores[0]
    assert decoded.backwards == 1
    assert (core.end >= core.start).all()
    assert core.start.tolist() == [10, 50] and core.end.tolist() == [60, 50]


def test_clock_comes_from_option_then_metadata() -> None:
    buffer = rank_buffer()
    assert decode_rank(buffer, point_map()).clock_mhz == 50.0
    assert decode_rank(buffer, point_map(), DecodeOptions(clock_mhz=25.0)).clock_mhz == 25.0


def test_wraparound_of_the_cycle_counter() -> None:
    start = (1 << 64) - 40
    decoded = decode_rank(rank_buffer(start=start, skew=11), point_map())
    assert decoded.issues == []
    assert decoded.base_cycle == start
    for k, core in enumerate(decoded.cores):
        assert core.start_offset == 11 * k
        assert (core.start >= 0).all() and (core.end - core.start >= 0).all()
        assert int(core.end.max()) < 1000


# ----------------------------------------------------------------------------- nesting

KINDS = {"B": 1, "E": -1}


def seq(text: str) -> tuple[np.ndarray, np.ndarray]:
    """'Ba Bb Eb Ea' -> kinds and labels (label = letter index)."""
    tokens = text.split()
    kinds = np.array([KINDS[t[0]] for t in tokens], dtype=np.int8)
    labels = np.array([ord(t[1]) - ord("a") for t in tokens], dtype=np.int32)
    return kinds, labels


def spans(text: str) -> list[tuple[int, int, int, int]]:
    nesting = nest(*seq(text))
    return list(zip(nesting.begin.tolist(), nesting.end.tolist(), nesting.depth.tolist(),
                    nesting.status.tolist(), strict=True))


def test_nesting_policy() -> None:
    assert spans("Ba Bb Eb Ea") == [(0, 3, 0, 0), (1, 2, 1, 0)]
    # unmatched E dropped
    assert spans("Ea Ba Ea") == [(1, 2, 0, 0)]
    assert nest(*seq("Ea Ba Ea")).unmatched_e == 1
    # B without its E, closed by the parent's E and flagged
    assert spans("Ba Bb Ea") == [(0, 2, 0, 0), (1, 2, 1, STATUS_CLOSED_BY_PARENT)]
    # crossing pairs: b closed with a, the later Eb has nothing open
    result = nest(*seq("Ba Bb Ea Eb"))
    assert result.unmatched_e == 1 and result.status.tolist() == [0, STATUS_CLOSED_BY_PARENT]
    # unclosed at the end: end = -1 (the core's last timestamp)
    assert spans("Ba Bb Eb") == [(0, -1, 0, STATUS_UNCLOSED), (1, 2, 1, 0)]


def test_vectorised_path_declines_malformed_input() -> None:
    assert nest_vectorised(*seq("Ba Bb Ea Eb")) is None
    assert nest_vectorised(*seq("Ba Eb")) is None
    assert nest_vectorised(*seq("Ea Ba")) is None
    assert nest_vectorised(*seq("Ba Bb Eb Ea")) is not None


@st.composite
def well_formed(draw: st.DrawFn, depth: int = 0) -> list[tuple[int, int]]:
    items: list[tuple[int, int]] = []
    for _ in range(draw(st.integers(0, 3 if depth < 4 else 0))):
        label = draw(st.integers(0, 3))
        items.append((1, label))
        items.extend(draw(well_formed(depth + 1)))
        items.append((-1, label))
    return items


@pytest.mark.slow  # 200 generated segments through both decoders
@settings(max_examples=200, deadline=None)
@given(well_formed())
def test_vectorised_and_stack_agree_on_well_formed(items: list[tuple[int, int]]) -> None:
    kinds = np.array([k for k, _ in items], dtype=np.int8)
    labels = np.array([lab for _, lab in items], dtype=np.int32)
    fast = nest_vectorised(kinds, labels)
    slow = nest_stack(kinds, labels)
    assert fast is not None
    for field in ("begin", "end", "depth", "status"):
        np.testing.assert_array_equal(getattr(fast, field), getattr(slow, field))
    assert slow.unmatched_e == 0 and (slow.status == 0).all()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, -1]), st.integers(0, 3)), max_size=60))
def test_any_sequence_nests_properly(items: list[tuple[int, int]]) -> None:
    kinds = np.array([k for k, _ in items], dtype=np.int8)
    labels = np.array([lab for _, lab in items], dtype=np.int32)
    result = nest(kinds, labels)
    n = len(items)
    ends = np.where(result.end < 0, n, result.end)
    # every B appears in exactly one span; dropped E + used E account for all E
    assert sorted(result.begin.tolist()) == [i for i, (k, _) in enumerate(items) if k > 0]
    used_e = {int(e) for e, s in zip(result.end, result.status, strict=True) if s == STATUS_OK}
    assert len(used_e) + result.unmatched_e == sum(1 for k, _ in items if k < 0)
    # proper nesting by record position: intervals are disjoint or contained
    intervals = sorted(zip(result.begin.tolist(), ends.tolist(), strict=True))
    stack: list[tuple[int, int]] = []
    for b, e in intervals:
        while stack and b > stack[-1][1]:
            stack.pop()
        if stack:
            assert e <= stack[-1][1]
        stack.append((b, e))


# ----------------------------------------------------------------------------- robustness


@pytest.fixture(scope="module")
def random_buffer_tally() -> Iterator[Tally]:
    with tally("decoder: random buffers (hypothesis)", "a buffer decoded") as counts:
        yield counts


@pytest.mark.slow  # fuzzing: 150 random buffers
@settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(1, 4),
    st.sampled_from([8, 9, 16, 33]),
    st.data(),
)
def test_random_buffers_decode_or_raise_our_error(random_buffer_tally: Tally, slots: int, words: int,
                                                  data: st.DataObject) -> None:
    values = data.draw(
        st.lists(
            st.one_of(
                st.integers(-(2**63), 2**63 - 1),
                st.integers(-3, 40),
                st.sampled_from([pack_event(i) for i in range(1, 11)] + [pack_event(0, 0xEE, 0xC0FFEE)]),
            ),
            min_size=slots * words,
            max_size=slots * words,
        )
    )
    meta = RankMeta(rank=7, slot_words=words, aic_cores=slots // 2, aiv_cores=slots - slots // 2)
    buffer = RankBuffer(Path("rank007.pt"), meta, np.array(values, dtype=np.int64).reshape(slots, words))
    try:
        decoded = decode_rank(buffer, point_map())
    except ProfilingInputError as exc:
        random_buffer_tally.count(2)
        assert exc.path == "rank007.pt"
        return
    except Exception:
        random_buffer_tally.count("crash")
        raise
    random_buffer_tally.count(0)
    for core in decoded.cores:
        assert (core.end >= core.start).all()
        assert core.start.size == core.label.size == core.depth.size


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 6 * 128 - 1), st.integers(-(2**63), 2**63 - 1))
def test_mutated_valid_buffer_never_crashes(position: int, value: int) -> None:
    buffer = rank_buffer(aic=2, aiv=4)
    buffer.data.reshape(-1)[position] = value
    try:
        decoded = decode_rank(buffer, point_map())
    except ProfilingInputError as exc:
        assert "another build" in exc.message
        return
    assert len(decoded.slots) == 6


@pytest.mark.slow  # 200 generated ranks through both nestings
@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(well_formed(), st.lists(st.tuples(st.sampled_from([1, -1]), st.integers(0, 3)),
                                                   max_size=12)), max_size=6))
def test_rank_wide_nesting_matches_per_core_nesting(cores: list[list[tuple[int, int]]]) -> None:
    """nest_segments (all cores at once) == nest on each core alone."""
    from optrace.runtime.decode import nest_segments

    kinds = np.array([k for core in cores for k, _ in core], dtype=np.int8)
    labels = np.array([lab for core in cores for _, lab in core], dtype=np.int32)
    segment = np.repeat(np.arange(len(cores)), [len(c) for c in cores]).astype(np.int64)
    together = nest_segments(kinds, labels, segment, max(len(cores), 1))
    offset = 0
    for index, core in enumerate(cores):
        alone = nest(kinds[offset : offset + len(core)], labels[offset : offset + len(core)])
        mine = together.segment == index
        np.testing.assert_array_equal(together.begin[mine] - offset, alone.begin)
        np.testing.assert_array_equal(together.end[mine], np.where(alone.end >= 0, alone.end + offset, -1))
        np.testing.assert_array_equal(together.depth[mine], alone.depth)
        np.testing.assert_array_equal(together.status[mine], alone.status)
        assert together.unmatched_e[index] == alone.unmatched_e
        offset += len(core)
