"""All-or-nothing writes: stale sources, failing writes, crashes between files, recovery."""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import optrace.engine.journal as journals
import optrace.engine.transaction as transaction
from optrace.engine.edits import FileChange
from optrace.engine.journal import (
    ForeignJournal,
    StaleSource,
    TransactionBusy,
    TransactionError,
    UnfinishedTransaction,
    WriteFailed,
    journal_path,
)
from optrace.engine.transaction import Outcome, Transaction, _read_backup, commit, recover

Snapshot = dict[str, tuple[str, bytes, int]]


def leftovers(journal_dir: Path) -> list[str]:
    """What a finished transaction leaves in the journal directory, besides its lock file,
    the repository's `id` (both stay) and the `.gitignore` that hides them from git."""
    return sorted(p.name for p in journal_dir.iterdir()
                  if not p.name.endswith(".lock") and p.name not in (".gitignore", "id"))


def recorded(journal_dir: Path, name: str, token: str | None = None) -> Path:
    """Record a hand-written journal in the user's state directory exactly as optrace
    records the journals it writes: stands for "this journal is optrace's own"."""
    journal = journal_path(journal_dir, name)
    data = journal.read_bytes()
    token = token or str(json.loads(data).get("token", "t"))
    transaction._remember(journal_dir, journal.name.split(".", 1)[0], token, data)
    return journal


def snapshot(root: Path, skip: Path | None = None) -> Snapshot:
    """Every entry under `root` (dotfiles included, so stray temp files show): kind, bytes, mode."""
    out: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if skip is not None and (path == skip or skip in path.parents):
                continue
            st = os.lstat(path)
            rel = path.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path).encode(), 0)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", b"", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
    return out


@pytest.fixture
def operator(tmp_path: Path) -> tuple[Path, Path, dict[Path, FileChange]]:
    """An operator tree, its journal directory, and a change set touching five files."""
    op = tmp_path / "op"
    (op / "op_kernel").mkdir(parents=True)
    (op / "op_host").mkdir()
    kernel = op / "op_kernel" / "k.cpp"
    kernel.write_bytes(b"\xef\xbb\xbfvoid k() {\r\n\tint x;\r\n}")
    base = op / "op_kernel" / "k_base.h"
    base.write_bytes("// 基础\n#pragma once\n".encode("gbk"))
    base.chmod(0o755)
    host = op / "op_host" / "k_host.cpp"
    host.write_bytes(b"int main() {}\n")
    host.chmod(0o640)
    gone = op / "op_kernel" / "old_trace.h"
    gone.write_bytes(b"// stale trace header\n")
    gone.chmod(0o600)
    (op / "op_kernel" / "alias.cpp").symlink_to("k.cpp")
    changes: dict[Path, FileChange] = {
        op / "op_kernel" / "alias.cpp": (
            kernel.read_bytes(),
            b"\xef\xbb\xbfvoid k() {\r\n\tTRACE();\r\n\tint x;\r\n}",
        ),
        base: (base.read_bytes(), base.read_bytes() + b"#define ENABLE_MOE_PROFILING 1\n"),
        host: (host.read_bytes(), b"int main() { return 0; }\n"),
        gone: (gone.read_bytes(), None),
        op / "op_kernel" / "gen" / "deep" / "point_map.h": (None, b"// generated\n"),
    }
    return op, tmp_path / ".optrace", changes  # the repository root: tmp_path


def expected_after(op: Path, changes: dict[Path, FileChange]) -> dict[Path, bytes | None]:
    return {Path(os.path.realpath(path)): new for path, (_old, new) in changes.items()}


def test_commit_writes_every_file_keeps_modes_and_symlinks(
    operator: tuple[Path, Path, dict[Path, FileChange]],
) -> None:
    op, journal_dir, changes = operator
    written = commit(changes, journal_dir, name="k")
    assert len(written) == 5
    for path, new in expected_after(op, changes).items():
        assert (path.read_bytes() if path.exists() else None) == new, path
    assert stat.S_IMODE(os.stat(op / "op_kernel" / "k_base.h").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(op / "op_host" / "k_host.cpp").st_mode) == 0o640
    assert (op / "op_kernel" / "alias.cpp").is_symlink()  # written through, not replaced
    assert leftovers(journal_dir) == []  # journal and backups gone
    assert not [p for p in op.rglob(".*") if p.name.endswith(".tmp")]


