"""The include graph: from the kernel entry, every header it pulls in, down to the leaves.

Quoted includes resolve against the including file's folder, then the configured include
directories; angle includes only against the configured directories (CANN headers are
normally absent). Unresolved headers are listed, never fatal; cycles are recorded and
cut; symlink loops and unreadable files become diagnostics.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import networkx as nx

from optrace.engine.cache import by_content
from optrace.engine.codes import OT011, OT012, OT013, OT014, OT047
from optrace.engine.diagnostics import Diagnostic, Severity
from optrace.engine.probes import looked_at
from optrace.engine.source import (
    SourceFile,
    blank_comments,
    blank_if0,
    directive_matches,
    is_binary,
    read_source,
)

_INCLUDE_RE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\r\n]+)[>"]', re.M)

# Headers larger than this are still read, but a warning names them (a 10 MB header is
# usually generated code or a mistake).
LARGE_FILE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class IncludeDirective:
    """One `#include` of a file: its target as written, quoted or angled, and its line."""

    target: str
    quoted: bool
    line: int


@dataclass
class IncludeGraph:
    """Files reached from the entry (in discovery order) and the edges between them."""

    root: Path
    # Nodes are files, an edge includer -> included carries the directive's `line`.
    graph: nx.DiGraph = field(default_factory=nx.DiGraph)
    files: dict[Path, SourceFile] = field(default_factory=dict)
    # (includer, line, spelled name) for quoted includes that could not be found.
    missing: list[tuple[Path, int, str]] = field(default_factory=list)
    # Angle-bracket includes not found: CANN / system headers, expected to be absent.
    external: set[str] = field(default_factory=set)
    cycles: list[list[Path]] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # (includer, line, spelled name, file) for includes found by searching the repository.
    searched: list[tuple[Path, int, str, Path]] = field(default_factory=list)

    def order(self) -> list[Path]:
        return list(self.files)


def scan_includes(data: bytes) -> list[IncludeDirective]:
    """Include directives outside comments and `#if 0` blocks."""
    return list(_scan_includes(bytes(data)))


@by_content(256)
def _scan_includes(data: bytes) -> tuple[IncludeDirective, ...]:
    # by content: one `check` asks it of each file several times (the include graph, the
    # compile check's stand-ins and its include chains)
    text = blank_if0(blank_comments(data))
    out: list[IncludeDirective] = []
    line, counted = 1, 0  # counted on from the last directive: from 0 each time was quadratic
    for m in directive_matches(_INCLUDE_RE, text):
        line += text.count(b"\n", counted, m.start())
        counted = m.start()
        # The target names a file: decoded as the file system decodes names (bytes that
        # are not UTF-8 round-trip as surrogates), so `evil\xff.h` finds its file.
        out.append(IncludeDirective(os.fsdecode(m.group(2)).strip(), m.group(1) == b'"', line))
    return tuple(out)


def _safe_resolve(path: Path) -> Path | None:
    """realpath that reports a symlink loop as None instead of raising or hanging."""
    try:
        return path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None


def _resolve_include(
    directive: IncludeDirective, includer: Path, include_dirs: Iterable[Path]
) -> Path | None:
    candidates: list[Path] = []
    if directive.quoted:
        candidates.append(includer.parent / directive.target)
    candidates.extend(d / directive.target for d in include_dirs)
    for cand in candidates:
        # Each candidate up to the one found is an input: one created before it would be
        # found instead, and the one found is in the repository or not by where it leads.
        looked_at(cand)
        if os.path.lexists(cand):
            return cand
    return None


@dataclass
class HeaderSearch:
    """Where a quoted include the includer's folder and the include dirs do not have is
    in the repository, the way the operators' builds lay it out: each operator's
    `op_kernel/` is copied to a folder named after the operator, so a kernel writes
    `#include "../rms_norm/rms_norm_base.h"` for `norm/rms_norm/op_kernel/rms_norm_base.h`,
    and shared kernel libraries are on the include path (`"atvoss/elewise/sch.h"`).

    A file matches when its path, or that path with the `op_kernel` folder left out, ends
    with the include's path (its leading `./` and `../` dropped). Of several matches the
    one sharing the longest folder prefix with the includer wins; a tie is not guessed.
    """

    root: Path
    sources: Mapping[str, Sequence[Path]]

    def find(self, target: str, includer: Path) -> Path | None:
        parts = [p for p in target.replace("\\", "/").split("/") if p not in ("", ".")]
        while parts and parts[0] == "..":
            parts.pop(0)
        if not parts or ".." in parts:
            return None
        want = tuple(parts)
        matches = []
        for cand in self.sources.get(parts[-1], ()):
            try:
                rel = cand.relative_to(self.root).parts
            except ValueError:
                continue
            flat = tuple(p for p in rel if p != "op_kernel")
            if rel[-len(want):] == want or flat[-len(want):] == want:
                matches.append(cand)
        if len(matches) <= 1:
            return matches[0] if matches else None
        here = includer.parts

        def shared(p: Path) -> int:
            n = 0
            for a, b in zip(p.parts, here, strict=False):
                if a != b:
                    break
                n += 1
            return n

        ranked = sorted(matches, key=shared, reverse=True)
        return ranked[0] if shared(ranked[0]) > shared(ranked[1]) else None


def build_include_graph(entry: Path, include_dirs: Iterable[Path],
                        search: HeaderSearch | None = None,
                        allowed: Iterable[Path] | None = None) -> IncludeGraph:
    """Walk includes breadth-first from the entry file; quoted includes found neither
    beside their includer nor in the include dirs are looked up with `search`. With
    `allowed` (the repository root and the configured include dirs), an include that
    resolves outside all of them is listed as external, never read: a cloned tree's
    `#include "../../../../home/me/.ssh/id_rsa"` or a header linked out of the tree."""
    dirs = tuple(include_dirs)
    fences = None if allowed is None else tuple(Path(os.path.realpath(a)) for a in allowed)
    g = IncludeGraph(root=entry)
    queue: list[Path] = [entry]
    seen: set[Path] = set()
    while queue:
        path = queue.pop(0)
        if path in seen:
            continue
        seen.add(path)
        try:
            src = read_source(path)
        except OSError as exc:
            g.diagnostics.append(
                Diagnostic(OT011, f"cannot read: {exc.strerror or exc}", path, 0)
            )
            continue
        if is_binary(src.raw):
            g.diagnostics.append(
                Diagnostic(OT012, "binary file (NUL bytes), not parsed", path, 0)
            )
            continue
        if len(src.raw) > LARGE_FILE_BYTES:
            g.diagnostics.append(
                Diagnostic(
                    OT013,
                    f"very large source ({len(src.raw) // (1024 * 1024)} MiB)",
                    path,
                    0,
                )
            )
        g.files[path] = src
        g.graph.add_node(path)
        for directive in scan_includes(src.raw):
            found = _resolve_include(directive, path, dirs)
            if found is None and directive.quoted and search is not None:
                found = search.find(directive.target, path)
                if found is not None:
                    looked_at(found)  # where it leads, as for a candidate found
                    g.searched.append((path, directive.line, directive.target, found))
            if found is None:
                if directive.quoted:
                    g.missing.append((path, directive.line, directive.target))
                else:
                    g.external.add(directive.target)
                continue
            resolved = _safe_resolve(found)
            if resolved is None:
                g.diagnostics.append(
                    Diagnostic(
                        OT014,
                        f"include `{directive.target}` is a symlink loop or dangling link",
                        path,
                        directive.line,
                    )
                )
                continue
            if resolved.is_dir():
                g.diagnostics.append(
                    Diagnostic(
                        OT011,
                        f"include `{directive.target}` names a directory",
                        path,
                        directive.line,
                    )
                )
                continue
            if fences is not None and not any(resolved.is_relative_to(f) for f in fences):
                g.external.add(f"{directive.target} (outside the repository: {resolved})")
                spelled = Path(os.path.abspath(found))
                if any(spelled.is_relative_to(f) for f in fences):
                    # In the tree by its name, outside it by its link: never read, so its
                    # points are not planned and apply's edits for it would go elsewhere.
                    # A warning here; apply refuses it (nothing written).
                    g.diagnostics.append(Diagnostic(
                        OT047, f"`{directive.target}` is a symlink to a file outside the repository "
                        f"({resolved}): optrace neither reads nor edits it", spelled, 0, Severity.WARNING))
                continue
            g.graph.add_edge(path, resolved, line=directive.line)
            if resolved not in seen:
                queue.append(resolved)
    # Rotate each cycle to start at its earliest-discovered file and sort them, so the
    # report does not depend on hash order.
    rank = {p: i for i, p in enumerate(g.files)}
    cycles: list[list[Path]] = []
    # A report names a few cycles; Johnson's search yields them lazily, so a header
    # forest dense with cycles is not enumerated in full.
    for cycle in islice(nx.simple_cycles(g.graph), 20):
        start = min(range(len(cycle)), key=lambda i: rank.get(cycle[i], len(rank)))
        cycles.append(cycle[start:] + cycle[:start])
    g.cycles = sorted(cycles, key=lambda c: [rank.get(p, len(rank)) for p in c])
    return g
