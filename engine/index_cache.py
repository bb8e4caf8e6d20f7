"""A user cache of what is derived from a file's bytes, keyed by their content hash.

The repository index (engine/discovery.py) derives a little from each of a repository's
tens of thousands of files — the words a file names, whether a script builds kernels,
what a source includes — and a second run over the same repository should not read
them again. This store keeps, per file path, the file's stat signature and the sha256 of
its bytes, and per (content hash, kind) the derived value as text: a file whose
signature is unchanged is not read at all; a changed file is read and hashed, and only
a content never seen before is derived again (a file moved or copied is not). A run
loads the rows of the folder it indexes, not every folder ever indexed.

The store is one SQLite file in the user's cache directory (`$XDG_CACHE_HOME/optrace`,
else `~/.cache/optrace`): data only, never pickle, so a cache restored by CI is read as
any input is. Every value carries a checksum: a corrupt or foreign row is ignored and
derived again; a database that cannot be opened or read is set aside and rebuilt. Writes
happen in one transaction (`flush`), so concurrent runs and a run killed half-way leave
either the old or the new rows, never half of one. `--no-cache` (`set_enabled(False)`)
keeps everything in memory for the run.

The store shares the user cache's size bound (`[limits] cache_bytes`): it keeps itself
under half of it (runtime/usercache.py keeps the JSON entries under the rest). Each
folder a run walks whole is recorded with the time; when the store grows past its share,
the rows of folders that no longer exist go first (a corpus run's scratch copies), then
rows under no recorded folder (a store written before folders were recorded), then the
folders indexed least recently, until it is under three quarters of its share; the file
is then compacted. The folder the run indexed is kept even when it alone is past the
share: dropping it would make every run over it derive everything again.

Other derived data (check's per-operator results) can use the same store under their own
`kind`; a kind's name should carry the version of what derives it.

A command that writes no file it reads (plan) runs in a `reading_only()` phase: there the
store takes each file's stat signature once for the phase, not at every question (plan
asks it of the repository's ~10k C / C++ sources for every operator with a header outside
its folder, of the build scripts for every operator). Outside a phase (apply, strip,
check) every question stats the file, so a file written in between is read again.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from optrace.runtime.regular import limit

# The stat signature is the user cache's (runtime/usercache.py).
from optrace.runtime.usercache import Signature as Signature
from optrace.runtime.usercache import cache_root, own_file
from optrace.runtime.usercache import signature as signature

_SCHEMA = 1
# A file whose mtime or ctime is this close to (or after) the moment the store hashed it
# may be written again within the same timestamp tick (filesystem times come from a
# coarse clock, a few milliseconds behind the real time) and keep its stat signature
# with other bytes. Its row is stored as not to be trusted (git's "racily clean" files):
# the next run reads and hashes it again rather than take the signature's word; what was
# derived from its content is still found by the hash. A filesystem that keeps whole
# seconds (ext4 with small inodes, ext3, FAT's two) has a tick that long: a time with no
# fraction of a second is taken to come from one. Tests that count the files a second
# run reads write theirs at least `RACY_NS` before the first run.
RACY_NS = 10_000_000
RACY_WHOLE_SECONDS_NS = 2_000_000_000


def racy_tick(sig: Signature) -> int:
    """The timestamp tick (ns) of the filesystem a signature came from, as far as its
    times tell (`RACY_NS`, `RACY_WHOLE_SECONDS_NS`)."""
    return RACY_WHOLE_SECONDS_NS if sig[1] % 1_000_000_000 == 0 and sig[2] % 1_000_000_000 == 0 else RACY_NS


def _still(path: Path, sig: Signature) -> bool:
    """Whether the file has the signature `sig` now."""
    try:
        return signature(os.stat(path)) == sig
    except OSError:
        return False


def _racy(sig: Signature, now_ns: int) -> bool:
    """Whether a file of this signature, hashed at `now_ns`, may change within its
    timestamp's tick without its signature changing."""
    return max(sig[1], sig[2]) >= now_ns - racy_tick(sig)
# As the process started: a command's `--no-cache` lasts for that command only (several
# may run in one process: tests, library callers), its worker processes included.
_NO_CACHE_AT_START = os.environ.get("OPTRACE_NO_CACHE")
_enabled = [(_NO_CACHE_AT_START or "") in ("", "0")]

class Phase:
    """A stretch of a command in which this process writes no file it reads (a token:
    what is remembered for one phase is compared by identity)."""


_phase: list[Phase | None] = [None]


@contextmanager
def reading_only() -> Iterator[Phase]:
    """Run the block as a phase that writes no file it reads (`plan`): each file's
    signature is taken once (`ContentStore.derived`), and `phase()` lets others keep what
    they derive for as long. Nested: the outer phase goes on. Worker processes forked
    inside it go on with it."""
    current = _phase[0]
    if current is not None:
        yield current
        return
    _phase[0] = token = Phase()
    try:
        yield token
    finally:
        _phase[0] = None


