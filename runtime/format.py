"""The device buffer format (docs/buffer-format.md): constants, event packing, metadata.

Everything that both the device runtime block (codemods/templates/moe_tracing_runtime.h)
and the host readers must agree on lives here, so a change is made in one place.
"""

from __future__ import annotations

from typing import Any

from .records import FrozenRecord

#: int64 words per core slot, as in the legacy ``<op>_base.h``.
PROF_SIZE_PER_CORE = 2048

#: Version of optrace's rank-file metadata and of the runtime block's record layout.
FORMAT_VERSION = 1

#: Point id of the reserved first record optrace's runtime writes per slot; its high word
#: holds the build fingerprint. Preprocessed ids start at 1, so 0 never names a label.
FINGERPRINT_POINT_ID = 0

#: A counter above this cannot come from a real launch (4 G records on one core would
#: take minutes); it means the counter word itself was overwritten.
MAX_PLAUSIBLE_COUNTER = 1 << 32

#: Point ids live in 1 .. 2**31-1 (positive int32, safe in any kernel integer type).
POINT_ID_SPACE = 0x7FFFFFFF

DEFAULT_CLOCK_MHZ = 50.0

#: Core types a kernel can declare (point_map.json "cores").
CORE_TYPES = ("AIC", "AIV")

_FNV_OFFSET = 2166136261
_FNV_PRIME = 16777619


def capacity(slot_words: int) -> int:
    """Records one slot can hold: word 0 is the counter, the last word the start cycle."""
    return (slot_words - 2) // 2


def pack_event(point_id: int, extra_id: int = 0, index: int = 0) -> int:
    """The int64 event word the three-argument ``MoeTracing(id, extraId, index)`` writes."""
    high = ((extra_id & 0xFF) | ((index & 0xFFFFFF) << 8)) & 0xFFFFFFFF
    word = (high << 32) | (point_id & 0xFFFFFFFF)
    return word - (1 << 64) if word >= 1 << 63 else word


def unpack_event(word: int) -> tuple[int, int, int]:
    """``(point_id, extra_id, index)`` of one event word (signed or unsigned)."""
    word &= (1 << 64) - 1
    high = word >> 32
    return word & 0xFFFFFFFF, high & 0xFF, high >> 8


def fingerprint_word(fingerprint: int) -> int:
    """The event word of the reserved fingerprint record: point id 0, fingerprint high."""
    word = ((fingerprint & 0xFFFFFFFF) << 32) | FINGERPRINT_POINT_ID
    return word - (1 << 64) if word >= 1 << 63 else word


def trace_point_hash(label: str, event_type: str) -> int:
    """The id ``TRACE_POINT(label, type)`` gets, with or without preprocessing.

    FNV-1a 32 over ``label``, a NUL and ``event_type``, folded into 1 .. 2**31-1: the
    same function as ``optrace preprocess`` (engine/preprocess.py ``point_hash``) and as
    ``optrace_detail::TracePointHash`` in the runtime block, so a kernel compiled from
    unpreprocessed sources still records the ids of the map (only a hash collision,
    which preprocess resolves by probing, would differ; preprocess reports those).
    """
    h = _FNV_OFFSET
    for byte in label.encode() + b"\x00" + event_type.encode():
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return (h & POINT_ID_SPACE) or 1


# Plain classes, not dataclasses: defining a dataclass execs generated code, paid at every
# `optrace collect` start, which made this module's import several times slower.
class SlotLayout(FrozenRecord):
    """Which core wrote which slot: ``aic_cores`` AIC slots, then ``aiv_cores`` AIV slots.

    ``aic_cores`` is also the AIV slot offset (``GetBlockNum()`` at launch). Slots past
    ``aic_cores + aiv_cores`` are spare (allocated from an upper bound, normally unused).
    ``typed`` is False when the file did not say which slot is which core type (a
    single legacy tensor): slots are then named ``Core N``.
    """

    __match_args__ = ("slots", "aic_cores", "aiv_cores", "typed")
    __slots__ = __match_args__
    slots: int
    aic_cores: int
    aiv_cores: int
    typed: bool

    def __init__(self, slots: int, aic_cores: int, aiv_cores: int, typed: bool = True) -> None:
        set_ = object.__setattr__
        set_(self, "slots", slots)
        set_(self, "aic_cores", aic_cores)
        set_(self, "aiv_cores", aiv_cores)
        set_(self, "typed", typed)

    def core_of(self, slot: int) -> tuple[str, int]:
        """``("AIC", i)``, ``("AIV", i)``, ``("Core", slot)`` or ``("Spare", slot)``."""
        if not self.typed:
            return "Core", slot
        if slot < self.aic_cores:
            return "AIC", slot
        if slot < self.aic_cores + self.aiv_cores:
            return "AIV", slot - self.aic_cores
        return "Spare", slot


