"""`collect --merge TRACE_VIEW.json`: the device tracks inside a framework
trace. The framework traces here are small ones written for these tests from the Chrome
Trace Event / Kineto format (a `traceEvents` list of `ph` X / M / s / f events, µs
timestamps; torch_npu's `trace_view.json` writes `ts` as strings and a device process
named "Ascend Hardware"), not copies of real files. The rank files are generated
(runtime/synth.py), with host anchors on a known clock: true tick 0 is wall clock
1.7e18 ns + 1e12 ns.
"""

from __future__ import annotations

import gzip
import json
import os
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pftrace_check import read_pftrace
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine.names import op_key as engine_op_key
from optrace.runtime.merge import DEVICE_TID_BASE, FLOW_ID_LIMIT, op_key, same_op
from optrace.runtime.save import reset_launch_counters
from optrace.runtime.synth import ClusterRun, write_ranks

TICK_US = Decimal("0.02")  # 50 MHz
ZERO_US = Decimal(1_700_000_000 * 10**6 + 10**9)  # true tick 0 on the wall clock, µs
HOST_PID, DEVICE_PID = 4242, 2_000_001  # torch_npu-like pids
BIG_FLOW = (1 << 60) + 7  # an id a double cannot hold


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    reset_launch_counters()


def invoke(*args: object) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def kernel(run: ClusterRun, rank: int, name: str = "MoeDistributeDispatch", lead: str = "0.500",
           tail: str = "0.700") -> dict[str, Any]:
    """A device kernel slice around a generated launch, ts as a string like torch_npu's."""
    start = ZERO_US + run.starts[rank] * TICK_US - Decimal(lead)
    end = ZERO_US + run.ends[rank] * TICK_US + Decimal(tail)
    return {"ph": "X", "name": name, "pid": DEVICE_PID, "tid": 7, "ts": str(start), "dur": str(end - start),
            "args": {"Task Type": "MIX_AIC", "Stream Id": 7}}


def framework_trace(path: Path, kernels: list[dict[str, Any]], rank: int | None = None,
                    as_list: bool = False) -> Path:
    """A host op calling aclnn, the device's kernels, a flow between them, metadata."""
    events: list[dict[str, Any]] = [
        # Kineto gives metadata a ts of 0 (or the trace's start): not the origin of the axis.
        {"ph": "M", "name": "process_name", "pid": HOST_PID, "tid": 0, "ts": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_name", "pid": DEVICE_PID, "tid": 0, "args": {"name": "Ascend Hardware"}},
        {"ph": "M", "name": "thread_name", "pid": DEVICE_PID, "tid": 7, "args": {"name": "Stream 7"}},
    ]
    for n, k in enumerate(kernels):
        launch_ts = Decimal(k["ts"]) - 30
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "npu::moe_distribute_dispatch", "pid": HOST_PID, "tid": 1,
             "ts": str(launch_ts), "dur": "25.125"},
            # The host side's aclnn call has the op's name too: not a launch on the device.
            {"ph": "X", "cat": "cann", "name": "aclnnMoeDistributeDispatch", "pid": HOST_PID, "tid": 1,
             "ts": str(launch_ts + 1), "dur": "20"},
            {"ph": "s", "cat": "async_npu", "name": "launch", "id": str(BIG_FLOW + n), "pid": HOST_PID,
             "tid": 1, "ts": str(launch_ts + 2)},
            {"ph": "f", "bp": "e", "cat": "async_npu", "name": "launch", "id": str(BIG_FLOW + n),
             "pid": DEVICE_PID, "tid": 7, "ts": k["ts"]},
            k,
        ]
    document: Any = events if as_list else {"traceEvents": events, "displayTimeUnit": "us"}
    if rank is not None and not as_list:
        document["distributedInfo"] = {"backend": "hccl", "rank": rank, "world_size": 2}
    path.write_text(json.dumps(document))
    return path


