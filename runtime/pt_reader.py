"""Read ``.pt`` files with numpy only, never executing what the pickle names.

A ``.pt`` written by ``torch.save`` (torch >= 1.6) is a zip: ``<archive>/data.pkl`` holds
the object structure, ``<archive>/data/<key>`` the raw storages, ``<archive>/byteorder``
their byte order. The pickle is loaded by an ``Unpickler`` whose ``find_class`` answers
only the globals torch writes for tensors and plain containers; everything else is
refused with a :class:`~optrace.runtime.errors.ProfilingInputError` naming the file and
the global. Tensors come back as numpy arrays (read-only views of the storage when
contiguous).

What torch 2.x writes (checked against torch 2.13): ``torch._utils._rebuild_tensor_v2``
with a legacy typed storage class (``torch.LongStorage``, ``torch.IntStorage``, ...) in
the persistent id, ``collections.OrderedDict`` for the (empty) backward hooks;
``torch._utils._rebuild_tensor_v3`` with ``torch.UntypedStorage`` plus a dtype global
(``torch.uint16``...) for the unsigned types without a legacy storage class;
``torch._utils._rebuild_parameter`` for ``nn.Parameter``.
"""

from __future__ import annotations

import codecs
import io
import pickle
import struct
import warnings
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .errors import ProfilingInputError, shown
from .regular import open_regular


class _StorageType:
    """Stands in for ``torch.LongStorage`` & co: only carries the element dtype."""

    __slots__ = ("dtype", "name")

    def __init__(self, name: str, dtype: np.dtype[Any] | None) -> None:
        self.name = name
        self.dtype = dtype


class _Dtype:
    """Stands in for ``torch.int64`` & co (the dtype argument of ``_rebuild_tensor_v3``)."""

    __slots__ = ("dtype", "name")

    def __init__(self, name: str, dtype: np.dtype[Any]) -> None:
        self.name = name
        self.dtype = dtype


_STORAGE_DTYPES: dict[str, str | None] = {
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "UntypedStorage": "uint8",  # bytes; _rebuild_tensor_v3 says what they hold
    "BFloat16Storage": None,  # numpy has no bfloat16: refused when a tensor uses it
}

_TORCH_DTYPES: dict[str, str] = {
    "int64": "int64",
    "long": "int64",
    "int32": "int32",
    "int": "int32",
    "int16": "int16",
    "int8": "int8",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "bool": "bool",
    "float64": "float64",
    "double": "float64",
    "float32": "float32",
    "float": "float32",
    "float16": "float16",
    "half": "float16",
}