def layout_for_cores(layout: SlotLayout, cores: frozenset[str] | None) -> SlotLayout:
    """The layout of a kernel that declares one core type only (point_map.json "cores"):
    its core i wrote slot i, so every slot the file counts as used (or, untyped, every
    slot) is that type's. A mixed kernel, or a map that does not say (older maps), keeps
    the file's layout."""
    if cores is None or len(cores) != 1:
        return layout
    used = layout.aic_cores + layout.aiv_cores if layout.typed else layout.slots
    if "AIV" in cores:
        return SlotLayout(layout.slots, aic_cores=0, aiv_cores=used)
    return SlotLayout(layout.slots, aic_cores=used, aiv_cores=0)


class RankMeta(FrozenRecord):
    """What a rank file says about the buffer it holds (stored as ``meta`` in our files).

    Legacy files carry none of this; the reader fills in what the tensor shapes imply
    and leaves the rest ``None`` (unknown, not "off").
    """

    __match_args__ = (
        "rank", "slot_words", "aic_cores", "aiv_cores", "typed_layout", "format_version",
        "clock_mhz", "barrier", "fingerprint", "tag", "launch", "aiv_roles", "extra",
    )
    __slots__ = __match_args__
    rank: int
    slot_words: int
    aic_cores: int
    aiv_cores: int
    typed_layout: bool
    format_version: int | None  # None: a legacy file
    clock_mhz: float | None
    barrier: bool | None
    fingerprint: int | None
    tag: str | None
    launch: int
    aiv_roles: dict[str, str]
    extra: dict[str, Any]

    def __init__(
        self,
        rank: int,
        slot_words: int = PROF_SIZE_PER_CORE,
        aic_cores: int = 0,
        aiv_cores: int = 0,
        typed_layout: bool = True,
        format_version: int | None = None,
        clock_mhz: float | None = None,
        barrier: bool | None = None,
        fingerprint: int | None = None,
        tag: str | None = None,
        launch: int = 0,
        aiv_roles: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        set_ = object.__setattr__
        set_(self, "rank", rank)
        set_(self, "slot_words", slot_words)
        set_(self, "aic_cores", aic_cores)
        set_(self, "aiv_cores", aiv_cores)
        set_(self, "typed_layout", typed_layout)
        set_(self, "format_version", format_version)
        set_(self, "clock_mhz", clock_mhz)
        set_(self, "barrier", barrier)
        set_(self, "fingerprint", fingerprint)
        set_(self, "tag", tag)
        set_(self, "launch", launch)
        set_(self, "aiv_roles", {} if aiv_roles is None else aiv_roles)
        set_(self, "extra", {} if extra is None else extra)

    def layout(self, slots: int) -> SlotLayout:
        """The slot layout of a buffer with ``slots`` slots written under this metadata."""
        return SlotLayout(
            slots=slots, aic_cores=self.aic_cores, aiv_cores=self.aiv_cores, typed=self.typed_layout
        )

    @property
    def legacy(self) -> bool:
        return self.format_version is None

    def to_dict(self) -> dict[str, Any]:
        """Every field, containers copied deeply (what ``dataclasses.asdict`` gave)."""
        return {name: _copied(getattr(self, name)) for name in self.__match_args__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankMeta:
        known = set(cls.__match_args__)
        kwargs = {k: v for k, v in data.items() if k in known}
        extra = dict(kwargs.pop("extra", {}) or {})
        extra.update({k: v for k, v in data.items() if k not in known})
        return cls(**kwargs, extra=extra)


def _copied(value: Any) -> Any:
    """A deep copy of ``value``, rebuilding dicts, lists and tuples by type as
    ``dataclasses.asdict`` does."""
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, dict):
        return type(value)((_copied(k), _copied(v)) for k, v in value.items())
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*[_copied(v) for v in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value)
    import copy  # anything else in metadata is rare

    return copy.deepcopy(value)