def test_nothing_to_do(tmp_path: Path) -> None:
    path = tmp_path / "a.h"
    path.write_bytes(b"x")
    assert commit({path: (b"x", b"x")}, tmp_path / "j") == []
    assert not (tmp_path / "j").exists()


@pytest.mark.parametrize("what", ["edited", "deleted", "created", "directory"])
def test_a_stale_source_writes_nothing(operator: tuple[Path, Path, dict[Path, FileChange]],
                                       what: str) -> None:
    op, journal_dir, changes = operator
    host = op / "op_host" / "k_host.cpp"
    if what == "edited":
        host.write_bytes(b"int main() { /* user */ }\n")
        culprit = host
    elif what == "deleted":
        host.unlink()
        culprit = host
    elif what == "directory":
        host.unlink()
        host.mkdir()
        culprit = host
    else:
        culprit = op / "op_kernel" / "gen" / "deep" / "point_map.h"
        culprit.parent.mkdir(parents=True)
        culprit.write_bytes(b"// someone else's\n")
    before = snapshot(op)
    with pytest.raises(StaleSource) as caught:
        commit(changes, journal_dir, name="k")
    assert caught.value.path == culprit.resolve()
    assert str(caught.value).startswith(f"{culprit.resolve()}: OT042 ")
    assert snapshot(op) == before
    assert not journal_path(journal_dir, "k").exists()


def test_aliases_of_one_file_are_refused(tmp_path: Path) -> None:
    a = tmp_path / "a.h"
    a.write_bytes(b"x")
    (tmp_path / "b.h").symlink_to(a)
    with pytest.raises(ValueError, match="same file"):
        commit({a: (b"x", b"y"), tmp_path / "b.h": (b"x", b"z")}, tmp_path / "j")


@pytest.mark.parametrize("k", range(5))
@pytest.mark.parametrize("fault", ["oserror", "directory"])
def test_a_failing_write_restores_every_file(
    operator: tuple[Path, Path, dict[Path, FileChange]], k: int, fault: str
) -> None:
    op, journal_dir, changes = operator
    before = snapshot(op)
    seen: list[Path] = []

    def fail_at_k(path: Path, index: int) -> None:
        seen.append(path)
        if index != k:
            return
        if fault == "oserror":
            raise OSError(28, "No space left on device")
        # Someone puts a directory where the file was: the rename onto it fails.
        if path.exists():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir()

    with pytest.raises(WriteFailed) as caught:
        commit(changes, journal_dir, name="k", _before_write=fail_at_k)
    failed = seen[k]
    assert caught.value.path == failed and caught.value.restored_all
    assert str(caught.value).startswith(f"{failed}: OT043 cannot write")
    after = snapshot(op)
    if fault == "directory":
        # The directory stays (it is not ours); everything else is as before.
        rel = failed.relative_to(op).as_posix()
        assert after.pop(rel)[0] == "dir"
        after = {name: entry for name, entry in after.items() if not name.startswith(rel + "/")}
        before = {name: entry for name, entry in before.items() if name != rel}
        for created in ("op_kernel/gen", "op_kernel/gen/deep"):
            if rel.startswith(created + "/"):
                after.pop(created)  # the parents of the directory put there
    assert after == before
    assert not journal_path(journal_dir, "k").exists()
    assert leftovers(journal_dir) == []


def test_an_interrupt_rolls_back_and_propagates(operator: tuple[Path, Path, dict[Path, FileChange]]) -> None:
    op, journal_dir, changes = operator
    before = snapshot(op)

    def interrupt(path: Path, index: int) -> None:
        if index == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        commit(changes, journal_dir, name="k", _before_write=interrupt)
    assert snapshot(op) == before


