"""Bases for plain record classes: ``repr``, ``==``, ``hash`` and pickling from their fields.

What the runtime's record types used of ``@dataclass``, without its import-time cost:
dataclasses generate and exec source for every class, a share of collect's start-up that
bench/bench_records.py measures against it in one run (why these are not dataclasses).
A subclass names its fields in constructor order in ``__match_args__`` (as a dataclass
does; ``__reduce__`` passes them positionally), sets ``__slots__ = __match_args__`` and
writes its own ``__init__``.
"""

from __future__ import annotations

from typing import Any, ClassVar, NoReturn


class Record:
    """``ClassName(field=value, ...)`` repr; ``==`` compares the fields of two instances
    of the same class (like a dataclass, so not hashable); pickles by its fields."""

    __slots__ = ()
    __match_args__: ClassVar[tuple[str, ...]] = ()

    def _values(self) -> tuple[Any, ...]:
        return tuple([getattr(self, name) for name in self.__match_args__])

    def __repr__(self) -> str:
        shown = ", ".join([f"{name}={getattr(self, name)!r}" for name in self.__match_args__])
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Record)
        return self._values() == other._values()

    def __reduce__(self) -> tuple[type[Record], tuple[Any, ...]]:
        return type(self), self._values()


class FrozenRecord(Record):
    """A :class:`Record` whose fields cannot be assigned after ``__init__`` (which sets
    them with ``object.__setattr__``); hashable by its fields."""

    __slots__ = ()

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"cannot delete field {name!r}")

    def __hash__(self) -> int:
        return hash(self._values())
