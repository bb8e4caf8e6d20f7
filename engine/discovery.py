"""Layer discovery: which files of a repository make up one operator.

Discovery finds the kernel entry itself; every other layer's files are that layer's own
`search` (codemods/<layer>.py), handed a `SearchContext`: the operator's C++ files, the
repository files naming the op (its name in any spelling, its torch names) from one
index of the repository, and each file's bytes read once. `optrace.toml` layer entries
override any of it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import ClassVar, Protocol

from optrace.engine.codes import OT001, OT010, OT014, OT015
from optrace.engine.config import Config
from optrace.engine.diagnostics import Diagnostic, InputError
from optrace.engine.index_cache import (
    ContentStore,
    Phase,
    Signature,
    StoredHashes,
    keep_table,
    phase,
    signature,
    stored_listing,
    stored_state,
    stored_table,
    stored_table_bytes,
)
from optrace.engine.index_cache import racy_tick as _racy_tick
from optrace.engine.names import op_name_pattern, same_op
from optrace.engine.probes import looked_at
from optrace.engine.source import TooLarge, blank_comments, decode, is_binary, match_bracket, read_regular
from optrace.engine.source import limit as source_limit
from optrace.engine.vocabulary import (
    LAUNCH_HINT,
    launch_pattern,
)

# `.inl` / `.ipp` / `.tpp` are headers by another name (template bodies included at the end of a
# header): apply reaches them through the include graph, so strip and check must scan them.
CPP_EXTS = frozenset({".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".hxx", ".asc", ".inc", ".inl",
                      ".ipp", ".tpp", ".tcc"})
KERNEL_EXTS = frozenset({".cpp", ".cc", ".cxx", ".asc"})
SCRIPT_EXTS = frozenset({".sh", ".bash", ".cmake", ".txt", ".py"})
# What the repository index keeps: sources, scripts and Python (CMakeLists.txt by name).
_INDEXED_EXTS = CPP_EXTS | {".sh", ".bash", ".py", ".cmake", ".txt"}
SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache",
     "build_out", "output", "dist", ".pytest_cache", ".optrace"}
)
# Files above this size are not searched for the op name (generated blobs, logs).
SEARCH_LIMIT_BYTES = 2 * 1024 * 1024

_GLOBAL_RE = re.compile(rb"\b__global__\b")
# What makes a shell / CMake script the kernels' build script (any case): the words, for
# a substring test of the lowered script (a case-insensitive pattern walks it byte by
# byte), and the pattern that finds the line to show. `ascendc` covers `ascendc_library`.
_BUILD_WORDS = (b"op_kernel", b"ascend_kernels", b"msopgen", b"op_host", b"ascendc")
BUILD_RE = re.compile(b"|".join(_BUILD_WORDS), re.I)
_AICORE_RE = re.compile(rb"\b__aicore__\b")


def _builds_kernels(script: bytes) -> bool:
    low = script.lower()
    return any(w in low for w in _BUILD_WORDS)


@dataclass(frozen=True)
class LayerFile:
    """A file of one layer, where the layer was recognised in it and how."""

    path: Path
    line: int
    detail: str


@dataclass
class EntryPoint:
    """The kernel entry (`__global__ __aicore__`): where it is and how it is declared."""

    path: Path
    line: int
    name: str
    extern_c: bool
    templated: bool


@dataclass
class Layers:
    """What discovery found of one operator: its names, folders, kernel entry and the files of each layer."""

    op_name: str
    camel: str
    op_dir: Path
    repo_root: Path
    entry: EntryPoint | None = None
    kernel_dir: Path | None = None
    found: dict[str, list[LayerFile]] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    # What the searches looked for, in their order: key -> title, and the keys an
    # operator may lack (no graph mode, no Python fakes) without being incomplete.
    titles: dict[str, str] = field(default_factory=dict)
    optional: frozenset[str] = frozenset()

    def missing(self) -> list[str]:
        """Layers an operator needs and does not have (optional ones are not missing)."""
        return [k for k in self.titles if not self.found.get(k) and k not in self.optional]

    def title(self, key: str) -> str:
        return self.titles.get(key, key)


# Python callers are samples and tests (G4: they sync and save the buffer) when a folder
# between the repository root and the file, or the file's name, says so; anything else
# calling the op is library code (mode B: it unpacks the new output and nothing more).
SAMPLE_DIRS = frozenset({"tests", "test", "examples", "example", "samples", "sample"})
SAMPLE_NAMES = ("test_*.py", "*_test.py", "*_sample.py", "sample_*.py", "sample.py", "conftest.py")


def is_sample_caller(path: Path, repo_root: Path, globs: Sequence[str] = ()) -> bool:
    """A Python file calling the op is a sample / test (not library code): under a
    `tests/`, `examples/`, `samples/` (or singular) folder of the repository, named
    `test_*.py`, `*_test.py`, `*_sample.py`, `sample_*.py` or `sample.py`, or matching a
    `samples` glob of the config."""
    full = path.resolve()
    try:
        folders = full.relative_to(repo_root.resolve()).parts[:-1]
    except ValueError:  # outside the repository (a configured layer file): its name decides
        folders = ()
    if any(part.lower() in SAMPLE_DIRS for part in folders):
        return True
    if any(fnmatchcase(full.name.lower(), pattern) for pattern in SAMPLE_NAMES):
        return True
    return any(fnmatchcase(full.as_posix(), glob) for glob in globs)


def camel_case(op_name: str) -> str:
    """`fused_deep_moe` -> `FusedDeepMoe` (the OpDef / aclnn spelling)."""
    return "".join(part[:1].upper() + part[1:] for part in op_name.split("_") if part)


def resolve_operator_dir(op_dir: Path) -> Path:
    """The operator directory, resolved; a missing one or a symlink loop is bad input."""
    try:
        resolved = op_dir.resolve(strict=True)
    except RuntimeError:  # Python 3.11 raises this for a symlink loop
        raise InputError(Diagnostic(OT014, "operator directory is a symlink loop", op_dir, 0)) from None
    except OSError:
        raise InputError(Diagnostic(OT001, "operator directory does not exist", op_dir, 0)) from None
    if not resolved.is_dir():
        # A file given where a directory is expected (`plan kernel.cpp`): say that, since
        # "does not exist" sends the user looking for a typo in a path that is right.
        raise InputError(Diagnostic(OT001, "not a directory: give the operator directory "
                                    "(the folder holding op_kernel/)", op_dir, 0))
    return resolved


def marked_repo_root(op_dir: Path) -> Path | None:
    """The nearest ancestor (or `op_dir` itself) a `.git` or an `optrace.toml` marks as a
    repository; None when nothing does."""
    for cand in (op_dir, *op_dir.parents):
        marker = cand / "optrace.toml"  # any file there marks the root (a FIFO is refused when read)
        if (cand / ".git").exists() or (os.path.lexists(marker) and not marker.is_dir()):
            return cand
    return None


def default_repo_root(op_dir: Path) -> Path:
    """Where the op's other layers are searched for: the marked repository
    (`marked_repo_root`), else the op dir's grandparent. Writing is narrower: `write_root`."""
    marked = marked_repo_root(op_dir)
    if marked is not None:
        return marked
    return op_dir.parent.parent if op_dir.parent.parent != op_dir else op_dir


def write_root(op_dir: Path, repo_root: Path | None) -> Path:
    """Where `--write` may edit files and keeps its journal (`.optrace/`): `--repo-root`
    when given, else the marked repository, else the operator directory alone — an
    unmarked grandparent is some unrelated tree above a copied operator."""
    return repo_root or marked_repo_root(op_dir) or op_dir


def walk_files(root: Path, exts: frozenset[str] | None = None) -> Iterator[Path]:
    """Files under root in sorted order, skipping VCS / build dirs and symlink loops
    (a directory reached twice, a file link that loops or dangles: nothing to read)."""
    for path in walk_paths(root, exts):
        yield Path(path)


def walk_paths(root: Path | str, exts: frozenset[str] | None = None,
               listed: list[tuple[str, Signature | None]] | None = None,
               links: list[str] | None = None) -> Iterator[str]:
    """`walk_files` as path strings (the directory's path joined to the name): the
    repository index keeps tens of thousands of them, and a lookup the user cache answers
    needs only their text and their stat signature, not a `Path` each. `listed` gets each
    directory listed (or tried) with its signature taken before the listing (None: no
    `stat`); `links` each entry met that is a symbolic link, kept or not."""
    seen_dirs: set[tuple[int, int]] = set()
    stack = [os.fspath(Path(root))]
    while stack:
        dirpath = stack.pop()
        try:
            st = os.stat(dirpath)
        except OSError:
            if listed is not None:
                listed.append((dirpath, None))
            continue
        if listed is not None:
            listed.append((dirpath, signature(st)))
        try:
            with os.scandir(dirpath) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:
            continue
        seen_dirs.add(key)
        subdirs = []
        for entry in entries:
            name = entry.name
            # The type comes from the directory listing (no system call unless a link):
            # a repository search walks tens of thousands of files.
            try:
                if links is not None and entry.is_symlink():
                    links.append(entry.path)
                is_dir = entry.is_dir()
            except OSError:
                continue
            if is_dir:
                if name not in SKIP_DIRS and not name.startswith("."):
                    subdirs.append(entry.path)
                continue
            dot = name.rfind(".")
            if exts is None or (dot > 0 and name[dot:].lower() in exts) or (
                exts is SCRIPT_EXTS and name == "CMakeLists.txt"
            ):
                if entry.is_symlink() and not os.path.exists(entry.path):
                    continue  # resolving it would raise (a loop) or find nothing (dangling)
                yield entry.path
        stack.extend(reversed(subdirs))  # depth first, in sorted order, as os.walk gave


