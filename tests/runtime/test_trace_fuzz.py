"""Trace fuzzing: what `inspect`, `report`, `compare` and `collect --merge` read from a trace
someone else wrote or edited.

Three fuzzers, each from a valid file optrace (or a framework) wrote:

- **JSON traces**: a trace `collect` wrote, with one to three of its fields (an event's
  `ts`, `pid`, `name`, `args`..., the `otherData` metadata) set to a value of another type
  or out of every range — lists and dicts where numbers are, 4,000-digit integers,
  `1e400`, numbers as strings, lone surrogates, terminal escapes, nesting 5,000 deep —
  removed, or duplicated; then `inspect`, `report` and `compare` on it;
- **.pftrace files**: the same trace as Perfetto protobuf with bits flipped, bytes cut or
  repeated, varints set to their extremes; the same three readers;
- **framework traces**: a torch_npu-like `trace_view.json` mutated the same way,
  merged by `collect --merge` (and, when that writes, the result read by `report`).

Each command must exit 0, 1 or 2 — never 3, a traceback or a hang (60 s a command). The
figures of a run (tests/fuzz_tally.py): CI runs 60 inputs of each; `OPTRACE_FUZZ_SCALE`
multiplies them.
"""

from __future__ import annotations

import json
import os
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fuzz_tally import SCALE, Tally, tally
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime.save import reset_launch_counters
from optrace.runtime.synth import write_ranks

pytestmark = pytest.mark.slow  # hundreds of CLI runs on mutated traces

CI_INPUTS = 60
SEED = int(os.environ.get("OPTRACE_FUZZ_SEED", "32"))
COMMAND_SECONDS = 60.0


def run(*args: object) -> tuple[int | str, str]:
    """(exit code, or "crash" / "hang"; output) of `optrace ARGS`, in-process on a thread
    with a time limit (a hang leaves its thread behind, and is counted)."""
    box: list[tuple[int | str, str]] = []

    def go() -> None:
        res = CliRunner().invoke(app, [str(a) for a in args])
        uncaught = res.exception is not None and not isinstance(res.exception, SystemExit)
        text = res.stdout + res.stderr
        crashed = (uncaught or res.exit_code not in (0, 1, 2) or "Traceback" in text
                   or "internal error" in text)
        box.append(("crash" if crashed else res.exit_code,
                     text + (f"\nuncaught: {res.exception!r}" if uncaught else "")))

    worker = threading.Thread(target=go, daemon=True)
    worker.start()
    worker.join(COMMAND_SECONDS)
    return box[0] if box else ("hang", f"no answer in {COMMAND_SECONDS} s")


# --------------------------------------------------------------------------- values


def _raw(literal: str) -> Callable[[random.Random], object]:
    return lambda rng: RawLiteral(literal)


