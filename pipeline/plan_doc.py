"""The plan's JSON document around its operators (docs/plan-schema.md): apart from the
rendering, so that a plan taken from the user cache prints without importing the parser
or networkx."""

from __future__ import annotations

from collections.abc import Callable
from json.encoder import encode_basestring_ascii as _string
from typing import Any

PLAN_SCHEMA_VERSION = 1


def plans_json(plans: list[dict[str, object]]) -> str:
    return indented_json({"version": PLAN_SCHEMA_VERSION, "operators": plans}) + "\n"


def indented_json(value: Any) -> str:
    """``json.dumps(value, indent=2)``, the same text, in about half the time.

    With an indent, json leaves its C encoder for a pure-Python one whose generators pass
    every value up through each level it is nested in: for a plan of many operators (a
    forest of 240: 75 MB, millions of values) that was a tenth of the whole `plan`. Here
    each value is written once, strings by json's own C escaping. For documents of dicts,
    lists, tuples, strings, numbers, booleans and None — what plans are; anything else is a
    TypeError, as in json. (No check for a container inside itself: a plan has none.)"""
    parts: list[str] = []
    _put(value, parts.append, "\n")
    return "".join(parts)


_INFINITY = float("inf")


def _float(value: float) -> str:
    """As json writes a float (allow_nan: NaN and the infinities as JavaScript names them)."""
    if value != value:
        return "NaN"
    if value == _INFINITY:
        return "Infinity"
    if value == -_INFINITY:
        return "-Infinity"
    return float.__repr__(value)


def _scalar(value: Any) -> str | None:
    """A string, number, boolean or None as json writes it; None for anything else."""
    kind = type(value)
    if kind is str:
        return _string(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if kind is float:
        return _float(value)
    if isinstance(value, str):  # subclasses: as json, by their base type's text
        return _string(value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float(value)
    return None


def _key(key: Any) -> str:
    """A dict key as json writes it: a string, or a number, boolean or None as a string."""
    if isinstance(key, str):
        return _string(key)
    if key is True or key is False or key is None:
        return f'"{_scalar(key)}"'
    if isinstance(key, (int, float)):
        return f'"{_scalar(key)}"'
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _put(value: Any, put: Callable[[str], None], newline: str) -> None:
    """``value``'s text, a container's items each on its own line below ``newline``."""
    text = _scalar(value)
    if text is not None:
        put(text)
        return
    inner = newline + "  "
    # The dict's loop and the list's are one loop written twice, each item's scalar text
    # inline: a call or a generator step per item would cost much of what this saves.
    if isinstance(value, dict):
        if not value:
            put("{}")
            return
        opening, separator = "{" + inner, "," + inner
        for key, item in value.items():
            put(opening + _key(key) + ": ")
            opening = separator
            text = _scalar(item)
            if text is None:
                _put(item, put, inner)
            else:
                put(text)
        put(newline + "}")
        return
    if isinstance(value, (list, tuple)):
        if not value:
            put("[]")
            return
        opening, separator = "[" + inner, "," + inner
        for item in value:
            put(opening)
            opening = separator
            text = _scalar(item)
            if text is None:
                _put(item, put, inner)
            else:
                put(text)
        put(newline + "]")
        return
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
