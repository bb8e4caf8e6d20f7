"""Every skip says why, and the README says how to run what is skipped: a skipped test
reads as a pass unless `pytest -rs` names what it waits for."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# How each way of skipping carries its reason: a first argument, or `reason=`.
_REASON_ARG = {"pytest.skip": True, "pytest.mark.skip": True, "pytest.mark.skipif": False,
               "pytest.importorskip": False}


def _dotted(node: ast.expr) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _unexplained_skips(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name not in _REASON_ARG:
            continue
        reason = next((k.value for k in node.keywords if k.arg == "reason"), None)
        if reason is None and _REASON_ARG[name] and node.args:
            reason = node.args[0]
        empty = isinstance(reason, ast.Constant) and not str(reason.value).strip()
        if reason is None or empty:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {name} without a reason")
    return found


def test_every_skip_in_the_suite_gives_its_reason() -> None:
    found = [hit for path in sorted((ROOT / "tests").rglob("*.py")) for hit in _unexplained_skips(path)]
    assert not found, "\n".join(found)


def test_the_checker_finds_a_skip_without_a_reason(tmp_path: Path) -> None:
    probe = tmp_path / "test_probe.py"
    probe.write_text("import pytest\npytest.importorskip('x')\npytest.skip()\n"
                     "pytest.mark.skipif(True, reason='')\npytest.mark.skipif(True, reason='why')\n"
                     "pytest.skip('why')\npytest.importorskip('y', reason='not here')\n")
    assert [hit.split(": ", 1)[1] for hit in _unexplained_skips(probe, tmp_path)] == [
        "pytest.importorskip without a reason", "pytest.skip without a reason",
        "pytest.mark.skipif without a reason"]


def test_the_readme_says_how_to_run_the_skipped_tests() -> None:
    text = " ".join((ROOT / "README.md").read_text().split())
    assert "pytest -rs" in text
    for need in ("chromium", "graphviz", "g++", "OPTRACE_LONG_FUZZ=1", "[test]"):
        assert need in text, need