# What the index keeps of a searchable file: the words it names (maximal runs of
# `[a-z0-9_]` of its lowered bytes), one per line; an unreadable, binary or too large
# file has none. A kind's name carries its version (engine/index_cache.py).
WORDS_KIND = "words1"
_WORD_RE = re.compile(rb"[a-z0-9_]+")
# Plain-word searches a run answers by reading every file's words before it indexes the
# words instead: indexing costs ~25 scans, and a plan of one operator asks ~10.
_SCANS_BEFORE_INDEX = 25
# Every byte to itself lowered if it can be part of a word, else to a space: the words
# are then the file's `split()` (C speed; a regular expression's findall was twice as slow).
_TO_WORDS = bytes(low if low in b"abcdefghijklmnopqrstuvwxyz0123456789_" else 32
                  for low in bytes(range(256)).lower())


def _words(data: bytes | None) -> str:
    if data is None:
        return ""
    return (b"\n" + b"\n".join(set(data.translate(_TO_WORDS).split())) + b"\n").decode("ascii")


def _builds(data: bytes | None) -> str:
    return "1" if _builds_kernels(data or b"") else "0"


# What the index keeps of a build script: the words it names as a bytes regular expression
# sees them — its maximal runs of `\w` (`[A-Za-z0-9_]`), case kept — one per line, sorted.
# A pattern `\b(?:...)\b` whose alternatives match only word bytes matches a script exactly
# when it matches one of these words whole (`SearchContext.build_scripts_naming_op`).
SCRIPT_WORDS_KIND = "script-words1"
_TO_WORD_BYTES = bytes(b if b in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_" else 32
                       for b in range(256))


def _script_words(data: bytes | None) -> str:
    if data is None:
        return ""
    return b"\n".join(sorted(set(data.translate(_TO_WORD_BYTES).split()))).decode("ascii")


BUILDS_KIND = "builds1"
_FILE_KINDS = ((WORDS_KIND, _words),)
_SCRIPT_KINDS = ((BUILDS_KIND, _builds), (SCRIPT_WORDS_KIND, _script_words))

