"""pt_reader's own zip reader (_stored_zip) against zipfile, and its fallback to zipfile.

_stored_zip reads what torch.save and pt_writer write without importing zipfile (3.5 ms of
collect's start-up); everything else must go to zipfile and behave exactly as before.
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import textwrap
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fuzz_tally import SCALE, tally
from hypothesis import settings

from optrace.runtime.errors import ProfilingInputError
from optrace.runtime.pt_reader import UNREAD, _stored_zip, load_pt
from optrace.runtime.pt_writer import write_pt

DATA = Path(__file__).parent / "data"
TORCH_FILES = sorted(DATA.glob("*.pt"))  # written by torch.save (generate_pt_fixtures.py)
END = struct.Struct("<4s4H2LH")  # end of central directory record


def writer_bytes(obj: Any) -> bytes:
    handle = io.BytesIO()
    write_pt(obj, handle)
    return handle.getvalue()


def writer_files() -> list[bytes]:
    rng = np.random.default_rng(5)
    data = rng.integers(-(2**40), 2**40, size=(6, 64))
    return [
        writer_bytes({"optrace_profiling": 1, "meta": {"rank": 0, "note": "核"}, "data": data}),
        writer_bytes([np.arange(10, dtype=np.int32), np.zeros((0, 3)), np.array(7)]),
        writer_bytes(np.ones((3, 5), dtype=np.float32)),
        writer_bytes({"empty": []}),
    ]


def zipfile_members(raw: bytes) -> tuple[list[str], dict[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        return zf.namelist(), {name: zf.read(name) for name in zf.namelist()}


def assert_same_as_zipfile(raw: bytes) -> None:
    archive = _stored_zip(raw)
    assert archive is not None, "the small reader should read this archive itself"
    names, members = zipfile_members(raw)
    assert archive.names == names
    assert {name: bytes(archive.read(name)) for name in names} == members
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        assert archive.declared == sum(info.file_size for info in zf.infolist())


def assert_same_object(a: Any, b: Any) -> None:
    assert type(a) is type(b)
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_same_object(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same_object(x, y)
    else:
        assert a == b


def end_record(raw: bytes) -> tuple[int, list[Any]]:
    """Where the end of central directory record is (archives without a comment) and its fields."""
    at = len(raw) - END.size
    fields = list(END.unpack_from(raw, at))
    assert fields[0] == b"PK\x05\x06"
    return at, fields


def with_end(raw: bytes, **changes: int) -> bytes:
    at, fields = end_record(raw)
    index = {"disk": 1, "cd_disk": 2, "disk_entries": 3, "entries": 4, "cd_size": 5, "cd_start": 6}
    for name, value in changes.items():
        fields[index[name]] = value
    return raw[:at] + END.pack(*fields) + raw[at + END.size :]


def central_headers(raw: bytes) -> list[int]:
    """Offsets of the central directory headers."""
    _at, fields = end_record(raw)
    out = []
    pos = fields[6]
    for _ in range(fields[4]):
        assert raw[pos : pos + 4] == b"PK\x01\x02"
        out.append(pos)
        name_len, extra_len, comment_len = struct.unpack_from("<3H", raw, pos + 28)
        pos += 46 + name_len + extra_len + comment_len
    return out


def member_data_offset(raw: bytes, name: str) -> int:
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        info = zf.getinfo(name)
    name_len, extra_len = struct.unpack_from("<2H", raw, info.header_offset + 26)
    return int(info.header_offset + 30 + name_len + extra_len)


# --------------------------------------------------------------------------- same members


@pytest.mark.parametrize("index", range(4))
def test_writer_files_read_as_zipfile_reads_them(index: int) -> None:
    assert_same_as_zipfile(writer_files()[index])


@pytest.mark.parametrize("path", TORCH_FILES, ids=lambda p: p.name)
def test_torch_files_read_as_zipfile_reads_them(path: Path) -> None:
    """torch.save writes data descriptors and a zip64 end record even for small files."""
    raw = path.read_bytes()
    assert b"PK\x06\x07" in raw[-60:]  # the zip64 locator: the fast path has to take it
    assert_same_as_zipfile(raw)


def test_zip64_end_record_values_win_as_in_zipfile() -> None:
    """With a zip64 end record, the 32-bit fields may hold 0xFFFF / 0xFFFFFFFF markers."""
    raw = (DATA / "rank002_torchdict.pt").read_bytes()
    marked = with_end(raw, entries=0xFFFF, disk_entries=0xFFFF, cd_size=0xFFFFFFFF, cd_start=0xFFFFFFFF)
    assert_same_as_zipfile(marked)
    assert_same_object(load_pt_bytes(marked), load_pt(DATA / "rank002_torchdict.pt"))


@pytest.mark.parametrize("comment", [b"written by a test", b"PK\x05\x06 inside", b"x" * 0xFFFF])
def test_archive_comment(tmp_path: Path, comment: bytes) -> None:
    obj = {"t": np.arange(12, dtype=np.int64).reshape(3, 4)}
    path = tmp_path / "c.pt"
    write_pt(obj, path)
    with zipfile.ZipFile(path, "a") as zf:
        zf.comment = comment
    raw = path.read_bytes()
    assert raw.endswith(comment)
    if b"PK\x05\x06" in comment:
        # A signature inside the comment: zipfile takes the last one, and so does the reader;
        # the comment length then disagrees, and the file goes to zipfile, which fails.
        assert _stored_zip(raw) is None
        assert "not a readable .pt zip" in refusal(tmp_path, raw)
        return
    assert_same_as_zipfile(raw)
    assert_same_object(load_pt(path), obj)


def load_pt_bytes(raw: bytes) -> Any:
    """load_pt on ``raw`` written to a scratch file."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "rank000.pt"
        path.write_bytes(raw)
        return load_pt(path)


