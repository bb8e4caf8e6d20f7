"""Reading input files optrace did not make: only regular files, and only up to a bound.

A FIFO, device, socket or directory where a header, source, rank file, point map, config
or trace is expected is never read (reading a FIFO blocks until a writer comes, a device
may never end): it is opened without blocking, checked on the open descriptor (no race
with a rename) and refused as ``path: not a regular file``. A file past the bound of its
kind is refused before a byte is read. The bounds are the user's to set, in the
user-level config only (``[limits]`` of ``$XDG_CONFIG_HOME/optrace/config.toml``) — never
the repository's, which a clone brings.

This module is the runtime's and the engine's (engine/source.py, engine/config.py read
through it; pyproject's import contracts allow exactly those two imports): both read
files that came from someone else.
"""

from __future__ import annotations

import errno
import gzip
import io
import json
import math
import mmap
import os
import re
import stat
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

MiB = 1 << 20
GiB = 1 << 30

#: Default bound per kind of input, in bytes (docs/faults.md lists them). Generous: a
#: real generated header is 10-20 MB, a rank file of a large run a few GB, a JSON trace
#: past 256 MB is already too big for chrome://tracing.
DEFAULT_LIMITS: dict[str, int] = {
    "source": 64 * MiB,  # headers, kernels, host sources, Python callers
    "config": 1 * MiB,  # optrace.toml, pyproject.toml, the user-level config.toml
    "point_map": 256 * MiB,
    "rank": 32 * GiB,  # rank*.pt (read in slices, never whole)
    "trace": 8 * GiB,  # .json / .json.gz / .pftrace given to report, compare, inspect
    # the whole user cache directory (runtime/usercache.py), and so each entry: ops-nn's
    # index alone is ~35 MB (half the bound is the index's), so two clones of a repository
    # that size do not push each other out at every run, as they did under 64 MiB
    "cache": 256 * MiB,
}

#: The largest value a `[limits]` entry takes (a larger one is taken as this): a read
#: asks for a bound plus one byte, and a size times the gzip ratio must stay a read's.
LIMIT_MOST = 2**40

_GZIP_PIECE = 1 << 30  # what one read of a gzipped input expands at most

#: A gzipped input expands to at most this many times its own size (`[limits] gzip_ratio`),
#: whatever its kind's bound: deflate expands up to a thousand times, and parsed as JSON
#: each expanded byte can cost 25 bytes of memory (a `{},` is an empty dict) — an 85 KB
#: `.json.gz` took 2.2 GB. At 64 the worst 85 KB costs about 200 MB; optrace's own gzipped
#: traces expand 10-20 times (a demo cluster's JSON 15, gzip -9 of it 22).
DEFAULT_GZIP_RATIO = 64
#: ... and to at least this much however small the file: a tiny gzip's header weighs
#: more than its content, and a MiB parses to little.
GZIP_FLOOR = 1 * MiB


