"""Apply and strip as computations: operator directory in, file changes out.

Codemods return edits; this module collects them (conflicts and duplicates refused by
the edit engine), turns them into `{path: (old bytes | None, new bytes | None)}` and
leaves writing to the transaction. Nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from optrace.codemods.kernel_entry import entry_edits
from optrace.codemods.kernel_points import point_edits
from optrace.codemods.runtime_block import block_edits, include_edits
from optrace.codemods.strip import is_created, strip_bytes
from optrace.engine.diagnostics import Diagnostic
from optrace.engine.discovery import CPP_EXTS, default_repo_root, walk_files
from optrace.engine.edits import EditSet, new_contents
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
    """Everything `optrace apply` would change for one operator (kernel side)."""
    plan = plan_operator(op_dir, repo_root)
    root = plan.analysis.layers.repo_root
    points = point_edits(plan)
    entry = entry_edits(plan, mode)
    block, created = block_edits(plan)
    files_with_points = {e.path for e in points} | {plan.analysis.entry_fn.src.path}
    includes = include_edits(plan, files_with_points)
    editset = EditSet([*points, *entry, *block, *includes])
    result = OperatorChanges(op_dir.resolve(), root, plan=plan,
                             diagnostics=list(plan.diagnostics))
    for path, (old, new) in new_contents(editset).items():
        result.changes[path] = (old, new)
    for path, content in created.items():
        result.changes[path] = (None, content)
    return result


def strip_changes(op_dir: Path, repo_root: Path | None = None) -> OperatorChanges:
    """Everything `optrace strip` would change: marked insertions out, created files gone."""
    op_dir = op_dir.resolve()
    root = (repo_root or default_repo_root(op_dir)).resolve()
    result = OperatorChanges(op_dir, root)
    for path in walk_files(op_dir, CPP_EXTS):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if is_created(data):
            result.changes[path.resolve()] = (data, None)
            continue
        new = strip_bytes(data)
        if new != data:
            result.changes[path.resolve()] = (data, new)
    return result
