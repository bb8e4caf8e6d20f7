"""Edits as plain data: collection, conflict detection, in-memory application and diffs.

An `Edit` is a byte range of a file's *original* bytes plus the bytes that replace it, and
the codemod that asked for it (clang-apply-replacements' model). All edits of a run are
collected in an `EditSet` first, which groups them by file (after resolving symlinks),
drops exact duplicates and refuses overlaps; only then are they applied, as if bottom-up,
so every offset keeps referring to the original bytes (Semgrep's lesson).

The engine never touches a byte it was not asked to: line endings, BOM, non-UTF-8 bytes
and tabs pass through untouched, and the unified diff decodes losslessly so `git apply`
reproduces the exact bytes. Writing to disk is `optrace.engine.transaction`'s job.

Conflict rule (deterministic, independent of hash order):

- two edits whose non-empty ranges intersect conflict;
- an insertion (start == end) strictly inside a replaced range conflicts; at either end
  of the range it is fine: at `start` it lands before the replacement, at `end` after it;
- several different insertions at one offset are all kept, concatenated in the order they
  were added (so the codemods' run order decides, and that order is fixed);
- an exact duplicate (same file after `realpath`, same range, same replacement) is
  dropped silently, whichever codemod made it: the first one added is kept;
- an empty insertion changes nothing and is ignored.
"""

from __future__ import annotations

import bisect
import difflib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from optrace.engine.codes import OT030, OT040, OT041
from optrace.engine.diagnostics import Diagnostic, InputError
from optrace.engine.layout import REVIEW_WIDTH as REVIEW_WIDTH  # the width codemods lay their text out at
from optrace.engine.layout import statements, wrap_line
from optrace.engine.source import read_regular
from optrace.engine.vocabulary import CREATED_MARK, FRAG_CLOSE, FRAG_OPEN, LINE_MARK

# Diagnostic codes (README: OT0xx is input and parsing); kept together so they are easy to audit.
CODE_EDIT_CONFLICT = OT040
CODE_EDIT_RANGE = OT041

# A file's change: (old, new); None for a file that does not exist on that side.
FileChange = tuple[bytes | None, bytes | None]

# Patches are text for printing, decoded so that any byte survives the round trip.
PATCH_ENCODING = "utf-8"
PATCH_ERRORS = "surrogateescape"


@dataclass(frozen=True)
class Edit:
    """Replace `original[start:end]` of `path` with `replacement`; start == end inserts."""

    path: Path
    start: int
    end: int
    replacement: bytes
    codemod: str
    note: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"{self.path}: bad edit range {self.start}..{self.end} from {self.codemod}")
        if not isinstance(self.replacement, bytes):
            raise TypeError(f"{self.path}: edit replacement must be bytes, not {type(self.replacement)}")

    @property
    def is_insertion(self) -> bool:
        return self.start == self.end

    def describe(self, data: bytes | None = None) -> str:
        """`codemod replaces bytes A..B (path:line: note)`, for messages; `data` gives the line."""
        if self.is_insertion:
            what = f"inserts at byte {self.start}"
        else:
            what = f"replaces bytes {self.start}..{self.end}"
        where = f"{self.path}:{line_number(data, self.start)}" if data is not None else str(self.path)
        note = f": {self.note}" if self.note else ""
        return f"{self.codemod} {what} ({where}{note})"


class EditError(Exception):
    """An edit that cannot be applied, located as `path:line: CODE message`."""

    def __init__(self, code: str, message: str, path: Path, line: int = 0) -> None:
        self.code = code
        self.message = message
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {code} {message}")


class EditConflict(EditError):
    """Two edits of one file overlap; `first` was added before `second`."""

    def __init__(self, first: Edit, second: Edit, path: Path, data: bytes | None) -> None:
        self.first = first
        self.second = second
        line = line_number(data, second.start) if data is not None else 0
        super().__init__(
            CODE_EDIT_CONFLICT,
            f"conflicting edits: {second.describe(data)} overlaps {first.describe(data)}",
            path,
            line,
        )


