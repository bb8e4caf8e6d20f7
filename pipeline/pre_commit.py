"""Which operators a commit touches: the staged files mapped back to operator directories.

`optrace pre-commit FILE...` (the `optrace-check` hook) checks these operators. A file
inside an operator directory belongs to it; any other file (pybind, a sample, the build
script, an aclnn wrapper or adapter elsewhere in the repository) belongs to every
operator whose layers list it — the same discovery `plan` shows, so the hook and the
plan never disagree about what an operator is made of.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from optrace.codemods.registry import LAYERS
from optrace.engine.config import load_config
from optrace.engine.diagnostics import InputError
from optrace.engine.discovery import discover, find_operator_dirs, marked_repo_root

# Only these files can be a layer of an operator (sources, headers, scripts, Python): a
# staged README or image maps to nothing without running discovery.
_LAYER_EXTS = frozenset({".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".hxx", ".asc", ".inc",
                         ".inl", ".ipp", ".tpp", ".tcc", ".py", ".sh", ".bash", ".cmake"})


@dataclass
class StagedOperators:
    """The operators to check, sorted, and per operator the staged files that led to it."""

    root: Path
    operators: dict[Path, list[Path]] = field(default_factory=dict)

    def add(self, op_dir: Path, path: Path) -> None:
        files = self.operators.setdefault(op_dir, [])
        if path not in files:
            files.append(path)

    def sorted_operators(self) -> list[Path]:
        return sorted(self.operators)


def _is_layer_candidate(path: Path) -> bool:
    return path.suffix.lower() in _LAYER_EXTS or path.name == "CMakeLists.txt"


def _absolute(path: Path, cwd: Path) -> Path:
    # Not resolve(): a staged symlink is the link's path in the tree, and a deleted file
    # (staged removal) has nothing to resolve.
    full = path if path.is_absolute() else cwd / path
    parent = full.parent
    try:
        parent = parent.resolve()
    except OSError:
        pass
    return parent / full.name


def repository_of(cwd: Path, repo_root: Path | None) -> Path:
    """`--repo-root`, else the repository the hook runs in (pre-commit runs hooks at the
    work tree's top), else the current directory."""
    if repo_root is not None:
        return repo_root.resolve()
    return (marked_repo_root(cwd.resolve()) or cwd).resolve()


def operators_for_files(files: list[Path], root: Path, cwd: Path) -> StagedOperators:
    """Map staged files to the operator directories under `root` they belong to."""
    staged = StagedOperators(root)
    paths = [_absolute(f, cwd) for f in files]
    paths = [p for p in paths if p.is_relative_to(root) and _is_layer_candidate(p)]
    if not paths:
        return staged
    operators = find_operator_dirs(root)
    outside: list[Path] = []
    for path in paths:
        # The innermost operator directory holding the file (operators may nest in a
        # test tree); a file in none of them is some operator's host layer, or nothing.
        owners = [op for op in operators if op in path.parents]
        if owners:
            staged.add(max(owners, key=lambda op: len(op.parts)), path)
        else:
            outside.append(path)
    if outside:
        wanted = set(outside)
        for op_dir in operators:
            try:
                layers = discover(op_dir, root, load_config(root, op_dir), LAYERS)
            except InputError:
                continue  # not plannable: `check` on it would say why, but no staged file is its
            for found in layers.found.values():
                for layer_file in found:
                    path = _absolute(layer_file.path, root)
                    if path in wanted:
                        staged.add(op_dir, path)
    return staged
