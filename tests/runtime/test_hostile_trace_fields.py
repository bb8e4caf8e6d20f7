"""Trace fields of the wrong type: what report, compare and inspect read from a trace
(pids, tids, collect's rank table), a point map (labels) and rank files (the tag).

Whatever the file holds, the command exits 0, 1 or 2 — never 3 — and a refusal is
`path: message` naming the field (docs/faults.md, "Hostile traces and numbers").
"""

from __future__ import annotations

import functools
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_in_thread import assert_refused, run_cli

from optrace.runtime import pt_writer
from optrace.runtime.demo import write_demo
from optrace.runtime.pt_reader import load_pt

cli = functools.partial(run_cli, timeout=120)


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], bytes]:
    """A demo profiling directory, collect's JSON trace of it, and its .pftrace's bytes."""
    tmp = tmp_path_factory.mktemp("collected")
    made = write_demo(tmp / "prof", ranks=1, launches=2, aic=1, seed=5, speedup=0.0)
    for name in ("t.json", "t.pftrace"):
        code, out = cli("collect", made.directory, "-o", tmp / name)
        assert code == 0, out
    return made.directory, json.loads((tmp / "t.json").read_text()), (tmp / "t.pftrace").read_bytes()


def _first(document: dict[str, Any], phase: str, name: str | None = None) -> dict[str, Any]:
    return next(e for e in document["traceEvents"]
                if e["ph"] == phase and (name is None or e["name"] == name))


