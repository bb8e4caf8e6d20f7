"""All-or-nothing writes across the files of one operator, with a journal for crashes.

`commit` checks that every file still holds the bytes the edits were planned on, records a
journal (sha256 of old and new bytes, a backup of the old bytes) and fsyncs it, then
replaces each file atomically (temp file in the same directory, `os.replace`, mode kept).
A failed write restores the files already written; a process that dies between files
leaves the journal behind, and `recover` rolls the operator back to its old bytes.
Rolling back (never forward) is the rule because the old bytes are the state the user
last saw and reviewed, and every file's old bytes are in the backups; see docs/edits.md.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

# Diagnostic codes (README: OT0xx is input and parsing), next to those of engine/edits.py.
CODE_STALE = "OT042"
CODE_WRITE = "OT043"
CODE_UNFINISHED = "OT044"
CODE_BUSY = "OT045"

JOURNAL_FORMAT = "optrace-journal"
JOURNAL_VERSION = 2  # 2: old bytes in one archive (`backup` = old.bin@OFFSET+LENGTH); 1 still read
UNRESOLVED_DIR = "unresolved"

# A file's change: (old, new); None for a file that does not exist on that side.
Change = tuple[bytes | None, bytes | None]
BeforeWrite = Callable[[Path, int], None]


class TransactionError(Exception):
    """A transaction that could not run, located as `path: CODE message`."""

    def __init__(self, code: str, message: str, path: Path) -> None:
        self.code = code
        self.message = message
        self.path = path
        super().__init__(f"{path}: {code} {message}")


class StaleSource(TransactionError):
    """A file no longer holds the bytes the edits were planned on; nothing was written."""


class WriteFailed(TransactionError):
    """A write failed; the files already written were restored (see `restored_all`)."""

    def __init__(self, message: str, path: Path, *, restored_all: bool) -> None:
        self.restored_all = restored_all
        super().__init__(CODE_WRITE, message, path)


class UnfinishedTransaction(TransactionError):
    """A journal from an earlier run is still there: `recover` must run first."""


class TransactionBusy(TransactionError):
    """Another live process holds this operator's lock (it is writing or recovering)."""


class Outcome(StrEnum):
    RESTORED = "restored"  # written back to its old bytes
    REMOVED = "removed"  # a created file, deleted again
    UNTOUCHED = "untouched"  # already in its old state (never written)
    MODIFIED_SINCE = "modified-since"  # neither old nor new: someone edited it, left alone
    FAILED = "failed"  # could not be restored (I/O error); the journal is kept for a retry


@dataclass(frozen=True)
class RecoveredFile:
    path: Path
    outcome: Outcome
    detail: str = ""


@dataclass
class RecoveryReport:
    """What `recover` found and did, journal by journal."""

    journals: list[Path] = field(default_factory=list)
    files: list[RecoveredFile] = field(default_factory=list)
    # Journals kept for the user (modified files) or for a retry (failed restores).
    kept: list[Path] = field(default_factory=list)

    def paths(self, outcome: Outcome) -> list[Path]:
        return [f.path for f in self.files if f.outcome is outcome]

    @property
    def clean(self) -> bool:
        """True when every file is back in its old state (or there was nothing to do)."""
        return all(f.outcome in (Outcome.RESTORED, Outcome.REMOVED, Outcome.UNTOUCHED) for f in self.files)

    def messages(self) -> list[str]:
        """One `path: outcome (detail)` line per file that was not simply untouched."""
        return [
            f"{f.path}: {f.outcome.value}" + (f" ({f.detail})" if f.detail else "")
            for f in self.files
            if f.outcome is not Outcome.UNTOUCHED
        ]


_BACKUP_RE = re.compile(r"old\.bin@\d+\+\d+|\d+")  # version 2 | version 1 (a file per entry)


@dataclass(frozen=True)
class _Entry:
    """One file of a transaction, as the journal records it."""

    path: Path
    old_sha256: str | None
    new_sha256: str | None
    mode: int | None  # the old file's permission bits; None for a created file
    backup: str | None  # where the old bytes are in the backup directory (see _read_backup)
    created_dirs: tuple[Path, ...] = ()  # parents made for a created file, outermost first

    @property
    def action(self) -> str:
        return "create" if self.old_sha256 is None else "delete" if self.new_sha256 is None else "modify"

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "action": self.action,
            "old_sha256": self.old_sha256,
            "new_sha256": self.new_sha256,
            "mode": self.mode,
            "backup": self.backup,
            "created_dirs": [str(p) for p in self.created_dirs],
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> _Entry:
        backup = data["backup"]
        if backup is not None and not _BACKUP_RE.fullmatch(str(backup)):
            raise ValueError(f"backup {backup!r} is neither old.bin@OFFSET+LENGTH nor a file name")
        return _Entry(
            path=Path(data["path"]),
            old_sha256=data["old_sha256"],
            new_sha256=data["new_sha256"],
            mode=data["mode"],
            backup=data["backup"],
            created_dirs=tuple(Path(p) for p in data.get("created_dirs", ())),
        )


