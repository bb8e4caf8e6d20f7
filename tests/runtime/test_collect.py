"""`optrace collect`: the trace it writes, filters, exit codes and bad input."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rt_helpers import FP, rank_buffer, run_entry, write_point_map
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime.collect import IntRanges, parse_int_set
from optrace.runtime.format import pack_event
from optrace.runtime.pt_writer import write_pt
from optrace.runtime.save import reset_launch_counters, save_profiling_data

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    reset_launch_counters()


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def profiling_dir(tmp_path: Path, ranks: int = 2, **kwargs: Any) -> Path:
    directory = tmp_path / "prof"
    for rank in range(ranks):
        save_profiling_data(rank_buffer(rank=rank, **kwargs).data, rank, directory, aic_cores=2,
                            barrier=True)
    write_point_map(directory)
    return directory


def events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        return list(json.load(handle)["traceEvents"])


def span_events(path: Path) -> list[dict[str, Any]]:
    """The spans: complete events other than the launch slices."""
    return [e for e in events(path) if e["ph"] == "X" and e.get("cat") != "optrace.launch"]


def test_collect_writes_a_chrome_trace(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path)
    result = invoke("collect", directory, "-o", tmp_path / "t.json")
    assert result.exit_code == 0, result.output
    assert "2 ranks, 12 cores with spans, 84 spans" in result.output
    trace = json.loads((tmp_path / "t.json").read_text())
    assert trace["otherData"]["ranks"][0]["barrier"] is True
    assert trace["otherData"]["point_map_fingerprint"] == FP
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    assert {e["args"]["name"] for e in meta if e["name"] == "process_name"} == {"Rank 0", "Rank 1"}
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    compute = [e for e in spans if e["name"] == "processing compute" and e["pid"] == 0 and e["tid"] == 0]
    assert [e["args"]["index"] for e in compute] == [0, 1, 2]
    assert all(e["args"]["extraId"] == 1 for e in compute)
    assert compute[0]["args"]["src"] == "op_kernel/op.h:16"
    root = next(e for e in spans if e["name"] == "processing" and e["tid"] == 0)
    assert root["ts"] == pytest.approx(3 / 50) and root["dur"] == pytest.approx(170 / 50)


def test_gzip_output_and_filters(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path, ranks=3)
    out = tmp_path / "t.json.gz"
    result = invoke("collect", directory, "-o", out, "--ranks", "1-2", "--cores", "aiv1-2",
                    "--labels", "processing dispatch")
    assert result.exit_code == 0, result.output
    spans = span_events(out)
    assert {e["pid"] for e in spans} == {1, 2}
    assert {e["tid"] for e in spans} == {3, 4}  # slots of AIV 1 and AIV 2
    assert {e["name"] for e in spans} == {"processing dispatch", "processing dispatch wait"}
    launches = [e for e in events(out) if e.get("cat") == "optrace.launch"]
    assert {(e["pid"], e["tid"], e["name"]) for e in launches} == {
        (pid, tid, "launch 0") for pid in (1, 2) for tid in (3, 4)}


def test_ranges_of_any_size_select_as_their_ends_say(tmp_path: Path) -> None:
    # A range is kept as its two ends: `0-99999999999` selects every rank at once (it was
    # expanded into a set of 10**11 numbers, gigabytes, never done), and ranges merge.
    directory = profiling_dir(tmp_path, ranks=3)
    ranks = parse_int_set("2,0-0,5-99999999999,1-1", "--ranks")
    assert [r for r in range(-2, 12) if r in ranks] == [0, 1, 2, *range(5, 12)]
    assert 99999999999 in ranks and 10**11 not in ranks and "1" not in ranks
    assert ranks == IntRanges([(0, 2), (5, 99999999999)]) and pickle.loads(pickle.dumps(ranks)) == ranks
    out = tmp_path / "t.json"
    result = invoke("collect", directory, "-o", out, "--ranks", "1-99999999999",
                    "--cores", "aiv0-99999999999")
    assert result.exit_code == 0, result.output
    assert {(e["pid"], e["tid"]) for e in span_events(out)} == {(r, t) for r in (1, 2) for t in (2, 3, 4, 5)}


def test_clock_override(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path, ranks=1)
    assert invoke("collect", directory, "-o", tmp_path / "t.json", "--clock-mhz", "100").exit_code == 0
    root = next(e for e in events(tmp_path / "t.json") if e.get("name") == "processing")
    assert root["dur"] == pytest.approx(170 / 100)


def test_rank_offsets(tmp_path: Path) -> None:
    # The offsets are a manual correction on top of the placement by save's anchors.
    directory = profiling_dir(tmp_path)
    assert invoke("collect", directory, "-o", tmp_path / "a.json").exit_code == 0
    assert invoke("collect", directory, "-o", tmp_path / "t.json", "--rank-offsets", "1=100").exit_code == 0
    placed, moved = ({e["pid"]: e["ts"] for e in events(tmp_path / name)
                      if e.get("name") == "processing" and e["tid"] == 0} for name in ("a.json", "t.json"))
    assert moved[0] == pytest.approx(placed[0])
    assert moved[1] - placed[1] == pytest.approx(100)


def test_negative_rank_offsets_render_every_core(tmp_path: Path) -> None:
    """A negative shift makes timestamps negative: those rows take the reference row
    builder (a '-' must touch its digits) and keep every core's tid."""
    directory = profiling_dir(tmp_path)
    plain = events_after(tmp_path, directory, "plain.json")
    shifted = events_after(tmp_path, directory, "shifted.json", "--rank-offsets", "1=-1000000")
    assert len(plain) == len(shifted)
    for a, b in zip(plain, shifted, strict=True):
        assert (a["pid"], a.get("tid"), a["name"]) == (b["pid"], b.get("tid"), b["name"])
        if a["ph"] == "X":
            assert b["ts"] == pytest.approx(a["ts"] - (1_000_000 if a["pid"] == 1 else 0))


