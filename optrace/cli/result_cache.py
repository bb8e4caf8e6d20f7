"""What a command derived from one operator, kept in the user's cache and taken back while
nothing it was derived from changed: the machinery `check`'s reports (check_cache.py) and
`plan`'s outputs (plan_cache.py) share.

An entry is a JSON document of the user cache (runtime/usercache.py, one kind per
command). It is taken only when nothing it was derived from changed:

- its *name* digests what is not a file of the repository: optrace's version and a
  fingerprint of its installed modules (size and mtime of each, so an edited checkout
  misses too), the Python version, the distributions installed on sys.path (a rule
  plugin added or upgraded), the operator directory, `--repo-root`, `--trust-config`,
  the user config's bytes, the CANN toolchain G3 reports, and the command's own options;
- the entry lists what the command read and looked at — recorded while it ran (a Python
  audit hook, per thread): the digest (SHA-256) of every file it opened for reading (kernel
  files, the headers they include, host layers, build scripts, the repository config;
  a module it imported by its source), the names in every directory it listed (a new or
  deleted file discovery would find), and whether a repository marker (`.git`,
  `optrace.toml`, `pyproject.toml`) exists in each directory above the operator; and
  where each file it read, and each path it decided by without reading (engine/probes.py:
  an include's candidates), leads — nothing there, or the path its links resolve to (a
  folder moved out of the repository behind a link keeps every byte). All of
  them are read again and compared on a lookup: one differing is a miss. A command may
  add inputs of its own that are checked the same way (plan: the repository index's
  state, which it reads before recording).

Python's own files and optrace's are left out of that list: the name covers them. A
miss runs the command as before and writes the entry again, unless a file it read was
modified while it ran. Entries are validated as any input: one that does not have exactly
the expected shape is ignored and rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import site
import stat
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Container, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple, TypeVar, cast

import optrace
from optrace import __version__
from optrace.engine import probes
from optrace.engine.core_config import METADATA_MAX_BYTES
from optrace.engine.diagnostics import InputError
from optrace.engine.discovery import (
    SEARCH_LIMIT_BYTES,
    default_repo_root,
    may_be_one_operator,
    repo_index,
    resolve_operator_dir,
)
from optrace.engine.index_cache import racy_tick
from optrace.engine.journal import state_dir
from optrace.pipeline.gate_result import cann_toolchain
from optrace.runtime.regular import (
    Identity,
    identity_of,
    limit,
    noting_identities,
    read_regular,
    user_config_path,
)
from optrace.runtime.usercache import digest, read_entry, signature, write_entry

_MARKERS = (".git", "optrace.toml", "pyproject.toml")


def _changed_since(st: os.stat_result, since_ns: int, ctime_only: bool = False) -> bool:
    """Whether a file (or folder) of this stat may have changed after ``since_ns``: its
    times at or after that moment less its filesystem's timestamp tick (the repository
    index's racy tick: 10 ms, filesystem clocks being coarse, and 2 s on one that keeps
    whole seconds, where a change in the second the command started shows a time before
    it). Such a file may have been read before the change: no entry is written."""
    tick = racy_tick(signature(st))
    return max((st.st_ctime_ns,) if ctime_only else (st.st_mtime_ns, st.st_ctime_ns)) >= since_ns - tick


# --- recording what a command reads ------------------------------------------------------------


@dataclass
class Recording:
    """The paths opened for reading and the directories listed by one thread's command, and
    the paths it decided by without reading them (`engine.probes`)."""

    files: set[str] = field(default_factory=set)
    dirs: set[str] = field(default_factory=set)
    noted: probes.Noted = field(default_factory=probes.Noted)
    started_ns: int = field(default_factory=time.time_ns)
    # What each file read through runtime/regular.py was when it was read (the rest are
    # judged by their times alone): `store` keeps nothing for one that is another since.
    identities: dict[str, Identity] = field(default_factory=dict)


_local = threading.local()
_hooked = False
_hook_lock = threading.Lock()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Called for every audited event of the process (tens of thousands a check): the
    # event's name is tested first, the thread's recording only then.
    if event != "open" and event != "os.scandir" and event != "os.listdir":
        return
    rec: Recording | None = getattr(_local, "recording", None)
    if rec is None:
        return
    if event == "open":
        path, mode, flags = args
        if isinstance(path, int) or path is None:
            return
        if isinstance(flags, int):
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC):
                return
        elif isinstance(mode, str) and any(c in mode for c in "wax+"):
            return
        rec.files.add(probes.spelled_absolute(os.fsdecode(path)))  # `x/..` as the system follows it
    elif event in ("os.scandir", "os.listdir"):
        path = args[0]
        if isinstance(path, int) or _by_importer(sys._getframe(1)):
            return
        rec.dirs.add(probes.spelled_absolute(os.fsdecode(path if path is not None else ".")))


# Directories listed by these are no input of the check: the import system finding a
# module, and the search for rule plugins (rules/registry.py) on sys.path, which the
# entry's name covers instead (`_distributions`).
_LISTING_NOT_AN_INPUT = frozenset({"importlib._bootstrap_external", "importlib.metadata",
                                   "optrace.rules.registry"})


def _by_importer(frame: FrameType) -> bool:
    return frame.f_globals.get("__name__") in _LISTING_NOT_AN_INPUT


@contextmanager
def recording() -> Iterator[Recording]:
    """Record what this thread opens for reading and lists while the block runs. The hook
    stays (an audit hook cannot be removed) but does nothing for a thread not recording."""
    global _hooked
    with _hook_lock:
        if not _hooked:
            sys.addaudithook(_audit)
            _hooked = True
    rec = Recording()
    _local.recording = rec
    try:
        with probes.noting() as noted, noting_identities() as identities:
            rec.noted = noted
            rec.identities = identities
            yield rec
    finally:
        _local.recording = None


# --- what the entry's name covers ------------------------------------------------------------


def _own_dirs() -> tuple[str, ...]:
    """Python's library and installed packages and optrace's own package: what the entry's
    name covers (versions, fingerprint, distributions), so never listed as inputs. Both
    spellings of each (a checkout's subpackages are symlinks)."""
    paths = sysconfig.get_paths()
    package = os.path.dirname(os.path.abspath(optrace.__file__))
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.update(_site_dirs())
    roots.add(package)
    roots.update(os.path.realpath(e.path) for e in os.scandir(package) if e.is_dir())
    roots.update(p for p in sys.path if p.endswith(".zip"))
    return tuple(sorted({os.path.join(r, "") for r in roots}
                        | {os.path.join(os.path.realpath(r), "") for r in roots}))


def _site_dirs() -> list[str]:
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    return [d for d in [*dirs, *([user] if user else [])] if os.path.isdir(d)]


def _code_fingerprint() -> bytes:
    """Size and mtime of every file of optrace's package (its subpackages followed), so a
    changed checkout of the same version is another name."""
    package = os.path.dirname(os.path.abspath(optrace.__file__))
    parts: list[str] = []
    stack = [package]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as it:
                for entry in sorted(it, key=lambda e: e.name):
                    if entry.is_dir():
                        if entry.name != "__pycache__":
                            stack.append(entry.path)
                    elif not entry.name.endswith(".pyc"):
                        st = entry.stat()
                        parts.append(f"{entry.path}\0{st.st_size}\0{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{top}\0?")
    return "\n".join(parts).encode("utf-8", "surrogateescape")


def _distributions() -> bytes:
    """The distributions installed on sys.path (their metadata directories and .pth
    files, versions in their names): a rule plugin or a library added, removed or
    upgraded is another name."""
    parts = []
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            parts.append(entry + "\0?")
            continue
        found = sorted(n for n in names if n.lower().endswith((".dist-info", ".egg-info", ".egg", ".pth")))
        parts.append("\0".join([entry, *found]))
    return "\n".join(parts).encode("utf-8", "surrogateescape")


# While a command looks its operators' entries up (one pass, before any of them runs),
# what it has digested: operators of one repository share most inputs (its build
# scripts, its folders), which are then read once per run, not once per operator.
_seen: list[dict[tuple[str, str], object]] = []
_T = TypeVar("_T")


@contextmanager
def lookups() -> Iterator[None]:
    """Digest each input once while the block looks entries up."""
    _seen.append({})
    try:
        yield
    finally:
        _seen.pop()


def remembered(kind: str, key: str, compute: Callable[[str], _T]) -> _T:
    """`compute(key)` once while `lookups()` is open (every time outside it): for an
    input every operator's entry names, such as the repository index's state."""
    return _remembered(kind, key, compute)


def _remembered(kind: str, path: str, compute: Callable[[str], _T]) -> _T:
    if not _seen:
        return compute(path)
    memo = _seen[-1]
    key = (kind, path)
    if key not in memo:
        memo[key] = compute(path)
    return cast(_T, memo[key])


def _digest_bound() -> int:
    """The largest bound a file is read under by plan or check: the sources' and the
    configs' (the user's, each), a searched file's, a compiled kernel's metadata. A file
    is hashed within it, whichever bound its reader took: one read under a larger bound
    than the sources' (a config past a lowered `source_bytes`) has bytes the result rests
    on, not "unreadable"."""
    return max(limit("source"), limit("config"), SEARCH_LIMIT_BYTES, METADATA_MAX_BYTES)


def _read_digest(path: str) -> str | None:
    # The plain SHA-256 of the bytes, as the repository index hashes a file: an entry
    # takes the index's hash of a file it read rather than hashing it again (`store`).
    try:
        return hashlib.sha256(read_regular(path, bound=_digest_bound())).hexdigest()
    except OSError:
        return None


def _file_digest(path: str) -> str | None:
    """The digest of a file's bytes; None for none (missing, not regular, unreadable)."""
    return _remembered("file", path, _read_digest)


def _names_digest(path: str) -> str | None:
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return None
    return digest(*(os.fsencode(n) for n in names))


def _listing_digest(path: str) -> str | None:
    return _remembered("dir", path, _names_digest)


def _where(path: str, real_dirs: dict[str, str] | None = None) -> str:
    """What is at `path` and where it leads: "-" when nothing is there (not even a dangling
    link); else its kind (f: a regular file, d: a directory, o: other, x: a link that leads
    nowhere) and "=" when it is itself (no link on the way) or the path its links resolve
    to. An include names a directory, or a dangling link, at the same place as the header
    that later takes its place. `real_dirs`: folders already resolved (most paths share
    them)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "-"
    if stat.S_ISLNK(mode):
        try:
            followed = os.stat(path).st_mode
            kind = "d" if stat.S_ISDIR(followed) else "f" if stat.S_ISREG(followed) else "o"
        except OSError:
            kind = "x"
        real = os.path.realpath(path)
    else:
        kind = "d" if stat.S_ISDIR(mode) else "f" if stat.S_ISREG(mode) else "o"
        head, tail = os.path.split(path)
        memo = real_dirs if real_dirs is not None else {}
        if head not in memo:
            memo[head] = _remembered("real", head, os.path.realpath)
        real = os.path.join(memo[head], tail)
    return kind + ("=" if real == path else real)


def _probe(directory: str) -> str:
    return _remembered("probe", directory, _markers)


def _markers(directory: str) -> str:
    """Which repository markers a directory holds, and as what: d(irectory), f(ile),
    l(ink, then what it points to), o(ther), -(none). Discovery finds the repository
    root by them and the config by name: neither is a file read nor a listing."""
    states = []
    for name in _MARKERS:
        path = os.path.join(directory, name)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            states.append("-")
            continue
        if stat.S_ISLNK(mode):
            states.append("l" + ("d" if os.path.isdir(path) else "f" if os.path.isfile(path) else "-"))
        else:
            states.append("d" if stat.S_ISDIR(mode) else "f" if stat.S_ISREG(mode) else "o")
    return ",".join(states)


def shared_name_part() -> bytes:
    """The part of every entry's name that no operator or option changes: optrace (version
    and files), Python, the installed distributions, the trust flag, the user config and
    the CANN toolchain, the state directory, the home and the libclang library path. A
    command over many operators computes it once."""
    config = sys.modules.get("optrace.engine.config")
    trusted = bool(config is not None and config.config_trust_flag())
    user_config = _file_digest(os.fspath(user_config_path())) or "-"
    # Where this machine keeps what a report rests on outside the repository: the state
    # directory (its records say whether a journal in the tree is pending or another's),
    # the home a `~` in the user config expands to, the libclang compile safety loads.
    machine = "\0".join((os.fspath(state_dir()), os.path.expanduser("~"),
                         os.environ.get("LIBCLANG_LIBRARY_PATH", ""))).encode("utf-8", "surrogateescape")
    return digest(
        __version__.encode(), sys.version.encode(), _code_fingerprint(), _distributions(),
        b"trusted" if trusted else b"untrusted", user_config.encode(),
        (cann_toolchain() or "-").encode("utf-8", "surrogateescape"), machine).encode()


def entry_name(fmt: str, schema: int, op_dir: Path, repo_root: Path | None, *options: bytes,
               shared: bytes | None = None) -> str:
    """An entry's name: its format, the operator, `--repo-root`, the command's `options`
    and `shared` (`shared_name_part()`, computed here when not given)."""
    return digest(
        fmt.encode(), str(schema).encode(), shared if shared is not None else shared_name_part(),
        os.fsencode(op_dir), os.fsencode(repo_root) if repo_root is not None else b"-", *options)


class IndexInputs(NamedTuple):
    """What an operator's entry rests on besides what its command reads: the repository
    discovery searches, the index's state (every path walked, each searchable file's
    content hash: `extra`) and when the index's walk began (`covered_since_ns`)."""

    root: Path
    extra: dict[str, str]
    since_ns: int