@dataclass(frozen=True)
class _Journal:
    """The files of one operator's journal in the journal directory."""

    json_path: Path  # journal-<name>.json: present only while a transaction is unfinished
    backup_dir: Path  # journal-<name>.backup/old.bin: the old bytes of every file, one after another
    lock_path: Path  # journal-<name>.lock: flock'ed by the process writing the operator
    token: str = ""  # names this transaction's temp files, so recovery can sweep them

    @staticmethod
    def at(journal_dir: Path, stem: str, token: str = "") -> _Journal:
        return _Journal(
            journal_dir / f"{stem}.json", journal_dir / f"{stem}.backup", journal_dir / f"{stem}.lock", token
        )

    @property
    def tmp_path(self) -> Path:
        return self.json_path.with_name(self.json_path.name + ".tmp")


def _sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _stem(name: str) -> str:
    # Operator names become file names: a safe alphabet without dots, so the stem of any
    # journal file is the part of its name before the first dot.
    return "journal-" + (re.sub(r"[^A-Za-z0-9_-]", "_", name) or "_")


def journal_path(journal_dir: Path, name: str) -> Path:
    """Where the journal of operator `name` lives while its transaction is unfinished."""
    return _Journal.at(journal_dir, _stem(name)).json_path


def operator_journal_name(op_dir: Path) -> str:
    """The name apply / strip journal an operator under: its folder name plus a hash of
    its resolved path (two operators of the same name in one repository stay apart)."""
    resolved = op_dir.resolve()
    # Bytes of the path (os.fsencode): a non-UTF-8 folder name is a name like any other.
    digest = hashlib.sha256(os.fsencode(resolved)).hexdigest()[:8]
    return f"{os.fsencode(resolved.name).decode('ascii', 'replace')}-{digest}"


def pending_journal(repo_root: Path, op_dir: Path) -> Path | None:
    """The journal of an apply / strip of `op_dir` that did not finish, if there is one:
    until the next apply / strip rolls it back, the operator may be half-written."""
    path = journal_path(repo_root / ".optrace", operator_journal_name(op_dir))
    return path if path.is_file() else None


def _lock(journal: _Journal) -> int:
    """Take the operator's lock (one process at a time); close the fd returned to release it.

    flock, so the kernel releases it when the process dies: a crash never leaves it held.
    """
    fd = os.open(journal.lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise TransactionBusy(
            CODE_BUSY, "another optrace process is writing this operator", journal.lock_path
        ) from None
    return fd


def _fsync_dir(directory: Path) -> None:
    # Makes a rename or unlink durable; some filesystems cannot fsync a directory.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _ignore_in_git(journal_dir: Path) -> None:
    """A `.gitignore` of `*` in the journal directory (as pytest does for its cache): the
    lock files stay there between runs — removing a lock file another process may be
    waiting on is a race — and must not show in the user's `git status`, least of all
    after a strip that left every tracked file as it was."""
    ignore = journal_dir / ".gitignore"
    if not ignore.exists():
        try:
            ignore.write_text("# created by optrace: journals and locks of apply / strip\n*\n")
        except OSError:
            pass  # cosmetic: the journal works without it


def _temp_name(path: Path, token: str) -> Path:
    return path.parent / f".{path.name}.optrace-{token}.tmp"


def _write_temp(path: Path, data: bytes, mode: int | None, token: str) -> None:
    """`data` into the transaction's temp file beside `path`, made durable."""
    tmp = _temp_name(path, token)
    try:
        tmp.unlink()  # a leftover of this same transaction (a crash while writing it)
    except FileNotFoundError:
        pass
    # 0o666 lets the umask decide a new file's mode, as a plain open() would.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes, mode: int | None, token: str, *, sync_dir: bool = True) -> None:
    """Replace `path` by `data` so a reader sees old or new bytes, never a mix. With
    `sync_dir` False the caller makes the rename durable (one fsync per directory)."""
    tmp = _temp_name(path, token)
    try:
        _write_temp(path, data, mode, token)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    if sync_dir:
        _fsync_dir(path.parent)


def _write_temps(jobs: list[tuple[Path, bytes, int | None]], token: str) -> tuple[Path, BaseException] | None:
    """Every temp file of a commit, written and made durable several at once: an fsync
    waits on the disk, and threads overlap those waits (the filesystem's journal can
    take several files in one flush). The first failure, with its file, once all ended."""
    if len(jobs) < 2:
        for path, data, mode in jobs:
            try:
                _write_temp(path, data, mode, token)
            except BaseException as exc:
                return path, exc
        return None
    from concurrent.futures import Future, ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=min(8, len(jobs)), thread_name_prefix="optrace-fsync")
    futures: list[tuple[Path, Future[None]]] = []
    try:
        for path, data, mode in jobs:
            futures.append((path, pool.submit(_write_temp, path, data, mode, token)))
        pool.shutdown(wait=True)
    except BaseException as exc:  # Ctrl-C while waiting, or no thread to start
        # The writes already running must end before their temp files can be removed:
        # wait for them, even through another Ctrl-C, then report the first one.
        while True:
            try:
                pool.shutdown(wait=True, cancel_futures=True)
                break
            except BaseException:  # keep waiting: the rollback needs the writes ended
                continue
        return jobs[0][0], exc
    for path, future in futures:
        failure = future.exception()
        if failure is not None:
            return path, failure
    return None