class Unread:
    """A tensor of a ``.pt`` read with ``tensors=False`` (:func:`load_pt`): its storage was
    neither read nor checked."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<tensor not read>"


UNREAD = Unread()


class _Storage:
    """A storage loaded from ``data/<key>``: a flat numpy array of the storage dtype."""

    __slots__ = ("array", "key")

    def __init__(self, key: str, array: np.ndarray) -> None:
        self.key = key
        self.array = array


def _view(
    source: str, storage: Any, offset: Any, size: Any, stride: Any, dtype: np.dtype[Any] | None
) -> np.ndarray | Unread:
    """The tensor ``storage[offset:]`` with ``size``/``stride``, bounds-checked; UNREAD
    for a storage left unread (``load_pt(tensors=False)``)."""
    if isinstance(storage, Unread):
        return storage
    if not isinstance(storage, _Storage):
        raise ProfilingInputError(source, "tensor without a storage (corrupt data.pkl)")
    if not (isinstance(size, tuple) and isinstance(stride, tuple) and isinstance(offset, int)):
        raise ProfilingInputError(source, "tensor with a malformed size/stride (corrupt data.pkl)")
    if len(size) != len(stride) or len(size) > 64 or not all(
        isinstance(n, int) and n >= 0 for n in (*size, *stride)
    ):
        raise ProfilingInputError(source, f"tensor with invalid size {shown(size)} / stride {shown(stride)}")
    flat = storage.array
    if dtype is not None and dtype != flat.dtype:
        if (flat.nbytes % dtype.itemsize) != 0:
            raise ProfilingInputError(source, f"storage {storage.key} is not a whole number of {dtype}")
        flat = flat.view(dtype)
    count = 1
    for n in size:
        count *= n
    if count == 0:
        return np.zeros(size, dtype=flat.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    if offset < 0 or last >= flat.size:
        # as_strided would read past the buffer: this is the check that keeps it safe.
        raise ProfilingInputError(
            source,
            f"tensor of size {shown(size)} at offset {offset} does not fit its storage "
            f"{storage.key} ({flat.size} elements): truncated or corrupt file",
        )
    if count > flat.size:
        # Only overlapping strides (0, or smaller than the row below) fit more elements than
        # the storage holds: torch writes none for a saved tensor; copying one could take
        # any amount of memory.
        raise ProfilingInputError(
            source, f"tensor of size {shown(size)} has more elements than its storage {storage.key} "
            f"({flat.size}): overlapping strides, corrupt file"
        )
    item = flat.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(
        flat[offset:], shape=size, strides=tuple(s * item for s in stride), writeable=False
    )
    return view if view.flags.c_contiguous else np.array(view)


class _RestrictedUnpickler(pickle.Unpickler):
    """``find_class`` allowlist + ``persistent_load`` that maps storages to numpy."""

    def __init__(self, data: bytes, source: str,
                 load_storage: Callable[[str, np.dtype[Any]], np.ndarray] | None):
        super().__init__(io.BytesIO(data))
        self._source = source
        self._load_storage = load_storage
        self._storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        source = self._source
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module == "torch._utils" and name == "_rebuild_tensor_v2":

            def rebuild_v2(
                storage: Any, offset: Any, size: Any, stride: Any, *_rest: Any
            ) -> np.ndarray | Unread:
                return _view(source, storage, offset, size, stride, None)

            return rebuild_v2
        if module == "torch._utils" and name == "_rebuild_tensor_v3":

            def rebuild_v3(
                storage: Any, offset: Any, size: Any, stride: Any, _grad: Any, _hooks: Any,
                dtype: Any, *_rest: Any,
            ) -> np.ndarray | Unread:
                if not isinstance(dtype, _Dtype):
                    raise ProfilingInputError(source, "tensor with an unknown dtype (corrupt data.pkl)")
                return _view(source, storage, offset, size, stride, dtype.dtype)

            return rebuild_v3
        if module == "torch._utils" and name in ("_rebuild_parameter", "_rebuild_parameter_with_state"):

            def rebuild_parameter(data: Any, *_rest: Any) -> Any:
                return data

            return rebuild_parameter
        if module in ("torch", "torch.storage") and name in _STORAGE_DTYPES:
            numpy_name = _STORAGE_DTYPES[name]
            return _StorageType(name, np.dtype(numpy_name) if numpy_name else None)
        if module == "torch" and name in _TORCH_DTYPES:
            return _Dtype(name, np.dtype(_TORCH_DTYPES[name]))
        raise ProfilingInputError(
            source,
            f"refused to load global '{module}.{name}': a profiling file holds only tensors "
            "and plain containers (this file may be malicious or not a profiling file)",
        )

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"):
            raise ProfilingInputError(self._source, f"unexpected persistent id {shown(pid)}")
        storage_type, key, _location, numel = pid[1], pid[2], pid[3], pid[4]
        if not isinstance(storage_type, _StorageType) or not isinstance(key, str):
            raise ProfilingInputError(self._source, f"unexpected persistent id {shown(pid)}")
        if storage_type.dtype is None:
            raise ProfilingInputError(
                self._source, f"tensor of type {storage_type.name} cannot be read without torch"
            )
        if self._load_storage is None:
            return UNREAD
        if key not in self._storages:
            array = self._load_storage(key, storage_type.dtype)
            if isinstance(numel, int) and array.size != numel:
                raise ProfilingInputError(
                    self._source,
                    f"storage {key} holds {array.size} elements, the pickle says {numel}: "
                    "truncated or corrupt file",
                )
            self._storages[key] = _Storage(key, array)
        return self._storages[key]


_PICKLE_ERRORS = (
    pickle.UnpicklingError,
    EOFError,
    ValueError,
    TypeError,
    AttributeError,
    IndexError,
    KeyError,
    UnicodeDecodeError,
    struct.error,
    MemoryError,
    RecursionError,
    OverflowError,
)


# What zipfile raises on a damaged archive besides its own BadZipFile / LargeZipFile (added
# where zipfile is imported, in _zipfile_archive): a member name that is not UTF-8, an
# unknown compression method or flag (NotImplementedError, a RuntimeError), an encrypted
# member (RuntimeError), a corrupt deflate stream, a member cut short.
_ZIP_ERRORS = (UnicodeDecodeError, RuntimeError, zlib.error, EOFError)

#: What a .pt may inflate to, at most, beyond its own size: torch stores members
#: uncompressed, so only a zip bomb declares far more bytes than the file holds.
INFLATE_FLOOR = 256 * 1024 * 1024
INFLATE_RATIO = 64

# The zip records _stored_zip parses (APPNOTE.TXT 4.3.7, 4.3.9, 4.3.12, 4.3.16); "x" pads
# skip the fields it has no use for (versions made by, times, attributes).
# Local file header, 30 bytes: signature, flags, method, CRC-32, sizes, name and extra lengths.
_LOCAL = struct.Struct("<4s2xHH4x3L2H")
# Central directory header, 46 bytes: signature, version needed, flags, method, CRC-32, sizes,
# name / extra / comment lengths, disk, local header offset.
_CENTRAL = struct.Struct("<4s2xBxHH4x3L4H6xL")
_END = struct.Struct("<4s4H2LH")  # end of central directory record, 22 bytes
_END64 = struct.Struct("<4sQ4x2L4Q")  # zip64 end of central directory record, 56 bytes
_LOCATOR64 = struct.Struct("<4sLQL")  # zip64 end of central directory locator, 20 bytes
_DESCRIPTOR = struct.Struct("<3L")  # data descriptor after its optional signature: CRC, sizes
_LOCAL_SIG, _CENTRAL_SIG, _END_SIG = b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"
_DESCRIPTOR_SIG, _END64_SIG, _LOCATOR64_SIG = b"PK\x07\x08", b"PK\x06\x06", b"PK\x06\x07"
_FLAG_DESCRIPTOR, _FLAG_UTF8 = 0x0008, 0x0800
_MAX_EXTRACT_VERSION = 63  # zipfile refuses members needing a later version
_COMMENT_MAX = 0xFFFF
# Extra fields that change nothing about where a member is or what it holds: the alignment
# padding torch and pt_writer write ("FB"), Info-ZIP timestamps ("UT") and Unix owner
# ("ux"). Any other one (zip64 0x0001, the Unicode path 0x7075 newer zipfiles honour, ...)
# leaves the file to zipfile.
_BENIGN_EXTRAS = frozenset({0x4246, 0x5455, 0x7875})


class _Archive:
    """A .pt zip's members: names in central-directory order, their declared total size,
    and ``read(name)`` (``KeyError`` when absent, like ``ZipFile.read``)."""

    __slots__ = ("declared", "names", "read")

    def __init__(self, names: list[str], declared: int, read: Callable[[str], bytes | memoryview]) -> None:
        self.names = names
        self.declared = declared
        self.read = read


def _plain_name(raw: bytes) -> bool:
    """A name that zipfile decodes to the same str whatever the UTF-8 flag and platform say."""
    return raw.isascii() and b"\0" not in raw and b"\\" not in raw


def _benign_extra(extra: bytes) -> bool:
    """The central directory's extra field is well formed and holds only _BENIGN_EXTRAS."""
    at = 0
    while at < len(extra):
        if at + 4 > len(extra):
            return False
        kind, length = struct.unpack_from("<2H", extra, at)
        at += 4 + length
        if kind not in _BENIGN_EXTRAS or at > len(extra):
            return False
    return True


