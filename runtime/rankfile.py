"""Rank files: their names, how to find them, and how to read both layouts.

Naming: ``rank{NNN}[_{tag}][_launch{K}].pt`` — the legacy helper's ``rank{NNN}.pt`` is
the case with no tag and launch 0. Layouts:

- legacy: ``torch.save`` of a list with one ``[cores, slot_words]`` int64 tensor per
  core type, AIC first (a single tensor is accepted too, with untyped slots);
- optrace: a dict ``{"optrace_profiling": FORMAT_VERSION, "meta": {...}, "data": tensor}``
  where ``data`` is ``[slots, slot_words]`` int64 and ``meta`` is a :class:`RankMeta`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ProfilingInputError, checked_name, shown
from .format import FORMAT_VERSION, RankMeta
from .numbers import CLOCK_MHZ, RANK, NumberError, check_number
from .pt_reader import load_pt
from .records import FrozenRecord, Record

RANK_FILE_RE = re.compile(
    r"^rank(?P<rank>\d+)(?:_(?!launch\d+\.pt$)(?P<tag>[A-Za-z0-9.-]+?))?(?:_launch(?P<launch>\d+))?\.pt$"
)

#: The key that marks a dict as an optrace rank file.
OPTRACE_KEY = "optrace_profiling"


# Plain classes, not dataclasses: defining a dataclass execs generated code, paid at every
# `optrace collect` start, which made this module's import several times slower.
class RankFileName(FrozenRecord):
    __match_args__ = ("rank", "tag", "launch")
    __slots__ = __match_args__
    rank: int
    tag: str | None
    launch: int

    def __init__(self, rank: int, tag: str | None, launch: int) -> None:
        set_ = object.__setattr__
        set_(self, "rank", rank)
        set_(self, "tag", tag)
        set_(self, "launch", launch)

    @property
    def run_key(self) -> tuple[str, int]:
        """Files with the same run key come from the same launch of the same op."""
        return (self.tag or "", self.launch)


def rank_file_name(rank: int, tag: str | None = None, launch: int = 0) -> str:
    """``rank{NNN}[_tag][_launchK].pt``: launch 0 keeps the legacy name."""
    if rank < 0:
        raise ValueError(f"rank must be >= 0, not {rank}")
    if tag is not None and not re.fullmatch(r"[A-Za-z0-9.-]+", tag):
        raise ValueError(f"tag {tag!r} must be letters, digits, '.' or '-'")
    name = f"rank{rank:03d}"
    if tag:
        name += f"_{tag}"
    if launch:
        name += f"_launch{launch}"
    return name + ".pt"


def parse_rank_file_name(name: str) -> RankFileName | None:
    match = RANK_FILE_RE.match(name)
    if match is None:
        return None
    return RankFileName(
        rank=int(match["rank"]), tag=match["tag"], launch=int(match["launch"] or 0)
    )


#: The largest rank a rank file's name may give (as `distributedInfo.rank` and
#: `--rank-offsets` take them).
RANK_MOST = 2**31 - 1


def find_rank_files(directory: Path) -> list[tuple[RankFileName, Path]]:
    """Rank files in ``directory``, ordered by (tag, launch, rank).

    A name that is not a readable file (a link that loops or dangles) is still listed, so
    reading it names the problem instead of the rank silently missing from the trace.
    """
    found: list[tuple[RankFileName, Path]] = []
    for path in directory.iterdir():
        parsed = parse_rank_file_name(path.name)
        if parsed is not None and not path.is_dir():
            if parsed.rank > RANK_MOST:
                # A process id, a dataset's partition and --rank-offsets all take 31 bits:
                # past them two ranks would share a track (a .pftrace's pid wraps).
                raise ProfilingInputError(path, f"rank {parsed.rank} is past {RANK_MOST} (a rank is a "
                                          "31-bit number)")
            found.append((parsed, path))
    found.sort(key=lambda item: (item[0].run_key, item[0].rank))
    return found


class RankBuffer(Record):
    """One rank's device buffer as read from disk: ``data`` is ``[slots, slot_words]``."""

    __match_args__ = ("path", "meta", "data")
    __slots__ = __match_args__
    path: Path
    meta: RankMeta
    data: np.ndarray

    def __init__(self, path: Path, meta: RankMeta, data: np.ndarray) -> None:
        self.path = path
        self.meta = meta
        self.data = data

    @property
    def slots(self) -> int:
        return int(self.data.shape[0])