def index_inputs(op_dir: Path, repo_root: Path | None) -> IndexInputs | None:
    """The repository index's part of the operator's entry; None when the command refuses
    the folder anyway (no operator in it, or several: the repository root): no walk and
    index of the repository around it for that."""
    try:
        resolved = resolve_operator_dir(op_dir)
        if not may_be_one_operator(resolved):
            return None
        root = (repo_root or default_repo_root(resolved)).resolve()
    except (InputError, OSError):
        return None
    # Once per run (all lookups are one pass inside `lookups()`, before any operator
    # runs): the state hashes every searched file's signature and stats every C / C++
    # source, and taking it again for each operator was most of a run answered from the
    # cache.
    index = repo_index(root)
    state = remembered("index-state", os.fsdecode(root), lambda _: index.state())
    return IndexInputs(root, {"index": state}, index.built_ns)


# --- the entry ---------------------------------------------------------------------------------


@dataclass
class Lookup:
    """An operator's entry name, and the payload it holds when the entry held and still
    holds (None: a miss)."""

    name: str
    op_dir: Path
    payload: Any = None


def real_dirs(op_dir: Path, repo_root: Path | None) -> tuple[Path, Path | None] | None:
    """The operator directory and `--repo-root` as entries name them (links resolved);
    None when the operator cannot be cached (not a directory: the command says why)."""
    real = Path(os.path.realpath(op_dir))
    if not real.is_dir():
        return None
    return real, Path(os.path.realpath(repo_root)) if repo_root is not None else None


