"""Files a plan reads or edits outside its operator directory, and which other operators
include them (issue #11 §4): a header another operator compiles is not this operator's
to change, so the reviewer sees, before any write, what is shared and with whom."""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from optrace.engine.analysis import Analysis
from optrace.engine.discovery import Postings, RepoIndex, operator_dir_of, read_bounded, repo_index
from optrace.engine.includes import HeaderSearch, scan_includes
from optrace.engine.index_cache import Phase, Signature, keep_table, phase, racy_tick, signature, stored_table
from optrace.engine.probes import Identity, identity_of, looked_at, read_elsewhere
from optrace.engine.source import overlay_holds


@dataclass(frozen=True)
class OutsideFile:
    """A file outside the operator directory that the operator's plan reads or edits."""

    path: Path
    # "kernel header" (read; traced at its call sites) or a layer title (apply edits it)
    role: str
    edited: bool
    # other operator directories whose sources include this file (kernel headers only)
    included_by: tuple[Path, ...] = ()


def operators_including(root: Path, headers: list[Path], own: Path) -> dict[Path, tuple[Path, ...]]:
    """For each header, the operator directories (other than `own`) with a source that
    includes it: by the includer's folder, or the way `HeaderSearch` finds a flattened
    build's `../<op>/x.h`. Only files naming the header are read."""
    if not headers:
        return {}
    index = repo_index(root)
    search = HeaderSearch(root, index.sources)
    wanted = {h.resolve() for h in headers}
    names = {os.fsencode(h.name) for h in headers}
    listed_names = {h.name for h in headers}  # as `_included_names` lists them (fsdecoded)
    found: dict[Path, set[Path]] = {h.resolve(): set() for h in headers}
    own_real = own.resolve()
    memo = _memo(index)
    for includer in _naming(index, listed_names):
        op, op_real = _owner(memo, root, includer)
        if op is None or op_real == own_real:
            continue
        leads = _leads(memo, includer)
        read_elsewhere(includer, leads.identity)  # read here or earlier in the phase: an input
        if not leads.read:
            continue
        for at, name in enumerate(leads.names):
            if name not in names:
                continue
            local, target, target_real = leads.where(at, search, includer)
            looked_at(local)  # there or not, and where it leads, decide who includes the header
            if target is not None and target is not local:
                looked_at(target)
            if target_real is not None and target_real in wanted:
                found[target_real].add(op)
    if index.store is not None:  # not opened where the table of names answered
        index.store.flush()
    return {h: tuple(sorted(found[h.resolve()])) for h in headers}


@dataclass(frozen=True)
class _Leads:
    """One source's quoted includes: each one's target and file name, and, once asked,
    where it leads (:meth:`where`). `identity`: the file when it was read (None: not read,
    or gone)."""

    read: bool
    identity: Identity | None
    targets: tuple[str, ...] = ()
    names: tuple[bytes, ...] = ()
    # Per directive asked of: the path beside the includer, the file it finds (that
    # path, or `HeaderSearch`'s) and that file's real path. Only the directives naming a
    # header asked about are resolved: most of a repository's never are.
    _where: dict[int, tuple[Path, Path | None, Path | None]] = field(default_factory=dict)

    def where(self, at: int, search: HeaderSearch, includer: Path) -> tuple[Path, Path | None, Path | None]:
        known = self._where.get(at)
        if known is None:
            local = includer.parent / self.targets[at]
            target = local if local.exists() else search.find(self.targets[at], includer)
            known = self._where[at] = (local, target, target.resolve() if target is not None else None)
        return known


class _Memo:
    """What `operators_including` learns of sources once a `reading_only` phase: each
    operator of a run asks of every source naming one of its headers' file names, and
    operators laid out alike name alike (`block/part_3.h` in each). A forest of 20
    read, scanned and resolved ~300 sources an operator, a third of its plan."""

    def __init__(self, phase: Phase | None, index: RepoIndex) -> None:
        self.phase, self.index = phase, index
        self.owners: dict[tuple[Path, Path], tuple[Path | None, Path | None]] = {}  # by (root, source)
        self.leads: dict[Path, _Leads] = {}
        # One resolve per operator directory, not per source: a repository has ~10k sources.
        self.real: dict[Path, Path] = {}


def _memo(index: RepoIndex) -> _Memo:
    """The phase's memo of `index`'s sources; outside a phase a fresh one each call (apply
    may have written a source since)."""
    current = phase()
    if current is None:
        return _Memo(None, index)
    memo = _MEMOS.get(index.root)
    if memo is None or memo.phase is not current or memo.index is not index:
        memo = _MEMOS[index.root] = _Memo(current, index)
    return memo


def _owner(memo: _Memo, root: Path, includer: Path) -> tuple[Path | None, Path | None]:
    """The operator directory `includer` belongs to, and its real path."""
    known = memo.owners.get((root, includer))
    if known is None:
        op = operator_dir_of(includer, root)
        if op is not None and op not in memo.real:
            memo.real[op] = op.resolve()
        known = memo.owners[root, includer] = (op, memo.real[op] if op is not None else None)
    return known


