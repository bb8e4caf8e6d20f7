"""Apply and strip as computations: operator directory in, file changes out.

Codemods return edits; this module collects them (conflicts and duplicates refused by
the edit engine), turns them into `{path: (old bytes | None, new bytes | None)}` and
leaves writing to the transaction. Nothing here writes.

The kernel layers edit the current bytes. The host layers (`codemods/registry.py`: OpDef,
infer, tiling, aclnn, torch adapter, registration, build hook, Python callers, ...)
edit each file's *clean* bytes — the file with optrace's insertions stripped — and this
module reconciles: a file that is still clean takes their edits as they are; a file that
already carries insertions becomes clean + this run's edits (+ the edits of the other
instrumented operators, when the file carries theirs too). So a second apply changes
nothing, `--mode` switches rewrite what depends on the mode, and another operator's
changes in a shared file stay. Any InputError a codemod raises propagates before
anything is written.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol, TypeVar

from optrace.codemods.kernel_entry import recorded_mode
from optrace.codemods.strip import is_created, mark_lines, strip_bytes
from optrace.engine.cache import unchanged_files
from optrace.engine.codes import OT010, OT015, OT042, OT047, OT048, OT314
from optrace.engine.diagnostics import Diagnostic, InputError, Severity
from optrace.engine.discovery import (
    CPP_EXTS,
    KERNEL_EXTS,
    default_repo_root,
    entries_in,
    is_no_operator,
    repo_index,
    resolve_operator_dir,
    walk_files,
)
from optrace.engine.edits import (
    Edit,
    EditError,
    EditSet,
    FileChange,
    apply_edits,
    generated_file_bytes,
    new_contents,
    resolve,
)
from optrace.engine.index_cache import racy_tick
from optrace.engine.plan import Plan
from optrace.engine.source import blank_comments, overlaid, read_regular
from optrace.engine.vocabulary import SCAFFOLD_BEGIN
from optrace.pipeline.apply_summary import summary_lines
from optrace.pipeline.check import check_operator
from optrace.pipeline.layers import (
    LayerEdits,
    kernel_side,
    layer_carries,
    layer_edits,
    owned_files,
    sizes_header,
)
from optrace.pipeline.plan import AnalysedOnce, plan_operator
from optrace.runtime.regular import overlay_holds
from optrace.runtime.usercache import Signature, signature

EditsByFile = dict[Path, list[Edit]]


@dataclass
class Provenance:
    """How an operator's changes were derived, as plain data (it crosses process
    boundaries): enough for `rebase` to redo exactly the part that depends on files other
    operators of the same run changed, instead of planning the operator again."""

    kind: str  # "apply" or "strip"
    op_name: str  # the name this operator's edits carry in `reconcile`
    neighbour_dir: Path  # the directory `instrumented_operators` reports for it
    exclude: Path  # the directory its `OtherOperators` leaves out (itself)
    entry: Path  # the kernel entry (its recorded mode says which edits others see)
    mode: str  # apply: the mode written; strip: the mode recorded before
    # The files whose bytes are re-derived from their current state (apply: the layer
    # files; strip: every file strip visits), in the order the computation visits them.
    scope: list[Path] = field(default_factory=list)
    # apply: this operator's layer edits per file, on the file's clean bytes, and a digest
    # of those clean bytes (edits are only valid on exactly those bytes).
    mine: EditsByFile = field(default_factory=dict)
    clean_digest: dict[Path, str] = field(default_factory=dict)
    # sha256 of the bytes of each layer file as read before the layer codemods ran and by
    # `_layer_side` after them: more than one digest means it changed while computed.
    read_digest: dict[Path, set[str]] = field(default_factory=dict)
    kernel_files: set[Path] = field(default_factory=set)
    # Files whose current bytes fed anything else (the kernel parse, discovered layers,
    # created / deleted files): another operator changing one means: compute again.
    reads: set[Path] = field(default_factory=set)
    kernel_reads: frozenset[Path] = frozenset()  # what the layer edits' plan parsed
    # The edits `OtherOperators` finds for this operator before the run writes anything
    # (in its recorded mode), and — apply — after its own commit (in the mode written).
    edits_before: EditsByFile | None = None
    edits_after: EditsByFile | None = None


@dataclass
class OperatorChanges:
    """What apply (or strip) would change for one operator, and why not when it cannot."""

    op_dir: Path
    repo_root: Path
    changes: dict[Path, FileChange] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    plan: Plan | None = None
    provenance: Provenance | None = None
    summary: list[str] = field(default_factory=list)  # apply's screen before its diff

    @property
    def name(self) -> str:
        return self.op_dir.name


def apply_changes(op_dir: Path, repo_root: Path | None = None, mode: str | None = None) -> OperatorChanges:
    """Everything `optrace apply` would change for one operator: the kernel side, then
    every other layer it has. `mode` None keeps the mode recorded in the tree (else B)."""
    plan = plan_operator(op_dir, repo_root)
    root = plan.analysis.layers.repo_root
    for linked in (d for d in plan.diagnostics if d.code == OT047):
        # A header of the tree linked out of it: the diff, --patch and --write would all
        # instrument a tree that is not the one the build compiles.
        raise InputError(Diagnostic(OT047, f"{linked.message}; nothing written", linked.path, linked.line))
    recorded = recorded_mode(plan.analysis.entry_fn.src.raw)
    chosen: Diagnostic | None = None
    # The layer files as they are before any layer codemod reads them (`_check_read_once`).
    read_before = _layer_digests(plan)
    edits: LayerEdits | None = None  # the chosen mode's layer edits: computed once
    if mode is None and recorded is None:
        choice, edits = _choose(plan)
        mode, chosen = choice.mode, choice.why
    elif mode == "B" and recorded != "B":
        _refuse_b_with_hint(plan)
    kernel_edits = kernel_side(plan, mode)  # the entry and base header layers
    kernel = [*kernel_edits.entry, *kernel_edits.base]
    created = kernel_edits.created
    effective = mode or recorded or "B"
    kernel_files = {resolve(p) for p in {e.path for e in kernel}}
    own_dir = plan.analysis.layers.op_dir.resolve()
    prov = Provenance("apply", plan.analysis.layers.op_name, own_dir, own_dir,
                      resolve(plan.analysis.entry_fn.src.path), effective, kernel_files=kernel_files)
    prov.read_digest = read_before
    layer_side, layer_created, deleted = _layer_side(plan, effective, kernel_files, prov, edits)
    editset = EditSet([*kernel, *layer_side])
    result = OperatorChanges(op_dir.resolve(), root, plan=plan,
                             diagnostics=[*plan.diagnostics, *([chosen] if chosen else [])], provenance=prov)
    for path, (old, new) in new_contents(editset).items():
        result.changes[path] = (old, new)
    for path, content in {**created, **layer_created}.items():
        result.changes[path] = (None, content)
    for path, content in deleted.items():
        result.changes[path] = (content, None)
    why = (chosen.message.split(": ", 1)[-1] if chosen is not None else
           "recorded in the tree" if recorded is not None and mode is None else "asked (--mode)")
    result.summary = summary_lines(plan, effective, why, result.changes, editset,
                                   {*created, *layer_created})
    # What a multi-operator run needs to rebase this result (see `rebase`): everything the
    # computation read except the layer files `rebase` re-derives.
    prov.kernel_reads = frozenset(resolve(p) for p in plan.analysis.parsed)
    found = {resolve(f.path) for fs in plan.analysis.layers.found.values() for f in fs}
    prov.reads = (set(prov.kernel_reads) | kernel_files | found) - (set(prov.scope) - kernel_files)
    prov.reads |= {*created, *layer_created, *deleted, sizes_header(plan.analysis.layers).resolve()}
    prov.edits_after = prov.mine
    if recorded is not None and recorded != effective:  # others see the recorded mode until then
        prov.edits_before = _by_file(layer_edits(plan, recorded).edits)
    else:
        prov.edits_before = prov.mine
    _check_read_once(result, plan, prov)
    _check_entry_survives(result, plan)
    if recorded is None:
        _refuse_foreign_marks(result, plan)
    _check_strip_undoes(result)
    return result


def _refuse_foreign_marks(result: OperatorChanges, plan: Plan) -> None:
    """An operator not instrumented yet with a line strip would delete for its mark
    alone: a line of someone's own that ends in it (`x = 1;  // optrace`), or what is left
    of an instrumentation whose scaffold is gone. apply's proof compares strip of its
    output with strip of the tree as it is, so such a line passes it and the next strip
    deletes it. Refused, naming the line; nothing written. A marked line another
    instrumented operator wrote is kept by strip (it rebuilds the file with that
    operator's edits): it is not refused.

    Only files with such lines cost anything: strip runs only if one has them."""
    scope = {p.resolve() for p in walk_files(plan.analysis.layers.op_dir)} | owned_files(plan)
    scope |= {resolve(p) for p in plan.analysis.parsed}
    marked: dict[Path, tuple[bytes, list[tuple[int, bytes]]]] = {}
    for path in scope:
        old = result.changes.get(path, (None, None))[0]
        try:
            data = old if old is not None else read_regular(path)
        except OSError:
            continue
        if not is_created(data):
            lines = mark_lines(data, path)
            if lines:
                marked[path] = (data, lines)
    if not marked:
        return
    stripped = strip_changes(result.op_dir, result.repo_root).changes
    for path, (data, lines) in sorted(marked.items()):
        after = stripped.get(path, (data, data))[1]
        if after is None:
            continue
        kept = Counter(line.rstrip(b"\r") for line in after.split(b"\n"))
        for number, line in lines:
            if kept[line.rstrip(b"\r")] > 0:
                kept[line.rstrip(b"\r")] -= 1
                continue
            raise InputError(Diagnostic(
                OT048, "this line ends in optrace's mark (`// optrace`, `# optrace`) but the operator is "
                "not instrumented, so strip would delete it: if optrace wrote it, run `optrace strip` "
                "first; if you did, change its comment; nothing written", path, number))


def _check_strip_undoes(result: OperatorChanges) -> None:
    """strip ∘ apply = identity, checked before anything is written, by the commands that
    will read the tree: `strip` and `check` themselves run on the tree as it would be
    (the new bytes read in place of the old ones, :func:`overlaid`). What either cannot
    read — too deep for strip's plan, a marker swallowed by an unterminated `/*` (found by
    the source fuzzer) — apply does not write: OT048, nothing written."""
    for path, (old, new) in result.changes.items():
        if old is None or new is None or is_created(new):
            continue
        # A `/*` open at the end of the file: the first `*/` optrace inserts would close it,
        # and the file's layers would no longer be found by the strip that starts from them.
        if path.suffix.lower() in CPP_EXTS and blank_comments(old + b"\n*/")[-2:] != b"*/":
            raise InputError(Diagnostic(
                OT048, "an unterminated /* comment: optrace does not edit this file (strip could not "
                "take the edits back); nothing written", path, 0))
    changed = {p: (old, new) for p, (old, new) in result.changes.items()
               if old is not None and new is not None and not is_created(new)}
    if not changed:
        return
    instead: dict[tuple[int, int], bytes] = {}
    for path, (_old, new) in changed.items():
        try:
            st = path.stat()
        except OSError:
            continue  # gone since it was read: the commit refuses it (OT042)
        instead[(st.st_dev, st.st_ino)] = new
    entry = result.plan.analysis.entry_fn.src.path if result.plan is not None else result.op_dir
    failure: Diagnostic | None = None
    with overlaid(instead):
        try:
            # Both read the same bytes: one analysis and one plan of them serve both.
            shared = AnalysedOnce(resolve_operator_dir(result.op_dir), result.repo_root)
            undone = strip_changes(result.op_dir, result.repo_root, shared)
            check_operator(result.op_dir, result.repo_root, compile_safety=False, shared=shared)
        except InputError as exc:
            failure = Diagnostic(
                OT048, f"strip and check could not read the instrumented tree ({exc.diagnostic.format()}); "
                "nothing written", exc.diagnostic.path, exc.diagnostic.line)
        except RecursionError:
            failure = Diagnostic(OT048, "strip and check could not read the instrumented tree (nested too "
                                 "deeply); nothing written", entry, 0)
    if failure is not None:  # checked outside the overlay: the disk's own bytes
        _refuse_if_changed(changed)
        raise InputError(failure)
    # What strip gives on the tree as it is: the old bytes, unless optrace's lines are in
    # them already (this operator instrumented before, or another one sharing the file).
    before = (strip_changes(result.op_dir, result.repo_root).changes
              if any(b"optrace" in old for old, _new in changed.values()) else {})
    for path, (old, new) in changed.items():
        back = undone.changes.get(path, (new, new))[1]
        if back != before.get(path, (old, old))[1]:
            _refuse_if_changed(changed)
            raise InputError(Diagnostic(
                OT048, "strip could not take optrace's edits to this file back (an unterminated "
                "comment or string before them?); nothing written", path, 0))


def _refuse_if_changed(changed: dict[Path, tuple[bytes, bytes]]) -> None:
    """OT042 when a file apply read has changed on disk since: another program saved it
    while apply computed (an editor renames a new file over it, so the read-back found
    the other program's file, not apply's bytes). Not strip's failure: plan again."""
    for path, (old, _new) in sorted(changed.items()):
        try:
            current = read_regular(path)
        except OSError:
            current = None
        if current != old:
            raise InputError(Diagnostic(OT042, "changed while optrace was planning it; nothing written, "
                                        "plan again", path, 0))