class _UncheckedMember(Exception):
    """A member read from an archive opened with ``check_all=False`` failed its CRC-32."""


def _stored_zip(data: bytes, *, check_all: bool = True) -> _Archive | None:
    """The members of the zip ``data`` as slices of it, or None to leave it to zipfile.

    zipfile's imports (bz2, lzma, shutil, threading) are a noticeable part of collect's
    start-up, only to read what torch.save and pt_writer write: one disk, stored members
    (data descriptors allowed), 32-bit sizes and offsets, an optional archive comment, and
    the zip64 end record torch adds to every file. This reads exactly that. Each member is
    checked as zipfile checks what it reads (CRC-32 against the central directory) and
    more strictly: the local header and any data descriptor agree with the central
    directory, every member lies inside the file, before the directory, without
    overlapping another. Anything else (zip64 sizes or offsets, compression, encryption,
    other extra fields, ...) and any inconsistency returns None, and zipfile reads the
    file: unusual and damaged archives behave as they did before.

    ``check_all=False``: the CRC-32 of a member is checked when it is read, and a
    mismatch raises _UncheckedMember (the caller falls back to a full read): for a
    caller that reads the pickle only, without checksumming megabytes of storages.
    """
    size = len(data)
    end = size - _END.size
    if end < 0:
        return None
    if data[end : end + 4] != _END_SIG or data[-2:] != b"\0\0":
        # An archive comment follows the record (or this is no zip): the record starts in
        # the last 64 KiB + 22 bytes. The last signature, as zipfile takes, so that both
        # readers see the same record.
        end = data.rfind(_END_SIG, max(end - _COMMENT_MAX - 1, 0))
        if end < 0 or end + _END.size > size:
            return None
    _sig, this_disk, cd_disk, disk_entries, entries, cd_size, cd_start, comment_len = _END.unpack_from(
        data, end
    )
    if end + _END.size + comment_len != size:
        return None  # the comment length does not account for the bytes after the record
    if this_disk or cd_disk or disk_entries != entries:
        return None  # multi-disk
    cd_end = end  # where the central directory stops
    if end >= _LOCATOR64.size and data[end - _LOCATOR64.size : end - 16] == _LOCATOR64_SIG:
        # torch.save (miniz) writes a zip64 end record even for a small file. zipfile takes
        # the directory's place and size from it when the locator points right before
        # itself (it assumes that place); any other layout is left to zipfile.
        record = end - _LOCATOR64.size - _END64.size
        if record < 0:
            return None
        _sig, locator_disk, record_at, disks = _LOCATOR64.unpack_from(data, end - _LOCATOR64.size)
        sig, record_size, this_disk, cd_disk, disk_entries, entries, cd_size, cd_start = _END64.unpack_from(
            data, record
        )
        if (
            sig != _END64_SIG
            or record_at != record
            or record_size != _END64.size - 12  # 12: the signature and this field
            or locator_disk
            or disks != 1
            or this_disk
            or cd_disk
            or disk_entries != entries
        ):
            return None
        cd_end = record
    elif entries == 0xFFFF or 0xFFFFFFFF in (cd_size, cd_start):
        return None  # zip64 markers without a zip64 end record
    if cd_start + cd_size != cd_end:
        return None  # bytes before the archive (zipfile's "concat") or after the directory

    view = memoryview(data)
    names: list[str] = []
    members: dict[str, memoryview] = {}
    crcs: dict[str, int] = {}
    spans: list[tuple[int, int]] = []  # (local header, end of data and descriptor) per member
    declared = 0
    pos = cd_start
    for _ in range(entries):
        if pos + _CENTRAL.size > cd_end:
            return None
        sig, version, flags, method, crc, csize, usize, *lengths, disk, header = _CENTRAL.unpack_from(
            data, pos
        )
        name_len, extra_len, comment_len = lengths
        name_at = pos + _CENTRAL.size
        raw_name = data[name_at : name_at + name_len]
        extra = data[name_at + name_len : name_at + name_len + extra_len]
        pos = name_at + name_len + extra_len + comment_len
        if (
            sig != _CENTRAL_SIG
            or pos > cd_end
            or version > _MAX_EXTRACT_VERSION
            or flags & ~(_FLAG_DESCRIPTOR | _FLAG_UTF8)  # encrypted, compression options, ...
            or method != 0  # not stored
            or csize != usize
            or 0xFFFFFFFF in (usize, header)  # zip64
            or disk != 0
            or not _plain_name(raw_name)
            or not _benign_extra(extra)
            or header + _LOCAL.size > cd_start
        ):
            return None
        sig, local_flags, local_method, *local_sums, local_name_len, local_extra_len = _LOCAL.unpack_from(
            data, header
        )
        start = header + _LOCAL.size + local_name_len + local_extra_len
        stop = start + usize
        if (
            sig != _LOCAL_SIG
            or local_flags != flags
            or local_method != 0
            or data[header + _LOCAL.size : header + _LOCAL.size + local_name_len] != raw_name
            or stop > cd_start
        ):
            return None
        span_end = stop
        if flags & _FLAG_DESCRIPTOR:
            # torch (miniz) leaves the local CRC and sizes zero and writes them after the
            # data, 32-bit here (64-bit for zip64, which then disagrees and falls back).
            at = stop + 4 if data[stop : stop + 4] == _DESCRIPTOR_SIG else stop
            span_end = at + _DESCRIPTOR.size
            if span_end > cd_start or _DESCRIPTOR.unpack_from(data, at) != (crc, csize, usize):
                return None
        elif tuple(local_sums) != (crc, csize, usize):
            return None
        member = view[start:stop]
        if check_all and zlib.crc32(member) != crc:
            return None  # zipfile says which member is damaged, when the caller reads it
        name = raw_name.decode("ascii")
        names.append(name)
        members[name] = member  # a repeated name: the last one, as ZipFile.read does
        crcs[name] = crc
        declared += usize
        spans.append((header, span_end))
    if pos != cd_end:
        return None  # the directory holds more than the record counts
    spans.sort()
    if any(before[1] > after[0] for before, after in pairwise(spans)):
        return None  # overlapping members: how zip bombs stay small
    if check_all:
        return _Archive(names, declared, members.__getitem__)

    def read_checked(name: str) -> memoryview:
        member = members[name]
        if zlib.crc32(member) != crcs[name]:
            raise _UncheckedMember(name)
        return member

    return _Archive(names, declared, read_checked)