def device_spans(document: dict[str, Any], launches: bool = False) -> dict[str, list[dict[str, Any]]]:
    """The device's spans in the merged trace, per launch file (with its launch slices:
    ``launches``)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in document["traceEvents"]:
        if event["ph"] == "X" and isinstance(event.get("tid"), int) and event["tid"] >= DEVICE_TID_BASE \
                and (launches or event.get("cat") != "optrace.launch"):
            out[event["args"]["launch_file"]].append(event)
    return out


def kernels_in(document: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted((e for e in document["traceEvents"] if e["ph"] == "X" and e["pid"] == DEVICE_PID
                   and e["tid"] == 7), key=lambda e: e["ts"])


def test_op_key_is_the_layers_normal_form() -> None:
    names = ("MoeGmmFFNGate", "moe_gmm_ffn_gate", "MoeDistributeDispatch", "add_", "_x_y", "A__B", "fused")
    for name in names:
        assert op_key(name) == engine_op_key(name)
    assert same_op("aclnnMoeDistributeDispatch", "moe_distribute_dispatch")
    assert not same_op("MoeDistributeDispatchV2", "MoeDistributeDispatch")


def test_merge_nests_the_launch_under_its_kernel_slice(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "p", [0], op="moe_distribute_dispatch", jitter=2)
    trace = framework_trace(tmp_path / "trace_view.json", [kernel(run, 0)])
    out = tmp_path / "merged.json"
    result = invoke("collect", tmp_path / "p", "-o", out, "--merge", trace)
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    (slice_,) = kernels_in(document)
    spans = device_spans(document)["rank000.pt"]
    assert spans and all(e["pid"] == DEVICE_PID for e in spans)  # in the kernel's process
    first = min(e["ts"] for e in spans)
    last = max(e["ts"] + e["dur"] for e in spans)
    assert slice_["ts"] <= first and last <= slice_["ts"] + slice_["dur"] + 1e-9
    # The anchor put the launch where the generator did: 0.5 µs after the slice's start.
    assert first - slice_["ts"] == pytest.approx(0.5 + 5 * 0.02, abs=0.021)
    names = {e["args"]["name"] for e in document["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name" and e["tid"] >= DEVICE_TID_BASE}
    assert names == {"optrace AIC 0", "optrace AIC 1", "optrace AIV 0", "optrace AIV 1", "optrace AIV 2",
                     "optrace AIV 3"}
    assert document["otherData"]["alignment"]["method"] == "framework trace"
    assert document["otherData"]["merge"]["launches"][0]["kernel"] == "MoeDistributeDispatch"
    assert "launches placed under their kernel slices of the framework trace" in result.output


def test_merged_timestamps_are_numbers_and_flow_ids_fit_a_double(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "p", [0], op="MoeDistributeDispatch")
    trace = framework_trace(tmp_path / "trace_view.json", [kernel(run, 0)], as_list=True)
    out = tmp_path / "merged.json"
    assert invoke("collect", tmp_path / "p", "-o", out, "--merge", trace).exit_code == 0
    document = json.loads(out.read_text())
    for event in document["traceEvents"]:
        for key in ("ts", "dur"):
            if key in event:
                assert isinstance(event[key], (int, float)) and not isinstance(event[key], bool), event
    flows = [e for e in document["traceEvents"] if e["ph"] in "stf"]
    assert flows and all(isinstance(e["id"], int) and 0 < e["id"] < FLOW_ID_LIMIT for e in flows)
    pairs: dict[int, list[str]] = defaultdict(list)
    for event in flows:
        pairs[event["id"]].append(event["ph"])
    assert all(sorted(p) == ["f", "s"] for p in pairs.values()), pairs
    ours = [e for e in flows if e["cat"] == "optrace"]
    assert len(ours) == 2  # kernel slice -> its launch's first device span
    # Counted from the earliest event: small numbers, with the ns digits kept.
    (slice_,) = kernels_in(document)
    assert slice_["ts"] == pytest.approx(30.0, abs=1e-9)
    assert slice_["dur"] == pytest.approx(float(Decimal(kernel(run, 0)["dur"])), abs=1e-9)


def test_launches_match_in_order_and_anchors_skip_extra_slices(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    runs = [write_ranks(directory, [0], op="MoeDistributeDispatch", launch=k, at=100_000 * k, seed=k)
            for k in range(3)]
    # Two earlier slices of the op (warm-up steps the save skipped), same length.
    warm = [kernel(runs[0], 0) for _ in range(2)]
    for n, event in enumerate(warm):
        event["ts"] = str(Decimal(event["ts"]) - 4000 * (2 - n))
    trace = framework_trace(tmp_path / "t.json", [*warm, *(kernel(r, 0) for r in runs)])
    out = tmp_path / "merged.json"
    result = invoke("collect", directory, "-o", out, "--merge", trace)
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    slices = kernels_in(document)
    spans = device_spans(document)
    for k, name in enumerate(["rank000.pt", "rank000_launch1.pt", "rank000_launch2.pt"]):
        target = slices[2 + k]
        assert min(e["ts"] for e in spans[name]) >= target["ts"]
        assert max(e["ts"] + e["dur"] for e in spans[name]) <= target["ts"] + target["dur"] + 1e-9
    assert "the anchors matched the launches to slices 3..5" in result.output


def test_without_anchors_the_warmup_count_skips_slices(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    runs = [write_ranks(directory, [0], op="MoeDistributeDispatch", launch=k, at=100_000 * k, seed=k,
                        anchors=False, warmup=1) for k in range(2)]
    early = kernel(runs[0], 0)
    early["ts"] = str(Decimal(early["ts"]) - 5000)
    trace = framework_trace(tmp_path / "t.json", [early, *(kernel(r, 0) for r in runs)])
    out = tmp_path / "merged.json"
    result = invoke("collect", directory, "-o", out, "--merge", trace)
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    slices = kernels_in(document)
    spans = device_spans(document)
    # No anchor: the launch starts with its slice.
    assert min(e["ts"] for e in spans["rank000.pt"]) == pytest.approx(slices[1]["ts"] + 5 * 0.02, abs=1e-6)
    assert min(e["ts"] for e in spans["rank000_launch1.pt"]) >= slices[2]["ts"]


def test_two_ranks_two_traces_by_distributed_rank(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "p", [0, 300], op="MoeDistributeDispatch")
    traces = [framework_trace(tmp_path / f"t{r}.json", [kernel(run, r)], rank=r) for r in (0, 1)]
    out = tmp_path / "merged.json"
    result = invoke("collect", tmp_path / "p", "-o", out, "--merge", traces[0], "--merge", traces[1])
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    launches = {e["file"]: e for e in document["otherData"]["merge"]["launches"]}
    assert launches["rank000.pt"]["trace"].endswith("t0.json")
    assert launches["rank001.pt"]["trace"].endswith("t1.json")
    spans = device_spans(document)
    assert {e["pid"] for e in spans["rank000.pt"]} == {DEVICE_PID}
    assert {e["pid"] for e in spans["rank001.pt"]} == {f"1:{DEVICE_PID}"}  # the second trace's process
    # Rank 1 started 300 ticks (6 µs) later, and so it is in the merged trace.
    gap = min(e["ts"] for e in spans["rank001.pt"]) - min(e["ts"] for e in spans["rank000.pt"])
    assert gap == pytest.approx(6.0, abs=0.021)


def test_merge_to_pftrace_holds_both_timelines(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "p", [0], op="MoeDistributeDispatch")
    trace = framework_trace(tmp_path / "trace_view.json", [kernel(run, 0)])
    out = tmp_path / "merged.pftrace"
    result = invoke("collect", tmp_path / "p", "-o", out, "--merge", trace)
    assert result.exit_code == 0, result.output
    parsed = read_pftrace(out)  # every packet parses with Perfetto's protos, every B has its E
    by_name = parsed.by_name()
    # The kernel's stream joins the rank's process, above its cores.
    (kernel_span,) = by_name[("Rank 0", "Stream 7")]
    assert parsed.threads_in_order("Rank 0")[0] == "Stream 7"
    assert kernel_span.name == "MoeDistributeDispatch"
    host = [s.name for s in by_name[("Python", "tid 1")]]
    assert host == ["npu::moe_distribute_dispatch", "aclnnMoeDistributeDispatch"]
    device = [s for (process, core), spans in by_name.items() if process == "Rank 0" and core != "Stream 7"
              for s in spans]
    assert device
    assert min(s.start_ns for s in device) >= kernel_span.start_ns
    assert max(s.end_ns for s in device) <= kernel_span.end_ns
    assert parsed.metadata["optrace"]["alignment"]["method"] == "framework trace"


@pytest.mark.parametrize("case, message", [
    ("no-op", "rank000.pt has no op name: save it with save_profiling_data(op=...)"),
    ("few", "rank 0 has 1 launch of 'MoeDistributeDispatch' but the framework trace has 0 matching"),
    ("bad-ts", "event 3: ts 'soon' is not a number"),
    ("nan-ts", "is not a finite number"),
    ("not-trace", "not a Chrome / Kineto trace"),
    ("split", "--merge writes one trace: it cannot be used with --split"),
    ("align", "it cannot be used with --align"),
])
def test_merge_refuses_what_it_cannot_place(tmp_path: Path, case: str, message: str) -> None:
    run = write_ranks(tmp_path / "p", [0], op=None if case == "no-op" else "MoeDistributeDispatch")
    trace = framework_trace(tmp_path / "t.json", [] if case == "few" else [kernel(run, 0)])
    extra: list[object] = []
    if case in ("bad-ts", "nan-ts"):
        document = json.loads(trace.read_text())
        document["traceEvents"][3]["ts"] = "soon" if case == "bad-ts" else "NaN"
        trace.write_text(json.dumps(document))
    elif case == "not-trace":
        trace.write_text(json.dumps({"events": []}))
    elif case == "split":
        extra = ["--split", "rank"]
    elif case == "align":
        extra = ["--align", "step barrier"]
    out = tmp_path / "merged.json"
    result = invoke("collect", tmp_path / "p", "-o", out, "--merge", trace, *extra)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not out.exists()
    assert not list(tmp_path.glob(".merged*"))  # no temporary device trace left behind


def test_fast_path_takes_merge(tmp_path: Path) -> None:
    from optrace.cli.collect_fast import parse_fast

    parsed = parse_fast(["p", "-o", "m.json", "--merge", "a.json", "--merge=b.json"])
    assert parsed is not None and parsed["merge"] == [Path("a.json"), Path("b.json")]


def test_merge_to_pftrace_lays_the_framework_beside_a_ranks_launches(tmp_path: Path) -> None:
    """Two launches of rank 0 are one process, "Rank 0": the framework's process whose
    kernel slices they are joins it (with a process per launch file, it joined neither),
    and each launch's slice and spans lie inside its kernel slice."""
    directory = tmp_path / "p"
    runs = [write_ranks(directory, [0], op="MoeDistributeDispatch", launch=k, at=100_000 * k, seed=k)
            for k in range(2)]
    trace = framework_trace(tmp_path / "t.json", [kernel(r, 0) for r in runs])
    out = tmp_path / "merged.pftrace.gz"
    result = invoke("collect", directory, "-o", out, "--merge", trace)
    assert result.exit_code == 0, result.output
    parsed = read_pftrace(out)
    by_name = parsed.by_name()
    assert {t.name for t in parsed.tracks.values() if t.kind == "process"} == {"Rank 0", "Python"}
    kernels = by_name[("Rank 0", "Stream 7")]
    assert parsed.threads_in_order("Rank 0")[0] == "Stream 7"
    assert [k.name for k in kernels] == ["MoeDistributeDispatch"] * 2
    cores = [name for name in parsed.threads_in_order("Rank 0") if name != "Stream 7"]
    assert cores == ["AIC 0", "AIC 1", "AIV 0", "AIV 1", "AIV 2", "AIV 3"]
    for core in cores:
        launches = parsed.launches_by_name()[("Rank 0", core)]
        assert [s.name for s in launches] == ["launch 0", "launch 1"]
        for k, launch in enumerate(launches):
            assert kernels[k].start_ns <= launch.start_ns and launch.end_ns <= kernels[k].end_ns
            spans = [s for s in by_name[("Rank 0", core)] if launch.start_ns <= s.start_ns <= launch.end_ns]
            assert spans and max(s.end_ns for s in spans) <= launch.end_ns


