"""Issue 14 §2: nothing is written at a stale offset.

Another program edits a file of the operator while optrace computes the apply: after the
plan parsed it (or the layer codemods read it) and before the edits are turned into new
bytes. Injected at that exact moment for a kernel file, a host file and the shared
`pybind.cpp`, then at random moments by a writer racing a real `apply --write` process.
The writer *prepends* a line, so edits applied at the old offsets would land inside
other code: after every trial the file is the writer's bytes with none or all of
optrace's edits — never optrace's edits at stale offsets, never the writer's save lost —
and `strip` gives back exactly the writer's bytes. Last, the commit's own window: a save
injected between its check and each file's write (renameat2 exchange, engine/renameat.py).
"""

from __future__ import annotations

import ctypes
import errno
import os
import random
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import optrace.pipeline.apply as apply_module
from optrace.cli.app import app
from optrace.engine import renameat
from optrace.engine.edits import FileChange
from optrace.engine.journal import StaleSource, WriteFailed
from optrace.engine.transaction import commit

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OP = "src/cam/comm_operator/ascend_kernels/moe_fused_gmm"
LINE = b"// a line another editor put first\n"
LONG = os.environ.get("OPTRACE_LONG_FUZZ", "") not in ("", "0")
VICTIMS = [
    f"{OP}/op_kernel/moe_fused_gmm.cpp",  # parsed by the plan
    f"{OP}/op_host/moe_fused_gmm.cpp",  # read by the layer codemods
    "src/cam/comm_operator/pybind/pybind.cpp",  # shared by the operators of the repository
]

Tree = dict[str, bytes]


def line_for(path: str) -> bytes:
    """The writer's first line, in the file's own language."""
    return LINE.replace(b"//", b"#") if path.endswith((".py", ".sh", ".txt", ".cmake")) else LINE


def tree(root: Path) -> Tree:
    out: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".optrace"]
        for name in filenames:
            out[str((Path(dirpath) / name).relative_to(root))] = (Path(dirpath) / name).read_bytes()
    return out


def fresh(tmp: Path) -> tuple[Path, Path]:
    repo = tmp / "repo"
    shutil.copytree(FIXTURES / "umdk_style", repo)
    return repo, repo / OP


def cli(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.stdout, res.stderr


@pytest.mark.slow  # fault injection at two moments of a real apply
@pytest.mark.parametrize("moment", ["after-the-codemods", "before-the-re-read"])
@pytest.mark.parametrize("victim", VICTIMS, ids=["kernel", "host", "shared-pybind"])
def test_a_file_edited_while_apply_computes_is_refused_not_mangled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state_home: Path, victim: str, moment: str
) -> None:
    """The edit lands after the plan parsed the kernel and the layer codemods read their
    files (their edits computed), or just before `new_contents` reads every file again."""
    repo, op = fresh(tmp_path)
    before = tree(repo)
    hooked = "layer_edits" if moment == "after-the-codemods" else "new_contents"
    real = getattr(apply_module, hooked)
    path = repo / victim
    edits: list[int] = []

    def someone_edits_then(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs) if hooked == "layer_edits" else None
        # Once, in the call that computes this operator's edits (choosing the mode computes
        # them where none is recorded; not another operator's).
        if not edits and (hooked == "new_contents" or sys._getframe(1).f_code.co_name in (
                "_layer_side", "_b_refused_a_applies")):
            path.write_bytes(LINE + path.read_bytes())
            edits.append(1)
        return out if hooked == "layer_edits" else real(*args, **kwargs)

    monkeypatch.setattr(apply_module, hooked, someone_edits_then)
    code, out, err = cli("apply", str(op), "--write")
    assert edits, "the edit was not injected (the hook point moved?)"
    assert code == 2, out + err
    assert f"{path.resolve()}: OT042 changed while optrace was planning it; nothing written" in err
    assert tree(repo) == {**before, victim: LINE + before[victim]}  # only the other editor's change
    monkeypatch.undo()
    assert cli("apply", str(op), "--write")[0] == 0  # planned again on the new bytes: applies
    assert cli("strip", str(op), "--write")[0] == 0
    assert tree(repo) == {**before, victim: LINE + before[victim]}


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tree, Tree]:
    """The fixture before and after a clean `apply --write`."""
    repo, op = fresh(tmp_path_factory.mktemp("reference"))
    before = tree(repo)
    assert cli("apply", str(op), "--write")[0] == 0
    return before, tree(repo)


