"""The .pt reader (numpy only, restricted unpickler) and writer (torch-compatible)."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from optrace.runtime.errors import ProfilingInputError
from optrace.runtime.pt_reader import load_pt
from optrace.runtime.pt_writer import write_pt
from optrace.runtime.rankfile import read_rank_file

DATA = Path(__file__).parent / "data"


def writer_sample(path: str | Path) -> None:
    """A fixed object written by pt_writer; torch's verdict on it is in writer_check.json."""
    tensors = {
        "buffer": np.arange(3 * 64, dtype=np.int64).reshape(3, 64) - 100,
        "i32": np.array([[1, -2], [3, 4]], dtype=np.int32).T,  # non-contiguous input
        "f32": np.linspace(0, 1, 5, dtype=np.float32),
        "f64": np.array([1e300, -0.5]),
        "u8": np.arange(4, dtype=np.uint8),
        "bool": np.array([True, False, True]),
        "empty": np.zeros((0, 3), dtype=np.int64),
        "scalar": np.array(42, dtype=np.int64),
    }
    meta = {"rank": 3, "clock_mhz": 50.0, "barrier": None, "fingerprint": 0xDEADBEEF,
            "big": -(2**62), "nested": [1, "two", (3.0, False)], "unicode": "核 AIV"}
    write_pt({"optrace_profiling": 1, "meta": meta, "tensors": tensors}, path)


def test_writer_output_is_what_torch_accepted(tmp_path: Path) -> None:
    check = json.loads((DATA / "writer_check.json").read_text())
    writer_sample(tmp_path / "sample.pt")
    digest = hashlib.sha256((tmp_path / "sample.pt").read_bytes()).hexdigest()
    assert digest == check["sha256"], (
        "pt_writer output changed: re-run tests/runtime/data/generate_pt_fixtures.py with torch"
    )
    assert check["mmap_equal"] is True
    assert check["tensors"]["buffer"] == {"shape": [3, 64], "dtype": "torch.int64",
                                          "sum": float((np.arange(192) - 100).sum())}
    assert check["tensors"]["i32"]["shape"] == [2, 2]
    assert check["meta"]["fingerprint"] == 0xDEADBEEF


def test_writer_round_trips_through_reader(tmp_path: Path) -> None:
    writer_sample(tmp_path / "sample.pt")
    loaded = load_pt(tmp_path / "sample.pt")
    assert loaded["meta"]["nested"] == [1, "two", (3.0, False)]
    assert loaded["meta"]["unicode"] == "核 AIV"
    assert loaded["meta"]["big"] == -(2**62)
    tensors = loaded["tensors"]
    assert tensors["buffer"].dtype == np.int64 and tensors["buffer"][2, 63] == 191 - 100
    np.testing.assert_array_equal(tensors["i32"], np.array([[1, 3], [-2, 4]], dtype=np.int32))
    assert tensors["empty"].shape == (0, 3)
    assert tensors["scalar"].shape == () and int(tensors["scalar"]) == 42
    assert tensors["bool"].dtype == np.bool_


def test_storage_data_is_64_byte_aligned(tmp_path: Path) -> None:
    writer_sample(tmp_path / "sample.pt")
    with zipfile.ZipFile(tmp_path / "sample.pt") as zf:
        for info in zf.infolist():
            data_offset = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
            assert data_offset % 64 == 0, info.filename


def test_reads_legacy_list_written_by_torch() -> None:
    buffer = read_rank_file(DATA / "rank000_legacy.pt")
    assert buffer.meta.legacy and buffer.meta.rank == 0
    assert (buffer.meta.aic_cores, buffer.meta.aiv_cores) == (2, 4)
    assert buffer.data.shape == (6, 64)
    assert buffer.data[0, 0] == 1 + 8  # counter: 8 records (B, 3 loops, E)
    assert not buffer.data[5].any()  # the unused AIV slot