# --------------------------------------------------------------------------- damaged files


def refusal(tmp_path: Path, raw: bytes) -> str:
    path = tmp_path / "rank003.pt"
    path.write_bytes(raw)
    with pytest.raises(ProfilingInputError) as caught:
        load_pt(path)
    assert caught.value.path == str(path) and str(path) in str(caught.value)
    return str(caught.value.message)


@pytest.mark.parametrize("member", ["archive/data.pkl", "archive/data/0"])
def test_crc_mismatch_is_refused(tmp_path: Path, member: str) -> None:
    raw = bytearray(writer_bytes([np.arange(64, dtype=np.int64)]))
    raw[member_data_offset(bytes(raw), member) + 3] ^= 0x40
    assert _stored_zip(bytes(raw)) is None
    message = refusal(tmp_path, bytes(raw))
    assert "Bad CRC-32" in message and member in message


def test_structure_only_read(tmp_path: Path) -> None:
    """load_pt(tensors=False): the same object with each tensor UNREAD, for the files
    torch and pt_writer write."""
    originals = [*writer_files(), *(path.read_bytes() for path in TORCH_FILES)]
    for k, raw in enumerate(originals):
        path = tmp_path / f"rank{k:03d}.pt"
        path.write_bytes(raw)

        def unread(value: Any) -> Any:
            if isinstance(value, np.ndarray):
                return UNREAD
            if isinstance(value, dict):
                return {key: unread(v) for key, v in value.items()}
            if isinstance(value, (list, tuple)):
                return type(value)(unread(v) for v in value)
            return value

        assert load_pt(path, tensors=False) == unread(load_pt(path))


def test_structure_only_read_skips_storages_only(tmp_path: Path) -> None:
    """A damaged storage is not seen without its tensors (a full read refuses the file);
    a damaged pickle is refused either way, in the full read's words."""
    path = tmp_path / "rank003.pt"
    raw = writer_bytes({"optrace_profiling": 1, "meta": {"rank": 3}, "data": np.arange(64, dtype=np.int64)})
    storage = bytearray(raw)
    storage[member_data_offset(raw, "archive/data/0") + 3] ^= 0x40
    path.write_bytes(bytes(storage))
    assert load_pt(path, tensors=False) == {"optrace_profiling": 1, "meta": {"rank": 3}, "data": UNREAD}
    assert "Bad CRC-32" in refusal(tmp_path, bytes(storage))
    pickled = bytearray(raw)
    pickled[member_data_offset(raw, "archive/data.pkl") + 3] ^= 0x40
    path.write_bytes(bytes(pickled))
    with pytest.raises(ProfilingInputError, match="Bad CRC-32"):
        load_pt(path, tensors=False)


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.999])
def test_truncated_file_is_refused(tmp_path: Path, keep: float) -> None:
    raw = writer_bytes([np.arange(64, dtype=np.int64)])
    assert "not a readable .pt zip" in refusal(tmp_path, raw[: int(len(raw) * keep)])


@pytest.mark.parametrize("cut", [1, 10, 46])
def test_truncated_central_directory_is_refused(tmp_path: Path, cut: int) -> None:
    raw = writer_bytes([np.arange(64, dtype=np.int64)])
    at, _fields = end_record(raw)
    damaged = raw[: at - cut] + raw[at:]  # the directory loses its last bytes, the record stays
    assert _stored_zip(damaged) is None
    assert "not a readable .pt zip" in refusal(tmp_path, damaged)