def _check_entry_survives(result: OperatorChanges, plan: Plan) -> None:
    """Refuse edits after which the kernel entry would not be found again: strip finds
    what apply added from the entry, so such an apply could not be undone (the source
    fuzzer found one: a statement inside the entry's parameter list)."""
    entry = plan.analysis.layers.entry
    assert entry is not None
    for path, (_old, new) in result.changes.items():
        if new is None or resolve(path) != resolve(entry.path):
            continue
        if not any(e.name == entry.name for e in entries_in(entry.path, new)):
            raise InputError(Diagnostic(
                OT010, f"kernel entry `{entry.name}` would not be found again after the edits, so "
                "strip could not undo them (is its parameter list plain C++?); nothing written",
                entry.path, entry.line))


MODE_CHOSEN = OT314


_T = TypeVar("_T")


def _b_refused_a_applies(plan: Plan, of_mode: Callable[[Plan, str], _T]) -> tuple[Diagnostic | None, _T]:
    """Why mode B is refused where mode A would apply (None: B applies), and what
    `of_mode` gives for the mode that applies (the layer edits, or the probe's edited
    files). Neither mode applying raises B's refusal: that is the reason to fix."""
    try:
        return None, of_mode(plan, "B")
    except InputError as refused:
        try:
            found = of_mode(plan, "A")
        except InputError:
            raise refused from None
        return refused.diagnostic, found