class EditOutOfRange(EditError):
    """An edit reaches past the end of the file it was made for (the file changed?)."""


def resolve(path: Path) -> Path:
    """The file's identity: absolute, symlinks resolved (two spellings, one file)."""
    return Path(os.path.realpath(path))


def _read_bytes(path: Path) -> bytes:
    return read_regular(path)


class _FileEdits:
    """One file's edits, kept sorted by (start, end, order added) and free of overlaps.

    Sorted that way, non-overlapping edits also have non-decreasing `end`, so the only
    edit that can conflict with a new one is the first whose end lies past the new start.
    """

    def __init__(self) -> None:
        self.edits: list[Edit] = []
        self.keys: set[tuple[int, int, bytes]] = set()

    def add(self, edit: Edit, on_conflict: Callable[[Edit, Edit], Exception]) -> bool:
        key = (edit.start, edit.end, edit.replacement)
        if key in self.keys:
            return False
        i = bisect.bisect_right(self.edits, edit.start, key=lambda e: e.end)
        if i < len(self.edits) and self.edits[i].start < edit.end:
            raise on_conflict(self.edits[i], edit)
        # insort_right keeps equal (start, end) in the order added: same-offset insertions
        # concatenate in that order, and an insertion at a range's start sorts before it.
        bisect.insort_right(self.edits, edit, key=lambda e: (e.start, e.end))
        self.keys.add(key)
        return True


class EditSet:
    """All edits of a run, grouped by resolved file, deduplicated and conflict-checked.

    `read` is only used to put line numbers into conflict messages (it defaults to reading
    the file; a file that cannot be read is reported by byte offset instead).
    """

    def __init__(self, edits: Iterable[Edit] = (), *, read: Callable[[Path], bytes] | None = None) -> None:
        self._files: dict[Path, _FileEdits] = {}
        self._resolved: dict[Path, Path] = {}  # each spelling resolved once (many edits per file)
        self._read = read or _read_bytes
        self.duplicates: list[Edit] = []
        self.collect(edits)

    def add(self, edit: Edit) -> bool:
        """Add one edit; False when it duplicates one already there. Raises EditConflict."""
        if not edit.replacement and edit.is_insertion:
            return False
        path = self._resolve(edit.path)
        file_edits = self._files.setdefault(path, _FileEdits())

        def conflict(first: Edit, second: Edit) -> Exception:
            try:
                data: bytes | None = self._read(path)
            except OSError:
                data = None
            return EditConflict(first, second, path, data)

        added = file_edits.add(edit, conflict)
        if not added:
            self.duplicates.append(edit)
        return added

    def _resolve(self, path: Path) -> Path:
        resolved = self._resolved.get(path)
        if resolved is None:
            resolved = self._resolved[path] = resolve(path)
        return resolved

    def collect(self, edits: Iterable[Edit]) -> EditSet:
        """Add every edit in order (the order decides same-offset insertions); returns self."""
        for edit in edits:
            self.add(edit)
        return self

    def files(self) -> list[Path]:
        """The resolved paths that have edits, sorted."""
        return sorted(path for path, file_edits in self._files.items() if file_edits.edits)

    def edits_for(self, path: Path) -> tuple[Edit, ...]:
        """One file's edits in application order (by offset, then order added)."""
        file_edits = self._files.get(self._resolve(path))
        return tuple(file_edits.edits) if file_edits else ()

    def __iter__(self) -> Iterator[Edit]:
        for path in self.files():
            yield from self._files[path].edits

    def __len__(self) -> int:
        return sum(len(file_edits.edits) for file_edits in self._files.values())


