"""Write ``.pt`` files that ``torch.load(..., weights_only=True)`` accepts, without torch.

A ``.pt`` file is a zip (``<archive>/data.pkl``, ``<archive>/data/<key>``, ``byteorder``,
``version``). We emit the pickle opcode by opcode rather than through ``pickle.Pickler``:
the globals torch expects (``torch._utils._rebuild_tensor_v2``, ``torch.LongStorage``)
cannot be pickled by reference when torch is not installed, and a hand-written emitter
keeps the file to exactly the subset our reader (pt_reader.py) and torch's
``weights_only`` unpickler allow. Numpy arrays become tensors; dicts, lists, tuples, str,
int, float, bool and None are written as themselves.
"""

from __future__ import annotations

import io
import struct
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

#: numpy dtype -> the legacy typed-storage class torch writes for ``_rebuild_tensor_v2``.
STORAGE_BY_DTYPE: dict[str, str] = {
    "int64": "LongStorage",
    "int32": "IntStorage",
    "int16": "ShortStorage",
    "int8": "CharStorage",
    "uint8": "ByteStorage",
    "bool": "BoolStorage",
    "float64": "DoubleStorage",
    "float32": "FloatStorage",
    "float16": "HalfStorage",
}

ARCHIVE_NAME = "archive"
_ALIGNMENT = 64  # torch aligns storages to 64 bytes so that mmap=True loads work
_ZIP_LOCAL_HEADER = 30
_ZIP64_LOCAL_EXTRA = 20