def events_after(tmp_path: Path, directory: Path, name: str, *options: str) -> list[dict[str, Any]]:
    assert invoke("collect", directory, "-o", tmp_path / name, *options).exit_code == 0
    return events(tmp_path / name)


def test_several_launches_share_their_rank_process(tmp_path: Path) -> None:
    directory = tmp_path / "prof"
    for _ in range(2):  # the same cycles twice: the second cannot be placed by them
        save_profiling_data(rank_buffer().data, 0, directory, aic_cores=2)
    write_point_map(directory)
    result = invoke("collect", directory, "-o", tmp_path / "t.json")
    assert result.exit_code == 0, result.output
    assert "1 launch laid end to end" in result.output
    assert "rank000_launch1.pt: its cycles overlap rank000.pt's" in result.output
    names = {e["args"]["name"] for e in events(tmp_path / "t.json") if e.get("name") == "process_name"}
    assert names == {"Rank 0"}
    launches = [e for e in events(tmp_path / "t.json") if e.get("cat") == "optrace.launch"]
    assert {e["name"] for e in launches if e["tid"] == 0} == {"launch 0", "launch 1"}


def test_skipped_records_exit_1_with_reasons(tmp_path: Path) -> None:
    directory = tmp_path / "prof"
    # fingerprint + B + 4 dispatch + 12 compute + 2 combine + E = 21 records, capacity 15
    buffer = rank_buffer(aic=1, aiv=0, words=32, loops=6)
    save_profiling_data(buffer.data, 0, directory, aic_cores=1)
    write_point_map(directory)
    result = invoke("collect", directory, "-o", tmp_path / "t.json")
    assert result.exit_code == 1
    assert "skipped 6 records: 6 dropped" in result.output
    assert "AIC 0: 6 records dropped (slot holds 15, the core wrote 21)" in result.output
    assert "2 B records without their E (closed and flagged)" in result.output


def test_legacy_files_decode(tmp_path: Path) -> None:
    directory = tmp_path / "prof"
    directory.mkdir()
    (directory / "rank000.pt").write_bytes((DATA / "rank000_legacy.pt").read_bytes())
    (directory / "point_map.json").write_text(json.dumps({"points": {
        "1": {"label": "processing", "file": "a.h", "line": 1, "event_type": "B"},
        "2": {"label": "processing", "file": "a.h", "line": 9, "event_type": "E"},
        "3": {"label": "processing loop", "file": "a.h", "line": 3, "event_type": "B"},
        "4": {"label": "processing loop", "file": "a.h", "line": 5, "event_type": "E"},
    }}))
    result = invoke("collect", directory, "-o", tmp_path / "t.json")
    assert result.exit_code == 0, result.output
    assert "1 unused core slots" in result.output
    names = {e["args"]["name"] for e in events(tmp_path / "t.json") if e.get("name") == "thread_name"}
    assert names == {"AIC 0", "AIC 1", "AIV 0", "AIV 1", "AIV 2"}


