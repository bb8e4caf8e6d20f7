"""apply reads back what it is about to write with the strip and check commands' own code
(the new bytes read in place of the old ones) and writes nothing they could not read: the
promise that `strip` undoes `apply` is checked on the tree as it would be, not on a
separate path."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import optrace.pipeline.apply as apply_module
import optrace.pipeline.check as check_module
import optrace.pipeline.plan as plan_module
from optrace.cli.app import app
from optrace.engine.codes import OT016
from optrace.engine.diagnostics import Diagnostic, InputError
from optrace.engine.transaction import commit
from optrace.pipeline.apply import apply_changes
from optrace.pipeline.check import check_operator
from optrace.runtime import regular
from optrace.runtime.regular import overlaid, read_regular

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
UMDK = FIXTURES / "umdk_style"
OP = Path("src/cam/comm_operator/ascend_kernels/moe_fused_gmm")


def _tree(tmp_path: Path) -> tuple[Path, dict[Path, bytes]]:
    root = tmp_path / "repo"
    shutil.copytree(UMDK, root, symlinks=True)
    return root, {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and ".optrace" not in p.parts}


def test_overlaid_bytes_are_read_under_every_name_of_the_file(tmp_path: Path) -> None:
    real = tmp_path / "k.cpp"
    real.write_bytes(b"old")
    (tmp_path / "link.cpp").symlink_to(real)
    os.link(real, tmp_path / "hard.cpp")
    st = real.stat()
    with overlaid({(st.st_dev, st.st_ino): b"new"}):
        assert {read_regular(tmp_path / n) for n in ("k.cpp", "link.cpp", "hard.cpp")} == {b"new"}
    assert read_regular(real) == b"old" and real.read_bytes() == b"old"


def test_apply_runs_strip_and_check_on_the_tree_it_would_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The strip the check runs sees the instrumented bytes: every file apply changes is
    read back (under the overlay) with its new content."""
    root, _ = _tree(tmp_path)
    seen: dict[str, bytes] = {}
    real_strip = apply_module.strip_changes

    def watching(*args: Any, **kwargs: Any) -> Any:
        if regular._overlay:  # the read-back, not the baseline
            for identity, data in regular._overlay.items():
                seen[str(identity)] = data
        return real_strip(*args, **kwargs)

    monkeypatch.setattr(apply_module, "strip_changes", watching)
    result = apply_changes(root / OP, root)
    changed = [new for old, new in result.changes.values() if old is not None and new is not None]
    assert changed and sorted(seen.values()) == sorted(changed)