def _discard_temps(entries: list[_Entry], token: str, keep: set[int]) -> None:
    """Temp files and new directories of the entries not in `keep` (not renamed into
    place), after a failure: the rollback of the others restores their state."""
    for index, entry in enumerate(entries):
        if index in keep:
            continue
        try:
            _temp_name(entry.path, token).unlink(missing_ok=True)
        except OSError:
            pass
    for index, entry in enumerate(entries):
        if index in keep:
            continue
        for directory in reversed(entry.created_dirs):
            try:
                directory.rmdir()
            except OSError:  # not empty (another file of the commit), or gone
                pass


class _NotAFile(OSError):
    """Something other than a regular file sits where a file of the transaction was."""


def _read_state(path: Path) -> bytes | None:
    """The file's bytes, None when absent; _NotAFile for a directory, a socket..."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise _NotAFile(f"{path} is {'a directory' if stat.S_ISDIR(st.st_mode) else 'not a regular file'}")
    return path.read_bytes()


def _missing_parents(path: Path) -> tuple[Path, ...]:
    missing: list[Path] = []
    parent = path.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    return tuple(reversed(missing))


Planned = list[tuple[Path, bytes | None, bytes | None]]


def _resolve(changes: Mapping[Path, Change]) -> Planned:
    """Real paths (a symlink is written through, never replaced), no-ops dropped, sorted."""
    planned: dict[Path, tuple[bytes | None, bytes | None]] = {}
    for given, (old, new) in changes.items():
        if old == new:
            continue
        path = Path(os.path.realpath(given))
        if path in planned:
            raise ValueError(f"{given}: the same file as another entry of the change set ({path})")
        planned[path] = (old, new)
    return [(path, old, new) for path, (old, new) in sorted(planned.items())]


def _verify(planned: Planned) -> None:
    """Raise StaleSource unless every file holds exactly the bytes the change was made from."""
    for path, old, _new in planned:
        try:
            current = _read_state(path)
        except OSError as exc:
            raise StaleSource(CODE_STALE, f"cannot be read ({exc}); nothing written", path) from exc
        if current == old:
            continue
        if old is None:
            why = "exists already, but was to be created"
        elif current is None:
            why = "was deleted since it was planned"
        else:
            why = "changed since it was planned"
        raise StaleSource(CODE_STALE, f"{why}; nothing written, plan again", path)


def _dump_journal(journal: _Journal, name: str, entries: list[_Entry]) -> None:
    document = {
        "format": JOURNAL_FORMAT,
        "version": JOURNAL_VERSION,
        "name": name,
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "token": journal.token,
        "files": [entry.to_json() for entry in entries],
    }
    with open(journal.tmp_path, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=2)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(journal.tmp_path, journal.json_path)
    _fsync_dir(journal.json_path.parent)


def _discard_journal(journal: _Journal) -> None:
    # The journal goes first: once it is gone the transaction is over, and a backup
    # directory without a journal is an orphan that `recover` sweeps.
    journal.json_path.unlink(missing_ok=True)
    _fsync_dir(journal.json_path.parent)
    shutil.rmtree(journal.backup_dir, ignore_errors=True)


def _roll_back(entries: list[_Entry], journal: _Journal, *, touched: set[int] | None) -> list[RecoveredFile]:
    """Put each file back to its old bytes, judging its state by sha256.

    `touched` lists the entries this process may have written (None: unknown, after a
    crash). A file in neither state was changed by someone else: it is left alone.
    """
    return [
        _restore(entry, journal) for index, entry in enumerate(entries) if touched is None or index in touched
    ]


def _restore(entry: _Entry, journal: _Journal) -> RecoveredFile:
    try:
        # A temp file of this transaction, left by a crash in the middle of writing it.
        _temp_name(entry.path, journal.token).unlink(missing_ok=True)
    except OSError:
        pass  # its directory is gone or is no directory: there is no temp file either
    try:
        state = _sha256(_read_state(entry.path))
    except _NotAFile as exc:
        return RecoveredFile(entry.path, Outcome.MODIFIED_SINCE, f"{exc}; left as is")
    except OSError as exc:
        return RecoveredFile(entry.path, Outcome.FAILED, f"cannot read: {exc}")
    try:
        if state == entry.old_sha256:
            outcome = Outcome.UNTOUCHED
        elif state != entry.new_sha256:
            return RecoveredFile(
                entry.path, Outcome.MODIFIED_SINCE, "neither the old nor the new bytes; left as is"
            )
        elif entry.old_sha256 is None:
            entry.path.unlink()
            _fsync_dir(entry.path.parent)
            outcome = Outcome.REMOVED
        else:
            assert entry.backup is not None
            old = _read_backup(journal.backup_dir, entry.backup)
            if _sha256(old) != entry.old_sha256:
                raise OSError(f"backup {journal.backup_dir / entry.backup} is damaged")
            _write_atomic(entry.path, old, entry.mode, journal.token)
            return RecoveredFile(entry.path, Outcome.RESTORED)
    except OSError as exc:
        return RecoveredFile(entry.path, Outcome.FAILED, str(exc))
    # Directories made for a created file go too, even when the crash came before the file.
    for directory in reversed(entry.created_dirs):
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            break  # not empty: something else lives there now, keep it
    return RecoveredFile(entry.path, outcome)


_ARCHIVE = "old.bin"


def _read_backup(backup_dir: Path, backup: str) -> bytes:
    """The old bytes a journal entry points at: `old.bin@OFFSET+LENGTH` (a slice of the
    archive of this transaction's old files), or a file name (journals of optrace 0.1)."""
    name, at, span = backup.partition("@")
    if not at:
        return (backup_dir / backup).read_bytes()
    offset, _, length = span.partition("+")
    with open(backup_dir / name, "rb") as handle:
        handle.seek(int(offset))
        data = handle.read(int(length))
    if len(data) != int(length):
        raise OSError(f"backup {backup_dir / name} is truncated")
    return data


def _prepare(journal: _Journal, name: str, planned: Planned) -> list[_Entry]:
    """Back up every old file and write the journal, durably, before any target changes.

    The old bytes go into one archive, fsynced once: an fsync per file was a third of the
    fsyncs of a commit, and fsyncs are most of its time (docs/edits.md)."""
    shutil.rmtree(journal.backup_dir, ignore_errors=True)  # an orphan: its journal is gone
    journal.backup_dir.mkdir()
    entries: list[_Entry] = []
    with open(journal.backup_dir / _ARCHIVE, "wb") as archive:
        for path, old, new in planned:
            backup = None
            mode = None
            if old is not None:
                backup = f"{_ARCHIVE}@{archive.tell()}+{len(old)}"
                mode = stat.S_IMODE(os.stat(path).st_mode)
                archive.write(old)
            created = _missing_parents(path) if old is None else ()
            entries.append(_Entry(path, _sha256(old), _sha256(new), mode, backup, created))
        archive.flush()
        os.fsync(archive.fileno())
    _fsync_dir(journal.backup_dir)
    _dump_journal(journal, name, entries)
    return entries


def commit(
    changes: Mapping[Path, Change],
    journal_dir: Path,
    *,
    name: str = "edits",
    _before_write: BeforeWrite | None = None,
) -> list[Path]:
    """Write `changes` ({path: (old, new)}, None = absent) all-or-nothing; the paths written.

    Paths are resolved (a symlink is written through) and written in sorted order.
    Raises StaleSource (nothing written) when a file no longer holds `old`;
    UnfinishedTransaction when operator `name` has a journal left by a crash (call
    `recover` before planning); TransactionBusy when another process holds the operator;
    WriteFailed when a write fails, after restoring the files already written.
    `_before_write(path, k)` runs before the k-th file write: a hook for fault injection.
    """
    planned = _resolve(changes)
    if not planned:
        return []
    journal = _Journal.at(journal_dir, _stem(name), secrets.token_hex(6))
    try:
        journal_dir.mkdir(parents=True, exist_ok=True)
        _ignore_in_git(journal_dir)
        lock = _lock(journal)
    except OSError as exc:
        raise WriteFailed(
            f"cannot use the journal directory ({exc.strerror or exc}); nothing written",
            journal_dir,
            restored_all=True,
        ) from exc
    try:
        if journal.json_path.exists():
            raise UnfinishedTransaction(
                CODE_UNFINISHED,
                "an earlier optrace run did not finish writing: recover it first",
                journal.json_path,
            )
        # Checked under the lock: no other optrace process can write between check and write.
        _verify(planned)
        _write_all(journal, name, planned, _before_write)
    finally:
        os.close(lock)
    return [path for path, _old, _new in planned]


def _write_all(journal: _Journal, name: str, planned: Planned, before_write: BeforeWrite | None) -> None:
    try:
        entries = _prepare(journal, name, planned)
    except OSError as exc:
        # No target has been touched yet: drop the half-made journal and report.
        shutil.rmtree(journal.backup_dir, ignore_errors=True)
        try:
            journal.tmp_path.unlink(missing_ok=True)
        except OSError:
            pass  # not ours to clean (a directory?): the error below says what failed
        raise WriteFailed(
            f"cannot write the journal ({exc.strerror or exc}); nothing written",
            journal.json_path,
            restored_all=True,
        ) from exc

    # First every new file's bytes, durable, in its temp file (several at once), then
    # the renames and unlinks in order: a crash in between leaves only temp files,
    # which recovery removes.
    failed: tuple[Path, BaseException] | None = None
    for (path, _old, new), entry in zip(planned, entries, strict=True):
        try:
            for directory in entry.created_dirs if new is not None else ():
                directory.mkdir(exist_ok=True)
        except BaseException as exc:
            failed = path, exc
            break
    if failed is None:
        failed = _write_temps(
            [(path, new, entry.mode) for (path, _old, new), entry in zip(planned, entries, strict=True)
             if new is not None],
            journal.token,
        )
    if failed is not None:
        _discard_temps(entries, journal.token, keep=set())
        _fail(failed[1], failed[0], entries, journal, set())
        raise failed[1]
    touched: set[int] = set()
    for index, (path, _old, new) in enumerate(planned):
        # Counted before the write: an exception may come after os.replace.
        touched.add(index)
        try:
            if before_write is not None:
                before_write(path, index)
            if new is None:
                path.unlink()
            else:
                os.replace(_temp_name(path, journal.token), path)
        except BaseException as exc:
            _discard_temps(entries, journal.token, keep=touched)
            _fail(exc, path, entries, journal, touched)
            raise  # _fail raises for OSError; anything else propagates unchanged
    # The renames and unlinks become durable before the journal goes: one fsync per
    # directory, not per file (until then a crash leaves the journal, and `recover`
    # judges each file by its bytes, old or new alike). Fsyncs were most of the time
    # of a many-operator apply.
    made = {d.parent for entry in entries for d in entry.created_dirs}  # new directories' entries
    for directory in sorted({path.parent for path, _old, _new in planned} | made):
        _fsync_dir(directory)
    _discard_journal(journal)


def _fail(
    exc: BaseException, path: Path, entries: list[_Entry], journal: _Journal, touched: set[int]
) -> None:
    """Roll back what this run wrote, then say what happened (WriteFailed for an OSError)."""
    results = _roll_back(entries, journal, touched=touched)
    # The failing file itself may be in any state (a directory put in its place): only
    # the files this run wrote must be back for the rollback to be complete.
    problems = [
        r
        for r in results
        if r.outcome is Outcome.FAILED or (r.outcome is Outcome.MODIFIED_SINCE and r.path != path)
    ]
    if not problems:
        _discard_journal(journal)
    if not isinstance(exc, OSError):
        return
    reason = exc.strerror or str(exc)
    if problems:
        detail = "; ".join(f"{r.path}: {r.outcome.value} ({r.detail})" for r in problems)
        raise WriteFailed(
            f"cannot write ({reason}); rollback incomplete: {detail}; journal kept at {journal.json_path}",
            path,
            restored_all=False,
        ) from exc
    restored = sum(r.outcome in (Outcome.RESTORED, Outcome.REMOVED) for r in results)
    raise WriteFailed(
        f"cannot write ({reason}); nothing changed ({restored} file(s) written before were restored)",
        path,
        restored_all=True,
    ) from exc


def _load(json_path: Path) -> tuple[str, list[_Entry], str]:
    try:
        document = json.loads(json_path.read_text(encoding="utf-8"))
        if document.get("format") != JOURNAL_FORMAT or document.get("version") not in (1, JOURNAL_VERSION):
            raise ValueError(f"not an optrace journal of version 1 or {JOURNAL_VERSION}")
        return str(document["name"]), [_Entry.from_json(f) for f in document["files"]], str(document["token"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise TransactionError(
            CODE_UNFINISHED,
            f"unreadable journal ({exc}): inspect the files it names, then delete it",
            json_path,
        ) from exc


def _keep_for_user(journal: _Journal) -> Path:
    """Move a journal and its backups under `unresolved/`, so the old bytes stay available
    to the user while the operator is no longer blocked by a pending journal."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    stem = journal.json_path.name.split(".", 1)[0]
    target = journal.json_path.parent / UNRESOLVED_DIR / f"{stem}-{stamp}-{journal.token}"
    target.mkdir(parents=True)
    os.replace(journal.json_path, target / "journal.json")
    if journal.backup_dir.exists():
        os.replace(journal.backup_dir, target / "backup")
    _fsync_dir(journal.json_path.parent)
    return target


def recover(journal_dir: Path, name: str | None = None) -> RecoveryReport:
    """Roll back every unfinished transaction in `journal_dir` (or only operator `name`'s).

    Each file of a journal is identified by sha256 as old (left), new (restored from the
    backup, or removed if it was created) or neither (edited since: left alone and
    reported; the journal then moves to `unresolved/` with its backups). A restore that
    fails keeps the journal in place, so a later run retries. Orphans (backups without a
    journal, half-written journal temp files) are swept. An operator another live process
    holds is skipped: its transaction is running, not unfinished.
    """
    report = RecoveryReport()
    if not journal_dir.is_dir():
        return report
    if name is None:
        stems = sorted({p.name.split(".", 1)[0] for p in journal_dir.glob("journal-*")})
    else:
        stems = [_stem(name)]
    for stem in stems:
        journal = _Journal.at(journal_dir, stem)
        try:
            lock = _lock(journal)
        except TransactionBusy:
            continue
        try:
            _recover_one(journal, report)
        finally:
            os.close(lock)
    return report


def _recover_one(journal: _Journal, report: RecoveryReport) -> None:
    # Orphans: a crash before the journal was in place (targets untouched) or after it
    # was removed (transaction complete) leaves these; either way they are garbage.
    journal.tmp_path.unlink(missing_ok=True)
    if not journal.json_path.exists():
        shutil.rmtree(journal.backup_dir, ignore_errors=True)
        return
    report.journals.append(journal.json_path)
    _name, entries, token = _load(journal.json_path)
    journal = _Journal(journal.json_path, journal.backup_dir, journal.lock_path, token)
    results = _roll_back(entries, journal, touched=None)
    report.files.extend(results)
    outcomes = {r.outcome for r in results}
    if Outcome.FAILED in outcomes:
        report.kept.append(journal.json_path)
    elif Outcome.MODIFIED_SINCE in outcomes:
        report.kept.append(_keep_for_user(journal))
    else:
        _discard_journal(journal)


@dataclass(frozen=True)
class Transaction:
    """The journal directory and operator name, for callers that prefer an object."""

    journal_dir: Path
    name: str = "edits"

    def commit(
        self, changes: Mapping[Path, Change], *, _before_write: BeforeWrite | None = None
    ) -> list[Path]:
        """See `commit`."""
        return commit(changes, self.journal_dir, name=self.name, _before_write=_before_write)

    def recover(self) -> RecoveryReport:
        """See `recover`; only this operator's journal."""
        return recover(self.journal_dir, self.name)