def test_reads_views_sharing_one_storage() -> None:
    views = read_rank_file(DATA / "rank001_legacyviews.pt")
    plain = read_rank_file(DATA / "rank000_legacy.pt")
    np.testing.assert_array_equal(views.data, plain.data)
    assert views.meta.rank == 1


def test_reads_optrace_dict_written_by_torch() -> None:
    buffer = read_rank_file(DATA / "rank002_torchdict.pt")
    assert not buffer.meta.legacy
    assert buffer.meta.clock_mhz == 100.0 and buffer.meta.barrier is False
    assert buffer.meta.rank == 2  # from the file name
    assert buffer.data.shape == (6, 64)


def test_reads_other_torch_tensor_kinds() -> None:
    loaded = load_pt(DATA / "misc_tensors.pt")
    assert isinstance(loaded, OrderedDict)
    assert loaded["u64"].dtype == np.uint64 and int(loaded["u64"][1]) == 2**63 + 5
    np.testing.assert_array_equal(loaded["param"], np.array([1.5, -2.0], dtype=np.float32))
    np.testing.assert_array_equal(loaded["transposed"], np.arange(6, dtype=np.int32).reshape(2, 3).T)
    assert loaded["scalar"].shape == () and int(loaded["scalar"]) == 7
    assert loaded["flags"].tolist() == [True, False]


class _Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, ("touch /tmp/optrace-pwned",))


def _pt_with_pickle(path: Path, payload: bytes) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", payload)
        zf.writestr("archive/byteorder", "little")
        zf.writestr("archive/version", "3\n")


def test_malicious_pickle_is_refused_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Evil(), protocol=2).replace(b"/tmp/optrace-pwned", str(marker).encode())
    assert b"system" in payload  # the pickle really names os.system (posix.system)
    _pt_with_pickle(tmp_path / "rank000.pt", payload)
    with pytest.raises(ProfilingInputError) as info:
        load_pt(tmp_path / "rank000.pt")
    assert info.value.path == str(tmp_path / "rank000.pt")
    assert "refused to load global" in info.value.message and "system" in info.value.message
    assert not marker.exists()


@pytest.mark.parametrize(
    "payload",
    [
        pickle.dumps(io.StringIO, protocol=2),  # a class by reference
        b"\x80\x02cbuiltins\neval\nX\x04\x00\x00\x001+1\x85R.",  # eval("1+1")
        pickle.dumps(exec, protocol=4),  # STACK_GLOBAL
    ],
)
def test_other_globals_are_refused(tmp_path: Path, payload: bytes) -> None:
    _pt_with_pickle(tmp_path / "x.pt", payload)
    with pytest.raises(ProfilingInputError, match="refused to load global"):
        load_pt(tmp_path / "x.pt")


def test_out_of_bounds_view_is_refused(tmp_path: Path) -> None:
    """A pickle claiming a bigger tensor than its storage must not read past the buffer."""
    write_pt({"t": np.arange(4, dtype=np.int64)}, tmp_path / "ok.pt")
    with zipfile.ZipFile(tmp_path / "ok.pt") as zf:
        pickled = zf.read("archive/data.pkl")
        storage = zf.read("archive/data/0")
    # The size tuple (MARK, 4, TUPLE) becomes (4096,); the storage's numel stays 4.
    forged = pickled.replace(b"(J\x04\x00\x00\x00t", b"(J\x00\x10\x00\x00t")
    assert forged != pickled
    with zipfile.ZipFile(tmp_path / "bad.pt", "w") as zf:
        zf.writestr("archive/data.pkl", forged)
        zf.writestr("archive/data/0", storage)
    with pytest.raises(ProfilingInputError, match="does not fit its storage"):
        load_pt(tmp_path / "bad.pt")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"\x80\x02}q\x00.", "not a zip-format"),
        (b"PK\x03\x04garbage", "not a readable .pt zip"),
    ],
)
def test_unreadable_files_name_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "rank000.pt").write_bytes(content)
    with pytest.raises(ProfilingInputError) as info:
        load_pt(tmp_path / "rank000.pt")
    assert message in str(info.value) and str(tmp_path / "rank000.pt") in str(info.value)