def test_an_unwritable_journal_writes_nothing(
    operator: tuple[Path, Path, dict[Path, FileChange]], monkeypatch: pytest.MonkeyPatch
) -> None:
    op, journal_dir, changes = operator
    journal_dir.write_bytes(b"not a directory")
    before = snapshot(op)
    with pytest.raises(WriteFailed, match="cannot use the journal directory"):
        commit(changes, journal_dir, name="k")
    assert snapshot(op) == before
    journal_dir.unlink()
    # The backups cannot be made durable (a disk error): the journal is never written.
    real_fsync = os.fsync

    def failing(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/old.bin"):
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to name the file being fsynced")
    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(WriteFailed, match=r"cannot write the journal \(Input/output error\)"):
        commit(changes, journal_dir, name="k")
    assert snapshot(op) == before
    assert leftovers(journal_dir) == []
    assert journals.read_records(journal_dir, "journal-k") == []


# --- crashes: a child process dies at the k-th write; the parent recovers

CHILD = textwrap.dedent(
    """
    import json, os, pickle, sys
    from pathlib import Path
    from optrace.engine.journal import journal_path
    from optrace.engine.transaction import commit

    changes, journal_dir, k = pickle.loads(Path(sys.argv[1]).read_bytes())

    def die_at_k(path, index):
        if index == k:
            # Die half-way through writing the temp file, the worst moment.
            # (for a created file, right after making its directories).
            token = json.loads(journal_path(journal_dir, "k").read_text())["token"]
            path.parent.mkdir(parents=True, exist_ok=True)
            (path.parent / f".{path.name}.optrace-{token}.tmp").write_bytes(b"half")
            os._exit(1)

    commit(changes, journal_dir, name="k", _before_write=die_at_k)
    """
)


def crash_at(k: int, changes: dict[Path, FileChange], journal_dir: Path, work: Path) -> None:
    args = work / f"crash-{k}.pickle"
    args.write_bytes(pickle.dumps((changes, journal_dir, k)))
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(args)], capture_output=True, text=True, check=False
    )
    assert child.returncode == 1, child.stderr


def test_a_crash_at_any_write_is_rolled_back_by_recover(
    operator: tuple[Path, Path, dict[Path, FileChange]], tmp_path: Path
) -> None:
    op, journal_dir, changes = operator
    before = snapshot(op)
    for k in range(len(changes)):
        crash_at(k, changes, journal_dir, tmp_path)
        journal = journal_path(journal_dir, "k")
        assert journal.exists(), k
        assert snapshot(op) != before or k == 0
        with pytest.raises(UnfinishedTransaction):
            commit(changes, journal_dir, name="k")

        report = recover(journal_dir)
        assert report.clean and report.journals == [journal] and report.kept == []
        assert len(report.paths(Outcome.RESTORED)) + len(report.paths(Outcome.REMOVED)) == k
        assert snapshot(op) == before, f"not restored after a crash at write {k}"
        assert leftovers(journal_dir) == []
    # Recovered, the operator takes a transaction again.
    assert len(commit(changes, journal_dir, name="k")) == len(changes)


def test_recover_leaves_a_file_edited_since_and_keeps_its_backup(
    operator: tuple[Path, Path, dict[Path, FileChange]], tmp_path: Path
) -> None:
    op, journal_dir, changes = operator
    before = snapshot(op)
    crash_at(3, changes, journal_dir, tmp_path)
    journal = json.loads(journal_path(journal_dir, "k").read_text())
    first_written = journal_dir.parent.resolve() / journal["files"][0]["path"]  # relative to the root
    first_written.write_bytes(b"// the user's own edit\n")

    report = recover(journal_dir, "k")
    assert not report.clean
    assert report.paths(Outcome.MODIFIED_SINCE) == [first_written]
    assert any(str(first_written) in line and "modified-since" in line for line in report.messages())
    assert first_written.read_bytes() == b"// the user's own edit\n"
    after = snapshot(op)
    rel = first_written.relative_to(op).as_posix()
    assert {n: e for n, e in after.items() if n != rel} == {n: e for n, e in before.items() if n != rel}
    # The journal moved aside with the old bytes, so the operator is not blocked.
    assert not journal_path(journal_dir, "k").exists()
    (kept,) = report.kept
    assert kept.parent == journal_dir / "unresolved"
    assert _read_backup(kept / "backup", journal["files"][0]["backup"]) == before[rel][1]
    assert commit({first_written: (first_written.read_bytes(), b"x")}, journal_dir, name="k")


