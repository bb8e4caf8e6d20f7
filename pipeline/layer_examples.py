"""Run a layer's own examples (`Layer.EXAMPLES`): used by optrace's tests and by teams that
add a layer (`from optrace.pipeline.layer_examples import check_layer_examples`).

Each example is written as a repository of its own — the example operator
(`codemods.layer.EXAMPLE_OPERATOR`) with the example's files — then applied in its mode,
compared with its `after`, and stripped, which must give every file back byte for byte.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from optrace.codemods.layer import EXAMPLE_OPERATOR, Layer, LayerExample
from optrace.engine.codes import Severity
from optrace.engine.edits import FileChange
from optrace.pipeline.apply import apply_changes, strip_changes

EXAMPLE_OP_DIR = "demo_op"


def expected_pattern(source: str, changes: tuple[tuple[str, str], ...], where: str) -> re.Pattern[str]:
    """The file apply must produce: `source` with each `before` snippet turned into its
    `after`, an `after` line of `...` matching any lines."""
    pattern = re.escape(source)
    for before, after in changes:
        assert source.count(before) == 1, f"{where}: a before snippet must occur once in the file:\n{before}"
        parts = re.split(r"(?m)^[ \t]*\.\.\.[ \t]*\n", after)
        after_re = r"(?:[^\n]*\n)*?".join(re.escape(part) for part in parts)
        pattern = pattern.replace(re.escape(before), after_re, 1)
    return re.compile(pattern)


def _write(root: Path, changes: dict[Path, FileChange]) -> None:
    for path, (_old, new) in changes.items():
        if new is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(new)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def check_layer_example(layer: Layer, example: LayerExample, index: int = 0) -> None:
    """Raise AssertionError with a readable reason when the example does not hold."""
    where = f"{layer.NAME} example {index}"
    files = {**EXAMPLE_OPERATOR, **example.files}
    assert example.path in files, f"{where}: {example.path} is not one of the example's files"
    with tempfile.TemporaryDirectory(prefix="optrace-layer-") as tmp:
        repo = Path(tmp).resolve() / "repo"
        for rel, text in files.items():
            target = repo / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(text.encode())
        before = _snapshot(repo)
        applied = apply_changes(repo / EXAMPLE_OP_DIR, repo, example.mode)
        errors = [f"{d.code} {d.message}" for d in applied.diagnostics if d.severity == Severity.ERROR]
        assert not errors, f"{where}: apply refused the example: {errors}"
        _write(repo, applied.changes)
        got = (repo / example.path).read_text()
        want = expected_pattern(files[example.path], example.changes, where)
        assert want.fullmatch(got), f"{where}: apply gave\n{got}\nnot the example's after"
        stripped = strip_changes(repo / EXAMPLE_OP_DIR, repo)
        _write(repo, stripped.changes)
        after_strip = _snapshot(repo)
        differ = sorted(k for k in before.keys() | after_strip.keys() if before.get(k) != after_strip.get(k))
        assert not differ, f"{where}: strip did not give back {differ}"


def check_layer_examples(layer: Layer) -> None:
    """Every example of one layer; a layer without examples fails."""
    assert layer.EXAMPLES, f"layer {layer.NAME} needs EXAMPLES (codemods/layer.py LayerExample)"
    for i, example in enumerate(layer.EXAMPLES):
        check_layer_example(layer, example, i)