@pytest.mark.parametrize("where", ["past_end", "inside_directory"])
def test_member_offset_outside_the_data_is_refused(tmp_path: Path, where: str) -> None:
    raw = bytearray(writer_bytes([np.arange(64, dtype=np.int64)]))
    headers = central_headers(bytes(raw))
    _at, fields = end_record(bytes(raw))
    offset = len(raw) + 100 if where == "past_end" else fields[6]
    struct.pack_into("<L", raw, headers[2] + 42, offset)  # archive/data/0's local header offset
    assert _stored_zip(bytes(raw)) is None
    message = refusal(tmp_path, bytes(raw))
    assert "not a readable .pt zip" in message and "archive/data/0" in message


def test_empty_and_tiny_files(tmp_path: Path) -> None:
    for raw in (b"PK", b"PK\x05\x06", b"PK" + bytes(30)):
        assert _stored_zip(raw) is None
        assert "not a readable .pt zip" in refusal(tmp_path, raw)


# --------------------------------------------------------------------------- fallback to zipfile


def deflated(raw: bytes) -> bytes:
    names, members = zipfile_members(raw)
    handle = io.BytesIO()
    with zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in names:
            zf.writestr(name, members[name])
    return handle.getvalue()


def zip64_members(raw: bytes) -> bytes:
    """Each member with a zip64 local header (sizes 0xFFFFFFFF + zip64 extra field)."""
    names, members = zipfile_members(raw)
    handle = io.BytesIO()
    with zipfile.ZipFile(handle, "w") as zf:
        for name in names:
            with zf.open(zipfile.ZipInfo(name), "w", force_zip64=True) as member:
                member.write(members[name])
    return handle.getvalue()


def unicode_path_extra(raw: bytes) -> bytes:
    """An Info-ZIP Unicode path extra field (0x7075, which Python >= 3.13 zipfile honours)."""
    names, members = zipfile_members(raw)
    handle = io.BytesIO()
    with zipfile.ZipFile(handle, "w") as zf:
        for name in names:
            info = zipfile.ZipInfo(name)
            encoded = name.encode()
            info.extra = struct.pack("<HHBL", 0x7075, 5 + len(encoded), 1, zlib.crc32(encoded)) + encoded
            zf.writestr(info, members[name])
    return handle.getvalue()


def descriptor_disagrees(raw: bytes) -> bytes:
    """torch's data descriptor after data.pkl says another size (zipfile ignores it)."""
    data = bytearray(raw)
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        info = zf.infolist()[0]
    end = member_data_offset(raw, info.filename) + info.compress_size
    assert data[end : end + 4] == b"PK\x07\x08"
    struct.pack_into("<L", data, end + 12, info.file_size + 1)
    return bytes(data)


def prepended(raw: bytes) -> bytes:
    return b"PK" + bytes(30) + raw  # zipfile finds an archive after other bytes ("concat")


def junk_after_end(raw: bytes) -> bytes:
    return raw + b"\x00junk"  # not counted by the comment length


def multi_disk_fields(raw: bytes) -> bytes:
    _at, fields = end_record(raw)
    return with_end(raw, disk_entries=fields[3] - 1)


def entry_count_disagrees(raw: bytes) -> bytes:
    _at, fields = end_record(raw)
    return with_end(raw, entries=fields[4] + 1, disk_entries=fields[4] + 1)  # zipfile ignores it


def overlapping_members(raw: bytes) -> bytes:
    """A second directory entry for archive/data/0's bytes: two members sharing data."""
    data = bytearray(raw)
    headers = central_headers(raw)
    _at, fields = end_record(raw)
    twin = bytes(data[headers[2] : headers[3]])  # archive/data/0's entry, again
    data[fields[6] + fields[5] : fields[6] + fields[5]] = twin
    _at, fields = end_record(bytes(data))
    count = fields[4] + 1
    return with_end(bytes(data), entries=count, disk_entries=count, cd_size=fields[5] + len(twin))


FALLBACKS: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "deflated": (deflated, "writer"),
    "zip64_local_headers": (zip64_members, "writer"),
    "unicode_path_extra": (unicode_path_extra, "writer"),
    "entry_count_disagrees": (entry_count_disagrees, "writer"),
    "descriptor_disagrees": (descriptor_disagrees, "torch"),
    "prepended_bytes": (prepended, "writer"),
    "junk_after_end_record": (junk_after_end, "writer"),
    "multi_disk_fields": (multi_disk_fields, "writer"),
    "overlapping_members": (overlapping_members, "writer"),
}