@pytest.mark.parametrize("ours", [True, False], ids=["recorded", "not-recorded"])
def test_recover_without_a_journal_and_orphans(tmp_path: Path, ours: bool) -> None:
    """Orphans of optrace's own crash (its record says so) are swept; the same files
    without a record are someone else's: reported and left alone."""
    assert recover(tmp_path / "nothing").clean
    journal_dir = tmp_path / ".optrace"
    (journal_dir / "journal-k.backup").mkdir(parents=True)
    (journal_dir / "journal-k.backup" / "0").write_bytes(b"old")
    (journal_dir / "journal-k.json.tmp").write_bytes(b"{")
    if ours:  # a crash between the record and the journal's rename
        transaction._remember(journal_dir, "journal-k", "t", b"{")
    report = recover(journal_dir)
    assert report.clean and report.files == [] and report.journals == []
    if ours:
        assert leftovers(journal_dir) == [] and report.foreign == []
        assert journals.read_records(journal_dir, "journal-k") == []
    else:
        assert leftovers(journal_dir) == ["journal-k.backup", "journal-k.json.tmp"]
        assert [f.code for f in report.foreign] == ["OT046"]
        assert not (journal_dir / "journal-k.lock").exists()


def test_an_unreadable_journal_is_reported(tmp_path: Path) -> None:
    journal_dir = tmp_path / ".optrace"
    journal_dir.mkdir()
    journal_path(journal_dir, "k").write_text('{"format": "something else"}')
    assert [f.code for f in recover(journal_dir).foreign] == ["OT046"]  # not optrace's: untouched
    recorded(journal_dir, "k")
    with pytest.raises(TransactionError, match="unreadable journal"):
        recover(journal_dir)


def test_transaction_object_and_journal_names(tmp_path: Path) -> None:
    path = tmp_path / "a.h"
    path.write_bytes(b"x")
    txn = Transaction(tmp_path / ".optrace", "moe/fused.gmm")
    assert journal_path(txn.journal_dir, txn.name).name == "journal-moe_fused_gmm.json"
    assert txn.commit({path: (b"x", b"y")}) == [path.resolve()]
    assert path.read_bytes() == b"y" and txn.recover().clean


def test_one_process_per_operator(operator: tuple[Path, Path, dict[Path, FileChange]],
                                  tmp_path: Path) -> None:
    op, journal_dir, changes = operator
    crash_at(2, changes, journal_dir, tmp_path)
    before = snapshot(op)
    lock = journal_path(journal_dir, "k").with_suffix(".lock")
    with open(lock, "a") as handle:  # another live optrace process holds operator k
        fcntl.flock(handle, fcntl.LOCK_EX)
        with pytest.raises(TransactionBusy, match="OT045"):
            commit(changes, journal_dir, name="k")
        assert recover(journal_dir).journals == []  # running, not unfinished: left alone
        assert snapshot(op) == before
    assert recover(journal_dir).clean and not journal_path(journal_dir, "k").exists()


def test_the_journal_directory_is_ignored_by_git(tmp_path: Path) -> None:
    """After apply + strip the user's `git status` is clean: the lock files that stay in
    `.optrace/` are ignored by a `.gitignore` of `*` there."""
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("git not available")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.h").write_bytes(b"old\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "a.h"], cwd=repo, check=True)
    journal = repo / ".optrace"
    commit({repo / "a.h": (b"old\n", b"new\n")}, journal, name="op")
    commit({repo / "a.h": (b"new\n", b"old\n")}, journal, name="op")
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=repo,
                            capture_output=True, text=True, check=True).stdout
    assert status == "A  a.h\n"
    assert any(journal.glob("*.lock"))


