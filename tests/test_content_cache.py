"""engine/cache.py: answers cached by content, big files never kept."""

from __future__ import annotations

from optrace.engine.cache import by_content


def test_cached_by_content_and_big_inputs_are_not_kept() -> None:
    calls: list[bytes] = []

    @by_content(4, max_bytes=10)
    def size(data: bytes, kind: str) -> int:
        calls.append(data)
        return len(data)

    assert size(b"abc", "c") == size(b"abc", "c") == 3
    assert calls == [b"abc"]  # the same bytes: asked once
    assert size(b"abd", "c") == 3 and len(calls) == 2  # other bytes, same length: a new key
    assert size(b"abc", "py") == 3 and len(calls) == 3  # the other arguments are part of the key
    big = b"x" * 11
    assert size(big, "c") == size(big, "c") == 11
    assert calls[-2:] == [big, big]  # above max_bytes: computed every time, never held


def test_the_last_big_inputs_are_kept_apart_when_asked() -> None:
    """`big=N`: the last N inputs past the bound are kept (strip asks one large file
    hundreds of times in an apply); older ones are computed again."""
    calls: list[bytes] = []

    @by_content(4, max_bytes=10, big=1)
    def strip(data: bytes) -> bytes:
        calls.append(data)
        return data.upper()

    large, other = b"x" * 50, b"y" * 50
    assert [strip(large), strip(large), strip(large)] == [b"X" * 50] * 3
    assert calls == [large]
    strip(other)
    strip(large)  # pushed out by the other
    assert calls == [large, other, large]
    strip.cache_clear()  # type: ignore[attr-defined]
    strip(large)
    assert calls == [large, other, large, large]
