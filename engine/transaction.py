"""All-or-nothing writes across the files of one operator, with a journal for crashes.

`commit` checks that every file still holds the bytes the edits were planned on, records a
journal (sha256 of old and new bytes, a backup of the old bytes) and fsyncs it, then
replaces each file atomically (temp file in the same directory, mode kept), swapping it
in with `renameat2(RENAME_EXCHANGE)` where the system has it (engine/renameat.py): what
came out of the target must still be the planned-on bytes, else another program saved
it after the check — its file goes back and the operator is refused (OT042), so a save
is never lost to the rename (docs/edits.md, "A writer racing the commit").
A failed write restores the files already written; a process that dies between files
leaves the journal behind, and `recover` rolls the operator back to its old bytes.
Rolling back (never forward) is the rule because the old bytes are the state the user
last saw and reviewed, and every file's old bytes are in the backups; see docs/edits.md.

A repository's content is data, never authority: a journal is acted on only when the
user's state directory (`state_dir()`, outside the repository) records its id and the
sha256 of its bytes for this repository — keyed by the repository's random id
(`.optrace/id`), so the record is found again after the repository moves, and bound to
the root it was written at, so a copy of the tree is not the repository while the
original is still there; any other journal — one that came with a clone, a copy, or an
older optrace — is refused (OT046) and left untouched. Paths in a journal are relative
to the root, and every temp file a commit makes beside a source is named in the journal
before it exists: recovery, wherever the repository is now, removes them all. Even a
recorded journal is followed only inside the repository root, outside `.git/` and
`.optrace/`, through no symlink, with backups whose hashes match, and modes masked to
the permission bits. `commit` writes nothing outside the root (OT047).
"""

from __future__ import annotations

import errno
import fcntl
import glob
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from optrace.engine import renameat
from optrace.engine.diagnostics import shown_path
from optrace.engine.edits import FileChange
from optrace.engine.journal import (
    CODE_BUSY,
    CODE_OUTSIDE,
    CODE_STALE,
    CODE_UNFINISHED,
    RECORD_FORMAT,
    REPOSITORY_ID,
    SHA_RE,
    TOKEN_RE,
    ForeignJournal,
    Journal,
    OutsideRoot,
    StaleSource,
    TransactionBusy,
    TransactionError,
    UnfinishedTransaction,
    WriteFailed,
    foreign_dir,
    foreign_id,
    journal_bytes,
    journal_refusal,
    journal_status,
    journal_stem,
    operator_journal_names,
    own_record,
    read_records,
    read_repository_id,
    real_root,
    record_path,
    refusal_reason,
    sha256_of,
    state_dir,
)

JOURNAL_FORMAT = "optrace-journal"
# 3: paths relative to the repository root (a moved repository recovers), each entry
# naming its temp file; 2: old bytes in one archive (`backup` = old.bin@OFFSET+LENGTH),
# absolute paths; 1: a backup file per entry. All three are read.
JOURNAL_VERSION = 3
UNRESOLVED_DIR = "unresolved"

# A file's change: (old, new); None for a file that does not exist on that side.
BeforeWrite = Callable[[Path, int], None]



class Outcome(StrEnum):
    RESTORED = "restored"  # written back to its old bytes
    REMOVED = "removed"  # a created file, deleted again
    UNTOUCHED = "untouched"  # already in its old state (never written)
    MODIFIED_SINCE = "modified-since"  # neither old nor new: someone edited it, left alone
    FAILED = "failed"  # could not be restored (I/O error); the journal is kept for a retry


@dataclass(frozen=True)
class RecoveredFile:
    """What recovery did to one file of a journal."""

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
    # Journals refused and left untouched: not recorded in the user's state directory
    # for this repository, or naming paths recovery never follows.
    foreign: list[ForeignJournal] = field(default_factory=list)

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
    # The one temp file a transaction ever makes for this file (new bytes waiting, or old
    # bytes kept aside), named in the journal before it exists; None in journals before 3.
    temp: Path | None = None

    @property
    def action(self) -> str:
        return "create" if self.old_sha256 is None else "delete" if self.new_sha256 is None else "modify"

    def to_json(self, root: Path) -> dict[str, Any]:
        """The entry with its paths relative to `root` (checked inside it by commit)."""
        return {
            "path": str(self.path.relative_to(root)),
            "temp": None if self.temp is None else str(self.temp.relative_to(root)),
            "action": self.action,
            "old_sha256": self.old_sha256,
            "new_sha256": self.new_sha256,
            "mode": self.mode,
            "backup": self.backup,
            "created_dirs": [str(p.relative_to(root)) for p in self.created_dirs],
        }

    @staticmethod
    def from_json(data: dict[str, Any], root: Path | None) -> _Entry:
        """An entry as a journal holds it; `root`: its paths are relative to it (version 3),
        None: absolute (versions 1 and 2). Joined, not normalised: a `..` or an absolute
        path stays one, for `_unsafe_entries` to refuse."""
        backup = data["backup"]
        if backup is not None and not _BACKUP_RE.fullmatch(str(backup)):
            raise ValueError(f"backup {backup!r} is neither old.bin@OFFSET+LENGTH nor a file name")
        old, new, mode = data["old_sha256"], data["new_sha256"], data["mode"]
        for digest in (old, new):
            if digest is not None and not (isinstance(digest, str) and SHA_RE.fullmatch(digest)):
                raise ValueError(f"{digest!r} is not a sha256")
        if old is None and new is None:
            raise ValueError("an entry with neither old nor new bytes")
        if (old is None) != (backup is None):
            raise ValueError("a backup for a created file, or none for an old one")
        if mode is not None and (type(mode) is not int or not 0 <= mode <= 0o7777):
            raise ValueError(f"mode {mode!r} is not a file mode")
        dirs = data.get("created_dirs", ())
        temp = data.get("temp") if root is not None else None
        if not isinstance(data["path"], str) or not isinstance(dirs, list | tuple) or not all(
            isinstance(d, str) for d in dirs
        ) or (root is not None and not isinstance(temp, str)):
            raise ValueError("paths must be strings")

        def at(text: str) -> Path:
            return Path(text if root is None else os.path.join(root, text))

        return _Entry(
            path=at(data["path"]),
            old_sha256=old,
            new_sha256=new,
            mode=mode,
            backup=backup,
            created_dirs=tuple(at(p) for p in dirs),
            temp=None if temp is None else at(temp),
        )