def _zipfile_archive(source: str, handle: BinaryIO) -> _Archive:
    """The members through zipfile, for the archives _stored_zip leaves to it.

    ``handle`` is the open file, as before _stored_zip existed: zipfile fails on a damaged
    file as it always did (an OSError from a seek before the start, not a BytesIO
    ValueError), and members it is not asked for are never read.
    """
    import zipfile  # here only: most of collect's import time otherwise (see _stored_zip)

    # ValueError / OverflowError: an offset in the directory past what a seek takes
    # ("cannot fit 'int' into an offset-sized integer"), found by the archive fuzzer.
    errors = (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OverflowError, *_ZIP_ERRORS)
    try:
        zf = zipfile.ZipFile(handle)
        infos = zf.infolist()
    except errors as exc:
        raise ProfilingInputError(source, f"not a readable .pt zip (truncated?): {exc}") from None

    def read(name: str) -> bytes:
        try:
            return zf.read(name)
        except errors as exc:
            detail = str(exc) or type(exc).__name__
            if name not in detail:
                detail = f"{name}: {detail}"
            raise ProfilingInputError(source, f"not a readable .pt zip (truncated?): {detail}") from None

    return _Archive([info.filename for info in infos], sum(info.file_size for info in infos), read)


def load_pt(path: str | Path, *, tensors: bool = True) -> Any:
    """The object a ``.pt`` holds, with tensors as numpy arrays; never runs pickle code.

    ``tensors=False``: the object structure only, each tensor :data:`UNREAD` — its
    storage is neither read into an array nor checksummed (the pickle and the zip's
    structure are checked as in a full read). For a first look at a file that is read in
    full later (collect's anchor pass): it may accept a file whose storages are damaged,
    never refuse one a full read accepts.
    """
    if not tensors:
        try:
            return _load_pt(path, tensors=False)
        except _UncheckedMember:
            pass  # the pickle itself is damaged: the full read says so, in its own words
    return _load_pt(path, tensors=True)


