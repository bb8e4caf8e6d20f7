"""Issue 14 §2: two optrace processes never write one repository at once.

A `--write` run holds the repository's write lock from before it recovers and computes
until its last commit; a second one stops at once with OT045 naming the holder (or,
with `--wait`, waits). Attacked with a lock held in-process, by a child process, by a
process that died holding it, and by randomised trials: two `apply` / `strip --write`
processes started at random offsets from each other on one operator. After each trial
the operator is byte for byte the original or fully applied, never a mix, and `strip`
leaves no optrace byte behind.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine.journal import TransactionBusy, journal_path, operator_journal_name
from optrace.engine.transaction import commit, repository_lock

LONG = os.environ.get("OPTRACE_LONG_FUZZ", "") not in ("", "0")
KERNEL = (
    b'#include "kernel_operator.h"\n'
    b"__aicore__ inline void Compute(uint32_t n)\n{\n"
    b"    for (uint32_t groupIdx = 0; groupIdx < n; ++groupIdx) {\n        AscendC::SyncAll();\n    }\n}\n"
    b'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
    b"GM_ADDR tiling)\n{\n    Compute(4);\n}\n"
)

Tree = dict[str, bytes]


def tree(root: Path) -> Tree:
    out: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".optrace"]
        for name in filenames:
            out[str((Path(dirpath) / name).relative_to(root))] = (Path(dirpath) / name).read_bytes()
    return out


def make_repo(base: Path) -> tuple[Path, Path]:
    repo = base / "repo"
    (repo / "demo_op" / "op_kernel").mkdir(parents=True)
    (repo / "demo_op" / "op_kernel" / "demo_op.cpp").write_bytes(KERNEL)
    (repo / "optrace.toml").write_text("")
    return repo.resolve(), (repo / "demo_op").resolve()


def cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture
def repo(tmp_path: Path, state_home: Path) -> tuple[Path, Path]:
    return make_repo(tmp_path)


class Holder:
    """Another writer holding the repository's write lock (a thread: another writer too)."""

    def __init__(self, root: Path) -> None:
        self.held, self.release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._hold, args=(root,))

    def _hold(self, root: Path) -> None:
        with repository_lock(root):
            self.held.set()
            self.release.wait(60)

    def __enter__(self) -> Holder:
        self.thread.start()
        assert self.held.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.thread.join()


def test_a_second_writer_stops_at_once_naming_the_holder(repo: tuple[Path, Path]) -> None:
    root, op = repo
    before = tree(root)
    with Holder(root):
        for verb in ("apply", "strip"):
            started = time.monotonic()
            code, _, err = cli(verb, str(op), "--write")
            assert code == 2 and f"{root}: OT045 another optrace process is writing this repository" in err
            assert f"pid {os.getpid()}" in err and "--wait" in err and time.monotonic() - started < 30
        assert tree(root) == before and not (root / ".optrace").exists()  # nothing done
        assert cli("apply", str(op))[0] == 0  # reading needs no lock
        # A library caller's commit is turned away too (files are shared, not only operators).
        kernel = op / "op_kernel" / "demo_op.cpp"
        with pytest.raises(TransactionBusy, match="OT045 another optrace process is writing this repository"):
            commit({kernel: (KERNEL, KERNEL + b"// x\n")}, root / ".optrace", name="lib")
    assert cli("apply", str(op), "--write")[0] == 0


def test_wait_waits_for_the_holder(repo: tuple[Path, Path]) -> None:
    root, op = repo
    holder = Holder(root).__enter__()
    threading.Timer(1.0, holder.release.set).start()
    started = time.monotonic()
    code, out, err = cli("apply", str(op), "--write", "--wait")
    holder.__exit__()
    assert code == 0 and "file(s) written" in out, err
    assert time.monotonic() - started >= 0.9  # it waited for the holder


