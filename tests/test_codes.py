"""The OT code registry (engine/codes.py): every code the source can emit is registered,
every registered code is emitted and documented, and the registry drives severities."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from optrace.engine.codes import CODE_RE, CODES, Severity, lookup, render
from optrace.engine.diagnostics import Diagnostic

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# The package's own folders (optrace/<pkg> are links to these: not scanned twice).
PACKAGES = ("engine", "codemods", "rules", "pipeline", "runtime")
REGISTRY = ROOT / "engine" / "codes.py"


def source_files() -> list[Path]:
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    files += [p for folder in ("optrace", "optrace/cli") for p in sorted((ROOT / folder).glob("*.py"))]
    return [p for p in files if p != REGISTRY]


def codes_in_source() -> dict[str, list[str]]:
    """Every OTxxx written anywhere in the package's source, where it is written."""
    found: dict[str, list[str]] = {}
    for path in source_files():
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for code in CODE_RE.findall(line):
                found.setdefault(code, []).append(f"{path.relative_to(ROOT)}:{n}")
    return found


def test_the_scan_sees_the_package() -> None:
    # Guards the two tests below against a scan that silently reads nothing.
    found = codes_in_source()
    assert "OT001" in found and "OT451" in found and len(found) >= 50


def test_every_code_in_the_source_is_registered() -> None:
    unknown = {code: where for code, where in codes_in_source().items() if code not in CODES}
    assert not unknown, f"register these in engine/codes.py: {unknown}"


def test_every_registered_code_is_used_somewhere() -> None:
    used = codes_in_source()
    stale = sorted(code for code in CODES if code not in used)
    assert not stale, f"registered but never emitted (drop them or use them): {stale}"


def test_the_generated_page_is_current() -> None:
    assert (DOCS / "diagnostics.md").read_text(encoding="utf-8") == render(), (
        "regenerate: python -m optrace.engine.codes > docs/diagnostics.md")


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_code_is_named_on_its_page(code: str) -> None:
    page = DOCS / lookup(code).doc
    assert page.is_file(), f"{code}: docs/{lookup(code).doc} does not exist"
    text = page.read_text(encoding="utf-8")
    if page.name == "diagnostics.md":
        assert f"### {code}\n" in text, f"{code} is documented on diagnostics.md: give it a note"
    else:
        assert code in text, f"{code} is not named on docs/{page.name}"


def test_a_diagnostic_takes_its_default_severity_from_the_registry() -> None:
    assert Diagnostic("OT013", "big", None, 0).severity == Severity.INFO
    assert Diagnostic("OT005", "skipped").severity == Severity.WARNING
    assert Diagnostic("OT001", "missing").severity == Severity.ERROR
    # A call site may still say otherwise, and a team's own rule code defaults to warning.
    assert Diagnostic("OT001", "x", None, 0, Severity.INFO).severity == Severity.INFO
    assert Diagnostic("TEAM01", "theirs").severity == Severity.WARNING


def test_lookup_names_an_unregistered_code() -> None:
    with pytest.raises(KeyError, match="OT998"):
        lookup("OT998")


def test_no_call_site_spells_a_code_as_a_string() -> None:
    """Codes are typed: a call site names the registry's object (`OT044`, `f"{OT044} ..."`),
    never the bare string "OT044" (docstrings and comments may name codes)."""
    bare = re.compile(r"(?<!\{)\bOT\d{3}\b")
    found = []
    for path in source_files():
        src = path.read_text(encoding="utf-8")
        docs = {node.lineno for node in ast.walk(ast.parse(src))
                if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.STRING and tok.start[0] not in docs and bare.search(tok.string):
                found.append(f"{path.relative_to(ROOT)}:{tok.start[0]}: {tok.string[:60]}")
    assert not found, found
