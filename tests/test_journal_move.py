"""A repository moved (or copied) after `apply --write` was killed mid-commit.

A journal's identity is the repository's id (`.optrace/id`), not its path: the record in
the user's state directory is keyed by that id and binds the journal's bytes and the
root it was written at; journal names and the paths in a journal are relative to the
root. So `mv repo moved` after a crash, and the next run still finds the journal, rolls
the operator back (never forward), removes every temp file it named, and leaves no dead
journal — while a copy of the tree (same id, the original still in place) and a journal a
clone brought are still never acted on. docs/faults.md lists these tests.

Crashes are injected into a forked child running `apply --write` through the CLI, at the
OS calls (fsync, the renames, unlink) or through commit's `_before_write` hook, as in
tests/test_faults.py, on the UMDK-style operator (about twenty files) and on the small
world of tests/test_trust.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from test_faults import Tree, tree
from test_trust import KERNEL, PWNED, World, cli, crash, make_world, plant, record, snapshot
from typer.testing import CliRunner

import optrace.engine.transaction as transaction
from optrace.cli.app import app
from optrace.engine import renameat
from optrace.engine.journal import (
    journal_path,
    legacy_operator_journal_name,
    legacy_record_path,
    operator_journal_name,
    state_dir,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OP = "src/cam/comm_operator/ascend_kernels/moe_fused_gmm"

def fresh_repo(tmp: Path, name: str = "repo") -> tuple[Path, Path]:
    repo = tmp / name
    shutil.copytree(FIXTURES / "umdk_style", repo)
    return repo.resolve(), repo.resolve() / OP


def strays(root: Path) -> list[str]:
    """Every temp file of a transaction anywhere under `root`, the journal directory too."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".optrace-" in p.name)


def journal_left(root: Path) -> list[str]:
    """What stays in `.optrace/` besides what always stays there: the lock files, the
    repository's id and the `.gitignore` hiding them from git."""
    directory = root / ".optrace"
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir()
                  if not p.name.endswith(".lock") and p.name not in (".gitignore", "id"))


def records() -> list[str]:
    """The records of unfinished journals in the user's state directory."""
    directory = state_dir() / "journals"
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


def move(repo: Path, to: Path) -> Path:
    """`mv repo to`: the same directory (same inodes) at another path."""
    to.parent.mkdir(parents=True, exist_ok=True)
    os.rename(repo, to)
    return to.resolve()


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tree, Tree]:
    """The UMDK-style repository before and after a clean `apply --write`."""
    repo, op = fresh_repo(tmp_path_factory.mktemp("reference"))
    before = tree(repo)
    code, _, err = cli("apply", str(op), "--write")
    assert code == 0, err
    return before, tree(repo)


def changed(before: Tree, after: Tree) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


# --- a child `apply --write` that dies at a chosen moment --------------------------------------


