"""The buffer's layout by the kernel's core mix (issue #11 §3): a kernel that declares
one core type writes its core i to slot i and has no slots of the other type; the point
map records the mix ("cores"), and save / collect lay the buffer out by it. Maps
without the key (older ones) read as mixed, as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import point_map_document, rank_buffer
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.codemods.layer_common import python_numel_expr, sizes_header_content
from optrace.runtime.format import PROF_SIZE_PER_CORE, SlotLayout, layout_for_cores
from optrace.runtime.pointmap import parse_point_map
from optrace.runtime.rankfile import read_rank_file
from optrace.runtime.save import reset_launch_counters, save_profiling_data

CORES = 4  # cores that ran
SPARE = 2  # slots allocated past them (the host sizes by an upper bound)


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    reset_launch_counters()


def write_map(directory: Path, cores: list[str] | None) -> Path:
    document = point_map_document()
    if cores is not None:
        document["cores"] = cores
    path = directory / "map.json"
    path.write_text(json.dumps(document))
    return path


def collect(profiling: Path, out: Path, *extra: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["collect", str(profiling), "-o", str(out), *extra])
    assert result.exit_code == 0, result.output
    trace: dict[str, Any] = json.loads(out.read_text())
    return trace


def tracks(trace: dict[str, Any]) -> dict[str, list[str]]:
    """Thread name -> span names, in order (the launch slices left out)."""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    out: dict[str, list[str]] = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X" and e.get("cat") != "optrace.launch":
            out.setdefault(names[(e["pid"], e["tid"])], []).append(e["name"])
    return out


# A generated single-type buffer: CORES slots written by cores 0..CORES-1, SPARE zeros.
def single_type_buffer() -> Any:
    return rank_buffer(aic=0, aiv=CORES, spare=SPARE, used=CORES).data


@pytest.mark.parametrize(("core_type", "meta"), [("AIV", (0, CORES + SPARE)), ("AIC", (CORES + SPARE, 0))])
def test_single_type_buffer_is_saved_and_decoded_as_that_type(tmp_path: Path, core_type: str,
                                                              meta: tuple[int, int]) -> None:
    point_map = write_map(tmp_path, [core_type])
    profiling = tmp_path / "profiling"
    path = save_profiling_data(single_type_buffer(), 0, profiling, point_map=point_map)
    assert path is not None
    saved = read_rank_file(path).meta
    assert (saved.aic_cores, saved.aiv_cores) == meta  # no slot of the other type
    assert json.loads((profiling / "point_map.json").read_text())["cores"] == [core_type]
    got = tracks(collect(profiling, tmp_path / "t.json"))
    assert sorted(got) == [f"{core_type} {i}" for i in range(CORES)]
    for spans in got.values():  # each core's program, whole
        assert spans[0] == "processing" and spans.count("processing compute") == 3


def test_a_file_saved_without_the_map_is_laid_out_by_it_at_collect(tmp_path: Path) -> None:
    profiling = tmp_path / "profiling"
    path = save_profiling_data(single_type_buffer(), 0, profiling)  # the 1 AIC : 2 AIV default
    assert path is not None and read_rank_file(path).meta.aic_cores == (CORES + SPARE) // 3
    got = tracks(collect(profiling, tmp_path / "t.json", "--point-map", str(write_map(tmp_path, ["AIV"]))))
    assert sorted(got) == [f"AIV {i}" for i in range(CORES)]


def test_maps_without_cores_and_mixed_maps_decode_as_before(tmp_path: Path) -> None:
    """A mixed buffer (2 AIC + 4 AIV): an older map (no "cores") and a mixed one read it
    as the file says, AIC slots first."""
    expected = [f"AIC {i}" for i in range(2)] + [f"AIV {i}" for i in range(4)]
    for name, cores in (("old", None), ("mixed", ["AIC", "AIV"])):
        (tmp_path / name).mkdir()
        point_map = write_map(tmp_path / name, cores)
        assert parse_point_map("m", json.loads(point_map.read_text())).cores == (
            None if cores is None else frozenset(cores))
        profiling = tmp_path / name / "profiling"
        save_profiling_data(rank_buffer(aic=2, aiv=4, spare=SPARE, used=6).data, 0, profiling, aic_cores=2,
                            aiv_cores=4, point_map=point_map)
        assert sorted(tracks(collect(profiling, tmp_path / name / "t.json"))) == expected


def test_explicit_core_counts_win_over_the_map(tmp_path: Path) -> None:
    path = save_profiling_data(single_type_buffer(), 0, tmp_path / "p", aiv_cores=CORES,
                               point_map=write_map(tmp_path, ["AIV"]))
    assert path is not None
    meta = read_rank_file(path).meta
    assert (meta.aic_cores, meta.aiv_cores) == (CORES + SPARE - CORES, CORES)


def test_layout_for_cores() -> None:
    mixed = SlotLayout(slots=9, aic_cores=2, aiv_cores=4)
    assert layout_for_cores(mixed, None) == mixed
    assert layout_for_cores(mixed, frozenset({"AIC", "AIV"})) == mixed
    assert layout_for_cores(mixed, frozenset({"AIV"})) == SlotLayout(9, 0, 6)
    assert layout_for_cores(mixed, frozenset({"AIC"})) == SlotLayout(9, 6, 0)
    untyped = SlotLayout(slots=5, aic_cores=5, aiv_cores=0, typed=False)
    assert layout_for_cores(untyped, frozenset({"AIV"})) == SlotLayout(5, 0, 5)


@pytest.mark.parametrize("cores", [[], ["AIV", "GPU"], "AIV", 3, [{"AIV": 1}]])
def test_a_map_with_bad_cores_is_refused(tmp_path: Path, cores: Any) -> None:
    document = point_map_document()
    document["cores"] = cores
    (tmp_path / "bad.json").write_text(json.dumps(document))
    save_profiling_data(rank_buffer().data, 0, tmp_path / "p")
    result = CliRunner().invoke(app, ["collect", str(tmp_path / "p"), "--point-map",
                                      str(tmp_path / "bad.json"), "-o", str(tmp_path / "t.json")])
    assert result.exit_code == 2 and "'cores' must list" in result.output
    with pytest.raises(Exception, match="'cores' must list"):
        save_profiling_data(rank_buffer().data, 1, tmp_path / "q", point_map=tmp_path / "bad.json")
    assert not (tmp_path / "q").exists() or not list((tmp_path / "q").glob("rank*.pt"))  # nothing written


# --- the buffer's size: the slots of the kernel's core types only --------------------------


@pytest.mark.parametrize(("core_type", "slots"), [(None, 32 + 64), ("AIV", 64), ("AIC", 32)])
def test_buffer_size_by_core_mix(core_type: str | None, slots: int) -> None:
    header = sizes_header_content(core_type).decode()
    assert eval(python_numel_expr(core_type)) == slots * PROF_SIZE_PER_CORE
    line = next(ln for ln in header.splitlines() if ln.startswith("#define OPTRACE_PROFILING_SLOTS"))
    assert ("OPTRACE_MAX_AIC_CORES" in line) == (core_type != "AIV")
    assert ("OPTRACE_MAX_AIV_CORES" in line) == (core_type != "AIC")
