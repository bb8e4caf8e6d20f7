"""Read a ``.pftrace`` back with Perfetto's own protos and compare it with the JSON trace.

The writer (runtime/perfetto.py) encodes by hand; this reader uses only the official
message definitions (the ``perfetto`` package's ``perfetto_trace_pb2``, parsed by
``protobuf``), and applies the trace format's rules as the trace processor does:
incremental state per packet sequence (cleared by SEQ_INCREMENTAL_STATE_CLEARED),
TracePacketDefaults, interning tables, sequence-scoped incremental clocks with a unit,
clock snapshots to BOOTTIME, B/E pairing per track. The ``launch K`` slices (category
``optrace.launch``) are kept apart from the spans, in both formats.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb  # [test] installs it

SLICE_BEGIN, SLICE_END, INSTANT = 1, 2, 3
BOOTTIME = 6
LAUNCH = "optrace.launch"
SEQ_INCREMENTAL_STATE_CLEARED = 1


def signed(value: int) -> int:
    """A uint64 field read as int64 (as the trace processor does for timestamps)."""
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclass
class Track:
    uuid: int
    kind: str  # "process" | "thread" | "root"
    pid: int | None = None
    tid: int | None = None
    name: str = ""
    parent: int | None = None
    rank: int | None = None
    description: str = ""


@dataclass
class Span:
    name: str
    start_ns: int
    end_ns: int
    args: dict[str, Any]
    src: str | None
    order: int = 0  # the B's place among the trace's packets
    # TrackEvent flow fields of its B and E events: flows starting or going on here, ending here
    flow_ids: list[int] = field(default_factory=list)
    terminating_flow_ids: list[int] = field(default_factory=list)
    flow_ns: dict[int, int] = field(default_factory=dict)  # flow id -> time of the event carrying it


@dataclass
class Sequence:
    names: dict[int, str] = field(default_factory=dict)
    annotation_names: dict[int, str] = field(default_factory=dict)
    sources: dict[int, str] = field(default_factory=dict)
    categories: dict[int, str] = field(default_factory=dict)
    clock_id: int | None = None
    track: int | None = None
    unit: int | None = None
    incremental: bool = False
    snapshot_value: int | None = None
    snapshot_boot: int | None = None
    value: int = 0


@dataclass
class Parsed:
    packets: int
    tracks: dict[int, Track]
    spans: dict[int, list[Span]]
    instants: dict[int, list[tuple[str, int, dict[str, Any]]]]
    metadata: dict[str, Any]
    units: set[int]
    sequences: int
    launches: dict[int, list[Span]] = field(default_factory=dict)  # the launch slices, per track

    def track_name(self, uuid: int) -> tuple[str, str]:
        thread = self.tracks[uuid]
        assert thread.parent is not None
        return self.tracks[thread.parent].name, thread.name

    def by_name(self) -> dict[tuple[str, str], list[Span]]:
        return {self.track_name(uuid): spans for uuid, spans in self.spans.items()}

    def launches_by_name(self) -> dict[tuple[str, str], list[Span]]:
        return {self.track_name(uuid): spans for uuid, spans in self.launches.items()}

    def slices(self) -> dict[int, list[Span]]:
        """Per track, its spans and launch slices together, in B order."""
        out: dict[int, list[Span]] = {}
        for uuid in {*self.spans, *self.launches}:
            both = [*self.spans.get(uuid, []), *self.launches.get(uuid, [])]
            out[uuid] = sorted(both, key=lambda s: s.order)
        return out

    def threads_in_order(self, process: str) -> list[str]:
        threads = [t for t in self.tracks.values()
                   if t.kind == "thread" and t.parent is not None and self.tracks[t.parent].name == process]
        return [t.name for t in sorted(threads, key=lambda t: (t.rank, t.uuid))]


def _no_unknown_fields(message: Any, where: str) -> None:
    """Every byte was a field the protos know (the hand encoder used the right numbers)."""
    from google.protobuf import unknown_fields

    assert len(unknown_fields.UnknownFieldSet(message)) == 0, f"unknown fields in {where}"
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        items = value if descriptor.is_repeated else [value]
        for item in items:
            _no_unknown_fields(item, f"{where}.{descriptor.name}")


def read_pftrace(path: Path) -> Parsed:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    trace = pb.Trace()
    trace.ParseFromString(raw)
    assert trace.SerializeToString() == raw or len(trace.packet) > 0
    tracks: dict[int, Track] = {}
    states: dict[int, Sequence] = {}
    spans: dict[int, list[Span]] = defaultdict(list)
    # name, start, args, src, B's packet, its flow_ids, terminating_flow_ids, their times
    open_spans: dict[int, list[tuple[str, int, dict[str, Any], str | None, int, list[int], list[int],
                                     dict[int, int], bool]]] = defaultdict(list)
    launches: dict[int, list[Span]] = defaultdict(list)
    instants: dict[int, list[tuple[str, int, dict[str, Any]]]] = defaultdict(list)
    metadata: dict[str, Any] = {}
    units: set[int] = set()
    for number, packet in enumerate(trace.packet):
        _no_unknown_fields(packet, f"packet {number}")
        seq = packet.trusted_packet_sequence_id
        if packet.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED:
            assert seq, "incremental state on sequence 0"
            states[seq] = Sequence()
        state = states.get(seq)
        if packet.HasField("trace_packet_defaults"):
            assert state is not None, f"packet {number}: defaults before the state was cleared"
            defaults = packet.trace_packet_defaults
            state.clock_id = defaults.timestamp_clock_id
            state.track = defaults.track_event_defaults.track_uuid
        if packet.HasField("interned_data"):
            assert state is not None, f"packet {number}: interned data before the state was cleared"
            data = packet.interned_data
            for entry in data.event_names:
                assert entry.iid and entry.iid not in state.names
                state.names[entry.iid] = entry.name
            for entry in data.debug_annotation_names:
                assert entry.iid and entry.iid not in state.annotation_names
                state.annotation_names[entry.iid] = entry.name
            for entry in data.source_locations:
                assert entry.iid and entry.iid not in state.sources
                state.sources[entry.iid] = f"{entry.file_name}:{entry.line_number}"
            for entry in data.event_categories:
                assert entry.iid and entry.iid not in state.categories
                state.categories[entry.iid] = entry.name
        kind = packet.WhichOneof("data")
        if kind == "track_descriptor":
            d = packet.track_descriptor
            assert d.HasField("uuid") and d.uuid not in tracks, f"packet {number}: track uuid"
            if d.HasField("thread"):
                assert d.thread.HasField("pid") and d.thread.HasField("tid")
                assert d.parent_uuid in tracks and tracks[d.parent_uuid].pid == d.thread.pid
                tracks[d.uuid] = Track(d.uuid, "thread", d.thread.pid, d.thread.tid, d.thread.thread_name,
                                       d.parent_uuid, d.sibling_order_rank, d.description)
            elif d.HasField("process"):
                tracks[d.uuid] = Track(d.uuid, "process", d.process.pid, None, d.process.process_name,
                                       None, d.sibling_order_rank)
            else:
                assert d.uuid == 0 and d.process_ordering == 1 and d.thread_ordering == 1
                tracks[d.uuid] = Track(0, "root")
        elif kind == "clock_snapshot":
            assert state is not None
            clocks = {c.clock_id: c for c in packet.clock_snapshot.clocks}
            assert set(clocks) == {64, BOOTTIME}
            sequence_clock = clocks[64]
            state.unit = sequence_clock.unit_multiplier_ns or 1
            state.incremental = sequence_clock.is_incremental
            state.snapshot_value = state.value = sequence_clock.timestamp
            state.snapshot_boot = signed(clocks[BOOTTIME].timestamp)
            units.add(state.unit)
        elif kind == "track_event":
            assert state is not None and seq, f"packet {number}: event outside a sequence"
            assert packet.HasField("timestamp"), f"packet {number}: no timestamp"
            clock = packet.timestamp_clock_id or state.clock_id
            assert clock == 64 and state.snapshot_value is not None and state.unit is not None
            assert state.snapshot_boot is not None
            state.value = state.value + packet.timestamp if state.incremental else packet.timestamp
            ns = state.snapshot_boot + (state.value - state.snapshot_value) * state.unit
            event = packet.track_event
            track = event.track_uuid if event.HasField("track_uuid") else state.track
            assert track in tracks and tracks[track].kind == "thread", f"packet {number}: track {track}"
            args = {}
            for annotation in event.debug_annotations:
                name = state.annotation_names[annotation.name_iid]  # KeyError: not interned
                value = annotation.WhichOneof("value")
                args[name] = getattr(annotation, value)
            if event.type == SLICE_BEGIN:
                launch = [state.categories[iid] for iid in event.category_iids] == [LAUNCH]
                assert launch == event.HasField("name"), f"packet {number}: a launch slice's name is inline"
                name = event.name if launch else state.names[event.name_iid]
                src = state.sources[event.source_location_iid] if event.source_location_iid else None
                flows, terminating = list(event.flow_ids), list(event.terminating_flow_ids)
                times = {flow: ns for flow in [*flows, *terminating]}
                open_spans[track].append((name, ns, args, src, number, flows, terminating, times, launch))
            elif event.type == SLICE_END:
                assert open_spans[track], f"packet {number}: E without its B on track {track}"
                name, start, b_args, src, order, flows, terminating, times, launch = open_spans[track].pop()
                assert ns >= start, f"packet {number}: E before its B"
                times.update({flow: ns for flow in [*event.flow_ids, *event.terminating_flow_ids]})
                (launches if launch else spans)[track].append(Span(
                    name, start, ns, b_args, src, order, flows + list(event.flow_ids),
                    terminating + list(event.terminating_flow_ids), times))
            else:
                assert event.type == INSTANT
                assert not event.flow_ids and not event.terminating_flow_ids, f"packet {number}: instant flow"
                instants[track].append((event.name, ns, args))
        elif kind == "trace_attributes":
            for attribute in packet.trace_attributes.attribute:
                metadata[attribute.key] = json.loads(attribute.string_value)
        else:
            state_only = packet.HasField("interned_data") or packet.HasField("trace_packet_defaults")
            assert kind is None and state_only, f"packet {number}: unexpected {kind}"
    assert not any(open_spans.values()), "B without its E"
    for uuid in spans:  # spans came out in E order; the JSON trace lists them by their B
        spans[uuid].sort(key=lambda s: s.order)
    for uuid in launches:
        launches[uuid].sort(key=lambda s: s.order)
    return Parsed(len(trace.packet), tracks, dict(spans), dict(instants), metadata, units, len(states),
                  dict(launches))


JsonTracks = dict[tuple[str, str], list[dict[str, Any]]]


def read_json(path: Path, launches: JsonTracks | None = None) -> tuple[JsonTracks, list[dict[str, Any]],
                                                                     dict[str, Any]]:
    """Spans per (process, thread) name, instants, otherData; the launch slices into
    ``launches`` when given (left out otherwise)."""
    opener: Any = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        document = json.load(handle)
    processes: dict[Any, str] = {}
    threads: dict[tuple[Any, Any], str] = {}
    for e in document["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name":
            processes[e["pid"]] = e["args"]["name"]
        elif e["ph"] == "M" and e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    tracks: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    instants = []
    for e in document["traceEvents"]:
        if e["ph"] == "X" and e.get("cat") == LAUNCH:
            if launches is not None:
                launches.setdefault((processes[e["pid"]], threads[(e["pid"], e["tid"])]), []).append(e)
        elif e["ph"] == "X":
            tracks[(processes[e["pid"]], threads[(e["pid"], e["tid"])])].append(e)
        elif e["ph"] == "i":
            instants.append(e)
    return dict(tracks), instants, document["otherData"]


def same_spans(pftrace: Path, json_trace: Path, tick_ns: float | dict[str, float]) -> Parsed:
    """The .pftrace holds the JSON trace's spans: per track the same names in the same
    order, starts and durations within one tick (``tick_ns``, or per process name)."""
    parsed = read_pftrace(pftrace)
    json_launches: JsonTracks = {}
    expected, json_instants, other = read_json(json_trace, json_launches)
    got = parsed.by_name()
    assert set(got) == set(expected), (sorted(set(got) ^ set(expected)))[:5]
    got_launches = parsed.launches_by_name()
    assert set(got_launches) == set(json_launches), (sorted(set(got_launches) ^ set(json_launches)))[:5]
    for key, events in json_launches.items():
        tick = max(1.0, tick_ns if isinstance(tick_ns, float | int) else tick_ns[key[0]])
        slices = got_launches[key]
        assert [s.name for s in slices] == [e["name"] for e in events], key
        for span, event in zip(slices, events, strict=True):
            slack = tick + 1e-6 * abs(span.start_ns)
            assert abs(span.start_ns - event["ts"] * 1000) <= slack, (key, span, event)
            assert abs((span.end_ns - span.start_ns) - event["dur"] * 1000) <= tick, (key, span, event)
    for key, events in expected.items():
        # Both formats hold ns: a tick shorter than 1 ns is compared to the ns.
        tick = max(1.0, tick_ns if isinstance(tick_ns, float | int) else tick_ns[key[0]])
        spans = got[key]
        assert [s.name for s in spans] == [e["name"] for e in events], key
        for span, event in zip(spans, events, strict=True):
            slack = tick + 1e-6 * abs(span.start_ns)  # the JSON's float µs
            assert abs(span.start_ns - event["ts"] * 1000) <= slack, (key, span, event)
            assert abs((span.end_ns - span.start_ns) - event["dur"] * 1000) <= tick, (key, span, event)
            args = event["args"]
            if "index" in args:
                assert span.args.get("index") == args["index"], (key, span, event)
                assert span.args.get("extraId", 0) == args["extraId"], (key, span, event)
            else:
                assert "index" not in span.args and "extraId" not in span.args
            for flag in ("unclosed", "closed_by_parent"):
                assert span.args.get(flag, False) == args.get(flag, False), (key, flag)
            assert (span.src or "") == args["src"]
    by_track = {(parsed.track_name(uuid)): marks for uuid, marks in parsed.instants.items()}
    assert sum(len(v) for v in by_track.values()) == len(json_instants)
    for mark in json_instants:
        found = [m for marks in by_track.values() for m in marks if m[0] == mark["name"]]
        assert found and any(abs(ns - mark["ts"] * 1000) <= max(1.0, float(
            tick_ns if isinstance(tick_ns, float | int) else max(tick_ns.values()))) for _, ns, _ in found)
    meta = parsed.metadata["optrace"]
    assert meta["format"] == "optrace-perfetto" and meta["ranks"] == other["ranks"]
    assert meta["point_map_fingerprint"] == other["point_map_fingerprint"]
    return parsed