def _arm(point: str, k: int) -> None:
    """In the child: make it die (os._exit(1)) at `point`, the k-th time it comes."""
    targets: list[str] = []  # files of the operator put in place so far
    temp_fsyncs: list[int] = []

    def die() -> None:
        os._exit(1)

    def placed(dst: object) -> None:
        path = Path(os.fsdecode(dst))  # type: ignore[arg-type]
        if ".optrace" in path.parts or path.is_relative_to(state_dir()) or ".optrace-" in path.name:
            return  # a journal, a record, the id: not a file of the operator
        targets.append(str(path))
        if point == "after-rename" and len(targets) == k + 1:
            die()  # file k is in place, the directory not yet fsynced

    real_exchange, real_noreplace, real_replace = renameat.exchange, renameat.rename_noreplace, os.replace
    real_fsync, real_unlink, real_commit = os.fsync, os.unlink, transaction.commit

    def exchange(a: Path, b: Path) -> None:
        real_exchange(a, b)
        placed(b)

    def rename_noreplace(src: Path, dst: Path) -> None:
        real_noreplace(src, dst)
        placed(dst)

    def replace(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        real_replace(src, dst, *args, **kwargs)
        placed(dst)

    def fsync(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if point == "temp-fsync" and ".optrace-" in name:
            temp_fsyncs.append(fd)  # on one of the threads writing the temp files
            if len(temp_fsyncs) == k + 1:
                die()
        real_fsync(fd)

    def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
        named = Path(os.fsdecode(path))
        if point == "discard" and named.parent.name == ".optrace" and named.suffix == ".json":
            die()  # every file written, the journal not yet deleted
        real_unlink(path, *args, **kwargs)

    def before_write(path: Path, index: int) -> None:
        if point == "temps-written" and index == 0:
            die()  # every temp file written and durable, nothing renamed
        if point == "before-write" and index == k:
            for temp in path.parent.glob(f".{path.name}.optrace-*.tmp"):
                temp.write_bytes(b"half written")  # dies half-way through a temp file
            die()

    def commit(changes: Any, journal_dir: Path, *, name: str = "edits", _before_write: Any = None) -> Any:
        return real_commit(changes, journal_dir, name=name, _before_write=before_write)

    renameat.exchange, renameat.rename_noreplace = exchange, rename_noreplace
    os.replace, os.fsync, os.unlink = replace, fsync, unlink  # type: ignore[assignment]
    transaction.commit = commit


def crash_apply(op: Path, point: str, k: int = 0) -> None:
    """`apply --write` of `op`, killed at `point` (see `_arm`), as a kill -9 leaves it."""
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to name the file being fsynced")
    pid = os.fork()
    if pid == 0:
        try:
            _arm(point, k)
            CliRunner().invoke(app, ["apply", str(op), "--write"])
        finally:
            os._exit(0)  # the fault never fired
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 1, f"{point}-{k}: the fault did not fire"


def n_files(states: tuple[Tree, Tree]) -> int:
    """Files the apply writes (every layer of the fixture)."""
    return len(changed(*states))


# (crash point, k as a fraction of the files: 0, half, last) and the run after the move.
CRASHES: list[tuple[str, str, tuple[str, ...]]] = [
    ("temps-written", "first", ("strip", "--write")),  # every temp file written, nothing renamed
    ("temp-fsync", "half", ("apply", "--write")),  # half the temp files durable, the others half-made
    ("before-write", "first", ("apply", "--write")),  # 1 file in place, a temp file half-written
    ("before-write", "half", ("strip", "--write")),
    ("after-rename", "first", ("strip", "--write")),  # right after rename k: 1, N/2, every file
    ("after-rename", "half", ("apply", "--write")),
    ("after-rename", "last", ("strip", "--write")),
    ("discard", "first", ("apply", "--write")),  # all written, the journal still there
]


@pytest.mark.parametrize(("point", "at", "next_run"), CRASHES,
                         ids=[f"{p}-{a}-then-{n[0]}" for p, a, n in CRASHES])
def test_a_crash_then_a_move_is_recovered_with_no_temp_file_left(
    tmp_path: Path, state_home: Path, states: tuple[Tree, Tree],
    point: str, at: str, next_run: tuple[str, ...],
) -> None:
    """Killed mid-commit, then `mv repo elsewhere/moved`: the next `--write` run recovers
    the moved operator as docs/faults.md promises for any crash (exit 0, each file written
    before the crash named on stderr, `restored` or `removed`, at its new path), rolls it
    back — never forward — and then does its own work; no `.optrace-*.tmp` anywhere, no
    journal, no record left; `strip --write` gives the original byte for byte."""
    before, after = states
    n = n_files(states)
    k = {"first": 0, "half": n // 2, "last": n - 1}[at]
    repo, op = fresh_repo(tmp_path)
    crash_apply(op, point, k)
    crashed = tree(repo)
    written = [rel for rel in changed(before, after) if crashed.get(rel) == after.get(rel)]
    expected = {"temps-written": 0, "temp-fsync": 0, "before-write": k, "after-rename": k + 1, "discard": n}
    assert len(written) == expected[point], written
    assert journal_left(repo) != [] and records() != []
    if point != "discard":  # (by then every temp file is gone: only the journal is left)
        assert strays(repo), "the crash left no temp file: nothing to test"

    moved = move(repo, tmp_path / "elsewhere" / "moved")
    code, _, err = cli(*next_run, str(moved / OP))
    assert code == 0, err
    for rel in written:
        assert f"{moved / rel}: {'removed' if rel not in before else 'restored'}" in err, err
    assert err.count(": restored") + err.count(": removed") == len(written), err
    assert tree(moved) == (after if next_run[0] == "apply" else before)
    assert strays(moved) == [] and journal_left(moved) == [] and records() == []
    assert cli("strip", str(moved / OP), "--write")[0] == 0
    assert tree(moved) == before


def test_after_a_move_read_only_commands_name_the_unfinished_journal(
    tmp_path: Path, state_home: Path, states: tuple[Tree, Tree]
) -> None:
    """Before the id, plan / apply / strip / check on a moved crashed tree said nothing of
    the journal. Now: plan warns, check errs, the read-only apply / strip refuse (OT044),
    and none of them writes a byte, in the tree or in the state directory."""
    repo, op = fresh_repo(tmp_path)
    crash_apply(op, "after-rename", 2)
    moved = move(repo, tmp_path / "moved")
    mop = str(moved / OP)
    everything = snapshot(moved, state_dir())
    journal = journal_path(moved / ".optrace", operator_journal_name(moved / OP, moved))
    assert journal.exists()
    for args, expected in ((("plan", mop), 0), (("check", mop, "--no-compile"), 1), (("apply", mop), 2),
                           (("apply", mop, "--check"), 2), (("strip", mop, "--check"), 2)):
        code, out, err = cli(*args)
        assert code == expected and "OT044" in out + err and journal.name in out + err, (args, out, err)
        assert snapshot(moved, state_dir()) == everything, f"{args} wrote something"
    code, _, err = cli("apply", mop, "--write")
    assert code == 0 and err.count(": restored") + err.count(": removed") == 3, err
    assert tree(moved) == states[1] and strays(moved) == [] and journal_left(moved) == []


def test_a_repository_moved_without_a_crash_still_applies_and_strips(
    tmp_path: Path, state_home: Path, states: tuple[Tree, Tree]
) -> None:
    before, after = states
    repo, op = fresh_repo(tmp_path)
    assert cli("apply", str(op), "--write")[0] == 0
    repo_id = (repo / ".optrace" / "id").read_bytes()
    moved = move(repo, tmp_path / "a" / "moved")
    assert (moved / ".optrace" / "id").read_bytes() == repo_id  # the repository's identity moved with it
    code, _, err = cli("strip", str(moved / OP), "--write")
    assert code == 0 and "restored" not in err, err
    assert tree(moved) == before
    again = move(moved, tmp_path / "b" / "again")
    assert cli("apply", str(again / OP), "--write")[0] == 0
    assert tree(again) == after
    assert cli("strip", str(again / OP), "--write")[0] == 0
    assert tree(again) == before
    assert strays(again) == [] and journal_left(again) == [] and records() == []


# --- the same on the small world of tests/test_trust.py: how it moved ---------------------------


@pytest.fixture
def world(tmp_path: Path, state_home: Path) -> World:
    return make_world(tmp_path, state_home)


def relocate(w: World, how: str) -> Path:
    """Move the world's repository `how`; its new root."""
    repo = w.repo
    if how == "moved":
        return move(repo, w.tmp / "elsewhere" / "moved")
    if how == "moved-twice":
        return move(move(repo, w.tmp / "one"), w.tmp / "two" / "three")
    if how == "old-path-cloned-again":
        # A fresh clone where it was (its own files, no .optrace): not this repository.
        moved = move(repo, w.tmp / "moved")
        shutil.copytree(moved, repo, ignore=shutil.ignore_patterns(".optrace"))
        return moved
    if how == "old-path-a-symlink-to-it":
        moved = move(repo, w.tmp / "moved")
        repo.symlink_to(moved)
        return moved
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["moved", "moved-twice", "old-path-cloned-again", "old-path-a-symlink-to-it"])
def test_a_crashed_repository_recovers_however_it_moved(world: World, how: str) -> None:
    crash(world, at=1)
    moved = relocate(world, how)
    kernel = moved / "demo_op" / "op_kernel" / "demo_op.cpp"
    assert kernel.read_bytes() != KERNEL and strays(moved)
    code, _, err = cli("strip", str(moved / "demo_op"), "--write")
    assert code == 0 and f"{kernel}: restored" in err, err
    assert kernel.read_bytes() == KERNEL
    assert strays(moved) == [] and journal_left(moved) == [] and records() == []
    if how == "old-path-cloned-again":  # the clone at the old path: untouched
        assert (world.repo / "demo_op" / "op_kernel" / "demo_op.cpp").read_bytes() != KERNEL


# --- a journal (and the id) that came from another tree ----------------------------------------


def test_a_cloned_id_and_journal_from_another_repository_are_foreign(world: World) -> None:
    """Another tree given this repository's `.optrace/` (its id, the crashed journal, its
    backups): while the repository is where the journal was written, the other tree is a
    copy of it — refused (OT046) naming the original, nothing written in either. The
    original recovers; then the carried journal has no record at all (as on another
    machine, where no record ever was): refused still."""
    other = world.tmp / "other"
    shutil.copytree(world.repo, other)  # before the crash: the other tree's own, original files
    journal = crash(world, at=1)
    shutil.copytree(world.repo / ".optrace", other / ".optrace")
    other_op = other.resolve() / "demo_op"
    carried = journal_path(other / ".optrace", operator_journal_name(other_op, other))
    assert carried.name == journal.name
    mine, theirs = snapshot(world.repo), snapshot(other)
    for verb in ("apply", "strip"):
        code, _, err = cli(verb, str(other_op), "--write")
        assert code == 2 and "OT046" in err, err
        assert f"repository at {world.repo}, which is still there" in err, err
        assert snapshot(other) == theirs and snapshot(world.repo) == mine
    code, _, err = cli("plan", str(other_op))
    assert code == 0 and "OT046 warning" in err and "OT044" not in err, err
    assert cli("strip", str(world.op), "--write")[0] == 0
    assert (world.op / "op_kernel" / "demo_op.cpp").read_bytes() == KERNEL
    code, _, err = cli("apply", str(other_op), "--write")
    assert code == 2 and f"{carried}: OT046" in err and "no record of it" in err, err
    assert snapshot(other) == theirs


def test_copies_that_share_an_id_keep_their_own_records(world: World) -> None:
    """`cp -a` of a clean repository carries its id. A crash in the copy, then a write of
    the same operator in the original: the copy's record (its file named by the
    transaction) is neither overwritten nor swept, and the copy still recovers."""
    assert cli("apply", str(world.op), "--write")[0] == 0
    assert cli("strip", str(world.op), "--write")[0] == 0
    copy = world.tmp / "copy"
    shutil.copytree(world.repo, copy, symlinks=True)
    assert (copy / ".optrace" / "id").read_bytes() == (world.journal_dir / "id").read_bytes()
    copy_world = World(world.tmp, copy.resolve(), copy.resolve() / "demo_op", world.outside, world.home)
    crash(copy_world, at=1)
    assert len(records()) == 1
    assert cli("apply", str(world.op), "--write")[0] == 0  # the original, meanwhile
    assert cli("strip", str(world.op), "--write")[0] == 0
    assert len(records()) == 1  # the copy's, still there
    code, _, err = cli("strip", str(copy_world.op), "--write")
    assert code == 0 and ": restored" in err, err
    assert (copy_world.op / "op_kernel" / "demo_op.cpp").read_bytes() == KERNEL
    assert strays(copy) == [] and journal_left(copy) == [] and records() == []


# --- the id itself -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["symlink-out", "fifo", "garbage", "too-big"])
def test_an_id_optrace_did_not_make_is_refused_never_followed(world: World, kind: str) -> None:
    world.journal_dir.mkdir()
    id_file = world.journal_dir / "id"
    if kind == "symlink-out":
        id_file.symlink_to(world.outside / "created-through-the-id")
    elif kind == "fifo":
        os.mkfifo(id_file)
    elif kind == "garbage":
        id_file.write_text("../../etc/passwd\n")
    else:
        id_file.write_text("0" * 32 + "\n" * 100)
    before = world.everything(locks=False)
    for args in (("plan", str(world.op)), ("apply", str(world.op)), ("check", str(world.op), "--no-compile")):
        assert cli(*args)[0] in (0, 1), args  # read-only: no hang on a FIFO, nothing to say
    code, _, err = cli("apply", str(world.op), "--write")
    assert code == 2 and f"{id_file}: OT046 is not a repository id optrace made" in err, err
    assert f"rm {id_file}" in err
    after = world.everything(locks=False)
    # Nothing written but optrace's own lock file and .gitignore beside it; no source, no record.
    assert {k: v for k, v in after.items() if not k.endswith((".lock", ".gitignore"))} == before
    assert not (world.outside / "created-through-the-id").exists() and records() == []
    id_file.unlink()
    assert cli("apply", str(world.op), "--write")[0] == 0  # removed as it says: a new id is made
    assert stat.S_ISREG(os.lstat(id_file).st_mode) and len(id_file.read_text().strip()) == 32


# --- journals of version 3 (paths relative to the root), recorded but hostile ---------------------


def entry_v3(
    path: str, current: bytes, old: bytes, *, temp: str | None = None, **extra: object
) -> dict[str, object]:
    """A version 3 entry rolling `path` (relative to the root) back from `current` to `old`."""
    sha = hashlib.sha256
    name = Path(path)
    temp = temp if temp is not None else str(name.parent / f".{name.name}.optrace-c0ffee.tmp")
    return {"path": path, "temp": temp,
            "action": "modify", "old_sha256": sha(old).hexdigest(), "new_sha256": sha(current).hexdigest(),
            "mode": 0o644, "backup": f"old.bin@0+{len(old)}", "created_dirs": [], **extra}


@pytest.mark.parametrize("attack", ["dotdot", "absolute", "git", "temp-elsewhere", "dirs-outside"])
def test_a_recorded_version_3_journal_is_followed_only_inside_the_root(world: World, attack: str) -> None:
    victim = world.outside / "victim.txt"
    notes = world.repo / "notes.txt"
    entries = {
        "dotdot": [entry_v3("demo_op/../../outside/victim.txt", victim.read_bytes(), PWNED)],
        "absolute": [entry_v3(str(victim), victim.read_bytes(), PWNED)],
        "git": [entry_v3(".git/config", (world.repo / ".git" / "config").read_bytes(), PWNED)],
        # the user's file rolled back, its "temp file" (which recovery deletes) outside
        "temp-elsewhere": [entry_v3("notes.txt", notes.read_bytes(), notes.read_bytes(),
                                    temp="../outside/victim.txt")],
        "dirs-outside": [entry_v3("notes.txt", notes.read_bytes(), PWNED, created_dirs=["../outside/empty"])],
    }[attack]
    journal = plant(world, entries, PWNED)
    document = json.loads(journal.read_text())
    journal.write_text(json.dumps(document | {"version": 3}))
    record(world, journal)
    before = snapshot(world.repo, world.outside)
    code, _, err = cli("apply", str(world.op), "--write")
    why = {"dotdot": "not a normal absolute path", "absolute": "outside the repository root",
           "git": "inside .git/", "temp-elsewhere": "which is not its temp name",
           "dirs-outside": "not a normal absolute path"}[attack]
    assert code == 2 and f"{journal}: OT046" in err and why in err, err
    after = snapshot(world.repo, world.outside)
    assert {k: v for k, v in after.items() if not k.endswith(".lock")} == before


# --- the journal names every temp file before it is made ----------------------------------------


def test_every_temp_file_is_named_in_the_journal_before_it_is_made(
    tmp_path: Path, state_home: Path, states: tuple[Tree, Tree], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every name a commit creates in the source folders — temp files of new bytes, the
    temp name a deleted file is moved to, a temp file of a rollback's restore, a directory
    made for a created file — is, at that moment, in the journal on disk (relative to the
    root): whatever a crash leaves, recovery knows to remove. An apply, a strip (it
    deletes the file apply created), and an apply that fails half-way (rolled back)."""
    repo, op = fresh_repo(tmp_path)
    unnamed: list[str] = []
    made: list[str] = []

    def check(path: Any) -> None:
        target = Path(os.path.abspath(os.fsdecode(path)))
        if not target.is_relative_to(repo) or ".optrace" in target.relative_to(repo).parts:
            return
        rel = str(target.relative_to(repo))
        made.append(rel)
        journals = list((repo / ".optrace").glob("journal-*.json"))
        if len(journals) != 1:
            unnamed.append(f"{rel}: made with {len(journals)} journals in place")
            return
        files = json.loads(journals[0].read_text())["files"]
        named = {f["temp"] for f in files} | {d for f in files for d in f["created_dirs"]}
        if rel not in named:
            unnamed.append(f"{rel}: not named in the journal")

    real_open, real_rename, real_mkdir = os.open, os.rename, os.mkdir

    def open_(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if flags & os.O_CREAT and not os.path.lexists(path):
            check(path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        check(dst)
        real_rename(src, dst, *args, **kwargs)

    def mkdir(path: Any, mode: int = 0o777, *args: Any, **kwargs: Any) -> None:
        if not os.path.lexists(path):
            check(path)
        real_mkdir(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "mkdir", mkdir)
    assert cli("apply", str(op), "--write")[0] == 0
    assert cli("strip", str(op), "--write")[0] == 0
    real_commit = transaction.commit
    n = n_files(states)

    def failing(path: Path, index: int) -> None:
        if index == n // 2:
            raise OSError(28, "No space left on device")

    def commit(changes: Any, journal_dir: Path, *, name: str = "edits", _before_write: Any = None) -> Any:
        return real_commit(changes, journal_dir, name=name, _before_write=failing)

    monkeypatch.setattr(transaction, "commit", commit)
    code, _, err = cli("apply", str(op), "--write")
    assert code == 2 and "OT043" in err and "nothing changed" in err, err
    monkeypatch.undo()
    assert unnamed == []
    assert any(".optrace-" in m for m in made) and len(made) > n  # the watch saw the writes
    assert tree(repo) == states[0] and strays(repo) == [] and journal_left(repo) == []
    # Every path a version 3 journal holds is relative to the root.
    crash_apply(op, "before-write", 1)
    (journal,) = (repo / ".optrace").glob("journal-*.json")
    document = json.loads(journal.read_text())
    assert document["version"] == 3
    for entry in document["files"]:
        for path in (entry["path"], entry["temp"], *entry["created_dirs"]):
            assert not os.path.isabs(path) and ".." not in Path(path).parts, path
    assert {rel for rel in strays(repo)} <= {entry["temp"] for entry in document["files"]}


# --- journals of the version before the id ---------------------------------------------------------


def test_a_journal_recorded_by_the_previous_version_is_still_recovered_in_place(world: World) -> None:
    """optrace 0.1 named the journal by a hash of the operator's absolute path, wrote its
    paths absolute (version 2) and keyed its record by the repository's real path. Such a
    journal, left by a crash before an upgrade, is found by plan and check and rolled back
    by the next `--write`, its record removed, while the repository has not moved."""
    kernel = world.op / "op_kernel" / "demo_op.cpp"
    new = KERNEL + b"// bytes the crashed run wrote\n"
    kernel.write_bytes(new)  # the crash left optrace's new bytes
    stem = "journal-" + legacy_operator_journal_name(world.op)
    assert stem != "journal-" + operator_journal_name(world.op, world.repo)
    sha = hashlib.sha256
    entry = {"path": str(kernel), "action": "modify", "old_sha256": sha(KERNEL).hexdigest(),
             "new_sha256": sha(new).hexdigest(), "mode": 0o644, "backup": f"old.bin@0+{len(KERNEL)}",
             "created_dirs": []}
    journal = plant(world, [entry], KERNEL, token="0" * 32, name=legacy_operator_journal_name(world.op))
    assert journal.name == f"{stem}.json"
    legacy = legacy_record_path(world.repo, stem)
    legacy.parent.mkdir(parents=True, exist_ok=True)
    legacy.write_text(json.dumps({"format": "optrace-journal-record", "version": 1,
                                  "repository": str(world.repo), "journal": stem, "token": "0" * 32,
                                  "journal_sha256": sha(journal.read_bytes()).hexdigest(), "pid": 1,
                                  "started": "2025-01-01T00:00:00Z"}))
    assert "OT044 warning" in cli("plan", str(world.op))[2]
    assert cli("check", str(world.op), "--no-compile")[0] == 1
    code, _, err = cli("strip", str(world.op), "--write")
    assert code == 0 and f"{kernel}: restored" in err, err
    assert kernel.read_bytes() == KERNEL
    assert not legacy.exists() and journal_left(world.repo) == [] and records() == []