def _remember(journal_dir: Path, stem: str, token: str, journal: bytes) -> Path:
    """Record, durably, that the journal `journal` (its bytes) of `stem` in `journal_dir`
    is optrace's own: written before the journal, so no journal exists without its
    record. Keyed by the repository's id (made now if it has none), so the record is
    found again after the repository moves; it keeps the root it was written at, so a
    copy of the tree (same id) is told apart while the original is still there. The
    record's path."""
    if not TOKEN_RE.fullmatch(token):
        raise ValueError(f"{token!r} cannot name a record")
    repo_id = _repository_id(journal_dir)
    root = real_root(journal_dir)
    path = record_path(repo_id, stem, token)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f"{path.name}.{token}.tmp")
    record = {"format": RECORD_FORMAT, "version": 2, "repository_id": repo_id, "root": str(root),
              "journal": stem, "token": token, "journal_sha256": hashlib.sha256(journal).hexdigest(),
              "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    # ensure_ascii (the default): a root that is not UTF-8 is escaped, the bytes are ASCII.
    data = (json.dumps(record, indent=1) + "\n").encode("ascii")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return path


def _forget(*records: Path) -> None:
    """Drop records (their journal is gone), with any temp file of them a crash left. Not
    made durable: a record without its journal is swept later."""
    for path in records:
        try:
            for stale in path.parent.glob(f"{glob.escape(path.name)}.*.tmp"):
                stale.unlink(missing_ok=True)
            path.unlink(missing_ok=True)
        except OSError:
            pass  # swept by the next run of this operator


def _repository_id(journal_dir: Path) -> str:
    """The repository's id (`journal.read_repository_id`), made by its first commit: 128
    random bits in `journal_dir/id`, written to a new temp file (O_EXCL | O_NOFOLLOW),
    made durable, then linked to its name — never replacing one that is there, so an id
    made meanwhile (another user's run) stays and is the one used. One there that is not
    an id optrace made (a link, a FIFO, other bytes) is refused (OT046), never replaced."""
    try:
        return read_repository_id(journal_dir)
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        raise foreign_id(journal_dir, exc) from exc
    new = secrets.token_hex(16)
    tmp = journal_dir / f"{REPOSITORY_ID}.{new}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        try:
            os.write(fd, f"{new}\n".encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            _link_new(tmp, journal_dir / REPOSITORY_ID)
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(journal_dir)
        return read_repository_id(journal_dir)
    except ValueError as exc:
        raise foreign_id(journal_dir, exc) from exc
    except OSError as exc:
        if os.path.islink(journal_dir / REPOSITORY_ID):
            raise foreign_id(journal_dir, exc) from exc
        raise WriteFailed(f"cannot make the repository's id ({exc.strerror or exc}); nothing written",
                          journal_dir / REPOSITORY_ID, restored_all=True) from exc


def _link_new(src: Path, dst: Path) -> None:
    """Give the file `src` the name `dst` too, unless `dst` exists (then nothing). A hard
    link never replaces; where the filesystem has none, a rename that does not replace."""
    try:
        os.link(src, dst)
        return
    except FileExistsError:
        return
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK):
            raise
    try:
        renameat.rename_noreplace(src, dst)
    except FileExistsError:
        pass
    except renameat.Unsupported:
        if not os.path.lexists(dst):  # the last resort: a plain rename, checked just before
            os.rename(src, dst)


def _holder(fd: int) -> str:
    """Who holds a lock, as its holder wrote it into the lock file ("" if unknown)."""
    try:
        data = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {int(data['pid'])} (`{data['command']}`, since {data['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _announce(fd: int) -> None:
    """Write who holds the lock into the lock file, for the process it turns away."""
    holder = {"pid": os.getpid(), "command": " ".join(["optrace", *sys.argv[1:]]),
              "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        st = os.fstat(fd)
        # Only a plain lock file of one name: a hard link a copied tree carries (to some
        # file of the user's) is never truncated.
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > 4096:
            return
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode("utf-8", "surrogateescape"), 0)
    except OSError:
        pass  # the lock holds without it; the refusal just names no holder


@contextmanager
def repository_lock(root: Path, *, wait: bool = False) -> Iterator[None]:
    """The write lock of repository `root`, held by a `--write` run from before it recovers
    and computes until its last commit: files several operators share (`pybind.cpp`, a
    sample, the build script) are never written by two processes at once, and nothing is
    computed on bytes another run is about to change. A second run is turned away at once
    with TransactionBusy (OT045) naming the holder, or (`wait`) waits for it.

    `flock` on a file in the user's state directory (nothing is written in the
    repository): the kernel releases it when its process dies. Runs of other users on
    the same checkout are not excluded by it; each commit still takes the operator's
    lock in `.optrace/`. Reentrant within a thread (`commit` takes it too); another
    thread of the same process is another writer."""
    real = Path(os.path.realpath(root))
    me = (os.getpid(), threading.get_ident())
    if _held.get(real) == me:
        yield
        return
    path = state_dir() / "locks" / f"{hashlib.sha256(os.fsencode(real)).hexdigest()[:32]}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise WriteFailed(f"cannot take the repository's write lock ({exc.strerror or exc}); nothing written",
                          path, restored_all=True) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = _holder(fd)
            for _ in range(20):
                if holder:
                    break
                # The holder writes its name just after it takes the lock: a run turned
                # away in between waits a moment to name it (up to 0.2 s).
                time.sleep(0.01)
                holder = _holder(fd)
            raise TransactionBusy(
                CODE_BUSY,
                f"another optrace process is writing this repository{': ' + holder if holder else ''}; "
                "nothing done (pass --wait to wait for it)",
                real,
            ) from None
        _announce(fd)
        _held[real] = me
        try:
            yield
        finally:
            del _held[real]
    finally:
        os.close(fd)


_held: dict[Path, tuple[int, int]] = {}  # repository -> (pid, thread) holding its write lock


def _lock(journal: Journal) -> int:
    """Take the operator's lock (one process at a time); close the fd returned to release it.

    flock, so the kernel releases it when the process dies: a crash never leaves it held.
    A lock file that is a symlink (a clone can carry one) is never followed.
    """
    try:
        fd = os.open(journal.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
    except OSError as exc:
        if os.path.islink(journal.lock_path):
            raise journal_refusal(journal, "its lock file is a symlink", journal.lock_path) from exc
        raise
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
    try:
        # O_EXCL: an existing `.gitignore` — or a link a clone brought — is left alone.
        fd = os.open(journal_dir / ".gitignore", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    except OSError:
        return  # there already, or cosmetic: the journal works without it
    try:
        os.write(fd, b"# created by optrace: journals and locks of apply / strip\n*\n")
    except OSError:
        pass
    finally:
        os.close(fd)


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

    # Plain threads, not concurrent.futures: its import (with logging's) was a twentieth
    # of a one-operator `check`, which imports this module and never commits.
    lock = threading.Lock()
    queue = list(enumerate(jobs))
    queue.reverse()  # popped from the end: in job order
    failures: list[tuple[int, BaseException]] = []

    def work() -> None:
        while True:
            with lock:
                if not queue:
                    return
                index, (path, data, mode) = queue.pop()
            try:
                _write_temp(path, data, mode, token)
            except BaseException as exc:  # reported by the caller, with its file
                with lock:
                    failures.append((index, exc))

    threads = [threading.Thread(target=work, name=f"optrace-fsync-{k}", daemon=True)
               for k in range(min(8, len(jobs)))]
    started: list[threading.Thread] = []
    try:
        for thread in threads:
            thread.start()
            started.append(thread)
        for thread in started:
            thread.join()
    except BaseException as exc:  # Ctrl-C while waiting, or no thread to start
        # The writes already running must end before their temp files can be removed:
        # hand out no more, wait for them, even through another Ctrl-C, then report.
        with lock:
            queue.clear()
        for thread in started:
            while thread.is_alive():
                try:
                    thread.join()
                except BaseException:  # keep waiting: the rollback needs the writes ended
                    continue
        return jobs[0][0], exc
    if failures:
        index, failure = min(failures, key=lambda f: f[0])
        return jobs[index][0], failure
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


def _resolve(changes: Mapping[Path, FileChange]) -> Planned:
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


def _journal_document(journal: Journal, name: str, entries: list[_Entry], root: Path) -> bytes:
    document = {
        "format": JOURNAL_FORMAT,
        "version": JOURNAL_VERSION,
        "name": name,
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "token": journal.token,
        "files": [entry.to_json(root) for entry in entries],
    }
    # ensure_ascii (the default): a non-UTF-8 path is escaped, the bytes are ASCII.
    return (json.dumps(document, indent=2) + "\n").encode("ascii")


def _dump_journal(journal: Journal, document: bytes) -> None:
    # O_EXCL | O_NOFOLLOW: the temp file is new (leftovers were swept or refused under the
    # lock), never a link that would carry the write elsewhere.
    fd = os.open(journal.tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    try:
        view = memoryview(document)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(journal.tmp_path, journal.json_path)
    _fsync_dir(journal.json_path.parent)


def _discard_journal(journal: Journal, *records: Path) -> None:
    # The journal goes first: once it is gone the transaction is over, and a backup
    # directory without a journal is an orphan that `recover` sweeps; then its record.
    journal.json_path.unlink(missing_ok=True)
    _fsync_dir(journal.json_path.parent)
    shutil.rmtree(journal.backup_dir, ignore_errors=True)
    _forget(*records)


def _unsafe_path(path: Path, root: Path) -> str:
    """Why recovery (or a commit) must not touch `path`, or "" when it may: only normal
    absolute paths inside `root` (a real path), outside `.git/` and `.optrace/`."""
    text = str(path)
    if not os.path.isabs(text) or os.path.normpath(text) != text or text.startswith("//"):
        return "not a normal absolute path"
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        parts = ()
    if not parts:
        return f"outside the repository root {shown_path(root)}"  # as text output shows paths
    if any(part.lower() == ".git" for part in parts):
        return "inside .git/"
    if parts[0] == ".optrace":
        return "inside optrace's journal directory"
    return ""


def _unsafe_entries(entries: list[_Entry], root: Path, token: str) -> str:
    """The first reason a journal's entries cannot be followed, or ""."""
    seen: set[Path] = set()
    for entry in entries:
        for path in (entry.path, *entry.created_dirs):
            why = _unsafe_path(path, root)
            if why:
                return f"it names {path}, {why}"
        if entry.temp is not None and entry.temp != _temp_name(entry.path, token):
            return f"it names {entry.temp} as the temp file of {entry.path}, which is not its temp name"
        if entry.path in seen:
            return f"it names {entry.path} twice"
        seen.add(entry.path)
        if any(directory not in entry.path.parents for directory in entry.created_dirs):
            return f"a directory it would remove for {entry.path} is not one of its parents"
    return ""


def _roll_back(entries: list[_Entry], journal: Journal, *, touched: set[int] | None) -> list[RecoveredFile]:
    """Put each file back to its old bytes, judging its state by sha256.

    `touched` lists the entries this process may have written (None: unknown, after a
    crash). A file in neither state was changed by someone else: it is left alone.
    """
    return [
        _restore(entry, journal) for index, entry in enumerate(entries) if touched is None or index in touched
    ]


def _restore(entry: _Entry, journal: Journal) -> RecoveredFile:
    # Paths were resolved when the journal was written: a directory on the way that is a
    # symlink now would carry every write below elsewhere (out of the repository).
    real = os.path.realpath(entry.path.parent)
    if real != str(entry.path.parent):
        return RecoveredFile(entry.path, Outcome.MODIFIED_SINCE,
                             f"a directory on its path is now a symlink (to {real}); left as is")
    try:
        # A temp file of this transaction, left by a crash: new bytes not yet in place, or
        # old bytes kept aside (their copy is in the backups).
        (entry.temp or _temp_name(entry.path, journal.token)).unlink(missing_ok=True)
    except OSError:
        pass  # its directory is gone or is no directory: there is no temp file either
    try:
        state = sha256_of(_read_state(entry.path))
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
            if sha256_of(old) != entry.old_sha256:
                raise OSError(f"backup {journal.backup_dir / entry.backup} is damaged")
            # The permission bits only: never a setuid / setgid / sticky bit from a journal.
            mode = None if entry.mode is None else stat.S_IMODE(entry.mode) & 0o777
            _write_atomic(entry.path, old, mode, journal.token)
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


def _prepare(journal: Journal, name: str, planned: Planned, root: Path) -> list[_Entry]:
    """Record the journal in the user's state directory, back up every old file and write
    the journal, durably, before any target changes.

    The old bytes go into one archive, fsynced once: an fsync per file was a third of the
    fsyncs of a commit, and fsyncs are most of its time (docs/edits.md). The journal's
    bytes are known before anything is written (the archive's offsets follow from the
    old sizes), so the record names them, and exists before the journal does."""
    entries: list[_Entry] = []
    offset = 0
    for path, old, new in planned:
        backup = None
        mode = None
        if old is not None:
            backup = f"{_ARCHIVE}@{offset}+{len(old)}"
            offset += len(old)
            mode = stat.S_IMODE(os.stat(path).st_mode)
        created = _missing_parents(path) if old is None else ()
        # The temp file is named here, in the journal, before it is made: whatever a
        # crash leaves of it, recovery removes (in a moved repository too).
        temp = _temp_name(path, journal.token)
        entries.append(_Entry(path, sha256_of(old), sha256_of(new), mode, backup, created, temp))
    document = _journal_document(journal, name, entries, root)
    try:
        _remember(journal.json_path.parent, journal.stem, journal.token, document)
    except OSError as exc:
        raise WriteFailed(
            f"cannot record the journal in the state directory ({exc.strerror or exc}); nothing written",
            state_dir() / "journals",
            restored_all=True,
        ) from exc
    journal.backup_dir.mkdir()
    with open(journal.backup_dir / _ARCHIVE, "wb") as archive:
        for _path, old, _new in planned:
            if old is not None:
                archive.write(old)
        archive.flush()
        os.fsync(archive.fileno())
    _fsync_dir(journal.backup_dir)
    _dump_journal(journal, document)
    return entries


def commit(
    changes: Mapping[Path, FileChange],
    journal_dir: Path,
    *,
    name: str = "edits",
    _before_write: BeforeWrite | None = None,
) -> list[Path]:
    """Write `changes` ({path: (old, new)}, None = absent) all-or-nothing; the paths written.

    Paths are resolved (a symlink is written through) and written in sorted order. The
    repository root is `journal_dir`'s parent: every path must lie inside it, outside
    `.git/` and `.optrace/` (else OutsideRoot, OT047, nothing written).
    Raises StaleSource (nothing written) when a file no longer holds `old`, at the check
    or when it is swapped into place (the files already written are rolled back);
    UnfinishedTransaction when operator `name` has a journal left by a crash (call
    `recover` before planning); ForeignJournal when it has a journal (or leftovers)
    optrace did not record, or `journal_dir` is a symlink (left untouched);
    TransactionBusy when another process holds the operator;
    WriteFailed when a write fails, after restoring the files already written.
    `_before_write(path, k)` runs after the check, before the k-th file write: a hook for
    fault injection.
    """
    planned = _resolve(changes)
    if not planned:
        return []
    root = real_root(journal_dir)
    for path, _old, _new in planned:
        why = _unsafe_path(path, root)
        if why:
            raise OutsideRoot(CODE_OUTSIDE, f"{why}; nothing written", path)
    journal = Journal.at(journal_dir, journal_stem(name), secrets.token_hex(16))
    # The repository's write lock first (the CLI holds it already for its whole run):
    # files several operators share are never written by two processes at once, and a
    # second process is turned away naming the holder. Then the operator's lock.
    with repository_lock(root):
        try:
            if os.path.islink(journal_dir):
                raise foreign_dir(journal_dir)
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
            _check_leftovers(journal)
            # Checked under the locks: no other optrace process can write between check and write.
            _verify(planned)
            record = record_path(_repository_id(journal_dir), journal.stem, journal.token)
            _write_all(journal, name, planned, _before_write, root, record)
        finally:
            os.close(lock)
    return [path for path, _old, _new in planned]


def _check_leftovers(journal: Journal) -> None:
    """Under the operator's lock, before a commit: a journal of optrace's own is
    unfinished (recover first); any other journal or leftover is refused, untouched;
    orphans of optrace's own (records, backups without a journal) are swept."""
    present = journal.leftovers()
    records = read_records(journal.json_path.parent, journal.stem)
    mine = [r.path for r in records if not r.copy_of]
    if os.path.lexists(journal.json_path):
        if own_record(journal, records) is not None:
            raise UnfinishedTransaction(
                CODE_UNFINISHED,
                "an earlier optrace run did not finish writing: recover it first",
                journal.json_path,
            )
        raise journal_refusal(journal, refusal_reason(journal, records))
    if present and not mine:
        raise journal_refusal(journal, "leftovers of a journal optrace has no record of", present[0])
    if present:
        _sweep(journal)
    _forget(*mine)


def _sweep(journal: Journal) -> None:
    """Orphans of a transaction of optrace's own: a crash before its journal was in place
    (targets untouched) or after it was removed (transaction complete)."""
    try:
        if not os.path.isdir(journal.tmp_path) or os.path.islink(journal.tmp_path):
            journal.tmp_path.unlink(missing_ok=True)
    except OSError:
        pass
    shutil.rmtree(journal.backup_dir, ignore_errors=True)  # never follows a symlink


def _write_all(
    journal: Journal, name: str, planned: Planned, before_write: BeforeWrite | None, root: Path, record: Path
) -> None:
    try:
        entries = _prepare(journal, name, planned, root)
    except OSError as exc:
        # No target has been touched yet: drop the half-made journal and report.
        shutil.rmtree(journal.backup_dir, ignore_errors=True)
        try:
            journal.tmp_path.unlink(missing_ok=True)
        except OSError:
            pass  # not ours to clean (a directory?): the error below says what failed
        _forget(record)
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
        _fail(failed[1], failed[0], entries, journal, set(), record)
        raise failed[1]
    touched: set[int] = set()
    # Entries whose old file sits at their temp name, exchanged (or, for a deletion, moved)
    # out of the target: index -> (st_dev, st_ino) of our new file, None for a deletion.
    aside: dict[int, tuple[int, int] | None] = {}

    def abort(exc: BaseException, path: Path) -> None:
        # An old file kept aside that another program wrote into since holds its bytes
        # now: it goes back in place, and is theirs (not rolled back) from here on.
        touched.difference_update(_settle(planned, aside, journal.token))
        _discard_temps(entries, journal.token, keep=touched)
        _fail(exc, path, entries, journal, touched, record)

    for index, (path, old, new) in enumerate(planned):
        # Counted before the write: an exception may come after the rename.
        touched.add(index)
        try:
            if before_write is not None:
                before_write(path, index)
            _place(path, old, new, _temp_name(path, journal.token), aside, index)
        except BaseException as exc:
            if isinstance(exc, _Theirs):
                touched.discard(index)  # the target holds the other program's file again
            abort(exc, path)
            raise  # _fail raises for OSError; anything else propagates unchanged
    # Every target is written. Right before each old file kept aside is discarded, its
    # bytes are compared once more: a writer that opened the file before the exchange
    # and wrote into it after (in place) wrote into that old file, and must not lose it.
    for index in sorted(aside):
        path, old, _new = planned[index]
        tmp = _temp_name(path, journal.token)
        try:
            if _kept_bytes(tmp) == old or not os.path.lexists(tmp):
                del aside[index]
                try:
                    tmp.unlink(missing_ok=True)
                except OSError:
                    pass  # a stray copy of the old bytes; the target is written all the same
                continue
            _put_back(path, tmp, aside[index])
            del aside[index]
            touched.discard(index)
            raise _Theirs(CODE_STALE, "written to (in place) by another program while optrace was "
                          "writing it; nothing written, plan again", path)
        except BaseException as exc:
            abort(exc, path)
            raise
    # The renames and unlinks become durable before the journal goes: one fsync per
    # directory, not per file (until then a crash leaves the journal, and `recover`
    # judges each file by its bytes, old or new alike). Fsyncs were most of the time
    # of a many-operator apply.
    made = {d.parent for entry in entries for d in entry.created_dirs}  # new directories' entries
    for directory in sorted({path.parent for path, _old, _new in planned} | made):
        _fsync_dir(directory)
    _discard_journal(journal, record)


class _Theirs(StaleSource):
    """Another program wrote a target between the check and its write: its file was put
    back in place (nothing of optrace's is in it) and the operator is rolled back."""


def _kept_bytes(tmp: Path) -> bytes | None:
    """The bytes of what an exchange took out of a target, now at its temp name; None
    when that is not a regular file (a directory, a link or a FIFO someone put there)."""
    try:
        return _read_state(tmp)
    except _NotAFile:
        return None


def _put_back(path: Path, tmp: Path, ours: tuple[int, int] | None) -> None:
    """Undo the exchange (or, for a deletion, the move) of `path` with `tmp`: the target
    gets back the file that was there, our file goes to the temp name, to be discarded.

    Should yet another save land on the target between the two steps (it would replace
    our new file there, microseconds after the first), that later save is what the
    writer meant last: it goes back to the target, and the earlier one it supersedes is
    left at the temp name, as the editor's own rename would have dropped it."""
    if ours is None:  # a deletion: nothing of ours at the target
        try:
            renameat.rename_noreplace(tmp, path)
        except FileExistsError:
            pass  # created again meanwhile: the later file stays
        except renameat.Unsupported:
            if not os.path.lexists(path):
                os.rename(tmp, path)
        return
    renameat.exchange(tmp, path)
    try:
        st = os.lstat(tmp)
    except FileNotFoundError:
        return
    if (st.st_dev, st.st_ino) != ours:
        renameat.exchange(tmp, path)


def _place(
    path: Path, old: bytes | None, new: bytes | None, tmp: Path,
    aside: dict[int, tuple[int, int] | None], index: int,
) -> None:
    """Put `new` (in `tmp`, None: delete) at `path`, checking in the same step that the
    target held `old` at that instant (docs/edits.md, "Writing: commit").

    A modified file's temp file is exchanged with the target (`renameat2`
    RENAME_EXCHANGE): the old file is then at the temp name, compared with `old`, and
    kept there (`aside`) until the whole operator is written. A deleted file is moved to
    its temp name the same way; a created one is renamed only if nothing is there yet.
    When the target held something else, another program saved it after the check: its
    file is put back and `_Theirs` (OT042) raised — or `_NotAFile` (OT043, as a failed
    rename) when that is no regular file. Where renameat2 is unsupported, a plain rename
    or unlink, as before it existed: a save in that window is lost."""
    if old is None:
        try:
            renameat.rename_noreplace(tmp, path)
        except FileExistsError:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                raise _NotAFile(f"{path} is not a regular file") from None  # OT043, as os.replace
            raise _Theirs(CODE_STALE, "was created by another program while optrace was writing it; "
                          "nothing written, plan again", path) from None
        except renameat.Unsupported:
            os.replace(tmp, path)
        return
    ours: tuple[int, int] | None = None
    try:
        if new is None:
            os.rename(path, tmp)  # no file of that name: deletions have no temp file
        else:
            st = os.lstat(tmp)
            ours = (st.st_dev, st.st_ino)
            renameat.exchange(tmp, path)
    except renameat.Unsupported:
        os.replace(tmp, path)
        return
    except FileNotFoundError:
        if new is not None and not os.path.lexists(tmp):
            raise  # our temp file is gone: a failed write, not a stale source
        raise _Theirs(CODE_STALE, "was deleted by another program while optrace was writing it; "
                      "nothing written, plan again", path) from None
    aside[index] = ours
    if _kept_bytes(tmp) == old:
        return
    try:
        kind = os.lstat(tmp).st_mode
    except FileNotFoundError:
        return  # someone removed the old file from the temp name: nothing to put back
    _put_back(path, tmp, ours)
    del aside[index]
    if not stat.S_ISREG(kind):
        raise _NotAFile(f"{path} is {'a directory' if stat.S_ISDIR(kind) else 'not a regular file'}")
    raise _Theirs(CODE_STALE, "changed by another program while optrace was writing it; "
                  "nothing written, plan again", path)


def _settle(planned: Planned, aside: dict[int, tuple[int, int] | None], token: str) -> set[int]:
    """Before a rollback: the old files kept aside that someone wrote into since (in
    place, through a descriptor opened before the exchange) go back to their targets;
    their indices. Best effort: one that cannot be read or moved is left to the rollback."""
    returned: set[int] = set()
    for index, ours in sorted(aside.items()):
        path, old, _new = planned[index]
        tmp = _temp_name(path, token)
        try:
            kept = _kept_bytes(tmp)
        except OSError:
            kept = None  # unreadable: not known to be the old bytes, so not ours to drop
        try:
            if kept == old or not os.path.lexists(tmp):
                continue
            _put_back(path, tmp, ours)
        except OSError:
            continue
        returned.add(index)
    aside.clear()
    return returned


def _fail(
    exc: BaseException, path: Path, entries: list[_Entry], journal: Journal, touched: set[int], record: Path
) -> None:
    """Roll back what this run wrote, then say what happened (WriteFailed for an OSError,
    or for a file another program wrote meanwhile when the rollback is incomplete)."""
    results = _roll_back(entries, journal, touched=touched)
    # The failing file itself may be in any state (a directory put in its place): only
    # the files this run wrote must be back for the rollback to be complete.
    problems = [
        r
        for r in results
        if r.outcome is Outcome.FAILED or (r.outcome is Outcome.MODIFIED_SINCE and r.path != path)
    ]
    if not problems:
        _discard_journal(journal, record)
    detail = "; ".join(f"{r.path}: {r.outcome.value} ({r.detail})" for r in problems)
    if isinstance(exc, _Theirs):
        if problems:  # its "nothing written" would not be true
            why = exc.message.split(";")[0]
            raise WriteFailed(
                f"{why}; rollback incomplete: {detail}; journal kept at {journal.json_path}",
                path,
                restored_all=False,
            ) from exc
        return
    if not isinstance(exc, OSError):
        return
    reason = exc.strerror or str(exc)
    if problems:
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


def _load(json_path: Path, data: bytes, root: Path) -> tuple[str, list[_Entry], str]:
    """The journal's name, entries (their paths on `root`, the repository's real path
    now: a version 3 journal's are relative to it) and token."""
    try:
        document = json.loads(data.decode("utf-8"))
        version = document.get("version")
        if document.get("format") != JOURNAL_FORMAT or version not in (1, 2, JOURNAL_VERSION):
            raise ValueError(f"not an optrace journal of version 1 to {JOURNAL_VERSION}")
        base = root if version >= 3 else None
        entries = [_Entry.from_json(f, base) for f in document["files"]]
        return str(document["name"]), entries, str(document["token"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise TransactionError(
            CODE_UNFINISHED,
            f"unreadable journal ({exc}): inspect the files it names, then delete it",
            json_path,
        ) from exc


def _keep_for_user(journal: Journal) -> Path:
    """Move a journal and its backups under `unresolved/`, so the old bytes stay available
    to the user while the operator is no longer blocked by a pending journal."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    unresolved = journal.json_path.parent / UNRESOLVED_DIR
    if os.path.islink(unresolved):  # a clone's link would carry the move out of the repository
        raise OSError(f"{unresolved} is a symlink, not optrace's")
    target = unresolved / f"{journal.stem}-{stamp}-{journal.token}"
    target.mkdir(parents=True)
    os.replace(journal.json_path, target / "journal.json")
    if journal.backup_dir.exists():
        os.replace(journal.backup_dir, target / "backup")
    _fsync_dir(journal.json_path.parent)
    return target


def recover(journal_dir: Path, name: str | None = None) -> RecoveryReport:
    """Roll back every unfinished transaction in `journal_dir` (or only operator `name`'s).

    Only journals optrace recorded in the user's state directory for this repository
    (by its id, `journal_dir/id`: wherever it has moved since; not for a copy of it while
    the original is still where the journal was written), byte for byte as recorded, are
    acted on; any other journal or leftover — and a `journal_dir` that is a symlink — is
    listed in `report.foreign` and left untouched (nothing is written next to it either).
    A recorded journal whose entries leave the repository root (its real path now),
    enter `.git/` or `.optrace/`, or are not normal paths is refused the same way.

    Each file of a journal is identified by sha256 as old (left), new (restored from the
    backup, or removed if it was created) or neither (edited since, or reached through a
    directory that is now a symlink: left alone and reported; the journal then moves to
    `unresolved/` with its backups). A restore that fails keeps the journal in place, so
    a later run retries. Orphans of optrace's own transactions (backups without a
    journal, half-written journal temp files) are swept. An operator another live
    process holds is skipped: its transaction is running, not unfinished.
    """
    report = RecoveryReport()
    try:
        mode = os.lstat(journal_dir).st_mode
    except OSError:
        return report
    if stat.S_ISLNK(mode):
        report.foreign.append(foreign_dir(journal_dir))
        return report
    if not stat.S_ISDIR(mode):
        return report
    if name is None:
        stems = sorted({p.name.split(".", 1)[0] for p in journal_dir.glob("journal-*")})
    else:
        stems = [journal_stem(name)]
    for stem in stems:
        journal = Journal.at(journal_dir, stem)
        records = read_records(journal_dir, stem)
        if all(r.copy_of for r in records):
            # Not this tree's: not even a lock file is made beside it.
            present = journal.leftovers()
            if present:
                report.foreign.append(journal_refusal(journal, refusal_reason(journal, records), present[0]))
            continue
        try:
            lock = _lock(journal)
        except TransactionBusy:
            continue
        except ForeignJournal as exc:
            report.foreign.append(exc)
            continue
        try:
            _recover_one(journal, report)
        finally:
            os.close(lock)
    return report


def _recover_one(journal: Journal, report: RecoveryReport) -> None:
    journal_dir = journal.json_path.parent
    root = real_root(journal_dir)
    # Read again under the operator's lock: the records of a transaction that ended
    # meanwhile are gone.
    records = read_records(journal_dir, journal.stem)
    mine = [r.path for r in records if not r.copy_of]
    if not os.path.lexists(journal.json_path):
        if mine:
            _sweep(journal)
            _forget(*mine)
        return
    try:
        data = journal_bytes(journal.json_path)
    except (OSError, ValueError) as exc:
        report.foreign.append(journal_refusal(journal, f"it cannot be read as a journal ({exc})"))
        return
    digest = hashlib.sha256(data).hexdigest()
    record = next((r for r in records if not r.copy_of and r.journal_sha256 == digest), None)
    if record is None:
        why = ("it is not the journal optrace recorded (other bytes)" if mine
               else refusal_reason(journal, records))
        report.foreign.append(journal_refusal(journal, why))
        return
    report.journals.append(journal.json_path)
    _name, entries, token = _load(journal.json_path, data, root)
    why = _unsafe_entries(entries, root, token) or (
        "" if token == record.token else "another id than recorded")
    if why:
        report.journals.remove(journal.json_path)
        report.foreign.append(journal_refusal(journal, why))
        return
    journal = Journal(journal.json_path, journal.backup_dir, journal.lock_path, token)
    results = _roll_back(entries, journal, touched=None)
    report.files.extend(results)
    outcomes = {r.outcome for r in results}
    if Outcome.FAILED in outcomes:
        report.kept.append(journal.json_path)
        return
    if Outcome.MODIFIED_SINCE in outcomes:
        try:
            report.kept.append(_keep_for_user(journal))
        except OSError as exc:
            report.files.append(RecoveredFile(journal.json_path, Outcome.FAILED,
                                              f"cannot move the journal to {UNRESOLVED_DIR}/: {exc}"))
            report.kept.append(journal.json_path)
            return
        _forget(*mine)
        return
    # Every record of this tree for the operator goes: the one of this journal, and any
    # an earlier crash left without its journal.
    _discard_journal(journal, *mine)


@dataclass(frozen=True)
class Transaction:
    """The journal directory and operator name, for callers that prefer an object.
    `legacy`: other names a journal of this operator may have (one an earlier optrace
    wrote): recovered and reported too; commits use `name`."""

    journal_dir: Path
    name: str = "edits"
    legacy: tuple[str, ...] = ()

    @staticmethod
    def of_operator(op_dir: Path, root: Path) -> Transaction:
        """The transaction of operator `op_dir` in repository `root` (its journal in
        `root/.optrace/`), under every name its journal may have."""
        name, *legacy = operator_journal_names(op_dir, root)
        return Transaction(root / ".optrace", name, tuple(legacy))

    def commit(
        self, changes: Mapping[Path, FileChange], *, _before_write: BeforeWrite | None = None
    ) -> list[Path]:
        """See `commit`."""
        return commit(changes, self.journal_dir, name=self.name, _before_write=_before_write)

    def recover(self) -> RecoveryReport:
        """See `recover`; only this operator's journal (under each of its names)."""
        report = recover(self.journal_dir, self.name)
        for name in self.legacy:
            more = recover(self.journal_dir, name)
            report.journals += more.journals
            report.files += more.files
            report.kept += more.kept
            report.foreign += more.foreign
        return report

    def status(self) -> tuple[str, Path | None]:
        """See `journal_status`; reads only. A pending journal under any of the operator's
        names first, then a foreign one."""
        states = [journal_status(self.journal_dir, name) for name in (self.name, *self.legacy)]
        for wanted in ("pending", "foreign"):
            for state, path in states:
                if state == wanted:
                    return state, path
        return "none", None