def test_strip_and_check_share_one_analysis_and_one_plan_of_the_tree_apply_would_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """apply's read-back analyses and plans the instrumented tree once, for strip and
    check both (it was analysed twice and planned twice there), and what it proves is
    unchanged: the same changes as without the read-back's sharing."""
    root, _ = _tree(tmp_path)
    calls: list[str] = []

    def counting(name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if regular._overlay:
                calls.append(name)
            return real(*args, **kwargs)
        return call

    for module in (plan_module, check_module):
        monkeypatch.setattr(module, "analyse_operator", counting("analyse", module.analyse_operator))
        monkeypatch.setattr(module, "plan_from_analysis", counting("plan", module.plan_from_analysis))
    result = apply_changes(root / OP, root)
    assert sorted(calls) == ["analyse", "plan"]
    monkeypatch.undo()
    monkeypatch.setattr(apply_module, "_check_strip_undoes", lambda _result: None)
    unproved = apply_changes(root / OP, root)
    assert result.changes == unproved.changes and result.changes


@pytest.mark.parametrize("op", ["norm/moe_scale_norm_v2", "norm/moe_scale_norm_v3"])
def test_check_after_the_shared_plan_reports_what_check_alone_reports(tmp_path: Path, op: str) -> None:
    """The read-back's check reads an analysis that strip's plan has already walked — and
    planning adds call-graph edges where a macro's expansion makes calls (`add_macro_calls`:
    these kernels run their phases through macros). Its gates and findings are the ones
    check makes on its own analysis of the same instrumented tree."""
    root = tmp_path / "macro_work"
    shutil.copytree(FIXTURES / "macro_work", root)
    op_dir = root / op
    commit(apply_changes(op_dir, root).changes, root / ".optrace", name="apply")
    alone = check_operator(op_dir, root, compile_safety=False)
    shared = plan_module.AnalysedOnce(op_dir.resolve(), root)
    edges = shared.analysis().callgraph.number_of_edges()
    shared.plan()
    assert shared.analysis().callgraph.number_of_edges() > edges  # planning did add some
    after = check_operator(op_dir, root, compile_safety=False, shared=shared)
    assert alone.instrumented and after.to_json(strict=True) == alone.to_json(strict=True)


@pytest.mark.parametrize("failure", ["strip-plan-too-deep", "recursion"])
def test_what_strip_cannot_read_apply_does_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """The plan of the instrumented tree that strip and check share fails (as a tree
    nested past the bound, or a parser's recursion, would make it): apply --write exits 2
    with OT048, and every file is as it was; the tree's own strip and check still work."""
    root, before = _tree(tmp_path)
    real_plan = plan_module.plan_from_analysis

    def plan_that_fails_on_the_new_tree(analysis: Any, lint: bool = True) -> Any:
        if regular._overlay:
            if failure == "recursion":
                raise RecursionError("maximum recursion depth exceeded")
            raise InputError(Diagnostic(OT016, "code nested deeper than 256 levels",
                                        analysis.layers.op_dir / "x.cpp", 3))
        return real_plan(analysis, lint)

    monkeypatch.setattr(plan_module, "plan_from_analysis", plan_that_fails_on_the_new_tree)
    monkeypatch.chdir(root)
    result = CliRunner().invoke(app, ["apply", str(OP), "--write"])
    assert result.exit_code == 2, result.output
    assert "OT048" in result.output + result.stderr and "Traceback" not in result.output + result.stderr
    assert _files(root) == before


def test_a_kernel_nested_600_deep_is_refused_by_every_command_and_nothing_written(tmp_path: Path) -> None:
    root, _ = _tree(tmp_path)
    entry = root / OP / "op_kernel" / "moe_fused_gmm.cpp"
    text = entry.read_text()
    start = text.index("    icache_preload(4);\n")
    end = text.index("\n}\n", start)
    entry.write_text(text[:start] + "{" * 600 + "\n" + text[start:end] + "\n" + "}" * 600 + text[end:])
    before = _files(root)
    for command, code in ((["plan"], 2), (["apply", "--write"], 2), (["apply"], 2),
                          (["check", "--no-compile"], None), (["strip"], 0), (["strip", "--write"], 0)):
        result = CliRunner().invoke(app, [*command, str(root / OP)])
        out = result.output + result.stderr
        assert "Traceback" not in out and "RecursionError" not in out, (command, out)
        assert result.exit_code in ((0, 1) if code is None else (code,)), (command, result.exit_code, out)
        if code == 2:
            assert "OT016" in out, (command, out)
    assert _files(root) == before


def test_a_save_during_the_read_back_is_a_stale_source_not_strips_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program saves a file apply changes, as editors do (a new file renamed over
    it), while the read-back runs: the overlay, keyed by the old file's identity, does not
    cover the new file, so strip reads the other program's bytes. That is OT042 (plan
    again), not OT048 — and nothing is written."""
    root, _ = _tree(tmp_path)
    header = root / OP / "op_kernel" / "moe_fused_gmm_base.h"
    real_strip = apply_module.strip_changes
    saved: list[bytes] = []

    def saving_first(*args: Any, **kwargs: Any) -> Any:
        if regular._overlay and not saved:
            saved.append(b"// saved by an editor\n" + header.read_bytes())
            fresh = header.with_name(header.name + ".editor")
            fresh.write_bytes(saved[0])
            os.replace(fresh, header)
        return real_strip(*args, **kwargs)

    monkeypatch.setattr(apply_module, "strip_changes", saving_first)
    before = _files(root)
    with pytest.raises(InputError) as info:
        apply_changes(root / OP, root)
    assert info.value.diagnostic.code == "OT042" and info.value.diagnostic.path == header
    assert _files(root) == {**before, header: saved[0]}
