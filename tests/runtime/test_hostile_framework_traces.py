"""`collect --merge` of a framework trace someone else wrote (a torch_npu
trace_view.json, a Kineto trace): every number and string it takes is checked — finite,
in range, integers where integers are meant, text without lone surrogates or NUL — and
what it writes, `report`, `compare` and `inspect` read back. Whatever the framework trace
holds, the merge exits 0 or 2, never 3 (docs/faults.md, "Hostile traces and numbers").
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from cli_in_thread import run_cli

from optrace.runtime.save import reset_launch_counters
from optrace.runtime.synth import write_ranks

cli = functools.partial(run_cli, timeout=120)


def assert_refused(code: int, out: str, path: Path, words: str) -> None:
    assert "Traceback" not in out and "internal error" not in out, out[-2000:]
    assert code == 2, f"exit {code}:\n{out[-2000:]}"
    assert f"{path}: " in out and words in out, out[-2000:]


TICK_US = Decimal("0.02")  # write_ranks' 50 MHz
ZERO_US = Decimal(1_700_000_000 * 10**6 + 10**9)  # its true tick 0 on the wall clock, µs
HOST, DEVICE = 4242, 2_000_001
#: Where framework_document puts its events (the mutations below name them by place).
PROCESS, THREAD_NAME, HOST_OP, FLOW_START, FLOW_END, KERNEL = 0, 2, 3, 4, 5, 6


def framework_document(starts: int, ends: int) -> dict[str, Any]:
    """A torch_npu-like trace_view.json: a host op, a flow to the device's kernel slice
    (around the launch write_ranks made), timestamps as strings."""
    start = ZERO_US + starts * TICK_US - Decimal("0.5")
    end = ZERO_US + ends * TICK_US + Decimal("0.7")
    return {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": HOST, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_name", "pid": DEVICE, "tid": 0, "args": {"name": "Ascend Hardware"}},
        {"ph": "M", "name": "thread_name", "pid": DEVICE, "tid": 7, "args": {"name": "Stream 7"}},
        {"ph": "X", "cat": "cpu_op", "name": "npu::moe_distribute_dispatch", "pid": HOST, "tid": 1,
         "ts": str(start - 30), "dur": "25.125"},
        {"ph": "s", "cat": "async_npu", "name": "launch", "id": "7", "pid": HOST, "tid": 1,
         "ts": str(start - 28)},
        {"ph": "f", "bp": "e", "cat": "async_npu", "name": "launch", "id": "7", "pid": DEVICE, "tid": 7,
         "ts": str(start)},
        {"ph": "X", "name": "MoeDistributeDispatch", "pid": DEVICE, "tid": 7, "ts": str(start),
         "dur": str(end - start), "args": {"Task Type": "MIX_AIC", "device": 0}},
    ]}


Mutation = Callable[[dict[str, Any]], str]


def setting(place: int, **fields: Any) -> Mutation:
    """Fields of the event at `place` set (None: removed)."""
    def mutate(document: dict[str, Any]) -> str:
        event = document["traceEvents"][place]
        for key, value in fields.items():
            if value is None:
                event.pop(key, None)
            else:
                event[key] = value
        return json.dumps(document)
    return mutate


def args_of(place: int, **args: Any) -> Mutation:
    def mutate(document: dict[str, Any]) -> str:
        document["traceEvents"][place].setdefault("args", {}).update(args)
        return json.dumps(document)
    return mutate


def written(place: int, key: str, literal: str) -> Mutation:
    """The event's field written as `literal` (JSON json.dumps would not write)."""
    def mutate(document: dict[str, Any]) -> str:
        document["traceEvents"][place][key] = "@@"
        return json.dumps(document).replace('"@@"', literal)
    return mutate


def with_event(event: dict[str, Any]) -> Mutation:
    def mutate(document: dict[str, Any]) -> str:
        document["traceEvents"].append(event)
        return json.dumps(document)
    return mutate


def distributed_rank(rank: Any) -> Mutation:
    def mutate(document: dict[str, Any]) -> str:
        document["distributedInfo"] = {"backend": "hccl", "rank": rank, "world_size": 2}
        return json.dumps(document)
    return mutate


