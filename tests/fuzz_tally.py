"""The figures of a fuzz run: inputs tried, exits by code, crashes, hangs.

Every fuzz loop counts each input's outcome in a `Tally` — an exit code (0, 1 or 2: what
the command, or the CLI around the function under test, would exit with), a **crash**
(any other exception: exit 3 at the CLI, or a broken promise such as strip ∘ apply not
the identity) or a **hang** (the case's time bound hit). With `OPTRACE_FUZZ_TALLY=FILE`
set, the tally is appended to FILE as one JSON line when the loop ends, pass or fail;
`tests/fuzz_all.py` sets it, runs every fuzzer and turns the lines into
`tests/data/fuzz_figures.json`, which `docs/input-matrix.md` shows.

`OPTRACE_FUZZ_SCALE=N` multiplies every fuzzer's CI size by N (1 by default).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

SCALE = int(os.environ.get("OPTRACE_FUZZ_SCALE", "1"))


class Tally:
    """The outcomes of one fuzzer's inputs."""

    def __init__(self, name: str, what: str) -> None:
        self.name = name
        self.what = what  # what one input is, for the table
        self.outcomes: Counter[str] = Counter()
        self.started = time.monotonic()

    def count(self, outcome: int | str) -> None:
        """One input's outcome: an exit code, "crash" or "hang"."""
        self.outcomes[str(outcome)] += 1

    @property
    def inputs(self) -> int:
        return sum(self.outcomes.values())

    def figures(self) -> dict[str, object]:
        exits = {k: v for k, v in sorted(self.outcomes.items()) if k.isdigit()}
        return {"fuzzer": self.name, "what": self.what, "scale": SCALE, "inputs": self.inputs,
                "exits": exits, "crashes": self.outcomes["crash"], "hangs": self.outcomes["hang"],
                "seconds": round(time.monotonic() - self.started)}

    def record(self) -> None:
        target = os.environ.get("OPTRACE_FUZZ_TALLY")
        if target:
            with open(target, "a", encoding="utf-8") as out:
                out.write(json.dumps(self.figures()) + "\n")


@contextmanager
def tally(name: str, what: str) -> Iterator[Tally]:
    """A tally recorded when the block ends, whether its assertions held or not."""
    counts = Tally(name, what)
    try:
        yield counts
    finally:
        counts.record()