class ModeChoice(NamedTuple):
    """The mode apply would choose ("A" or "B"), why, as the info finding it shows, and the
    files its host-layer edits touch (the plan marks them "edited")."""

    mode: str
    why: Diagnostic
    edited: frozenset[Path] = frozenset()


def edited_files(edits: LayerEdits) -> frozenset[Path]:
    """The files (resolved) a mode's host-layer edits change or create."""
    return frozenset({resolve(e.path) for e in edits.edits} | {resolve(p) for p in edits.created})


def choose_mode(plan: Plan) -> ModeChoice:
    """The mode of an operator that has none recorded and none asked: B (one more return
    value) where every layer can carry the new output, else A (an optional output, Python
    arity unchanged), with the reason as an info diagnostic the plan and apply show."""
    return _choose(plan)[0]


def _choose(plan: Plan) -> tuple[ModeChoice, LayerEdits]:
    """`choose_mode`'s answer and the chosen mode's layer edits (apply writes them)."""
    d, edits = _b_refused_a_applies(plan, layer_edits)
    return _mode_choice(plan, d, edited_files(edits)), edits


def probe_mode(plan: Plan) -> ModeChoice:
    """`choose_mode`'s answer — the same mode, reason and edited files — from each
    layer's `carries` (`layer_carries`): what plan shows, without computing the Python
    layers' LibCST edits. apply computes the edits it writes with `choose_mode`. Mode A
    after a refused B finds what both modes read from the files once (`unchanged_files`:
    the probe writes nothing)."""
    with unchanged_files():
        d, edited = _b_refused_a_applies(plan, layer_carries)
    return _mode_choice(plan, d, edited)