@pytest.mark.parametrize("case", sorted(FALLBACKS))
def test_unhandled_archives_go_to_zipfile_and_load(tmp_path: Path, case: str) -> None:
    transform, base = FALLBACKS[case]
    if base == "torch":
        original = DATA / "rank002_torchdict.pt"
        raw = original.read_bytes()
        expected = load_pt(original)
    else:
        obj = {"optrace_profiling": 1, "meta": {"rank": 1}, "data": np.arange(128).reshape(2, 64)}
        raw = writer_bytes(obj)
        expected = obj
    changed = transform(raw)
    assert _stored_zip(changed) is None
    path = tmp_path / "rank001.pt"
    path.write_bytes(changed)
    try:
        zipfile_members(changed)
    except zipfile.BadZipFile:
        # Only Python versions whose zipfile refuses overlapping members (3.12.2+): so
        # does load_pt, which reads through it.
        assert case == "overlapping_members"
        refusal(tmp_path, changed)
        return
    assert_same_object(load_pt(path), expected)


# --------------------------------------------------------------------------- mutated archives


def damaged_archive(rng: np.random.Generator, bases: list[bytes]) -> bytes:
    """One of `bases` with bits flipped, cut short, a directory byte set or bytes added."""
    data = bytearray(bases[int(rng.integers(0, len(bases)))])
    what = int(rng.integers(0, 4))
    if what == 0:
        for _ in range(int(rng.integers(1, 4))):
            data[int(rng.integers(0, len(data)))] ^= 1 << int(rng.integers(0, 8))
    elif what == 1:
        data = data[: int(rng.integers(0, len(data)))]
    elif what == 2:  # a byte in the last 200 (directory and end records) set
        data[len(data) - int(rng.integers(1, min(200, len(data))))] = int(rng.integers(0, 256))
    else:
        data += rng.integers(0, 256, size=int(rng.integers(1, 30)), dtype=np.uint8).tobytes()
    return bytes(data)


@pytest.mark.slow  # fuzzing: thousands of mutated archives
def test_mutated_archives_read_as_zipfile_or_fall_back(tmp_path: Path) -> None:
    """Whenever the small reader accepts a damaged archive, zipfile reads the same members;
    load_pt always ends in a value or a ProfilingInputError."""
    rng = np.random.default_rng(20250602)
    bases = [*writer_files(), *(p.read_bytes() for p in TORCH_FILES)]
    path = tmp_path / "rank000.pt"
    accepted = 0
    with tally("rank files: damaged zip archives", "an archive read by load_pt") as counts:
        for _ in range(settings.default.max_examples * 20 * SCALE):
            raw = damaged_archive(rng, bases)
            archive = _stored_zip(raw)
            if archive is not None:
                accepted += 1
                names, members = zipfile_members(raw)
                assert archive.names == names
                assert {name: bytes(archive.read(name)) for name in names} == members
            path.write_bytes(raw)
            try:
                load_pt(path)
            except ProfilingInputError as exc:
                assert exc.path == str(path)
                counts.count(2)
            except Exception:
                counts.count("crash")
                raise
            else:
                counts.count(0)
    assert accepted > 0


# --------------------------------------------------------------------------- start-up budget


def test_collect_imports_neither_zipfile_nor_pickletools(tmp_path: Path) -> None:
    """3.5 ms + 0.7 ms of collect's start-up: zipfile stays out even after reading rank
    files written by pt_writer and by torch (only unusual archives import it)."""
    writer_file = tmp_path / "rank000.pt"
    write_pt({"optrace_profiling": 1, "meta": {}, "data": np.zeros((2, 64), dtype=np.int64)}, writer_file)
    code = textwrap.dedent(
        f"""
        import sys
        import optrace.runtime.collect
        assert "zipfile" not in sys.modules, "zipfile imported by optrace.runtime.collect"
        assert "pickletools" not in sys.modules, "pickletools imported by optrace.runtime.collect"
        from optrace.runtime.pt_reader import load_pt
        for path in {[str(writer_file), *map(str, TORCH_FILES)]!r}:
            load_pt(path)
        assert "zipfile" not in sys.modules, "zipfile imported to read a plain .pt"
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_directory_offset_past_what_a_seek_takes_is_refused(tmp_path: Path) -> None:
    """Found by the 10x run of the archive fuzzer above (archive 4,256 of its sequence, one
    in ~3,000): a member's offset in the central directory too large for a seek. zipfile
    raised ValueError ("cannot fit 'int' into an offset-sized integer"): exit 3. Now the
    file is refused, named."""
    rng = np.random.default_rng(20250602)
    bases = [*writer_files(), *(p.read_bytes() for p in TORCH_FILES)]
    for _ in range(4255):
        damaged_archive(rng, bases)
    path = tmp_path / "rank000.pt"
    path.write_bytes(damaged_archive(rng, bases))
    with pytest.raises(ProfilingInputError) as caught:
        load_pt(path)
    assert caught.value.path == str(path) and "offset-sized integer" in caught.value.message