def test_truncated_file(tmp_path: Path) -> None:
    raw = (DATA / "rank000_legacy.pt").read_bytes()
    (tmp_path / "rank000.pt").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ProfilingInputError, match=r"rank000\.pt"):
        load_pt(tmp_path / "rank000.pt")


def test_missing_storage_record(tmp_path: Path) -> None:
    write_pt([np.zeros((2, 8), dtype=np.int64)], tmp_path / "full.pt")
    with zipfile.ZipFile(tmp_path / "full.pt") as src, zipfile.ZipFile(tmp_path / "cut.pt", "w") as dst:
        for info in src.infolist():
            if not info.filename.endswith("data/0"):
                dst.writestr(info.filename, src.read(info))
    with pytest.raises(ProfilingInputError, match="storage archive/data/0 is missing"):
        load_pt(tmp_path / "cut.pt")


def test_writer_rejects_unknown_values(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="cannot store a object"):
        write_pt({"x": object()}, tmp_path / "x.pt")
    with pytest.raises(TypeError, match="complex128"):
        write_pt(np.zeros(2, dtype=np.complex128), tmp_path / "x.pt")


def test_the_opcode_table_is_pickletools_own() -> None:
    """The memo-index walk reads every opcode's argument as pickletools does."""
    import pickletools

    from optrace.runtime.pt_reader import _OPCODE_ARGS

    theirs = {ord(op.code): op.arg.name if op.arg is not None else "" for op in pickletools.opcodes}
    assert _OPCODE_ARGS == theirs


def _genops_puts(data: bytes) -> list[tuple[int, int]] | str:
    """The reference: pickletools.genops's PUT, BINPUT and LONG_BINPUT, or its error."""
    import pickletools
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return [(ord(op.code), int(arg or 0)) for op, arg, _ in pickletools.genops(data)
                    if op.name in ("PUT", "BINPUT", "LONG_BINPUT")]
    except ValueError:
        return "damaged"


def _ours(data: bytes) -> list[tuple[int, int]] | str:
    import warnings

    from optrace.runtime.pt_reader import pickle_memo_puts

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return list(pickle_memo_puts(data))
    except ValueError:
        return "damaged"


class _Point:
    def __init__(self, x: int) -> None:
        self.x = x


def test_the_memo_walk_answers_as_pickletools_genops() -> None:
    """Pickles of every protocol (every kind of argument: strings quoted and escaped,
    longs, floats as text, unicode, bytes, globals), cut short and with bytes changed:
    the same memo indices, and damage found at the same pickles."""
    things: list[Any] = [
        {"a": [1, 2.5, "é\n", b"\x00\xff" * 40, (None, True, False)], "b": {1, 2}, "c": frozenset({3})},
        [2**70, -(2**40), 1.5e300, "x" * 300, bytearray(b"ab"), [[[]]], OrderedDict(k=1)],
        ["shared"] * 3 + [{"k": "v"}] * 2 + [_Point(4)],
        "\ud800 lone surrogate",
    ]
    pickles = [pickle.dumps(thing, protocol=p) for thing in things for p in range(6)
               if not (p < 1 and isinstance(thing, str) and "\ud800" in thing)]
    pickles.append(b"S'odd \\q escape'\np0\n.")
    pickles.append(b"I01\np01\n.")  # protocol 0's "01" (True) as a memo index
    rng = np.random.default_rng(5)
    cases = 0
    for data in pickles:
        variants = [data, data[: len(data) // 2], data + b"trailing"]
        for _ in range(60):
            flipped = bytearray(data)
            flipped[int(rng.integers(len(data)))] = int(rng.integers(256))
            variants.append(bytes(flipped))
        for variant in variants:
            assert _ours(variant) == _genops_puts(variant), variant
            cases += 1
    assert cases > 1000