class _PickleEmitter:
    """Protocol-2 pickle opcodes for the value types a profiling file holds."""

    def __init__(self) -> None:
        self.out = io.BytesIO()
        self.storages: list[np.ndarray] = []
        self.out.write(b"\x80\x02")  # PROTO 2, what torch.save writes

    def finish(self) -> bytes:
        self.out.write(b".")  # STOP
        return self.out.getvalue()

    def _global(self, module: str, name: str) -> None:
        self.out.write(b"c" + module.encode() + b"\n" + name.encode() + b"\n")

    def _str(self, value: str) -> None:
        data = value.encode("utf-8")
        self.out.write(b"X" + struct.pack("<I", len(data)) + data)

    def _int(self, value: int) -> None:
        if -(1 << 31) <= value < (1 << 31):
            self.out.write(b"J" + struct.pack("<i", value))
            return
        nbytes = (value.bit_length() + 8) // 8  # room for the sign bit
        data = value.to_bytes(nbytes, "little", signed=True)
        if nbytes > 255:
            raise ValueError(f"integer too large to store: {value}")
        self.out.write(b"\x8a" + bytes([nbytes]) + data)  # LONG1

    def _tuple(self, items: tuple[Any, ...] | list[Any]) -> None:
        self.out.write(b"(")  # MARK
        for item in items:
            self.emit(item)
        self.out.write(b"t")  # TUPLE

    def emit(self, value: Any) -> None:
        out = self.out
        if value is None:
            out.write(b"N")
        elif value is True:
            out.write(b"\x88")
        elif value is False:
            out.write(b"\x89")
        elif isinstance(value, np.ndarray):
            self._tensor(value)
        elif isinstance(value, (bool, np.bool_)):
            out.write(b"\x88" if value else b"\x89")
        elif isinstance(value, (int, np.integer)):
            self._int(int(value))
        elif isinstance(value, (float, np.floating)):
            out.write(b"G" + struct.pack(">d", float(value)))
        elif isinstance(value, str):
            self._str(value)
        elif isinstance(value, tuple):
            self._tuple(value)
        elif isinstance(value, list):
            out.write(b"](")  # EMPTY_LIST, MARK
            for item in value:
                self.emit(item)
            out.write(b"e")  # APPENDS
        elif isinstance(value, Mapping):
            out.write(b"}(")  # EMPTY_DICT, MARK
            for key, item in value.items():
                if not isinstance(key, (str, int)):
                    raise TypeError(f"dict keys must be str or int, not {type(key).__name__}")
                self.emit(key)
                self.emit(item)
            out.write(b"u")  # SETITEMS
        else:
            raise TypeError(f"cannot store a {type(value).__name__} in a .pt file")

    def _tensor(self, array: np.ndarray) -> None:
        dtype = array.dtype
        storage = STORAGE_BY_DTYPE.get(dtype.name)
        if storage is None:
            raise TypeError(f"cannot store a {dtype.name} array as a torch tensor")
        # One contiguous little-endian storage per array: the simplest thing torch reads.
        # astype keeps 0-d arrays 0-d (ascontiguousarray would make them 1-d).
        data = array.astype(dtype.newbyteorder("<"), order="C", copy=False)
        key = str(len(self.storages))
        self.storages.append(data)
        itemsize = data.dtype.itemsize
        strides = tuple(s // itemsize for s in data.strides) if data.size else _c_strides(data)
        self._global("torch._utils", "_rebuild_tensor_v2")
        self.out.write(b"(")
        # persistent id: ('storage', storage_type, key, location, numel)
        self.out.write(b"(")
        self._str("storage")
        self._global("torch", storage)
        self._str(key)
        self._str("cpu")
        self._int(int(data.size))
        self.out.write(b"tQ")  # TUPLE, BINPERSID
        self._int(0)  # storage offset
        self._tuple(tuple(int(n) for n in data.shape))
        self._tuple(strides)
        self.out.write(b"\x89")  # requires_grad False
        self._global("collections", "OrderedDict")  # backward hooks: an empty OrderedDict
        self.out.write(b")R")  # EMPTY_TUPLE, REDUCE
        self.out.write(b"tR")  # TUPLE, REDUCE


def _c_strides(array: np.ndarray) -> tuple[int, ...]:
    strides: list[int] = []
    step = 1
    for n in reversed(array.shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def _aligned_info(zf: zipfile.ZipFile, name: str, size: int) -> tuple[zipfile.ZipInfo, bool]:
    """A stored ZipInfo whose data starts on a 64-byte boundary (padding extra 'FB')."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.file_size = size
    zip64 = size > 0x7FFFFFFF
    offset = zf.fp.tell() if zf.fp is not None else 0
    header = _ZIP_LOCAL_HEADER + len(name.encode()) + (_ZIP64_LOCAL_EXTRA if zip64 else 0)
    pad = (-(offset + header + 4)) % _ALIGNMENT
    info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
    return info, zip64


def _write_record(zf: zipfile.ZipFile, name: str, payload: bytes | memoryview) -> None:
    size = len(payload) if isinstance(payload, bytes) else payload.nbytes
    info, zip64 = _aligned_info(zf, name, size)
    with zf.open(info, mode="w", force_zip64=zip64) as handle:
        handle.write(payload)


def dumps_pickle(obj: Any) -> tuple[bytes, list[np.ndarray]]:
    """The ``data.pkl`` bytes for ``obj`` and the storages it refers to, in key order."""
    emitter = _PickleEmitter()
    emitter.emit(obj)
    return emitter.finish(), emitter.storages


def write_pt(obj: Any, target: str | Path | IO[bytes]) -> None:
    """Write ``obj`` as a torch-compatible ``.pt`` to a path or a binary file object.

    Not atomic by itself: callers that need atomicity (save.py) write to a temporary
    file in the destination directory and ``os.replace`` it.
    """
    pickled, storages = dumps_pickle(obj)
    prefix = ARCHIVE_NAME
    with zipfile.ZipFile(target, mode="w", compression=zipfile.ZIP_STORED) as zf:
        _write_record(zf, f"{prefix}/data.pkl", pickled)
        _write_record(zf, f"{prefix}/byteorder", b"little")
        for key, storage in enumerate(storages):
            _write_record(zf, f"{prefix}/data/{key}", storage.reshape(-1).view(np.uint8).data)
        _write_record(zf, f"{prefix}/version", b"3\n")

