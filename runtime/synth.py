"""Write device buffers from Python exactly as the runtime block does (tests, bench, demos).

:class:`SlotWriter` mirrors ``MoeTracing`` in codemods/templates/moe_tracing_runtime.h,
with or without optrace's overflow guard and fingerprint record, so the legacy layout
(including its self-overwriting overflow) can be produced too. The host end-to-end test
checks the C++ runtime against the same reader, so the two writers cannot drift apart
unnoticed.
"""

from __future__ import annotations

import numpy as np

from .format import PROF_SIZE_PER_CORE, capacity, fingerprint_word, pack_event


class SlotWriter:
    """One core's slot: ``record`` is ``MoeTracing(id, extraId, index)`` at ``cycle``."""

    def __init__(
        self,
        slot: np.ndarray,
        start_cycle: int,
        *,
        fingerprint: int | None = None,
        guard: bool | None = None,
    ) -> None:
        if slot.dtype != np.int64 or slot.ndim != 1:
            raise ValueError("a slot is a 1-d int64 array")
        self.slot = slot
        self.words = slot.size
        self.cap = capacity(self.words)
        # optrace's runtime has the guard and the fingerprint record; legacy has neither.
        self.guard = fingerprint is not None if guard is None else guard
        slot[0] = 1
        slot[self.words - 1] = np.array(start_cycle % (1 << 64), dtype=np.uint64).view(np.int64)
        if fingerprint is not None:
            self._write(fingerprint_word(fingerprint), start_cycle)

    def _write(self, word: int, cycle: int) -> None:
        # Same statements as MoeTracing: n = buf[0]; [guard] write; buf[0] = n + 1.
        n = int(self.slot[0])
        if not self.guard or n <= self.cap:
            # Without the guard, past capacity the event index runs into the timestamp
            # area (the legacy overflow); writes outside the slot are left out here.
            if 0 <= n < self.words:
                self.slot[n] = word
            ts_index = self.words - 1 - n
            if 0 <= ts_index < self.words:
                self.slot[ts_index] = np.array(cycle % (1 << 64), dtype=np.uint64).view(np.int64)
        self.slot[0] = n + 1

    def record(self, point_id: int, cycle: int, extra_id: int = 0, index: int = 0) -> None:
        self._write(pack_event(point_id, extra_id, index), cycle)


def new_buffer(slots: int, slot_words: int = PROF_SIZE_PER_CORE) -> np.ndarray:
    """A zeroed ``[slots, slot_words]`` int64 buffer, as the GM output is allocated."""
    return np.zeros((slots, slot_words), dtype=np.int64)