# What a C / C++ file includes, by the included file's name (`#include "../mat_mul_v3/
# arch35/mat_mul_bl1_full_load.h"` -> `mat_mul_bl1_full_load.h`): which files may reach
# an operator's header by a path only the build's flattened tree resolves.
INCLUDES_KIND = "include-names1"
_INCLUDE_NAME_RE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\r\n]+)[>"]', re.M)


def _include_names(data: bytes | None) -> str:
    if data is None:
        return ""
    return "\n".join(sorted({m.group(1).rsplit(b"/", 1)[-1].decode("utf-8", "replace")
                              for m in _INCLUDE_NAME_RE.finditer(data)}))
# The index's state's format, in the digest of the signatures a state is kept under
# (`RepoIndex.state`): a change to what the state covers changes it.
_STATE_FORMAT = b"optrace-index-state 2\0"
# The word table's key's (`RepoIndex._files_key`).
_FILES_KEY_FORMAT = b"optrace-searchable-files 2\0"
_SCRIPTS_KEY_FORMAT = b"optrace-scripts 1\0"
# A path's stat signature as the state's digest takes it (size, mtime, ctime, inode), and
# a path that could not be stat-ed (no size is negative).
_PACKED_SIGNATURE = struct.Struct("<qqqQ")
_GONE = _PACKED_SIGNATURE.pack(-1, -1, -1, 0)
# The same bytes for a signature whose times fall outside 64 bits of nanoseconds (before
# 1677 or after 2262: a filesystem keeps them): each number modulo 2**64, which is what the
# signed form writes for every number inside them.
_WRAPPED_SIGNATURE = struct.Struct("<QQQQ")
_WRAP = (1 << 64) - 1


def _packed(stats: list[os.stat_result | None]) -> list[bytes]:
    """Each stat's signature packed (`_PACKED_SIGNATURE`; `_GONE` for none)."""
    pack, gone = _PACKED_SIGNATURE.pack, _GONE
    try:
        return [gone if st is None else pack(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                for st in stats]
    except struct.error:
        wrap, m = _WRAPPED_SIGNATURE.pack, _WRAP
        return [gone if st is None
                else wrap(st.st_size & m, st.st_mtime_ns & m, st.st_ctime_ns & m, st.st_ino & m)
                for st in stats]


# What the walk keeps, and its version: a listing kept by a walk of other rules (another
# optrace) is not taken (`RepoIndex.listed`). The tag changes with `walk_paths`' logic.
_WALK_RULES = hashlib.sha256(repr(("walk 1", sorted(SKIP_DIRS), sorted(_INDEXED_EXTS))).encode()).hexdigest()

# `RepoIndex._state`'s count for a state taken from the signatures alone.
_SIGNED = -1


def _places(text: str | None, count: int) -> list[int] | None:
    """A table of places among `count` items (space-separated, ascending); None for none
    kept or one that is not such (read as any other input)."""
    if text is None:
        return None
    try:
        at = [int(p) for p in text.split()]
    except ValueError:
        return None
    if any(not 0 <= p < count for p in at) or any(a >= b for a, b in itertools.pairwise(at)):
        return None
    return at


def _strings(text: str | None, count: int) -> list[str] | None:
    """A table of `count` strings (a JSON list); None for none kept or another shape."""
    if not text:
        return None
    try:
        values = json.loads(text)
    except ValueError:
        return None
    if not (isinstance(values, list) and len(values) == count and all(isinstance(v, str) for v in values)):
        return None
    return values


def _group_digest(fmt: bytes, paths: list[str], packed: list[bytes]) -> str:
    """A digest of one group of the state's paths and their packed signatures."""
    names = "\0".join(paths).encode("utf-8", "surrogateescape")
    return hashlib.sha256(fmt + names + b"\0" + b"".join(packed)).hexdigest()


def word_key(word: bytes) -> bytes:
    """A word's normal form for the build scripts' word index: lower case, no `_`. Every
    spelling `op_name_pattern` matches of a name has the normal form of the name."""
    return word.replace(b"_", b"").lower()


class SourcesByName(Mapping[str, list[Path]]):
    """The index's C / C++ sources by file name, as `Path`s made for a name when it is
    first asked for: a plan looks up the few names its includes do not find beside their
    includer, of a repository's ~11k."""

    def __init__(self, paths: dict[str, list[str]]) -> None:
        self._paths = paths
        self._made: dict[str, list[Path]] = {}

    def __getitem__(self, name: str) -> list[Path]:
        made = self._made.get(name)
        if made is None:
            made = self._made[name] = [Path(p) for p in self._paths[name]]
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


# The files by word, kept in the user cache (`RepoIndex._words_table`).
WORDS_TABLE_KIND = "words-table1"
# Which of the scripts build kernels (their places in the walk's order), and a value of
# each build script by kind (`RepoIndex.script_values`): kept in the user cache under the
# scripts' paths and signatures.
BUILD_SCRIPTS_TABLE_KIND = "build-scripts1 "  # + BUILDS_KIND: which derivation it holds
SCRIPT_VALUES_TABLE_KIND = "script-values1 "


class Postings:
    """Which items (their indices, ascending) hold each key: a dict made now, or the text
    a run kept, a line a key (`<key>\t<indices, space-separated>` after a first line
    break), found by `\n<key>\t` without parsing the rest: a repository's 1.9 M words, or
    its sources' include names, read in one string, the few a plan asks parsed. The text
    may be its UTF-8 bytes (`stored_table_bytes`)."""

    def __init__(self, source: str | bytes | dict[str, list[int]]) -> None:
        self._text = source if isinstance(source, (str, bytes)) else None
        self._dict = source if isinstance(source, dict) else None

    def get(self, key: str) -> list[int]:
        if self._dict is not None:
            return self._dict.get(key, [])
        assert self._text is not None
        if "\t" in key or "\n" in key:
            return []
        text = self._text
        if isinstance(text, bytes):
            wanted = b"\n" + key.encode("utf-8", "surrogateescape") + b"\t"
            start = text.find(wanted)
            if start < 0:
                return []
            start += len(wanted)
            return [int(at) for at in text[start:text.index(b"\n", start)].split()]
        start = text.find(f"\n{key}\t")
        if start < 0:
            return []
        start += len(key) + 2
        return [int(at) for at in text[start:text.index("\n", start)].split()]

    def text(self) -> str | None:
        """As kept; None when a key holds a tab or a line break (a file named so: the
        postings are kept in memory only)."""
        if isinstance(self._text, bytes):
            return self._text.decode("utf-8", "surrogateescape")
        if self._text is not None:
            return self._text
        assert self._dict is not None
        if any("\t" in key or "\n" in key for key in self._dict):
            return None
        return "\n" + "".join(f"{key}\t{' '.join(map(str, at))}\n" for key, at in self._dict.items())


class Hashed:
    """The files an index's state stands for the bytes of (`RepoIndex.hashed`): its
    searchable files and build scripts by content hash, where the store could read them
    whole ("-": over the search's size bound, binary, says nothing of the bytes); its
    C / C++ sources by stat signature (a source changed has another change time, change
    times do not go back, and no state is kept when one changed within its tick). A
    command asks it of the few files it read: a set of all of them (~18k on ops-nn, each
    asked of the store) cost a plan ~0.1-0.3 s. The index's store when this run opened
    it (its hashes of this run included), else the rows kept (a plan answered from the
    tables opens none)."""

    __slots__ = ("_index", "_names", "_sources", "_stored")

    def __init__(self, names: frozenset[str], sources: frozenset[str], index: RepoIndex) -> None:
        self._names = names
        self._sources = sources
        self._index = index
        self._stored = StoredHashes()

    def __contains__(self, path: object) -> bool:
        if not isinstance(path, str):
            return False
        if path in self._sources:
            return True
        if path not in self._names:
            return False
        store = self._index.store
        sha = store.sha_of(path) if store is not None else self._stored.get(path)
        return sha not in (None, "-")


@dataclass
class RepoIndex:
    """One walk over a repository: its searchable files, build scripts and C++ sources.

    Planning asks "which files name this op?" a few times per operator. Each file's
    words are derived once and kept in the user cache by content hash
    (engine/index_cache.py): a later run over the same repository reads no file again,
    only those that changed. A question is then a substring test of each file's word
    list (C speed); a word that is not a plain identifier falls back to scanning the
    files' bytes.
    """

    root: Path
    # What the walk kept, as path strings (`walk_paths`): searchable files, build
    # scripts, and every C/C++ file by its name. `files`, `scripts` and `sources` are
    # the same as `Path`s, made at first use: a lookup the user cache answers takes the
    # state from the strings alone (`state`), and 20k `Path`s cost more than the walk.
    file_paths: list[str] = field(default_factory=list)
    script_paths: list[str] = field(default_factory=list)
    source_paths: dict[str, list[str]] = field(default_factory=dict)
    store: ContentStore | None = None
    _files: list[Path] | None = None
    _scripts: list[Path] | None = None
    _sources: SourcesByName | None = None
    _build_scripts: list[Path] | None = None
    _words: list[str] | None = None
    _answers: dict[tuple[bytes, ...], list[Path]] = field(default_factory=dict)
    # Plain-word searches answered by reading every file's words (`mentioning`), and, after
    # `_SCANS_BEFORE_INDEX` of them, the files by word and by name (`_by_word`).
    _scans: int = 0
    _script_scans: int = 0  # the build scripts' words scanned for a few keys (`scripts_with_words`)
    _word_files: dict[str, list[int]] | None = None
    _stem_files: dict[bytes, list[int]] | None = None
    # The files by word from the user cache (or indexed and kept), for the phase it was
    # looked up in (`_words_table`; None in it: none to be had).
    _table: tuple[Phase, Postings | None] | None = None
    _scripts_by_folder: dict[str, tuple[Path, ...]] | None = None
    _script_names_by_folder: dict[str, list[str]] = field(default_factory=dict)
    _hashed: Hashed | None = None
    # The last `state` taken: its digest, and the store's count of files found changed
    # within the run (`ContentStore.changes`) when it was taken.
    _state: tuple[str, int] | None = None
    # The build scripts' words (`build_script_words`): what each script's entry held when
    # it was indexed, and the scripts naming each word, by the word's normal form.
    _includers: dict[str, list[Path]] | None = None  # `includers()`, once made
    _script_words_of: dict[Path, str] = field(default_factory=dict)
    _scripts_by_word: dict[bytes, dict[bytes, set[Path]]] = field(default_factory=dict)
    # When the walk began (time.time_ns()): a file changed since may have been hashed by
    # the index before the change (plan's cache keeps no entry resting on such a file).
    built_ns: int = 0
    # The digest of the paths and signatures a state taken from them alone was kept under.
    _signed_under: str = ""
    # Every path the walk kept, in its order; the folders it listed, with their signatures,
    # and the links it skipped (`_listing`); whether the paths came from a kept listing.
    _kept: list[str] = field(default_factory=list)
    _walked_dirs: list[tuple[str, Signature | None]] | None = None
    _links: list[str] | None = None
    _from_listing: bool = False
    # The phase the last state was taken in, when it began, and its `stat` of each path
    # (`_stats`: the searchable files first): the signatures the phase's questions take.
    _state_stats: tuple[Phase | None, int, list[os.stat_result | None]] | None = None
    _in_state_order: list[tuple[str, list[str]]] | None = None  # `_groups`, once made
    # The stats a state taken from the signatures alone was taken from (`_signed_under`'s).
    _signed_stats: list[os.stat_result | None] | None = None
    # The stats `_signatures` last digested, their searchable files' part (`_files_key`)
    # and their scripts' (`_scripts_key`).
    _files_digest: tuple[list[os.stat_result | None], str, str] | None = None
    # The build scripts' places among `script_paths`, and a value of each by kind for the
    # phase it was taken in (`script_values`).
    _build_at: list[int] | None = None
    _script_values: dict[str, tuple[Phase, list[str]]] = field(default_factory=dict)
    # Whether the last state taken from the hashes saw a source changed within its tick.
    _racy_state: bool = False
    # Whether the last state is one a later run can take again: found kept, or kept now
    # (no file racy, none found with two contents).
    _state_kept: bool = False

    def content(self) -> ContentStore:
        """The store of what is derived from this repository's files (opened once)."""
        if self.store is None:
            # Every file's words (11-19 MB on ops-nn) are not packed: the word table
            # answers the runs that would read the pack (`_words_table`).
            self.store = ContentStore.open(read_bounded, under=self.root, unpacked=frozenset({WORDS_KIND}))
        return self.store

    def build_scripts(self) -> list[Path]:
        """Shell / CMake files that build Ascend kernels (the same for every operator):
        from the user cache where a run kept them for the scripts as they are now (their
        paths and signatures), else each script's kind asked of the store (~4k on ops-nn,
        ~0.08 s) and kept for the next run (`_scripts_key`)."""
        if self._build_scripts is None:
            key = self._scripts_key()
            table = BUILD_SCRIPTS_TABLE_KIND + BUILDS_KIND
            kept = stored_table(self.root, table, key) if key is not None else None
            at = _places(kept, len(self.script_paths))
            if at is None:
                store = self.content()
                taken, stats = self._script_stats()
                at = [i for i, (p, st) in enumerate(zip(self.scripts, stats, strict=True))
                      if store.derived(p, BUILDS_KIND, _builds, st, None if st is None else taken) == "1"]
                store.flush()
                if key is not None and self._scripts_key() == key:  # no file changed meanwhile
                    keep_table(self.root, table, key, " ".join(map(str, at)))
            self._build_at = at
            self._build_scripts = [Path(self.script_paths[i]) for i in at]
        return self._build_scripts

    def script_values(self, kind: str, derive: Callable[[bytes | None], str]) -> list[str]:
        """`derive(bytes)` of each build script, in `build_scripts`' order, kept in the
        store under `kind` by content: what every operator's build-hook search asks of the
        same scripts (~1,500 on ops-nn). In a `reading_only` phase, from the user cache
        where a run kept them for the scripts as they are now (`_scripts_key`), else
        derived and kept for the next; outside one, asked of the store each time (apply
        may have edited a script)."""
        current = phase()
        known = self._script_values.get(kind)
        if known is not None and current is not None and known[0] is current:
            return known[1]
        paths = self.build_scripts()
        key = self._scripts_key()
        table = SCRIPT_VALUES_TABLE_KIND + kind
        values = _strings(stored_table(self.root, table, key), len(paths)) if key is not None else None
        if values is None:
            store = self.content()
            taken, stats = self._script_stats()
            assert self._build_at is not None
            at = [stats[i] for i in self._build_at]
            values = [store.derived(p, kind, derive, st, None if st is None else taken)
                      for p, st in zip(paths, at, strict=True)]
            store.flush()
            if key is not None and self._scripts_key() == key:
                keep_table(self.root, table, key, json.dumps(values))
        if current is not None:
            self._script_values[kind] = (current, values)
        return values

    def _script_stats(self) -> tuple[int, list[os.stat_result | None]]:
        """When the state began and its `stat` of each script (its second group), in the
        phase the state was taken in: the signatures a question of the scripts takes, not
        another `stat` each; (0, None each) otherwise."""
        stats = self._state_stats
        if stats is not None and stats[0] is phase() and phase() is not None:
            first = len(self.file_paths)
            return stats[1], stats[2][first:first + len(self.script_paths)]
        return 0, [None] * len(self.script_paths)

    def includers(self) -> dict[str, list[Path]]:
        """Every C / C++ file of the repository (kernel sources included) by the names of
        the files it includes (`INCLUDES_KIND`): derived once per content and kept in the
        user cache, so a later run reads no source again, only the ones that changed."""
        if self._includers is None:
            store = self.content()
            out: dict[str, list[Path]] = {}
            sources = self.sources
            for name in sources:
                for path in sources[name]:
                    for included in store.derived(path, INCLUDES_KIND, _include_names).split("\n"):
                        if included:
                            out.setdefault(included, []).append(path)
            store.flush()
            self._includers = out
        return self._includers

    def scripts_with_words(self, keys: frozenset[bytes]) -> dict[bytes, set[Path]]:
        """The build scripts' words whose normal form (`word_key`) is one of `keys`, each
        with the scripts naming it: what `build_script_words` holds under those keys. A
        run that asks a few times (a plan of one operator, in a process of its own) scans
        each script's words for the keys, as `mentioning` scans the files' words, instead
        of indexing every word of every script (~0.25 s on ops-nn); a run that has the
        index, or asks more often, looks them up in it."""
        plain = all(k.isascii() and b"\n" not in k for k in keys)
        if self._script_words_of or self._script_scans >= _SCANS_BEFORE_INDEX or not plain:
            by_word = self.build_script_words()
            found: dict[bytes, set[Path]] = {}
            for key in keys:
                for word, scripts in by_word.get(key, {}).items():
                    found.setdefault(word, set()).update(scripts)
            return found
        self._script_scans += 1
        wanted = [b"\n" + k + b"\n" for k in keys]
        out: dict[bytes, set[Path]] = {}
        for path, words in zip(self.build_scripts(), self.script_values(SCRIPT_WORDS_KIND, _script_words),
                               strict=True):
            listed = words.encode("ascii")
            if not listed:
                continue
            # Each line's normal form where the line was: the words are ASCII.
            folded = b"\n" + word_key(listed) + b"\n"
            if not any(w in folded for w in wanted):
                continue
            for word, key in zip(listed.split(b"\n"), folded[1:-1].split(b"\n"), strict=True):
                if key in keys:
                    out.setdefault(word, set()).add(path)
        return out

    def build_script_words(self) -> dict[bytes, dict[bytes, set[Path]]]:
        """The words the build scripts name now (`SCRIPT_WORDS_KIND`): normal form
        (`word_key`) -> word -> the scripts naming it. Every operator's build-hook search
        asks this of the same ~1,500 scripts of a large repository: each script's words
        are derived once per content (in the user cache), and each call costs one `stat`
        a script — a script apply edited since the last call (a new signature) is read
        again and its entries replaced, so no answer is older than the script's bytes."""
        store = self.content()
        by_word = self._scripts_by_word
        derived = False
        for path in self.build_scripts():
            listed = store.derived(path, SCRIPT_WORDS_KIND, _script_words)
            before = self._script_words_of.get(path)
            if listed == before:
                continue
            derived = True
            if before:
                for word in before.encode("ascii").split(b"\n"):
                    key = word_key(word)
                    naming = by_word[key][word]
                    naming.discard(path)
                    if not naming:
                        del by_word[key][word]
                        if not by_word[key]:
                            del by_word[key]
            if listed:
                for word in listed.encode("ascii").split(b"\n"):
                    by_word.setdefault(word_key(word), {}).setdefault(word, set()).add(path)
            self._script_words_of[path] = listed
        if derived:
            store.flush()
        return by_word

    @property
    def files(self) -> list[Path]:
        """The searchable files (host code, Python): what `mentioning` searches."""
        if self._files is None:
            self._files = [Path(p) for p in self.file_paths]
        return self._files

    @property
    def scripts(self) -> list[Path]:
        """Shell and CMake files within the search's size bound."""
        if self._scripts is None:
            self._scripts = [Path(p) for p in self.script_paths]
        return self._scripts

    @property
    def sources(self) -> SourcesByName:
        """Every C/C++ file by its name, kernel sources included: where an include that is
        not found beside its includer may be (`../other_op/...` of a flattened build tree)."""
        if self._sources is None:
            self._sources = SourcesByName(self.source_paths)
        return self._sources

    @classmethod
    def build(cls, root: Path) -> RepoIndex:
        """The index of `root`: from the listing kept with its last state where no folder
        the walk listed has changed since (`listed`), else from a walk."""
        return cls.listed(root) or cls.walk(root)

    @classmethod
    def walk(cls, root: Path) -> RepoIndex:
        index = cls(root, built_ns=time.time_ns())
        index._walked_dirs, index._links = [], []
        index._add(walk_paths(root, _INDEXED_EXTS, index._walked_dirs, index._links))
        return index

    @classmethod
    def listed(cls, root: Path) -> RepoIndex | None:
        """The index from the listing kept for `root` (`ContentStore.keep_state`), when it
        was taken by this walk's rules and every folder it lists still has the signature
        it had when it was walked (a file added, removed or renamed changes its folder's);
        None otherwise. What a walk would find, at a `stat` a folder instead of a listing.
        A walk that met a symbolic link keeps none (`_listing`): what a link leads to
        changes with no folder of the listing changing."""
        began = time.time_ns()
        kept = stored_listing(root)
        if kept is None:
            return None
        folders, paths, rules = kept
        if rules != _WALK_RULES:
            return None
        stat = os.stat
        for line in folders.split("\n"):
            sig, _, folder = line.partition("\0")
            try:
                st = stat(folder)
                now = f"{st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}"
            except OSError:
                now = "-"
            if now != sig:
                return None
        index = cls(root, built_ns=began)
        index._add(paths.split("\n") if paths else [])
        index._from_listing = True
        return index

    def _add(self, paths: Iterable[str]) -> None:
        """Sort the walk's paths into the index's groups, in the walk's order."""
        kernel_dir = os.sep + "op_kernel" + os.sep
        for path in paths:
            self._kept.append(path)
            name = path[path.rfind(os.sep) + 1:]
            ext = name[name.rfind("."):].lower()  # the walk kept only names with a suffix, or CMakeLists.txt
            if ext in CPP_EXTS:
                self.source_paths.setdefault(name, []).append(path)
                if kernel_dir in os.sep + path:
                    continue  # kernel sources never hold another layer; they are most of the bytes
                self.file_paths.append(path)
            elif ext in (".sh", ".bash", ".cmake") or name == "CMakeLists.txt":
                try:
                    if os.stat(path).st_size <= SEARCH_LIMIT_BYTES:
                        self.script_paths.append(path)
                except OSError:
                    pass
            elif ext == ".py":
                self.file_paths.append(path)

    def _listing(self) -> tuple[str, str, str] | None:
        """What `listed` needs of this walk: its folders with their signatures, a line
        each, and the paths it kept, a line each, with the walk's rules. None when it came
        from a listing; when it met a symbolic link (a link's target may change, or come
        to exist, or stop existing, in no folder the walk listed); when a name holds a line
        break; or when a folder changed within its timestamp's tick of the walk (its
        signature may not tell an entry added just after it was listed)."""
        if self._from_listing or self._walked_dirs is None or self._links:
            return None
        lines = []
        for folder, sig in self._walked_dirs:
            if sig is not None and max(sig[1], sig[2]) >= self.built_ns - _racy_tick(sig):
                return None
            lines.append(("-" if sig is None else f"{sig[0]} {sig[1]} {sig[2]} {sig[3]}") + "\0" + folder)
        folders, paths = "\n".join(lines), "\n".join(self._kept)
        if folders.count("\n") != len(lines) - 1 or paths.count("\n") != max(len(self._kept) - 1, 0):
            return None  # a line break in a name
        return folders, paths, _WALK_RULES

    def walked(self) -> set[str]:
        """Every path the walk kept (the cache drops its rows of other files under the root)."""
        if os.fspath(Path(self.root)) != ".":
            # The walk's strings are their `Path`s' text (a folder joined to a name), but
            # below `.`, whose entries' `./` a `Path` drops.
            out = {*self.file_paths, *self.script_paths}
            for paths in self.source_paths.values():
                out.update(paths)
            return out
        out = {os.fsdecode(p) for p in (*self.files, *self.scripts)}
        out |= {os.fsdecode(p) for paths in self.sources.values() for p in paths}
        return out

    def warm(self) -> None:
        """Derive what every operator's search asks of the files now (words, build
        scripts): for a parent process about to start workers."""
        if self._words_table() is None:
            self._contents()
        self.build_scripts()
        if not self._script_words_of:
            # Once: each build-hook search brings them up to date (a `stat` a script),
            # and `state` warms the index for every operator plan's cache looks up.
            self.build_script_words()

    def _contents(self) -> list[str]:
        if self._words is None:
            store = self.content()
            stats = self._state_stats
            if stats is not None and stats[0] is phase() and phase() is not None:
                # In the phase the state was taken in: each file's signature is the one
                # the state stat-ed (a phase takes it once), not another `stat` each.
                taken, at = stats[1], stats[2]
                self._words = [store.derived(path, WORDS_KIND, _words, st, taken) if st is not None
                               else store.derived(path, WORDS_KIND, _words)
                               for path, st in zip(self.files, at, strict=False)]
            else:
                self._words = [store.derived(path, WORDS_KIND, _words) for path in self.files]
            store.flush((self.root, self.walked()))
        return self._words

    def shell_scripts_in(self, folder: Path | str) -> tuple[Path, ...] | None:
        """The `.sh` scripts the walk kept directly in `folder`, sorted by name (a CMake
        file's shell siblings, without listing its folder again for every operator); None
        for a folder where the walk kept no script at all (not walked: a config's own
        script, say). Sorted once, by the folder's text: every operator's build-hook edits
        ask it of each of a thousand folders (a `Path`'s hash and parent cost more than
        the rest)."""
        if self._scripts_by_folder is None:
            by_folder: dict[str, list[str]] = {}
            if os.fspath(Path(self.root)) != ".":
                # By the paths' text (a `Path` each of ~4k scripts cost more than the rest):
                # the walk's strings are their `Path`s' text (as `walked`).
                for path in self.script_paths:
                    cut = path.rfind(os.sep)
                    by_folder.setdefault(path[:cut] if cut > 0 else path[:cut + 1], []).append(path)
            else:  # below `.`, whose `./` a `Path` drops
                for script in self.scripts:
                    by_folder.setdefault(os.fspath(script.parent), []).append(os.fspath(script))
            self._scripts_by_folder = {}
            self._script_names_by_folder = by_folder
        key = os.fspath(folder)
        found = self._scripts_by_folder.get(key)
        if found is None:
            paths = self._script_names_by_folder.get(key)
            if paths is None:
                return None
            found = self._scripts_by_folder[key] = tuple(sorted((Path(p) for p in paths if p.endswith(".sh")),
                                                                key=lambda p: p.name))
        return found

    def hashed(self) -> Hashed:
        """The files `state` stands for the bytes of (searchable files and scripts by
        content hash, C / C++ sources by signature), asked of the few files a command
        read: an entry lists none of them (a first plan reads every source of ops-nn for
        their include names: ~4.5k files an entry, hashed again at each lookup)."""
        if self._hashed is None:
            if os.fspath(Path(self.root)) != ".":
                names = frozenset((*self.file_paths, *self.script_paths))
                sources = frozenset(p for paths in self.source_paths.values() for p in paths)
            else:  # below `.` a `Path`'s text drops the walk's `./` (as `walked`)
                names = frozenset(os.fsdecode(p) for p in (*self.files, *self.scripts))
                sources = frozenset(os.fsdecode(p) for paths in self.sources.values() for p in paths)
            self._hashed = Hashed(names, sources, self)
        return self._hashed

    def state(self) -> str:
        """A digest of everything the index answers from: the paths the walk kept, the
        content hash of each file it derives from (searchable files, build scripts) and the
        stat signature of each C / C++ source. Two
        runs with the same state get the same answers to every question, so a result
        derived from them (plan's cache) depends on the index only through this.

        It takes each file's content hash (a file whose signature is unchanged is not
        read), nothing derived from them: the words, the build scripts and their word
        index are loaded or built by the first search that asks, never for a lookup the
        cache answers. Where every file the walk kept has the stat signature it had
        when the last state of this folder was taken from the content hashes, that state
        is the answer (`stored_state`), without a row of the store loaded."""
        taken = time.time_ns()  # before any signature: what the store judges racy by
        stats = self._stats()
        self._state_stats = (phase(), taken, stats)
        signatures = self._signatures(stats)
        seen_changed = self.store is not None and self.store.changes
        signed = None if seen_changed else stored_state(self.root, signatures)
        if signed is not None:
            self._state, self._signed_under = (signed, _SIGNED), signatures
            self._state_kept = True
            self._racy_state = False  # kept only when no source was racy
            self._signed_stats = stats  # what `_unchanged_since_state` compares with
            return signed
        return self._hashed_state(stats, signatures, taken)

    def _groups(self) -> list[tuple[str, list[str]]]:
        """The walk's paths as the state takes them: searchable files, build scripts, then
        the C / C++ sources by name; each group with its tag in the signatures' digest."""
        if self._in_state_order is None:
            self._in_state_order = [("f", self.file_paths), ("s", self.script_paths),
                                    *(("c", self.source_paths[name]) for name in sorted(self.source_paths))]
        return self._in_state_order

    def _stats(self) -> list[os.stat_result | None]:
        """Each path's `stat` now, in `_groups`' order (None: cannot be stat-ed). A path in
        two groups (a C / C++ file outside the kernels is searchable and a source) is
        stat-ed once: nearly half of ops-nn's entries, and a `stat` is what a plan the
        cache answers spends most on."""
        out: list[os.stat_result | None] = []
        add, stat = out.append, os.stat
        taken: dict[str, os.stat_result | None] = {}
        for _, group in self._groups():
            for path in group:
                if path in taken:
                    add(taken[path])
                    continue
                try:
                    st: os.stat_result | None = stat(path)
                except OSError:
                    st = None
                taken[path] = st
                add(st)
        return out

    def _signatures(self, stats: list[os.stat_result | None]) -> str:
        """A digest of the paths the walk kept, by group, and their `stats`' signatures,
        with the state's format: what a state is kept under. The signatures are packed as
        numbers, not written out (a third of the time on ops-nn's ~27k paths, taken by
        every run); the searchable files' part is digested apart as well: the word table's
        key (`_files_key`) for the same stats."""
        packed = _packed(stats)
        # Each group's tag and count, then its paths, NUL between all (no path holds one):
        # no two walks give the same bytes. One string for all (the sources are a group
        # a name: ~11k on ops-nn).
        names: list[str] = []
        for tag, group in self._groups():
            names.append(f"{tag}{len(group)}")
            names.extend(group)
        h = hashlib.sha256(_STATE_FORMAT)
        h.update("\0".join(names).encode("utf-8", "surrogateescape") + b"\0" + b"".join(packed))
        files, scripts = self.file_paths, self.script_paths  # the first two groups
        n = len(files)
        files_key = _group_digest(_FILES_KEY_FORMAT, files, packed[:n])
        scripts_key = _group_digest(_SCRIPTS_KEY_FORMAT, scripts, packed[n:n + len(scripts)])
        self._files_digest = (stats, files_key, scripts_key)
        h.update("".join(self._link_lines()).encode("utf-8", "surrogateescape"))
        return h.hexdigest()

    def _link_lines(self) -> list[str]:
        """The symbolic links the walk met, each with what it points to: a folder moved out
        of the repository behind a link keeps every path and every `stat` (which follows
        the link), and only its target tells the answers are no longer the repository's
        (an include outside it is not read). An index from a kept listing met none (a
        walk that met one keeps no listing)."""
        lines = []
        for link in sorted(self._links or ()):
            try:
                target = os.readlink(link)
            except OSError:
                target = "?"
            lines.append(f"l{link}\0{target}\n")
        return lines

    def _hashed_state(self, stats: list[os.stat_result | None] | None = None, signatures: str = "",
                      taken: int = 0) -> str:
        """The state from each searchable file's content hash (read where its signature
        changed) and each source's signature; `stats` (`_stats`, taken after `taken`) and
        their digest `signatures` when the caller has them. Kept under `signatures` for
        the next run where every hash was taken under the signature stat-ed here and no
        file was racy."""
        if stats is None:
            taken = time.time_ns()
            stats = self._stats()
            signatures = self._signatures(stats)
        store = self.content()
        h = hashlib.sha256()
        trusted = True
        at = iter(stats)
        # A file read now (a first run over the folder) has what the search after the miss
        # asks of it derived from the same bytes: a searchable file's words; a script's
        # kernel building and its words (`build_scripts`, `build_script_words`).
        for group, also in ((self.files, _FILE_KINDS), (self.scripts, _SCRIPT_KINDS)):
            for path in group:
                st = next(at)
                if st is None:
                    sha = store.current_sha(path, also=also)
                    trusted = trusted and sha is None
                else:
                    sha = store.current_sha(path, st, also=also, taken_ns=taken)
                    # The hash was taken (or found) under this signature, not one a
                    # question earlier in the phase took, and not within its tick.
                    trusted = trusted and not store.racy(path) and store.signature_of(path) == signature(st)
                h.update(os.fsencode(path) + b"\0" + (sha or "?").encode() + b"\n")
        store.flush((self.root, self.walked()))  # files hashed anew; gone ones dropped
        # C / C++ sources by their stat signature: what other operators' kernels include
        # is derived from them without reading them (`sharing.operators_including`).
        racy_source = False
        for source in sorted(self.sources):
            for path in self.sources[source]:
                st = next(at)
                stamp = None if st is None else signature(st)
                h.update(os.fsencode(path) + f"\0{stamp}\n".encode())
                # Any write sets the change time to the clock's now (a time set by hand
                # is the modification time's): only a change within the tick of this
                # state can be followed by another with the same signature. A change
                # time ahead of the clock is not (a write now would set it back).
                if stamp is not None and abs(stamp[2] - taken) <= _racy_tick(stamp):
                    racy_source = True
        if racy_source:
            # A source changed within its timestamp's tick of this state may change again
            # with the same signature: this state then stands for bytes no later run can
            # tell from others. It is this run's alone: no entry is kept under it
            # (`state_holds`), and the next run's is taken once the tick has passed.
            h.update(f"racy {taken}\n".encode())
            trusted = False
        for line in self._link_lines():
            h.update(line.encode("utf-8", "surrogateescape"))
        digest = h.hexdigest()
        self._state_kept = trusted and not store.changes
        if self._state_kept:
            # None seen with two contents in this process: the next run whose files all
            # have these signatures has this state.
            store.keep_state(self.root, signatures, digest, self._listing())
        self._state = (digest, store.changes)
        self._racy_state = racy_source
        return digest

    def phase_state(self) -> str | None:
        """The state this process took in the `reading_only` phase running now, while no
        file has been found changed since: what a table derived from every file of the
        index can be kept under and found by in a later run with the same state
        (`index_cache.keep_table`). None otherwise: no phase, no state taken in it, one no
        later run takes again (a file changed within its tick, or found with two
        contents), a file found with other bytes since."""
        current = phase()
        if current is None or self._state is None or self._racy_state or not self._state_kept:
            return None
        if self._state_stats is None or self._state_stats[0] is not current:
            return None
        digest, changes = self._state
        now = self.store.changes if self.store is not None else 0
        return digest if now == (0 if changes == _SIGNED else changes) else None

    def state_holds(self, expected: str) -> bool:
        """Whether the index still answers from the state `expected` (what an entry
        is kept under): the state this process took, and no file found changed since —
        other bytes, or gone (`ContentStore.changes`). The words are derived after the
        state is taken (at the first search): a file edited or removed in between is read
        then, and an operator whose plan did not read it itself would keep an answer
        from the new bytes under the old state. A process that took no state (a worker
        not forked from the one that did) takes it now; one that took it from the
        signatures alone takes it from the content hashes now (what the search read)."""
        if self._state is None:
            return self.state() == expected and not self._racy_state
        if self._racy_state:
            return False  # no later run takes this state: an entry under it is never read
        digest, changes = self._state
        if changes == _SIGNED:
            # Taken from the signatures alone: it holds while every file has them still
            # (a file written since has another ctime at least, and no ctime goes back).
            return (digest == expected and not (self.store is not None and self.store.changes)
                    and self._unchanged_since_state())
        return digest == expected and self.content().changes == changes

    def _unchanged_since_state(self) -> bool:
        """Whether every path the store answered of since the signed state (`_signed_under`'s)
        by a `stat` or a read of its own (`ContentStore.unsure`) still has the signature the
        state took, a `stat` each now, up to the first that differs. The rest it answered
        from rows under the state's own signatures (a row's hash is the content the state
        stands for), and the tables are kept under the state: neither can be of other
        bytes. A file the command read itself is the entry's to check (its content hash, or
        its change time against the walk's start when the state covers it). Stat-ing every
        path instead cost ~0.2 s a plan on ops-nn."""
        # The signed state's own stats, not `_state_stats`: a later `state()` that failed
        # after taking its stats leaves the signed state in place (a second review's find).
        before = self._signed_stats
        if before is None:
            return False
        groups = self._groups()
        if len(before) != sum(len(group) for _, group in groups):
            return False  # not this walk's (cannot happen: the walk is the index's own)
        unsure = self.store.unsure if self.store is not None else set()
        if not unsure:
            return True
        # The store names a file by its `Path`'s text: the walk's own string, but below `.`
        # (whose `./` a `Path` drops): there every path is compared.
        every = os.fspath(Path(self.root)) == "."
        at = iter(before)
        stat = os.stat
        for _, group in groups:
            for path in group:
                then = next(at)
                if not every and path not in unsure:
                    continue
                now: os.stat_result | None
                try:
                    now = stat(path)
                except OSError:
                    now = None
                if then is None or now is None:
                    if then is not now:
                        return False
                elif signature(then) != signature(now):
                    return False
        return True

    def mentioning(self, *words: bytes) -> list[Path]:
        """Files naming any of `words` as a whole word (case-insensitive), or whose own
        name is one of them (`aclnn_<op>.cpp`)."""
        key = tuple(sorted({w.lower() for w in words if w}))
        if not key:
            return []  # no word to look for (an op with no launcher, say): no file names it
        if key in self._answers:
            return self._answers[key]
        hits: list[Path] = []
        table = self._words_table() if all(_WORD_RE.fullmatch(w) for w in key) else None
        if table is not None:
            by_stem = self._by_stem()
            found_at: set[int] = set()
            for w in key:
                found_at.update(by_stem.get(w, ()))
                found_at.update(table.get(w.decode("ascii")))
            hits = [self._file(i) for i in sorted(found_at)]
        elif all(_WORD_RE.fullmatch(w) for w in key) and self._scans >= _SCANS_BEFORE_INDEX:
            by_word, by_stem = self._by_word()
            found: set[int] = set()
            for w in key:
                found.update(by_stem.get(w, ()))
                found.update(by_word.get(w.decode("ascii"), ()))
            hits = [self.files[i] for i in sorted(found)]  # in the files' order, as a scan finds them
        elif all(_WORD_RE.fullmatch(w) for w in key):
            # A plain word is named as a whole word exactly when it is one of the file's words.
            self._scans += 1
            wanted = ["\n" + w.decode("ascii") + "\n" for w in key]
            for path, listed in zip(self.files, self._contents(), strict=True):
                if os.fsencode(path.stem.lower()) in key or any(w in listed for w in wanted):
                    hits.append(path)
        else:
            whole = re.compile(rb"(?<![a-z0-9_])(?:" + b"|".join(re.escape(w) for w in key)
                               + rb")(?![a-z0-9_])")
            for path in self.files:
                if os.fsencode(path.stem.lower()) in key:
                    hits.append(path)
                    continue
                data = read_bounded(path)
                if data is not None and whole.search(data.lower()):
                    hits.append(path)
        self._answers[key] = hits
        return hits

    def _file(self, at: int) -> Path:
        """The searchable file at `at`, without a `Path` made for every other one."""
        return self._files[at] if self._files is not None else Path(self.file_paths[at])

    def _by_stem(self) -> dict[bytes, list[int]]:
        """The files (their indices, ascending) by name: a file's stem, lower case."""
        if self._stem_files is None:
            by_stem: dict[bytes, list[int]] = {}
            for i, path in enumerate(self.file_paths):
                name = path[path.rfind(os.sep) + 1:]
                dot = name.rfind(".")
                stem = name[:dot] if 0 < dot < len(name) - 1 else name  # as `Path.stem`
                by_stem.setdefault(os.fsencode(stem.lower()), []).append(i)
            self._stem_files = by_stem
        return self._stem_files

    def _words_table(self) -> Postings | None:
        """The files by word, from the user cache where a run kept them for the
        searchable files as they are now (their paths and stat signatures: a kernel
        source edited leaves them), else indexed now (`_by_word`) and kept where the last
        run saw the same files: what every later plan of the repository asks first, a
        process an operator, finds there instead of loading every file's words (~0.7 s
        on ops-nn). None (the files' words are scanned, as without it) outside a
        `reading_only` phase, in the first run over the files as they are, or when the
        index's state is not one a later run takes again (a file changed within its
        tick)."""
        current = phase()
        if current is None:
            return None
        if self._table is not None and self._table[0] is current:
            return self._table[1]
        key = self._files_key()
        table: Postings | None = None
        if key is not None:
            text = stored_table_bytes(self.root, WORDS_TABLE_KIND, key)
            if text:
                table = Postings(text)
            elif text == b"":
                # The last run saw the files as they are and kept their key alone: a second
                # run over unchanged files (a sweep, a pre-commit hook on kernel edits)
                # indexes them and keeps the table. A run after each edit of host code
                # keeps the key only: indexing and keeping the table costs ~3 scans.
                by_word, _ = self._by_word()
                table = Postings(by_word)
                kept = table.text()
                if kept is not None and self._files_key() == key:  # no file changed meanwhile
                    keep_table(self.root, WORDS_TABLE_KIND, key, kept)
            else:
                keep_table(self.root, WORDS_TABLE_KIND, key, "")
        self._table = (current, table)
        return table

    def _files_key(self) -> str | None:
        """A digest of the searchable files' paths, in order, and the stat signatures the
        phase's state took of them (made with the state's, `_signatures`); None when that
        state is not one to keep a table under (`phase_state`)."""
        digests = self._group_digests()
        return digests[0] if digests is not None else None

    def _scripts_key(self) -> str | None:
        """As `_files_key`, of the scripts (what the build scripts' tables are kept under:
        a kernel or a host file edited leaves them)."""
        digests = self._group_digests()
        return digests[1] if digests is not None else None

    def _group_digests(self) -> tuple[str, str] | None:
        if self.phase_state() is None or self._state_stats is None:
            return None
        stats = self._state_stats[2]
        if self._files_digest is None or self._files_digest[0] is not stats:
            self._signatures(stats)
        assert self._files_digest is not None
        return self._files_digest[1], self._files_digest[2]

    def _by_word(self) -> tuple[dict[str, list[int]], dict[bytes, list[int]]]:
        """The files (their indices, ascending) holding each word, and named by each name
        (a file's stem, lower case): what a scan of every file's words answers, for a run
        that asks it many times (a repository's operators ask ~10 words each; ops-nn's files
        hold 1.9 M words, indexed in ~0.4 s, a scan costing ~15 ms)."""
        if self._word_files is None:
            by_word: dict[str, list[int]] = {}
            for i, listed in enumerate(self._contents()):
                for word in listed.split("\n"):
                    if word:
                        by_word.setdefault(word, []).append(i)
            self._word_files = by_word
        return self._word_files, self._by_stem()


_REPO_INDEXES: dict[Path, RepoIndex] = {}


def repo_index(root: Path) -> RepoIndex:
    """The index of a repository root, built once per process."""
    if root not in _REPO_INDEXES:
        _REPO_INDEXES[root] = RepoIndex.build(root)
    return _REPO_INDEXES[root]


def forget_repo_indexes() -> None:
    """Drop the indexes built so far: for a process that runs on a tree again after
    changing its files (the source fuzzer), which would otherwise search the old ones."""
    _REPO_INDEXES.clear()


def read_bounded(path: Path, limit: int = SEARCH_LIMIT_BYTES) -> bytes | None:
    try:
        data = read_regular(path, bound=limit)
    except OSError:
        return None
    return None if is_binary(data) else data


def _line(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


_NOT_HOST_DIRS = frozenset({"op_kernel", "op_api", "tests", "test", "ut", "examples", "docs"})
_ATTRIBUTE_CALLS = {b"__attribute__", b"__declspec", b"alignas", b"__launch_bounds__"}
# `#define NAME(params) ...` / `#define NAME ...`, continuation lines included.
_DEFINE_HEAD_RE = re.compile(
    rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\()?((?:[^\n]*\\\r?\n)*[^\n]*)", re.M)


@dataclass(frozen=True)
class MacroEntry:
    """A kernel entry written inside a function-like macro's body (`#define
    DEFINE_KERNEL(name) extern "C" __global__ __aicore__ void name(...) {...}`)."""

    path: Path
    line: int
    macro: str


def _directive_spans(code: bytes) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _DEFINE_HEAD_RE.finditer(code)]


def entry_macros(code: bytes) -> tuple[set[bytes], dict[bytes, int]]:
    """Object-like macros that spell an entry's qualifiers (`#define KERNEL_API extern
    "C" __global__ __aicore__`), and function-like macros whose body defines an entry
    (name -> offset of the `#define`)."""
    qualifiers: set[bytes] = set()
    defining: dict[bytes, int] = {}
    for m in _DEFINE_HEAD_RE.finditer(code):
        if not _GLOBAL_RE.search(m.group(3)):
            continue
        if m.group(2):
            defining.setdefault(m.group(1), m.start())
        elif b"(" not in m.group(3):
            qualifiers.add(m.group(1))
    return qualifiers, defining


def _name_paren(code: bytes, start: int) -> int:
    """The `(` of the parameter list after a head at `start`: attribute calls
    (`__attribute__((always_inline))`) are stepped over."""
    pos = start
    while True:
        paren = code.find(b"(", pos)
        if paren < 0:
            return -1
        before = re.search(rb"([A-Za-z_]\w*)\s*$", code[pos:paren])
        if before is None or before.group(1) not in _ATTRIBUTE_CALLS:
            return paren
        close = match_bracket(code, paren)
        if close < 0:
            return -1
        pos = close + 1


def find_entries(kernel_files: list[Path], limit: int = SEARCH_LIMIT_BYTES) -> list[EntryPoint]:
    """`__global__ __aicore__` function definitions, with or without extern "C", in the
    files of at most ``limit`` bytes (the repository search's bound unless told).

    A lexical scan (comments blanked) is enough here and keeps discovery cheap: the name is
    the identifier before the parameter list's `(` after `__global__` (or after a macro
    standing for the qualifiers), and it is a definition when the matching `)` is
    followed by `{`. Text inside `#define`s is not an entry (see `find_macro_entries`).
    """
    entries: list[EntryPoint] = []
    for path in kernel_files:
        data = read_bounded(path, limit)
        if data is not None:
            entries.extend(entries_in(path, data))
    return entries


def entries_in(path: Path, data: bytes) -> list[EntryPoint]:
    """The kernel entries of one file's bytes (see :func:`find_entries`)."""
    entries: list[EntryPoint] = []
    code = blank_comments(data)
    if b"__global__" in code and _GLOBAL_RE.search(code):
        qualifier_macros, _ = entry_macros(code)
        heads = [b"__global__", *sorted(qualifier_macros)]
        head_re = re.compile(rb"\b(?:" + b"|".join(re.escape(h) for h in heads) + rb")\b")
        directives = _directive_spans(code)
        for m in head_re.finditer(code):
            if any(a <= m.start() < b for a, b in directives):
                continue
            via_macro = m.group(0) != b"__global__"
            if not via_macro and not _AICORE_RE.search(code):
                continue
            paren = _name_paren(code, m.end())
            if paren < 0:
                continue
            head = code[m.end() : paren]
            if (not via_macro and b"__aicore__" not in head
                    and b"__aicore__" not in code[max(0, m.start() - 40) : m.start()]):
                continue
            names = re.findall(rb"[A-Za-z_]\w*", head)
            if not names or b";" in head or b"{" in head:
                continue
            close = match_bracket(code, paren)
            if close < 0:
                continue
            after = code[close + 1 : close + 200].lstrip()
            if not after.startswith(b"{"):
                continue  # a declaration
            # What precedes it in the same declaration: `template <...>`, `extern "C"`.
            prev = max(code.rfind(b";", 0, m.start()), code.rfind(b"}", 0, m.start()))
            before = b"\n".join(
                ln for ln in code[prev + 1 : m.start()].split(b"\n") if not ln.lstrip().startswith(b"#")
            )
            macro_value = next((d.group(3) for d in _DEFINE_HEAD_RE.finditer(code)
                                if via_macro and d.group(1) == m.group(0)), b"")
            entries.append(
                EntryPoint(path, _line(code, m.start()), decode(names[-1]),
                           extern_c=b'extern "C"' in before or b'extern "C"' in macro_value,
                           templated=b"template" in before)
            )
    return entries


def find_macro_entries(kernel_files: list[Path], limit: int = SEARCH_LIMIT_BYTES) -> list[MacroEntry]:
    """Entries defined by function-like macros, at each place a macro is invoked (or at
    its `#define` when it is not invoked in these files), in files of at most ``limit``
    bytes."""
    found: list[MacroEntry] = []
    for path in kernel_files:
        data = read_bounded(path, limit)
        if data is None or b"__global__" not in data or not _GLOBAL_RE.search(data):
            continue
        code = blank_comments(data)
        _, defining = entry_macros(code)
        directives = _directive_spans(code)
        for name, at in defining.items():
            uses = [u.start() for u in re.finditer(rb"\b" + re.escape(name) + rb"\s*\(", code)
                    if not any(a <= u.start() < b for a, b in directives)]
            found += [MacroEntry(path, _line(code, u), decode(name)) for u in (uses or [at])]
    return found


def operator_dir_of(path: Path, root: Path) -> Path | None:
    """The operator directory a kernel source belongs to by its place in the tree, if any,
    at or below `root`: the parent of its `op_kernel/`, or `ascend_kernels/<op>` /
    `csrc/ops/<op>` (the layout's folders may lie above `root`)."""
    if not path.is_relative_to(root):
        return None
    parts = path.parts[:-1]
    lowest = len(root.parts) - 1  # the index of root's own name
    # The innermost match wins: `ascend_kernels/<op>/op_kernel/...` is <op>, and an
    # `op_kernel/` nested in a test tree names the test tree, which then needs an entry.
    for i in range(len(parts) - 1, lowest - 1, -1):
        if parts[i] == "op_kernel" and i > lowest:
            return Path(*parts[:i])
        if parts[i - 1] == "ascend_kernels" or parts[i - 2 : i] == ("csrc", "ops"):
            return Path(*parts[: i + 1])
    return None


def find_operator_dirs(root: Path) -> list[Path]:
    """Operator directories at or below `root`, sorted: every directory whose `op_kernel/`
    holds a kernel entry, plus `ascend_kernels/<op>` and `csrc/ops/<op>` directories
    holding one. `root` itself counts when it is one."""
    root = root.resolve()
    found: set[Path] = set()
    for path in walk_files(root, KERNEL_EXTS):
        op_dir = operator_dir_of(path, root)
        if op_dir is None or op_dir in found:
            continue
        # The source bound, as `discover` reads an operator's kernel files: one rule for
        # what holds an entry, whatever the file's size.
        bound = source_limit("source")
        data = read_bounded(path, bound)
        if (data is not None and b"__global__" in data and _GLOBAL_RE.search(data)
                and find_entries([path], bound)):
            found.add(op_dir)
    return sorted(found)


def may_be_one_operator(op_dir: Path) -> bool:
    """Whether `op_dir` may be one operator directory, from a walk of it alone: it holds a
    kernel source, and no kernel entry of another operator lies below it unless it holds
    one itself. What a cache lookup asks before it indexes the repository: a folder the
    command refuses anyway (no operator, or several: the repository root) must not cost a
    walk and an index of everything around it. A folder that passes may still be refused
    by the command.

    The rule is `refuse_parent_of_operators`': an operator with another kernel entry below
    it is still one (ops-nn's `<op>/tests/ut/op_kernel/test_<op>.cpp` is a unit test's
    kernel, and many of its operators have one): asking only for the other entry left
    every such operator out of the caches."""
    root = op_dir.resolve()
    own: list[Path] = []
    any_source = other = False
    for path in walk_files(root, KERNEL_EXTS):
        any_source = True
        owner = operator_dir_of(path, root)
        if owner is None or owner == root:
            if owner == root:
                own.append(path)
            continue  # its own kernel files are read only if another entry lies below
        if not other:
            other = _holds_entry(path)
    if not other:
        return any_source
    # Another operator's entry below: one only if it holds an entry of its own (the
    # command then takes its own; a folder of operators holds none, whatever its own
    # files say of `__global__` in a comment or a string).
    return any(_holds_entry(path) for path in own)


def _past_source_bound(paths: Iterable[Path]) -> TooLarge | None:
    """The refusal of the first file of ``paths`` past the source bound (its size and the
    `[limits]` entry that raises it), so "no kernel entry" is not said of a file unread."""
    bound = source_limit("source")
    for path in paths:
        try:
            size = os.stat(path).st_size
        except OSError:
            continue
        if size > bound:
            return TooLarge(path, size, "source", bound)
    return None


def _holds_entry(path: Path) -> bool:
    """Whether the kernel source defines a kernel entry, as `find_operator_dirs` asks."""
    bound = source_limit("source")
    data = read_bounded(path, bound)
    return data is not None and b"__global__" in data and _GLOBAL_RE.search(data) is not None and bool(
        find_entries([path], bound))


def discover(op_dir: Path, repo_root: Path, config: Config, searches: Sequence[LayerSearch] = ()) -> Layers:
    """Find the operator's kernel entry, then each layer's files by that layer's own
    `search` (the registry's layers; none for a kernel-only analysis); raises InputError
    without an entry. `optrace.toml` layer entries replace what a search found."""
    if not op_dir.is_dir():
        what = ("not a directory: give the operator directory (the folder holding op_kernel/)"
                if op_dir.exists() else "operator directory does not exist")
        raise InputError(Diagnostic(OT001, what, op_dir, 0))
    if "entry" not in config.layers:
        refuse_parent_of_operators(op_dir)
    op_name = op_dir.name
    if op_name != os.fsencode(op_name).decode("utf-8", "replace"):
        # The directory's name is the operator's: it spells the functions, classes and
        # files of every layer, which are text. (A name of bytes elsewhere on the path is
        # fine: paths round-trip as bytes.)
        raise InputError(Diagnostic(OT001, "the operator directory's name is not UTF-8 text: it names "
                                    "the operator in every layer; rename the directory", op_dir, 0))
    layers = Layers(op_name, camel_case(op_name), op_dir, repo_root)
    op_files = list(walk_files(op_dir))
    cpp_files = [p for p in op_files if p.suffix.lower() in CPP_EXTS]

    # --- kernel entry and tree -------------------------------------------------------
    if "entry" in config.layers:
        kernel_candidates = list(config.layers["entry"])
    else:
        preferred = [p for p in cpp_files if "op_kernel" in p.parts]
        kernel_candidates = [p for p in (preferred or cpp_files) if p.suffix.lower() in KERNEL_EXTS]
    # The operator's own kernel files within the bound of any source optrace parses, not
    # the repository search's 2 MiB: a generated or amalgamated kernel file past 2 MiB is
    # still this operator's entry (it was "no kernel entry").
    entries = find_entries(kernel_candidates, source_limit("source"))
    if entries:
        # Prefer the function named after the op, then the file named after it.
        entries.sort(key=lambda e: (not same_op(e.name, op_name), not same_op(e.path.stem, op_name),
                                    str(e.path)))
        layers.entry = entries[0]
        layers.kernel_dir = _kernel_dir(entries[0].path, op_dir)
        e = entries[0]
        quals = ('extern "C" ' if e.extern_c else "") + ("template " if e.templated else "")
        detail = f"{e.name} ({quals}__global__ __aicore__)"
        layers.found["entry"] = [LayerFile(e.path, e.line, detail)]
    else:
        by_macro = find_macro_entries(kernel_candidates, source_limit("source"))
        if by_macro:
            m = by_macro[0]
            raise InputError(Diagnostic(
                OT010,
                f"the kernel entry is defined by the macro `{m.macro}`: its body is the macro's "
                "text, shared by every use, where no trace point can go; write this entry out "
                "as a function (the macro can stay for the others)", m.path, m.line))
        too_large = _past_source_bound(kernel_candidates)
        if too_large is not None:
            raise InputError(Diagnostic(
                OT010, f"no kernel entry found; this kernel file was not read: {too_large.strerror}",
                Path(too_large.filename), 0))
        raise InputError(
            Diagnostic(
                OT010,
                "no kernel entry (`__global__ __aicore__` function definition) found under "
                "the operator directory",
                op_dir,
                0,
            )
        )

    # --- each layer's files: its own search (codemods/<layer>.py), in registry order -------
    ctx = SearchContext(layers, cpp_files, config.sample_globs) if searches else None
    for search in searches:
        key = search.FOUND_KEY
        if key is None:
            continue
        layers.titles[key] = search.TITLE
        if search.OPTIONAL:
            layers.optional |= {key}
        if key == "entry":
            continue  # found above: the kernel parse needs it first
        assert ctx is not None
        found = search.search(ctx)
        if found:
            layers.found[key] = found

    for key, paths in config.layers.items():
        if key == "entry":
            continue
        layers.found[key] = [LayerFile(p, 1, "configured in optrace.toml") for p in paths]
    return layers


def is_no_operator(d: Diagnostic, op_dir: Path) -> bool:
    """Whether a refusal says `op_dir` is no operator at all: no kernel entry anywhere
    under it (OT010 located at the directory itself, not at an entry that does not
    parse), or a folder holding several (OT015). Every command refuses such a directory,
    exit 2, even those that report an operator without trace points and carry on."""
    return d.path == op_dir and d.code in (OT010, OT015)


def refuse_parent_of_operators(op_dir: Path) -> None:
    """A folder holding operators (`ascend_kernels/`, `csrc/`) is not one: taking the first
    kernel entry found below it would instrument an arbitrary one of them."""
    found = find_operator_dirs(op_dir)
    if not found or op_dir.resolve() in found:
        return
    shown = [p.relative_to(op_dir.resolve()).as_posix() for p in found]
    listing = ", ".join(shown[:20]) + (f" and {len(shown) - 20} more" if len(shown) > 20 else "")
    raise InputError(Diagnostic(
        OT015, f"not one operator directory: it holds {len(found)} operator director"
        f"{'y' if len(found) == 1 else 'ies'} below it ({listing}); give one of them", op_dir, 0))


def _kernel_dir(entry: Path, op_dir: Path) -> Path:
    for parent in entry.parents:
        if parent.name == "op_kernel":
            return parent
        if parent == op_dir:
            break
    return entry.parent


# A function definition's head: its name, the parameter list, then the body's `{`.
_FN_HEAD_RE = re.compile(rb"([A-Za-z_]\w*)\s*\([^;{}]*\)\s*(?:const\b\s*)?(?:noexcept\b\s*)?"
                         rb"(?:->[^;{}]*)?\{")
_NOT_FUNCTIONS = frozenset({b"if", b"for", b"while", b"switch", b"catch", b"return", b"sizeof", b"defined"})
# `m.impl("name", &fn)` (the rule codemods/torch_adapter.py's `torch_names` follows).
_IMPL_RE = re.compile(rb'\.\s*impl\s*\(\s*"(?:\w+::)?(\w+)(?:\.\w+)?"\s*,[^;]*?&?\s*([A-Za-z_][\w:]*)\s*\)')


def _enclosing_function(code: bytes, at: int) -> str | None:
    """The name of the innermost function definition whose body holds offset `at`."""
    name = None
    for m in _FN_HEAD_RE.finditer(code, 0, at):
        if m.group(1) in _NOT_FUNCTIONS:
            continue
        close = _matching_brace(code, m.end() - 1)
        if close < 0 or close > at:
            name = decode(m.group(1))
    return name


def _matching_brace(code: bytes, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(code)):
        c = code[i]
        if c == 0x7B:
            depth += 1
        elif c == 0x7D:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _torch_names(index: RepoIndex, op_name: str, launchers: set[str]) -> list[str]:
    """The op's names on the torch side: its own, and every name registered
    (`m.impl("name", &fn)`) for a function that launches it — `moe_combine_prefill` for
    the adapter launching `moe_combine_normal`. Then the registration, the schema, the
    Meta registration and the Python callers are found under those names too."""
    names = [op_name]
    if not launchers:
        return names
    for path in index.mentioning(*[n.encode() for n in launchers]):
        data = read_bounded(path)
        if data is None or path.suffix.lower() not in CPP_EXTS:
            continue
        for m in _IMPL_RE.finditer(blank_comments(data)):
            name, fn = decode(m.group(1)), decode(m.group(2)).split("::")[-1]
            if fn in launchers and name not in names:
                names.append(name)
    return names


# A name `op_word` spells with word bytes only (`build_scripts_naming_op`).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_]+")


def _names_alternation(names: list[str]) -> bytes:
    return rb"(?:" + rb"|".join(re.escape(n.encode()) for n in names) + rb")"


# Where a host layer is never found inside the operator directory: the l0 launch code
# (op_api/), the kernel, unit tests and docs.
def is_host_source(path: Path, op_dir: Path) -> bool:
    """A file of the operator's host code (OpDef, infer, tiling): not under op_kernel/,
    op_api/, tests or docs, and not a unit test by name."""
    name = path.name.lower()
    return not (_NOT_HOST_DIRS & set(path.relative_to(op_dir).parts[:-1])) and not (
        name.startswith("test_") or name.endswith("_test.cpp"))


class SearchContext:
    """What every layer's search shares for one operator: its C/C++ files, the
    repository's files naming it (under its name in any spelling or one of its torch
    names), the patterns for those names, and each file's bytes read once."""

    def __init__(self, layers: Layers, operator_cpp: list[Path], sample_globs: Sequence[str] = ()) -> None:
        self.layers = layers
        self.op_dir = layers.op_dir
        self.operator_cpp = operator_cpp  # C/C++ files under the operator directory
        self.sample_globs = tuple(sample_globs)
        self.op = os.fsencode(layers.op_name)
        self.camel = op_name_pattern(layers.op_name)  # any spelling (acronyms, case)
        self.exec_re = launch_pattern(layers.op_name)  # what the torch codemod reads as a launch
        self.index = repo_index(layers.repo_root)
        self._data: dict[Path, bytes | None] = {}
        self._code: dict[Path, bytes] = {}
        spelled = layers.camel.encode()  # the index is lower case: one spelling finds them all
        words = (self.op, spelled, b"aclnn" + spelled, b"aclnn_" + self.op,
                 b"aclnnInner" + spelled + b"GetWorkspaceSize")
        candidates = self.index.mentioning(*words)
        # The adapters' launching functions first: the names torch registers them under
        # are the op's names for the registration, fake and caller searches.
        launchers: set[str] = set()
        for path in candidates:
            if path.suffix.lower() not in CPP_EXTS or "op_kernel" in path.parts:
                continue
            code = self.code(path)
            for m in self.exec_re.finditer(code) if LAUNCH_HINT in code else ():
                fn = _enclosing_function(code, m.start())
                if fn is not None:
                    launchers.add(fn)
        self.names = _torch_names(self.index, layers.op_name, launchers)
        if len(self.names) > 1:  # files naming only a torch name join, in the index's order
            candidates = self.index.mentioning(*words, *[n.encode() for n in self.names[1:]])
        # Repository files naming the op, in the index's order; not those of another operator
        # of the same name (ops-nn has activation/gelu and experimental/activation/gelu):
        # that one's aclnn header, tests and adapters are its own.
        self.candidates = [path for path in candidates if not self._of_a_namesake(path)]
        self.any_name = _names_alternation(self.names)
        # The op named in any spelling, or one of its torch names, as a whole word.
        self.op_word = re.compile(rb"\b(?:" + self.camel + rb"|" + self.any_name + rb")\b")
        # Names that are plain identifiers: the normal forms of the words `op_word` matches
        # (see `build_scripts_naming_op`); None when a name is not one.
        plain = all(_PLAIN_NAME.fullmatch(n) for n in self.names)
        self._word_keys = frozenset(word_key(n.encode()) for n in self.names) if plain else None

    def build_scripts_naming_op(self) -> set[Path]:
        """The repository's build scripts in which `op_word` finds a match.

        Without reading them: when the op's names are plain identifiers, each alternative
        of `op_word` matches one word byte or more and nothing else (`op_name_pattern`
        spells a name as each letter in either case, its digits and `_*` between them; a
        torch name is itself). A match between two `\\b` of nothing but word bytes is a
        maximal run of them, so `op_word` matches a script exactly when it matches one of
        the script's words whole (`RepoIndex.build_script_words`), and that word has the
        normal form (`word_key`) of one of the names: only those words are tried. A name
        that is not plain (a `-`, a letter outside ASCII) has every script searched, as
        before: only the directory's name can be one (torch names are `\\w+`), and with
        it searched in every script, its plain torch names cost nothing more there."""
        if self._word_keys is None:
            return {p for p in self.index.build_scripts() if self.op_word.search(self.data(p) or b"")}
        found: set[Path] = set()
        for word, scripts in self.index.scripts_with_words(self._word_keys).items():
            if self.op_word.fullmatch(word):
                found |= scripts
        return found

    def data(self, path: Path) -> bytes | None:
        """The file's bytes (None: unreadable, too large or binary), read once."""
        if path not in self._data:
            self._data[path] = read_bounded(path)
        return self._data[path]

    def code(self, path: Path) -> bytes:
        """The file's bytes with comments blanked (C / C++), read once."""
        if path not in self._code:
            data = self.data(path)
            self._code[path] = blank_comments(data) if data is not None else b""
        return self._code[path]

    def inside(self, path: Path) -> bool:
        return self.op_dir in path.parents

    def _of_a_namesake(self, path: Path) -> bool:
        """Whether `path` lies in another operator's directory named as this op (a folder
        of the op's name holding an `op_kernel/`), outside this operator's."""
        root = self.layers.repo_root
        for folder in path.parents:
            if folder == self.op_dir or folder == root or root not in folder.parents:
                return False
            if same_op(folder.name, self.layers.op_name):
                kernels = folder / "op_kernel"
                looked_at(kernels)  # whether it is there decides what is searched
                if kernels.is_dir() and self._holds_an_entry(kernels):
                    return True
        return False

    def _holds_an_entry(self, kernels: Path) -> bool:
        """Whether a folder's C / C++ files define a kernel entry: an operator's
        `op_kernel/` does; a unit test's folder of that name beside the op's tests holds
        gtest code, and the tests there are this operator's."""
        for path in walk_files(kernels, CPP_EXTS):
            data = read_bounded(path, source_limit("source"))  # as `discover` reads a kernel file
            if data is not None and b"__global__" in data and entries_in(path, data):
                return True
        return False

    def cpp_candidates(self) -> Iterator[tuple[Path, bytes]]:
        """The C/C++ files naming the op outside op_kernel/, with their code (comments
        blanked)."""
        for path in self.candidates:
            readable = self.data(path) is not None
            if path.suffix.lower() in CPP_EXTS and "op_kernel" not in path.parts and readable:
                yield path, self.code(path)

    def python_candidates(self) -> Iterator[tuple[Path, bytes]]:
        """The Python files outside the operator directory naming it, with their bytes."""
        for path in self.candidates:
            if not self.inside(path) and path.suffix.lower() == ".py":
                data = self.data(path)
                if data is not None:
                    yield path, data

    @staticmethod
    def at(path: Path, data: bytes | None, pattern: bytes | None, detail: str) -> LayerFile:
        """The layer file, at the line of `pattern`'s first match in `data` (else line 1)."""
        line = 1
        if data is not None and pattern is not None:
            m = re.search(pattern, data)
            if m:
                line = _line(data, m.start())
        return LayerFile(path, line, detail)


class LayerSearch(Protocol):
    """A layer's part of discovery (each layer in codemods/ is one): the key its files are
    found under (None: it has none, its files come from other layers'), its title, and
    whether an operator may lack it."""

    FOUND_KEY: ClassVar[str | None]
    TITLE: ClassVar[str]
    OPTIONAL: ClassVar[bool]

    def search(self, ctx: SearchContext) -> list[LayerFile]: ...