@pytest.fixture(scope="module")
def on_writers_bytes(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """victim -> the tree `apply --write` makes when the writer's line came first (the
    plan then read the writer's bytes: the point map's lines shift with it)."""
    cache: dict[str, Tree] = {}

    def get(victim: str) -> Tree:
        if victim not in cache:
            repo, op = fresh(tmp_path_factory.mktemp("on-writer"))
            path = repo / victim
            path.write_bytes(line_for(victim) + path.read_bytes())
            assert cli("apply", str(op), "--write")[0] == 0
            cache[victim] = tree(repo)
        return cache[victim]

    return get


TRIALS = 50 if LONG else 5
# What stopped an apply the writer raced (exit 2), by its message.
REFUSALS = {
    "changed while optrace was planning it": "refused while computing (OT042)",
    "changed since it was planned": "refused by the commit's check (OT042)",
    "by another program while optrace was writing it": "refused at the exchange (OT042): the save put back",
}


@pytest.mark.slow  # trials of a writer process racing real applies
@pytest.mark.parametrize("moment", ["anytime", "commit"])
def test_a_writer_racing_apply_never_gets_edits_at_stale_offsets(
    tmp_path: Path, states: tuple[Tree, Tree], on_writers_bytes: Any, state_home: Path, moment: str
) -> None:
    """`anytime`: the writer saves 0.2-1.4 s after the start (the apply takes ~0.8 s).
    `commit`: it waits for the journal to appear (the commit's check has passed) and
    saves 0-25 ms later — while the files are being swapped into place."""
    before, after = states
    changed = sorted(k for k in before if after.get(k) != before[k])
    rng = random.Random("optrace-stale-offsets" + ("" if moment == "anytime" else f"-{moment}"))
    outcomes: dict[str, int] = {}
    for trial in range(TRIALS):
        repo, op = fresh(tmp_path / f"t{trial}")
        victim = rng.choice(changed)
        delay = rng.uniform(0.2, 1.4) if moment == "anytime" else rng.uniform(0.0, 0.025)
        line = line_for(victim)
        proc = subprocess.Popen([sys.executable, "-m", "optrace", "apply", str(op), "--write"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen: list[bytes] = []  # what the writer read: the original, or optrace's bytes

        def writer(path: Path = repo / victim, delay: float = delay, line: bytes = line,
                   seen: list[bytes] = seen, journals: Path = repo / ".optrace",
                   proc: subprocess.Popen[str] = proc) -> None:
            while moment == "commit" and proc.poll() is None and not any(journals.glob("journal-*.json")):
                time.sleep(0.0005)
            time.sleep(delay)
            seen.append(path.read_bytes())
            tmp = path.with_name(path.name + ".editor~")  # as editors save: a new file, renamed
            tmp.write_bytes(line + seen[0])
            os.replace(tmp, path)

        thread = threading.Thread(target=writer)
        thread.start()
        _out, err = proc.communicate(timeout=300)
        thread.join()
        assert "Traceback" not in err, err
        assert proc.returncode == 0 or (proc.returncode == 2 and "OT042" in err), err
        # Once both are done, the tree is one of these; anything else is a lost save (the
        # victim original, or optrace's edits over the original) or a mix.
        state = tree(repo)
        theirs = {**before, victim: line + before[victim]}
        expected: dict[str, Tree] = {}
        if proc.returncode == 2:
            expected = {next((v for k, v in REFUSALS.items() if k in err), "refused (OT042)"): theirs}
        elif seen[0] == after[victim]:
            expected = {"optrace first, then the writer's save on its bytes": {
                **after, victim: line + after[victim]}}
        elif seen[0] == before[victim]:
            expected = {
                "the writer saved first: optrace's edits on its bytes": on_writers_bytes(victim),
                # Read before optrace's commit, saved after it: the writer's bytes, none
                # of optrace's edits in that file (the lost update is optrace's, not theirs).
                "the writer read before the commit and saved after it: its bytes": {
                    **after, victim: line + before[victim]},
            }
        outcome = next((name for name, want in expected.items() if state == want), None)
        if outcome is None:
            got = state.get(victim)
            what = ("the original: the writer's save was lost" if got == before[victim] else
                    "optrace's edits without the writer's save" if got == after[victim] else
                    "the writer's, but another file is neither original nor applied"
                    if got is not None and got.startswith(line) else "mangled")
            pytest.fail(f"trial {trial} (exit {proc.returncode}, writer at {delay:.3f} s): {victim}: {what}")
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        code, _, err = cli("strip", str(op), "--write")
        assert code == 0, err
        assert tree(repo) == theirs, f"trial {trial}: strip did not give back the writer's bytes"
        shutil.rmtree(repo)
    print(f"stale-offset trials, writer {moment}: {outcomes}")
    assert sum(outcomes.values()) == TRIALS


# --- a save between the commit's check and its write (engine/transaction.py) ------------------
#
# `commit` checks every file against the bytes the plan read, then swaps each temp file
# into place with renameat2(RENAME_EXCHANGE) and compares what came out. Another program's
# save injected right there — through `_before_write`, which runs after the check and
# before each file's exchange — must survive whole, and nothing of optrace's may remain.

WRITER = b"// the other editor's save\n"


def small_operator(root: Path) -> tuple[Path, dict[Path, FileChange]]:
    """Four files modified (one through a symlink, one with odd permission bits), one
    created, one deleted: the kinds of change a commit makes. Written in this order:
    c.py, k/a.cpp, k/b.h, k/gen/map.h (created), k/gone.h (deleted), zz.txt."""
    op = root / "op"
    (op / "k").mkdir(parents=True)
    files = {op / "k" / "a.cpp": b"void a() {}\n", op / "k" / "b.h": b"#pragma once\n",
             op / "c.py": b"x = 1\n", op / "k" / "gone.h": b"// a header apply made\n",
             op / "zz.txt": b"last\n"}
    for path, data in files.items():
        path.write_bytes(data)
    (op / "k" / "b.h").chmod(0o750)
    (op / "link.h").symlink_to("k/b.h")
    changes: dict[Path, FileChange] = {
        op / "k" / "a.cpp": (files[op / "k" / "a.cpp"], b"void a() { TRACE(); }\n"),
        op / "link.h": (files[op / "k" / "b.h"], b"#pragma once\n#include \"trace.h\"\n"),
        op / "c.py": (files[op / "c.py"], b"x = 1  # optrace\n"),
        op / "k" / "gone.h": (files[op / "k" / "gone.h"], None),
        op / "k" / "gen" / "map.h": (None, b"// optrace point map\n"),
        op / "zz.txt": (files[op / "zz.txt"], b"last  # optrace\n"),
    }
    return op, changes


def snapshot(root: Path) -> dict[str, tuple[str, bytes, int]]:
    """Every entry under `root` but the journal directory (dotfiles too: stray temp files
    show): kind, bytes (or link target), permission bits."""
    out: dict[str, tuple[str, bytes, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".optrace"]
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = os.lstat(path)
            rel = path.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path).encode(), 0)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", b"", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
    return out


def save_as_editors_do(path: Path, data: bytes) -> None:
    """A new file beside the target, renamed over it (vim, VS Code, `sed -i`)."""
    tmp = path.with_name(path.name + ".editor~")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def save_in_place(path: Path, data: bytes) -> None:
    """The same inode, truncated and written (`>` in a shell, nano, most scripts)."""
    with open(path, "r+b" if path.exists() else "wb") as handle:
        handle.truncate(0)
        handle.write(data)


@pytest.fixture
def needs_exchange(exchanges: bool) -> None:
    if not exchanges:
        pytest.skip("renameat2(RENAME_EXCHANGE) unavailable here (not Linux, a kernel before 3.15, or a "
                    f"filesystem without it: {renameat.how()}); commit falls back to a plain rename")


def no_journal_left(journal_dir: Path) -> bool:
    return not [p for p in journal_dir.iterdir()
                if not p.name.endswith(".lock") and p.name not in (".gitignore", "id")]


@pytest.mark.usefixtures("needs_exchange")
@pytest.mark.parametrize("save", [save_as_editors_do, save_in_place], ids=["renamed", "in-place"])
@pytest.mark.parametrize("k", range(6))
def test_a_save_between_the_check_and_the_write_survives_and_nothing_of_optraces_stays(
    tmp_path: Path, k: int, save: Any
) -> None:
    _op, changes = small_operator(tmp_path)
    journal_dir = tmp_path / ".optrace"
    before = snapshot(tmp_path)
    saved: list[Path] = []

    def another_program_saves(path: Path, index: int) -> None:
        if index == k:  # after the check of every file, before this file's write
            path.parent.mkdir(parents=True, exist_ok=True)
            save(path, WRITER + (path.read_bytes() if path.exists() else b""))
            saved.append(path)

    with pytest.raises(StaleSource) as caught:
        commit(changes, journal_dir, name="op", _before_write=another_program_saves)
    assert caught.value.path == saved[0]
    assert str(caught.value).startswith(f"{saved[0]}: OT042 ")
    assert "by another program while optrace was writing it; nothing written" in caught.value.message
    after = snapshot(tmp_path)
    rel = saved[0].relative_to(tmp_path).as_posix()
    # The other program's file, whole, with nothing of optrace's; every other file (and
    # mode, and link) as before; no temp file, no journal.
    assert after.pop(rel)[1] == WRITER + (before[rel][1] if rel in before else b"")
    for made in ("op/k/gen",):  # the parent the other program made for a created file
        if rel.startswith(made + "/"):
            assert after.pop(made)[0] == "dir"
    assert after == {name: entry for name, entry in before.items() if name != rel}
    assert no_journal_left(journal_dir)


@pytest.mark.usefixtures("needs_exchange")
@pytest.mark.parametrize("victim", [0, 2, 4], ids=["modified", "through-a-link", "deleted"])
def test_a_writer_holding_the_file_open_across_the_exchange_keeps_its_write(
    tmp_path: Path, victim: int
) -> None:
    """A writer opened a file before optrace swapped it and writes after: its bytes land
    in the old file, which sits at the temp name until the operator is written. The
    re-check before it is discarded finds them and puts that file back in place."""
    _op, changes = small_operator(tmp_path)
    journal_dir = tmp_path / ".optrace"
    before = snapshot(tmp_path)
    held: list[tuple[Path, int]] = []

    def writer(path: Path, index: int) -> None:
        if index == victim:  # opened before its exchange (a deleted file: before its move)
            held.append((path, os.open(path, os.O_RDWR)))
        if index == 5:  # the last write: the victim is swapped by now; write into what was opened
            _path, fd = held[0]
            os.ftruncate(fd, 0)
            os.pwrite(fd, WRITER, 0)
            os.close(fd)

    with pytest.raises(StaleSource, match="written to \\(in place\\) by another program") as caught:
        commit(changes, journal_dir, name="op", _before_write=writer)
    path = held[0][0]
    assert caught.value.path == path
    after = snapshot(tmp_path)
    rel = path.relative_to(tmp_path).as_posix()
    assert after.pop(rel)[1] == WRITER
    assert after == {name: entry for name, entry in before.items() if name != rel}
    assert no_journal_left(journal_dir)


@pytest.mark.usefixtures("needs_exchange")
def test_a_failed_write_puts_a_writers_in_place_bytes_back_rather_than_rolling_them_back(
    tmp_path: Path,
) -> None:
    """A disk error at a later file rolls the operator back; an old file kept aside that
    a writer wrote into meanwhile is the writer's, and goes back in place first — the
    rollback does not replace it with the backup's bytes."""
    _op, changes = small_operator(tmp_path)
    before = snapshot(tmp_path)
    held: list[tuple[Path, int]] = []

    def writer_then_disk_full(path: Path, index: int) -> None:
        if index == 0:
            held.append((path, os.open(path, os.O_RDWR)))
        if index == 3:
            _path, fd = held[0]
            os.ftruncate(fd, 0)
            os.pwrite(fd, WRITER, 0)
            os.close(fd)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(WriteFailed) as caught:
        commit(changes, tmp_path / ".optrace", name="op", _before_write=writer_then_disk_full)
    assert caught.value.restored_all and "OT043 cannot write (No space left on device)" in str(caught.value)
    after = snapshot(tmp_path)
    rel = held[0][0].relative_to(tmp_path).as_posix()
    assert after.pop(rel)[1] == WRITER
    assert after == {name: entry for name, entry in before.items() if name != rel}
    assert no_journal_left(tmp_path / ".optrace")


@pytest.mark.usefixtures("needs_exchange")
def test_a_second_save_while_the_first_is_put_back_is_the_one_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer saves twice: once before the exchange (found and put back), and again
    in the microseconds before it is put back (replacing optrace's file at the target).
    The later save is the writer's last word: it stays; the earlier one is dropped, as
    the editor's own rename would have dropped it."""
    op, changes = small_operator(tmp_path)
    target = op / "k" / "a.cpp"
    before = snapshot(tmp_path)
    real_exchange = renameat.exchange
    calls: list[Path] = []

    def exchange(a: Path, b: Path) -> None:
        calls.append(b)
        if b == target and len(calls) == 2:  # the exchange that puts the first save back
            save_as_editors_do(target, b"// second save\n")
        real_exchange(a, b)

    monkeypatch.setattr(renameat, "exchange", exchange)

    def first_save(path: Path, index: int) -> None:
        if path == target:
            save_as_editors_do(path, b"// first save\n")

    with pytest.raises(StaleSource):
        commit(changes, tmp_path / ".optrace", name="op", _before_write=first_save)
    after = snapshot(tmp_path)
    assert after.pop("op/k/a.cpp")[1] == b"// second save\n"
    assert after == {name: entry for name, entry in before.items() if name != "op/k/a.cpp"}


def test_without_renameat2_commit_falls_back_to_a_plain_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No renameat2 (another OS, an old kernel, a filesystem that refuses the flag): the
    commit writes as before, modes and links kept — and a save between the check and the
    rename is lost, the window docs/edits.md documents for that case."""
    monkeypatch.setattr(renameat, "_loaded", lambda: (None, "made unavailable by the test"))
    op, changes = small_operator(tmp_path)
    assert len(commit(changes, tmp_path / ".optrace", name="op")) == 6
    assert (op / "k" / "a.cpp").read_bytes() == b"void a() { TRACE(); }\n"
    assert (op / "link.h").is_symlink() and stat.S_IMODE(os.stat(op / "k" / "b.h").st_mode) == 0o750
    assert not (op / "k" / "gone.h").exists() and (op / "k" / "gen" / "map.h").exists()
    assert not [p for p in op.rglob(".*.tmp")]

    op, changes = small_operator(tmp_path / "again")
    commit(changes, tmp_path / "again" / ".optrace", name="op",
           _before_write=lambda path, index: save_as_editors_do(path, WRITER) if index == 0 else None)
    assert (op / "k" / "a.cpp").read_bytes() == b"void a() { TRACE(); }\n"  # the save is lost


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux's")
def test_the_system_call_is_reached_without_libcs_wrapper(tmp_path: Path) -> None:
    """glibc before 2.28 has no renameat2 wrapper: the raw system call by its number."""
    call, how = renameat._load(wrapper_ok=False)
    if call is None:
        pytest.skip(how)
    assert how == "syscall"
    (tmp_path / "a").write_bytes(b"A")
    (tmp_path / "b").write_bytes(b"B")
    if call(os.fsencode(tmp_path / "a"), os.fsencode(tmp_path / "b"), renameat.RENAME_EXCHANGE) != 0:
        pytest.skip(f"the filesystem refuses RENAME_EXCHANGE ({os.strerror(ctypes.get_errno())})")
    assert (tmp_path / "a").read_bytes() == b"B" and (tmp_path / "b").read_bytes() == b"A"
    assert call(os.fsencode(tmp_path / "a"), os.fsencode(tmp_path / "b"), renameat.RENAME_NOREPLACE) == -1
    assert ctypes.get_errno() == errno.EEXIST
