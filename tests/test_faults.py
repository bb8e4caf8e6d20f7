"""Fault injection on a real multi-file apply (docs/faults.md is the table of these).

The subject is the UMDK-style fused MoE operator (eight files change on apply). A child
Python computes the apply and commits it with a fault at a chosen moment: `os._exit(1)`
before or after each file write, while the journal is prepared, while it is discarded,
and while an earlier crash is being recovered. The parent then runs optrace through the
CLI: a run with `--write` recovers the unfinished journal first, and the operator is byte
for byte the original or fully applied (never a mix); a run that writes nothing refuses
the half-written operator and leaves everything as it is; `strip` gives the original.
Failing writes (an injected disk error, a directory put where a file was) and a source
edited between planning and writing are driven in-process.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import optrace.engine.transaction as transaction
import optrace.pipeline.apply as apply_module
from optrace.cli.app import app
from optrace.engine.edits import FileChange
from optrace.engine.journal import StaleSource, journal_path
from optrace.engine.journal import operator_journal_name as _journal_name
from optrace.engine.transaction import _read_backup, commit
from optrace.pipeline.apply import OperatorChanges, apply_changes

pytestmark = pytest.mark.slow  # fault injection: a forked crash at every write of a real apply

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
REPO = "umdk_style"
OP = "src/cam/comm_operator/ascend_kernels/moe_fused_gmm"
runner = CliRunner()

Tree = dict[str, bytes | None]  # relative path -> bytes (None: a directory)


def tree(root: Path) -> Tree:
    """Every file and directory under `root` except optrace's journal directory; dotfiles
    included, so a stray temp file of a transaction shows up as a difference."""
    out: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if not (here == root and d == ".optrace")]
        for name in dirnames:
            out[(here / name).relative_to(root).as_posix()] = None
        for name in filenames:
            out[(here / name).relative_to(root).as_posix()] = (here / name).read_bytes()
    return out


def journals(repo: Path) -> list[str]:
    """What is left in the journal directory (an empty directory is fine)."""
    directory = repo / ".optrace"
    if not directory.is_dir():
        return []
    # A lock file may stay: it is flock'ed while a process writes, empty otherwise; so does
    # the repository's `id` (its records' key); the `.gitignore` hides them from git.
    return sorted(p.name for p in directory.iterdir()
                  if not p.name.endswith(".lock") and p.name not in (".gitignore", "id"))


def cli(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.stdout, res.stderr


def fresh_repo(tmp: Path, name: str = "repo") -> tuple[Path, Path]:
    repo = tmp / name
    shutil.copytree(FIXTURES / REPO, repo)
    return repo, repo / OP


@pytest.fixture(scope="module")
def states(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tree, Tree]:
    """The operator repository before and after a clean `apply --write`."""
    repo, op = fresh_repo(tmp_path_factory.mktemp("reference"))
    before = tree(repo)
    code, _, err = cli("apply", str(op), "--write")
    assert code == 0, err
    after = tree(repo)
    assert after != before
    return before, after


def changed_files(before: Tree, after: Tree) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def applied_count(state: Tree, before: Tree, after: Tree) -> int:
    return sum(state.get(k) == after.get(k) for k in changed_files(before, after))


def verdict(state: Tree, before: Tree, after: Tree) -> str:
    """'original', 'applied', or 'mixed: N of M files applied'."""
    if state == before:
        return "original"
    if state == after:
        return "applied"
    total = len(changed_files(before, after))
    return f"mixed: {applied_count(state, before, after)} of {total} files applied"


# --- crashes: a child process dies at a chosen moment of the transaction ------------------

# One child Python imports optrace once and forks per crash: each forked process computes
# apply_changes(op) for its repository and commits it with the fault, dying at the chosen
# moment; the runner reports how each one ended. Faults are injected at the OS calls
# (fsync, replace, unlink, rmtree, and renameat2 through engine/renameat.py, the thin
# ctypes wrapper commit swaps files with) and through commit's _before_write hook, never
# by patching optrace's internals.
RUNNER = textwrap.dedent(
    """
    import json, os, shutil, sys
    from pathlib import Path
    from optrace.engine.journal import operator_journal_name as _journal_name
    from optrace.pipeline.apply import apply_changes
    from optrace.engine.discovery import default_repo_root
    from optrace.engine.journal import journal_path, state_dir
    from optrace.engine.transaction import commit, recover
    from optrace.engine import renameat
    from optrace.cli.deferred import install
    install()  # a process of its own: the pipeline's LibCST half, as the CLI hands it

    def step(op, point, k):
        journal_dir = default_repo_root(op.resolve()).resolve() / ".optrace"
        name = _journal_name(op, journal_dir.parent)  # the journal the CLI looks for
        journal = journal_path(journal_dir, name)
        backups = journal.with_suffix(".backup")
        records = str(state_dir())  # where optrace records the journals it writes
        if point == "recover":  # the files of the earlier, unfinished transaction
            targets = {journal_dir.parent / f["path"] for f in json.loads(journal.read_text())["files"]}
        else:
            changes = apply_changes(op).changes
            targets = {Path(os.path.realpath(p)) for p in changes}
        done = []

        def die():
            os._exit(1)

        def finished(path):  # a target renamed into place or removed
            if Path(path) in targets:
                done.append(path)
                if point in ("after-rename", "recover") and len(done) == k + 1:
                    die()  # the directory not yet fsynced

        real_replace, real_fsync, real_unlink, real_rmtree = os.replace, os.fsync, os.unlink, shutil.rmtree

        def replace(src, dst, *args, **kwargs):
            if point == "journal-rename" and Path(dst) == journal:
                die()  # the journal's temp file is complete, not yet renamed into place
            real_replace(src, dst, *args, **kwargs)
            finished(dst)

        temp_fsyncs = []

        real_exchange, real_noreplace = renameat.exchange, renameat.rename_noreplace

        def exchange(a, b):  # a temp file swapped with its target: the target is written
            real_exchange(a, b)
            finished(b)

        def rename_noreplace(src, dst):  # a created file renamed into place
            real_noreplace(src, dst)
            finished(dst)

        def fsync(fd):
            if point == "record" and os.readlink(f"/proc/self/fd/{fd}").startswith(records):
                die()  # the journal's record is being made durable; nothing in the repository yet
            if point == "before-journal" and backups.exists() and not journal.exists():
                die()  # the backups are being made durable; no journal yet
            if point == "temp-fsync" and ".optrace-" in os.readlink(f"/proc/self/fd/{fd}"):
                temp_fsyncs.append(fd)  # a temp file, on one of the writing threads
                if len(temp_fsyncs) == k + 1:
                    die()  # some temp files durable, others half-made, nothing renamed
            real_fsync(fd)

        def unlink(path, *args, **kwargs):
            if point == "discard" and Path(path) == journal:
                die()  # every file written, the journal not yet deleted
            real_unlink(path, *args, **kwargs)
            if point == "recover":
                finished(path)  # a created file, removed again

        def rmtree(path, *args, **kwargs):
            if point == "discard-backups" and len(done) == len(targets) and not journal.exists():
                die()  # the journal is deleted (the transaction is over), its backups are not
            real_rmtree(path, *args, **kwargs)

        def before_write(path, index):
            if point == "before-write" and index == k:
                # Die half-way through writing the temp file: the worst moment.
                token = json.loads(journal.read_text())["token"]
                (path.parent / f".{path.name}.optrace-{token}.tmp").write_bytes(b"half written")
                die()

        os.replace, os.fsync, os.unlink, shutil.rmtree = replace, fsync, unlink, rmtree
        renameat.exchange, renameat.rename_noreplace = exchange, rename_noreplace
        if point == "recover":
            recover(journal_dir, name)  # recovers an earlier crash, dying after k + 1 files
            die()
        commit(changes, journal_dir, name=name, _before_write=before_write)

    results = []
    for job in json.loads(Path(sys.argv[1]).read_text()):
        codes = []
        for point, k in job["steps"]:
            pid = os.fork()
            if pid == 0:
                try:
                    step(Path(job["op"]), point, k)
                finally:
                    os._exit(0)  # committed: the fault never fired
            codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
        results.append(codes)
    print(json.dumps(results))
    """
)


def run_crashes(jobs: list[tuple[Path, list[tuple[str, int]]]], work: Path) -> None:
    """Run every job's crashes (two runners in parallel); each forked step must die."""
    halves = [jobs[0::2], jobs[1::2]]
    children = []
    for n, half in enumerate(halves):
        spec = work / f"jobs-{n}.json"
        spec.write_text(json.dumps([{"op": str(op), "steps": steps} for op, steps in half]))
        children.append(subprocess.Popen([sys.executable, "-c", RUNNER, str(spec)], stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True))
    for half, child in zip(halves, children, strict=True):
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err
        for (op, steps), codes in zip(half, json.loads(out), strict=True):
            assert codes == [1] * len(steps), f"{op}: {steps} ended {codes} (a fault did not fire)"