def _load_pt(path: str | Path, *, tensors: bool) -> Any:
    source = str(path)
    try:
        with open_regular(path, "rank") as handle:  # a FIFO is never read (runtime/regular.py)
            # One read of the whole file: all but a few bytes of a .pt are storages the
            # caller gets anyway, and _stored_zip hands them out as slices of this buffer.
            # From the start of the file: after a read(4), CPython 3.11's read() takes
            # 20 times longer on a 1 MB file.
            data = handle.read()
            if not data:
                raise ProfilingInputError(source, "empty file")
            if data[:2] != b"PK":
                raise ProfilingInputError(
                    source,
                    "not a zip-format .pt file (torch < 1.6 or _use_new_zipfile_serialization="
                    "False is not supported; re-save it with a current torch)",
                )
            archive = _stored_zip(data, check_all=tensors)
            if archive is None:
                handle.seek(0)
                archive = _zipfile_archive(source, handle)
            return _load_zip(source, archive, len(data), tensors=tensors)
    except ProfilingInputError:
        raise
    except _ZIP_ERRORS as exc:
        raise ProfilingInputError(source, f"not a readable .pt zip (truncated?): {exc}") from None
    except OSError as exc:
        raise ProfilingInputError(source, f"cannot read: {exc.strerror or exc}") from None


