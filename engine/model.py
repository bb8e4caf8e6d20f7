"""The trace tree: regions a plan proposes to bracket with B/E points.

Plain data shared by the planner (which builds it), the rules (which reshape it) and the
output writers. A region's label is its ancestors' words plus its own; the root
`processing` contributes none, so `dispatch aiv token-copy` sits at depth 4.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

ROOT_LABEL = "processing"
CORES = ("AIC", "AIV")


class Kind(StrEnum):
    ROOT = "root"  # the kernel entry's body
    CALL = "call"  # a call statement to a substantial function
    BODY = "body"  # a core-type specialisation's body (operator()<AIC>)
    LOOP = "loop"  # a phase loop body (expert group, stage, token) with its index
    WAIT = "wait"  # a blocking wait: cross-core flag, spin loop
    SYNC = "sync"  # a barrier: SyncAll, CrossCoreBarrier
    EXISTING = "existing"  # a B/E pair already in the source


@dataclass
class Anchor:
    """Where the B and E points go: before/after a statement, or inside a body."""

    path: Path
    start: int  # byte offset of the bracketed range (statement, or body `{`)
    end: int  # byte offset just past it
    line: int
    end_line: int
    inside: bool  # True: points go just inside the braces of a body / loop body


@dataclass
class Region:
    """A node of the trace tree: its label words, kind, cores, where its points go and why."""

    words: list[str]
    kind: Kind
    cores: frozenset[str]
    anchor: Anchor | None
    reason: str
    function: str | None = None  # callee id (CALL) or function id (BODY / ROOT)
    index_var: str | None = None
    hot: str | None = None  # wait / sync / send / recv / copy / quant / dequant
    role: str | None = None
    loop_vars: tuple[str, ...] = ()  # enclosing phase-loop variables (capacity estimate)
    shared_with: str | None = None  # the same code already planned under another label
    covers: Path | None = None  # file of the traced callee (whose time the region measures)
    # (dispatch, arm) of each enclosing variant branch (tiling key, `if constexpr`, `#if`)
    variant: tuple[tuple[str, int], ...] = ()
    # Variants of the other call sites that reach this region's code (planned once, here):
    # its subtree runs in those launches too.
    also_variants: list[tuple[tuple[str, int], ...]] = field(default_factory=list)
    # Cost class (docs/rules.md): phase (work), handshake (wait / notify / barrier) or setup
    # (Init, tiling reads, scalar helpers, copies of a few counters); the budget drops setup first.
    cost: str = "phase"
    full_word: str = ""  # the name a shortened word came from (tells colliding siblings apart)
    # The word the naming rule added to tell it from a sibling (`ping` of `notify-ping`):
    # kept when its name follows a partner phase's.
    told: str = ""
    flag: str | None = None  # a handshake's flag / event id where it is a constant (partner matching)
    # The phase a handshake is named after (its partner, or the phase a barrier ends): its
    # word follows that phase's name as the naming rule shapes it.
    partner: Region | None = field(default=None, compare=False, repr=False)
    # The innermost condition its statement runs under in its own function (`if` or `#if`
    # arm; `!(...)` for an else arm, `return` when the arm ends by returning): what tells
    # it apart from a sibling doing the same thing.
    branch: str = ""
    # A handshake's neighbours in its block: the functions called nearest before and after
    # it (the step it ends or starts when that step has no region of its own); a tile
    # loop's: (its variable, the last other function it calls).
    between: tuple[str, str] = ("", "")
    # A handshake's flag argument as written, its counter dropped, when it is not a
    # constant (`ctx.V2CEvent + 1` -> `ctx.V2CEvent`): one family of flags, one step run again.
    signal: str = ""
    tile_loop: bool = False  # bracketed around a whole tile loop (never inside it)
    same_span: bool = False  # the only work of its parent's body: one level too many
    children: list[Region] = field(default_factory=list)
    label: str = ""
    depth: int = 1
    notes: list[str] = field(default_factory=list)

    def exclusive_with(self, other: Region) -> bool:
        """Never in one launch: the two sit in different arms of one variant dispatch."""
        arms = dict(self.variant)
        return any(d in arms and arms[d] != a for d, a in other.variant)

    def files(self) -> set[Path]:
        """Files whose code this region's points measure: its anchor's and its callee's."""
        out = {self.anchor.path} if self.anchor is not None else set()
        if self.covers is not None:
            out.add(self.covers)
        return out

    def walk(self) -> Iterator[Region]:
        yield self
        for c in self.children:
            yield from c.walk()

    def walk_with_parent(self, parent: Region | None = None) -> Iterator[tuple[Region, Region | None]]:
        yield self, parent
        for c in self.children:
            yield from c.walk_with_parent(self)

    def regions(self) -> list[Region]:
        """This region and every one below it, in ``walk``'s order, as a list built by a
        loop: for code that reads the tree many times over and changes nothing while it
        reads (``walk``'s generators nest one level a region)."""
        out: list[Region] = []
        todo = [self]
        while todo:
            node = todo.pop()
            out.append(node)
            todo.extend(reversed(node.children))
        return out


def assign_labels(root: Region) -> None:
    """Recompute every label and depth from the words on the path from the root.

    A loop over a stack, not a recursion, and the label built from the parent's text rather
    than from a list of every word above: naming calls this after every cut it tries
    (thousands of times on a kernel with many phases). ``count`` (the words above and here)
    decides the root's label and the separator, as the list did, so a word that is the
    empty string still counts."""
    _label_below(root, "", 0)


def relabel_below(node: Region, parent: Region) -> None:
    """What ``assign_labels`` of the whole tree gives ``node`` and the regions below it,
    from ``parent``'s label and depth as they are: for a change of words that touches only
    ``node``'s subtree, where every label outside it is already right (naming cuts one word
    at a time, thousands of times on a kernel with many phases)."""
    count = parent.depth - 1  # the words above and in `parent`
    _label_below(node, parent.label if count else "", count)


def _label_below(top: Region, text: str, count: int) -> None:
    todo: list[tuple[Region, str, int]] = [(top, text, count)]
    while todo:
        node, text, count = todo.pop()
        words = node.words
        if words:
            own = " ".join(words)
            text = f"{text} {own}" if count else own
            count += len(words)
        node.label = text if count else ROOT_LABEL
        node.depth = 1 + count
        for child in node.children:
            todo.append((child, text, count))


@dataclass(frozen=True)
class Dropped:
    """A region the label budget (OT108) dropped: its label, where its points would have
    gone, its cost class and core types, and why."""

    label: str
    path: Path | None
    line: int
    cost: str
    cores: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class TracePoint:
    """One `TRACE_POINT("label", "B"|"E")` in a source file: the one model planning (the
    points already there), `check` and `preprocess` share."""

    label: str
    event: str  # "B" / "E"
    path: Path
    line: int
    start: int = 0  # byte range of the call its reader matched (check: from `MoeTracing(` /
    end: int = 0  # `OptraceEnd x(`; preprocess: the `TRACE_POINT(...)` it replaces)
    guard: bool = False  # an OptraceEnd scope guard: its E runs on every exit of the scope
    indexed: bool = False  # more arguments follow: MoeTracing(TRACE_POINT(...), extraId, index)
    function: str | None = None  # the function holding it, when the reader knows


@dataclass
class LoopInfo:
    """A loop the planner met and how it classified it (phase / tile / spin)."""

    path: Path
    line: int
    var: str | None
    classification: str  # phase / tile / spin
    function: str
    start: int = 0  # byte range of the loop statement
    end: int = 0
    reason: str = ""  # what decided the class: trip count source, nesting or name
