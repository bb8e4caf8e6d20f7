"""save_profiling_data: paths, naming, launches, warm-up, metadata, atomic writes."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest
from rt_helpers import FP, point_map_document, rank_buffer

from optrace.runtime import save_profiling_data
from optrace.runtime.pt_reader import load_pt
from optrace.runtime.rankfile import read_rank_file
from optrace.runtime.save import reset_launch_counters


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    reset_launch_counters()


def test_relative_dir_resolves_against_cwd_at_call_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    path = save_profiling_data(rank_buffer().data, 0, "prof")
    assert path == tmp_path / "a" / "prof" / "rank000.pt"
    monkeypatch.chdir(tmp_path)
    path = save_profiling_data(rank_buffer().data, 0, "prof")
    assert path == tmp_path / "prof" / "rank000.pt"


def test_metadata_comes_from_tensor_and_arguments(tmp_path: Path) -> None:
    data = rank_buffer(aic=3, aiv=6, spare=3).data  # 12 slots of 128 words
    path = save_profiling_data(data, 5, tmp_path, aic_cores=3, barrier=False, clock_mhz=100.0,
                               aiv_roles={0: "send", 1: "recv"})
    assert path is not None
    buffer = read_rank_file(path)
    meta = buffer.meta
    assert (meta.rank, meta.slot_words, meta.aic_cores, meta.aiv_cores) == (5, 128, 3, 9)
    assert meta.clock_mhz == 100.0 and meta.barrier is False and meta.fingerprint == FP
    assert meta.format_version == 1 and meta.aiv_roles == {"0": "send", "1": "recv"}
    np.testing.assert_array_equal(buffer.data, data)


def test_default_split_is_one_aic_to_two_aiv(tmp_path: Path) -> None:
    path = save_profiling_data(rank_buffer(aic=4, aiv=8).data.reshape(-1), 0, tmp_path, slot_words=128)
    assert path is not None
    meta = read_rank_file(path).meta
    assert (meta.aic_cores, meta.aiv_cores) == (4, 8)


def test_legacy_list_input(tmp_path: Path) -> None:
    data = rank_buffer(aic=2, aiv=4).data
    path = save_profiling_data([data[:2], data[2:]], 1, tmp_path)
    assert path is not None
    meta = read_rank_file(path).meta
    assert (meta.aic_cores, meta.aiv_cores, meta.slot_words) == (2, 4, 128)


def test_launch_counter_tag_and_warmup(tmp_path: Path) -> None:
    data = rank_buffer().data
    names = []
    for _ in range(4):
        path = save_profiling_data(data, 0, tmp_path, warmup=1)
        names.append(path.name if path else None)
    assert names == [None, "rank000.pt", "rank000_launch1.pt", "rank000_launch2.pt"]
    tagged = save_profiling_data(data, 0, tmp_path, tag="combine")
    explicit = save_profiling_data(data, 0, tmp_path, tag="combine", launch=7)
    assert tagged is not None and tagged.name == "rank000_combine.pt"
    assert explicit is not None and explicit.name == "rank000_combine_launch7.pt"
    assert read_rank_file(explicit).meta.launch == 7 and read_rank_file(explicit).meta.tag == "combine"


def test_point_map_copied_beside_rank_files(tmp_path: Path) -> None:
    source = tmp_path / "build" / "point_map.json"
    source.parent.mkdir()
    source.write_text(json.dumps(point_map_document()))
    save_profiling_data(rank_buffer().data, 0, tmp_path / "prof", point_map=source)
    assert json.loads((tmp_path / "prof" / "point_map.json").read_text())["fingerprint"] == FP


def test_stale_point_map_warns(tmp_path: Path) -> None:
    source = tmp_path / "point_map.json"
    source.write_text(json.dumps(point_map_document(fingerprint=0x1)))
    with pytest.warns(UserWarning, match="another build"):
        save_profiling_data(rank_buffer().data, 0, tmp_path / "prof", point_map=source)


@pytest.mark.parametrize(
    ("tensor", "kwargs", "message"),
    [
        (np.zeros((2, 64), dtype=np.int32), {}, "dtype int32"),
        (np.zeros(100, dtype=np.int64), {}, "multiple of slot_words"),
        (np.zeros((3, 64), dtype=np.int64), {"aic_cores": 4}, "do not fit"),
    ],
)
def test_bad_tensors(tmp_path: Path, tensor: np.ndarray, kwargs: dict[str, int], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        save_profiling_data(tensor, 0, tmp_path, **kwargs)


def _save_many(args: tuple[str, int]) -> str:
    directory, rank = args
    reset_launch_counters()
    path = save_profiling_data(rank_buffer(rank=rank).data, rank, directory)
    return str(path)


def test_concurrent_ranks_never_clobber(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        paths = pool.map(_save_many, [(str(tmp_path), r) for r in range(4)] * 2)
    assert sorted(set(paths)) == [str(tmp_path / f"rank{r:03d}.pt") for r in range(4)]
    assert sorted(os.listdir(tmp_path)) == [f"rank{r:03d}.pt" for r in range(4)]  # no temp files
    for r in range(4):
        assert load_pt(tmp_path / f"rank{r:03d}.pt")["meta"]["rank"] == r


def test_saving_and_collecting_never_import_torch(tmp_path: Path) -> None:
    """In a fresh interpreter (other tests may have imported torch in this one)."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from pathlib import Path\n"
        "from optrace.runtime import save_profiling_data\n"
        "from optrace.runtime.inspection import inspect_path\n"
        "buf = np.zeros((3, 64), dtype=np.int64)\n"
        "save_profiling_data(buf, 0, sys.argv[1])\n"
        "inspect_path(Path(sys.argv[1]))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torch_npu')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