class RawLiteral:
    """JSON text written as is (what json.dumps would not write)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _const(value: object) -> Callable[[random.Random], object]:
    return lambda rng: value


HOSTILE: list[Callable[[random.Random], object]] = [
    *map(_const, [None, True, -1, 0, 2**63, 10**30, -(10**30), 1e308, -1e308, 5e-324]),
    _raw("9" * 4000), _raw("1e400"), _raw("-1e400"), _raw("NaN"), _raw("Infinity"),
    *map(_const, ["1e999999999", "12.5", "0x10", "", "x" * 100_000, "\udcff", "a\ud800b",
                  "\x1b]52;c;cHduZWQ=\x07", "\u202eevil", "\x00", [], {}, [1, 2], {"a": 1}, [[["deep"]]]]),
    _raw("[" * 5000 + "]" * 5000), lambda rng: rng.randint(-(2**40), 2**40),
]


def _places(document: object) -> list[tuple[Any, Any]]:
    """(container, key) of every value in the document, iteratively."""
    out: list[tuple[Any, Any]] = []
    todo = [document]
    while todo:
        node = todo.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            out.append((node, key))
            if isinstance(value, (dict, list)):
                todo.append(value)
    return out


def mutate_document(rng: random.Random, document: Any) -> str:
    """One to three fields of a JSON document changed; its text (raw literals in place)."""
    places = _places(document)
    events = document.get("traceEvents") if isinstance(document, dict) else None
    for _ in range(rng.randint(1, 3)):
        if events and rng.random() < 0.6:  # most often an event's own field
            event = rng.choice(events)
            if isinstance(event, dict) and event:
                container, key = event, rng.choice([*event, "ts", "dur", "pid", "tid", "name", "ph", "args"])
            else:
                container, key = rng.choice(places)
        else:
            container, key = rng.choice(places)
        action = rng.random()
        if action < 0.75:
            container[key] = rng.choice(HOSTILE)(rng)
        elif action < 0.9 and isinstance(container, dict):
            container.pop(key, None)
        elif isinstance(container, list) and container:
            container.insert(rng.randrange(len(container) + 1), rng.choice(container))
    raws: list[str] = []

    def default(value: object) -> str:
        assert isinstance(value, RawLiteral)
        raws.append(value.text)
        return f"@@RAW{len(raws) - 1}@@"

    text = json.dumps(document, default=default)
    for i, literal in enumerate(raws):
        text = text.replace(f'"@@RAW{i}@@"', literal, 1)
    return text


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        action = rng.randrange(5)
        at = rng.randrange(max(1, len(out)))
        if action == 0:
            for _ in range(rng.randint(1, 8)):
                out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        elif action == 1:
            del out[at:]
        elif action == 2:
            chunk = out[at : at + rng.randint(1, 4096)]
            out[at:at] = chunk * rng.randint(1, 20)
        elif action == 3:  # a varint at its extremes: ten 0xff-ish bytes, or a length past the file
            out[at:at] = rng.choice([b"\xff" * 9 + b"\x01", b"\x80" * 10, b"\xff\xff\xff\xff\x0f"])
        else:
            out[at : at + 1] = bytes([rng.randrange(256)])
    return bytes(out)


# --------------------------------------------------------------------------- the inputs


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A two-rank run, its JSON trace and its .pftrace; a one-rank run and the framework
    trace of its launch, which merges."""
    base = tmp_path_factory.mktemp("trace-fuzz")
    reset_launch_counters()
    write_ranks(base / "prof", [0, 40], op="MoeDistributeDispatch", occurrences=3)
    reset_launch_counters()
    one = write_ranks(base / "one", [0], op="MoeDistributeDispatch", occurrences=3)
    reset_launch_counters()
    out: dict[str, Any] = {"ranks": base / "one", "framework": framework_document(one.starts[0], one.ends[0])}
    for suffix in ("json", "pftrace"):
        out[suffix] = base / f"trace.{suffix}"
        code, text = run("collect", base / "prof", "-o", out[suffix])
        assert code == 0 and out[suffix].exists(), text
    (base / "trace_view.json").write_text(json.dumps(out["framework"]))
    code, text = run("collect", base / "one", "-o", base / "merged.json", "--merge", base / "trace_view.json")
    assert code == 0, text  # the unmutated framework trace merges
    return out


def framework_document(start_tick: int, end_tick: int) -> dict[str, Any]:
    """A torch_npu-like trace_view.json around one launch of a 50 MHz run whose tick 0 is
    write_ranks' (1.7e15 µs + 1 s on the wall clock): host op, a flow, the kernel slice."""
    zero_us, tick_us = 1_700_000_000 * 10**6 + 10**9, 0.02
    start, end = zero_us + start_tick * tick_us - 0.5, zero_us + end_tick * tick_us + 0.7
    return {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 11, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_name", "pid": 2_000_001, "tid": 0, "args": {"name": "Ascend Hardware"}},
        {"ph": "X", "cat": "cpu_op", "name": "npu::moe_distribute_dispatch", "pid": 11, "tid": 1,
         "ts": f"{start - 30:.3f}", "dur": "25.125"},
        {"ph": "s", "cat": "async_npu", "name": "launch", "id": "7", "pid": 11, "tid": 1,
         "ts": f"{start - 28:.3f}"},
        {"ph": "f", "bp": "e", "cat": "async_npu", "name": "launch", "id": "7", "pid": 2_000_001, "tid": 7,
         "ts": f"{start:.3f}"},
        {"ph": "X", "name": "MoeDistributeDispatch", "pid": 2_000_001, "tid": 7, "ts": f"{start:.3f}",
         "dur": f"{end - start:.3f}", "args": {"Task Type": "MIX_AIC", "device": 0}},
    ]}


