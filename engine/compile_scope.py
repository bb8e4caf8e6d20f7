"""What the compile check needs libclang to read: function bodies optrace did not touch
are left out.

`check` reports errors on the lines optrace inserted, nothing else. Function bodies are
nearly all of libclang's work on a kernel, and most bodies hold no inserted line. Such a
body is handed to libclang as blanks (newlines kept, so every line keeps its number)
unless it can matter to an inserted line:

- it holds an inserted line, or its signature does;
- its return type is deduced or it is `constexpr` (callers depend on its body);
- it names a function whose body is kept (a call may instantiate a template whose
  inserted lines are checked only when instantiated) — to a fixed point; an operator,
  constructor or destructor (called without its name) is named through its class, the
  class's aliases and the members of that type;
- it holds a preprocessor conditional, or the file did not parse cleanly (the body's
  bounds could be wrong): kept whole;
- a free operator (`operator+`) holds a kept body: it is called without its name, so
  nothing of the operator is left out.

Directive lines inside a blanked body stay (a `#define` there may be used later).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from pathlib import Path

from optrace.engine.cpp import CodeIndex, FunctionDef, ParsedFile

_IDENT = re.compile(rb"[A-Za-z_]\w*")
_DEDUCED = re.compile(rb"\b(?:auto|constexpr|consteval|decltype)\b")
_CONDITIONAL = re.compile(rb"^[ \t]*#[ \t]*(?:if|ifdef|ifndef|elif|else|endif)\b", re.M)
_DIRECTIVE_LINE = re.compile(rb"^[ \t]*#(?:[^\n]*\\\r?\n)*[^\n]*", re.M)
# Every byte but CR and LF becomes a space: each line keeps its number and its length.
_BLANKS = bytes(b if b in (0x0A, 0x0D) else 0x20 for b in range(256))


def _is_operator(name: str) -> bool:
    """`operator+`, `operator()`, `operator int`: not a function named `operatorCount`."""
    return name.startswith("operator") and not (name[8:9].isalnum() or name[8:9] == "_")


def _names(fn: FunctionDef, index: CodeIndex, by_class: dict[str, set[bytes]]) -> set[bytes]:
    """What a body that calls `fn` names (`by_class`: a cache of the class's names)."""
    cls = fn.scope.split("::")[-1] if fn.scope else ""
    if not cls or not (fn.name.startswith(("operator", "~")) or fn.name == cls):
        return {fn.name.encode()}
    if cls not in by_class:
        word = re.compile(rf"\b{re.escape(cls)}\b")
        names = {cls.encode()}
        names |= {alias.encode() for alias, targets in index.aliases.items() if cls in targets}
        for info in index.classes.values():
            names |= {member.encode() for member, kind in info.fields.items() if word.search(kind)}
        by_class[cls] = names
    return {fn.name.encode(), *by_class[cls]}


def _holds_one(spans: list[tuple[int, int]], first: int, end: int) -> bool:
    """Whether one of the sorted `spans` from index `first` on (those starting at or after
    a body's start) lies within the body ending at `end`."""
    for a, b in spans[first:]:
        if a > end:
            return False
        if b <= end:
            return True
    return False


def blank_untouched_bodies(index: CodeIndex, parsed: Mapping[Path, ParsedFile],
                           keep_lines: Mapping[Path, Iterable[int]]) -> dict[Path, bytes]:
    """New contents (same length, same line breaks) of the parsed files that have a body
    to leave out; `keep_lines`: per file, the lines optrace inserted."""
    clean = {path for path, pf in parsed.items() if not pf.error_lines}
    functions = [fn for fn in index.functions.values() if fn.src.path in clean]
    inserted = {path: sorted(lines) for path, lines in keep_lines.items()}
    kept: list[bool] = []
    for fn in functions:
        raw = fn.src.raw
        start, end = fn.body.start_byte, fn.body.end_byte
        lines = inserted.get(fn.src.path, [])
        first = fn.src.line_of(fn.node.start_byte)
        at = bisect_left(lines, first)
        keep = ((at < len(lines) and lines[at] <= fn.src.line_of(end))
                or raw[start:start + 1] != b"{" or raw[end - 1:end] != b"}"
                or bool(_DEDUCED.search(raw, fn.node.start_byte, start))
                or bool(_CONDITIONAL.search(raw, start, end)))
        kept.append(keep)
    # To a fixed point: a body naming what a kept body is called by is kept. The names
    # each body left out mentions, read once; then a walk from the kept bodies' names.
    by_class: dict[str, set[bytes]] = {}
    mentioned_in: dict[bytes, list[int]] = {}
    for i, fn in enumerate(functions):
        if not kept[i]:
            for name in set(_IDENT.findall(fn.src.raw, fn.body.start_byte, fn.body.end_byte)):
                mentioned_in.setdefault(name, []).append(i)
    todo = [name for fn, keep in zip(functions, kept, strict=True) if keep
            for name in _names(fn, index, by_class)]
    done: set[bytes] = set()
    while todo:
        name = todo.pop()
        if name in done:
            continue
        done.add(name)
        for i in mentioned_in.get(name, ()):
            if not kept[i]:
                kept[i] = True
                todo.extend(_names(functions[i], index, by_class))
    # A free operator (`operator+`, a conversion) is called without its name (`a + b`):
    # nothing says which bodies call it, so while one is kept, nothing is left out.
    if any(keep and not fn.scope and _is_operator(fn.name) for fn, keep in zip(functions, kept, strict=True)):
        return {}
    spans: dict[Path, list[tuple[int, int]]] = {}
    kept_spans: dict[Path, list[tuple[int, int]]] = {}
    for fn, keep in zip(functions, kept, strict=True):
        span = (fn.body.start_byte + 1, fn.body.end_byte - 1)
        (kept_spans if keep else spans).setdefault(fn.src.path, []).append(span)
    out: dict[Path, bytes] = {}
    for path, blanks in spans.items():
        data = bytearray(parsed[path].src.raw)
        # Kept bodies in order, each body looked up by where it starts: scanning all of
        # them for each body left out grew with the square of the functions.
        inner = sorted(kept_spans.get(path, []))
        starts = [a for a, _ in inner]
        for start, end in blanks:
            if _holds_one(inner, bisect_left(starts, start), end):
                continue  # a kept function inside this body (a local class's method)
            part = bytes(data[start:end])
            directives = [(m.start(), m.end()) for m in _DIRECTIVE_LINE.finditer(part)]
            blanked = bytearray(part.translate(_BLANKS))
            for a, b in directives:
                blanked[a:b] = part[a:b]
            data[start:end] = blanked
        out[path] = bytes(data)
    return out