def test_one_kineto_trace_of_two_devices_matches_ranks_by_the_anchors_device(tmp_path: Path) -> None:
    import numpy as np

    from optrace.runtime.pt_reader import load_pt
    from optrace.runtime.pt_writer import write_pt

    run = write_ranks(tmp_path / "p", [0, 300], op="MoeDistributeDispatch")
    for rank, device in ((0, 3), (1, 2)):  # rank 0 ran on device 3, rank 1 on device 2
        path = tmp_path / "p" / f"rank{rank:03d}.pt"
        document = load_pt(path)
        document["meta"]["extra"]["anchor"]["device_id"] = device
        document["data"] = np.array(document["data"])
        with open(path, "wb") as handle:
            write_pt(document, handle)
    # Kineto style: kernels in category "kernel" with args.device, one process per device.
    events = []
    for rank, device in ((1, 2), (0, 3)):
        event = kernel(run, rank)
        event.update(cat="kernel", pid=device, tid=7, args={"device": device, "stream": 7})
        event["ts"] = float(Decimal(event["ts"]))  # numbers, as Kineto writes them
        event["dur"] = float(Decimal(event["dur"]))
        events.append(event)
    trace = tmp_path / "kineto.json.gz"
    trace.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    out = tmp_path / "merged.json"
    result = invoke("collect", tmp_path / "p", "-o", out, "--merge", trace)
    assert result.exit_code == 0, result.output
    spans = device_spans(json.loads(out.read_text()))
    assert {e["pid"] for e in spans["rank000.pt"]} == {3}
    assert {e["pid"] for e in spans["rank001.pt"]} == {2}


