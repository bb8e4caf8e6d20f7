"""The output formats registry (runtime/formats.py): JSON and .pftrace are written with
the same bytes as before it (files written by main f2edc03 on the demo data), and the
format is chosen as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from optrace.runtime import formats
from optrace.runtime.collect import CollectOptions, collect
from optrace.runtime.demo import write_demo
from optrace.runtime.trace_files import parse_split, split_name

DATA = Path(__file__).parent / "data" / "formats"


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """data/formats/README.md's demo, collected from relative paths as they were."""
    write_demo(tmp_path / "demo", ranks=2, launches=2, aic=1, seed=0)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("name", ["demo.json", "demo.json.gz"])
def test_json_bytes_are_unchanged(demo: Path, name: str) -> None:
    result = collect(Path("demo"), Path(name))
    assert result.written
    assert (demo / name).read_bytes() == (DATA / name).read_bytes()


def test_pftrace_bytes_are_unchanged(demo: Path) -> None:
    collect(Path("demo"), Path("demo.pftrace"))
    assert (demo / "demo.pftrace").read_bytes() == (DATA / "demo.pftrace").read_bytes()


@pytest.mark.parametrize("name, part", [("demo.pftrace", "demo.rank000.pftrace"),
                                        ("demo.json", "demo.rank001.json")])
def test_split_files_are_unchanged(demo: Path, name: str, part: str) -> None:
    collect(Path("demo"), Path(name), CollectOptions(split=parse_split("rank")))
    assert (demo / part).read_bytes() == (DATA / part).read_bytes()


def test_format_asked_for_wins_over_the_name(demo: Path) -> None:
    collect(Path("demo"), Path("named.json"), CollectOptions(format="perfetto"))
    assert (demo / "named.json").read_bytes() == (DATA / "demo.pftrace").read_bytes()


@pytest.mark.parametrize("name, expected", [
    ("t.json", "json"), ("t.json.gz", "json"), ("t.pftrace", "perfetto"), ("t.pftrace.gz", "perfetto"),
    ("t.perfetto-trace", "perfetto"), ("t.trace", "json"), ("t", "json"),
])
def test_format_by_name(name: str, expected: str) -> None:
    assert formats.output_format(Path(name), None).name == expected


def test_unknown_format_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"--format must be json,? .*perfetto.*, not 'csv'"):
        formats.output_format(Path("t.json"), "csv")


def test_split_names_keep_every_known_suffix() -> None:
    assert split_name(Path("t.pftrace.gz"), "rank001").name == "t.rank001.pftrace.gz"
    assert split_name(Path("t.json.gz"), "part000").name == "t.part000.json.gz"
    assert split_name(Path("t.pb"), "rank000").name == "t.rank000.pb"


def test_each_format_declares_how_it_is_recognised_and_read(tmp_path: Path) -> None:
    """One entry per format says its suffixes, writer, merge and reader: load_spans reads
    through the entry that recognises the input, never by a suffix list of its own."""
    write_demo(tmp_path / "demo", ranks=2, launches=2, aic=1, seed=0)
    pytest.importorskip("duckdb", reason="DuckDB is the [query] extra (the [test] extra brings it)")
    written = {}
    for f in formats.FORMATS:
        out = tmp_path / f"t{f.suffixes[-1]}"
        collect(tmp_path / "demo", out, CollectOptions(format=f.name))
        written[f.name] = out
        assert formats.input_format(out) is f
        assert f.reader()(out).ts.size == formats.load_spans(out).ts.size > 0
    # a Perfetto trace under another name is known by its first bytes; a folder of rank
    # files is no format's (load_spans decodes it)
    renamed = tmp_path / "trace.bin"
    renamed.write_bytes(written["perfetto"].read_bytes())
    assert formats.input_format(renamed) is formats.PERFETTO
    assert formats.input_format(tmp_path / "demo") is None