# ----------------------------------------------------------------------------- bad input


def test_no_rank_files(tmp_path: Path) -> None:
    result = invoke("collect", tmp_path, "-o", tmp_path / "t.json")
    assert result.exit_code == 2
    assert f"{tmp_path}: no rank*.pt files" in result.output
    assert not (tmp_path / "t.json").exists()


def test_missing_directory(tmp_path: Path) -> None:
    result = invoke("collect", tmp_path / "nope", "-o", tmp_path / "t.json")
    assert result.exit_code == 2 and "no such directory" in result.output


def test_no_map_beside_rank_files(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path)
    (directory / "point_map.json").unlink()
    result = invoke("collect", directory, "-o", tmp_path / "t.json")
    assert result.exit_code == 2 and "pass --point-map" in result.output


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "point map is not valid JSON"),
        ('{"x": 1}', "not a point map"),
        ('{"points": {"1": {"label": "a", "event_type": "X"}}}', "'event_type' must be"),
        ('{"points": {"0": {"label": "a", "event_type": "B"}}}', "id 0 is reserved"),
    ],
)
def test_unusable_map(tmp_path: Path, content: str, message: str) -> None:
    directory = profiling_dir(tmp_path, ranks=1)
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = invoke("collect", directory, "--point-map", bad, "-o", tmp_path / "t.json")
    assert result.exit_code == 2
    assert f"{bad}: " in result.output and message in result.output
    assert "Traceback" not in result.output


def test_missing_map_file(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path, ranks=1)
    result = invoke("collect", directory, "--point-map", tmp_path / "nope.json", "-o", tmp_path / "t.json")
    assert result.exit_code == 2 and f"{tmp_path / 'nope.json'}: point map not found" in result.output


def _bad_rank_files(directory: Path) -> dict[str, str]:
    """Writes one broken rank file per kind; returns file name -> expected message part."""
    good = rank_buffer().data
    (directory / "rank001.pt").write_bytes(b"")
    (directory / "rank002.pt").write_bytes((directory / "rank000.pt").read_bytes()[:300])
    write_pt([good.astype(np.int32)], directory / "rank003.pt")
    write_pt([good[:, :100]], directory / "rank004.pt")  # fine shape, but see rank 5
    write_pt({"optrace_profiling": 1, "meta": {"slot_words": 64}, "data": good}, directory / "rank005.pt")
    negative = good.copy()
    negative[0, 0] = -5
    write_pt([negative[:2], negative[2:]], directory / "rank006.pt")
    beyond = good.copy()
    beyond[1, 0] = 1 << 40
    write_pt([beyond[:2], beyond[2:]], directory / "rank007.pt")
    write_pt({"optrace_profiling": 99, "meta": {}, "data": good}, directory / "rank008.pt")
    return {
        "rank001.pt": "empty file",
        "rank002.pt": "not a readable .pt zip",
        "rank003.pt": "dtype int32, expected int64",
        "rank005.pt": "has 128 words per slot, the metadata says 64",
        "rank006.pt": "AIC 0: counter -5 is negative",
        "rank007.pt": "AIC 1: counter 1099511627776 is past what the layout can explain",
        "rank008.pt": "format version 99 is newer",
    }


def test_bad_rank_files_are_named_and_others_still_decoded(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path, ranks=1)
    expected = _bad_rank_files(directory)
    result = invoke("collect", directory, "-o", tmp_path / "t.json")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for name, message in expected.items():
        line = next((ln for ln in result.output.splitlines() if name in ln), "")
        assert message in line, (name, result.output)
    pids = {e["pid"] for e in events(tmp_path / "t.json") if e["ph"] == "X"}
    assert pids == {0, 4, 6, 7}  # good rank, odd-width legacy, and the two with bad slots


def test_unknown_ids_exit_1(tmp_path: Path) -> None:
    directory = tmp_path / "prof"
    data = rank_buffer(aic=1, aiv=0).data
    n = int(data[0, 0])
    data[0, n] = pack_event(77)
    data[0, data.shape[1] - 1 - n] = data[0, data.shape[1] - n]
    data[0, 0] = n + 1
    save_profiling_data(data, 0, directory, aic_cores=1)
    write_point_map(directory)
    result = invoke("collect", directory, "-o", tmp_path / "t.json")
    assert result.exit_code == 1
    assert "ids not in the point map (77)" in result.output
    assert "the map matches the build fingerprint, so these records are corrupt" in result.output