def test_merge_keeps_collects_other_options(tmp_path: Path) -> None:
    run = write_ranks(tmp_path / "p", [0], op="MoeDistributeDispatch")
    trace = framework_trace(tmp_path / "t.json", [kernel(run, 0)])
    out = tmp_path / "merged.json"
    result = invoke("collect", tmp_path / "p", "-o", out, "--merge", trace, "--cores", "aic",
                    "--labels", "step barrier")
    assert result.exit_code == 0, result.output
    spans = device_spans(json.loads(out.read_text()))["rank000.pt"]
    assert {e["name"] for e in spans} == {"step barrier"}
    assert {e["tid"] - DEVICE_TID_BASE for e in spans} == {0, 1}  # the two AIC slots


def test_merge_output_goes_through_the_one_output_helper(tmp_path: Path) -> None:
    """--merge's output keeps runtime/atomic.py's promises: a framework
    trace named as the output is an input (refused, intact), a FIFO is refused, a device
    is written through; no temporary device trace is left anywhere."""
    run = write_ranks(tmp_path / "p", [0], op="moe_distribute_dispatch", jitter=2)
    trace = framework_trace(tmp_path / "trace_view.json", [kernel(run, 0)])
    before = trace.read_bytes()
    result = invoke("collect", tmp_path / "p", "-o", trace, "--merge", trace)
    assert result.exit_code == 2 and "is an input of this command" in result.output, result.output
    assert trace.read_bytes() == before
    os.mkfifo(tmp_path / "fifo")
    result = invoke("collect", tmp_path / "p", "-o", tmp_path / "fifo", "--merge", trace)
    assert result.exit_code == 2 and "a FIFO, not a regular file" in result.output, result.output
    result = invoke("collect", tmp_path / "p", "-o", "/dev/null", "--merge", trace)
    assert result.exit_code == 0, result.output
    assert not [p for p in tmp_path.iterdir() if ".device" in p.name]


