"""Who is instrumented, asked once per operator of a run: each kernel file is read again
only when its stat signature changed, and never answered from memory while apply's proof
reads other bytes in a file's place (pipeline/apply.py `_carries_scaffold`)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from optrace.engine.index_cache import RACY_NS
from optrace.engine.source import overlaid
from optrace.engine.vocabulary import SCAFFOLD_BEGIN
from optrace.pipeline import apply as apply_module
from optrace.pipeline.apply import instrumented_operators

KERNEL = b'extern "C" __global__ __aicore__ void %s(GM_ADDR x)\n{\n%s}\n'


def _tree(root: Path) -> tuple[Path, Path]:
    a = root / "op_a" / "op_kernel" / "op_a.cpp"
    b = root / "op_b" / "op_kernel" / "op_b.cpp"
    for path, body in ((a, SCAFFOLD_BEGIN + b" mode=B\n"), (b, b"")):
        path.parent.mkdir(parents=True)
        path.write_bytes(KERNEL % (path.stem.encode(), body))
        _settled(path)
    return a, b


def _settled(path: Path) -> None:
    """Written more than its clock's tick before the question (`RACY_NS`): its signature
    tells any later write. (Its change time is the write's: `utime` cannot move it back.)"""
    assert path.stat().st_mtime_ns % 1_000_000_000  # a clock with fractions: RACY_NS applies
    time.sleep(3 * RACY_NS / 1e9)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = apply_module.read_regular

    def counting(path: str | Path, *args: object, **kwargs: object) -> bytes:
        seen.append(Path(path).name)
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(apply_module, "read_regular", counting)
    monkeypatch.setattr(apply_module, "_SCAFFOLD_SEEN", {})
    return seen


def test_a_second_question_reads_no_unchanged_kernel_file(tmp_path: Path, reads: list[str]) -> None:
    _tree(tmp_path)
    assert instrumented_operators(tmp_path) == [(tmp_path / "op_a").resolve()]
    assert sorted(reads) == ["op_a.cpp", "op_b.cpp"]
    reads.clear()
    assert instrumented_operators(tmp_path) == [(tmp_path / "op_a").resolve()]
    assert reads == []


def test_a_kernel_file_written_since_is_read_again(tmp_path: Path, reads: list[str]) -> None:
    _a, b = _tree(tmp_path)
    instrumented_operators(tmp_path)
    b.write_bytes(KERNEL % (b"op_b", SCAFFOLD_BEGIN + b" mode=A\n"))
    _settled(b)
    reads.clear()
    assert instrumented_operators(tmp_path) == [(tmp_path / "op_a").resolve(), (tmp_path / "op_b").resolve()]
    assert reads == ["op_b.cpp"]


def test_a_file_written_within_its_clocks_tick_is_not_remembered(tmp_path: Path, reads: list[str]) -> None:
    """Written just now: a second write in the same tick, same size, would keep its
    signature, so its answer is not kept."""
    _a, b = _tree(tmp_path)
    b.write_bytes(KERNEL % (b"op_b", b""))  # now, not settled
    instrumented_operators(tmp_path)
    reads.clear()
    instrumented_operators(tmp_path)
    assert reads == ["op_b.cpp"]


def test_bytes_read_in_a_files_place_are_neither_answered_from_memory_nor_kept(
        tmp_path: Path, reads: list[str]) -> None:
    _a, b = _tree(tmp_path)
    instrumented_operators(tmp_path)  # op_b remembered without the scaffold
    st = b.stat()
    with overlaid({(st.st_dev, st.st_ino): KERNEL % (b"op_b", SCAFFOLD_BEGIN + b" mode=B\n")}):
        assert (tmp_path / "op_b").resolve() in instrumented_operators(tmp_path)
    reads.clear()
    assert instrumented_operators(tmp_path) == [(tmp_path / "op_a").resolve()]
    assert reads == []


def test_a_run_over_several_operators_walks_the_repository_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each operator's proof asks who else is instrumented: from the run's index of the
    repository, not a walk of it per operator (quadratic over a repository's operators).
    The one walk left is the commits' (`Neighbours`)."""
    import shutil

    from typer.testing import CliRunner

    from optrace.cli.app import app

    repo = tmp_path / "umdk_style"
    shutil.copytree(Path(__file__).resolve().parent.parent / "fixtures" / "umdk_style", repo)
    kernels = repo / "src" / "cam" / "comm_operator" / "ascend_kernels"
    walks: list[Path] = []
    real = apply_module.walk_files

    def counting(root: Path, *args: object) -> object:
        if Path(root).resolve() == repo.resolve():
            walks.append(Path(root))
        return real(root, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(apply_module, "walk_files", counting)
    out = CliRunner().invoke(app, ["apply", str(kernels / "moe_fused_gmm"), str(kernels / "moe_gate_bias"),
                                   "--write", "--jobs", "1", "--repo-root", str(repo)])
    assert out.exit_code == 0, out.output
    assert len(walks) <= 1