def _mode_choice(plan: Plan, d: Diagnostic | None, edited: frozenset[Path]) -> ModeChoice:
    if d is not None:
        return ModeChoice("A", Diagnostic(MODE_CHOSEN, f"mode A (profiling_data optional, Python arity "
                                          f"unchanged): mode B is refused here: {d.code} {d.message}",
                                          d.path, d.line, Severity.INFO), edited)
    entry = plan.analysis.entry_fn.src.path
    return ModeChoice("B", Diagnostic(MODE_CHOSEN, "mode B (profiling_data is the last output of the op): "
                                      "every layer can carry it", entry, plan.analysis.entry_fn.line,
                                      Severity.INFO), edited)


def _refuse_b_with_hint(plan: Plan) -> None:
    """`--mode B` asked and refused: say so, and that mode A would apply when it would."""
    d, _edited = _b_refused_a_applies(plan, layer_carries)
    if d is not None:
        raise InputError(Diagnostic(d.code, f"{d.message}; use --mode A", d.path, d.line, d.severity))


def _by_file(edits: Iterable[Edit]) -> EditsByFile:
    by_file: EditsByFile = {}
    resolved: dict[Path, Path] = {}  # each spelling resolved once
    for edit in edits:
        path = resolved.get(edit.path)
        if path is None:
            path = resolved[edit.path] = resolve(edit.path)
        by_file.setdefault(path, []).append(edit)
    return by_file


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_read_once(result: OperatorChanges, plan: Plan, prov: Provenance) -> None:
    """Every edit applies to exactly the bytes it was computed from: `new_contents` reads
    each file again, and a file another program changed since the plan parsed it (or
    since the layer codemods read it) would take its edits at stale offsets. Every read
    of a changed file during the computation must have seen the bytes `new_contents`
    read; the commit then compares the disk with these same bytes (OT042), so a change
    at any moment after the first read is refused, never written over."""
    parsed = {resolve(path): _digest(pf.src.raw) for path, pf in plan.analysis.parsed.items()}
    for path, (old, _new) in sorted(result.changes.items()):
        if old is None:
            continue
        expected = set(prov.read_digest.get(path, ())) | ({parsed[path]} if path in parsed else set())
        if expected and expected != {_digest(old)}:
            raise InputError(Diagnostic(OT042, "changed while optrace was planning it; nothing written, "
                                        "plan again", path, 0))


class Neighbourhood(Protocol):
    """Where `reconcile` finds the other instrumented operators' edits of a file."""

    def edits_for(self, path: Path) -> list[tuple[str, Edit]]: ...


def _layer_file(path: Path, data: bytes, clean: bytes, mine: list[Edit], kernel_files: set[Path],
                name: str, others: Neighbourhood) -> list[Edit]:
    """The edits of one layer file's current bytes: the one rule both a single operator's
    computation and `rebase` use, so they cannot disagree."""
    if data == clean:
        return mine
    if path in kernel_files:
        return []  # the kernel codemods own it (layer codemods never target kernel files)
    target = reconcile(data, clean, [(name, e) for e in mine], others, path)
    return [replacement(path, data, target, "layers")] if target != data else []