def _load_zip(source: str, archive: _Archive, file_size: int, *, tensors: bool = True) -> Any:
    declared = archive.declared
    if declared > max(INFLATE_FLOOR, INFLATE_RATIO * file_size):
        raise ProfilingInputError(
            source, f"members would inflate to {declared} bytes from a {file_size}-byte file: "
            "refused (a zip bomb, or not a torch .pt file)"
        )
    names = archive.names
    read = archive.read
    pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if not pickles:
        raise ProfilingInputError(source, "no <archive>/data.pkl inside: not a torch .pt file")
    prefix = pickles[0][: -len("data.pkl")]
    byteorder = "little"
    if f"{prefix}byteorder" in names:
        byteorder = bytes(read(f"{prefix}byteorder")).decode("ascii", "replace").strip()
    if byteorder not in ("little", "big"):
        raise ProfilingInputError(source, f"unknown byteorder {byteorder!r}")

    def load_storage(key: str, dtype: np.dtype[Any]) -> np.ndarray:
        name = f"{prefix}data/{key}"
        try:
            raw = read(name)
        except KeyError:
            raise ProfilingInputError(source, f"storage {name} is missing (truncated file?)") from None
        if len(raw) % dtype.itemsize:
            raise ProfilingInputError(source, f"storage {name} is not a whole number of {dtype}")
        array = np.frombuffer(raw, dtype=dtype.newbyteorder("<" if byteorder == "little" else ">"))
        return array if array.dtype.isnative else array.astype(dtype)

    pickled = bytes(read(pickles[0]))
    _check_memo_indices(source, pickled)
    unpickler = _RestrictedUnpickler(pickled, source, load_storage if tensors else None)
    try:
        return unpickler.load()
    except ProfilingInputError:
        raise
    except (*_ZIP_ERRORS, *_PICKLE_ERRORS) as exc:
        raise ProfilingInputError(source, f"corrupt data.pkl ({type(exc).__name__}: {exc})") from None