# Each: the mutation, and what the message says (exit 2, the framework trace named).
FRAMEWORK_REFUSED: dict[str, tuple[Mutation, str]] = {
    # numbers: finite, in range, of bounded size — before any arithmetic (was exit 3)
    "ts-1e400": (written(KERNEL, "ts", "1e400"), "1e400 is out of the float range"),
    "ts-4000-digits": (written(KERNEL, "ts", "9" * 4000), "integer of 4000 digits (at most 24)"),
    "ts-string-1e999999999": (setting(KERNEL, ts="1e999999999"),
                              "event 6: ts '1e999999999' must be a finite number in [-1e+16, 1e+16] µs"),
    "dur-string-1e999999999": (setting(KERNEL, dur="1e999999999"),
                               "event 6: dur '1e999999999' must be a finite number in [0, 1e+15] µs"),
    "ts-string-nan": (setting(KERNEL, ts="NaN"), "event 6: ts 'NaN' is not a finite number"),
    # written before, and report refused what was written (exit 0 then exit 2)
    "dur-1e30": (written(KERNEL, "dur", "1e30"),
                 "event 6: dur 1E+30 must be a finite number in [0, 1e+15] µs"),
    "host-dur-string-1e30": (setting(HOST_OP, dur="1e30"), "event 3: dur '1e30' must be"),
    "ts-1e30": (written(KERNEL, "ts", "1e30"), "event 6: ts 1E+30 must be"),
    "dur-negative": (setting(HOST_OP, dur="-1"),
                     "event 3: dur '-1' must be a finite number in [0, 1e+15] µs"),
    "events-1.7e15-us-apart": (with_event({"ph": "X", "name": "early", "pid": HOST, "tid": 2, "ts": 10,
                                           "dur": 1}),
                               "ends 1.7e+15 µs after the earliest framework event (at 10 µs), past the "
                               "1e+15 µs a trace holds"),
    "args-nan": (written(KERNEL, "args", '{"x": NaN}'), "NaN is not a number JSON allows"),
    "args-1e400": (written(KERNEL, "args", '{"x": -1e400}'), "-1e400 is out of the float range"),
    "args-5000-digit-int": (written(KERNEL, "args", '{"x": ' + "1" * 5000 + "}"), "integer of 5000 digits"),
    "args-nested-100000-deep": (written(KERNEL, "args", "[" * 100_000 + "]" * 100_000), "nested too deeply"),
    # device ids: int32s (int() of 5000 digits was exit 3)
    "device-5000-digit-string": (args_of(KERNEL, device="9" * 5000),
                                 "event 6: args.device '999999999999"),
    "device-past-int32": (args_of(KERNEL, device=2**40),
                          "args.device 1099511627776 must be an integer in [-2147483648, 2147483647]"),
    "device-id-string-past-int32": (args_of(KERNEL, **{"Device Id": "4294967296"}),
                                    "args.Device Id '4294967296'"),
    # pids and tids: an integer or a string (a list was hashed as its JSON and written)
    "pid-list": (setting(KERNEL, pid=[1, 2]), "event 6: pid must be an integer or a string, not [1, 2]"),
    "pid-object": (setting(HOST_OP, pid={"a": 1}),
                   "event 3: pid must be an integer or a string, not {'a': 1}"),
    "tid-list": (setting(KERNEL, tid=[7]), "event 6: tid must be an integer or a string, not [7]"),
    "pid-float": (setting(KERNEL, pid=1.5), "event 6: pid must be an integer or a string, not 1.5"),
    "pid-true": (setting(THREAD_NAME, pid=True), "event 2: pid must be an integer or a string, not True"),
    "pid-30-digits": (written(KERNEL, "pid", "1" * 30), "integer of 30 digits"),
    "pid-string-nul": (setting(HOST_OP, pid="a\x00"), "event 3: pid 'a\\x00' holds a NUL character"),
    # lone surrogates anywhere (a .pftrace's strings are UTF-8: writing one was exit 3)
    "name-lone-surrogate": (setting(HOST_OP, name="npu::\ud800"),
                            "string 'npu::\\ud800' holds a lone surrogate"),
    "thread-name-lone-surrogate": (args_of(THREAD_NAME, name="Stream \udc00"), "holds a lone surrogate"),
    "process-name-lone-surrogate": (args_of(PROCESS, name="\ud800"), "holds a lone surrogate"),
    "instant-name-lone-surrogate": (with_event({"ph": "i", "name": "\udfff", "pid": HOST, "tid": 1,
                                                "ts": "1700001000000000"}), "holds a lone surrogate"),
    "category-lone-surrogate": (setting(FLOW_START, cat="\ud800"), "holds a lone surrogate"),
    "args-key-lone-surrogate": (args_of(KERNEL, **{"\udbff": 1}), "holds a lone surrogate"),
    # NUL in what becomes a name in the merged trace (report refused it there)
    "name-nul": (setting(HOST_OP, name="a\x00b"), "event 3: name 'a\\x00b' holds a NUL character"),
    "thread-name-nul": (args_of(THREAD_NAME, name="S\x00"),
                        "event 2: args.name 'S\\x00' holds a NUL character"),
    # a complete event report would refuse in the merged trace
    "complete-event-without-dur": (setting(HOST_OP, dur=None),
                                   "event 3: a complete event ('X') needs a ts, a dur and a name (a string)"),
    "complete-event-without-ts": (setting(HOST_OP, ts=None), "event 3: a complete event ('X') needs"),
    "complete-event-named-by-a-number": (setting(HOST_OP, name=5), "event 3: a complete event ('X') needs"),
    # distributedInfo.rank: an integer in the ranks' range (was taken as no match)
    "distributed-rank-negative": (distributed_rank(-1),
                                  "distributedInfo.rank must be an integer in [0, 2147483647], not -1"),
    "distributed-rank-string": (distributed_rank("0"), "distributedInfo.rank must be an integer"),
}