def _readers(path: Path) -> list[list[object]]:
    return [["inspect", path], ["report", path], ["compare", path, path]]


def _count(counts: Tally, found: list[str], what: str, code: int | str, text: str) -> None:
    counts.count(code)
    if code in ("crash", "hang") and len(found) < 20:
        found.append(f"{what}: {code}\n{text[-1500:]}")


def test_mutated_json_traces_are_read_or_refused(traces: dict[str, Any], tmp_path: Path) -> None:
    rng = random.Random(f"json-{SEED}")
    original = json.loads(traces["json"].read_text())
    found: list[str] = []
    with tally("traces: mutated JSON traces through inspect, report, compare",
               "a reader on a mutated JSON trace") as counts:
        for case in range(CI_INPUTS * SCALE):
            path = tmp_path / f"case{case % 4}.json"
            text = mutate_document(rng, json.loads(json.dumps(original)))
            path.write_bytes(text.encode("utf-8", "surrogatepass"))
            for command in _readers(path):
                code, text = run(*command)
                _count(counts, found, f"case {case} (seed {SEED}) {command[0]}", code, text)
    assert not found, "\n\n".join(found)


def test_mutated_pftrace_files_are_read_or_refused(traces: dict[str, Any], tmp_path: Path) -> None:
    rng = random.Random(f"pftrace-{SEED}")
    original = traces["pftrace"].read_bytes()
    found: list[str] = []
    with tally("traces: mutated .pftrace files through inspect, report, compare",
               "a reader on a mutated .pftrace") as counts:
        for case in range(CI_INPUTS * SCALE):
            path = tmp_path / f"case{case % 4}.pftrace"
            path.write_bytes(mutate_bytes(rng, original))
            for command in _readers(path):
                code, text = run(*command)
                _count(counts, found, f"case {case} (seed {SEED}) {command[0]}", code, text)
    assert not found, "\n\n".join(found)


def test_mutated_framework_traces_are_merged_or_refused(traces: dict[str, Any], tmp_path: Path) -> None:
    rng = random.Random(f"framework-{SEED}")
    found: list[str] = []
    with tally("traces: mutated framework traces through collect --merge",
               "a merge of a mutated trace_view.json (and report of what it wrote)") as counts:
        for case in range(CI_INPUTS * SCALE):
            framework = tmp_path / "trace_view.json"
            text = mutate_document(rng, json.loads(json.dumps(traces["framework"])))
            framework.write_bytes(text.encode("utf-8", "surrogatepass"))
            out = tmp_path / f"merged{case % 2}.{'json' if case % 2 else 'pftrace'}"
            out.unlink(missing_ok=True)
            code, text = run("collect", traces["ranks"], "-o", out, "--merge", framework)
            _count(counts, found, f"case {case} (seed {SEED}) merge", code, text)
            if code == 0 and out.exists():
                code, text = run("report", out)
                _count(counts, found, f"case {case} (seed {SEED}) report of the merge", code, text)
    assert not found, "\n\n".join(found)


def test_the_mutations_are_seeded_and_change_the_input() -> None:
    document = framework_document(0, 100)
    first = mutate_document(random.Random(5), json.loads(json.dumps(document)))
    assert first == mutate_document(random.Random(5), json.loads(json.dumps(document)))
    assert any(mutate_document(random.Random(s), json.loads(json.dumps(document))) != json.dumps(document)
               for s in range(5))
    assert mutate_bytes(random.Random(5), b"x" * 100) == mutate_bytes(random.Random(5), b"x" * 100)