# ----------------------------------------------------------------------------- flows in .pftrace

JsonSlice = tuple[Any, int]  # ((pid, tid), place in the thread's slices by start, longer first)


def with_flows(path: Path, kernels: list[dict[str, Any]], rank: int | None = None) -> Path:
    """framework_trace's events, plus host threads whose flows bind every way the Trace
    Event Format has: ``f`` without ``bp`` (the next slice to begin on its thread), a
    ``t`` step, a finish whose enclosing slice began before the start's, one id in two
    categories (two flows), ``bind_id`` on slices (``flow_out`` / ``flow_in``), and one
    flow with nothing to bind at its ends (no flow at all)."""
    framework_trace(path, kernels, rank)
    document = json.loads(path.read_text())
    base = Decimal(kernels[0]["ts"]) - 200

    def at(us: str) -> str:
        return str(base + Decimal(us))

    def x(name: str, tid: int, ts: str, dur: str, **more: Any) -> dict[str, Any]:
        return {"ph": "X", "cat": "user", "name": name, "pid": HOST_PID, "tid": tid, "ts": at(ts), "dur": dur,
                **more}

    def flow(ph: str, cat: str, ident: object, tid: int, ts: str, **more: Any) -> dict[str, Any]:
        return {"ph": ph, "cat": cat, "name": "hand-off", "id": ident, "pid": HOST_PID, "tid": tid,
                "ts": at(ts), **more}

    document["traceEvents"] += [
        {"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": 2, "args": {"name": "loader"}},
        {"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": 3, "args": {"name": "worker"}},
        {"ph": "M", "name": "thread_name", "pid": HOST_PID, "tid": 4, "args": {"name": "waiter"}},
        x("enqueue", 2, "0", "10"),
        x("long wait", 4, "1", "30"),
        flow("s", "queue", "q1", 2, "4"),
        flow("f", "queue", "q1", 3, "12"),  # no bp: binds to "dequeue", the next to begin there
        x("dequeue", 3, "15", "5"),
        x("dequeue inner", 3, "15", "2.5"),
        flow("s", "other", "q1", 3, "16"),  # the same id in another category: a flow of its own
        x("helper", 2, "17", "3"),
        flow("t", "other", "q1", 2, "18"),
        flow("f", "other", "q1", 4, "19.5", bp="e"),  # "long wait" began before "dequeue inner"
        x("produce", 2, "40", "2", bind_id=BIG_FLOW, flow_out=True),
        x("consume", 3, "45", "2", bind_id=BIG_FLOW, flow_in=True),
        flow("s", "queue", 99, 2, "60"),  # nothing open on either thread: binds to no slice
        flow("f", "queue", 99, 4, "61", bp="e"),
    ]
    path.write_text(json.dumps(document))
    return path


