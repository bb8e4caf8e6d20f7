"""`apply` / `strip` over several operators: computed in a process pool, committed one
operator at a time in the order given — and the tree ends byte for byte as when each
operator is applied on its own, one after another, even where operators share files
(one pybind.cpp, functions.h, sample and build script for all of them)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # several operators at once, through the CLI, on copied fixture trees

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
UMDK_OPS = "src/cam/comm_operator/ascend_kernels"


def _forest_module():  # bench/ is not a package: load the generator by path
    spec = importlib.util.spec_from_file_location("optrace_bench_forest", ROOT / "bench" / "forest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "optrace", *args], capture_output=True, text=True, cwd=cwd)


Tree = dict[str, bytes]


def tree(root: Path) -> Tree:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".optrace" not in p.relative_to(root).parts}


def one_at_a_time(repo: Path, ops: list[str], *extra: str) -> list[str]:
    """The reference: each operator applied by its own run, in order."""
    lines = []
    for op in ops:
        done = run(repo, "apply", op, "--write", *extra)
        lines.append(done.stdout.strip())
    return lines


@pytest.fixture(scope="module")
def forest(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Four operators sharing pybind.cpp, functions.h, a sample and a build script."""
    root = tmp_path_factory.mktemp("forest") / "repo"
    ops, _lines = _forest_module().write_forest(root, 4, headers=2)
    return root, [op.name for op in ops]


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_parallel_write_is_byte_identical_to_one_operator_at_a_time(
    forest: tuple[Path, list[str]], tmp_path: Path
) -> None:
    src, ops = forest
    before = tree(src)
    serial = copy(src, tmp_path / "serial")
    expected_lines = one_at_a_time(serial, ops)
    parallel = copy(src, tmp_path / "parallel")
    done = run(parallel, "apply", *ops, "--write", "-j", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == expected_lines  # same report, same order
    after = tree(parallel)
    assert after == tree(serial)
    # The shared files really carry every operator's edits.
    for shared in ("pybind/pybind.cpp", "pybind/functions.h", "examples/forest_sample.py",
                   "build/compile_ascend_proj.sh"):
        assert after[shared] != before[shared]
        for op in ops:
            assert op.encode() in after[shared]
    assert after["examples/forest_sample.py"].count(b"profiling_data = y  # optrace") == len(ops)
    # -j 1 takes the same path in one process: the same bytes.
    single = copy(src, tmp_path / "single")
    assert run(single, "apply", *ops, "--write", "-j", "1").stdout == done.stdout
    assert tree(single) == after

    # Idempotent: a second parallel apply changes nothing.
    check = run(parallel, "apply", *ops, "--check", "-j", "2")
    assert check.returncode == 0, check.stderr
    again = run(parallel, "apply", *ops, "--write", "-j", "2")
    assert again.returncode == 0 and tree(parallel) == after
    assert again.stdout.count(": 0 file(s) written") == len(ops)

    # Strip in parallel gives back the original bytes, every file.
    stripped = run(parallel, "strip", *ops, "--write", "-j", "2")
    assert stripped.returncode == 0, stripped.stderr
    assert tree(parallel) == before
    assert run(parallel, "strip", *ops, "--check", "-j", "2").returncode == 0


def test_mode_switch_in_parallel_matches_one_at_a_time(
    forest: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """Every operator instrumented in mode B, then switched to A in one run: an operator's
    neighbours are in B when it was computed, in A when it commits — rebased to match."""
    src, ops = forest
    serial = copy(src, tmp_path / "serial")
    assert run(serial, "apply", *ops, "--write").returncode == 0
    parallel = copy(serial, tmp_path / "parallel")
    one_at_a_time(serial, ops, "--mode", "A")
    done = run(parallel, "apply", *ops, "--write", "--mode", "A", "-j", "2")
    assert done.returncode == 0, done.stderr
    assert tree(parallel) == tree(serial)
    assert run(parallel, "apply", *ops, "--check", "-j", "2").returncode == 0  # A is kept


def test_an_operator_given_twice_is_computed_again_after_its_first_commit(
    forest: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """Its second result was computed before the first commit and read the kernel the
    first one rewrote: it cannot be rebased, so it is computed again — and is empty."""
    src, ops = forest
    repo = copy(src, tmp_path / "repo")
    done = run(repo, "apply", ops[0], ops[1], ops[0], "--write", "-j", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"{ops[0]}: 0 file(s) written"
    note = [line for line in done.stderr.splitlines() if "computed again after earlier commits" in line]
    assert len(note) == 1 and note[0].endswith(f": {ops[0]}"), done.stderr  # said once, with the name
    serial = copy(src, tmp_path / "serial")
    one_at_a_time(serial, ops[:2])
    assert tree(repo) == tree(serial)


def test_one_broken_operator_is_reported_and_the_others_are_written(
    forest: tuple[Path, list[str]], tmp_path: Path
) -> None:
    src, ops = forest
    repo = copy(src, tmp_path / "repo")
    pybind = repo / "pybind" / "pybind.cpp"
    broken = ops[1]
    good = f'm.def("{broken}(Tensor x) -> Tensor");'.encode()
    assert good in pybind.read_bytes()
    pybind.write_bytes(pybind.read_bytes().replace(good, f'm.def("{broken}(Tensor x -> Tensor");'.encode()))
    data = pybind.read_bytes()
    line = data[: data.index(broken.encode() + b"(Tensor x ->")].count(b"\n") + 1
    before = tree(repo)
    serial = copy(repo, tmp_path / "serial")
    reference = one_at_a_time(serial, ops)

    done = run(repo, "apply", *ops, "--write", "-j", "2")
    assert done.returncode == 2
    assert f"pybind/pybind.cpp:{line}: OT311" in done.stderr and broken in done.stderr
    # each good operator writes what its own run writes (the broken one nothing)
    assert done.stdout.strip().splitlines() == [r for r in reference if r.endswith("file(s) written")]
    assert len(done.stdout.strip().splitlines()) == len(ops) - 1
    after = tree(repo)
    assert after == tree(serial)
    assert all(after[p] == before[p] for p in before if p.startswith(f"{broken}/"))  # nothing of it
    assert any(after[p] != before[p] for p in before if p.startswith(f"{ops[0]}/"))


def test_diff_check_and_patch_of_several_operators_are_those_of_each_in_turn(
    forest: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """Nothing is written without --write: each operator's diff is against the tree as
    it is, printed in the order given, the same with one worker or two."""
    src, ops = forest
    repo = copy(src, tmp_path / "repo")
    each = [run(repo, "apply", op) for op in ops]
    for jobs in ("1", "2"):
        together = run(repo, "apply", *ops, "-j", jobs)
        assert together.returncode == 0
        assert together.stdout == "".join(d.stdout for d in each)
        check = run(repo, "apply", *ops, "--check", "-j", jobs)
        assert check.returncode == 1
        # Then the run's count, its last line.
        assert check.stderr == "".join(run(repo, "apply", op, "--check").stderr for op in ops) + (
            f"{len(ops)} operators: {len(ops)} would change, 0 unchanged, 0 failed\n")
        patch = tmp_path / f"all-{jobs}.patch"
        assert run(repo, "apply", *ops, "--patch", str(patch), "-j", jobs).returncode == 0
        assert patch.read_text() == together.stdout
    assert tree(repo) == tree(src)


def test_umdk_fixture_operators_sharing_pybind_sample_and_build_script(tmp_path: Path) -> None:
    ops = [f"{UMDK_OPS}/moe_gate_bias", f"{UMDK_OPS}/moe_fused_gmm"]
    serial = copy(FIXTURES / "umdk_style", tmp_path / "serial")
    parallel = copy(FIXTURES / "umdk_style", tmp_path / "parallel")
    before = tree(parallel)
    one_at_a_time(serial, ops)
    done = run(parallel, "apply", *ops, "--write", "-j", "2")
    assert done.returncode == 0, done.stderr
    assert tree(parallel) == tree(serial)
    assert run(parallel, "strip", *ops, "--write", "-j", "2").returncode == 0
    assert tree(parallel) == before


def test_a_result_stale_only_in_shared_layer_files_is_rebased_not_recomputed(
    forest: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """The rebase itself, not just the final tree: every operator computed against the
    original tree; after the first commits, each later one is rebased (not None) onto the
    shared pybind / sample / build files, and the rebase equals computing it now."""
    from optrace.engine.transaction import commit
    from optrace.pipeline.apply import RunCommits, apply_changes

    src, ops = forest
    repo = copy(src, tmp_path / "repo")
    computed = [apply_changes(repo / op) for op in ops]
    run_commits = RunCommits(computed)
    for index, result in enumerate(computed):
        rebased = run_commits.rebase(result)
        assert rebased is not None, f"{ops[index]} was not rebasable"
        fresh = apply_changes(repo / ops[index])
        assert rebased.changes == fresh.changes
        written = commit(rebased.changes, repo / ".optrace", name=ops[index])
        run_commits.committed(rebased, written)
    shared = [p for p in computed[1].changes if p in computed[0].changes]
    assert shared, "the forest's operators share no file: the test proves nothing"