class _LayerSide(NamedTuple):
    """The host layers' part of one apply: edits of the current bytes, files to create and
    files to delete."""

    edits: list[Edit]
    created: dict[Path, bytes]
    deleted: dict[Path, bytes]


def _layer_digests(plan: Plan) -> dict[Path, set[str]]:
    """What the layer codemods are about to read and may edit, as it is now: the digest of
    each file (`_check_read_once` compares it with what `_layer_side` reads after them)."""
    about_to_read = {resolve(f.path) for fs in plan.analysis.layers.found.values() for f in fs}
    try:
        about_to_read |= owned_files(plan)
    except (InputError, EditError, OSError):
        pass  # the codemods report it
    digests: dict[Path, set[str]] = {}
    for path in about_to_read:
        try:
            if path.is_file():  # a regular file: never a FIFO's endless read
                digests.setdefault(path, set()).add(_digest(read_regular(path)))
        except OSError:
            pass
    return digests


def _layer_side(plan: Plan, mode: str, kernel_files: set[Path], prov: Provenance,
                edits: LayerEdits | None = None) -> _LayerSide:
    """Edits of the current bytes, files to create and files to delete (other layers).
    `edits`: the layer edits of `mode` when choosing the mode computed them already; the
    digests of the files before they were computed are in `prov.read_digest`."""
    layers = edits if edits is not None else layer_edits(plan, mode)
    by_file = _by_file(layers.edits)
    prov.mine = by_file
    others = OtherOperators(plan.analysis.layers.repo_root, plan.analysis.layers.op_dir)
    name = plan.analysis.layers.op_name
    out: list[Edit] = []
    for path in sorted(set(by_file) | set(layers.scopes)):
        prov.scope.append(path)
        if not path.is_file():
            continue
        data = read_regular(path)
        clean = strip_bytes(data, path)
        prov.clean_digest[path] = _digest(clean)
        prov.read_digest.setdefault(path, set()).add(_digest(data))
        out.extend(_layer_file(path, data, clean, by_file.get(path, []), kernel_files, name, others))
    created: dict[Path, bytes] = {}
    deleted: dict[Path, bytes] = {}
    for path, content in layers.created.items():
        now = generated_file_bytes(path, "the sizes header")
        if now is None:
            created[path] = content
        elif now != content:
            out.append(replacement(path, now, content, "sizes header"))
    header = sizes_header(plan.analysis.layers).resolve()
    if header not in layers.created and header.is_file() and is_created(read_regular(header)):
        deleted[header] = read_regular(header)
    return _LayerSide(out, created, deleted)


class OtherOperators:
    """The layer edits of the repository's other instrumented operators (their kernel
    entry carries the scaffold), computed once and only when a file needs them: a file
    several operators touch (a sample calling three ops, one adapter launching two, one
    `pybind.cpp`) is rebuilt from its clean bytes with every operator's edits."""

    def __init__(self, root: Path, exclude: Path) -> None:
        self.root = root
        self.exclude = exclude.resolve()
        self._by_file: dict[Path, list[tuple[str, Edit]]] | None = None

    def edits_for(self, path: Path) -> list[tuple[str, Edit]]:
        if self._by_file is None:
            self._by_file = {}
            for op_dir in instrumented_operators(self.root):
                if op_dir == self.exclude:
                    continue
                try:
                    plan = plan_operator(op_dir, self.root)
                    mode = recorded_mode(plan.analysis.entry_fn.src.raw) or "B"
                    edits = layer_edits(plan, mode).edits
                except (InputError, EditError, OSError):
                    continue  # a broken neighbour keeps nothing of its own here
                for edit in edits:
                    self._by_file.setdefault(resolve(edit.path), []).append((op_dir.name, edit))
        return self._by_file.get(path, [])


def instrumented_operators(root: Path) -> list[Path]:
    """Operator directories under `root` whose kernel entry carries optrace's scaffold.

    The kernel sources are those of the repository's index (`repo_index`: the run's one
    walk, by the same rules as `walk_files`), not a walk of its own: every operator's
    proof asks, and a walk of ops-nn's 34k entries per operator was quadratic in a run."""
    found: set[Path] = set()
    index = repo_index(root)
    kernel = sorted(p for paths in index.source_paths.values() for p in paths
                    if os.path.splitext(p)[1].lower() in KERNEL_EXTS)
    for path in map(Path, kernel):
        try:
            if not _carries_scaffold(path):
                continue
        except OSError:
            continue
        parts = path.parts
        if "op_kernel" in parts:
            found.add(Path(*parts[: len(parts) - 1 - parts[::-1].index("op_kernel")]).resolve())
        else:
            found.add(path.parent.resolve())
    return sorted(found)


