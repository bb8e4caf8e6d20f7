"""One check for every number a user or a file gives optrace: finite, of the right kind,
and in its documented range (docs/faults.md lists the ranges).

Options (``--clock-mhz``, ``--rank-offsets``, ``--split``, ``--expect``,
``--fail-on-regression``, ``--align``), metadata read from rank files and traces
(``clock_mhz``) and config budgets (``[density]``, ``trip_counts``) all pass through
:func:`check_number`, so a NaN, an infinity, a bool posing as a number or a value a
thousand times too large is refused with its name (exit 2), never carried into a trace,
a division or a report. The runtime's and the engine's (engine/config.py, by pyproject's
import contracts); stdlib only (records.py is too).
"""

from __future__ import annotations

import math

from .records import FrozenRecord


class NumberError(ValueError):
    """A number out of its documented range; the message names it (the CLI: exit 2)."""


class Range(FrozenRecord):
    """A documented range: ``low`` / ``high`` inclusive unless ``*_open``; ``integer``:
    whole numbers only. (Not a dataclass: this module is on collect's start-up path, and
    importing ``dataclasses`` with ``copy`` would add to it; see records.py.)"""

    __match_args__ = ("low", "high", "low_open", "high_open", "integer", "unit")
    __slots__ = __match_args__
    low: float
    high: float
    low_open: bool
    high_open: bool
    integer: bool
    unit: str

    def __init__(self, low: float, high: float, low_open: bool = False, high_open: bool = False,
                 integer: bool = False, unit: str = "") -> None:
        for name, value in zip(self.__match_args__, (low, high, low_open, high_open, integer, unit),
                               strict=True):
            object.__setattr__(self, name, value)

    def describe(self) -> str:
        left = "(" if self.low_open else "["
        right = ")" if self.high_open else "]"
        kind = "an integer" if self.integer else "a finite number"
        unit = f" {self.unit}" if self.unit else ""
        return f"{kind} in {left}{self._bound(self.low)}, {self._bound(self.high)}{right}{unit}"

    def _bound(self, value: float) -> str:
        # An integer range says its bounds exactly (16777216, not 1.67772e+07).
        return str(int(value)) if self.integer and float(value).is_integer() else f"{value:g}"


#: The documented ranges (docs/faults.md "Numbers").
# A device clock of under 1 kHz is no clock: at 1e-300 MHz every timestamp saturates.
CLOCK_MHZ = Range(0.001, 100_000.0, unit="MHz")
RANK_OFFSET_US = Range(-1e12, 1e12, unit="µs")  # ± about 11 days
RANK = Range(0, 2**31 - 1, integer=True)
SPLIT_BYTES = Range(1024, 2**50, integer=True, unit="bytes")
EXPECT_PERCENT = Range(-100.0, 100.0, unit="%")
REGRESSION_PERCENT = Range(0.0, 1000.0, unit="%")
#: The N of collect's --align LABEL@N: a label does not occur more often on one core than a
#: slot holds.
ALIGN_OCCURRENCE = Range(1, 2**24, integer=True)
TOP = Range(0, 100_000, integer=True, unit="hotspots")
DENSITY_LABELS = Range(1, 10_000, integer=True, unit="labels")
TRIP_COUNT = Range(0, 2**40, integer=True)
#: Timestamps and durations in a trace: ± 1e15 µs (31 years) — past it, sums of them stop
#: being exact and a hostile 1e308 would turn into inf.
TIME_US = Range(-1e15, 1e15, unit="µs")
#: A span's duration: none is negative (its end before its start: no span a reader can sum).
DURATION_US = Range(0.0, 1e15, unit="µs")
#: A framework trace's timestamps (collect --merge): wall-clock µs since the epoch
#: (1.7e15 now), or from any origin, within ± 1e16 µs (317 years). The merged trace
#: counts from its earliest event, within TIME_US.
FRAMEWORK_TS_US = Range(-1e16, 1e16, unit="µs")
#: A device id in a framework trace's args (an int32: Kineto writes -1 for the host).
DEVICE_ID = Range(-(2**31), 2**31 - 1, integer=True)


def check_number(name: str, value: object, bounds: Range) -> float:
    """``value`` as a float when it is a real number (not a bool), finite, whole if
    ``bounds.integer``, and within ``bounds``; else NumberError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NumberError(f"{name} must be {bounds.describe()}, not {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int past the float range
        raise NumberError(f"{name} must be {bounds.describe()}, not an integer of "
                          f"{abs(int(value)).bit_length()} bits") from None
    ok = math.isfinite(number)
    ok = ok and (number > bounds.low if bounds.low_open else number >= bounds.low)
    ok = ok and (number < bounds.high if bounds.high_open else number <= bounds.high)
    ok = ok and (not bounds.integer or number == math.floor(number))
    if not ok:
        raise NumberError(f"{name} must be {bounds.describe()}, not {value!r}")
    return number


def check_optional(name: str, value: object, bounds: Range) -> float | None:
    """:func:`check_number` for an option that may be absent (None)."""
    return None if value is None else check_number(name, value, bounds)
