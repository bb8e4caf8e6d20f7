"""Issue 14 §4/§5: traces, rank files, point maps and numbers made by someone else.

Every hostile variant ends as ``path: message`` with exit 2 — never exit 3, a traceback,
a hang on a FIFO, or a NaN in what is printed — for report, compare and inspect on JSON
and .pftrace, and every numeric option and metadata field is checked finite and in its
documented range (runtime/numbers.py)."""

from __future__ import annotations

import functools
import gzip
import itertools
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_in_thread import run_cli
from pftrace_check import read_pftrace
from rt_helpers import FP, LABELS, write_point_map

from optrace.runtime.demo import write_demo
from optrace.runtime.numbers import CLOCK_MHZ, NumberError, Range, check_number
from optrace.runtime.perfetto import SLICE_BEGIN, SLICE_END, bytes_field, packet, string_field, uint_field
from optrace.runtime.regular import BadJSON, TooLarge, parse_json, read_regular
from optrace.runtime.save import save_profiling_data
from optrace.runtime.synth import SlotWriter, new_buffer

# Fault injection with hostile and 40000-deep inputs: a fifth of the quick suite's time,
# so the full suite's (CI runs it; `pytest -m "not slow"` keeps to a quarter of it).
pytestmark = pytest.mark.slow

NAN_RE = re.compile(r"\b(?:nan|inf|-inf|infinity)\b", re.I)


# The CLI on a thread with a time limit (tests/cli_in_thread.py); 120 s here.
cli = functools.partial(run_cli, timeout=120)


def event(**fields: object) -> dict[str, object]:
    return {"ph": "X", "pid": 0, "tid": 0, "name": "processing", "ts": 1.0, "dur": 2.0, **fields}


def trace_text(events: list[object], other: object = None) -> str:
    document: dict[str, object] = {"traceEvents": events}
    if other is not None:
        document["otherData"] = other
    return json.dumps(document)


# Each: the file's text (JSON as someone else might write it), and a word of the message.
HOSTILE_JSON: dict[str, tuple[str, str]] = {
    "deep-nesting": ('{"traceEvents": [' + "[" * 100_000 + "]" * 100_000 + "]}", "nested too deeply"),
    "deep-objects": ('{"traceEvents": [' + '{"a":' * 50_000 + "1" + "}" * 50_000 + "]}",
                     "nested too deeply"),
    "huge-int-ts": (trace_text([event(ts=10**400)]).replace("1" + "0" * 400, "1" + "0" * 400), "digits"),
    "huge-int-4301-digits": (trace_text([]).replace("[]", "[" + "9" * 4301 + "]"), "digits"),
    "nan-ts": (trace_text([event()]).replace('"ts": 1.0', '"ts": NaN'), "NaN"),
    "infinity-dur": (trace_text([event()]).replace('"dur": 2.0', '"dur": Infinity'), "Infinity"),
    "minus-infinity": (trace_text([event()]).replace('"dur": 2.0', '"dur": -Infinity'), "Infinity"),
    "float-overflow": (trace_text([event()]).replace('"ts": 1.0', '"ts": 1e999'), "float range"),
    "nan-as-string": (trace_text([event(ts="nan")]), "malformed complete event"),
    "inf-as-string": (trace_text([event(dur="inf")]), "malformed complete event"),
    "huge-ts": (trace_text([event(ts=1e300)]), "malformed complete event"),
    "bool-ts": (trace_text([event(ts=True), event(ts=[1])]), "malformed complete event"),
    # an end before its start: totals and shares below zero, gains past 100 %
    "negative-dur": (trace_text([event(), event(dur=-4460.3)]), "malformed complete event"),
    "other-data-list": (trace_text([event()], other=[1, 2]), "otherData must be an object"),
    "ranks-clock-string": (trace_text([event()], other={"ranks": [{"clock_mhz": "fast"}]}), "clock_mhz"),
    "ranks-clock-zero": (trace_text([event()], other={"ranks": [{"clock_mhz": 0}]}), "clock_mhz"),
    "ranks-clock-huge": (trace_text([event()], other={"ranks": [{"clock_mhz": 1e300}]}), "clock_mhz"),
    "ranks-clock-negative": (trace_text([event()], other={"ranks": [{"clock_mhz": -50}]}), "clock_mhz"),
    "lone-surrogate-label": (trace_text([event(name="\ud800")]), "lone surrogate"),
    "lone-low-surrogate-thread": (trace_text([
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "core \udc00"}}, event()]),
        "lone surrogate"),
    "nul-in-label": (trace_text([event(name="proc\u0000essing")]), "NUL"),
    "raw-nul-byte": (trace_text([event()]).replace('"processing"', '"proc\x00essing"'),
                     "not a readable JSON"),
    "not-utf8": (trace_text([event()]).replace('"processing"', '"\udcff"'), "not"),
    "traceEvents-object": ('{"traceEvents": {"a": 1}}', "not a Chrome trace"),
    "top-level-list": ("[1, 2, 3]", "not a Chrome trace"),
    "empty-file": ("", "not a readable JSON trace"),
}


