"""An operator's journal as it lies on disk, and whether optrace wrote it: the read side
of engine/transaction.py.

`check` (what pre-commit runs) and the read-only commands ask only whether an operator
has an unfinished journal of optrace's own (`pending_journal`) or one it did not record
(`foreign_journal`); they never write. This module answers that without the writing
machinery (locks, threads, temp files: a tenth of the imports `check` paid for nothing).
What a journal holds and when it is trusted (its record, keyed by the repository's id in
`.optrace/id` so that it survives a move): engine/transaction.py's docstring and
docs/edits.md.
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
from optrace.engine.diagnostics import shown_path

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
        super().__init__(f"{shown_path(path)}: {code} {message}")


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
# A transaction's id (commit draws 32 hex digits): part of its record's file name, so a
# safe alphabet without dots.
TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


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


def operator_journal_name(op_dir: Path, root: Path) -> str:
    """The name apply / strip journal an operator under: its folder name plus a hash of
    its path relative to the repository root `root` (where its journal directory is).
    Relative, so the name survives a move of the repository; two operators of the same
    name in one repository stay apart."""
    resolved = op_dir.resolve()
    relative = os.path.relpath(resolved, os.path.realpath(root))
    # Bytes of the path (os.fsencode): a non-UTF-8 folder name is a name like any other.
    digest = hashlib.sha256(os.fsencode(relative)).hexdigest()[:8]
    return f"{os.fsencode(resolved.name).decode('ascii', 'replace')}-{digest}"


def legacy_operator_journal_name(op_dir: Path) -> str:
    """The name optrace 0.1 gave an operator's journal: a hash of its absolute path. Still
    looked for, so a journal such a version left unfinished is recovered where it was
    written (after a move its name no longer matches: it is not found)."""
    resolved = op_dir.resolve()
    digest = hashlib.sha256(os.fsencode(resolved)).hexdigest()[:8]
    return f"{os.fsencode(resolved.name).decode('ascii', 'replace')}-{digest}"


def operator_journal_names(op_dir: Path, root: Path) -> tuple[str, ...]:
    """Every name a journal of `op_dir` in `root`'s journal directory may have: the one
    commits use now, then the legacy one."""
    names = (operator_journal_name(op_dir, root), legacy_operator_journal_name(op_dir))
    return names[:1] if names[0] == names[1] else names


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


# --- the repository's id ---------------------------------------------------------------------

REPOSITORY_ID = "id"  # in the journal directory: the repository's identity, made by the first commit
ID_RE = re.compile(r"[0-9a-f]{32}")
MAX_ID_BYTES = 64


def read_repository_id(journal_dir: Path) -> str:
    """The id in `journal_dir/id`, read as a journal is: a regular file (never through a
    link, never a FIFO), of at most 64 bytes, holding 32 hex digits and a newline.
    OSError when it cannot be opened (FileNotFoundError: none yet), ValueError otherwise.

    The id only names the repository's records in the state directory, so they are found
    again after a move; it is no authority: a clone or a copy carries it along, and a
    journal is still optrace's only when a record binds its exact bytes."""
    fd = os.open(journal_dir / REPOSITORY_ID, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ID_BYTES:
            raise ValueError(f"not a regular file of at most {MAX_ID_BYTES} bytes")
        data = os.read(fd, MAX_ID_BYTES + 1)
    finally:
        os.close(fd)
    text = data.decode("ascii", "replace")
    text = text[:-1] if text.endswith("\n") else text
    if not ID_RE.fullmatch(text):
        raise ValueError("not 32 hex digits")
    return text


def repository_id(journal_dir: Path) -> str | None:
    """The repository's id, or None when there is none (nothing committed yet) or it is
    not one optrace made: then only records of the repository's path are found."""
    try:
        return read_repository_id(journal_dir)
    except (OSError, ValueError):
        return None


# --- the user's record of the journals optrace wrote -------------------------------------------


def record_path(repo_id: str, stem: str, token: str) -> Path:
    """Where the record of journal `stem` (transaction `token`) of repository `repo_id` is.
    The token is part of the name: two trees that share an id (a copy) never write over
    each other's records."""
    return state_dir() / "journals" / f"{repo_id}.{stem}.{token}.json"


def legacy_record_path(root: Path, stem: str) -> Path:
    """Where optrace 0.1 recorded a journal: keyed by the repository's real path."""
    key = hashlib.sha256(os.fsencode(root)).hexdigest()[:32]
    return state_dir() / "journals" / f"{key}-{stem}.json"


@dataclass(frozen=True)
class JournalRecord:
    """What the state directory says about one operator's journal in one repository."""

    token: str
    journal_sha256: str
    path: Path  # the record's own file in the state directory
    # Set when the record was written in a tree at another path that still holds this
    # repository (its id): the tree read now is a copy of that one, and the journal is
    # that tree's, not this one's.
    copy_of: str = ""


def _read_json(path: Path) -> object:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return json.loads(os.read(fd, 64 * 1024))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def _still_holds(old_root: str, repo_id: str, journal_dir: Path) -> bool:
    """Whether the path a record was written at still holds the repository `repo_id`, as
    another tree than `journal_dir`'s: then the tree read now is a copy of it. A path
    that is gone, or holds another repository, means this tree is that one, moved."""
    old = Path(old_root) / ".optrace"
    try:
        if os.path.samefile(old, journal_dir):
            return False  # this very tree, by another path (a symlink, a bind mount)
    except OSError:
        pass
    try:
        return read_repository_id(old) == repo_id
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return False
    except OSError:
        return True  # cannot tell (no permission there): taken as a copy, the side that writes nothing


def _parse_record(data: object, path: Path, stem: str, token: str | None) -> JournalRecord | None:
    if not isinstance(data, dict) or data.get("format") != RECORD_FORMAT or data.get("journal") != stem:
        return None
    record_token, digest = data.get("token"), data.get("journal_sha256")
    if not isinstance(record_token, str) or not isinstance(digest, str) or not SHA_RE.fullmatch(digest):
        return None
    if token is not None and record_token != token:
        return None  # not the transaction its file name says
    return JournalRecord(record_token, digest, path)


def read_records(journal_dir: Path, stem: str) -> list[JournalRecord]:
    """The records of journal `stem` of the repository `journal_dir` belongs to: those
    under its id (the root they were written at need not be today's: the repository may
    have moved), then one optrace 0.1 keyed by its real path. A record written at a path
    that still holds the repository is returned with `copy_of` set."""
    root = real_root(journal_dir)
    found: list[JournalRecord] = []
    repo_id = repository_id(journal_dir)
    if repo_id is not None:
        for path in sorted((state_dir() / "journals").glob(f"{repo_id}.{stem}.*.json")):
            token = path.name[len(f"{repo_id}.{stem}.") : -len(".json")]
            data = _read_json(path)
            record = _parse_record(data, path, stem, token) if TOKEN_RE.fullmatch(token) else None
            if record is None or not isinstance(data, dict) or data.get("repository_id") != repo_id:
                continue
            written_at = data.get("root")
            if not isinstance(written_at, str) or not os.path.isabs(written_at):
                continue
            if written_at != str(root) and _still_holds(written_at, repo_id, journal_dir):
                record = JournalRecord(record.token, record.journal_sha256, path, copy_of=written_at)
            found.append(record)
    legacy = legacy_record_path(root, stem)
    data = _read_json(legacy)
    record = _parse_record(data, legacy, stem, None)
    # Bound to this repository's path (not another one's, by a hash collision).
    if record is not None and isinstance(data, dict) and data.get("repository") == str(root):
        found.append(record)
    return found


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


def foreign_id(journal_dir: Path, why: BaseException) -> ForeignJournal:
    """The refusal of an `id` in the journal directory that optrace did not make."""
    path = journal_dir / REPOSITORY_ID
    what = "a symlink" if os.path.islink(path) else getattr(why, "strerror", None) or str(why)
    return ForeignJournal(
        CODE_FOREIGN,
        f"is not a repository id optrace made ({what}); nothing used or written. Remove it "
        f"(the next --write makes one): rm {shlex.quote(str(path))}",
        path,
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


def own_record(journal: Journal, records: list[JournalRecord]) -> JournalRecord | None:
    """The record of this tree (not a copy's) that names the journal on disk byte for
    byte, if any. The journal is read only when such a record exists."""
    mine = [r for r in records if not r.copy_of]
    return _matching(journal, mine)


def _matching(journal: Journal, records: list[JournalRecord]) -> JournalRecord | None:
    if not records:
        return None
    try:
        digest = hashlib.sha256(journal_bytes(journal.json_path)).hexdigest()
    except (OSError, ValueError):
        return None
    return next((r for r in records if r.journal_sha256 == digest), None)


def refusal_reason(journal: Journal, records: list[JournalRecord]) -> str:
    """Why the journal (or leftovers) of `journal` is not acted on, given its records."""
    if any(not r.copy_of for r in records):
        return "not the journal optrace recorded"
    original = _matching(journal, records)
    if original is not None:
        return (f"it is the journal of the repository at {original.copy_of}, which is still there: "
                "this tree is a copy of it (recover it there)")
    return "no record of it"


def journal_status(journal_dir: Path, name: str) -> tuple[str, Path | None]:
    """What operator `name` has in `journal_dir`, without writing anything:
    ("none", None); ("pending", journal) — optrace's own, unfinished: the operator may be
    half-written until the next `--write` rolls it back; or ("foreign", path) — a journal
    or leftovers optrace did not record for this tree (or `journal_dir` itself a
    symlink): ignored by read-only commands, refused by `--write`."""
    try:
        if stat.S_ISLNK(os.lstat(journal_dir).st_mode):
            return "foreign", journal_dir
    except OSError:
        return "none", None
    journal = Journal.at(journal_dir, journal_stem(name))
    present = journal.leftovers()
    if not present:
        return "none", None
    records = read_records(journal_dir, journal.stem)
    if not any(not r.copy_of for r in records):
        return "foreign", present[0]
    if not os.path.lexists(journal.json_path):
        return "none", None  # orphans of optrace's own: the next --write sweeps them
    if own_record(journal, records) is not None:
        return "pending", journal.json_path
    return "foreign", journal.json_path


def _journal_dirs(repo_root: Path, op_dir: Path) -> list[Path]:
    # A repository no `.git` / `optrace.toml` marks keeps its journals in the operator
    # directory (`--write` writes nothing above it); look in both places.
    dirs = [repo_root / ".optrace", op_dir / ".optrace"]
    return dirs[:1] if os.path.realpath(dirs[0]) == os.path.realpath(dirs[1]) else dirs


def _operator_journals(repo_root: Path, op_dir: Path) -> list[tuple[Path, str]]:
    """(journal directory, operator name) of every place a journal of `op_dir` may be."""
    return [(journal_dir, name) for journal_dir in _journal_dirs(repo_root, op_dir)
            for name in operator_journal_names(op_dir, journal_dir.parent)]


def pending_journal(repo_root: Path, op_dir: Path) -> Path | None:
    """The journal of an apply / strip of `op_dir` that did not finish, if optrace
    recorded it: until the next apply / strip --write rolls it back, the operator may be
    half-written. Reads only."""
    for journal_dir, name in _operator_journals(repo_root, op_dir):
        state, path = journal_status(journal_dir, name)
        if state == "pending":
            return path
    return None


def foreign_journal(repo_root: Path, op_dir: Path) -> ForeignJournal | None:
    """A journal of `op_dir` optrace did not record (see `journal_status`), as the error
    `--write` refuses it with. Reads only."""
    for journal_dir, name in _operator_journals(repo_root, op_dir):
        refusal = foreign_refusal(journal_dir, name)
        if refusal is not None:
            return refusal
    return None


def foreign_refusal(journal_dir: Path, name: str) -> ForeignJournal | None:
    """Operator `name`'s journal in `journal_dir` as the error `--write` refuses it with,
    when it is foreign (see `journal_status`). Reads only."""
    state, path = journal_status(journal_dir, name)
    if state != "foreign" or path is None:
        return None
    if path == journal_dir:
        return foreign_dir(journal_dir)
    journal = Journal.at(journal_dir, journal_stem(name))
    return journal_refusal(journal, refusal_reason(journal, read_records(journal_dir, journal.stem)), path)
