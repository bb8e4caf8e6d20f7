"""The device buffer format (docs/buffer-format.md): constants, event packing, metadata.

Everything that both the device runtime block (codemods/templates/moe_tracing_runtime.h)
and the host readers must agree on lives here, so a change is made in one place.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

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


@dataclass(frozen=True)
class SlotLayout:
    """Which core wrote which slot: ``aic_cores`` AIC slots, then ``aiv_cores`` AIV slots.

    ``aic_cores`` is also the AIV slot offset (``GetBlockNum()`` at launch). Slots past
    ``aic_cores + aiv_cores`` are spare (allocated from an upper bound, normally unused).
    ``typed`` is False when the file did not say which slot is which core type (a
    single legacy tensor): slots are then named ``Core N``.
    """

    slots: int
    aic_cores: int
    aiv_cores: int
    typed: bool = True

    def core_of(self, slot: int) -> tuple[str, int]:
        """``("AIC", i)``, ``("AIV", i)``, ``("Core", slot)`` or ``("Spare", slot)``."""
        if not self.typed:
            return "Core", slot
        if slot < self.aic_cores:
            return "AIC", slot
        if slot < self.aic_cores + self.aiv_cores:
            return "AIV", slot - self.aic_cores
        return "Spare", slot


@dataclass(frozen=True)
class RankMeta:
    """What a rank file says about the buffer it holds (stored as ``meta`` in our files).

    Legacy files carry none of this; the reader fills in what the tensor shapes imply
    and leaves the rest ``None`` (unknown, not "off").
    """

    rank: int
    slot_words: int = PROF_SIZE_PER_CORE
    aic_cores: int = 0
    aiv_cores: int = 0
    typed_layout: bool = True
    format_version: int | None = None  # None: a legacy file
    clock_mhz: float | None = None
    barrier: bool | None = None
    fingerprint: int | None = None
    tag: str | None = None
    launch: int = 0
    aiv_roles: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def layout(self, slots: int) -> SlotLayout:
        """The slot layout of a buffer with ``slots`` slots written under this metadata."""
        return SlotLayout(
            slots=slots, aic_cores=self.aic_cores, aiv_cores=self.aiv_cores, typed=self.typed_layout
        )

    @property
    def legacy(self) -> bool:
        return self.format_version is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankMeta:
        known = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in data.items() if k in known}
        extra = dict(kwargs.pop("extra", {}) or {})
        extra.update({k: v for k, v in data.items() if k not in known})
        return cls(**kwargs, extra=extra)