def _leads(memo: _Memo, includer: Path) -> _Leads:
    leads = memo.leads.get(includer)
    if leads is None:
        leads = memo.leads[includer] = _learn(includer)
    return leads


def _learn(includer: Path) -> _Leads:
    """Read and scan `includer`. Outside a phase, what a source's read and scan gave is
    kept by its stat signature (as apply's scaffold question keeps its answers): an apply
    of many operators asks each source again for every operator, twice (its plan and its
    proof), and a write between two operators gives the file another signature. Never
    kept from a file written within its clock's tick, changed while it was read, or read
    through apply's proof's overlay; where its includes lead is asked again each call."""
    key = os.fspath(includer)
    taken = time.time_ns()
    try:
        before = os.stat(includer)
    except OSError:
        before = None
    sig = signature(before) if before is not None else None
    if phase() is None and sig is not None and before is not None and not overlay_holds(before):
        known = _SCANNED.get(key)
        if known is not None and known[0] == sig:
            return replace(known[1], identity=identity_of(before), _where={})
    data = read_bounded(includer)
    if data is None:
        return _Leads(False, None)
    targets = tuple(d.target for d in scan_includes(data) if d.quoted)
    leads = _Leads(True, identity_of(before) if before is not None else None, targets,
                   tuple(os.fsencode(t.rsplit("/", 1)[-1]) for t in targets))
    if sig is not None and before is not None and not overlay_holds(before) \
            and max(sig[1], sig[2]) < taken - racy_tick(sig):
        try:
            after = signature(os.stat(includer))
        except OSError:
            after = None
        if after == sig:
            if len(_SCANNED) >= _SCANNED_BOUND:
                _SCANNED.pop(next(iter(_SCANNED)))
            _SCANNED[key] = (sig, leads)
    return leads


# Each source's scanned includes by its path, under the signature they were read at.
_SCANNED: dict[str, tuple[Signature, _Leads]] = {}
_SCANNED_BOUND = 1 << 16  # a repository's sources (ops-nn: ~10k) and room


# Per repository root: the memo of the phase running (the last one).
_MEMOS: dict[Path, _Memo] = {}


def shared_kernel_files(an: Analysis) -> dict[Path, tuple[Path, ...]]:
    """The operator's own kernel files (inside its directory, the entry's file aside) that
    another operator's source includes (ops-nn's `gemma_rms_norm` compiles
    `../rms_norm/rms_norm_split_d.h`), resolved. Not this
    operator's to put points or the runtime's include in: the other operator's kernel
    would change with them, and once it is instrumented too it would record labels its
    own point map lacks, under the first runtime block its build includes. Their code is
    traced at its call sites in the operator's other files, as a header outside the
    directory is. Each with the other operator directories including it. Kept for the
    analysis it was asked of (the planner and the runtime's include both ask)."""
    known = _SHARED.get(id(an))
    if known is not None and known[0] is an:
        return known[1]
    layers = an.layers
    inside = os.path.join(os.fspath(layers.op_dir.resolve()), "")
    entry = an.entry_fn.src.path.resolve()
    own = [p for p in an.includes.files
           if os.path.join(os.fspath(p.resolve()), "").startswith(inside) and p.resolve() != entry]
    including = operators_including(layers.repo_root, own, layers.op_dir) if own else {}
    shared = {p.resolve(): ops for p, ops in including.items() if ops}
    if len(_SHARED) >= 8:  # the last few analyses: apply's proof asks of a second one
        _SHARED.pop(next(iter(_SHARED)))
    _SHARED[id(an)] = (an, shared)
    return shared


# id(analysis) -> (the analysis, its shared files): the analysis kept beside its id, so a
# new one given a freed one's id is not answered with the old one's files.
_SHARED: dict[int, tuple[Analysis, dict[Path, tuple[Path, ...]]]] = {}


def _naming(index: RepoIndex, names: set[str]) -> list[Path]:
    """The C / C++ sources that may include one of `names` by a quoted directive, in the
    index's order: only those are read (what each source includes is kept in the user
    cache by content hash). In a `reading_only` phase (plan) the names every source
    lists are gathered once for the phase, by name, instead of asking the store about
    each of a repository's ~10k sources for every operator with a header outside its
    folder; and kept in the user cache as a table under the index's state, so the next
    plan of an unchanged repository (one process an operator: a pre-commit hook, the
    corpus) looks its names up instead of gathering them again (~0.5 s on ops-nn).
    Otherwise every source is asked (apply may have written one)."""
    current = phase()
    if current is None:
        store = index.content()
        return [includer for paths in index.sources.values() for includer in paths
                if not names.isdisjoint(store.derived(includer, INCLUDES_KIND, _included_names).split("\n"))]
    known = _BY_NAME.get(index.root)
    if known is None or known[0] is not current or known[1] is not index:
        # As strings: a `Path` each of ~10k sources cost more than the rest of a lookup.
        order = [includer for paths in index.source_paths.values() for includer in paths]
        state = index.phase_state()
        # The state holds the sources' paths and signatures; the order they are numbered
        # in is the walk's (sorted), digested with it all the same: a table is never
        # read against another numbering.
        key = None if state is None else state + " " + _digest(order)
        text = stored_table(index.root, NAMES_TABLE_KIND, key) if key is not None else None
        if text is not None:
            known = _BY_NAME[index.root] = (current, index, Postings(text), order)
        else:
            store = index.content()
            by_name: dict[str, list[int]] = {}
            for at, includer in enumerate(order):
                for name in store.derived(Path(includer), INCLUDES_KIND, _included_names).split("\n"):
                    by_name.setdefault(name, []).append(at)
            table = Postings(by_name)
            known = _BY_NAME[index.root] = (current, index, table, order)
            kept = table.text()
            # Kept where nothing was found changed while the names were gathered.
            if key is not None and kept is not None and index.phase_state() == state:
                keep_table(index.root, NAMES_TABLE_KIND, key, kept)
    _, _, table, order = known
    return [Path(order[i]) for i in sorted({i for name in names for i in table.get(name)})]