def apply_edits(original: bytes, edits: Iterable[Edit]) -> bytes:
    """`original` with `edits` (all for this one file) applied; pure.

    Duplicates are dropped and overlaps refused by the same rule as `EditSet`. Every offset
    refers to `original`, exactly as if the edits were applied bottom-up.
    """
    file_edits = _FileEdits()
    for edit in edits:
        if edit.is_insertion and not edit.replacement:
            continue
        file_edits.add(edit, lambda first, second: EditConflict(first, second, first.path, original))
        if edit.end > len(original):
            raise EditOutOfRange(
                CODE_EDIT_RANGE,
                f"edit by {edit.codemod} ends at byte {edit.end}, past the end of the file "
                f"({len(original)} bytes); was the file changed after it was parsed?",
                edit.path,
                line_number(original, len(original)),
            )
    wrapped = _wrap_wide_fragments(original, file_edits.edits)
    for edit in file_edits.edits:
        laid = _wrap_wide_lines(wrapped.get(id(edit), edit.replacement))
        if laid is not None:
            wrapped[id(edit)] = laid
    pieces: list[bytes] = []
    position = 0
    for edit in file_edits.edits:
        pieces.append(original[position : edit.start])
        pieces.append(wrapped.get(id(edit), edit.replacement))
        position = edit.end
    pieces.append(original[position:])
    return b"".join(pieces)


# A reviewer reads the patch at this width (engine/layout.py): a line optrace's fragments
# would take past it (one that was within it before) gets its new parameter or argument
# on a line of its own, or its statements a line each, the fragment's markers around the
# line breaks, so strip still takes exactly it; a whole inserted line past it breaks
# into marked lines.


def _wrap_wide_fragments(original: bytes, edits: list[Edit]) -> dict[int, bytes]:
    """{id(edit): replacement} for the fragment insertions to put on lines of their own."""
    by_line: dict[int, list[Edit]] = {}
    for edit in edits:
        r = edit.replacement
        if (edit.is_insertion and r.startswith(FRAG_OPEN) and r.endswith(FRAG_CLOSE)
                and b"\n" not in r and FRAG_OPEN not in r[len(FRAG_OPEN) :]):
            by_line.setdefault(line_start(original, edit.start), []).append(edit)
    out: dict[int, bytes] = {}
    for start, on_line in by_line.items():
        end = line_end(original, start)
        old_width = end - start
        width = old_width + sum(len(e.replacement) for e in on_line
                                if start <= e.start <= end and e.is_insertion)
        if old_width > REVIEW_WIDTH or width <= REVIEW_WIDTH:
            continue
        nl = newline_of(original)
        text = original[start:end]
        if text.lstrip().startswith(b"#") or text.rstrip().endswith(b"\\"):
            continue  # a directive or a macro's line: a line break would end it
        # A line that gets the profiling parameter or argument: that one goes below, which
        # is enough as a rule; another element on it (a type) stays where it is.
        profiling = any(b"profiling" in e.replacement.lower() for e in on_line)
        for edit in on_line:
            body = edit.replacement[len(FRAG_OPEN) : -len(FRAG_CLOSE)]
            indent = _continuation_indent(original, start, edit.start)
            rest = len(original[edit.start : end].rstrip()) + len(FRAG_CLOSE)  # what the marker ends
            longest = len(body) - 2 + rest if body.startswith(b", ") else max(len(body.rstrip()), rest)
            # Under the open bracket; where there is none, or aligned there the line the
            # fragment ends on would itself run past the width: two steps past the line's
            # own indent, else the line's own indent, whichever first keeps it within.
            own = indent_at(original, start)
            tries = ([indent] if indent != own else []) + [own + b"        ", own]
            indent = next((i for i in tries if len(i) + longest <= REVIEW_WIDTH), own)
            # The profiling parameter or argument always goes below; another element (a
            # type: `tuple<A, B, C>`) only where that brings its lines within the width.
            mine = b"profiling" in body.lower()
            below = mine or (not profiling and len(indent) + longest <= REVIEW_WIDTH)
            if body.startswith(b", ") and below:
                out[id(edit)] = FRAG_OPEN + b"," + nl + indent + body[2:] + FRAG_CLOSE
            elif body.endswith(b", ") and below:
                out[id(edit)] = FRAG_OPEN + nl + indent + body.rstrip() + nl + indent + FRAG_CLOSE
            elif (lines := statements(body)) is not None:
                # `int f() { /*optrace<*/a; b; /*>optrace*/return x; }`: a statement a line,
                # one step in from the line's own indent; the code after the fragment goes
                # on where the closing marker ends its line
                step = _step(original)
                inner = indent_at(original, start) + step
                laid = b"".join(nl + inner + step * level + text for level, text in lines)
                out[id(edit)] = FRAG_OPEN + laid + nl + inner + FRAG_CLOSE
    return out


