"""A layer is one module (codemods/<layer>.py): its class, with find / read / edits /
verify and its examples, named nowhere in the package but there and in the registry; and
a layer removed (its module and its registry line) leaves the rest of optrace working."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from optrace.codemods.layer import Layer, LocatingLayer
from optrace.codemods.registry import LAYERS

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = ("optrace", "engine", "rules", "codemods", "runtime", "pipeline")
REGISTRY = ROOT / "codemods" / "registry.py"


def _package_files() -> list[Path]:
    return [p for d in PACKAGE_DIRS for p in sorted((ROOT / d).glob("*.py"))]


def _module_file(layer: Layer) -> Path:
    return Path(inspect.getfile(type(layer))).resolve()


@pytest.mark.parametrize("layer", LAYERS, ids=lambda lay: lay.NAME)
def test_a_layer_is_one_class_in_its_own_module(layer: Layer) -> None:
    """The class lives in codemods/, alone: no other layer class in its module, and its
    contract (find, edits — or locate and render, whose `edits` is the base's
    render(locate()) — and verify) written there, not inherited from elsewhere."""
    cls = type(layer)
    path = _module_file(layer)
    assert path.parent == (ROOT / "codemods").resolve(), path
    others = [lay.NAME for lay in LAYERS if lay is not layer and _module_file(lay) == path]
    assert not others, f"{path.name} holds layers {others} too"
    codemod = ("locate", "render") if isinstance(layer, LocatingLayer) else ("edits",)
    for method in ("find", *codemod, "verify"):
        assert method in cls.__dict__, f"{cls.__name__}.{method} is not written in {path.name}"


@pytest.mark.parametrize("layer", LAYERS, ids=lambda lay: lay.NAME)
def test_no_module_but_its_own_and_the_registry_names_a_layer_class(layer: Layer) -> None:
    name = type(layer).__name__
    own = _module_file(layer)
    naming = [p.relative_to(ROOT).as_posix() for p in _package_files()
              if p.resolve() not in (own, REGISTRY.resolve())
              and re.search(rf"\b{name}\b", p.read_text(encoding="utf-8"))]
    assert not naming, f"{name} is named outside its module and the registry: {naming}"


def test_find_and_verify_are_written_only_in_layer_modules() -> None:
    """Apply, strip and check ask the registry: no `def verify(` / layer `def find(` in
    the coordinators."""
    for path in sorted((ROOT / "pipeline").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s+def (find|verify)\(self", text, re.M), path.name


def _copy_checkout(dest: Path) -> None:
    """The checkout as the tests read it (docs and fixtures too), without environments,
    caches or history."""
    top = {".git", ".venv", ".hypothesis", ".optrace", ".import_linter_cache", "build", "dist", "out"}

    def ignore(directory: str, names: list[str]) -> set[str]:
        here = Path(directory) == ROOT
        return {n for n in names if (here and (n in top or n.endswith(".egg-info")))
                or n == "__pycache__" or n.endswith((".pyc", "_cache"))}

    shutil.copytree(ROOT, dest, symlinks=True, ignore=ignore)


@pytest.mark.slow
def test_removing_a_layer_leaves_the_rest_of_the_suite_green(tmp_path: Path) -> None:
    """Delete the graph-converter layer's module (and its LibCST half) and its registry
    line from a copy of the checkout: every test that does not name the layer passes."""
    layer = next(lay for lay in LAYERS if lay.NAME == "graph_converters")
    module = _module_file(layer)
    copy = tmp_path / "checkout"
    _copy_checkout(copy)
    (copy / "codemods" / module.name).unlink()
    (copy / "codemods" / f"{module.stem}_cst.py").unlink()
    registry = copy / "codemods" / "registry.py"
    cls = type(layer).__name__
    lines = registry.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [ln for ln in lines if cls not in ln]
    assert len(lines) - len(kept) == 2, "one import and one registry line"
    registry.write_text("".join(kept), encoding="utf-8")
    # The layer's own tests: those naming it, and those comparing with golden output that
    # shows it (a plan lists every layer by its title, present or not).
    words = re.compile(rf"{layer.NAME}|{cls}|{module.stem}|{re.escape(layer.TITLE)}")
    goldens = [p for p in sorted((copy / "tests" / "golden").rglob("*")) if p.is_file()
               and words.search(p.read_text(encoding="utf-8", errors="replace"))]
    own = [p for p in sorted((copy / "tests").rglob("test_*.py"))
           if words.search(text := p.read_text(encoding="utf-8")) or (goldens and "golden" in text)]
    assert own, "the layer has tests of its own"
    env = {**os.environ, "PYTHONPATH": str(copy)}
    args = [sys.executable, "-m", "pytest", "-q", "-x", "-m", "not slow", "-p", "no:cacheprovider",
            *[f"--ignore={p}" for p in own], "tests"]
    res = subprocess.run(args, cwd=copy, env=env, capture_output=True, text=True, check=False, timeout=1500)
    tail = "\n".join(res.stdout.splitlines()[-30:])
    assert res.returncode == 0, f"without {layer.NAME}:\n{tail}\n{res.stderr[-2000:]}"
    assert "[100%]" in tail, tail  # the suite ran to its end
    probe = subprocess.run([sys.executable, "-c", "import optrace.codemods.registry as r; "
                            "print(sorted(lay.NAME for lay in r.LAYERS))"],
                           cwd=copy, env=env, capture_output=True, text=True, check=True)
    assert layer.NAME not in probe.stdout and "python_fakes" in probe.stdout
