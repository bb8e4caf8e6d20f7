"""apply's proof analyses the tree as it would be: a file of the include closure apply
does not edit keeps the parse the plan made of it (engine/analysis.py `_recent_parse`),
and the result is the same bytes as with every file parsed again."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from optrace.engine import analysis as analysis_module
from optrace.pipeline.apply import apply_changes

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OP = "src/cam/comm_operator/ascend_kernels/moe_fused_gmm"


def _apply_counting(tmp: Path, monkeypatch: pytest.MonkeyPatch, reuse: bool) -> tuple[dict[Path, int], dict]:
    repo = tmp / "umdk_style"
    shutil.copytree(FIXTURES / "umdk_style", repo)
    parses: dict[Path, int] = {}
    real = analysis_module.parse_file

    def counting(parser, src):  # type: ignore[no-untyped-def]
        parses[src.path] = parses.get(src.path, 0) + 1
        return real(parser, src)

    monkeypatch.setattr(analysis_module, "parse_file", counting)
    monkeypatch.setattr(analysis_module, "_RECENT_PARSES", [])
    if not reuse:
        monkeypatch.setattr(analysis_module, "_recent_parse", lambda key: None)
    result = apply_changes(repo / OP, repo)
    changes = {p.relative_to(repo): c for p, c in result.changes.items()}
    return parses, changes


def test_the_proof_parses_only_what_apply_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parses, changes = _apply_counting(tmp_path, monkeypatch, reuse=True)
    edited = {p.name for p, (old, new) in changes.items() if old is not None and new is not None}
    twice = {p.name for p, n in parses.items() if n > 1}
    once = {p.name for p, n in parses.items() if n == 1}
    assert once, "some file of the closure is not edited by apply"
    assert twice <= edited  # a file parsed again is one apply changed
    assert once.isdisjoint(edited)


def test_the_result_is_the_same_as_with_every_file_parsed_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _parses, kept = _apply_counting(tmp_path / "a", monkeypatch, reuse=True)
    _parses, fresh = _apply_counting(tmp_path / "b", monkeypatch, reuse=False)
    assert kept == fresh
