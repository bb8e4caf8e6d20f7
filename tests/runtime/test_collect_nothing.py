"""collect with nothing to show: `--labels` that match nothing, or a run that
decodes to no span — a warning on stderr, nothing written, exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest
from rt_helpers import rank_buffer, write_point_map
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.cli.collect_fast import run_collect
from optrace.runtime.save import reset_launch_counters, save_profiling_data
from optrace.runtime.synth import new_buffer


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    reset_launch_counters()


def spans_dir(tmp_path: Path, ranks: int = 3) -> Path:
    directory = tmp_path / "prof"
    for rank in range(ranks):
        save_profiling_data(rank_buffer(rank=rank).data, rank, directory, aic_cores=2, barrier=True)
    write_point_map(directory)
    return directory


def empty_dir(tmp_path: Path, ranks: int = 3) -> Path:
    """Rank files whose slots hold no record (the kernel ran without writing a point)."""
    directory = tmp_path / "empty"
    for rank in range(ranks):
        save_profiling_data(new_buffer(6, 128), rank, directory, aic_cores=2, barrier=True)
    write_point_map(directory)
    return directory


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_labels_that_match_nothing(tmp_path: Path, jobs: str, capsys: pytest.CaptureFixture[str]) -> None:
    directory = spans_dir(tmp_path)
    out = tmp_path / "t.json"
    code = run_collect(directory, out, labels="moe,dispatch", jobs=int(jobs))
    captured = capsys.readouterr()
    assert code == 1
    assert "optrace: warning: --labels moe,dispatch: no label of" in captured.err
    assert "nothing written" in captured.err and "wrote" not in captured.out
    assert not out.exists() and leftovers(tmp_path) == []


def test_labels_in_the_map_without_spans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # "processing combine" is in the map and every core ran it, but --cores aiv9 names a
    # core no rank has: the filters together keep no span.
    directory = spans_dir(tmp_path)
    out = tmp_path / "t.json"
    code = run_collect(directory, out, labels="processing combine", cores="aiv9")
    captured = capsys.readouterr()
    assert code == 1 and not out.exists()
    assert "no span kept by --labels / --cores in 3 decoded rank files: nothing written to" in captured.err


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_run_that_decodes_no_span(tmp_path: Path, jobs: str) -> None:
    directory = empty_dir(tmp_path)
    out = tmp_path / "t.json.gz" if jobs == "1" else tmp_path / "t.json"
    out.write_bytes(b"an earlier trace")
    result = CliRunner().invoke(app, ["collect", str(directory), "-o", str(out), "-j", jobs])
    assert result.exit_code == 1
    assert f"{directory}: no span in 3 decoded rank files: nothing written to {out}" in result.stderr
    assert "wrote" not in result.stdout
    assert out.read_bytes() == b"an earlier trace"  # left as it was
    assert leftovers(tmp_path) == []


def test_unreadable_ranks_and_no_span_is_still_bad_input(tmp_path: Path) -> None:
    directory = empty_dir(tmp_path, ranks=1)
    (directory / "rank001.pt").write_bytes(b"nope")
    out = tmp_path / "t.json"
    result = CliRunner().invoke(app, ["collect", str(directory), "-o", str(out)])
    assert result.exit_code == 2  # the worst of the two: a rank file unusable
    assert "rank001.pt" in result.stderr and "nothing written" in result.stderr
    assert not out.exists()


def test_one_span_is_enough(tmp_path: Path) -> None:
    directory = spans_dir(tmp_path, ranks=1)
    out = tmp_path / "t.json"
    result = CliRunner().invoke(app, ["collect", str(directory), "-o", str(out), "--labels",
                                      "processing dispatch wait"])
    assert result.exit_code == 0, result.output
    assert out.is_file()


# ------------------------------------------------------------- .pftrace and --split alike

SPLITS = [
    ("t.pftrace", []),
    ("t.pftrace.gz", []),
    ("t.json", ["--split", "rank"]),
    ("t.pftrace", ["--split", "rank"]),
    ("t.json.gz", ["--split", "1k"]),
    ("t.pftrace", ["--split", "1k"]),
]


def trace_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(("t.", ".t.")))


@pytest.mark.parametrize(("name", "options"), SPLITS)
def test_no_span_writes_no_pftrace_and_no_part(tmp_path: Path, name: str, options: list[str]) -> None:
    directory = empty_dir(tmp_path)
    out = tmp_path / name
    out.write_bytes(b"an earlier trace")
    earlier_part = tmp_path / name.replace("t.", "t.rank000.", 1)
    earlier_part.write_bytes(b"an earlier part")
    result = CliRunner().invoke(app, ["collect", str(directory), "-o", str(out), *options])
    assert result.exit_code == 1, result.output
    assert f"{directory}: no span in 3 decoded rank files: nothing written to {out}" in result.stderr
    assert "wrote" not in result.stdout
    assert out.read_bytes() == b"an earlier trace" and earlier_part.read_bytes() == b"an earlier part"
    assert trace_files(tmp_path) == sorted([out.name, earlier_part.name])  # no part, no temporary


@pytest.mark.parametrize(("name", "options"), SPLITS)
def test_filters_that_keep_no_span_write_no_pftrace_and_no_part(
    tmp_path: Path, name: str, options: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    directory = spans_dir(tmp_path)
    out = tmp_path / name
    split = options[1] if options else None
    code = run_collect(directory, out, labels="processing combine", cores="aiv9", split=split)
    assert code == 1
    assert "no span kept by --labels / --cores in 3 decoded rank files" in capsys.readouterr().err
    assert trace_files(tmp_path) == []
    code = run_collect(directory, out, labels="moe", split=split)  # not in the map
    assert code == 1 and "--labels moe: no label of" in capsys.readouterr().err
    assert trace_files(tmp_path) == []


@pytest.mark.parametrize(("name", "options"), SPLITS)
def test_one_span_writes_every_part(tmp_path: Path, name: str, options: list[str]) -> None:
    # Only rank 2 keeps a span (--ranks would drop the others; --cores keeps aic1 of every
    # rank, and only rank 2's rank file has records on it): the parts of ranks 0 and 1 are
    # written too, as with spans everywhere.
    directory = tmp_path / "mixed"
    for rank in range(3):
        data = rank_buffer(rank=rank).data if rank == 2 else new_buffer(6, 128)
        save_profiling_data(data, rank, directory, aic_cores=2, barrier=True)
    write_point_map(directory)
    out = tmp_path / name
    result = CliRunner().invoke(app, ["collect", str(directory), "-o", str(out), *options])
    assert result.exit_code == 0, result.output
    written = trace_files(tmp_path)
    assert written and not any(n.endswith(".tmp") for n in written)
    if options[:2] == ["--split", "rank"]:
        assert len(written) == 3 and "wrote 3 files" in result.stdout
    elif not options:
        assert written == [out.name]
