"""The user's cache directory: what optrace derived once and may take again, as data.

`$XDG_CACHE_HOME/optrace` (an absolute XDG_CACHE_HOME only, as the XDG spec says), else
`~/.cache/optrace`. It is user state: never inside a repository, never committed, safe to
delete at any time (`rm -rf ~/.cache/optrace`): whatever is missing is derived again.

Each user of the cache owns a *kind* (a subdirectory: `check/`, ...) and names its entries
by a hex digest it computes from what the entry depends on. An entry is one JSON document,
zlib-compressed (never pickle: a cache a CI job restored, or a shared home, is read like
any other input; compressed because an entry is mostly absolute paths, digests and a
plan's JSON, which shrink 5-8x: a whole repository's plans fit the bound, not half of
them); :func:`read_entry` gives the parsed document or None — missing, unreadable, past
the bound (compressed or expanded), not zlib, not JSON — and the caller validates the
rest (an entry of another version, another machine's or a corrupt one is ignored and
written again). Writes are atomic (a temporary file beside the entry, renamed over it):
concurrent runs each see a whole entry or none, the last writer wins. The whole directory
is kept under `[limits] cache_bytes` of the user config
(:data:`~optrace.runtime.regular.DEFAULT_LIMITS`): after a write, the entries used least
recently (their modification time, refreshed on each hit) are removed first, until they
fit in what the files at the top (the repository index's store, which bounds itself to
half) leave; an earlier version's plain `.json` entries are counted and removed alike.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

from .regular import limit, read_regular

_NAME_RE = re.compile(r"[0-9a-f]{16,128}")
_KIND_RE = re.compile(r"[a-z][a-z0-9-]{0,31}")
_SUFFIX = ".json.z"  # zlib-compressed JSON
_LEGACY_SUFFIX = ".json"  # an earlier version's entries, plain JSON: pruned, never read
#: An entry's JSON is kept, and read, only within this many times the bound (its bytes on
#: disk are within the bound itself): a plan's is a few hundred KB, and an entry that
#: would expand past it is no entry (a crafted one cannot take the memory).
EXPANDED = 4


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/optrace`, else `~/.cache/optrace` (a relative XDG_CACHE_HOME is
    ignored, as for the config and state directories)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "optrace"


# What stands for a file's bytes without reading them: size, mtime_ns, ctime_ns, inode.
# The repository index keeps each file's content hash under it (engine/index_cache.py).
Signature = tuple[int, int, int, int]


def signature(st: os.stat_result) -> Signature:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def digest(*parts: bytes) -> str:
    """SHA-256 of the parts, each length-prefixed (no two sequences of parts give the
    same bytes), as 32 hex digits (128 bits). SHA-256: most CPUs hash it in hardware
    (x86 SHA-NI, Arm's SHA2 extensions), 1.5x BLAKE2b's speed here; a check digests
    every file it read, a whole repository's when discovery searched it."""
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:32]


def own_file(path: str | Path) -> bool:
    """Whether `path`, a name optrace creates inside the cache, is absent or a regular
    file of its own: not a symbolic link, not a second name of another file (a hard link).
    Through either, a write meant for the cache would land in a file elsewhere — one a
    restored or shared cache planted (tar keeps links): the cache is data, never a way to
    make optrace write outside it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


def own_dir(path: str | Path) -> bool:
    """Whether `path`, a kind's folder inside the cache, is a folder of its own (not a
    symbolic link to one elsewhere). The cache's root itself may be a link (a `~/.cache`
    kept on another disk is common); what optrace makes below it may not."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def entry_path(kind: str, name: str) -> Path:
    """Where entry `name` of `kind` lives. Both are checked: they become a path."""
    if not _KIND_RE.fullmatch(kind) or not _NAME_RE.fullmatch(name):
        raise ValueError(f"not a cache entry name: {kind!r}/{name!r}")
    return cache_root() / kind / (name + _SUFFIX)


def read_entry(kind: str, name: str) -> Any | None:
    """The JSON document of the entry, or None when there is none to take (missing,
    unreadable, not a regular file, past the bound, not JSON). A hit refreshes the entry's
    modification time: the size bound removes the least recently used first."""
    path = entry_path(kind, name)
    if not own_dir(path.parent) or not own_file(path):
        return None  # a link planted in the cache: not an entry (and no utime through it)
    try:
        data = read_regular(path, "cache")
    except OSError:
        return None
    document = decode_entry(data, limit("cache") * EXPANDED)
    if document is None:
        return None
    try:
        os.utime(path)
    except OSError:
        pass  # a read-only cache still answers
    return document


