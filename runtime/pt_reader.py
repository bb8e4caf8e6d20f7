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

import io
import os
import pickle
import pickletools
import reprlib
import struct
import warnings
import zipfile
import zlib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ProfilingInputError

# Values from the pickle shown in a message: a few levels only, since shared references
# can make a few hundred bytes of pickle a structure with 2**60 elements.
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 80, 80


def shown(value: Any) -> str:
    """``repr(value)``, bounded in size and time whatever the value is."""
    return _SHORT.repr(value)


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


class _Storage:
    """A storage loaded from ``data/<key>``: a flat numpy array of the storage dtype."""

    __slots__ = ("array", "key")

    def __init__(self, key: str, array: np.ndarray) -> None:
        self.key = key
        self.array = array


def _view(
    source: str, storage: Any, offset: Any, size: Any, stride: Any, dtype: np.dtype[Any] | None
) -> np.ndarray:
    """The tensor ``storage[offset:]`` with ``size``/``stride``, bounds-checked."""
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

    def __init__(self, data: bytes, source: str, load_storage: Callable[[str, np.dtype[Any]], np.ndarray]):
        super().__init__(io.BytesIO(data))
        self._source = source
        self._load_storage = load_storage
        self._storages: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        source = self._source
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module == "torch._utils" and name == "_rebuild_tensor_v2":

            def rebuild_v2(storage: Any, offset: Any, size: Any, stride: Any, *_rest: Any) -> np.ndarray:
                return _view(source, storage, offset, size, stride, None)

            return rebuild_v2
        if module == "torch._utils" and name == "_rebuild_tensor_v3":

            def rebuild_v3(
                storage: Any, offset: Any, size: Any, stride: Any, _grad: Any, _hooks: Any,
                dtype: Any, *_rest: Any,
            ) -> np.ndarray:
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


# What zipfile raises on a damaged archive besides BadZipFile: a member name that is not
# UTF-8, an unknown compression method or flag (NotImplementedError, a RuntimeError), an
# encrypted member (RuntimeError), a corrupt deflate stream, a member cut short.
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, UnicodeDecodeError, RuntimeError, zlib.error,
               EOFError)

#: What a .pt may inflate to, at most, beyond its own size: torch stores members
#: uncompressed, so only a zip bomb declares far more bytes than the file holds.
INFLATE_FLOOR = 256 * 1024 * 1024
INFLATE_RATIO = 64


def load_pt(path: str | Path) -> Any:
    """The object a ``.pt`` holds, with tensors as numpy arrays; never runs pickle code."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
            if not head:
                raise ProfilingInputError(source, "empty file")
            if head[:2] != b"PK":
                raise ProfilingInputError(
                    source,
                    "not a zip-format .pt file (torch < 1.6 or _use_new_zipfile_serialization="
                    "False is not supported; re-save it with a current torch)",
                )
            handle.seek(0)
            size = os.fstat(handle.fileno()).st_size
            return _load_zip(source, zipfile.ZipFile(handle), size)
    except ProfilingInputError:
        raise
    except _ZIP_ERRORS as exc:
        raise ProfilingInputError(source, f"not a readable .pt zip (truncated?): {exc}") from None
    except OSError as exc:
        raise ProfilingInputError(source, f"cannot read: {exc.strerror or exc}") from None


def _load_zip(source: str, zf: zipfile.ZipFile, file_size: int) -> Any:
    declared = sum(info.file_size for info in zf.infolist())
    if declared > max(INFLATE_FLOOR, INFLATE_RATIO * file_size):
        raise ProfilingInputError(
            source, f"members would inflate to {declared} bytes from a {file_size}-byte file: "
            "refused (a zip bomb, or not a torch .pt file)"
        )
    names = zf.namelist()
    pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if not pickles:
        raise ProfilingInputError(source, "no <archive>/data.pkl inside: not a torch .pt file")
    prefix = pickles[0][: -len("data.pkl")]
    byteorder = "little"
    if f"{prefix}byteorder" in names:
        byteorder = zf.read(f"{prefix}byteorder").decode("ascii", "replace").strip()
    if byteorder not in ("little", "big"):
        raise ProfilingInputError(source, f"unknown byteorder {byteorder!r}")

    def load_storage(key: str, dtype: np.dtype[Any]) -> np.ndarray:
        name = f"{prefix}data/{key}"
        try:
            raw = zf.read(name)
        except KeyError:
            raise ProfilingInputError(source, f"storage {name} is missing (truncated file?)") from None
        if len(raw) % dtype.itemsize:
            raise ProfilingInputError(source, f"storage {name} is not a whole number of {dtype}")
        array = np.frombuffer(raw, dtype=dtype.newbyteorder("<" if byteorder == "little" else ">"))
        return array if array.dtype.isnative else array.astype(dtype)

    pickled = zf.read(pickles[0])
    _check_memo_indices(source, pickled)
    unpickler = _RestrictedUnpickler(pickled, source, load_storage)
    try:
        return unpickler.load()
    except ProfilingInputError:
        raise
    except (*_ZIP_ERRORS, *_PICKLE_ERRORS) as exc:
        raise ProfilingInputError(source, f"corrupt data.pkl ({type(exc).__name__}: {exc})") from None


def _check_memo_indices(source: str, pickled: bytes) -> None:
    """Refuse a memo index no pickle of this size can need, before unpickling.

    CPython's C unpickler sizes its memo table by the largest index a PUT names: a 1 KB
    data.pkl naming index 2**30 costs gigabytes and seconds. Each memo entry takes at least
    one opcode, so an index past the pickle's length only comes from a damaged file.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # odd escapes in a STRING opcode
            for opcode, arg, _pos in pickletools.genops(pickled):
                if opcode.name in ("PUT", "BINPUT", "LONG_BINPUT") and int(arg or 0) > len(pickled):
                    raise ProfilingInputError(
                        source, f"corrupt data.pkl (memo index {arg} in a {len(pickled)}-byte pickle)"
                    )
    except ValueError:
        # Damaged from here on: the unpickler stops at the same opcode and says why (a
        # foreign global before it is still reported as such).
        return


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