def lookup(kind: str, fmt: str, schema: int, name: str, op_dir: Path,
           extra: dict[str, str] | None = None) -> Lookup:
    """The entry `name` of `kind`, its payload set when it has the expected shape, its
    `extra` inputs equal the ones given and every input it lists is as it was."""
    document = read_entry(kind, name)
    payload = _still_valid(document, fmt, schema, name, extra or {}) if document is not None else None
    return Lookup(name, op_dir, payload)


def _still_valid(document: Any, fmt: str, schema: int, name: str, extra: dict[str, str]) -> Any:
    try:
        if not (isinstance(document, dict) and document.get("format") == fmt
                and document.get("schema") == schema and document.get("name") == name
                and document.get("extra", {}) == extra):
            return None
        for path, state in _pairs(document["probes"], str):
            if _probe(path) != state:
                return None
        for path, want in _pairs(document["dirs"], (str, type(None))):
            if _listing_digest(path) != want:
                return None
        for path, want in _pairs(document["files"], (str, type(None))):
            if _file_digest(path) != want:
                return None
        real_dirs: dict[str, str] = {}
        for path, want in _pairs(document["looked"], str):
            if _where(path, real_dirs) != want:
                return None
        return document["payload"]
    except (KeyError, TypeError, ValueError):
        return None