def _as_int64_2d(source: Path, value: Any, what: str, slot_words: int | None) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise ProfilingInputError(source, f"{what} is a {type(value).__name__}, expected a tensor")
    array: np.ndarray = value
    if array.dtype == np.uint64:
        array = array.view(np.int64)
    if array.dtype != np.int64:
        raise ProfilingInputError(source, f"{what} has dtype {array.dtype}, expected int64")
    if array.ndim == 1 and slot_words and array.size % slot_words == 0:
        array = array.reshape(-1, slot_words)
    if array.ndim != 2:
        raise ProfilingInputError(
            source, f"{what} has shape {tuple(array.shape)}, expected [slots, slot_words]"
        )
    if slot_words is not None and array.shape[1] != slot_words:
        raise ProfilingInputError(
            source, f"{what} has {array.shape[1]} words per slot, the metadata says {slot_words}"
        )
    if array.shape[1] < 4:
        raise ProfilingInputError(source, f"{what} has {array.shape[1]} words per slot: too few")
    return array


#: Metadata is a few dozen small values. A pickle can make a small file hold a structure
#: that is enormous to walk (shared references: 2**60 nodes in 1 KB) or that holds itself;
#: it is refused before anything walks, copies or prints it.
META_MAX_NODES = 10_000
META_MAX_DEPTH = 32


def _check_meta_size(path: Path, raw_meta: dict[Any, Any]) -> None:
    budget = META_MAX_NODES
    stack: list[tuple[Any, int]] = [(raw_meta, 0)]
    while stack:
        value, depth = stack.pop()
        budget -= 1
        if budget < 0 or depth > META_MAX_DEPTH:
            raise ProfilingInputError(
                path, f"metadata is larger than {META_MAX_NODES} values or deeper than {META_MAX_DEPTH} "
                "levels (or refers to itself): corrupt or not an optrace file"
            )
        if isinstance(value, dict):
            if not all(isinstance(key, (str, int)) for key in value):
                raise ProfilingInputError(path, "metadata has a key that is neither a string nor an integer")
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend((item, depth + 1) for item in value)


def _check_meta_types(path: Path, meta: RankMeta) -> None:
    def bad(field: str, want: str) -> ProfilingInputError:
        return ProfilingInputError(path, f"metadata field '{field}' must be {want}")

    for name in ("slot_words", "aic_cores", "aiv_cores", "launch"):
        value = getattr(meta, name)
        # Bounded too: a 2**70 from a hostile file would overflow numpy's shapes.
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= RANK.high:
            raise bad(name, f"a non-negative integer (at most {RANK.high:g})")
    if meta.clock_mhz is not None:
        try:  # finite and in range: an infinite clock makes every time 0, a NaN every time NaN
            check_number("clock_mhz", meta.clock_mhz, CLOCK_MHZ)
        except NumberError:
            raise bad("clock_mhz", CLOCK_MHZ.describe()) from None
    if meta.barrier is not None and not isinstance(meta.barrier, bool):
        raise bad("barrier", "true, false or null")
    if meta.fingerprint is not None and (
        not isinstance(meta.fingerprint, int) or not 0 <= meta.fingerprint <= 0xFFFFFFFF
    ):
        raise bad("fingerprint", "a uint32 or null")
    if not isinstance(meta.aiv_roles, dict):
        raise bad("aiv_roles", "a dict")
    for core, role in meta.aiv_roles.items():  # shown in the AIV cores' thread names
        if not isinstance(role, str):
            raise bad("aiv_roles", "a dict of role names (strings)")
        checked_name(path, f"{core}: {role}", "metadata field 'aiv_roles'")
    if not isinstance(meta.typed_layout, bool):
        raise bad("typed_layout", "true or false")
    if meta.tag is not None and not isinstance(meta.tag, str):
        raise bad("tag", "a string or null")
    if meta.tag is not None:  # shown by inspect and in launch names
        checked_name(path, meta.tag, "metadata field 'tag'")


