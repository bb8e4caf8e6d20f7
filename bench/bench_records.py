"""What `@dataclass` would cost the runtime's record classes, against collect's start-up.

The runtime's records (`runtime/records.py`: `Record`, `FrozenRecord`) are plain
`__slots__` classes with a hand-written `__init__`, not dataclasses, because collect's
speed is promised from process start and `@dataclass` generates and execs source for every
class it decorates. This benchmark keeps that choice honest: for every record class that
`import optrace.runtime.collect` defines, it builds the same class both ways in this
process (interleaved rounds, medians) —

- as `optrace` does: a `Record` / `FrozenRecord` subclass with the fields as `__slots__`;
- as `@dataclass(slots=True, frozen=...)` with the same fields (`dataclasses.make_dataclass`)

— and sets the difference against the start-up of `import optrace.runtime.collect` in a
fresh interpreter, measured in the same run. The records stay hand-written while that
share is more than a few per cent.

    python bench/bench_records.py [--rounds N]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import sys
import time
from typing import Any

from optrace.runtime.records import FrozenRecord, Record


def record_classes() -> list[type[Record]]:
    """Every Record subclass that collect's import defines (what its start-up pays for)."""
    import optrace.runtime.collect  # noqa: F401  (defines them)

    found: list[type[Record]] = []
    stack: list[type[Any]] = [Record]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if sub is not FrozenRecord and sub.__module__.startswith("optrace.runtime"):
                found.append(sub)
    return found


def as_record(cls: type[Record]) -> float:
    base = FrozenRecord if issubclass(cls, FrozenRecord) else Record
    fields = cls.__match_args__
    start = time.perf_counter()
    type(cls.__name__, (base,), {"__slots__": fields, "__match_args__": fields, "__init__": cls.__init__})
    return time.perf_counter() - start


def as_dataclass(cls: type[Record]) -> float:
    frozen = issubclass(cls, FrozenRecord)
    fields = [(name, Any) for name in cls.__match_args__]
    start = time.perf_counter()
    dataclasses.make_dataclass(cls.__name__, fields, slots=True, frozen=frozen, eq=True)
    return time.perf_counter() - start


def startup(rounds: int) -> float:
    """Median wall time of a fresh `python -c 'import optrace.runtime.collect'`."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import optrace.runtime.collect"], check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    classes = record_classes()
    records: list[float] = []
    dataclass_times: list[float] = []
    starts: list[float] = []
    for _ in range(args.rounds):  # interleaved: the machine's noise falls on both
        records.append(sum(as_record(c) for c in classes))
        dataclass_times.append(sum(as_dataclass(c) for c in classes))
        starts.append(startup(1))
    rec, dc, up = (statistics.median(v) for v in (records, dataclass_times, starts))
    print(f"{len(classes)} record classes; records {rec * 1e3:.2f} ms, dataclasses {dc * 1e3:.2f} ms, "
          f"collect import {up * 1e3:.1f} ms (medians of {args.rounds})")
    print()
    print("| record classes collect imports | as Record (ms) | as @dataclass (ms) | "
          "dataclass extra / collect import start-up |")
    print("|---|---|---|---|")
    print(f"| {len(classes)} | {rec * 1e3:.2f} | {dc * 1e3:.2f} | {(dc - rec) / up:.1%} |")
    print()
    print("Class creation only, in this process; the start-up is a fresh interpreter importing "
          "`optrace.runtime.collect` (what every `optrace collect` pays before reading a rank).")


if __name__ == "__main__":
    main()