def test_bad_filters_are_usage_errors(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path, ranks=1)
    for option, value in (("--ranks", "x"), ("--cores", "gpu1"), ("--rank-offsets", "1:2")):
        result = invoke("collect", directory, "-o", tmp_path / "t.json", option, value)
        assert result.exit_code == 2 and option in result.output


def test_console_script_end_to_end(tmp_path: Path) -> None:
    """The real process: what users and the benchmark run."""
    directory = profiling_dir(tmp_path, ranks=1)
    done = subprocess.run(
        [sys.executable, "-m", "optrace", "collect", str(directory), "-o", str(tmp_path / "t.json")],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no progress bar when stderr is not a terminal
    assert json.loads((tmp_path / "t.json").read_text())["otherData"]["format"] == "optrace-chrome"



def test_rows_written_in_several_blocks_stay_valid_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optrace.runtime import chrome

    monkeypatch.setattr(chrome, "_ROWS_PER_BLOCK", 5)  # the rank's 42 spans span 9 blocks
    directory = profiling_dir(tmp_path, ranks=1)
    assert invoke("collect", directory, "-o", tmp_path / "t.json").exit_code == 0
    assert len(span_events(tmp_path / "t.json")) == 42


def test_internal_error_exits_3_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optrace.runtime import collect as collect_module

    def broken(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("decoder bug")

    monkeypatch.setattr(collect_module, "collect", broken)
    monkeypatch.delenv("OPTRACE_DEBUG", raising=False)
    result = invoke("collect", profiling_dir(tmp_path, ranks=1), "-o", tmp_path / "t.json")
    assert result.exit_code == 3
    assert "internal error: RuntimeError: decoder bug" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow  # imports torch (~1.5 s)
def test_torch_reader_agrees_with_numpy_reader() -> None:
    pytest.importorskip("torch", reason="torch is not installed (the [test] extra pins a CPU build)")
    from optrace.runtime.pt_reader import load_pt, load_pt_with_torch

    for name in ("rank000_legacy.pt", "rank002_torchdict.pt"):
        ours, theirs = load_pt(DATA / name), load_pt_with_torch(DATA / name)
        flat_ours = ours if isinstance(ours, list) else [ours["data"]]
        flat_theirs = theirs if isinstance(theirs, list) else [theirs["data"]]
        for a, b in zip(flat_ours, flat_theirs, strict=True):
            np.testing.assert_array_equal(a, b)


def test_unwritable_output_is_bad_input(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = invoke("collect", profiling_dir(tmp_path, ranks=1), "-o", blocker / "sub" / "t.json")
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_collect_runs_without_the_cli_framework(tmp_path: Path) -> None:
    """The console script hands plain collect invocations to the fast path: same trace,
    same summary and exit code as the typer command, and typer is never imported."""
    directory = profiling_dir(tmp_path, ranks=2)
    code, typer_loaded, out, err = run_entry(["collect", str(directory), "-o", str(tmp_path / "fast.json"),
                                          "--ranks=0-1", "--labels", "processing dispatch", "-j", "0"],
                                         tmp_path)
    assert (code, typer_loaded, err) == (0, False, "")
    slow = invoke("collect", directory, "-o", tmp_path / "slow.json", "--ranks=0-1", "--labels",
                  "processing dispatch", "-j", "0")
    assert slow.exit_code == 0
    first = out.splitlines()[0].replace("fast.json", "X")
    assert first == slow.output.splitlines()[0].replace("slow.json", "X")
    assert (tmp_path / "fast.json").read_bytes() == (tmp_path / "slow.json").read_bytes()


TOML_PROBE = r"""
import os, sys
import optrace.cli.start
optrace.cli.start.finish = sys.exit
sys.argv = ["optrace", "collect", *sys.argv[1:]]
try:
    optrace.cli.start.main()
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
print("\nTOML", "tomllib" in sys.modules, code)
"""


def test_a_collect_reads_the_user_config_only_where_there_is_one(tmp_path: Path) -> None:
    """Without a user config, collect does not import a TOML parser (a tenth of what its
    own modules cost from process start); with one, its `[limits]` still hold."""
    directory = profiling_dir(tmp_path, ranks=1)
    config_home = tmp_path / "config"
    env = {**os.environ, "XDG_CONFIG_HOME": str(config_home)}

    def run() -> tuple[bool, str]:
        argv = [sys.executable, "-c", TOML_PROBE, str(directory), "-o", str(tmp_path / "t.json")]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, check=False)
        _, _, mark = done.stdout.rpartition("\nTOML ")
        imported, code = mark.split()
        return imported == "True", code

    assert run() == (False, "0")
    (config_home / "optrace").mkdir(parents=True)
    (config_home / "optrace" / "config.toml").write_text("[limits]\nrank_bytes = 64\n")
    assert run() == (True, "2")  # the rank file is past the user's bound: refused


@pytest.mark.parametrize("argv, typer_expected, exit_code", [
    (["--help"], True, 0),                       # help is the full CLI's
    (["-ofile.json"], True, 0),                  # a spelling the fast parser leaves to typer
    (["--output"], True, 2),                     # missing value: typer's usage error
    (["--clock-mhz", "fast", "-o", "t.json"], True, 2),  # typer reports the invalid number
    (["--ranks", "x", "-o", "t.json"], False, 2),  # parsed; our own usage error
])
def test_collect_arguments_the_fast_path_leaves_to_typer(
    tmp_path: Path, argv: list[str], typer_expected: bool, exit_code: int
) -> None:
    directory = profiling_dir(tmp_path, ranks=1)
    code, typer_loaded, out, err = run_entry(["collect", str(directory), *argv], tmp_path)
    assert (typer_loaded, code) == (typer_expected, exit_code)
    if argv == ["--help"]:
        assert "--point-map" in out and "--jobs" in out
    elif argv == ["-ofile.json"]:
        assert (tmp_path / "file.json").is_file()
    else:
        assert "Traceback" not in err and err.strip()


def test_the_console_script_exits_with_collects_code_and_its_output(tmp_path: Path) -> None:
    """The real entry leaves by os._exit: the exit code and the flushed output survive."""
    directory = tmp_path / "prof"
    save_profiling_data(rank_buffer(aic=1, aiv=0, words=32, loops=6).data, 0, directory, aic_cores=1)
    write_point_map(directory)  # 6 records past the slot's capacity: exit 1
    done = subprocess.run([sys.executable, "-m", "optrace", "collect", str(directory), "-o",
                           str(tmp_path / "t.json")], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("wrote ") and "6 records dropped" in done.stdout
    assert events(tmp_path / "t.json")


def test_parse_fast_spellings() -> None:
    from optrace.cli.collect_fast import parse_fast

    parsed = parse_fast(["d", "--output=t.json", "--point-map", "m.json", "--ignore-fingerprint",
                         "--clock-mhz", "100", "-j", "2"])
    assert parsed == {"profiling_dir": Path("d"), "output": Path("t.json"), "point_map": Path("m.json"),
                      "ignore_fingerprint": True, "clock_mhz": 100.0, "jobs": 2}
    assert parse_fast(["d"]) is None  # -o is required: typer says so
    assert parse_fast(["d", "e", "-o", "t"]) is None  # two directories
    assert parse_fast(["d", "-o", "t", "--", "x"]) is None


@pytest.mark.parametrize("jobs", ["0", "1", "3"])
def test_any_number_of_processes_writes_the_same_bytes(tmp_path: Path, jobs: str) -> None:
    directory = profiling_dir(tmp_path, ranks=4)
    (directory / "rank009.pt").write_bytes(b"not a zip")  # an error in the middle of the stream
    reference = tmp_path / "ref.json"
    assert invoke("collect", directory, "-o", reference, "-j", "0").exit_code == 2
    result = invoke("collect", directory, "-o", tmp_path / "t.json", "-j", jobs)
    assert result.exit_code == 2 and "rank009.pt" in result.output
    assert (tmp_path / "t.json").read_bytes() == reference.read_bytes()


def test_the_summary_counts_ranks_and_launches_apart(tmp_path: Path) -> None:
    """A rank file is one launch of one rank: 2 ranks x 8 launches are 2 ranks, 8 launches
    each, and a rank's cores are its tracks whatever the launches (before: "16 ranks, 192
    cores", then "192 core rows")."""
    assert invoke("demo-data", tmp_path / "demo").exit_code == 0
    result = invoke("collect", tmp_path / "demo", "-o", tmp_path / "t.json")
    assert result.exit_code == 0, result.output
    assert "2 ranks, 8 launches each, 24 cores with spans" in result.output