def _pairs(value: Any, kinds: type | tuple[type, ...]) -> list[tuple[str, Any]]:
    if not isinstance(value, list):
        raise TypeError("not a list")
    out = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                and os.path.isabs(item[0]) and isinstance(item[1], kinds)):
            raise TypeError("not a [path, value] pair")
        out.append((item[0], item[1]))
    return out


def store(kind: str, fmt: str, found: Lookup, rec: Recording, payload: object,
          schema: int, listed: Iterable[Path] = (), extra: dict[str, str] | None = None,
          covered: Container[str] = (), covered_since_ns: int = 0) -> bool:
    """Write the entry of a command that ran while `rec` recorded; False when it was not
    (a file it read changed while it ran, or the cache cannot be written). `listed`:
    directories looked up by name that are inputs as the listed ones are (a journal
    appearing there must miss). `covered`: files whose bytes an `extra` input already
    stands for (the repository index's state holds their content hashes).
    `covered_since_ns`: when those hashes began to be taken (the index's walk): a covered
    file the command read that changed since (its ctime) may be of other bytes than the
    ones `extra` stands for, and the entry is not written."""
    own = _own_dirs()
    files: dict[str, str | None] = {}
    for path in sorted(rec.files | rec.noted.read):
        head, tail = os.path.split(path)
        if tail.endswith(".pyc") and os.path.basename(head) == "__pycache__":
            # A module imported from its bytecode: what it says is its source's.
            path = os.path.join(os.path.dirname(head), tail.split(".", 1)[0] + ".py")
        if os.path.join(path, "").startswith(own) or path in files or rec.noted.in_scratch(path):
            continue
        if path in covered:
            try:
                if _changed_since(os.stat(path), covered_since_ns, ctime_only=True):
                    return False  # edited since its hash went into `extra`: maybe read after
            except OSError:
                return False  # gone since
            continue
        # None: not read (an open that found nothing), or not through the bounded reader
        then = rec.identities.get(path) or rec.noted.identities.get(path)
        try:
            st = os.stat(path)
        except OSError:
            if then is not None:
                return False  # read, and gone since: its entry would say absent beside its result
        else:
            # ctime too: a file replaced with its old mtime kept (cp -p, tar x) has a new one.
            if _changed_since(st, rec.started_ns):
                return False
            if then is not None and then != identity_of(st):
                return False  # another file at the path since it was read (a folder above it swapped)
        files[path] = _file_digest(path)
    every = rec.dirs | {os.fspath(d) for d in listed}
    for path in every:
        if rec.noted.in_scratch(path):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue  # a journal directory that is not there: its absence is listed
        if _changed_since(st, rec.started_ns):
            return False  # a name added or removed while the command ran: maybe listed before
    dirs = {path: _listing_digest(path) for path in sorted(every)
            if not os.path.join(path, "").startswith(own) and os.path.basename(path) != "__pycache__"
            and not rec.noted.in_scratch(path)}
    # Where each file read and each path decided by leads; one changed since the command
    # began (a link made, a candidate created) may have been looked at before the change.
    looked: dict[str, str] = {}
    real_dirs: dict[str, str] = {}
    for path in sorted(rec.noted.looked | files.keys()):
        if os.path.join(path, "").startswith(own) or rec.noted.in_scratch(path):
            continue
        try:
            if _changed_since(os.lstat(path), rec.started_ns, ctime_only=True):
                return False
        except OSError:
            pass
        looked[path] = _where(path, real_dirs)
    probes = [[os.fspath(d), _probe(os.fspath(d))] for d in (found.op_dir, *found.op_dir.parents)]
    document = {
        "format": fmt, "schema": schema, "name": found.name, "optrace": __version__,
        "extra": extra or {}, "probes": probes, "dirs": [[p, d] for p, d in dirs.items()],
        "files": [[p, d] for p, d in files.items()], "looked": [[p, w] for p, w in looked.items()],
        "payload": payload,
    }
    return write_entry(kind, found.name, document)