def _step(data: bytes) -> bytes:
    """One indentation step in the file's own character."""
    return b"\t" if b"\n\t" in data[:65536] and b"\n    " not in data[:65536] else b"    "


def _wrap_wide_lines(replacement: bytes) -> bytes | None:
    """The replacement with each whole C / C++ line it adds (one ending with the line
    mark) past the review width broken into marked lines (engine/layout.py); None when
    none is."""
    if LINE_MARK not in replacement:
        return None
    pieces = replacement.splitlines(keepends=True)
    out: list[bytes] = []
    changed = False
    for piece in pieces:
        body = piece.rstrip(b"\r\n")
        ending = piece[len(body) :]
        if (len(body) > REVIEW_WIDTH and body.endswith(LINE_MARK) and FRAG_OPEN not in body
                and not body.lstrip().startswith(b"#")):
            lines = wrap_line(body[: -len(LINE_MARK)], REVIEW_WIDTH - len(LINE_MARK))
            if len(lines) > 1:
                nl = ending or b"\n"
                head = b"".join(line + LINE_MARK + nl for line in lines[:-1])
                out.append(head + lines[-1] + LINE_MARK + ending)
                changed = True
                continue
        out.append(piece)
    return b"".join(out) if changed else None


def _continuation_indent(data: bytes, start: int, at: int) -> bytes:
    """Where a parameter list's next line starts: after the innermost `(` still open on
    this line before `at`, else under the line's own first character."""
    line = data[start:at]
    opened: list[int] = []
    for i, c in enumerate(line):
        if c == ord("("):
            opened.append(i)
        elif c == ord(")") and opened:
            opened.pop()
    leading = indent_at(data, start)
    if opened and opened[-1] + 1 <= REVIEW_WIDTH // 2:
        return b" " * (opened[-1] + 1)
    return leading


def new_contents(
    editset: EditSet, read: Callable[[Path], bytes] = _read_bytes
) -> dict[Path, tuple[bytes, bytes]]:
    """`{resolved path: (old bytes, new bytes)}` for every file the edits change.

    Each file is read once. Files whose bytes come out identical (edits that rewrite text
    to itself) are left out, so an empty result means there is nothing to do.
    """
    changes: dict[Path, tuple[bytes, bytes]] = {}
    for path in editset.files():
        old = read(path)
        new = apply_edits(old, editset.edits_for(path))
        if new != old:
            changes[path] = (old, new)
    return changes


# --- byte-level helpers for codemods: lines are separated by b"\n" (a CRLF line ends in
# b"\r\n"); a lone b"\r" is not a line break, as for git's diff and for tree-sitter rows.


def line_number(data: bytes, offset: int) -> int:
    """1-based line of `offset` in `data`."""
    return data.count(b"\n", 0, offset) + 1


def line_start(data: bytes, offset: int) -> int:
    """Offset of the first byte of the line holding `offset`."""
    return data.rfind(b"\n", 0, offset) + 1