# Kernel file -> (its stat signature, whether it carries the scaffold), for this process.
# Every operator's proof strips its instrumented tree, and that strip asks who else is
# instrumented: a run over a repository's operators read every kernel file of it once per
# operator (quadratic: the most of a 240-operator apply that grew faster than its size).
_SCAFFOLD_SEEN: dict[str, tuple[Signature, bool]] = {}


def _carries_scaffold(path: Path) -> bool:
    """Whether the kernel file holds the entry scaffold, read again only when its stat
    signature changed (or may not tell a change: written within its clock's tick), and
    never answered from memory while apply's proof reads other bytes in its place."""
    key = os.fsdecode(path)
    taken = time.time_ns()
    st = os.stat(path)
    sig = signature(st)
    held = overlay_holds(st)
    known = _SCAFFOLD_SEEN.get(key)
    if known is not None and known[0] == sig and not held:
        return known[1]
    found = SCAFFOLD_BEGIN in read_regular(path)
    if not held and max(sig[1], sig[2]) < taken - racy_tick(sig):
        _SCAFFOLD_SEEN[key] = (sig, found)
    return found


def reconcile(data: bytes, clean: bytes, mine: list[tuple[str, Edit]], others: Neighbourhood,
              path: Path) -> bytes:
    """The file this run leaves: clean + this operator's edits, + the other instrumented
    operators' edits when the file carries insertions that are not this one's. Edits are
    applied in operator-name order, so whichever operator runs, the bytes are the same."""
    target = apply_edits(clean, [e for _, e in mine])
    if target == data:
        return data
    foreign = others.edits_for(path)
    if not foreign:
        return target
    ordered = sorted([*mine, *foreign], key=lambda item: item[0])  # stable: keeps each op's order
    return apply_edits(clean, [e for _, e in ordered])


def replacement(path: Path, old: bytes, new: bytes, codemod: str) -> Edit:
    """One edit turning `old` into `new`: the differing middle, common ends left alone."""
    limit = min(len(old), len(new))
    prefix = _common_prefix(old, new, limit)
    suffix = _common_suffix(old, new, limit - prefix)
    return Edit(path, prefix, len(old) - suffix, new[prefix : len(new) - suffix], codemod)


def _common_prefix(a: bytes, b: bytes, limit: int) -> int:
    """The length of the longest common prefix of a and b (at most `limit`), found by
    bisection over slice comparisons (memcmp), not byte by byte in Python: a shared file
    (pybind.cpp) is reconciled once per operator."""
    lo, hi = 0, limit  # a[:lo] == b[:lo]; the answer is <= hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """The length of the longest common suffix of a and b, at most `limit`."""
    la, lb = len(a), len(b)
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[la - mid : la - lo] == b[lb - mid : lb - lo]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def strip_changes(op_dir: Path, repo_root: Path | None = None,
                  shared: AnalysedOnce | None = None) -> OperatorChanges:
    """Everything `optrace strip` would change: marked insertions out, created files gone,
    in the operator directory and in the operator's files elsewhere (torch layer, build
    script, Python callers). A file other instrumented operators also changed keeps their
    changes (it is rebuilt from its clean bytes with their edits). `shared`: the plan as
    another reader of the same bytes made it (apply's proof)."""
    op_dir = resolve_operator_dir(op_dir)
    root = (repo_root or default_repo_root(op_dir)).resolve()
    prov = Provenance("strip", op_dir.name, op_dir.resolve(), op_dir.resolve(), op_dir, "B")
    result = OperatorChanges(op_dir, root, provenance=prov)
    owned: set[Path] = set()
    no_entry: InputError | None = None
    try:
        plan = shared.plan() if shared is not None else plan_operator(op_dir, repo_root)
    except InputError as exc:
        if exc.diagnostic.code == OT015:
            raise  # a folder of operators: stripping it would strip every one below
        # No kernel entry any more: the operator directory is all there is to strip.
        no_entry = exc if is_no_operator(exc.diagnostic, op_dir) else None
    else:
        owned = set(owned_files(plan))
        # For a multi-operator run (see `rebase`): what the plan read, and the edits the
        # other operators see for this one while it is still instrumented.
        prov.op_name = plan.analysis.layers.op_name
        prov.neighbour_dir = plan.analysis.layers.op_dir.resolve()
        prov.entry = resolve(plan.analysis.entry_fn.src.path)
        prov.kernel_reads = frozenset(resolve(p) for p in plan.analysis.parsed)
        prov.reads = {resolve(f.path) for fs in plan.analysis.layers.found.values() for f in fs}
        prov.mode = recorded_mode(plan.analysis.entry_fn.src.raw) or "B"
        try:
            # Only a multi-operator run reads them (`rebase`); apply's proof, which shares
            # its plan (`shared`), reads the changes alone.
            prov.edits_before = _by_file(layer_edits(plan, prov.mode).edits) if shared is None else {}
        except (InputError, EditError, OSError):
            prov.edits_before = {}  # as `OtherOperators` treats a broken neighbour
    others = OtherOperators(root, op_dir)
    paths = [p.resolve() for p in walk_files(op_dir) if p.suffix.lower() in CPP_EXTS
             or p.suffix.lower() in (".py", ".sh", ".bash", ".cmake") or p.name == "CMakeLists.txt"]
    prov.scope = sorted(set(paths) | owned)
    # Another operator's commit changing one of these means computing again; the files in
    # scope `rebase` re-derives, except kernel sources (they decide what `owned` is).
    prov.reads = (prov.reads - set(prov.scope)) | prov.kernel_reads
    for path in prov.scope:
        change = _strip_file(path, others)
        if change is not None:
            result.changes[path] = change
    if no_entry is not None and not result.changes:
        raise no_entry  # no entry and nothing optrace wrote: not an operator, as plan says
    return result