def rank_buffer_from_object(path: Path, obj: Any, rank: int) -> RankBuffer:
    """Interpret what a rank file holds (either layout)."""
    if isinstance(obj, dict) and OPTRACE_KEY in obj:
        version = obj[OPTRACE_KEY]
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise ProfilingInputError(
                path, f"optrace format version {shown(version)} is newer than this reader ({FORMAT_VERSION})"
            )
        raw_meta = obj.get("meta")
        if not isinstance(raw_meta, dict):
            raise ProfilingInputError(path, "optrace rank file without a 'meta' dict")
        _check_meta_size(path, raw_meta)
        extra = raw_meta.get("extra")
        if extra is not None and not isinstance(extra, dict):
            raise ProfilingInputError(path, "metadata field 'extra' must be a dict")
        try:
            meta = RankMeta.from_dict({**raw_meta, "rank": rank})  # the file name wins
        except (TypeError, ValueError) as exc:
            raise ProfilingInputError(path, f"unreadable metadata: {exc}") from None
        _check_meta_types(path, meta)
        data = _as_int64_2d(path, obj.get("data"), "'data'", meta.slot_words)
        if meta.aic_cores < 0 or meta.aiv_cores < 0 or meta.aic_cores + meta.aiv_cores > data.shape[0]:
            raise ProfilingInputError(
                path,
                f"metadata says {meta.aic_cores} AIC + {meta.aiv_cores} AIV slots, "
                f"the buffer has {data.shape[0]}",
            )
        return RankBuffer(path, meta, data)
    if isinstance(obj, np.ndarray):
        # A bare tensor: the slot count is known, the split between core types is not.
        data = _as_int64_2d(path, obj, "the tensor", None)
        meta = RankMeta(rank=rank, slot_words=int(data.shape[1]), aic_cores=int(data.shape[0]),
                        aiv_cores=0, typed_layout=False)
        return RankBuffer(path, meta, data)
    if isinstance(obj, (list, tuple)):
        if not obj:
            raise ProfilingInputError(path, "empty list: no per-core-type tensors")
        parts = [_as_int64_2d(path, part, f"tensor {i}", None) for i, part in enumerate(obj)]
        widths = {int(p.shape[1]) for p in parts}
        if len(widths) != 1:
            raise ProfilingInputError(path, f"per-core-type tensors differ in width: {sorted(widths)}")
        if len(parts) > 2:
            raise ProfilingInputError(path, f"{len(parts)} tensors: expected [AIC, AIV]")
        data = parts[0] if len(parts) == 1 else np.concatenate(parts)
        aic = int(parts[0].shape[0])
        aiv = int(parts[1].shape[0]) if len(parts) == 2 else 0
        meta = RankMeta(rank=rank, slot_words=widths.pop(), aic_cores=aic, aiv_cores=aiv,
                        typed_layout=len(parts) == 2)
        return RankBuffer(path, meta, data)
    raise ProfilingInputError(
        path, f"holds a {type(obj).__name__}: expected a list of tensors or an optrace dict"
    )


def read_rank_file(path: Path, rank: int | None = None) -> RankBuffer:
    """Read one rank file; the rank comes from the name unless given."""
    if rank is None:
        parsed = parse_rank_file_name(path.name)
        rank = parsed.rank if parsed else 0
    return rank_buffer_from_object(path, load_pt(path), rank)


def iter_rank_buffers(
    files: Iterable[tuple[RankFileName, Path]],
) -> Iterable[tuple[RankFileName, Path, RankBuffer | ProfilingInputError]]:
    """Read files one at a time (so only one rank's buffer is in memory)."""
    for name, path in files:
        try:
            yield name, path, read_rank_file(path, name.rank)
        except ProfilingInputError as exc:
            yield name, path, exc


def list_rank_files(profiling_dir: Path) -> list[tuple[RankFileName, Path]]:
    if not profiling_dir.exists():
        raise ProfilingInputError(profiling_dir, "no such directory")
    if not profiling_dir.is_dir():
        raise ProfilingInputError(profiling_dir, "not a directory (expected a profiling directory)")
    files = find_rank_files(profiling_dir)
    if not files:
        raise ProfilingInputError(profiling_dir, "no rank*.pt files")
    return files