def write_hostile(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    return path


def assert_refused(code: int, out: str, path: Path, word: str) -> None:
    assert "Traceback" not in out, out[-2000:]
    assert code == 2, f"exit {code}:\n{out[-2000:]}"
    assert f"{path}: " in out and word in out, out[-2000:]


@pytest.mark.parametrize("case", list(HOSTILE_JSON))
@pytest.mark.parametrize("command", ["report", "compare", "inspect"])
def test_hostile_json_traces_are_refused_with_their_path(tmp_path: Path, case: str, command: str) -> None:
    text, word = HOSTILE_JSON[case]
    path = write_hostile(tmp_path / "trace.json", text)
    args = [command, str(path)] + ([str(path)] if command == "compare" else [])
    code, out = cli(*args)
    assert_refused(code, out, path, word)


@pytest.mark.parametrize("case", ["nan-ts", "lone-surrogate-label", "deep-nesting"])
def test_hostile_gzipped_json_is_refused_too(tmp_path: Path, case: str) -> None:
    text, word = HOSTILE_JSON[case]
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(text.encode("utf-8", "surrogatepass")))
    assert_refused(*cli("report", str(path)), path, word)


@pytest.fixture(scope="module")
def pftrace(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    tmp = tmp_path_factory.mktemp("pf")
    made = write_demo(tmp / "prof", ranks=1, launches=2, aic=1, seed=5, speedup=0.0)
    out = tmp / "trace.pftrace"
    code, text = cli("collect", str(made.directory), "-o", str(out))
    assert code == 0, text
    return out.read_bytes()


def _metadata_swapped(data: bytes, replacement: bytes) -> bytes:
    """The trace with its JSON metadata string replaced by `replacement` (same length,
    padded with spaces, so no length prefix changes)."""
    # The metadata is JSON with sorted keys: it opens with "alignment" (collect's rank
    # placement), or with "format" in a trace from before it.
    start = min(i for i in (data.find(b'{"alignment"'), data.find(b'{"format"')) if i >= 0)
    depth, end = 0, start
    for end in range(start, len(data)):
        depth += {ord("{"): 1, ord("}"): -1}.get(data[end], 0)
        if depth == 0:
            break
    original = data[start:end + 1]
    assert len(replacement) <= len(original)
    return data[:start] + replacement.ljust(len(original)) + data[end + 1:]


PFTRACE_HOSTILE: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "truncated": (lambda d: d[: len(d) // 2], "not a readable Perfetto trace"),
    "garbage": (lambda d: b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" + d[11:], "not a readable"),
    "metadata-nan": (lambda d: _metadata_swapped(d, b'{"format": "optrace-perfetto", "x": NaN}'), "NaN"),
    "metadata-deep": (lambda d: _metadata_swapped(d, b"[" * 20 + b"]" * 20), ""),
    "metadata-clock-inf-string": (lambda d: _metadata_swapped(
        d, b'{"format": "optrace-perfetto", "ranks": [{"clock_mhz": "inf"}]}'), "clock_mhz"),
    "metadata-list": (lambda d: _metadata_swapped(d, b"[1, 2]"), ""),
    "gzip-garbage": (lambda d: b"\x1f\x8b" + d[2:100], "not a readable"),
}


@pytest.mark.parametrize("case", list(PFTRACE_HOSTILE))
@pytest.mark.parametrize("command", ["report", "compare", "inspect"])
def test_hostile_pftrace_is_refused_or_read_never_a_crash(
    tmp_path: Path, pftrace: bytes, case: str, command: str
) -> None:
    mutate, word = PFTRACE_HOSTILE[case]
    path = tmp_path / "trace.pftrace"
    path.write_bytes(mutate(pftrace))
    args = [command, str(path)] + ([str(path)] if command == "compare" else [])
    code, out = cli(*args)
    assert "Traceback" not in out and code in (0, 2), f"exit {code}:\n{out[-2000:]}"
    if code == 0:  # read: no NaN or infinity made it into what is shown
        assert not NAN_RE.search(out), out
    if word:  # a variant that must be refused
        assert_refused(code, out, path, word)


# ------------------------------------------------ .pftrace built by hand, field by field
#
# Built with collect's own field encoders (runtime/perfetto.py): a process and a thread
# track, then SLICE_BEGIN / SLICE_END track events. Each variant breaks one thing.

PROCESS, THREAD = 100, 101
U64 = (1 << 64) - 1
SURROGATE = "\ud800".encode("utf-8", "surrogatepass")  # ED A0 80: a lone surrogate's "UTF-8"
u, b = uint_field, bytes_field


def _descriptor(*fields: bytes) -> bytes:
    return packet(b(60, b"".join(fields)))


def _process(uuid: int = PROCESS, pid: int = 1, name: bytes = b"Rank 0") -> bytes:
    return _descriptor(u(1, uuid), b(3, u(1, pid) + b(6, name)))


def _thread(uuid: int = THREAD, parent: int = PROCESS, name: bytes = b"AIC 0") -> bytes:
    return _descriptor(u(1, uuid), u(5, parent), b(4, u(1, 1) + u(2, 2) + b(5, name)))


def _body(kind: int, name: bytes | None = None, track: int = THREAD, iid: int | None = None) -> bytes:
    """A TrackEvent: its type, track and name (inline, or an interned id)."""
    return (u(9, kind) + u(11, track) + (b(23, name) if name is not None else b"")
            + (u(10, iid) if iid is not None else b""))


def _event(ts: int, body: bytes, *more: bytes) -> bytes:
    """A packet of sequence 1 holding one TrackEvent."""
    return packet(u(8, ts), u(10, 1), *more, b(11, body))


def _slice(start: int, end: int, name: bytes = b"processing") -> bytes:
    return _event(start, _body(SLICE_BEGIN, name)) + _event(end, _body(SLICE_END))


def _pf(*, process: bytes = b"Rank 0", thread: bytes = b"AIC 0", label: bytes = b"processing",
        tail: bytes = b"") -> bytes:
    """A well-formed trace of two slices, with its names replaced and `tail` appended."""
    return (_process(name=process) + _thread(name=thread) + _slice(1000, 2000, label)
            + _slice(3000, 5000, label) + tail)


def _interned(name: bytes, iid: int = 7) -> bytes:
    """InternedData of sequence 1: event name `iid` is `name`."""
    return packet(u(10, 1), b(12, b(2, u(1, iid) + b(2, name))))


def _attribute(text: bytes) -> bytes:
    """The `optrace` trace attribute (collect's metadata) holding `text`."""
    return packet(b(126, b(1, string_field(1, "optrace") + b(3, text))))


def _nested(depth: int, field: int, inner: bytes = b"") -> bytes:
    """`depth` messages each holding the next as `field` (built inside out: no recursion)."""
    for _ in range(depth):
        inner = b(field, inner)
    return inner


def _clocked(unit: int, stamps: list[int]) -> bytes:
    """Slices on a sequence clock (id 64) whose snapshot says `unit` ns a tick, incremental."""
    clock = b(6, b(1, u(1, 64) + u(2, 0) + u(3, 1) + u(4, unit)) + b(1, u(1, 6) + u(2, 0)))
    kinds = [SLICE_BEGIN, SLICE_END] * len(stamps)
    events = b"".join(_event(stamp, _body(kind, b"processing"), u(58, 64))
                      for stamp, kind in zip(stamps, kinds[: len(stamps)], strict=True))
    return _process() + _thread() + packet(u(10, 1), clock) + events


def _deep_slices(depth: int) -> bytes:
    begins = b"".join(_event(10 + i, _body(SLICE_BEGIN, b"processing")) for i in range(depth))
    ends = b"".join(_event(10 * depth - i, _body(SLICE_END)) for i in range(depth))
    return _process() + _thread() + begins + ends


# Each: the trace's bytes, and a word of the message (exit 2 naming the file).
PFTRACE_REFUSED: dict[str, tuple[bytes, str]] = {
    # huge integers
    "ts-int64-max": (_process() + _thread() + _slice(1000, (1 << 63) - 1), "is past 1e+18 ns"),
    "ts-2e18": (_process() + _thread() + _slice(2 * 10**18, 2 * 10**18 + 5), "is past 1e+18 ns"),
    "clock-unit-u64-max": (_clocked(U64, [1, 2]), "is past 1e+18 ns"),
    "clock-increments-sum-past": (_clocked(1, [1 << 62] * 4), "is past 1e+18 ns"),
    # NUL and lone surrogates in names and labels
    "nul-label": (_pf(label=b"proc\x00essing"), "label 'proc\\x00essing' holds a NUL character"),
    "nul-thread-name": (_pf(thread=b"AIC\x000"), "track name 'Rank 0 / AIC\\x000' holds a NUL character"),
    "nul-process-name": (_pf(process=b"Rank\x000"), "holds a NUL character"),
    "nul-interned-name": (_process() + _thread() + _interned(b"a\x00b")
                          + _event(10, _body(SLICE_BEGIN, iid=7)) + _event(20, _body(SLICE_END)),
                          "holds a NUL character"),
    "surrogate-label": (_pf(label=SURROGATE + b"processing"), "is not UTF-8"),
    "surrogate-thread-name": (_pf(thread=b"AIC " + SURROGATE), "is not UTF-8"),
    "surrogate-process-name": (_pf(process=SURROGATE), "is not UTF-8"),
    "surrogate-interned-name": (_pf(tail=_interned(SURROGATE)), "is not UTF-8"),
    "surrogate-metadata-bytes": (_pf(tail=_attribute(b'{"f": "' + SURROGATE + b'"}')), "is not UTF-8"),
    "latin1-label": (_pf(label=b"caf\xe9"), "is not UTF-8"),
    # the metadata (collect's JSON in a trace attribute): as strict as a JSON trace
    "metadata-5000-deep": (_pf(tail=_attribute(b"[" * 5000 + b"]" * 5000)), "nested too deeply"),
    "metadata-401-digit-int": (_pf(tail=_attribute(b"{\"format\": 1" + b"0" * 400 + b"}")),
                               "integer of 401 digits"),
    "metadata-infinity": (_pf(tail=_attribute(b'{"ranks": [{"clock_mhz": Infinity}]}')), "Infinity"),
    # wrong-typed fields (a field the reader uses, of another wire type)
    "timestamp-as-bytes": (_pf(tail=packet(b(8, b"\x01\x02"), b(11, u(9, 3)))),
                           "TracePacket field 8 is bytes, not a varint"),
    "sequence-id-as-bytes": (_pf(tail=packet(u(8, 1), b(10, b"x"))), "TracePacket field 10 is bytes"),
    "track-event-as-varint": (_pf(tail=packet(u(8, 1), u(11, 5))),
                              "TracePacket field 11 is a varint, not bytes"),
    "descriptor-as-varint": (_pf(tail=packet(u(60, 5))), "TracePacket field 60 is a varint"),
    "interned-as-varint": (_pf(tail=packet(u(12, 5))), "TracePacket field 12 is a varint"),
    "defaults-track-as-varint": (_pf(tail=packet(b(59, u(11, 7)))),
                                 "TracePacketDefaults field 11 is a varint"),
    "clock-as-varint": (_pf(tail=packet(b(6, u(1, 7)))), "ClockSnapshot field 1 is a varint"),
    "attribute-as-varint": (_pf(tail=packet(b(126, u(1, 7)))), "trace attributes field 1 is a varint"),
    "event-type-as-bytes": (_pf(tail=_event(1, b(9, b"\x01"))), "TrackEvent field 9 is bytes, not a varint"),
    "event-name-as-varint": (_pf(tail=_event(1, u(9, 3) + u(23, 9))),
                             "TrackEvent field 23 is a varint, not bytes"),
    "event-track-as-fixed64": (_pf(tail=_event(1, b"\x59" + b"\x00" * 8)),
                               "TrackEvent field 11 is a fixed64"),
    "process-pid-as-bytes": (_pf(tail=_descriptor(u(1, 5), b(3, b(1, b"x")))),
                             "ProcessDescriptor field 1 is bytes"),
    "thread-name-as-varint": (_pf(tail=_descriptor(u(1, 6), b(4, u(5, 3)))),
                              "ThreadDescriptor field 5 is a varint"),
    # truncated varints and lengths
    "packet-length-cut": (_pf() + b"\x0a\x85", "varint runs past the end"),
    "packet-length-past-end": (_pf() + b"\x0a\x40\x08", "packet runs past the end of the file"),
    "event-key-at-end": (_pf(tail=_event(5, b"\x48")), "runs past"),
    "event-varint-cut": (_pf(tail=_event(5, b"\x48\x81")), "runs past"),
    "event-varint-cut-mid-file": (_process() + _thread() + _event(5, b"\x48\x81\x81") + _pf(), "runs past"),
    "event-string-past-event": (_pf(tail=_event(5, b"\xba\x01\x05ab")),
                                "a track event's field runs past the event"),
    "event-fixed32-cut": (_pf(tail=_event(5, b"\x25\x00")), "runs past"),
    "varint-11-bytes": (_pf(tail=packet(b"\x40" + b"\xff" * 10 + b"\x01")), "varint longer than 10 bytes"),
    "top-level-field-past-end": (_pf() + b"\x12\xff\x01abc", "field runs past the end of the file"),
    "nested-length-past-message": (_pf(tail=packet(b(60, b"\x12\x09ab"))), "field runs past its message"),
}

# Each: the bytes, and the spans inspect must count (read: exit 0, no NaN anywhere).
PFTRACE_READ: dict[str, tuple[bytes, int]] = {
    # 40,000 slices inside each other: deeper than an int16 (report, compare, inspect and
    # the HTML page were exit 3 past 32,767); iterative everywhere, no recursion limit.
    "slices-40000-deep": (_deep_slices(40_000), 40_000),
    # 3000 messages inside each other in fields the reader does not use: skipped by length.
    "unknown-message-3000-deep": (_pf(tail=_event(6000, _body(3, b"x") + _nested(3000, 99))), 2),
    "unknown-top-level-3000-deep": (_pf() + _nested(3000, 2), 2),
    "descriptor-unknown-3000-deep": (_pf(tail=_descriptor(u(1, 7), _nested(3000, 30))), 2),
    # huge integers where any value is fine: uuids, pids, interned ids, sequence ids
    "uuid-u64-max": (_process(uuid=U64) + _thread(uuid=U64 - 1, parent=U64)
                     + _event(10, _body(SLICE_BEGIN, b"processing", track=U64 - 1))
                     + _event(20, _body(SLICE_END, track=U64 - 1)), 1),
    "pid-u64-max": (_process(pid=U64) + _thread() + _slice(10, 20), 1),
    "name-iid-u64-max": (_pf(tail=_event(6000, _body(3, iid=U64))), 2),
    "sequence-id-u64-max": (_process() + _thread()
                            + packet(u(8, 10), u(10, U64), b(11, _body(SLICE_BEGIN, b"processing")))
                            + _event(20, _body(SLICE_END)), 1),
}


def _pf_args(command: str, path: Path) -> list[str]:
    return [command, str(path)] + ([str(path)] if command == "compare" else [])


@pytest.mark.parametrize("case", list(PFTRACE_REFUSED))
@pytest.mark.parametrize("command", ["report", "compare", "inspect"])
def test_hand_built_hostile_pftrace_is_refused_with_its_path(tmp_path: Path, case: str, command: str) -> None:
    data, word = PFTRACE_REFUSED[case]
    path = tmp_path / "trace.pftrace"
    path.write_bytes(data)
    code, out = cli(*_pf_args(command, path))
    assert_refused(code, out, path, word)
    assert not NAN_RE.search(out.replace(word, "")), out  # no NaN but in naming what was refused


@pytest.mark.parametrize("case", list(PFTRACE_READ))
@pytest.mark.parametrize("command", ["report", "compare", "inspect", "report-html"])
def test_deep_or_huge_but_well_formed_pftrace_is_read(tmp_path: Path, case: str, command: str) -> None:
    data, spans = PFTRACE_READ[case]
    path = tmp_path / "trace.pftrace"
    path.write_bytes(data)
    html = tmp_path / "r.html"
    args = ["report", str(path), "--html", str(html)] if command == "report-html" else _pf_args(command, path)
    code, out = cli(*args)
    assert "Traceback" not in out and code == 0, f"exit {code}:\n{out[-3000:]}"
    assert not NAN_RE.search(out), out
    if command == "inspect":
        assert f" {spans} spans" in out, out
    if command == "report-html":
        assert html.stat().st_size > 0


@pytest.mark.parametrize("command", ["report", "compare", "inspect"])
def test_a_json_trace_40000_slices_deep_is_read(tmp_path: Path, command: str) -> None:
    """Complete events inside each other, deeper than an int16 (exit 3 past 32,767)."""
    depth = 40_000
    path = write_hostile(tmp_path / "trace.json", trace_text(
        [event(ts=float(i), dur=float(2 * (depth - i))) for i in range(depth)]))
    code, out = cli(*_pf_args(command, path))
    assert "Traceback" not in out and code == 0 and not NAN_RE.search(out), f"exit {code}:\n{out[-3000:]}"


def _deep_rank(directory: Path, depth: int, closed: bool) -> None:
    """One core that opened `processing` `depth` times (and closed it as often, or never:
    a B in a loop whose E was forgotten)."""
    data = new_buffer(1, 4 * depth + 64)
    writer = SlotWriter(data[0], 1000, fingerprint=FP)
    begin, end = LABELS["processing"]
    for i in range(depth):
        writer.record(begin, 1000 + i)
    for i in range(depth if closed else 0):
        writer.record(end, 1000 + depth + i)
    save_profiling_data(data, 0, directory, aic_cores=1, barrier=True)
    write_point_map(directory)


@pytest.mark.parametrize("closed", [True, False], ids=["closed", "never-closed"])
def test_a_rank_file_nesting_40000_deep_is_collected(tmp_path: Path, closed: bool) -> None:
    """Depths past an int16 (collect and report were exit 3): the spans nest as recorded,
    in the JSON trace and in the .pftrace as Perfetto's own protos read it."""
    depth = 40_000
    prof = tmp_path / "prof"
    _deep_rank(prof, depth, closed)
    for name in ("t.json", "t.pftrace"):
        code, out = cli("collect", str(prof), "-o", str(tmp_path / name))
        # never closed: the B records are closed at the core's last timestamp and flagged (exit 1)
        assert "Traceback" not in out and code == (0 if closed else 1), out
    spans = sorted(read_pftrace(tmp_path / "t.pftrace").by_name()[("Rank 0", "AIC 0")],
                   key=lambda s: (s.start_ns, -s.end_ns))
    assert len(spans) == depth
    assert all(a.start_ns <= b.start_ns and b.end_ns <= a.end_ns for a, b in itertools.pairwise(spans))
    for source in (prof, tmp_path / "t.json", tmp_path / "t.pftrace"):
        code, out = cli("report", str(source))
        assert "Traceback" not in out and code == 0 and re.search(rf"processing\s+{depth}\s", out), out


def write_json_bytes(other: dict[str, object]) -> bytes:
    """A one-span JSON trace with `other` as its otherData (escaped as json.dumps does)."""
    return trace_text([event()], other=other).encode()


def _drop_marker(count: str) -> str:
    return f"optrace: {count} records dropped (slot full)"


# What inspect prints from a trace's instants and metadata (report and compare use neither).
INSPECT_REFUSED: dict[str, tuple[bytes, str]] = {
    # int() of more than 4300 digits raised ValueError: exit 3
    "json-drop-count-5000-digits": (trace_text([event(), {"ph": "i", "pid": 0, "tid": 0, "ts": 1.0,
                                                          "name": _drop_marker("9" * 5000)}]).encode(),
                                    "a count of 5000 digits (at most 20)"),
    "json-drop-count-21-digits": (trace_text([event(), {"ph": "i", "pid": 0, "tid": 0, "ts": 1.0,
                                                        "name": _drop_marker("1" + "0" * 20)}]).encode(),
                                  "a count of 21 digits"),
    "pftrace-drop-count-5000-digits": (_pf(tail=_event(6000, _body(3, _drop_marker("9" * 5000).encode()))),
                                       "a count of 5000 digits"),
    # a lone surrogate in the format stdout cannot print: exit 3 in the text output
    "json-format-lone-surrogate": (write_json_bytes({"format": "\ud800"}), "holds a lone surrogate"),
    "json-format-nul": (write_json_bytes({"format": "optrace\u0000"}), "holds a NUL character"),
    "json-format-a-list": (write_json_bytes({"format": [1, 2]}), "metadata 'format' must be a string"),
    "pftrace-format-lone-surrogate": (_pf(tail=_attribute(b'{"format": "\\ud800"}')),
                                      "holds a lone surrogate"),
    "pftrace-format-number": (_pf(tail=_attribute(b'{"format": 123456789012345678901234}')),
                              "metadata 'format' must be a string"),
}


@pytest.mark.parametrize("case", list(INSPECT_REFUSED))
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_what_inspect_prints_of_a_trace_is_checked(tmp_path: Path, case: str, fmt: str) -> None:
    data, word = INSPECT_REFUSED[case]
    path = tmp_path / ("trace.pftrace" if case.startswith("pftrace") else "trace.json")
    path.write_bytes(data)
    assert_refused(*cli("inspect", str(path), "--format", fmt), path, word)
    if "drop-count-21" in case:  # one digit less is a count: read
        path.write_bytes(data.replace(b"1" + b"0" * 20, b"1" + b"0" * 19))
        code, out = cli("inspect", str(path), "--format", fmt)
        assert code == 0 and "10000000000000000000" in out, out


@pytest.mark.parametrize("command", ["report", "compare", "inspect"])
@pytest.mark.parametrize("name", ["trace.json", "trace.pftrace"])
def test_a_fifo_where_a_trace_is_expected_is_not_read(tmp_path: Path, command: str, name: str) -> None:
    path = tmp_path / name
    os.mkfifo(path)
    args = [command, str(path)] + ([str(path)] if command == "compare" else [])
    code, out = cli(*args, timeout=60)
    assert code == 2 and "Traceback" not in out and str(path) in out, out


@pytest.fixture
def profiling(tmp_path: Path) -> Path:
    return write_demo(tmp_path / "prof", ranks=2, launches=2, aic=1, seed=3, speedup=0.0).directory


@pytest.mark.parametrize("victim", ["rank", "point_map"])
def test_a_fifo_rank_file_or_point_map_is_named_not_read(
    profiling: Path, tmp_path: Path, victim: str
) -> None:
    path = sorted(profiling.glob("rank*.pt"))[0] if victim == "rank" else profiling / "point_map.json"
    path.unlink()
    os.mkfifo(path)
    commands = [["collect", str(profiling), "-o", str(tmp_path / "t.json")], ["report", str(profiling)]]
    if victim == "rank":  # inspect reads rank files only
        commands.append(["inspect", str(profiling)])
    for args in commands:
        code, out = cli(*args, timeout=60)
        # report goes on with the readable ranks (exit 0) when a rank file is bad, naming it
        assert "Traceback" not in out and code in (0, 1, 2), f"{args}: exit {code}\n{out}"
        assert f"{path}: " in out and "not a regular file" in out, out


@pytest.mark.parametrize("option", [
    ["--clock-mhz", "nan"], ["--clock-mhz", "inf"], ["--clock-mhz", "-5"], ["--clock-mhz", "0"],
    ["--clock-mhz", "1e9"], ["--clock-mhz", "1e-300"], ["--clock-mhz", "0.0001"],
    ["--rank-offsets", "0=nan"], ["--rank-offsets", "0=inf"],
    ["--rank-offsets", "0=1e400"], ["--rank-offsets", "0=1e13"], ["--rank-offsets", "99999999999=1"],
    ["--rank-offsets", "-1=1"], ["--split", "99999999999999G"], ["--split", "10"],
    # --align LABEL@N: N through check_number, an integer in [1, 2^24]
    ["--align", "processing@0"], ["--align", "processing@-1"], ["--align", "processing@16777217"],
    ["--align", "processing@99999999999999999999999"], ["--align", "processing@" + "9" * 5000],
    ["--align", "processing@x"], ["--align", "processing@"], ["--align", "processing@2.5"],
    ["--align", "processing@1e400"], ["--align", "processing@inf"], ["--align", "processing@nan"],
])
def test_collect_numeric_options_are_finite_and_in_range(
    profiling: Path, tmp_path: Path, option: list[str]
) -> None:
    out_path = tmp_path / "t.json"
    code, out = cli("collect", str(profiling), "-o", str(out_path), *option)
    assert code == 2 and "Traceback" not in out and option[0] in out, out
    if option[0] == "--align":
        assert f"--align {option[1]!r}: N must be an integer in [1, 16777216], not " in out, out
    assert not out_path.exists()


@pytest.mark.parametrize("n", ["1", "+1", " 1 "])
def test_collect_align_takes_an_occurrence_in_range(profiling: Path, tmp_path: Path, n: str) -> None:
    code, out = cli("collect", str(profiling), "-o", str(tmp_path / "t.json"), "--align", f"processing@{n}")
    assert code == 0 and "label processing@1" in out, out


@pytest.mark.parametrize("option", [["--clock-mhz", "nan"], ["--clock-mhz", "inf"], ["--clock-mhz", "0"],
                                    ["--top", "-1"]])
def test_report_numeric_options_are_checked(profiling: Path, option: list[str]) -> None:
    code, out = cli("report", str(profiling), *option)
    assert code == 2 and option[0] in out and "Traceback" not in out, out


@pytest.mark.parametrize("option", [["--expect", "nan"], ["--expect", "inf"], ["--expect", "1e400"],
                                    ["--fail-on-regression", "nan"], ["--fail-on-regression", "-1"],
                                    ["--fail-on-regression", "inf"], ["--fail-on-regression", "+inf"],
                                    ["--fail-on-regression", "-inf"], ["--fail-on-regression", "1000.001"],
                                    ["--fail-on-regression", "1e9"]])
def test_compare_numeric_options_are_checked(profiling: Path, option: list[str]) -> None:
    code, out = cli("compare", str(profiling), str(profiling), *option)
    assert code == 2 and option[0] in out and "Traceback" not in out, out
    bounds = "[0, 1000] %" if option[0] == "--fail-on-regression" else "[-100, 100] %"
    assert f"{option[0]} must be a finite number in {bounds}, not " in out, out


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 0.0, 1e300, 1e-300])
def test_a_rank_files_clock_metadata_is_checked(profiling: Path, tmp_path: Path, value: float) -> None:
    from optrace.runtime.pt_reader import load_pt
    from optrace.runtime.pt_writer import write_pt

    rank = sorted(profiling.glob("rank*.pt"))[0]
    loaded = load_pt(rank)
    loaded["meta"]["clock_mhz"] = value
    with open(rank, "wb") as handle:
        write_pt(loaded, handle)
    code, out = cli("collect", str(profiling), "-o", str(tmp_path / "t.json"))
    assert "Traceback" not in out and code in (1, 2) and f"{rank}: " in out and "clock_mhz" in out, out
    code, out = cli("report", str(profiling))
    assert "Traceback" not in out and not NAN_RE.search(out), out


@pytest.mark.parametrize("text", ['{"format_version": 1, "points": {"1": {"label": "x", "line": NaN}}}',
                                  '{"points": ' + "[" * 5000 + "]" * 5000 + "}",
                                  '{"format_version": 1, "fingerprint": 1' + "0" * 500 + ', "points": {}}'])
def test_a_hostile_point_map_is_named(profiling: Path, tmp_path: Path, text: str) -> None:
    (profiling / "point_map.json").write_text(text)
    code, out = cli("collect", str(profiling), "-o", str(tmp_path / "t.json"))
    assert code == 2 and "Traceback" not in out and f"{profiling / 'point_map.json'}: " in out, out


# ------------------------------------------------------------------ the building blocks


def test_check_number_refuses_what_is_not_a_finite_number_in_range() -> None:
    bounds = Range(0, 10, integer=True)
    for bad in (float("nan"), float("inf"), -1, 11, 2.5, True, "3", None, 10**400):
        with pytest.raises(NumberError, match="--x must be an integer in"):
            check_number("--x", bad, bounds)
    assert check_number("--x", 10, bounds) == 10.0
    for slow in (0, 1e-300, 0.0009):
        with pytest.raises(NumberError, match=r"in \[0.001, 100000\] MHz"):
            check_number("--clock-mhz", slow, CLOCK_MHZ)


def test_parse_json_is_strict() -> None:
    for text in ("NaN", "[Infinity]", "[-Infinity]", "[1e999]", "[" + "1" * 25 + "]", "[" * 10_000):
        with pytest.raises(BadJSON):
            parse_json(text)
    assert parse_json('{"a": [1, 2.5, "\\u00e9"]}') == {"a": [1, 2.5, "é"]}


def test_read_regular_refuses_what_is_not_a_regular_file_or_too_big(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.mkfifo(tmp_path / "fifo")
    for path in (tmp_path / "fifo", tmp_path, Path("/dev/null")):
        with pytest.raises(OSError, match="not a regular file"):
            read_regular(path)
    big = tmp_path / "big.h"
    big.write_bytes(b"x" * 5000)
    config = tmp_path / "config" / "optrace" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[limits]\nsource_bytes = 4096\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    with pytest.raises(TooLarge, match="past the 4096-byte bound for a source file"):
        read_regular(big)
    config.write_text("[limits]\nsource_bytes = -1\n")  # nonsense is ignored: the default holds
    os.utime(config, (1, 1))
    assert read_regular(big) == b"x" * 5000