def json_slices(document: dict[str, Any]) -> dict[Any, list[dict[str, Any]]]:
    """Each thread's complete events by start, the longer first at one start."""
    threads: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for event in document["traceEvents"]:
        if event["ph"] == "X":
            threads[(event["pid"], event["tid"])].append(event)
    return {key: sorted(found, key=lambda e: (e["ts"], -e.get("dur", 0))) for key, found in threads.items()}


def json_flows(document: dict[str, Any]) -> dict[int, list[JsonSlice]]:
    """The slices each flow id of a merged JSON trace links, in the flow's order, bound as
    the trace processor binds the Trace Event Format's flows: ``s``, ``t`` and ``f`` with
    ``bp: "e"`` to the innermost slice holding their time on their thread (the last begun
    of those holding it), ``f`` without to the next slice to begin there, ``bind_id`` to
    its own slice. A flow with fewer than two slices links nothing."""
    threads = json_slices(document)
    points: dict[int, list[tuple[int, float, int, JsonSlice]]] = defaultdict(list)
    for order, event in enumerate(document["traceEvents"]):
        key = (event.get("pid"), event.get("tid"))
        slices = threads.get(key, [])
        if event["ph"] in "stf":
            ts = event["ts"]
            if event["ph"] == "f" and event.get("bp") != "e":
                found = [k for k, s in enumerate(slices) if s["ts"] >= ts][:1]
            else:
                found = [k for k, s in enumerate(slices) if s["ts"] <= ts <= s["ts"] + s.get("dur", 0)][-1:]
            points[event["id"]] += [("stf".index(event["ph"]), ts, order, (key, k)) for k in found]
        elif event["ph"] == "X" and "bind_id" in event:
            role = {(True, False): 0, (True, True): 1, (False, True): 2}[
                (event.get("flow_out", False), event.get("flow_in", False))]
            k = next(k for k, s in enumerate(slices) if s is event)
            points[event["bind_id"]].append((role, event["ts"], order, (key, k)))
    return {flow: [p[3] for p in sorted(found, key=lambda p: p[:3])]
            for flow, found in points.items() if len(found) >= 2}


def pftrace_flows(parsed: Any) -> tuple[dict[int, list[tuple[int, int]]], dict[int, list[tuple[int, int]]]]:
    """Per flow id, the slices ((track uuid, place) in B order) whose events carry it in
    ``flow_ids`` (by start), and those carrying it in ``terminating_flow_ids``."""
    going: dict[int, list[tuple[int, int]]] = defaultdict(list)
    ending: dict[int, list[tuple[int, int]]] = defaultdict(list)
    slices = parsed.slices()
    for uuid, spans in slices.items():
        for k, span in enumerate(spans):
            for flow in span.flow_ids:
                going[flow].append((uuid, k))
            for flow in span.terminating_flow_ids:
                ending[flow].append((uuid, k))
    for found in going.values():
        found.sort(key=lambda place: slices[place[0]][place[1]].start_ns)
    return dict(going), dict(ending)


