"""Apply and strip as computations: operator directory in, file changes out.

Codemods return edits; this module collects them (conflicts and duplicates refused by
the edit engine), turns them into `{path: (old bytes | None, new bytes | None)}` and
leaves writing to the transaction. Nothing here writes.

The kernel codemods edit the current bytes. The cross-layer codemods (`codemods/layers.py`:
OpDef, infer, tiling, aclnn, torch adapter, registration, build hook, Python callers)
edit each file's *clean* bytes — the file with optrace's insertions stripped — and this
module reconciles: a file that is still clean takes their edits as they are; a file that
already carries insertions becomes clean + this run's edits (+ the edits of the other
instrumented operators, when the file carries theirs too). So a second apply changes
nothing, `--mode` switches rewrite what depends on the mode, and another operator's
changes in a shared file stay. Any InputError a codemod raises propagates before
anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from optrace.codemods.kernel_entry import SCAFFOLD_BEGIN, entry_edits, recorded_mode
from optrace.codemods.kernel_points import point_edits
from optrace.codemods.layers import layer_edits, owned_files, sizes_header
from optrace.codemods.runtime_block import block_edits, include_edits
from optrace.codemods.strip import is_created, strip_bytes
from optrace.engine.diagnostics import Diagnostic, InputError
from optrace.engine.discovery import (
    CPP_EXTS,
    KERNEL_EXTS,
    default_repo_root,
    resolve_operator_dir,
    walk_files,
)
from optrace.engine.edits import Edit, EditError, EditSet, apply_edits, new_contents, resolve
from optrace.engine.plan import Plan, plan_operator

Change = tuple[bytes | None, bytes | None]


@dataclass
class OperatorChanges:
    op_dir: Path
    repo_root: Path
    changes: dict[Path, Change] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    plan: Plan | None = None

    @property
    def name(self) -> str:
        return self.op_dir.name


def apply_changes(op_dir: Path, repo_root: Path | None = None, mode: str | None = None) -> OperatorChanges:
    """Everything `optrace apply` would change for one operator: the kernel side, then
    every other layer it has. `mode` None keeps the mode recorded in the tree (else B)."""
    plan = plan_operator(op_dir, repo_root)
    root = plan.analysis.layers.repo_root
    points = point_edits(plan)
    entry = entry_edits(plan, mode)
    block, created = block_edits(plan)
    files_with_points = {e.path for e in points} | {plan.analysis.entry_fn.src.path}
    includes = include_edits(plan, files_with_points)
    kernel = [*points, *entry, *block, *includes]
    effective = mode or recorded_mode(plan.analysis.entry_fn.src.raw) or "B"
    layer_side, layer_created, deleted = _layer_side(plan, effective, {resolve(e.path) for e in kernel})
    editset = EditSet([*kernel, *layer_side])
    result = OperatorChanges(op_dir.resolve(), root, plan=plan,
                             diagnostics=list(plan.diagnostics))
    for path, (old, new) in new_contents(editset).items():
        result.changes[path] = (old, new)
    for path, content in {**created, **layer_created}.items():
        result.changes[path] = (None, content)
    for path, content in deleted.items():
        result.changes[path] = (content, None)
    return result


def _layer_side(plan: Plan, mode: str, kernel_files: set[Path]
                ) -> tuple[list[Edit], dict[Path, bytes], dict[Path, bytes]]:
    """Edits of the current bytes, files to create and files to delete (other layers)."""
    layers = layer_edits(plan, mode)
    by_file: dict[Path, list[Edit]] = {}
    for edit in layers.edits:
        by_file.setdefault(resolve(edit.path), []).append(edit)
    others = OtherOperators(plan.analysis.layers.repo_root, plan.analysis.layers.op_dir)
    name = plan.analysis.layers.op_name
    out: list[Edit] = []
    for path in sorted(set(by_file) | set(layers.scopes)):
        if not path.is_file():
            continue
        data = path.read_bytes()
        clean = strip_bytes(data, path)
        mine = by_file.get(path, [])
        if data == clean:
            out.extend(mine)
            continue
        if path in kernel_files:
            continue  # the kernel codemods own it (layer codemods never target kernel files)
        target = reconcile(data, clean, [(name, e) for e in mine], others, path)
        if target != data:
            out.append(replacement(path, data, target, "layers"))
    created: dict[Path, bytes] = {}
    deleted: dict[Path, bytes] = {}
    for path, content in layers.created.items():
        if not path.exists():
            created[path] = content
        elif path.read_bytes() != content:
            out.append(replacement(path, path.read_bytes(), content, "sizes header"))
    header = sizes_header(plan.analysis.layers).resolve()
    if header not in layers.created and header.is_file() and is_created(header.read_bytes()):
        deleted[header] = header.read_bytes()
    return out, created, deleted


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
    """Operator directories under `root` whose kernel entry carries optrace's scaffold."""
    found: set[Path] = set()
    for path in walk_files(root, KERNEL_EXTS):
        try:
            if SCAFFOLD_BEGIN not in path.read_bytes():
                continue
        except OSError:
            continue
        parts = path.parts
        if "op_kernel" in parts:
            found.add(Path(*parts[: len(parts) - 1 - parts[::-1].index("op_kernel")]).resolve())
        else:
            found.add(path.parent.resolve())
    return sorted(found)


def reconcile(data: bytes, clean: bytes, mine: list[tuple[str, Edit]], others: OtherOperators,
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
    prefix = 0
    limit = min(len(old), len(new))
    while prefix < limit and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    return Edit(path, prefix, len(old) - suffix, new[prefix : len(new) - suffix], codemod)


def strip_changes(op_dir: Path, repo_root: Path | None = None) -> OperatorChanges:
    """Everything `optrace strip` would change: marked insertions out, created files gone,
    in the operator directory and in the operator's files elsewhere (torch layer, build
    script, Python callers). A file other instrumented operators also changed keeps their
    changes (it is rebuilt from its clean bytes with their edits)."""
    op_dir = resolve_operator_dir(op_dir)
    root = (repo_root or default_repo_root(op_dir)).resolve()
    result = OperatorChanges(op_dir, root)
    owned: set[Path] = set()
    try:
        owned = set(owned_files(plan_operator(op_dir, repo_root)))
    except InputError:
        pass  # no kernel entry any more: the operator directory is all there is to strip
    others = OtherOperators(root, op_dir)
    paths = [p.resolve() for p in walk_files(op_dir) if p.suffix.lower() in CPP_EXTS
             or p.suffix.lower() in (".py", ".sh", ".bash", ".cmake") or p.name == "CMakeLists.txt"]
    for path in sorted(set(paths) | owned):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if is_created(data):
            result.changes[path] = (data, None)
            continue
        clean = strip_bytes(data, path)
        new = data
        if clean != data:
            new = reconcile(data, clean, [], others, path) if path in owned else clean
        if new != data:
            result.changes[path] = (data, new)
    return result