class NotRegularFile(OSError):
    """Where a file was expected: a FIFO, device, socket or directory; never read."""

    def __init__(self, path: str | Path, what: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({what})", os.fspath(path))


class TooExpanded(OSError):
    """A gzip expanding to more than `[limits] gzip_ratio` times its own size: refused
    once expanded one byte past that, never whole."""

    def __init__(self, path: str | Path, size: int, most: int, ratio: int) -> None:
        super().__init__(errno.EFBIG, f"more than {most} bytes uncompressed from {size} bytes of gzip, "
                         f"past {ratio} times its size (`[limits] gzip_ratio` in {user_config_path()})",
                         os.fspath(path))


class TooLarge(OSError):
    """A file past the bound of its kind: refused before it is read."""

    def __init__(self, path: str | Path, size: int | None, kind: str, bound: int, what: str = "") -> None:
        # size None: a read stopped one byte past the bound (a gzip stream, a file growing
        # while read) — the whole is never read to be measured, so only "more" is known.
        amount = f"{size} bytes" if size is not None else f"more than {bound} bytes"
        super().__init__(errno.EFBIG, f"{amount}{what}, past the {bound}-byte bound for a {kind} "
                         f"file (`[limits] {kind}_bytes` in {user_config_path()})", os.fspath(path))


def user_config_path() -> Path:
    """The user-level config: `$XDG_CONFIG_HOME/optrace/config.toml`, else
    `~/.config/optrace/config.toml` (a relative XDG_CONFIG_HOME is ignored)."""
    return Path(_config_path_str())


_config_path: tuple[tuple[str | None, str | None], str] | None = None


def _config_path_str() -> str:
    # Asked before every read (a repository search reads thousands of files): worked out
    # again only when the variables it depends on change.
    global _config_path
    key = (os.environ.get("XDG_CONFIG_HOME"), os.environ.get("HOME"))
    if _config_path is None or _config_path[0] != key:
        base = key[0] or ""
        if not os.path.isabs(base):
            base = os.path.join(os.path.expanduser("~"), ".config")
        _config_path = (key, os.path.join(base, "optrace", "config.toml"))
    return _config_path[1]


#: While a command runs (:func:`track_files_read`), every file this process read through
#: this module: its identity (device, inode) -> the path it was read as. An output of the
#: command must never be one of them (runtime/atomic.py): whatever a command reads — a
#: host layer found anywhere in the repository, a config, a header — is a source, and a
#: `-o` / `--patch` / `--graph` naming it would lose it. None outside a command: a library
#: caller (a training script saving rank files, a test) reads and rewrites its own files.
_read: dict[tuple[int, int], str] | None = None


#: What a file was when it was read, by its absolute spelling: device, inode, size,
#: modification and change times (the descriptor's `fstat`).
Identity = tuple[int, int, int, int, int]

_identities = threading.local()


def spelled_absolute(path: str) -> str:
    """`path` made absolute as the system will follow it: `os.path.abspath` would also drop
    `x/..` by its text, where the system follows `x` first (a link leads elsewhere)."""
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


@contextmanager
def noting_identities() -> Iterator[dict[str, Identity]]:
    """What each file this thread reads while the block runs was when it was read (the
    first read of each path). The user cache keeps a command's result only where every
    file it read is still that file when the result is kept: one deleted, or a folder
    above it swapped for another, after the read and before the entry is written had its
    entry say the file was absent, or other bytes, with the result of the old ones."""
    previous = getattr(_identities, "found", None)
    found: dict[str, Identity] = {}
    _identities.found = found
    try:
        yield found
    finally:
        _identities.found = previous


def identity_of(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _note_opened(st: os.stat_result, path: str | Path) -> None:
    """What the file opened at `path` is, for `noting_identities`: noted before it is
    refused (too large, not regular) too — its refusal is a result as much as its bytes."""
    found: dict[str, Identity] | None = getattr(_identities, "found", None)
    if found is not None:
        found.setdefault(spelled_absolute(os.fsdecode(path)), identity_of(st))


def _note_read(st: os.stat_result, path: str | Path) -> None:
    if _read is not None:
        _read.setdefault((st.st_dev, st.st_ino), os.fsdecode(path))


def track_files_read(on: bool) -> None:
    """A command starts (on) or ends (off): from none read. Several commands may run in
    one process (tests, library callers): an earlier one's inputs are not this one's, and
    their inodes may have been reused since."""
    global _read
    _read = {} if on else None


def file_read_as(identity: tuple[int, int]) -> str | None:
    """The path a file of this identity was read as by the command running, or None."""
    return None if _read is None else _read.get(identity)


def take_files_read() -> dict[tuple[int, int], str]:
    """What this process read so far, emptied: a worker hands it to the parent that
    writes the outputs (:func:`add_files_read`)."""
    if _read is None:
        return {}
    taken = dict(_read)
    _read.clear()
    return taken


def add_files_read(files: dict[tuple[int, int], str]) -> None:
    """Files a worker process read, as if this process had read them."""
    if _read is not None:
        for identity, path in files.items():
            _read.setdefault(identity, path)


#: Bytes read in place of a file's own, by identity: apply reads the tree it is about to
#: write with the strip and check commands' own code before it writes a byte
#: (:func:`overlaid`). Empty outside that check.
_overlay: dict[tuple[int, int], bytes] = {}


@contextmanager
def overlaid(files: dict[tuple[int, int], bytes]) -> Iterator[None]:
    """While the block runs, :func:`read_regular` of a file with one of these identities
    returns the bytes given for it instead of the file's (links and other spellings of
    the path included: the identity is the file's)."""
    if _overlay:
        raise RuntimeError("overlaid() does not nest")
    _overlay.update(files)
    try:
        yield
    finally:
        _overlay.clear()


def overlay_holds(st: os.stat_result) -> bool:
    """Whether :func:`read_regular` of the file with this stat now returns bytes given by
    :func:`overlaid` instead of the file's (a memo of what a file holds must not keep them)."""
    return bool(_overlay) and (st.st_dev, st.st_ino) in _overlay


def _what(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a file"


_cached: tuple[tuple[str, float | None], dict[str, int]] | None = None


def _limits() -> dict[str, int]:
    """The user's `[limits]` (``<kind>_bytes``, ``gzip_ratio``) over the defaults, read
    again when the user config changes."""
    global _cached
    path = _config_path_str()
    key: tuple[str, float | None]
    try:
        key = (path, os.stat(path).st_mtime)
    except OSError:
        key = (path, None)
    if _cached is None or _cached[0] != key:
        limits = {f"{name}_bytes": value for name, value in DEFAULT_LIMITS.items()}
        limits["gzip_ratio"] = DEFAULT_GZIP_RATIO
        if key[1] is not None:
            # Imported only when there is a user config to read: its import is ~4 ms of
            # the few tens a small collect takes from process start, and most users have none.
            import tomllib

            try:
                with open_regular(path, "config", bound=DEFAULT_LIMITS["config"]) as handle:
                    table = tomllib.load(handle).get("limits", {})
            except (OSError, tomllib.TOMLDecodeError):
                table = {}
            if isinstance(table, dict):
                for name in limits:
                    value = table.get(name)
                    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                        # No more than a read can ask for (2**63 - 1 bytes overflowed one):
                        # past that a bound is no bound anyway.
                        limits[name] = min(value, LIMIT_MOST)
        _cached = (key, limits)
    return _cached[1]


def limit(kind: str) -> int:
    """The bound for ``kind``: the user-level config's ``[limits] <kind>_bytes`` (a
    positive integer), else :data:`DEFAULT_LIMITS`. A broken user config is not an input
    of the command: its bad values are ignored, the defaults hold."""
    return _limits()[f"{kind}_bytes"]


def gzip_ratio() -> int:
    """How many times its own size a gzipped input may expand to: the user-level
    config's ``[limits] gzip_ratio`` (a positive integer), else :data:`DEFAULT_GZIP_RATIO`."""
    return _limits()["gzip_ratio"]


def open_regular(path: str | Path, kind: str, *, bound: int | None = None) -> BinaryIO:
    """``path`` opened for reading if it is a regular file within the bound of ``kind``
    (raises NotRegularFile / TooLarge, both OSErrors naming ``path``)."""
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        _note_opened(st, path)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, _what(st.st_mode))
        most = limit(kind) if bound is None else bound
        if st.st_size > most:
            raise TooLarge(path, st.st_size, kind, most)
        _note_read(st, path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, kind: str = "source", *, bound: int | None = None) -> bytes:
    """The bytes of ``path`` if it is a regular file within the bound of ``kind`` (or
    ``bound``): checked as :func:`open_regular` does, on the open descriptor; a file that
    grew past the bound while it was read is refused too. Plain descriptor reads: a
    repository search reads thousands of files, and a buffered file object per file cost
    three times the reading."""
    most = limit(kind) if bound is None else bound
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        _note_opened(st, path)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, _what(st.st_mode))
        if st.st_size > most:
            raise TooLarge(path, st.st_size, kind, most)
        _note_read(st, path)
        if _overlay:
            instead = _overlay.get((st.st_dev, st.st_ino))
            if instead is not None:
                if len(instead) > most:
                    raise TooLarge(path, len(instead), kind, most)
                return instead
        chunks: list[bytes] = []
        total = 0
        while total <= most:  # to the end of the file: it may have grown since the fstat
            chunk = os.read(fd, min(max(st.st_size + 1 - total, 1 << 16), most + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    if total > most:
        raise TooLarge(path, None, kind, most)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)  # b"" when empty


def check_regular(path: str | Path, kind: str) -> None:
    """Refuse ``path`` up front as :func:`open_regular` would, without reading it."""
    open_regular(path, kind).close()


# --------------------------------------------------------------------------- JSON


class BadJSON(ValueError):
    """JSON optrace will not take from someone else's file: the message says why."""


#: Longest integer literal taken: a uint64 has 20 digits; more is no count or time.
JSON_MAX_INT_DIGITS = 24


def _refuse_constant(name: str) -> Any:
    raise BadJSON(f"{name} is not a number JSON allows")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > JSON_MAX_INT_DIGITS:
        raise BadJSON(f"integer of {len(text.lstrip('-'))} digits (at most {JSON_MAX_INT_DIGITS})")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BadJSON(f"{text[:40]} is out of the float range")
    return value


#: Where a JSON text may hold a lone surrogate: only a \uD800-\uDFFF escape makes one
#: (bytes that are not UTF-8 are refused before), so a text without one is not walked.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _lone_surrogate(document: Any) -> str | None:
    """A string (or key) of ``document`` holding a lone surrogate, or None. A
    loop, not recursion: the document may be nested as deep as the parser allows."""
    stack = [document]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return value
    return None


def parse_json(text: str | bytes, *, parse_float: Callable[[str], Any] | None = None,
               text_only: bool = False) -> Any:
    """JSON someone else wrote, strictly: UTF-8, no NaN / Infinity, no number past the
    float range, integers of at most JSON_MAX_INT_DIGITS digits, nesting no deeper than
    the parser's recursion limit (~1000; optrace's own files are 5 deep). Raises BadJSON
    (a ValueError) saying which rule was broken.

    ``parse_float``: what a number with a fraction or exponent becomes (a Decimal, for
    exact timestamps), once it is known to be within the float range. ``text_only``:
    a lone surrogate in any string or key is refused too (a ``\\ud800`` escape decodes
    to one; it cannot be written as UTF-8 again). Not the default: optrace's own traces
    keep the surrogate escapes of file names that are not UTF-8."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadJSON(f"not UTF-8: {exc}") from None
    number: Callable[[str], Any] = _finite_float
    if parse_float is not None:
        exact = parse_float

        def number(literal: str) -> Any:
            _finite_float(literal)
            return exact(literal)

    try:
        document = json.loads(text, parse_constant=_refuse_constant, parse_int=_bounded_int,
                              parse_float=number)
    except json.JSONDecodeError as exc:
        raise BadJSON(str(exc)) from None
    except RecursionError:  # json's scanner counts its depth against the recursion limit
        raise BadJSON("nested too deeply") from None
    if text_only and _SURROGATE_ESCAPE.search(text):
        found = _lone_surrogate(document)
        if found is not None:
            raise BadJSON(f"string {found[:60]!r} holds a lone surrogate, not text")
    return document


def read_maybe_gzip(path: str | Path, kind: str) -> bytes:
    """A regular file's bytes, gunzipped when they start like gzip; the bound of ``kind``
    holds for the file and for what it expands to (a small .gz can expand to gigabytes),
    and so does ``[limits] gzip_ratio`` times the file's size (:data:`DEFAULT_GZIP_RATIO`)."""
    data = read_regular(path, kind)
    if data[:2] != b"\x1f\x8b":
        return data
    most = limit(kind)
    ratio = gzip_ratio()
    allowed = min(most, max(ratio * len(data), GZIP_FLOOR))
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            # One byte past the bound tells "too big" without expanding the rest: a few
            # KB of gzip can expand to gigabytes. A read sets what it asks for aside
            # first, however little the file holds (a bound of 2**40 failed every read):
            # past a piece, the rest in pieces into one buffer, whose bytes are handed
            # over without a copy (BytesIO.getvalue).
            asked = min(allowed + 1, _GZIP_PIECE)
            expanded = stream.read(asked)
            if len(expanded) == asked and asked <= allowed:
                into = io.BytesIO()
                into.write(expanded)
                del expanded
                while into.tell() <= allowed:
                    piece = stream.read(min(allowed + 1 - into.tell(), _GZIP_PIECE))
                    if not piece:
                        break
                    into.write(piece)
                expanded = into.getvalue()
    except (OSError, EOFError, zlib.error) as exc:
        raise BadJSON(f"not a readable gzip file: {exc}") from None
    if len(expanded) > allowed:
        if allowed == most:
            raise TooLarge(path, None, kind, most, " uncompressed")
        raise TooExpanded(path, len(data), allowed, ratio)
    return expanded


def map_maybe_gzip(path: str | Path, kind: str) -> bytes | mmap.mmap:
    """:func:`read_maybe_gzip`'s bytes, a plain file's mapped instead of read (checked as
    :func:`read_regular` checks it): a reader that goes through it once can let the pages
    behind it go (``madvise``), so a trace of gigabytes is never resident whole. A gzip
    file, an empty one or one the test overlay replaces is read as before.

    A mapped file cut short by another process while it is read ends this one with
    SIGBUS (docs/faults.md); optrace replaces the files it writes, never truncates them."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        _note_opened(st, path)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(path, _what(st.st_mode))
        most = limit(kind)
        if st.st_size > most:
            raise TooLarge(path, st.st_size, kind, most)
        if st.st_size == 0 or _overlay or os.pread(fd, 2, 0) == b"\x1f\x8b":
            return read_maybe_gzip(path, kind)
        _note_read(st, path)
        return mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


#: What is let go of a mapped file behind a read: whole pages, a few MB at a time.
_LET_GO = 1 << 22


def let_go(data: bytes | mmap.mmap, dropped: int, offset: int) -> int:
    """A mapped file's pages from ``dropped`` to before ``offset`` dropped from this
    process (read again from the page cache if ever touched), so a file read once from
    start to end is never resident whole (:func:`map_maybe_gzip`); bytes are kept.
    Returns where the pages dropped end."""
    end = offset // mmap.PAGESIZE * mmap.PAGESIZE
    if isinstance(data, mmap.mmap) and end - dropped >= _LET_GO:
        data.madvise(mmap.MADV_DONTNEED, dropped, end - dropped)
        return end
    return dropped


def load_json(path: str | Path, kind: str) -> Any:
    """:func:`parse_json` of a regular file within the bound of ``kind`` (gzip or not)."""
    return parse_json(read_maybe_gzip(path, kind))