def n_written() -> int:
    """Files the apply writes (every layer of the fixture: kernel, host, aclnn, binding...)."""
    op = FIXTURES / REPO / OP
    return len(apply_changes(op).changes)


N_FILES = n_written()

# (crash point, k, files applied when the process died, what recovery must leave).
# Before the journal is durable nothing has been touched; once it is, recovery rolls back
# (never forward); after the journal is deleted the transaction is complete.
CRASHES: list[tuple[str, int, int, str]] = [
    ("record", 0, 0, "original"),
    ("before-journal", 0, 0, "original"),
    ("journal-rename", 0, 0, "original"),
    *[("before-write", k, k, "original") for k in range(N_FILES)],
    *[("after-rename", k, k + 1, "original") for k in range(N_FILES)],
    *[("temp-fsync", k, 0, "original") for k in (0, N_FILES // 2, N_FILES - 1)],
    ("discard", 0, N_FILES, "original"),
    ("discard-backups", 0, N_FILES, "applied"),
]
RECOVERY_CRASHES = [0, 3, N_FILES - 1]  # recovery dies after restoring k + 1 files
EDITED_AFTER = N_FILES // 2
CHECKED_AFTER = N_FILES // 2 + 1

# The run after the crash; each one recovers the journal before doing anything else.
NEXT_RUNS: list[tuple[str, ...]] = [
    ("apply", "--check"),
    ("strip", "--write"),
    ("apply", "--write"),
    ("strip", "--check"),
    ("apply",),
]


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Every crash scenario, run up front: name -> (repo, op) as the crash left it."""
    base = tmp_path_factory.mktemp("crashes")
    scenarios: dict[str, list[tuple[str, int]]] = {f"{p}-{k}": [(p, k)] for p, k, _, _ in CRASHES}
    scenarios |= {f"recover-{k}": [("discard", 0), ("recover", k)] for k in RECOVERY_CRASHES}
    scenarios |= {"edited": [("before-write", EDITED_AFTER)], "checked": [("before-write", CHECKED_AFTER)]}
    repos = {name: fresh_repo(base, name) for name in scenarios}
    run_crashes([(repos[name][1], steps) for name, steps in scenarios.items()], base)
    return repos


def test_the_subject_is_a_multi_file_apply() -> None:
    assert N_FILES >= 5
    assert len(CRASHES) == 2 * N_FILES + 8


@pytest.mark.parametrize(("index", "crash_point"), list(enumerate(CRASHES)),
                         ids=[f"{p}-{k}" for p, k, _, _ in CRASHES])
def test_a_crash_is_recovered_to_original_or_applied_and_strip_restores(
    crashed: dict[str, tuple[Path, Path]], states: tuple[Tree, Tree], index: int,
    crash_point: tuple[str, int, int, str], exchanges: bool,
) -> None:
    before, after = states
    point, k, written, recovered = crash_point
    repo, op = crashed[f"{point}-{k}"]
    state = tree(repo)
    temps = [p for p in state if ".optrace-" in p and p.endswith(".tmp")]
    assert applied_count(state, before, after) == written
    # Every temp file is written before the first rename: a crash before rename k leaves
    # the temp files of files k on, one after rename k those of the files after it. With
    # renameat2, each file written before the crash that existed before it has its old
    # bytes at its temp name too (swapped out, kept until the operator is written).
    expected_temps = {"before-write": N_FILES - k, "after-rename": N_FILES - k - 1}.get(point, 0)
    if exchanges and point in ("before-write", "after-rename"):
        order = sorted(map(Path, changed_files(before, after)))  # commit's order (real paths)
        done = order[: k + (point == "after-rename")]
        expected_temps += sum(p.as_posix() in before for p in done)
    if point == "temp-fsync":  # the writing threads got as far as they got
        assert 0 < len(temps) <= N_FILES
    else:
        assert len(temps) == expected_temps
    journal_left = point not in ("record", "before-journal", "journal-rename", "discard-backups")

    next_run = NEXT_RUNS[index % len(NEXT_RUNS)]
    crashed_state = tree(repo)
    crashed_journals = journals(repo)
    code, out, err = cli(*next_run, str(op))
    assert "Traceback" not in err
    state = tree(repo)
    if "--write" not in next_run:
        # A run that writes nothing recovers nothing, sweeps nothing: every byte stays.
        assert state == crashed_state and journals(repo) == crashed_journals, err
        assert "restored" not in err and "removed" not in err
        if journal_left:  # the operator is half-written: refused, with what to do
            assert code == 2 and "OT044" in err and "--write" in err, err
        elif next_run == ("apply", "--check"):
            assert code == (1 if recovered == "original" else 0), err
        elif next_run == ("strip", "--check"):
            assert code == (0 if recovered == "original" else 1), err
        else:
            assert code == 0 and (out != "") == (recovered == "original")
        code, out, err = cli("apply", str(op), "--write")
        assert code == 0, err
        state = tree(repo)
        next_run = ("apply", "--write")
    # Recovery names each file it put back or removed (files never written: not mentioned).
    assert err.count(": restored") + err.count(": removed") == (written if journal_left else 0), err
    if next_run == ("apply", "--write"):
        assert code == 0 and verdict(state, before, after) == "applied", err
    else:
        assert code == 0 and verdict(state, before, after) == "original", err
    assert journals(repo) == [], f"journal left behind after {point}-{k}"

    code, _, err = cli("strip", str(op), "--write")
    assert code == 0, err
    assert verdict(tree(repo), before, after) == "original"


@pytest.mark.parametrize("k", RECOVERY_CRASHES)
def test_a_crash_while_recovering_is_recovered_by_the_next_run(
    crashed: dict[str, tuple[Path, Path]], states: tuple[Tree, Tree], k: int
) -> None:
    """Every file written, the journal still there (a crash at discard); then the recovery
    of that crash dies after putting k + 1 files back."""
    before, after = states
    repo, op = crashed[f"recover-{k}"]
    assert applied_count(tree(repo), before, after) == N_FILES - (k + 1)
    assert journals(repo) != []  # the journal outlives a recovery that did not finish
    assert cli("apply", str(op), "--check")[0] == 2  # writes nothing: refuses the half-written tree
    code, _, err = cli("strip", str(op), "--write")
    assert code == 0, err
    assert verdict(tree(repo), before, after) == "original"
    assert journals(repo) == []


def test_a_file_edited_after_a_crash_is_left_alone_and_reported(
    crashed: dict[str, tuple[Path, Path]], states: tuple[Tree, Tree]
) -> None:
    before, after = states
    repo, op = crashed["edited"]
    journal = json.loads(journal_path(repo / ".optrace", _journal_name(op, repo)).read_text())
    first = repo.resolve() / journal["files"][0]["path"]  # relative to the root
    rel = first.relative_to(repo).as_posix()
    assert first.read_bytes() == after[rel]  # written before the crash
    edited = first.read_bytes() + b"// the user's own line\n"
    first.write_bytes(edited)
    report = transaction.Transaction(repo / ".optrace", _journal_name(op, repo)).recover()  # as --write does
    assert f"{first}: modified-since (neither the old nor the new bytes; left as is)" in report.messages()
    state = tree(repo)
    # Every other file is back to its original bytes; the edited one is the user's.
    assert {p: b for p, b in state.items() if p != rel} == {p: b for p, b in before.items() if p != rel}
    assert state[rel] == edited
    # The journal moved aside with the old bytes, so the operator is not blocked ...
    assert journals(repo) == ["unresolved"]
    (kept,) = (repo / ".optrace" / "unresolved").iterdir()
    entries = json.loads((kept / "journal.json").read_text())["files"]
    backups = {_read_backup(kept / "backup", e["backup"]) for e in entries if e["backup"]}
    assert before[rel] in backups
    # ... and strip still removes exactly what optrace added, keeping the user's line.
    assert cli("strip", str(op), "--write")[0] == 0
    assert (repo / rel).read_bytes() == (before[rel] or b"") + b"// the user's own line\n"


def test_check_and_plan_on_a_crashed_tree_do_not_pass_silently(
    crashed: dict[str, tuple[Path, Path]], states: tuple[Tree, Tree]
) -> None:
    """Only apply / strip recover. A half-applied operator must not look clean to check."""
    before, after = states
    repo, op = crashed["checked"]
    assert verdict(tree(repo), before, after).startswith("mixed")
    code, out, err = cli("check", str(op), "--no-compile")
    assert code == 1, out + err
    assert cli("plan", str(op))[0] == 0  # plan reads only; it may show the half-applied tree
    assert journals(repo) != []  # neither recovered: the next apply / strip will
    assert cli("strip", str(op), "--write")[0] == 0
    assert verdict(tree(repo), before, after) == "original"


# --- failing writes (in-process: the CLI's own transaction) -------------------------------


def inject(monkeypatch: pytest.MonkeyPatch, hook: Callable[[Path, int], None]) -> None:
    """Run `hook(path, index)` before each file write of the CLI's next commit."""
    real_commit = transaction.commit

    def commit_with_hook(changes: Mapping[Path, FileChange], journal_dir: Path, *, name: str = "edits",
                         _before_write: object = None) -> list[Path]:
        return real_commit(changes, journal_dir, name=name, _before_write=hook)

    monkeypatch.setattr(transaction, "commit", commit_with_hook)


@pytest.mark.parametrize("k", [0, 1, N_FILES // 2, N_FILES - 1])
@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO, errno.EROFS])
def test_a_disk_error_at_any_write_leaves_the_original(
    tmp_path: Path, states: tuple[Tree, Tree], monkeypatch: pytest.MonkeyPatch, k: int, error: int
) -> None:
    before, after = states
    repo, op = fresh_repo(tmp_path)
    failed: list[Path] = []

    def fail(path: Path, index: int) -> None:
        if index == k:
            failed.append(path)
            raise OSError(error, os.strerror(error))

    inject(monkeypatch, fail)
    code, out, err = cli("apply", str(op), "--write")
    assert code == 2, out + err
    assert f"{failed[0]}: OT043 cannot write ({os.strerror(error)}); nothing changed" in err
    assert f"({k} file(s) written before were restored)" in err
    assert verdict(tree(repo), before, after) == "original"
    assert journals(repo) == []
    monkeypatch.undo()
    assert cli("apply", str(op), "--write")[0] == 0  # nothing blocks the next run
    assert verdict(tree(repo), before, after) == "applied"


@pytest.mark.parametrize("k", [0, N_FILES // 2, N_FILES - 1])
def test_a_directory_put_where_a_file_was_fails_the_write_and_restores_the_rest(
    tmp_path: Path, states: tuple[Tree, Tree], monkeypatch: pytest.MonkeyPatch, k: int
) -> None:
    before, _after = states
    repo, op = fresh_repo(tmp_path)
    victim: list[Path] = []

    def replace_by_directory(path: Path, index: int) -> None:
        if index == k:
            victim.append(path)
            path.unlink()
            path.mkdir()

    inject(monkeypatch, replace_by_directory)
    code, _, err = cli("apply", str(op), "--write")
    assert code == 2 and f"{victim[0]}: OT043 cannot write" in err
    rel = victim[0].relative_to(repo).as_posix()
    state = tree(repo)
    assert state.pop(rel) is None  # the directory is not optrace's: it stays
    assert state == {p: b for p, b in before.items() if p != rel}  # everything else as before
    assert journals(repo) == []
    # Put the file back: strip has nothing to do, apply works again.
    monkeypatch.undo()
    victim[0].rmdir()
    victim[0].write_bytes(before[rel] or b"")
    assert cli("strip", str(op), "--check")[0] == 0
    assert cli("apply", str(op), "--write")[0] == 0


def test_an_unwritable_journal_directory_writes_nothing(tmp_path: Path, states: tuple[Tree, Tree]) -> None:
    before, after = states
    repo, op = fresh_repo(tmp_path)
    (repo / ".optrace").write_bytes(b"a file where the journal directory goes")
    code, _, err = cli("apply", str(op), "--write")
    assert code == 2 and "OT043 cannot " in err and "nothing written" in err
    state = tree(repo)
    assert state.pop(".optrace") == b"a file where the journal directory goes"
    assert verdict(state, before, after) == "original"


# --- a source changed between planning and writing ---------------------------------------


@pytest.mark.parametrize("how", ["edited", "deleted", "replaced-by-directory"])
def test_a_source_changed_after_planning_writes_nothing(
    tmp_path: Path, states: tuple[Tree, Tree], how: str
) -> None:
    """Each file of the change set in turn goes stale after planning (a file apply creates
    goes stale by appearing): the commit refuses, and nothing else is written."""
    before, _after = states
    repo, op = fresh_repo(tmp_path)
    name = _journal_name(op, repo)
    journal_dir = repo / ".optrace"
    result = apply_changes(op)  # planned on these bytes ...
    for path in sorted(result.changes):
        created = not path.exists()
        original = b"" if created else path.read_bytes()
        if how == "edited":  # ... then someone edits it (or creates it first)
            path.write_bytes(original + b"// edited after planning\n")
        elif how == "deleted":
            if created:
                continue
            path.unlink()
        else:
            path.unlink(missing_ok=True)
            path.mkdir()
        expected = tree(repo)
        with pytest.raises(StaleSource) as caught:
            commit(result.changes, journal_dir, name=name)
        assert caught.value.path == path and caught.value.code == "OT042"
        why = {"edited": "exists already" if created else "changed since it was planned",
               "deleted": "was deleted since it was planned", "replaced-by-directory": "cannot be read"}[how]
        assert why in str(caught.value) and "nothing written" in str(caught.value)
        assert tree(repo) == expected, f"something was written after {path} went stale"
        assert not journal_path(journal_dir, name).exists()
        if path.is_dir():
            path.rmdir()
        if created:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(original)
    assert tree(repo) == before


def test_a_source_changed_after_planning_through_the_cli(
    tmp_path: Path, states: tuple[Tree, Tree], monkeypatch: pytest.MonkeyPatch
) -> None:
    before, _after = states
    repo, op = fresh_repo(tmp_path)
    real = apply_module.apply_changes
    edited: list[Path] = []

    def plan_then_someone_edits(*args: Any, **kwargs: Any) -> OperatorChanges:
        result = real(*args, **kwargs)
        victim = sorted(result.changes)[-1]
        victim.write_bytes(victim.read_bytes() + b"// a concurrent edit\n")
        edited.append(victim)
        return result

    monkeypatch.setattr(apply_module, "apply_changes", plan_then_someone_edits)
    code, _, err = cli("apply", str(op), "--write")
    assert code == 2
    assert f"{edited[0]}: OT042 changed since it was planned; nothing written, plan again" in err
    rel = edited[0].relative_to(repo).as_posix()
    state = tree(repo)
    assert state.pop(rel) == (before[rel] or b"") + b"// a concurrent edit\n"
    assert state == {p: b for p, b in before.items() if p != rel}


def test_docs_faults_cites_only_tests_that_exist() -> None:
    """docs/faults.md is the table of these tests: every test it names must exist."""
    import re

    doc = (Path(__file__).resolve().parent.parent / "docs" / "faults.md").read_text()
    cited = set(re.findall(r"`(test_[a-z0-9_]+)", doc))
    # the table cites tests across the suite (outputs, untrusted sources, hostile traces)
    here = "".join(p.read_text() for p in sorted(Path(__file__).parent.rglob("test_*.py")))
    defined = set(re.findall(r"^def (test_[a-z0-9_]+)", here, re.M))
    assert cited and cited <= defined, sorted(cited - defined)