def test_a_holder_that_died_releases_the_lock(repo: tuple[Path, Path]) -> None:
    root, op = repo
    pid = os.fork()
    if pid == 0:
        try:
            with repository_lock(root):
                os._exit(9)  # killed while holding it
        finally:
            os._exit(1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 9
    assert cli("apply", str(op), "--write")[0] == 0


def test_a_commit_in_progress_turns_another_away_naming_it(repo: tuple[Path, Path]) -> None:
    """Library callers too: a process stopped in the middle of a commit holds the
    repository's lock; a second commit (even of another operator) is turned away."""
    root, op = repo
    kernel = op / "op_kernel" / "demo_op.cpp"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            def hold(path: Path, index: int) -> None:
                os.write(write, b"x")
                time.sleep(30)

            commit({kernel: (KERNEL, KERNEL + b"// x\n")}, root / ".optrace", name="op", _before_write=hold)
        finally:
            os._exit(0)
    try:
        os.read(read, 1)
        for name in ("op", "another-op"):
            with pytest.raises(TransactionBusy, match=f"OT045 another optrace process is writing this "
                                                      f"repository: pid {pid} "):
                commit({kernel: (KERNEL, KERNEL + b"// y\n")}, root / ".optrace", name=name)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert journal_path(root / ".optrace", "op").exists()  # its journal: recovered by the next --write


def test_the_lock_is_in_the_state_directory_not_the_repository(
    repo: tuple[Path, Path], state_home: Path
) -> None:
    root, op = repo
    assert cli("strip", str(op), "--write")[0] == 0  # nothing to strip: nothing in the repository either
    assert not (root / ".optrace").exists()
    assert list((state_home / "state" / "optrace" / "locks").glob("*.lock"))


# --- randomised trials: two processes at random offsets -----------------------------------------


def optrace_process(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "optrace", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tree, Tree]:
    root, op = make_repo(tmp_path_factory.mktemp("reference"))
    before = tree(root)
    assert cli("apply", str(op), "--write")[0] == 0
    return before, tree(root)


TRIALS = 50 if LONG else 6


@pytest.mark.slow  # randomised trials of two writer processes
@pytest.mark.parametrize("second", ["apply", "strip", "apply-wait"])
def test_two_writers_at_random_offsets_leave_original_or_applied(
    tmp_path: Path, states: tuple[Tree, Tree], second: str
) -> None:
    before, after = states
    rng = random.Random(f"optrace-locks-{second}")
    outcomes: dict[str, int] = {}
    for trial in range(TRIALS):
        root, op = make_repo(tmp_path / f"t{trial}")
        first = optrace_process("apply", str(op), "--write")
        time.sleep(rng.uniform(0.0, 1.5))  # the second starts anywhere in the first's run
        verb, *extra = second.split("-")
        other = optrace_process(verb, str(op), "--write", *(["--wait"] if extra else []))
        results = []
        for proc in (first, other):
            _out, err = proc.communicate(timeout=300)
            assert "Traceback" not in err, err
            assert proc.returncode == 0 or (proc.returncode == 2 and "OT045" in err and "pid " in err), err
            results.append(proc.returncode)
        assert 0 in results
        if second == "apply-wait":  # the waiter always gets its turn (the first waits for no one)
            assert results[1] == 0
        state = tree(root)
        assert state in (before, after), f"trial {trial}: a mix of original and applied files"
        outcomes[f"{results}"] = outcomes.get(f"{results}", 0) + 1
        done = subprocess.run([sys.executable, "-m", "optrace", "strip", str(op), "--write"],
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        assert tree(root) == before and b"optrace" not in b"".join(tree(root).values())
        shutil.rmtree(root.parent)
    assert sum(outcomes.values()) == TRIALS
    print(f"{second}: {outcomes}")  # shown with -s: how often the second was turned away


def test_a_lock_file_hard_linked_to_a_users_file_is_not_truncated(
    repo: tuple[Path, Path], tmp_path: Path
) -> None:
    """A copied tree can carry `.optrace/journal-<op>.lock` as a hard link to a file of the
    user's: taking the lock never writes the holder's name into it."""
    root, op = repo
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's file\n")
    (root / ".optrace").mkdir()
    lock = journal_path(root / ".optrace", operator_journal_name(op, root)).with_suffix(".lock")
    os.link(precious, lock)
    assert cli("apply", str(op), "--write")[0] == 0
    assert precious.read_text() == "the user's file\n"