# Pickles already walked by _check_memo_indices and found sound. Every rank file of one
# run usually holds the same data.pkl, byte for byte (same shapes, same keys): walking it
# once instead of once a rank takes ~3 % off decoding 8 ranks. Bounded: a run of rank
# files with many different pickles stops remembering, it never grows without end.
_SOUND_PICKLES: set[bytes] = set()
_SOUND_PICKLES_KEPT = 64
_SOUND_PICKLE_MAX_BYTES = 1 << 16


def _check_memo_indices(source: str, pickled: bytes) -> None:
    """Refuse a memo index no pickle of this size can need, before unpickling.

    CPython's C unpickler sizes its memo table by the largest index a PUT names: a 1 KB
    data.pkl naming index 2**30 costs gigabytes of memory and a long stall. Each memo
    entry takes at least one opcode, so an index past the pickle's length only comes from
    a damaged file. A pickle equal to one already found sound is not walked again (the
    answer depends on its bytes alone).
    """
    if pickled in _SOUND_PICKLES:
        return
    if _memo_indices_damaged(source, pickled):
        return
    if len(pickled) <= _SOUND_PICKLE_MAX_BYTES and len(_SOUND_PICKLES) < _SOUND_PICKLES_KEPT:
        _SOUND_PICKLES.add(pickled)