def _strip_file(path: Path, others: Neighbourhood) -> FileChange | None:
    """What strip does to one file, from its current bytes: the one rule both a single
    operator's computation and `rebase` use."""
    try:
        data = read_regular(path)
    except OSError:
        return None
    if is_created(data):
        return (data, None)
    clean = strip_bytes(data, path)
    new = data
    if clean != data:
        # Every file keeps the other instrumented operators' edits, not only the host files
        # this operator owns: another operator's launch file may sit in this one's folder.
        new = reconcile(data, clean, [], others, path)
    return (data, new) if new != data else None


# --- several operators in one run -------------------------------------------------------------


class Neighbours:
    """The instrumented operators of one repository while a multi-operator run commits,
    with their layer edits: what `OtherOperators` would find at this moment of the run.

    Operators of the run bring their edits from their own computation (`Provenance`);
    only an operator the run does not know is planned, once, as `OtherOperators` would.
    Its state is kept current from the files each commit wrote."""

    def __init__(self, root: Path) -> None:
        self.root = root
        # kernel source (resolved) -> (operator dirs it counts for, carries the scaffold)
        self._kernel: dict[Path, tuple[set[Path], bool]] | None = None
        self._instrumented: list[Path] | None = None  # `instrumented()` until _kernel changes
        self._edits: dict[Path, tuple[EditsByFile, frozenset[Path]]] = {}

    def _scan(self) -> dict[Path, tuple[set[Path], bool]]:
        if self._kernel is None:
            self._kernel = {}
            for path in walk_files(self.root, KERNEL_EXTS):
                try:
                    scaffold = SCAFFOLD_BEGIN in read_regular(path)
                except OSError:
                    continue
                dirs, had = self._kernel.setdefault(resolve(path), (set(), False))
                dirs.add(_operator_of(path))
                self._kernel[resolve(path)] = (dirs, had or scaffold)
        return self._kernel

    def instrumented(self) -> list[Path]:
        """As `instrumented_operators(root)` would answer now."""
        kernel = self._scan()
        if self._instrumented is None:
            self._instrumented = sorted({d for dirs, scaffold in kernel.values() if scaffold for d in dirs})
        return self._instrumented

    def know(self, op_dir: Path, edits: EditsByFile, reads: frozenset[Path]) -> None:
        """`op_dir`'s layer edits as planning it now would give; valid while none of
        `reads` (the kernel files its plan parsed) changes."""
        self._edits[op_dir] = (edits, reads)

    def written(self, paths: Iterable[Path]) -> set[Path]:
        """A commit wrote `paths` (resolved): update who is instrumented, forget edits
        whose plan read one of them (returned: their operators)."""
        paths = set(paths)
        stale: set[Path] = set()
        for path in paths:
            if self._kernel is not None and path.suffix.lower() in KERNEL_EXTS:
                self._instrumented = None
                if path not in self._kernel:
                    self._kernel = None  # a kernel file appeared: walk again when asked
                    continue
                dirs, _ = self._kernel[path]
                try:
                    self._kernel[path] = (dirs, SCAFFOLD_BEGIN in read_regular(path))
                except OSError:
                    self._kernel[path] = (dirs, False)
        for op_dir, (_, reads) in list(self._edits.items()):
            if reads & paths:
                del self._edits[op_dir]
                stale.add(op_dir)
        return stale

    def edits_of(self, op_dir: Path) -> EditsByFile:
        known = self._edits.get(op_dir)
        if known is not None:
            return known[0]
        edits: EditsByFile = {}
        reads: frozenset[Path] = frozenset()
        try:
            plan = plan_operator(op_dir, self.root)
            reads = frozenset(resolve(p) for p in plan.analysis.parsed)
            edits = _by_file(layer_edits(plan, recorded_mode(plan.analysis.entry_fn.src.raw) or "B").edits)
        except (InputError, EditError, OSError):
            pass  # a broken neighbour keeps nothing of its own here (as in OtherOperators)
        self._edits[op_dir] = (edits, reads)
        return edits

    def view(self, exclude: Path) -> Neighbourhood:
        return _View(self, exclude.resolve())