def test_a_journal_of_optrace_0_1_with_one_backup_file_per_entry_still_rolls_back(tmp_path: Path) -> None:
    """Journals written before the backup archive name a file per entry: recovery after an
    upgrade still finds the old bytes."""
    import hashlib

    path = tmp_path / "a.h"
    path.write_bytes(b"new bytes")
    journal_dir = tmp_path / ".optrace"
    (journal_dir / "journal-k.backup").mkdir(parents=True)
    (journal_dir / "journal-k.backup" / "0").write_bytes(b"old bytes")
    journal_path(journal_dir, "k").write_text(json.dumps({
        "format": "optrace-journal", "version": 1, "name": "k", "pid": 1, "started": "", "token": "t",
        "files": [{"path": str(path.resolve()), "action": "modify",
                   "old_sha256": hashlib.sha256(b"old bytes").hexdigest(),
                   "new_sha256": hashlib.sha256(b"new bytes").hexdigest(),
                   "mode": 0o644, "backup": "0", "created_dirs": []}],
    }))
    # Found as such after an upgrade, it has no record: refused, untouched.
    (refused,) = recover(journal_dir).foreign
    assert isinstance(refused, ForeignJournal) and path.read_bytes() == b"new bytes"
    assert f"rm -r {journal_dir}/journal-k.*" in str(refused)
    # Recorded (a version 1 journal of an optrace that records them), it rolls back.
    recorded(journal_dir, "k")
    report = recover(journal_dir)
    assert path.read_bytes() == b"old bytes"
    assert [f.outcome for f in report.files] == [Outcome.RESTORED]


def test_a_journal_with_a_malformed_backup_is_reported_not_a_traceback(tmp_path: Path) -> None:
    journal_dir = tmp_path / ".optrace"
    journal_dir.mkdir()
    journal_path(journal_dir, "k").write_text(json.dumps({
        "format": "optrace-journal", "version": 2, "name": "k", "pid": 1, "started": "", "token": "t",
        "files": [{"path": str(tmp_path / "a.h"), "action": "modify", "old_sha256": "0", "new_sha256": "1",
                   "mode": 420, "backup": "old.bin@x+1", "created_dirs": []}],
    }))
    recorded(journal_dir, "k")
    with pytest.raises(TransactionError, match=r"unreadable journal.*neither old\.bin"):
        recover(journal_dir)


@pytest.mark.parametrize("which", ["k_base.h", "point_map.h"])
def test_a_temp_file_that_cannot_be_made_durable_writes_nothing(
    operator: tuple[Path, Path, dict[Path, FileChange]], monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    # Temp files are written and fsynced several at once before any rename: one failing
    # (here its fsync, on a worker thread) leaves every file as it was, with no temp
    # file and no directory made for a created file (point_map.h's gen/deep/).
    op, journal_dir, changes = operator
    before = snapshot(op)
    real_fsync = os.fsync

    def failing(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").split("/")[-1].startswith(f".{which}.optrace-"):
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to name the file being fsynced")
    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(WriteFailed) as caught:
        commit(changes, journal_dir, name="k")
    assert caught.value.path.name == which and caught.value.restored_all
    assert "Input/output error" in str(caught.value)
    assert snapshot(op) == before
    assert leftovers(journal_dir) == []


def test_an_interrupt_while_temp_files_are_written_rolls_back(
    operator: tuple[Path, Path, dict[Path, FileChange]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C reaches the main thread while worker threads write and fsync temp files:
    # the writes that started end, then everything is removed and the journal goes.
    op, journal_dir, changes = operator
    before = snapshot(op)

    real_join = threading.Thread.join
    calls: list[str] = []

    def interrupted(self: threading.Thread, timeout: float | None = None) -> None:
        if self.name.startswith("optrace-fsync"):
            calls.append(self.name)
            if len(calls) == 1:
                raise KeyboardInterrupt  # before waiting for the first writer
        real_join(self, timeout)

    real_write = transaction._write_temp

    def slow_write(*args: Any) -> None:  # the writers are still at work when Ctrl-C comes
        time.sleep(0.2)
        real_write(*args)

    monkeypatch.setattr(threading.Thread, "join", interrupted)
    monkeypatch.setattr(transaction, "_write_temp", slow_write)
    with pytest.raises(KeyboardInterrupt):
        commit(changes, journal_dir, name="k")
    assert len(calls) > 1  # every writer was waited for after the interrupt
    assert not [t for t in threading.enumerate() if t.name.startswith("optrace-fsync")]
    assert snapshot(op) == before
    assert leftovers(journal_dir) == []