def _memo_indices_damaged(source: str, pickled: bytes) -> bool:
    """Walk the opcodes: raise on a memo index past the pickle's length; True where the
    walk stopped at damage (the unpickler will say what), False where it is sound."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # odd escapes in a STRING opcode
            for _code, arg in pickle_memo_puts(pickled):
                if arg > len(pickled):
                    raise ProfilingInputError(
                        source, f"corrupt data.pkl (memo index {arg} in a {len(pickled)}-byte pickle)"
                    )
    except ValueError:
        # Damaged from here on: the unpickler stops at the same opcode and says why (a
        # foreign global before it is still reported as such).
        return True
    return False


# Every pickle opcode (protocols 0 to 5) by how its argument is read, as the standard
# library's pickletools reads it (tests/runtime/test_pt_io.py compares the two). The walk
# below is pickletools.genops without its import: that module builds its opcode
# documentation when imported, which a first collect paid at its first rank file.
_OPCODE_ARGS: dict[int, str] = {
    **{c: "" for c in b"\x97\x98N\x88\x89]ael)t\x85\x86\x87}dsu\x8f\x90\x91012(1\x94\x93Rbo\x81\x92.Q"},
    **{c: "uint1" for c in b"Khq\x82\x80"},
    **{c: "uint2" for c in b"M\x83"},
    **{c: "int4" for c in b"J\x84"},
    **{c: "uint4" for c in b"jr"},
    ord("\x95"): "uint8",
    ord("G"): "float8",
    **{c: "decimalnl_short" for c in b"Igp"},
    ord("L"): "decimalnl_long",
    ord("\x8a"): "long1",
    ord("\x8b"): "long4",
    ord("S"): "stringnl",
    ord("T"): "string4",
    ord("U"): "string1",
    ord("B"): "bytes4",
    ord("C"): "bytes1",
    ord("\x8e"): "bytes8",
    ord("\x96"): "bytearray8",
    ord("V"): "unicodestringnl",
    ord("\x8c"): "unicodestring1",
    ord("X"): "unicodestring4",
    ord("\x8d"): "unicodestring8",
    ord("F"): "floatnl",
    **{c: "stringnl_noescape_pair" for c in b"ci"},
    ord("P"): "stringnl_noescape",
}
_FIXED = {"uint1": 1, "uint2": 2, "int4": 4, "uint4": 4, "uint8": 8, "float8": 8}
_COUNTED = {"long1": 1, "string1": 1, "bytes1": 1, "unicodestring1": 1, "long4": 4, "string4": 4,
            "bytes4": 4, "unicodestring4": 4, "bytes8": 8, "bytearray8": 8, "unicodestring8": 8}
_MEMO_PUTS = frozenset(b"pqr")  # PUT, BINPUT, LONG_BINPUT
_STOP = ord(".")


def pickle_memo_puts(data: bytes) -> Iterator[tuple[int, int]]:
    """(opcode, memo index) of each PUT, BINPUT and LONG_BINPUT of a pickle, in order, up
    to its STOP. Raises ValueError where pickletools.genops would (damage: an unknown
    opcode, an argument cut short or unreadable, no STOP)."""
    pos, end = 0, len(data)
    while True:
        if pos >= end:
            raise ValueError("pickle exhausted before seeing STOP")
        code = data[pos]
        pos += 1
        kind = _OPCODE_ARGS.get(code)
        if kind is None:
            raise ValueError(f"at position {pos - 1}, opcode {bytes([code])!r} unknown")
        arg = 0
        if not kind:
            pass
        elif kind in _FIXED:
            size = _FIXED[kind]
            if pos + size > end:
                raise ValueError(f"not enough data in stream to read {kind}")
            if code in _MEMO_PUTS:
                arg = int.from_bytes(data[pos : pos + size], "little")
            pos += size
        elif kind in _COUNTED:
            width = _COUNTED[kind]
            if pos + width > end:
                raise ValueError(f"not enough data in stream to read {kind}'s length")
            n = int.from_bytes(data[pos : pos + width], "little", signed=kind in ("long4", "string4"))
            pos += width
            if n < 0:
                raise ValueError(f"{kind} byte count < 0: {n}")
            if pos + n > end:
                raise ValueError(f"expected {n} bytes in a {kind}, but only {end - pos} remain")
            if kind.startswith("unicodestring"):
                str(data[pos : pos + n], "utf-8", "surrogatepass")
            pos += n
        else:
            for _ in range(2 if kind == "stringnl_noescape_pair" else 1):
                line_end = data.find(b"\n", pos)
                if line_end < 0:
                    raise ValueError(f"no newline found when trying to read {kind}")
                line = data[pos:line_end]
                pos = line_end + 1
                arg = _line_argument(kind, line)
        if code in _MEMO_PUTS:
            yield code, arg
        if code == _STOP:
            return


def _line_argument(kind: str, line: bytes) -> int:
    """A newline-ended argument checked as pickletools reads it (ValueError where it
    cannot); a decimal's value (a PUT's memo index), else 0."""
    if kind == "decimalnl_short":
        # pickletools reads "00" and "01" as False and True (protocol 0's booleans)
        return 1 if line == b"01" else 0 if line == b"00" else int(line)
    if kind == "decimalnl_long":
        int(line[:-1] if line[-1:] == b"L" else line)
    elif kind == "floatnl":
        float(line)
    elif kind == "unicodestringnl":
        str(line, "raw-unicode-escape")
    else:  # stringnl, stringnl_noescape(_pair)
        if kind == "stringnl":
            for quote in (b'"', b"'"):
                if line.startswith(quote):
                    if not line.endswith(quote):
                        raise ValueError(f"string quote {quote!r} not found at both ends")
                    line = line[1:-1]
                    break
            else:
                raise ValueError("no string quotes around a stringnl")
        codecs.escape_decode(line)[0].decode("ascii")
    return 0


def load_pt_with_torch(path: str | Path) -> Any:
    """``torch.load(weights_only=True)`` with tensors converted to numpy (torch required)."""
    import torch  # optional: only when the caller asks for the torch path

    def convert(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.detach().cpu().numpy()
        if isinstance(value, dict):
            return type(value)((k, convert(v)) for k, v in value.items())
        if isinstance(value, (list, tuple)):
            return type(value)(convert(v) for v in value)
        return value

    try:
        return convert(torch.load(path, map_location="cpu", weights_only=True))
    except Exception as exc:  # torch raises many types; all mean "this file is unusable"
        raise ProfilingInputError(str(path), f"torch.load failed: {exc}") from None
