"""An operator's journal as it lies on disk, and whether optrace wrote it: the read side
of engine/transaction.py.

`check` (what pre-commit runs) and the read-only commands ask only whether an operator
has an unfinished journal of optrace's own (`pending_journal`) or one it did not record
(`foreign_journal`); they never write. This module answers that without the writing
machinery (locks, threads, temp files: a tenth of the imports `check` paid for nothing).
What a journal holds and when it is trusted: engine/transaction.py's
docstring and docs/edits.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path

from optrace.engine.codes import OT042, OT043, OT044, OT045, OT046, OT047

# Diagnostic codes (README: OT0xx is input and parsing), next to those of engine/edits.py.
CODE_STALE = OT042
CODE_WRITE = OT043
CODE_UNFINISHED = OT044
CODE_BUSY = OT045
CODE_FOREIGN = OT046
CODE_OUTSIDE = OT047

RECORD_FORMAT = "optrace-journal-record"
# A journal is read only when recorded; even then, never more than this (a journal is a
# few hundred bytes per file of the operator).
MAX_JOURNAL_BYTES = 64 * 1024 * 1024


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


class ForeignJournal(TransactionError):
    """A journal (or its leftovers) optrace did not record for this user and repository:
    refused and left untouched; the message says how to remove it."""


class OutsideRoot(TransactionError):
    """A file of the change set lies outside the repository root (or in `.git/`,
    `.optrace/`): nothing written."""



SHA_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Journal:
    """The files of one operator's journal in the journal directory."""

    json_path: Path  # journal-<name>.json: present only while a transaction is unfinished
    backup_dir: Path  # journal-<name>.backup/old.bin: the old bytes of every file, one after another
    lock_path: Path  # journal-<name>.lock: flock'ed by the process writing the operator
    token: str = ""  # names this transaction's temp files, so recovery can sweep them

    @staticmethod
    def at(journal_dir: Path, stem: str, token: str = "") -> Journal:
        return Journal(
            journal_dir / f"{stem}.json", journal_dir / f"{stem}.backup", journal_dir / f"{stem}.lock", token
        )

    @property
    def tmp_path(self) -> Path:
        return self.json_path.with_name(self.json_path.name + ".tmp")

    @property
    def stem(self) -> str:
        return self.json_path.name.split(".", 1)[0]

    def leftovers(self) -> list[Path]:
        """The journal, its temp file and its backups, as far as they exist (links too)."""
        return [p for p in (self.json_path, self.tmp_path, self.backup_dir) if os.path.lexists(p)]