def encode_entry(document: object) -> bytes:
    """An entry's bytes: the document as compact JSON, zlib level 1 (a millisecond for a
    plan's)."""
    return zlib.compress(_json_bytes(document), 1)


def _json_bytes(document: object) -> bytes:
    # ASCII: a path that is not UTF-8 is kept as the escapes of its surrogates
    return json.dumps(document, separators=(",", ":"), allow_nan=False).encode("ascii")


def decode_entry(data: bytes, bound: int) -> Any | None:
    """The document in an entry's bytes; None when they are not zlib, expand past
    `bound` bytes or are not JSON."""
    unpack = zlib.decompressobj()
    try:
        text = unpack.decompress(data, bound)
    except zlib.error:
        return None
    if not unpack.eof or unpack.unconsumed_tail or unpack.unused_data:
        return None  # cut short, past the bound, or more after the stream
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def write_entry(kind: str, name: str, document: object) -> bool:
    """Write the entry atomically, then keep the cache under its bound. False when it was
    not written (the directory cannot be made or written, or the entry alone is past the
    bound): the cache is an optimisation, never a reason for a command to fail."""
    path = entry_path(kind, name)
    text = _json_bytes(document)
    bound = limit("cache")
    if len(text) > bound * EXPANDED:  # what read_entry would not expand
        return False
    data = zlib.compress(text, 1)
    if len(data) > bound:
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not own_dir(path.parent):
            return False  # a link in the kind's place: the entry would be written elsewhere
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=_SUFFIX, dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        return False
    prune(bound)
    return True


#: A write's temporary file, as `write_entry` names it (tempfile's 8 characters).
_TMP_RE = re.compile(r"\.tmp-[a-z0-9_]{8}" + re.escape(_SUFFIX))
#: A temporary file older than this was left by a run that ended without its rename.
_STALE_TMP_NS = 3600 * 10**9


def _is_entry_name(name: str) -> bool:
    """An entry's file name: a digest `entry_path` accepts, with this or an earlier
    version's suffix."""
    for suffix in (_SUFFIX, _LEGACY_SUFFIX):
        if name.endswith(suffix) and _NAME_RE.fullmatch(name[: -len(suffix)]):
            return True
    return False


def prune(bound: int) -> None:
    """Remove the least recently used entries (of every kind) until the cache holds at
    most `bound` bytes. Another run removing the same entry at the same time is fine."""
    root = cache_root()
    entries: list[tuple[int, int, str]] = []
    try:
        listing = list(os.scandir(root))
        # Only a kind's folder (its name as `entry_path` checks it) and in it only entries
        # named as `entry_path` names them: the root may be a link to a folder that holds
        # other files (a build's output), and the bound is no reason to remove those.
        kinds = [e.path for e in listing if e.is_dir(follow_symlinks=False) and _KIND_RE.fullmatch(e.name)]
    except OSError:
        return
    # The repository index's store (engine/index_cache.py: `index.sqlite` and its
    # journal files) keeps itself under half the bound; entries get what it leaves,
    # and never less than the other half (a bound smaller than an empty database).
    files = 0
    for e in listing:
        try:
            if e.is_file(follow_symlinks=False):
                files += e.stat(follow_symlinks=False).st_size
        except OSError:
            continue  # gone since the listing (SQLite removes its -wal / -shm on close)
    bound -= min(files, bound // 2)
    for kind_dir in kinds:
        try:
            with os.scandir(kind_dir) as it:
                for entry in it:
                    if _is_entry_name(entry.name) and entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        entries.append((st.st_mtime_ns, st.st_size, entry.path))
                    elif _TMP_RE.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                        # A run killed between its write and its rename left it: removed
                        # once no run can still be writing it.
                        st = entry.stat(follow_symlinks=False)
                        if st.st_mtime_ns < time.time_ns() - _STALE_TMP_NS:
                            try:
                                os.unlink(entry.path)
                            except OSError:
                                pass
        except OSError:
            continue
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= bound:
            break
        try:
            os.unlink(path)
        except OSError:
            continue
        total -= size