def line_end(data: bytes, offset: int, *, include_newline: bool = False) -> int:
    """Offset just past the line holding `offset`: before its b"\\r\\n" / b"\\n", or after
    it with `include_newline`. The last line may have no newline: then `len(data)`."""
    newline = data.find(b"\n", offset)
    if newline < 0:
        return len(data)
    if include_newline:
        return newline + 1
    if newline > line_start(data, offset) and data[newline - 1 : newline] == b"\r":
        return newline - 1
    return newline


def indent_at(data: bytes, offset: int) -> bytes:
    """The leading spaces and tabs of the line holding `offset`, exactly as written."""
    start = line_start(data, offset)
    stop = start
    while stop < len(data) and data[stop] in b" \t":
        stop += 1
    return data[start:stop]


def newline_of(data: bytes) -> bytes:
    """The file's dominant line ending, b"\\r\\n" or b"\\n", for inserted lines to match.

    Ties go to the ending of the first line; a file without any newline gets b"\\n".
    """
    total = data.count(b"\n")
    crlf = data.count(b"\r\n")
    lf = total - crlf
    if crlf != lf:
        return b"\r\n" if crlf > lf else b"\n"
    first = data.find(b"\n")
    return b"\r\n" if first > 0 and data[first - 1 : first] == b"\r" else b"\n"


# --- unified diff


def _lines(data: bytes) -> list[str]:
    """Lines with their endings kept, decoded so that `encode_patch` gives the bytes back."""
    text = data.decode(PATCH_ENCODING, PATCH_ERRORS)
    lines = text.split("\n")
    # str.splitlines would also split on \r, \x0c, \u2028...: only \n separates lines here.
    out = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def _range(start: int, length: int) -> str:
    # GNU diff's hunk-range convention (as difflib): an empty range names the line before.
    if length == 1:
        return f"{start + 1}"
    if length == 0:
        return f"{start},0"
    return f"{start + 1},{length}"


# Steps of the shortest-edit-script search before settling for difflib's heuristic match.
_DIFF_BUDGET = 2_000_000

Opcode = tuple[str, int, int, int, int]


def _choose(prev: list[int], base: int, k: int, d: int, n: int, m: int) -> tuple[int, int]:
    """Where round `d`'s path on diagonal `k` starts (x, or -1) and the diagonal it left.

    `prev[base + k]` is round d-1's furthest x on diagonal k (-1: unreachable). Moves that
    would leave the n x m grid are not taken, so no out-of-range point is ever recorded.
    """
    down = prev[base + k + 1] if k < d else -1
    if down >= 0 and down - k > m:
        down = -1
    left = prev[base + k - 1] if k > -d else -1
    right = left + 1 if 0 <= left < n else -1
    if right > down:
        return right, k - 1
    return (down, k + 1) if down >= 0 else (-1, 0)


def _myers(a: list[int], b: list[int], budget: int) -> list[tuple[int, int]] | None:
    """Matched index pairs of a shortest edit script (Myers, 1986); None past `budget` steps.

    O((n + m) * D) time for D changed lines, O(D^2) memory for the backtrack.
    """
    n, m = len(a), len(b)
    if not n or not m:
        return []
    offset = n + m + 1
    v = [-1] * (2 * offset + 1)
    trace: list[list[int]] = []
    work = 0
    for d in range(n + m + 1):
        for k in range(-d, d + 1, 2):
            x = 0 if d == 0 else _choose(v, offset, k, d, n, m)[0]
            if x < 0:
                v[offset + k] = -1
                continue
            y = x - k
            start = x
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            work += x - start
            v[offset + k] = x
            if x == n and y == m:
                trace.append(v[offset - d : offset + d + 1])
                return _backtrack(trace, n, m)
        trace.append(v[offset - d : offset + d + 1])
        work += d + 1
        if work > budget:
            return None
    raise AssertionError("unreachable: the edit script has at most n + m steps")