@dataclass
class _View:
    """`OtherOperators` for one operator of the run, answered by `Neighbours`."""

    neighbours: Neighbours
    exclude: Path

    def edits_for(self, path: Path) -> list[tuple[str, Edit]]:
        out: list[tuple[str, Edit]] = []
        for op_dir in self.neighbours.instrumented():
            if op_dir != self.exclude:
                out.extend((op_dir.name, e) for e in self.neighbours.edits_of(op_dir).get(path, []))
        return out


def _operator_of(kernel_file: Path) -> Path:
    """The operator directory `instrumented_operators` reports for a kernel source."""
    parts = kernel_file.parts
    if "op_kernel" in parts:
        return Path(*parts[: len(parts) - 1 - parts[::-1].index("op_kernel")]).resolve()
    return kernel_file.parent.resolve()


def rebase(result: OperatorChanges, written: set[Path], changed_edits: set[Path],
           neighbours: Neighbours) -> OperatorChanges | None:
    """`result` as if computed now, after earlier operators of the run committed
    `written` (resolved paths) and changed the edits other operators see for
    `changed_edits`: exactly what computing the operator now would give, or None when
    that cannot be known without computing it again.

    Why it is exact: the layer codemods edit clean bytes, which marked insertions do not
    change, so this operator's layer edits still hold (checked: same clean digest), and a
    file's new bytes are a function of its current bytes, those edits and the other
    instrumented operators' edits — recomputed here with the same `_layer_file` /
    `_strip_file` rule. Anything else the computation read (kernel sources, created files,
    discovered files outside its scope) having changed means None."""
    prov = result.provenance
    if prov is None:
        return None
    if prov.reads & written:
        return None
    redo = [p for p in prov.scope if p in written or p in changed_edits]
    if not redo:
        return result
    changes = dict(result.changes)
    others = neighbours.view(prov.exclude)
    try:
        for path in redo:
            if prov.kind == "strip":
                change = _strip_file(path, others)
                if change is None:
                    changes.pop(path, None)
                else:
                    changes[path] = change
                continue
            if path in prov.kernel_files or not path.is_file():
                return None
            data = read_regular(path)
            clean = strip_bytes(data, path)
            if prov.clean_digest.get(path) != _digest(clean):
                return None
            new = apply_edits(data, _layer_file(path, data, clean, prov.mine.get(path, []),
                                                prov.kernel_files, prov.op_name, others))
            if new != data:
                changes[path] = (data, new)
            else:
                changes.pop(path, None)
    except (EditError, OSError):
        return None  # computing it again reports it as a single run would
    return OperatorChanges(result.op_dir, result.repo_root, changes, result.diagnostics,
                           provenance=prov)


class RunCommits:
    """The state of a multi-operator `--write` run between commits: which files earlier
    operators wrote and whose edits others now see differently, so each operator's
    result, computed before anything was written (in parallel), is rebased onto what
    the earlier commits left — or reported as needing a fresh computation."""

    def __init__(self, results: Iterable[OperatorChanges]) -> None:
        self.written: set[Path] = set()
        self.changed_edits: set[Path] = set()
        self.exact = True
        self._hoods: dict[Path, Neighbours] = {}
        for result in results:
            prov = result.provenance
            if prov is not None and prov.edits_before is not None:
                self._hood(result.repo_root).know(prov.neighbour_dir, prov.edits_before, prov.kernel_reads)

    def _hood(self, root: Path) -> Neighbours:
        return self._hoods.setdefault(root, Neighbours(root))

    def rebase(self, result: OperatorChanges) -> OperatorChanges | None:
        """`result` as computing it now would give, or None: compute it again."""
        if not self.written and not self.changed_edits:
            return result  # nothing was written since it was computed
        if not self.exact:
            return None
        return rebase(result, self.written, self.changed_edits, self._hood(result.repo_root))

    def committed(self, result: OperatorChanges, paths: Iterable[Path]) -> None:
        """`result` was committed, writing `paths`."""
        written = {resolve(p) for p in paths}
        if not written:
            return
        self.written |= written
        prov = result.provenance
        for hood in self._hoods.values():
            stale = hood.written(written)
            if prov is None or stale - {prov.neighbour_dir}:
                # Another operator's plan read a file this commit wrote (a kernel header
                # two operators share): what it sees now is unknown without planning it,
                # so every later operator is computed again, as a single run would.
                self.exact = False
        if prov is None:
            self.exact = False
            return
        self.changed_edits |= set(prov.edits_before or {}) | set(prov.edits_after or {})
        if prov.kind == "apply" and prov.edits_after is not None:
            try:
                mode = recorded_mode(read_regular(prov.entry)) or "B"
            except OSError:
                return
            if mode == prov.mode:  # what planning it now would give (else: planned when asked)
                self._hood(result.repo_root).know(prov.neighbour_dir, prov.edits_after, prov.kernel_reads)