def _digest(paths: list[str]) -> str:
    return hashlib.sha256("\n".join(paths).encode("utf-8", "surrogateescape")).hexdigest()


# The table of names (`discovery.Postings`): the sources numbered by each name.
NAMES_TABLE_KIND = "quoted-include-names1"


# Per repository root: the phase and the index its table was gathered in, each listed
# name's sources (by their place in the index's order), and that order.
_BY_NAME: dict[Path, tuple[Phase, RepoIndex, Postings, list[str]]] = {}


INCLUDES_KIND = "quoted-includes1"
# `include "x.h"` anywhere, comments between allowed: every quoted include directive's
# target and a few more (in comments, `#if 0`), which `scan_includes` then sorts out.
_QUOTED_INCLUDE_RE = re.compile(rb'include(?:\s|/\*.*?\*/)*"([^"\n]*)"')


def _included_names(data: bytes | None) -> str:
    """The file names a source may include by a quoted directive, one per line: a
    superset of what `scan_includes` finds, read at the speed of a regular expression."""
    if data is None:
        return ""
    return "\n".join(sorted({os.fsdecode(m.group(1)).rsplit("/", 1)[-1]
                              for m in _QUOTED_INCLUDE_RE.finditer(data)}))


class _Resolver:
    """`os.path.realpath` of many paths sharing folders: a path is its folder's real path
    (remembered) joined with its name, resolved further only when that is a link: one
    `lstat` a path, not one per component, and strings, not Path objects. A repository's
    every build script is a layer hit (a thousand in ops-nn, each in a folder of its
    own), and resolving each whole took half of a plan's time."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        known = self._seen.get(path)
        if known is not None:
            return known
        head, name = os.path.split(path)
        if name in ("", ".", "..") or not os.path.isabs(path) or head == path:
            real = os.path.realpath(path)
        else:
            joined = os.path.join(self(head), name)
            real = os.path.realpath(joined) if os.path.islink(joined) else joined
        self._seen[path] = real
        return real


def _identity(path: str) -> tuple[int, int] | None:
    """The file's device and inode (None: no file there, or none that can be stat'ed)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def outside_files(an: Analysis, edited: frozenset[Path] | None = None) -> list[OutsideFile]:
    """Kernel headers the plan reads from outside the operator directory and the layer
    files found there. `edited` (resolved paths): the files apply edits in the mode it
    would use — a file is marked edited exactly when it is one of them; a layer file found
    and not edited is left out (a repository's every build script can be "found"). None:
    apply's edits are not known, and every layer file found is listed as apply's."""
    layers = an.layers
    inside = os.path.join(os.fspath(layers.op_dir.resolve()), "")
    real = _Resolver()
    edited_real = {os.fspath(p) for p in edited} if edited is not None else None
    # The edited files by identity: a path that is a file resolves to one of them only
    # when it is that file (one `stat` tells; a path that is no file is resolved). A
    # repository's every build script is a layer hit, and resolving each of them, for
    # every operator, took a fifth of a plan.
    edited_ids = {_identity(p) for p in edited_real} if edited_real is not None else set()

    def outside(p: Path) -> bool:
        return not os.path.join(real(os.fspath(p)), "").startswith(inside)

    def edits(p: Path) -> bool:
        if edited_real is None:
            return True
        ident = _identity(os.fspath(p))
        if ident is not None and ident not in edited_ids:
            return False
        return real(os.fspath(p)) in edited_real

    headers = [p for p in an.includes.files if outside(p)]
    shared = operators_including(layers.repo_root, headers, layers.op_dir) if headers else {}
    out = [OutsideFile(p, "kernel header", edited is not None and edits(p), shared.get(p, ()))
           for p in headers]
    seen = set(headers)
    for key, hits in layers.found.items():
        for hit in hits:
            if key != "entry" and hit.path not in seen and edits(hit.path) and outside(hit.path):
                seen.add(hit.path)
                out.append(OutsideFile(hit.path, layers.title(key), True))
    # Files a layer edits without having been found under its key (the header declaring
    # an adapter, the build script that compiles the kernel).
    listed = {Path(real(os.fspath(p))) for p in seen}
    for path in sorted(edited or ()):
        if outside(path) and path not in listed:
            out.append(OutsideFile(path, "host file", True))
    return out