def slice_map(document: dict[str, Any], parsed: Any) -> dict[JsonSlice, tuple[int, int]]:
    """Each JSON slice's .pftrace slice: the same name, starting within a tick, on the
    thread's track there — the tracks of the same thread name (the device cores' "optrace
    AIC 0" is "AIC 0", in the rank's process; a thread with no name is "tid N") whose
    slices are all the thread's (a thread of the JSON trace holding two launches' cores
    is two tracks there); exactly one, and every slice of those tracks is one."""
    tick_ns = float(TICK_US) * 1000
    names = {(e["pid"], e["tid"]): e["args"]["name"].removeprefix("optrace ") for e in document["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}

    def same(span: Any, event: dict[str, Any]) -> bool:
        return span.name == event["name"] and abs(span.start_ns - event["ts"] * 1000) <= tick_ns + 1e-3

    out = {}
    everything = parsed.slices()  # the launch slices too: a flow may bind to one
    for key, slices in json_slices(document).items():
        name = names.get(key, f"tid {key[1]}")
        tracks = [uuid for uuid, spans in everything.items() if parsed.tracks[uuid].name == name
                  and all(any(same(span, event) for event in slices) for span in spans)]
        assert sum(len(everything[uuid]) for uuid in tracks) == len(slices), (key, tracks)
        for j, event in enumerate(slices):
            found = [(uuid, k) for uuid in tracks for k, span in enumerate(everything[uuid])
                     if same(span, event)]
            assert len(found) == 1, (key, event, found)
            out[(key, j)] = found[0]
    return out


def assert_same_flows(json_out: Path, pftrace_out: Path) -> None:
    """The .pftrace carries the JSON trace's flows: each of its flow ids links the slices
    the JSON trace's flow events of that id bind to (same name, track and start within a
    tick), from a flow_ids to a terminating_flow_ids; each id is one flow, under 2**53;
    the framework's own flows and optrace's kernel -> device flows are both there."""
    document = json.loads(gzip.decompress(json_out.read_bytes()) if json_out.name.endswith(".gz")
                          else json_out.read_bytes())
    parsed = read_pftrace(pftrace_out)  # Perfetto's own protos: every field a known one
    expected = json_flows(document)
    going, ending = pftrace_flows(parsed)
    assert set(going) | set(ending) == set(expected), (sorted(going), sorted(ending), sorted(expected))
    same = slice_map(document, parsed)
    for flow, chain in expected.items():
        assert 0 < flow < FLOW_ID_LIMIT
        assert len(ending[flow]) == 1, (flow, ending[flow])  # one flow per id: one end
        got = [*going[flow], *ending[flow]]
        assert got == [same[place] for place in chain], flow
        # The trace processor links an id's events in time order and drops an end met
        # before its start: here each comes after the one before.
        times = [parsed.slices()[uuid][k].flow_ns[flow] for uuid, k in got]
        assert times == sorted(set(times)), (flow, times)
    categories = {e["cat"] for e in document["traceEvents"] if e["ph"] in "stf" and e["id"] in expected}
    assert "optrace" in categories and categories - {"optrace"}, categories


@pytest.mark.parametrize("case", ["one rank", "two launches", "two ranks", "cores", "with the kernel"])
def test_merged_pftrace_carries_the_json_traces_flows(tmp_path: Path, case: str) -> None:
    directory = tmp_path / "p"
    extra: list[object] = []
    if case == "two launches":  # one rank's: the framework's process joins it
        runs = [write_ranks(directory, [0], op="MoeDistributeDispatch", launch=k, at=100_000 * k, seed=k)
                for k in range(2)]
        traces = [with_flows(tmp_path / "t.json", [kernel(r, 0) for r in runs])]
    elif case == "two ranks":  # two traces holding the same flow ids: renumbered apart
        run = write_ranks(directory, [0, 300], op="MoeDistributeDispatch")
        traces = [with_flows(tmp_path / f"t{r}.json", [kernel(run, r)], rank=r) for r in (0, 1)]
    else:
        run = write_ranks(directory, [0], op="MoeDistributeDispatch")
        traces = [with_flows(tmp_path / "t.json", [kernel(run, 0)])]
        if case == "cores":  # the launch's first device span is on another core
            extra = ["--cores", "aiv"]
        elif case == "with the kernel":  # its first span starts with the kernel slice: the end event ends it
            extra = ["--rank-offsets", "0=-0.6"]
    merges = [item for trace in traces for item in ("--merge", trace)]
    suffix = ".gz" if case == "two launches" else ""
    for out in (tmp_path / f"merged.json{suffix}", tmp_path / f"merged.pftrace{suffix}"):
        result = invoke("collect", directory, "-o", out, *merges, *extra)
        assert result.exit_code == 0, result.output
    assert_same_flows(tmp_path / f"merged.json{suffix}", tmp_path / f"merged.pftrace{suffix}")
