"""A bounded cache for what the engine and the codemods derive from a file's bytes.

Many operators of one run ask the same questions about the same shared files (a
`pybind.cpp`, a sample calling every op), so answers are cached by content — never by
path alone, so a file that changed between two operators is simply another key. The
cache lives as long as the process (the CLI, or a pool worker); an entry holds a whole
file and what was derived from it (a libcst tree is ~100x its source), so files above a
size bound are computed every time instead of kept. One `check` asks the engine's scans
(the includes of a file, its `#if 0` blocks) of the same file tens of times too.

`unchanged_files()` marks a stretch of work in which this process writes no file (plan's
mode probe: every layer's `carries` in mode B, then in A): inside it, `once` keeps what
is derived from the files by path (an operator directory's walk, its host sources'
registrations, a file's clean bytes) for the rest of the stretch, since nothing can have
changed them but another program. Outside one, `once` computes every time: apply, which
writes, keeps nothing by path.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar, cast

P = ParamSpec("P")
R = TypeVar("R")


def by_content(maxsize: int, max_bytes: int = 1 << 20,
               big: int = 0) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """`functools.lru_cache(maxsize)` for a function of bytes (and small hashable values),
    bypassed when its bytes arguments add up to more than `max_bytes` — except for the
    last `big` such calls, kept apart: for a function whose answer is no bigger than its
    bytes (strip's), asked again and again of one large file while it stays the same (a
    2.4 MB header was stripped 327 times by one apply, a minute of it)."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        kept = functools.lru_cache(maxsize=big)(fn)  # maxsize 0: nothing kept

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            size = sum(len(a) for a in (*args, *kwargs.values()) if isinstance(a, bytes))
            if size > max_bytes and not big:
                return fn(*args, **kwargs)
            result: R = cast(Callable[P, R], kept if size > max_bytes else cached)(*args, **kwargs)
            return result

        def cache_clear() -> None:
            cached.cache_clear()
            kept.cache_clear()

        call.cache_clear = cache_clear  # type: ignore[attr-defined]
        return call

    return wrap


class _Stretch(threading.local):
    """The answers `once` keeps while `unchanged_files` runs (per thread), and the objects
    their keys name by identity (kept alive, so an id is not reused meanwhile)."""

    values: dict[Hashable, object] | None = None
    pinned: list[object]


_stretch = _Stretch()


@contextmanager
def unchanged_files() -> Iterator[None]:
    """A stretch in which this process writes no file: `once` keeps its answers until it
    ends. Nested: the outermost stretch is the one that keeps them."""
    if _stretch.values is not None:
        yield
        return
    _stretch.values, _stretch.pinned = {}, []
    try:
        yield
    finally:
        _stretch.values, _stretch.pinned = None, []


def once(key: Hashable, compute: Callable[[], R], *pin: object) -> R:
    """`compute()`, kept under `key` for the rest of the `unchanged_files` stretch (outside
    one: computed every time). `pin`: objects `key` names by `id`. An exception is not
    kept: it is raised again by computing again."""
    values = _stretch.values
    if values is None:
        return compute()
    if key in values:
        return cast(R, values[key])
    value = compute()
    values[key] = value
    _stretch.pinned.extend(pin)
    return value
