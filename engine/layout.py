"""C++ text optrace inserts, laid out at the width a reviewer reads (120 columns).

A codemod writes what it inserts as it reads best in the common case: a statement a line,
a few statements in a fragment inside a line. Where that would take a line past the
review width, the engine (`edits.apply_edits`) lays it out again here, without changing a
token: a whole inserted line breaks after an assignment's `=`, before a `.` / `->` of a
call chain, or after a `,` inside brackets, each piece a line of its own ending with the
line mark (strip removes marked lines one by one); a fragment of statements inside a line
(`int f() { /*optrace<*/...; /*>optrace*/return x; }`) becomes a statement a line inside
its markers, blocks opened and closed on lines of their own (strip removes the fragment,
its line breaks with it). Text inside string and character literals is never split, and
a line holding a comment is left as it is.
"""

from __future__ import annotations

#: Columns a reviewer reads a patch at.
REVIEW_WIDTH = 120

_OPEN, _CLOSE = b"([{", b")]}"


def _code_positions(code: bytes) -> list[tuple[int, int]] | None:
    """(offset, bracket depth before it) of every byte outside literals; None when the
    line holds a comment or an unterminated literal (not laid out again)."""
    out: list[tuple[int, int]] = []
    depth = 0
    i = 0
    quote = 0
    while i < len(code):
        c = code[i]
        if quote:
            if c == 0x5C:  # a backslash escapes the next byte
                i += 2
                continue
            if c == quote:
                quote = 0
            i += 1
            continue
        if c in (0x22, 0x27):  # " or '
            quote = c
            i += 1
            continue
        if code.startswith(b"//", i) or code.startswith(b"/*", i):
            return None
        out.append((i, depth))
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth = max(depth - 1, 0)
        i += 1
    return None if quote else out


def _breaks(code: bytes) -> list[tuple[int, int]]:
    """(offset where the next piece starts, preference: lower first) of the places a line
    of code may break without changing a token."""
    positions = _code_positions(code)
    if positions is None:
        return []
    out: list[tuple[int, int]] = []
    for i, depth in positions:
        c = code[i]
        if c == 0x3D and depth == 0 and code[i + 1 : i + 2] == b" " and i > 0 and code[i - 1] == 0x20:
            if code[i - 2 : i - 1] not in (b"=", b"!", b"<", b">"):  # `x = y`, not `x == y`
                out.append((i + 2, 0))
        elif c == 0x2E and depth == 0 and i > 0 and code[i - 1] == 0x29:  # `).Next(`
            out.append((i, 1))
        elif c == 0x2D and code[i + 1 : i + 2] == b">" and depth == 0 and i > 0 and code[i - 1] == 0x29:
            out.append((i, 1))
        elif c == 0x2C and code[i + 1 : i + 2] == b" ":  # `f(a, b)`; a list's own next line
            out.append((i + 2, 2 if depth >= 1 else 3))
    return out


def wrap_line(code: bytes, width: int, step: bytes = b"    ") -> list[bytes]:
    """`code` (one line, its indent included, no line mark) as lines of at most `width`
    columns where it can break: the longest first piece at the most preferred kind of
    break, the rest indented two steps past the line's own indent. Unchanged when it
    fits or nothing breaks it."""
    indent = code[: len(code) - len(code.lstrip(b" \t"))]
    cont = indent + step + step
    lines: list[bytes] = []
    while len(code) > width:
        found = [(kind, at) for at, kind in _breaks(code) if len(code[:at].rstrip()) <= width
                 and code[:at].strip() and len(code) - at > 0]
        if not found:
            break
        best = min(kind for kind, _ in found)
        at = max(at for kind, at in found if kind == best)
        head, rest = code[:at].rstrip(), code[at:].lstrip()
        if len(cont) + len(rest) >= len(code):
            break  # no shorter for it
        lines.append(head)
        code = cont + rest
    lines.append(code)
    return lines


def statements(body: bytes) -> list[tuple[int, bytes]] | None:
    """The statements of a fragment's body (`a; if (x) { b; c; } d;`) as (nesting level,
    text) lines: a statement a line, a block's `{` ending its line and its `}` on one of
    its own. None when the body is not only whole statements (a parameter, an expression,
    a comment, a literal left open)."""
    positions = _code_positions(body)
    if positions is None or not body.strip():
        return None
    out: list[tuple[int, bytes]] = []
    level = 0
    start = 0
    paren = 0
    for i, _depth in positions:
        c = body[i]
        if c in b"([":
            paren += 1
        elif c in b")]":
            paren -= 1
        elif paren == 0 and c == 0x3B:  # `;`
            out.append((level, body[start : i + 1].strip()))
            start = i + 1
        elif paren == 0 and c == 0x7B:  # `{`
            out.append((level, body[start : i + 1].strip()))
            level += 1
            start = i + 1
        elif paren == 0 and c == 0x7D:  # `}`
            if body[start:i].strip() or level == 0:
                return None  # a statement without its `;`, or a brace closing what it did not open
            level -= 1
            out.append((level, b"}"))
            start = i + 1
    if level != 0 or paren != 0 or body[start:].strip():
        return None
    return out