def sha256_of(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def journal_stem(name: str) -> str:
    # Operator names become file names: a safe alphabet without dots, so the stem of any
    # journal file is the part of its name before the first dot.
    return "journal-" + (re.sub(r"[^A-Za-z0-9_-]", "_", name) or "_")


def journal_path(journal_dir: Path, name: str) -> Path:
    """Where the journal of operator `name` lives while its transaction is unfinished."""
    return Journal.at(journal_dir, journal_stem(name)).json_path


def operator_journal_name(op_dir: Path) -> str:
    """The name apply / strip journal an operator under: its folder name plus a hash of
    its resolved path (two operators of the same name in one repository stay apart)."""
    resolved = op_dir.resolve()
    # Bytes of the path (os.fsencode): a non-UTF-8 folder name is a name like any other.
    digest = hashlib.sha256(os.fsencode(resolved)).hexdigest()[:8]
    return f"{os.fsencode(resolved.name).decode('ascii', 'replace')}-{digest}"


# --- the user's record of the journals optrace wrote ---------------------------------------


def state_dir() -> Path:
    """The user's optrace state directory: `$XDG_STATE_HOME/optrace`, else
    `~/.local/state/optrace` (a relative XDG_STATE_HOME is ignored, as the XDG spec says).
    It lies outside every repository: what it records, a clone cannot bring along."""
    base = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "optrace"


def real_root(journal_dir: Path) -> Path:
    """The repository root a journal directory belongs to, as its real path."""
    return Path(os.path.realpath(journal_dir.parent))


def record_path(root: Path, stem: str) -> Path:
    key = hashlib.sha256(os.fsencode(root)).hexdigest()[:32]
    return state_dir() / "journals" / f"{key}-{stem}.json"


@dataclass(frozen=True)
class JournalRecord:
    """What the state directory says about one operator's journal in one repository."""

    token: str
    journal_sha256: str


def read_record(root: Path, stem: str) -> JournalRecord | None:
    """The record of journal `stem` of repository `root` (a real path), if optrace made one."""
    try:
        with open(record_path(root, stem), "rb") as handle:
            data = json.loads(handle.read(64 * 1024))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT:
        return None
    token, digest = data.get("token"), data.get("journal_sha256")
    if data.get("repository") != str(root) or data.get("journal") != stem:
        return None  # bound to another repository (a hash collision) or operator
    if not isinstance(token, str) or not isinstance(digest, str) or not SHA_RE.fullmatch(digest):
        return None
    return JournalRecord(token, digest)


def journal_refusal(journal: Journal, why: str, path: Path | None = None) -> ForeignJournal:
    where = shlex.quote(str(journal.json_path.parent))
    return ForeignJournal(
        CODE_FOREIGN,
        f"journal not recovered, left untouched: {why}. optrace acts only on journals it "
        f"recorded in {state_dir()} for this repository; one that came with a clone or a copy "
        f"(or from optrace before 0.2) is not one. If it is not yours, remove it: "
        f"rm -r {where}/{journal.stem}.*",
        path or journal.json_path,
    )


def foreign_dir(journal_dir: Path) -> ForeignJournal:
    return ForeignJournal(
        CODE_FOREIGN,
        f"is a symlink (to {os.path.realpath(journal_dir)}), not a journal directory optrace "
        f"made; nothing in it is used or written. Remove the link: rm {shlex.quote(str(journal_dir))}",
        journal_dir,
    )


def journal_bytes(path: Path) -> bytes:
    """A journal's bytes: a regular file (never a FIFO or a device), of bounded size."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_JOURNAL_BYTES:
            raise ValueError("not a regular file of at most 64 MiB")
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(MAX_JOURNAL_BYTES + 1)
    finally:
        os.close(fd)


def is_ours(journal: Journal, record: JournalRecord | None) -> bool:
    """The journal on disk is byte for byte the one optrace recorded."""
    if record is None:
        return False
    try:
        return hashlib.sha256(journal_bytes(journal.json_path)).hexdigest() == record.journal_sha256
    except (OSError, ValueError):
        return False


def journal_status(journal_dir: Path, name: str) -> tuple[str, Path | None]:
    """What operator `name` has in `journal_dir`, without writing anything:
    ("none", None); ("pending", journal) — optrace's own, unfinished: the operator may be
    half-written until the next `--write` rolls it back; or ("foreign", path) — a journal
    or leftovers optrace did not record (or `journal_dir` itself a symlink): ignored by
    read-only commands, refused by `--write`."""
    try:
        if stat.S_ISLNK(os.lstat(journal_dir).st_mode):
            return "foreign", journal_dir
    except OSError:
        return "none", None
    journal = Journal.at(journal_dir, journal_stem(name))
    present = journal.leftovers()
    if not present:
        return "none", None
    record = read_record(real_root(journal_dir), journal.stem)
    if record is None:
        return "foreign", present[0]
    if not os.path.lexists(journal.json_path):
        return "none", None  # orphans of optrace's own: the next --write sweeps them
    if is_ours(journal, record):
        return "pending", journal.json_path
    return "foreign", journal.json_path


def _journal_dirs(repo_root: Path, op_dir: Path) -> list[Path]:
    # A repository no `.git` / `optrace.toml` marks keeps its journals in the operator
    # directory (`--write` writes nothing above it); look in both places.
    dirs = [repo_root / ".optrace", op_dir / ".optrace"]
    return dirs[:1] if os.path.realpath(dirs[0]) == os.path.realpath(dirs[1]) else dirs


def pending_journal(repo_root: Path, op_dir: Path) -> Path | None:
    """The journal of an apply / strip of `op_dir` that did not finish, if optrace
    recorded it: until the next apply / strip --write rolls it back, the operator may be
    half-written. Reads only."""
    for journal_dir in _journal_dirs(repo_root, op_dir):
        state, path = journal_status(journal_dir, operator_journal_name(op_dir))
        if state == "pending":
            return path
    return None


def foreign_journal(repo_root: Path, op_dir: Path) -> ForeignJournal | None:
    """A journal of `op_dir` optrace did not record (see `journal_status`), as the error
    `--write` refuses it with. Reads only."""
    name = operator_journal_name(op_dir)
    for journal_dir in _journal_dirs(repo_root, op_dir):
        state, path = journal_status(journal_dir, name)
        if state == "foreign" and path is not None:
            if path == journal_dir:
                return foreign_dir(journal_dir)
            journal = Journal.at(journal_dir, journal_stem(name))
            recorded = read_record(real_root(journal_dir), journal.stem) is not None
            why = "not the journal optrace recorded" if recorded else "no record of it"
            return journal_refusal(journal, why, path)
    return None