def on_span(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: _first(d, "X").update(fields)


def on_thread_name(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: _first(d, "M", "thread_name").update(fields)


def on_other(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["otherData"].update(fields)


def on_rank(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["otherData"]["ranks"][0].update(fields)


def drop_marker(**fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["traceEvents"].append({"ph": "i", "name": "optrace: 5 records dropped (slot full)",
                                              "ts": 1.0, "pid": 0, "tid": 0, **fields})


# Each: the change to collect's JSON trace, and what the message says (exit 2 naming it).
TRACE_REFUSED: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "pid-list": (on_span(pid=[1]), "pid must be an integer or a string, not [1]"),
    "pid-object": (on_span(pid={"a": 1}), "pid must be an integer or a string, not {'a': 1}"),
    "tid-list": (on_span(tid=[0, 1]), "tid must be an integer or a string, not [0, 1]"),
    "tid-object": (on_span(tid={}), "tid must be an integer or a string, not {}"),
    "pid-float": (on_span(pid=0.5), "pid must be an integer or a string, not 0.5"),
    "pid-lone-surrogate": (on_span(pid="\ud800"), "pid '\\ud800' holds a lone surrogate"),
    "tid-lone-surrogate": (on_span(tid="\udc00"), "tid '\\udc00' holds a lone surrogate"),
    "tid-nul": (on_span(tid="a\x00"), "tid 'a\\x00' holds a NUL character"),
    "thread-name-event-pid-list": (on_thread_name(pid=[0]), "pid must be an integer or a string, not [0]"),
    "drop-marker-pid-list": (drop_marker(pid=[0]), "pid must be an integer or a string, not [0]"),
    "ranks-a-number": (on_other(ranks=5), "ranks metadata must be a list, not 5"),
    "ranks-a-string": (on_other(ranks="0-3"), "ranks metadata must be a list, not '0-3'"),
    "ranks-an-object": (on_other(ranks={"0": {}}), "ranks metadata must be a list"),
    "rank-entry-a-number": (on_other(ranks=[7]), "ranks metadata: entry 0 must be an object, not 7"),
    "rank-pid-list": (on_rank(pid=[0]), "ranks metadata: entry 0: pid must be an integer or a string"),
    "rank-tag-lone-surrogate": (on_rank(tag="\ud800"), "ranks metadata: entry 0: tag '\\ud800' holds a lone "
                                "surrogate"),
    "rank-tag-list": (on_rank(tag=["a"]), "ranks metadata: entry 0: tag must be a string or null"),
    "rank-launch-past-range": (on_rank(launch=10**20),
                               "ranks metadata: entry 0: launch must be an integer in [0, 2147483647]"),
    "rank-launch-true": (on_rank(launch=True), "ranks metadata: entry 0: launch must be an integer"),
}

#: Instants: only inspect reads them (collect's drop markers).
READ_BY_INSPECT_ONLY = {"drop-marker-pid-list"}


def _trace_commands(path: Path, tmp_path: Path) -> dict[str, list[object]]:
    return {"report": ["report", path], "report --html": ["report", path, "--html", tmp_path / "r.html"],
            "report --format json": ["report", path, "--format", "json"], "inspect": ["inspect", path],
            "compare": ["compare", path, path]}


@pytest.mark.parametrize("command", ["report", "report --html", "report --format json", "inspect", "compare"])
@pytest.mark.parametrize("case", list(TRACE_REFUSED))
def test_trace_fields_of_the_wrong_type_are_refused(
    collected: tuple[Path, dict[str, Any], bytes], tmp_path: Path, case: str, command: str
) -> None:
    change, words = TRACE_REFUSED[case]
    document = json.loads(json.dumps(collected[1]))
    change(document)
    path = tmp_path / "trace.json"
    path.write_bytes(json.dumps(document).encode("utf-8", "surrogatepass"))
    code, out = cli(*_trace_commands(path, tmp_path)[command])
    if case in READ_BY_INSPECT_ONLY and not command.startswith("inspect"):
        assert code == 0 and "Traceback" not in out, out  # not read: report and compare take no instants
        return
    assert_refused(code, out, path, words)
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("command", ["report", "inspect", "compare"])
def test_pftrace_ranks_metadata_of_the_wrong_type_is_refused(
    collected: tuple[Path, dict[str, Any], bytes], tmp_path: Path, command: str
) -> None:
    data = collected[2]
    # collect's metadata is JSON in a trace attribute: its ranks list swapped for a number
    # padded to the same length, so no length prefix changes.
    start = data.rindex(b'"ranks":[')  # the top level's, after alignment's
    end = data.index(b"]", start) + 1
    path = tmp_path / "trace.pftrace"
    path.write_bytes(data[:start] + b'"ranks":5'.ljust(end - start) + data[end:])
    words = "ranks metadata must be a list, not 5"
    code, out = cli(*_trace_commands(path, tmp_path)[command])
    assert_refused(code, out, path, words)


@pytest.mark.parametrize("label", ["processing\ud800", "processing\x00"], ids=["lone-surrogate", "nul"])
@pytest.mark.parametrize("command", ["report", "report --html", "compare", "collect .pftrace",
                                     "collect .json"])
def test_a_point_map_label_that_is_not_text_is_refused(tmp_path: Path, label: str, command: str) -> None:
    made = write_demo(tmp_path / "prof", ranks=1, launches=1, aic=1, seed=5, speedup=0.0).directory
    pmap = made / "point_map.json"
    document = json.loads(pmap.read_text())
    for point in document["points"].values():
        if point["label"] == "processing":
            point["label"] = label
    pmap.write_bytes(json.dumps(document).encode("utf-8", "surrogatepass"))
    written = tmp_path / ("t.pftrace" if command.endswith("pftrace") else "t.json")
    args: list[object] = {
        "report": ["report", made], "report --html": ["report", made, "--html", tmp_path / "r.html"],
        "compare": ["compare", made, made], "collect .pftrace": ["collect", made, "-o", written],
        "collect .json": ["collect", made, "-o", written]}[command]
    words = "holds a lone surrogate" if "\ud800" in label else "holds a NUL character"
    code, out = cli(*args)
    assert_refused(code, out, pmap, f": label {label!r} {words}")
    assert not written.exists() and not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("command", ["inspect file", "inspect dir", "inspect dir --format json", "report"])
def test_a_rank_files_tag_that_is_not_text_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    made = write_demo(tmp_path / "prof", ranks=1, launches=1, aic=1, seed=5, speedup=0.0).directory
    rank = sorted(made.glob("rank*.pt"))[0]
    loaded = load_pt(rank)
    loaded["meta"]["tag"] = "a\ud800"

    def lone_surrogates_kept(self: Any, value: str) -> None:  # as a pickle from elsewhere may hold them
        data = value.encode("utf-8", "surrogatepass")
        self.out.write(b"X" + struct.pack("<I", len(data)) + data)

    monkeypatch.setattr(pt_writer._PickleEmitter, "_str", lone_surrogates_kept)
    with open(rank, "wb") as handle:
        pt_writer.write_pt(loaded, handle)
    args: list[object] = {"inspect file": ["inspect", rank], "inspect dir": ["inspect", made],
                          "inspect dir --format json": ["inspect", made, "--format", "json"],
                          "report": ["report", made]}[command]
    code, out = cli(*args)
    assert_refused(code, out, rank, "metadata field 'tag' 'a\\ud800' holds a lone surrogate")


@pytest.mark.parametrize("role", ["a\x00b", 7], ids=["nul", "a-number"])
@pytest.mark.parametrize("command", ["collect .json", "collect .pftrace", "report"])
def test_a_rank_files_aiv_role_that_is_not_text_is_refused(tmp_path: Path, role: object,
                                                            command: str) -> None:
    """An AIV role names the core's thread in the trace ("AIV 1 (recv)"): a NUL or what is
    no string is refused naming the rank file (collect wrote traces its readers refused)."""
    made = write_demo(tmp_path / "prof", ranks=1, launches=1, aic=1, seed=5, speedup=0.0).directory
    rank = sorted(made.glob("rank*.pt"))[0]
    loaded = load_pt(rank)
    loaded["meta"]["aiv_roles"] = {"0": "send", "1": role}
    with open(rank, "wb") as handle:
        pt_writer.write_pt(loaded, handle)
    written = tmp_path / ("t.pftrace" if command.endswith("pftrace") else "t.json")
    args: list[object] = ["report", made] if command == "report" else ["collect", made, "-o", written]
    code, out = cli(*args)
    words = ("metadata field 'aiv_roles' '1: a\\x00b' holds a NUL" if role != 7
             else "metadata field 'aiv_roles' must be a dict of role names")
    assert code in (1, 2) and words in out and "Traceback" not in out, out
    assert not written.exists()


def test_a_point_map_file_named_in_bytes_that_are_not_utf8_is_collected_to_pftrace(
        tmp_path: Path) -> None:
    """A source path of non-UTF-8 bytes reads back as lone surrogates (the point map keeps
    paths as bytes): a .pftrace writes the path's own bytes (its encoding crashed collect,
    exit 3), and the readers read it."""
    made = write_demo(tmp_path / "prof", ranks=1, launches=1, aic=1, seed=5, speedup=0.0).directory
    pmap = made / "point_map.json"
    document = json.loads(pmap.read_text())
    for point in document["points"].values():
        point["file"] = "op_kernel/\udcb7\udcd6.h"
    pmap.write_text(json.dumps(document))
    trace = tmp_path / "t.pftrace"
    code, out = cli("collect", made, "-o", trace)
    assert code == 0 and "Traceback" not in out, out
    assert b"op_kernel/\xb7\xd6.h" in trace.read_bytes()
    for command in (("report", trace), ("inspect", trace)):
        code, out = cli(*command)
        assert code == 0, out