def _backtrack(trace: list[list[int]], n: int, m: int) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]] = []
    x, k = n, n - m
    for d in range(len(trace) - 1, 0, -1):
        start, came_from = _choose(trace[d - 1], d - 1, k, d, n, m)
        pairs.extend((t, t - k) for t in range(x - 1, start - 1, -1))
        x, k = trace[d - 1][d - 1 + came_from], came_from
    pairs.extend((t, t) for t in range(x - 1, -1, -1))
    pairs.reverse()
    return pairs


def _matching_lines(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """(i, j) pairs of equal lines forming a longest common subsequence, in order."""
    ids: dict[str, int] = {}
    ai = [ids.setdefault(line, len(ids)) for line in a]
    bi = [ids.setdefault(line, len(ids)) for line in b]
    n, m = len(ai), len(bi)
    head = 0
    while head < n and head < m and ai[head] == bi[head]:
        head += 1
    tail = 0
    while tail < n - head and tail < m - head and ai[n - 1 - tail] == bi[m - 1 - tail]:
        tail += 1
    # A line only one side has cannot match: leave it out of the search (GNU diff does too),
    # which makes inserted lines free and keeps the search small.
    in_a = {ai[i] for i in range(head, n - tail)}
    in_b = {bi[j] for j in range(head, m - tail)}
    keep_a = [i for i in range(head, n - tail) if ai[i] in in_b]
    keep_b = [j for j in range(head, m - tail) if bi[j] in in_a]
    core_a, core_b = [ai[i] for i in keep_a], [bi[j] for j in keep_b]
    core = _myers(core_a, core_b, _DIFF_BUDGET)
    if core is None:
        blocks = difflib.SequenceMatcher(None, core_a, core_b).get_matching_blocks()
        core = [(i + t, j + t) for i, j, size in blocks for t in range(size)]
    return (
        [(t, t) for t in range(head)]
        + [(keep_a[i], keep_b[j]) for i, j in core]
        + [(n - tail + t, m - tail + t) for t in range(tail)]
    )


def _opcodes(n: int, m: int, matches: list[tuple[int, int]]) -> list[Opcode]:
    """difflib-style opcodes from matched line pairs."""
    codes: list[Opcode] = []
    i = j = 0
    for x, y in [*matches, (n, m)]:
        if x > i or y > j:
            codes.append(("replace" if x > i and y > j else "delete" if x > i else "insert", i, x, j, y))
        if (x, y) == (n, m):
            break
        last = codes[-1] if codes else None
        if last is not None and last[0] == "equal" and last[2] == x and last[4] == y:
            codes[-1] = ("equal", last[1], x + 1, last[3], y + 1)
        else:
            codes.append(("equal", x, x + 1, y, y + 1))
        i, j = x + 1, y + 1
    return codes


def _groups(codes: list[Opcode], context: int) -> Iterator[list[Opcode]]:
    """Opcodes cut into hunks with `context` lines around changes (as difflib groups them)."""
    if not codes:
        return
    if codes[0][0] == "equal":
        _tag, i1, i2, j1, j2 = codes[0]
        codes[0] = ("equal", max(i1, i2 - context), i2, max(j1, j2 - context), j2)
    if codes[-1][0] == "equal":
        _tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = ("equal", i1, min(i2, i1 + context), j1, min(j2, j1 + context))
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * context:
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def _hunks(a: list[str], b: list[str], context: int) -> Iterator[str]:
    codes = _opcodes(len(a), len(b), _matching_lines(a, b))
    for group in _groups(codes, context):
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2] - first[1])} +{_range(first[3], last[4] - first[3])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from _body(" ", a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from _body("-", a[i1:i2])
            if tag in ("replace", "insert"):
                yield from _body("+", b[j1:j2])


def _body(prefix: str, lines: list[str]) -> Iterator[str]:
    for line in lines:
        if line.endswith("\n"):
            yield prefix + line
        else:
            yield prefix + line + "\n\\ No newline at end of file\n"


def _quote(name: str) -> str:
    """git's quoting for names with quotes, backslashes or control characters."""
    if not any(ch in '"\\' or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name):
        return name
    escapes = {"\t": "\\t", "\n": "\\n", "\r": "\\r", '"': '\\"', "\\": "\\\\"}
    body = "".join(
        escapes.get(ch, f"\\{ord(ch):03o}" if ord(ch) < 0x20 or ord(ch) == 0x7F else ch) for ch in name
    )
    return f'"{body}"'


def _git_mode(path: Path) -> str:
    # A deleted file's mode, so git does not warn "has type 100755, expected 100644".
    try:
        return "100755" if os.stat(path).st_mode & 0o111 else "100644"
    except OSError:
        return "100644"


def _relative(path: Path, root: Path) -> str:
    real, real_root = resolve(path), resolve(root)
    try:
        return real.relative_to(real_root).as_posix()
    except ValueError:
        raise ValueError(f"{path}: outside the patch root {root}") from None


def unified_diff(changes: Mapping[Path, FileChange], root: Path, *, context: int = 3) -> str:
    """A patch of `changes` that `git apply` (and `patch -p1`) accepts, paths relative to `root`.

    git's format: `diff --git` headers, `a/<rel>` / `b/<rel>` names, `/dev/null` for a
    created (old None) or deleted (new None) file (whose mode is read from disk, the only
    I/O here), `\\ No newline at end of file` where due. Bytes are decoded as UTF-8 with
    surrogateescape, so CRLF, BOM and GBK bytes survive: write the patch with
    `encode_patch`, never with a plain `.encode()`.
    """
    entries = sorted((_relative(path, root), path, old, new) for path, (old, new) in changes.items())
    out: list[str] = []
    for rel, path, old, new in entries:
        if old == new:
            continue
        a = _lines(old) if old is not None else []
        b = _lines(new) if new is not None else []
        name_a, name_b = _quote(f"a/{rel}"), _quote(f"b/{rel}")
        # git's extended header: without it an empty file cannot be created or deleted.
        out.append(f"diff --git {name_a} {name_b}\n")
        if old is None:
            out.append("new file mode 100644\n")
        elif new is None:
            out.append(f"deleted file mode {_git_mode(path)}\n")
        if not a and not b:
            continue
        out.append(f"--- {name_a if old is not None else '/dev/null'}\n")
        out.append(f"+++ {name_b if new is not None else '/dev/null'}\n")
        out.extend(_hunks(a, b, context))
    return "".join(out)


def encode_patch(patch: str) -> bytes:
    """The bytes of a patch from `unified_diff`, with every original byte restored."""
    return patch.encode(PATCH_ENCODING, PATCH_ERRORS)


def generated_file_bytes(path: Path, what: str) -> bytes | None:
    """The bytes of a file optrace generates (the runtime header, a sizes header) as they
    are now: None where nothing is at its path (it is created). Refused (InputError,
    nothing written) where something else is: a file optrace did not create (apply would
    overwrite it, and strip delete it as its own: `strip` deletes what starts with the
    created-file mark), a symbolic link (written through, another file would be replaced
    and then deleted), or what is no regular file (a FIFO, a folder)."""
    if not os.path.lexists(path):
        return None
    where = f"{what} optrace writes is generated at this path"
    if os.path.islink(path):
        raise InputError(Diagnostic(OT030, f"{where}, and a symbolic link is there: remove the link",
                                    path, 0))
    try:
        data = read_regular(path)
    except OSError as exc:
        raise InputError(Diagnostic(OT030, f"{where}, and it cannot be read as a file: {exc.strerror or exc}",
                                    path, 0)) from exc
    if not data.startswith(CREATED_MARK):
        raise InputError(Diagnostic(OT030, f"{where}, and a file optrace did not create is there (its "
                                    "first line is not optrace's mark): rename it, or move it out of the way",
                                    path, 1))
    return data