def phase() -> Phase | None:
    """The `reading_only` phase running now (None: files may be written in between)."""
    return _phase[0]


def set_enabled(enabled: bool) -> None:
    """Use the user cache (True, the default) or nothing but memory (`--no-cache`). The
    environment carries it to worker processes started another way than fork."""
    _enabled[0] = enabled
    os.environ["OPTRACE_NO_CACHE"] = "" if enabled else "1"


def enabled() -> bool:
    """Whether this command uses the user cache (`--no-cache` or OPTRACE_NO_CACHE=1: not)."""
    return _enabled[0]


def reset_enabled() -> None:
    """Back to what the process started with (the end of a command that set it)."""
    _enabled[0] = (_NO_CACHE_AT_START or "") in ("", "0")
    if _NO_CACHE_AT_START is None:
        os.environ.pop("OPTRACE_NO_CACHE", None)
    else:
        os.environ["OPTRACE_NO_CACHE"] = _NO_CACHE_AT_START


def cache_dir() -> Path:
    """`$XDG_CACHE_HOME/optrace`, else `~/.cache/optrace`: the user cache's directory."""
    return cache_root()


def _sqlite(db: Path, timeout: float = 30) -> sqlite3.Connection:
    """A connection to the store `db`; refused (sqlite3.OperationalError, which every
    caller takes as a store it cannot use) when the file or a journal SQLite would write
    beside it is a link or a second name of another file: SQLite follows them, and a
    link planted in the cache would have optrace's tables written into another database."""
    if not all(own_file(f"{db}{suffix}") for suffix in ("", "-wal", "-shm", "-journal")):
        raise sqlite3.OperationalError(f"{db}: not a file of the cache's own (a link)")
    return sqlite3.connect(db, timeout=timeout, isolation_level=None)


def store_bound() -> int:
    """The bytes the store may take: half of the user cache's bound."""
    return limit("cache") // 2


def _check(kind: str, sha: str, value: str) -> str:
    return _check_bytes(kind, sha, value.encode("utf-8", "surrogateescape"))


def _check_bytes(kind: str, sha: str, value: bytes) -> str:
    """A row's checksum, of its value's UTF-8 bytes (a value read as text: `_check`)."""
    head = f"{_SCHEMA}\0{kind}\0{sha}\0".encode("utf-8", "surrogateescape")
    return hashlib.sha256(head + value).hexdigest()[:16]