# Each: the mutation; merged into both formats (exit 0), and what was written is read back.
FRAMEWORK_READ: dict[str, Mutation] = {
    "emoji-surrogate-pair": setting(HOST_OP, name="npu::op \U0001f600"),  # json.dumps: \ud83d\ude00
    "escaped-backslash-before-u": setting(HOST_OP, name="npu::\\ud800"),  # a backslash, then "ud800"
    "host-device-id-minus-one": args_of(HOST_OP, **{"Device Id": -1}),  # Kineto's memory events
    "device-superscript-digit": args_of(KERNEL, device="²"),  # isdigit() and int() refused it: exit 3
    "flow-category-object": lambda d: setting(FLOW_END, cat={"a": 1})(
        json.loads(setting(FLOW_START, cat={"a": 1})(d))),  # unhashable as a flow's key: exit 3
    "flow-id-list": lambda d: setting(FLOW_END, id=[1, 2])(json.loads(setting(FLOW_START, id=[1, 2])(d))),
    "pid-strings": lambda d: json.dumps(d).replace(f'"pid": {HOST}', '"pid": "Python"'),
    "tiny-float": args_of(KERNEL, x=1e-300),
    "ts-with-spaces": setting(HOST_OP, ts=" 1700000999999969.5 "),
}


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One rank file of one launch of MoeDistributeDispatch, and its framework trace."""
    reset_launch_counters()
    directory = tmp_path_factory.mktemp("merge") / "p"
    run = write_ranks(directory, [0], op="MoeDistributeDispatch")
    reset_launch_counters()
    return directory, framework_document(run.starts[0], run.ends[0])


def _merge(ranks: tuple[Path, dict[str, Any]], tmp_path: Path, mutate: Mutation, output: str
           ) -> tuple[int, str, Path, Path]:
    directory, document = ranks
    framework = tmp_path / "trace_view.json"
    framework.write_bytes(mutate(json.loads(json.dumps(document))).encode("utf-8", "surrogatepass"))
    out = tmp_path / output
    code, text = cli("collect", directory, "-o", out, "--merge", framework)
    return code, text, framework, out


@pytest.mark.parametrize("output", ["merged.json", "merged.pftrace"])
@pytest.mark.parametrize("case", list(FRAMEWORK_REFUSED))
def test_a_hostile_framework_trace_is_refused_by_merge(
    ranks: tuple[Path, dict[str, Any]], tmp_path: Path, case: str, output: str
) -> None:
    mutate, words = FRAMEWORK_REFUSED[case]
    code, text, framework, out = _merge(ranks, tmp_path, mutate, output)
    assert_refused(code, text, framework, words)
    assert not out.exists()


@pytest.mark.parametrize("output", ["merged.json", "merged.pftrace"])
@pytest.mark.parametrize("case", ["untouched", *FRAMEWORK_READ])
def test_what_merge_writes_optraces_own_readers_read(
    ranks: tuple[Path, dict[str, Any]], tmp_path: Path, case: str, output: str
) -> None:
    code, text, _, out = _merge(ranks, tmp_path, FRAMEWORK_READ.get(case, json.dumps), output)
    assert code == 0 and "Traceback" not in text, text
    for command in (["report", out], ["inspect", out], ["compare", out, out, "--label", "step barrier"]):
        code, text = cli(*command)
        assert code == 0 and "Traceback" not in text, f"{command[0]}: exit {code}\n{text}"
    if case == "emoji-surrogate-pair":  # a pair is a character, kept as written
        code, text = cli("report", out, "--format", "json")
        assert "npu::op \U0001f600" in json.dumps(json.loads(text), ensure_ascii=False)
