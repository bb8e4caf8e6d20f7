"""The screen `apply` shows before its diff: what the patch does, in the reviewer's terms.

Mode and why, the files by layer (the codemods that wrote each, in the order of the
data: kernel first, Python last), the points each file gets, and the labels per core
type: enough to know what to look for in the diff, short enough for one screen (past
`MAX_FILES` files the rest is a count). Paths are relative to the operator directory
when inside it, else shown as everywhere else (relative to the working directory).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from optrace.engine.diagnostics import shown_path
from optrace.engine.edits import Edit, FileChange
from optrace.engine.plan import Plan
from optrace.pipeline.plan_text import wrap

_POINT_RE = re.compile(rb'TRACE_POINT\s*\(\s*"(?:[^"\\\n]|\\.)*"\s*,\s*"B"\s*\)')
MAX_FILES = 24

# Each codemod (`CODEMOD` of `codemods/*.py`) as the layer a reviewer knows, in the order
# the data flows (the registry's).
_LAYERS = (("kernel-entry", "kernel entry"), ("kernel-points", "kernel points"),
           ("runtime-block", "runtime include"), ("op-def", "op-def"), ("infer", "infer"),
           ("tiling", "tiling"), ("l0op", "l0op"), ("aclnn", "aclnn"), ("torch-adapter", "torch adapter"),
           ("registration", "registration"), ("autograd-wrappers", "autograd wrappers"),
           ("build-hook", "build hook"), ("python-callers", "python callers"),
           ("python-fakes", "python fakes"), ("graph-converters", "graph converters"))
_NAME = dict(_LAYERS)
_RANK = {name: i for i, (_codemod, name) in enumerate(_LAYERS)}


def summary_lines(plan: Plan, mode: str, why: str, changes: dict[Path, FileChange], edits: Iterable[Edit],
                  generated: Iterable[Path]) -> list[str]:
    """The summary of one operator's apply, as lines (no trailing newline)."""
    resolved: dict[Path, Path] = {}  # each spelling resolved once (thousands of edits, a few files)

    def real(path: Path) -> Path:
        found = resolved.get(path)
        if found is None:
            found = resolved[path] = path.resolve()
        return found

    by_path: dict[Path, set[str]] = {}
    for e in edits:
        by_path.setdefault(real(e.path), set()).add(_NAME.get(e.codemod, e.codemod))
    made = {real(p) for p in generated}
    op_dir = plan.analysis.layers.op_dir.resolve()
    rows: list[tuple[int, str, str, str]] = []
    for path, (old, new) in changes.items():
        layers = sorted(by_path.get(real(path), set()), key=lambda n: _RANK.get(n, len(_RANK)))
        if new is None:
            layer = "deleted"
        elif old is None and (real(path) in made or not layers):
            layer = "generated"
        else:
            layer = ", ".join(layers) or "other"
        rank = _RANK.get(layers[0], len(_RANK)) if layers and layer not in ("generated", "deleted") else 99
        added = len(_POINT_RE.findall(new or b"")) - len(_POINT_RE.findall(old or b""))
        where = (real(path).relative_to(op_dir).as_posix() if real(path).is_relative_to(op_dir)
                 else shown_path(path))
        rows.append((rank, layer, where, f"{added} point{'s' if added != 1 else ''}" if added > 0 else ""))
    rows.sort()
    made_rows = [r for r in rows if r[1] == "generated"]
    if len(made_rows) > 1:  # one line: the reviewer skips them alike
        rows = [r for r in rows if r[1] != "generated"]
        rows.append((99, "generated", ", ".join(r[2] for r in made_rows), ""))
    name = plan.analysis.layers.op_name
    lines = [f"{name}: mode {mode}: {why}" if why else f"{name}: mode {mode}",
             f"{len(changes)} file(s), by layer (paths under {shown_path(op_dir)}/ relative to it):"]
    shown = rows[:MAX_FILES]
    width = max((len(r[1]) for r in shown), default=0)
    pts = max((len(r[3]) for r in shown), default=0)
    for _rank, layer, where, points in shown:
        count = f"  {points:>{pts}}" if pts else ""
        lines.append(f"  {layer:<{width}}{count}  {where}")
    if len(rows) > MAX_FILES:
        lines.append(f"  ... and {len(rows) - MAX_FILES} more file(s), in the diff")
    if plan.per_core:
        lines.append("labels per core type: " + ", ".join(
            f"{core} {len(labels)}" for core, labels in sorted(plan.per_core.items())))
    return wrap(lines)  # at 120 columns, as the plan: a refusal's reason, a path outside