def _connect_store(db: Path) -> sqlite3.Connection:
    """A connection to the store `db` with its tables made (those an earlier optrace's store
    lacks included)."""
    con = _sqlite(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE IF NOT EXISTS paths (path TEXT PRIMARY KEY, size INTEGER, mtime INTEGER, "
                "ctime INTEGER, ino INTEGER, sha TEXT)")
    con.execute("CREATE TABLE IF NOT EXISTS vals (sha TEXT, kind TEXT, value TEXT, chk TEXT, "
                "PRIMARY KEY (sha, kind))")
    # The folders walked whole, with when (ns): what the size bound removes by.
    con.execute("CREATE TABLE IF NOT EXISTS roots (root TEXT PRIMARY KEY, used INTEGER)")
    # Per folder, the repository index's last state and the digest of the paths and
    # stat signatures it was taken under (`keep_state`, `stored_state`).
    con.execute("CREATE TABLE IF NOT EXISTS states (root TEXT PRIMARY KEY, sigs TEXT, state TEXT, "
                "chk TEXT)")
    # Per folder, what the index's last walk of it found, and by which rules
    # (`keep_state`, `stored_listing`).
    con.execute("CREATE TABLE IF NOT EXISTS walks (root TEXT PRIMARY KEY, folders TEXT, paths TEXT, "
                "rules TEXT, chk TEXT)")
    # Per folder and kind, every value of that kind its files' contents have, as one JSON
    # object (content hash -> value): what `_load_values` reads instead of a row a file.
    con.execute("CREATE TABLE IF NOT EXISTS packs (root TEXT, kind TEXT, value TEXT, chk TEXT, "
                "PRIMARY KEY (root, kind))")
    # Per folder and kind, a table derived from every file of the index, with the key
    # (the index's state) it holds for (`keep_table`, `stored_table`): the latest.
    con.execute("CREATE TABLE IF NOT EXISTS tables (root TEXT, kind TEXT, key TEXT, value TEXT, "
                "chk TEXT, PRIMARY KEY (root, kind))")
    return con


_UNSEEN = object()


class ContentStore:
    """Values derived from files' bytes, by content hash; see the module's docstring.

    `derived(path, kind, derive)` answers from the store when it can, else reads the file
    once (`read`), calls `derive(bytes or None)` and keeps the answer for `flush`."""

    def __init__(self, db: Path | None, read: Callable[[Path], bytes | None],
                 under: Path | None = None, unpacked: frozenset[str] = frozenset()) -> None:
        self.db = db
        # Kinds never kept as a pack (`_read_pack`): asked of every file only where a table
        # kept for the whole folder does not answer, so a pack would double the store.
        self._unpacked = unpacked
        # Only rows of files under this folder are loaded (None: all). The store holds
        # every repository and scratch copy a user ever indexed (a corpus run adds ~10k
        # rows per copy): loading them all cost 0.6 s a command at 150k rows.
        self.under = under
        self._con: sqlite3.Connection | None = None  # read-only lookups past the load
        self._read = read
        self._paths: dict[str, tuple[Signature, str]] = {}
        self._values: dict[tuple[str, str], str] = {}
        self._new_paths: dict[str, tuple[Signature, str]] = {}
        self._new_values: dict[tuple[str, str], str] = {}
        # Files hashed this run whose signature may not tell a later change (`RACY_NS`).
        self._racy: set[str] = set()
        self.hits = 0
        self.misses = 0
        # The content hash (None: no such file) this run first found for each path it was
        # asked of, and how many times a path has since been found with another: a result
        # derived while this count stayed the same saw each file as one set of bytes.
        self._seen: dict[str, str | None] = {}
        self.changes = 0
        # The files whose bytes this store read, or whose signature it took by a `stat` of
        # its own (not one its caller passed): what it answered of them may be of bytes a
        # state taken earlier does not stand for (`RepoIndex.state_holds`). The rest it
        # answered from the rows under signatures its caller took.
        self.unsure: set[str] = set()
        # Signatures taken in the current `reading_only` phase (and which phase that is).
        self._phase: Phase | None = None
        # (signature, time.time_ns() just before its stat), by path.
        self._phase_sigs: dict[str, tuple[Signature, int]] = {}
        # The folder's values are loaded at the first question that needs one: a lookup
        # the user cache answers asks only for content hashes (`current_sha`), and on a
        # large repository the values (every file's words) were most of what it loaded.
        self._values_query: tuple[str, tuple[str, ...]] | None = None
        self._kinds_loaded: set[str] = set()  # the kinds `_load_values` has loaded
        # Kinds whose pack (the folder's values of the kind in one row) is to be written
        # again by the next flush: none was read, or a value was derived since.
        self._pack_stale: set[str] = set()
        if db is not None:
            self._load(db)
        # No row of the folder's files was stored: a first run over it (`current_sha`'s
        # `also`). Its values query still runs later, once the state's flush has written
        # the folder's paths: a copy's files then find the values another folder derived.
        self._first_run = not self._paths

    @classmethod
    def open(cls, read: Callable[[Path], bytes | None], name: str = "index",
             under: Path | None = None, unpacked: frozenset[str] = frozenset()) -> ContentStore:
        """The store `<cache dir>/<name>.sqlite`, or one in memory when the cache is off.
        `under`: the folder whose files will be asked for (others are derived again);
        `unpacked`: kinds whose values are looked up a row a file, never packed."""
        return cls(cache_dir() / f"{name}.sqlite" if _enabled[0] else None, read, under, unpacked)

    def _connect(self, db: Path) -> sqlite3.Connection:
        return _connect_store(db)

    def _load(self, db: Path) -> None:
        if not db.exists():
            return
        if self.under is not None and not _storable(os.fsdecode(self.under)):
            return  # a folder named in bytes that are not UTF-8: none of its rows is stored
        try:
            con = self._connect(db)
            try:
                if self.under is None:
                    paths = con.execute("SELECT * FROM paths")
                    vals = "SELECT * FROM vals WHERE kind = ?"
                    args: tuple[str, ...] = ()
                else:
                    # Paths from "<under>/" up to "<under>0" ('0' follows '/'): the
                    # folder's files, by the primary key's order, and the values they use.
                    lo = os.fsdecode(self.under).rstrip("/") + "/"
                    args = (lo, lo[:-1] + "0")
                    paths = con.execute("SELECT * FROM paths WHERE path >= ? AND path < ?", args)
                    vals = ("SELECT * FROM vals WHERE kind = ? AND sha IN "
                            "(SELECT sha FROM paths WHERE path >= ? AND path < ?)")
                for path, size, mtime, ctime, ino, sha in paths:
                    if isinstance(path, str) and isinstance(sha, str):
                        self._paths[path] = ((size, mtime, ctime, ino), sha)
                self._values_query = (vals, args)
            finally:
                con.close()
        except sqlite3.Error:  # not a database, or a damaged one: set aside, rebuilt
            self._paths.clear()
            self._values_query = None
            self._discard(db)

    def _loaded(self, kind: str) -> bool:
        """Whether the folder's values of `kind` are loaded (or none are to be)."""
        return self._values_query is None or kind in self._kinds_loaded

    def _load_values(self, kind: str) -> None:
        """The values of `kind` of the folder's files, once (see `_values_query`): a kind
        at a time, as a question first needs it. A plan answered by the words' table
        (`RepoIndex._words_table`) asks for no file's words, which are most of the store's
        bytes (11 MB on ops-nn). A value is kept under its content hash with a
        checksum, so one loaded after another run wrote is as good as one loaded with
        the paths; one that fails its checksum, or a database that cannot be read now,
        is derived again."""
        if self._loaded(kind) or self.db is None:
            return
        assert self._values_query is not None
        query, args = self._values_query
        self._kinds_loaded.add(kind)
        if self.under is not None and kind not in self._unpacked:
            packed = self._read_pack(kind)
            if packed is not None:
                for sha, value in packed.items():
                    self._values.setdefault((sha, kind), value)
                return
            self._pack_stale.add(kind)
        try:
            con = _sqlite(self.db)
            try:
                for sha, of, value, chk in con.execute(query, (kind, *args)):
                    if isinstance(value, str) and chk == _check(of, sha, value):
                        self._values.setdefault((sha, of), value)  # else corrupt: derived again
            finally:
                con.close()
        except sqlite3.Error:
            return  # read as missing: derived again, stored by the next flush

    def _read_pack(self, kind: str) -> dict[str, str] | None:
        """The folder's pack of `kind` (content hash -> value); None: none kept, one that
        fails its checksum or is not such an object, or a store that cannot be read. A
        row for every value of a kind the folder's files have, one read: looking each up
        through the folder's paths (~30k rows on ops-nn) cost 0.1-0.2 s a kind."""
        key = _root_key(self.under) if self.under is not None else None
        if key is None or self.db is None:
            return None
        try:
            con = _sqlite(self.db)
            try:
                row = con.execute("SELECT value, chk FROM packs WHERE root = ? AND kind = ?",
                                  (key, kind)).fetchone()
            finally:
                con.close()
        except sqlite3.Error:
            return None
        if row is None or not isinstance(row[0], str) or row[1] != _check("pack " + kind, key, row[0]):
            return None
        try:
            packed = json.loads(row[0])
        except ValueError:
            return None
        if not isinstance(packed, dict) or not all(isinstance(v, str) for v in packed.values()):
            return None
        return packed

    def _packs(self) -> list[tuple[str, str, str, str]]:
        """The rows of the packs to write again (`_pack_stale`): each kind's values of the
        contents the folder's files have now (this run's rows and the loaded ones)."""
        key = _root_key(self.under) if self.under is not None else None
        if key is None or not self._pack_stale:
            return []
        shas = {sha for _, sha in self._paths.values()} | {sha for _, sha in self._new_paths.values()}
        by_kind: dict[str, dict[str, str]] = {kind: {} for kind in self._pack_stale}
        for values in (self._values, self._new_values):
            for (sha, kind), value in values.items():
                if kind in by_kind and sha in shas:
                    by_kind[kind][sha] = value
        rows = []
        for kind, packed in sorted(by_kind.items()):
            text = json.dumps(packed, sort_keys=True, separators=(",", ":"))
            if _storable(text) and _storable(kind):
                rows.append((key, kind, text, _check("pack " + kind, key, text)))
        return rows

    def _stored_value(self, sha: str, kind: str) -> str | None:
        """The value kept for a content hash the load left out (only a folder's rows are
        loaded): a file copied or moved from elsewhere is read and hashed, not derived."""
        if self.db is None or not self.db.exists():
            return None
        try:
            if self._con is None:
                self._con = _sqlite(self.db)
            row = self._con.execute("SELECT value, chk FROM vals WHERE sha = ? AND kind = ?",
                                    (sha, kind)).fetchone()
        except sqlite3.Error:
            return None
        if row is None or not isinstance(row[0], str) or row[1] != _check(kind, sha, row[0]):
            return None
        self._values[(sha, kind)] = row[0]
        return row[0]

    @staticmethod
    def _discard(db: Path) -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.unlink(f"{db}{suffix}")
            except OSError:
                pass

    def current_sha(self, path: Path, st: os.stat_result | None = None,
                    also: tuple[tuple[str, Callable[[bytes | None], str]], ...] = (),
                    taken_ns: int | None = None) -> str | None:
        """The file's content hash now ("-": unreadable or too large; None: no such
        file), without deriving anything: a file whose signature is unchanged is not read.
        What a cache lookup asks of every file a result rests on.

        `also` (kinds and how to derive each): for a file read now whose content has no such
        value yet, in a folder with no stored values (a first run over it), derived from
        the bytes just read: the search after the miss would read and hash every file
        again to derive it (a cold run read each file of the repository twice).

        `st` with `taken_ns` (a time before that `stat`): the file's `stat` taken by the
        caller, in a `reading_only` phase its signature for the phase unless the phase
        has one already (the repository index's state stats every file first)."""
        known = self._current(path, st, taken_ns)
        if known is None:
            return None
        sha, data, read, _ = known
        # Not while a stored folder's values are still to be loaded: a lookup that reads a
        # file (a recent edit) would load them all to see whether its content is known,
        # the cost a lookup the cache answers does not pay (`_values_query`).
        if also and read and (self._first_run or all(self._loaded(kind) for kind, _ in also)):
            for kind, derive in also:
                key = (sha, kind)
                if key in self._new_values or key in self._values:
                    continue
                if self.under is not None and self._stored_value(sha, kind) is not None:
                    continue  # a copy's file: the value another folder derived
                self.misses += 1
                self._new_values[key] = derive(data)
        return sha

    def _current(self, path: Path, st: os.stat_result | None,
                 taken_ns: int | None = None) -> tuple[str, bytes | None, bool, Signature] | None:
        """(content hash, the bytes if read now, whether read, signature), the row
        refreshed when the signature changed; None when the file cannot be stat-ed. In a
        `reading_only` phase the file's signature is taken once for the phase (`st` with
        `taken_ns`: the caller's `stat` of it, taken after that time)."""
        key = os.fsdecode(path)
        data: bytes | None = None
        read = False
        current = _phase[0]
        # The time just before the signature's stat: a write after it gets an mtime of at
        # least this, less one tick of the filesystem's clock (`_racy`).
        if current is not None and (st is None or taken_ns is not None):
            if self._phase is not current:
                self._phase, self._phase_sigs = current, {}
            known_sig = self._phase_sigs.get(key)
            if known_sig is None:
                if st is not None and taken_ns is not None:
                    known_sig = self._phase_sigs[key] = (signature(st), taken_ns)
                else:
                    taken = time.time_ns()
                    self.unsure.add(key)
                    try:
                        known_sig = self._phase_sigs[key] = (signature(os.stat(path)), taken)
                    except OSError:
                        self._saw(key, None)
                        return None
            sig, taken = known_sig
        else:
            taken = time.time_ns() if taken_ns is None or st is None else taken_ns
            if st is None or taken_ns is None:
                self.unsure.add(key)
            try:
                sig = signature(st or os.stat(path))
            except OSError:
                self._saw(key, None)
                return None
        known = self._new_paths.get(key) or self._paths.get(key)
        if known is not None and known[0] == sig:
            sha = known[1]
        else:
            self.unsure.add(key)
            data, read = self._read(path), True
            sha = hashlib.sha256(data).hexdigest() if data is not None else "-"
            self._new_paths[key] = (sig, sha)
            # Not trusted either when the file changed between its signature's `stat` and
            # this read (a `stat` after it tells): the bytes may be a later write's, and a
            # row kept under the earlier signature would give them to the state that
            # signature stands for (another run's too, a state taken from it included).
            if _racy(sig, taken) or not _still(path, sig):
                self._racy.add(key)
            else:
                self._racy.discard(key)
        self._saw(key, sha)
        return sha, data, read, sig

    def _saw(self, key: str, sha: str | None) -> None:
        seen = self._seen.get(key, _UNSEEN)
        if seen is _UNSEEN:
            self._seen[key] = sha
        elif seen != sha:
            self._seen[key] = sha
            self.changes += 1

    def derived(self, path: Path, kind: str, derive: Callable[[bytes | None], str],
                st: os.stat_result | None = None, taken_ns: int | None = None) -> str:
        """`derive(bytes)` of the file, from the store when its content was seen. In a
        `reading_only` phase the file's signature is taken once for the phase (`st` with
        `taken_ns`: as `current_sha` takes them)."""
        known = self._current(path, st, taken_ns)
        if known is None:
            return derive(None)
        sha, data, read, sig = known
        key = os.fsdecode(path)
        value = self._found(sha, kind, read)
        if value is not None:
            self.hits += 1
            return value
        if not read:
            self.unsure.add(key)
            data = self._read(path)
            fresh = hashlib.sha256(data).hexdigest() if data is not None else "-"
            if fresh != sha:
                # Changed since its signature was taken (a phase's signature is taken once;
                # or a rewrite within its tick): what is derived now is of these bytes and
                # is kept under their hash, never the old one, and the row is not trusted.
                sha = fresh
                self._new_paths[key] = (sig, sha)
                self._racy.add(key)
                self._saw(key, sha)
                value = self._found(sha, kind, True)
                if value is not None:
                    self.hits += 1
                    return value
        self.misses += 1
        value = derive(data)
        self._new_values[(sha, kind)] = value
        if kind not in self._unpacked:
            self._pack_stale.add(kind)
        return value

    def _found(self, sha: str, kind: str, read: bool) -> str | None:
        """The value derived of this content before, this run's or the store's."""
        value = self._new_values.get((sha, kind))
        if value is None:
            self._load_values(kind)
            value = self._values.get((sha, kind))
        if value is None and read and self.under is not None:
            value = self._stored_value(sha, kind)  # a content seen under another folder
        return value

    def signature_of(self, path: Path) -> Signature | None:
        """The stat signature under which the store holds the file's content hash (this
        run's, or a row loaded from the cache); None: neither."""
        key = os.fsdecode(path)
        known = self._new_paths.get(key) or self._paths.get(key)
        return known[0] if known is not None else None

    def racy(self, path: Path) -> bool:
        """Whether the file was hashed this run within its timestamp's tick (`RACY_NS`):
        its signature may not tell a later write."""
        return os.fsdecode(path) in self._racy

    def keep_state(self, root: Path, signatures: str, state: str,
                   listing: tuple[str, str, str] | None = None) -> None:
        """Keep `state`, a digest the repository index took of the folder `root`, as what
        the folder's files have while their paths and stat signatures digest to
        `signatures` (`stored_state` gives it back); and `listing`, what its walk found
        (the folders listed with their signatures, the paths kept, the walk's rules:
        `stored_listing`). One row of each per folder: the latest."""
        key = _root_key(root)
        if self.db is None or key is None:
            return
        try:
            con = self._connect(self.db)
            try:
                con.execute("BEGIN IMMEDIATE")
                con.execute("INSERT OR REPLACE INTO states VALUES (?, ?, ?, ?)",
                            (key, signatures, state, _check("state", signatures, state)))
                if listing is not None and all(_storable(part) for part in listing):
                    folders, paths, rules = listing
                    chk = _check("listing", folders, paths + "\0" + rules)
                    con.execute("INSERT OR REPLACE INTO walks VALUES (?, ?, ?, ?, ?)",
                                (key, folders, paths, rules, chk))
                con.execute("COMMIT")
            finally:
                con.close()
        except sqlite3.Error:
            return  # only slower next time

    def sha_of(self, path: Path | str) -> str | None:
        """The content hash the store holds for the file: this run's, or a row loaded from the
        cache (None: neither; "-": unreadable)."""
        key = os.fsdecode(path)
        known = self._new_paths.get(key) or self._paths.get(key)
        return known[1] if known is not None else None

    def flush(self, seen_under: tuple[Path, set[str]] | None = None) -> None:
        """Write what this run derived, in one transaction. `seen_under` (a root and
        the paths walked under it): rows of files under it that are gone are dropped,
        and values no path refers to any more."""
        if self._con is not None:
            self._con.close()  # reopened by the next lookup that needs it
            self._con = None
        if self.db is None or not (self._new_paths or self._new_values or seen_under or self._pack_stale):
            return
        try:
            self.db.parent.mkdir(parents=True, exist_ok=True)
            con = self._connect(self.db)
            try:
                con.execute("BEGIN IMMEDIATE")
                # A name or value that is not valid Unicode (a file named in bytes) is
                # not stored: SQLite's text is UTF-8. It is derived again on each run.
                # A racy file's row (`RACY_NS`) carries a ctime no file has: the next
                # run's signature of it differs, so it is read and hashed again.
                con.executemany("INSERT OR REPLACE INTO paths VALUES (?, ?, ?, ?, ?, ?)",
                                [(p, sig[0], sig[1], -1 if p in self._racy else sig[2], sig[3], sha)
                                 for p, (sig, sha) in self._new_paths.items() if _storable(p)])
                con.executemany("INSERT OR REPLACE INTO vals VALUES (?, ?, ?, ?)",
                                [(sha, kind, v, _check(kind, sha, v))
                                 for (sha, kind), v in self._new_values.items() if _storable(v)])
                prefix = None
                if seen_under is not None:
                    root, seen = seen_under
                    prefix = os.fsdecode(root).rstrip("/") + "/"
                    gone = [p for p in self._paths if p.startswith(prefix) and p not in seen]
                    con.executemany("DELETE FROM paths WHERE path = ?", [(p,) for p in gone if _storable(p)])
                    if gone:
                        con.execute("DELETE FROM vals WHERE sha NOT IN (SELECT sha FROM paths)")
                    if _storable(prefix):
                        con.execute("INSERT OR REPLACE INTO roots VALUES (?, ?)", (prefix, time.time_ns()))
                con.executemany("INSERT OR REPLACE INTO packs VALUES (?, ?, ?, ?)", self._packs())
                con.execute("COMMIT")
                # The folder kept past the bound is this store's own, whichever flush
                # goes past it: a flush of values alone (the sources' include names an
                # operator with a header outside its folder derives: 13k rows on ops-nn)
                # had shrunk the folder being searched away, so every run began cold.
                if prefix is None and self.under is not None:
                    prefix = os.fsdecode(self.under).rstrip("/") + "/"
                try:
                    if _used_bytes(con) > store_bound():
                        _shrink(con, prefix if prefix and _storable(prefix) else None,
                                store_bound() * 3 // 4)
                except sqlite3.Error:
                    pass  # another run holds it: what this run wrote stands, the next shrinks
            finally:
                con.close()
        except (sqlite3.Error, OSError):
            return  # a cache that cannot be written is only slower next time
        self._paths.update(self._new_paths)
        self._values.update(self._new_values)
        self._new_paths.clear()
        self._new_values.clear()
        self._racy.clear()
        self._pack_stale.clear()


def _used_bytes(con: sqlite3.Connection) -> int:
    """The bytes the database's pages hold (free pages left by deletions not counted)."""
    pages = con.execute("PRAGMA page_count").fetchone()[0]
    free = con.execute("PRAGMA freelist_count").fetchone()[0]
    size: int = con.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def _shrink(con: sqlite3.Connection, keep: str | None, target: int) -> None:
    """Remove rows until the pages in use are at most `target` bytes, in the order the
    module's docstring gives, then compact the file. The folder this run indexed (`keep`)
    and any folder recorded inside it or around it are kept: their rows are this run's.
    Each step reads the recorded folders again inside its transaction (another run may
    have recorded or refreshed one since); a database another run holds longer than a
    second makes this run stop where it is: the next one goes on."""
    con.execute("PRAGMA busy_timeout = 1000")

    def ours(root: str) -> bool:
        return keep is not None and (keep.startswith(root) or root.startswith(keep))

    strays_done = False
    changes = con.total_changes
    while _used_bytes(con) > target:
        con.execute("BEGIN IMMEDIATE")
        try:
            roots = [r for (r,) in con.execute("SELECT root FROM roots ORDER BY used, root")
                     if isinstance(r, str) and r.endswith("/")]
            others = [r for r in roots if not ours(r)]
            dead = [r for r in others if not os.path.isdir(r)]
            if dead:
                victims: list[str] | None = dead
            elif not strays_done:  # rows under no recorded folder
                victims, strays_done = None, True
            elif others:
                victims = others[:1]
            else:
                con.execute("COMMIT")
                break  # only this run's folder is left: kept, over the bound if it must
            if victims is None:
                known = tuple(roots)
                stray = [(p,) for (p,) in con.execute("SELECT path FROM paths")
                         if not (isinstance(p, str) and p.startswith(known))]
                con.executemany("DELETE FROM paths WHERE path = ?", stray)
            else:
                for root in victims:
                    con.execute("DELETE FROM paths WHERE path >= ? AND path < ?", (root, root[:-1] + "0"))
                    con.execute("DELETE FROM roots WHERE root = ?", (root,))
                    con.execute("DELETE FROM states WHERE root = ?", (root,))
                    con.execute("DELETE FROM walks WHERE root = ?", (root,))
                    con.execute("DELETE FROM tables WHERE root = ?", (root,))
                    con.execute("DELETE FROM packs WHERE root = ?", (root,))
            con.execute("DELETE FROM vals WHERE sha NOT IN (SELECT sha FROM paths)")
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:  # SQLite may have rolled back already (a full disk)
                con.execute("ROLLBACK")
            raise
    if con.total_changes > changes:  # rows went (a folder kept over the bound alone: no
        # compaction at every flush, a VACUUM rewrites the whole file)
        con.execute("VACUUM")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")


# How old a folder's `used` time may be before a lookup answered by `stored_state`
# refreshes it (the size bound removes the folders used least recently first): a write
# on every lookup would cost the disk's sync each time.
_USED_REFRESH_NS = 3600 * 1_000_000_000


def _root_key(root: Path) -> str | None:
    """A folder as the `roots` and `states` tables name it; None if SQLite cannot hold it."""
    key = os.fsdecode(root).rstrip("/") + "/"
    return key if _storable(key) else None


def _stored_row(root: Path, query: str, *more: str,
                as_bytes: bool = False) -> tuple[str, tuple[object, ...] | None] | None:
    """The folder's key and the row `query` selects for it (None: no such row); None
    with the cache off, or when the store cannot be read (no such table: a store of an
    earlier optrace; a damaged file). Opens the store's file alone, loading none of its
    rows: a lookup the user cache answers asks nothing else of it."""
    key = _root_key(root)
    db = cache_dir() / "index.sqlite"
    if not _enabled[0] or key is None or not db.is_file():
        return None
    try:
        con = _sqlite(db)
        if as_bytes:
            con.text_factory = bytes  # TEXT as its UTF-8 bytes, not decoded
        try:
            row = con.execute(query, (key, *more)).fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return key, row


class StoredHashes:
    """The content hash the store's row holds for a file, asked of a few files without a
    store opened: `ContentStore` loads every row of the folder first (~30k on ops-nn,
    ~0.1 s), which a plan answered from the tables never needs. None: no row, the cache
    off, or a store that cannot be read."""

    def __init__(self) -> None:
        self._con: sqlite3.Connection | None = None
        self._unusable = False

    def get(self, path: str) -> str | None:
        if self._unusable or not _enabled[0]:
            return None
        try:
            if self._con is None:
                db = cache_dir() / "index.sqlite"
                if not db.is_file():
                    self._unusable = True
                    return None
                self._con = _sqlite(db)
            row = self._con.execute("SELECT sha FROM paths WHERE path = ?", (path,)).fetchone()
        except sqlite3.Error:  # no such table (an earlier optrace's store), a damaged file
            self._unusable = True
            return None
        return row[0] if row is not None and isinstance(row[0], str) else None


def _refresh_used(key: str) -> None:
    """Mark the folder used now, where its mark is older than `_USED_REFRESH_NS`: a run
    that took its state from the store walked it as much as one that hashed it. Never
    waits on another run's write (the mark only orders what the size bound removes)."""
    try:
        con = _sqlite(cache_dir() / "index.sqlite", timeout=0)
        try:
            used = con.execute("SELECT used FROM roots WHERE root = ?", (key,)).fetchone()
            if used is None or not isinstance(used[0], int) or used[0] < time.time_ns() - _USED_REFRESH_NS:
                con.execute("INSERT OR REPLACE INTO roots VALUES (?, ?)", (key, time.time_ns()))
        finally:
            con.close()
    except sqlite3.Error:
        pass  # busy, or read-only: the next run marks it


def stored_state(root: Path, signatures: str) -> str | None:
    """The repository index's state kept for the folder `root` (`keep_state`) when its
    files' paths and signatures digest to `signatures` now; None otherwise, or with the
    cache off, or when the store cannot be read."""
    found = _stored_row(root, "SELECT sigs, state, chk FROM states WHERE root = ?")
    if found is None:
        return None
    key, row = found
    if (row is None or row[0] != signatures or not isinstance(row[0], str) or not isinstance(row[1], str)
            or row[2] != _check("state", row[0], row[1])):
        return None
    _refresh_used(key)
    return row[1]


def stored_table(root: Path, kind: str, key: str) -> str | None:
    """The table of `kind` kept for the folder `root` under `key` (`keep_table`; "": the
    key alone was kept); None when the one kept is another key's, fails its checksum, or
    none is kept, or with the cache off, or when the store cannot be read."""
    found = _stored_row(root, "SELECT kind, key, value, chk FROM tables WHERE root = ? AND kind = ?", kind)
    row = found[1] if found is not None else None
    if row is None or row[0] != kind or row[1] != key or not isinstance(row[2], str):
        return None
    if row[3] != _check("table " + kind, key, row[2]):
        return None
    return row[2]


def stored_table_bytes(root: Path, kind: str, key: str) -> bytes | None:
    """`stored_table` as the value's UTF-8 bytes: a large table (every searchable file's
    words, ~12 MB on ops-nn) is searched in them for the few keys a plan asks, not decoded
    and encoded again for its checksum whole (~45 ms)."""
    found = _stored_row(root, "SELECT kind, key, value, chk FROM tables WHERE root = ? AND kind = ?", kind,
                        as_bytes=True)
    row = found[1] if found is not None else None
    if row is None or row[0] != kind.encode() or row[1] != key.encode() or not isinstance(row[2], bytes):
        return None
    if row[3] != _check_bytes("table " + kind, key, row[2]).encode():
        return None
    return row[2]


def keep_table(root: Path, kind: str, key: str, value: str) -> None:
    """Keep `value`, a table of `kind` derived from the files of the folder `root`, as what
    they give while the folder's index has the state `key` (`stored_table`). One per folder
    and kind: the latest. Nothing is kept with the cache off, or where the store cannot be
    written (the next run derives it again)."""
    root_key = _root_key(root)
    db = cache_dir() / "index.sqlite"
    if not _enabled[0] or root_key is None or not (_storable(kind) and _storable(key) and _storable(value)):
        return
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        con = _connect_store(db)
        try:
            con.execute("INSERT OR REPLACE INTO tables VALUES (?, ?, ?, ?, ?)",
                        (root_key, kind, key, value, _check("table " + kind, key, value)))
        finally:
            con.close()
    except (sqlite3.Error, OSError):
        return  # only slower next time


def stored_listing(root: Path) -> tuple[str, str, str] | None:
    """What the index's last walk of `root` found (`keep_state`'s `listing`): its folders,
    a line each (`<size> <mtime> <ctime> <inode>` or `-`, a NUL, the path), the paths it
    kept, a line each, and the walk's rules; None when none is kept, it fails its
    checksum, the cache is off or the store cannot be read."""
    found = _stored_row(root, "SELECT folders, paths, rules, chk FROM walks WHERE root = ?")
    row = found[1] if found is not None else None
    if row is None:
        return None
    folders, paths, rules, chk = row
    if not (isinstance(folders, str) and isinstance(paths, str) and isinstance(rules, str)) or not folders:
        return None
    if chk != _check("listing", folders, paths + "\0" + rules):
        return None
    return folders, paths, rules


def _storable(text: str) -> bool:
    """Text SQLite can hold: no lone surrogates (bytes a file name or file held that are
    not UTF-8, decoded with surrogateescape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
