"""Host compile of kernel sources with libclang against the AscendC host stub.

`check` keeps the errors that land on code optrace inserted (compile safety, OT420);
the corpus run compares every error before and after `apply` (bench/corpus.py). Both
need the same translation-unit setup, which this module owns: the stub header, small
shims for the standard headers the libclang wheel lacks, and empty stand-ins for project
headers that are absent (submodules, CANN), so no include is fatal and parsing reaches
every line.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import multiprocessing
import os
import resource
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

from clang import cindex

from optrace.engine.discovery import CPP_EXTS, walk_files
from optrace.engine.includes import scan_includes
from optrace.engine.probes import Identity, identity_of, inside_folder, scratch_folder, spelled_absolute
from optrace.engine.source import NotRegularFile, read_regular


def _runtime_folder() -> Path:
    """The runtime package's folder, as installed, found without importing it (the engine
    does not import the runtime). libclang reads the stubs by path, so they are real files
    (optrace is never run from a zip); importlib.resources' `files()` would import zipfile
    and its readers, a noticeable cost at the start of `check`."""
    spec = importlib.util.find_spec("optrace.runtime")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("optrace.runtime is not installed as a folder")
    return Path(next(iter(spec.submodule_search_locations)))


STUBS = _runtime_folder() / "stub"


def stub_header() -> Path:
    return STUBS / "ascendc_host_stub.h"


def host_stub_header() -> Path:
    """The CANN host API names optrace's op_host / aclnn insertions use."""
    return STUBS / "cann_host_stub.h"


@dataclass(frozen=True)
class HostError:
    """One libclang error at a line and column of a compiled file."""

    line: int
    column: int
    message: str


@dataclass
class HostCompile:
    """Errors per compiled file (in that file only), and files that could not be compiled."""

    errors: dict[Path, list[HostError]] = field(default_factory=dict)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    # A file was skipped for the time bound, or for a failure of libclang itself (it did
    # not load, the memory bound): an answer of the machine as much as of the files
    # (check keeps no cache entry of it).
    out_of_time: bool = False
    # What the answer rests on, read or stat-ed in the child where the parent's cache
    # cannot see it: every file libclang read (a header outside the repository the
    # include graph leaves alone), every include candidate looked for (`probes`).
    read: set[str] = field(default_factory=set)
    looked: set[str] = field(default_factory=set)
    # What each file read was just after libclang read it (device, inode, size, times):
    # a file swapped while the check runs keeps no cache entry, as in the parent.
    identities: dict[str, Identity] = field(default_factory=dict)


class _OfTheMachine(str):
    """Why a child gave no answer, when the reason is the machine's, not the files': its
    time bound, its memory bound, libclang failing (not loaded: another library, or none)."""


# libclang runs in a child process: a file can crash it (a template nested 10,000 deep
# overflows its stack) or make it run away, and neither may take `check` down with it.
# A real operator's files compile in seconds against the stand-in headers; a file past a
# minute is one libclang cannot finish (an unclosed template thousands deep runs until the
# memory bound, then on).
COMPILE_SECONDS = 60.0  # the batch's child; the retries after it share as much again
COMPILE_BYTES = 4 << 30  # address space a child may add to what it inherits


def host_compile_bounded(files: list[Path], op_dir: Path, only_lines: Mapping[Path, set[int]] | None = None,
                         contents: Mapping[Path, bytes] | None = None, *, seconds: float = COMPILE_SECONDS,
                         memory: int = COMPILE_BYTES) -> HostCompile:
    """`host_compile` in a child process with a time and a memory bound. When the child
    crashes or hits a bound, each file is compiled again in a child of its own, so the
    files that compile keep their errors and the one that crashed is named (skipped, with
    why) instead of the process dying with it. The retries share one more `seconds`: the
    file that ran past the bound in the batch runs past it alone too, and each retry with
    a bound of its own made a check of N files take N + 1 times it. A file left when the
    time is spent is skipped, and says so: at most twice `seconds` in all."""
    return start_host_compile(files, op_dir, only_lines, contents, seconds=seconds, memory=memory).result()


class PendingCompile:
    """`host_compile_bounded` under way: its batch's child started, so that the caller
    works on while libclang runs (check plans the operator meanwhile: on two cores the
    compile then costs no wall time). `result` waits for the batch and runs the retries;
    `cancel` stops it. The time bound counts from the start, as it did when the caller
    waited at once."""

    def __init__(self, files: list[Path], op_dir: Path, only_lines: Mapping[Path, set[int]] | None,
                 contents: Mapping[Path, bytes] | None, seconds: float, memory: int) -> None:
        self._args = (files, op_dir, only_lines, contents)
        self._seconds, self._memory = seconds, memory
        self._deadline = time.monotonic() + seconds
        # The stand-ins' folder is the parent's: a child that crashes cannot leave it behind.
        self._stub = tempfile.TemporaryDirectory(prefix="optrace-stub-")
        scratch_folder(self._stub.name)  # no input of the check (its removal opens it)
        try:
            self._child, self._receive = _started(files, op_dir, only_lines, contents, memory,
                                                  Path(self._stub.name))
        except BaseException:
            self._stub.cleanup()
            raise
        self._done = False

    @property
    def pid(self) -> int | None:
        """The batch's child process."""
        return self._child.pid

    def result(self) -> HostCompile:
        """The batch's errors, or (when its child crashed or hit a bound) each file's from
        a child of its own."""
        if self._done:
            raise RuntimeError("the compile's result was taken already")
        self._done = True
        try:
            outcome = _outcome(self._child, self._receive, max(0.0, self._deadline - time.monotonic()),
                               self._seconds)
        except BaseException:  # interrupted while waiting: the child goes too
            _stop(self._child)
            raise
        finally:
            self._stub.cleanup()
        if isinstance(outcome, HostCompile):
            return outcome
        files, op_dir, only_lines, contents = self._args
        if len(files) == 1:
            return HostCompile(skipped=[(files[0], outcome)], out_of_time=isinstance(outcome, _OfTheMachine))
        seconds = self._seconds
        merged = HostCompile()
        deadline = time.monotonic() + seconds
        for path in files:
            left = deadline - time.monotonic()
            if left <= 0:
                merged.skipped.append((path, f"the compile check ran out of time ({seconds:g} s for the "
                                             "files of a batch that failed) before this file"))
                merged.out_of_time = True
                continue
            one = _in_child([path], op_dir, only_lines, contents, round(left, 1), self._memory)
            if isinstance(one, HostCompile):
                merged.errors.update(one.errors)
                merged.skipped.extend(one.skipped)
                merged.read |= one.read
                merged.looked |= one.looked
                for name, identity in one.identities.items():
                    merged.identities.setdefault(name, identity)
            else:
                merged.skipped.append((path, one))
                merged.out_of_time |= isinstance(one, _OfTheMachine)
        return merged

    def cancel(self) -> None:
        """Stop the batch (the caller failed before it wanted the result)."""
        if self._done:
            return
        self._done = True
        try:
            _stop(self._child)
            self._receive.close()
        finally:
            self._stub.cleanup()


def _stop(child: BaseProcess) -> None:
    if child.is_alive():
        child.kill()
    child.join()


def start_host_compile(files: list[Path], op_dir: Path, only_lines: Mapping[Path, set[int]] | None = None,
                       contents: Mapping[Path, bytes] | None = None, *, seconds: float = COMPILE_SECONDS,
                       memory: int = COMPILE_BYTES) -> PendingCompile:
    """`host_compile_bounded`, started: its `result()` is what that returns."""
    return PendingCompile(files, op_dir, only_lines, contents, seconds, memory)


def _vm_size() -> int:
    """This process's address space in bytes (0 where /proc does not say)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _child(send: Connection, files: list[Path], op_dir: Path, only_lines: Mapping[Path, set[int]] | None,
           contents: Mapping[Path, bytes] | None, memory: int, stub_dir: Path) -> None:
    # Ctrl-C reaches the whole process group: the parent, planning meanwhile, stops this
    # child itself (no traceback of the child's on the terminal).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        limit = _vm_size() + memory
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ValueError, OSError):
        pass  # no bound to set here: the time bound still holds
    try:
        result: HostCompile | str = host_compile(files, op_dir, only_lines, contents, stub_dir=stub_dir)
    except MemoryError:
        result = _OfTheMachine(f"the compile check needed more than its {memory >> 20} MiB")
    except Exception as exc:  # reported for the file, as a crash is
        result = _OfTheMachine(f"the compile check failed: {type(exc).__name__}: {exc}")
    send.send(result)
    send.close()


def _started(files: list[Path], op_dir: Path, only_lines: Mapping[Path, set[int]] | None,
             contents: Mapping[Path, bytes] | None, memory: int,
             stub_dir: Path) -> tuple[BaseProcess, Connection]:
    """A child compiling `files`, and the end of the pipe its answer comes on."""
    ctx = multiprocessing.get_context("fork")  # libclang and the inputs without a re-import
    receive, send = ctx.Pipe(duplex=False)
    try:
        child = ctx.Process(target=_child, args=(send, files, op_dir, only_lines, contents, memory, stub_dir),
                            daemon=True)
        child.start()
    except BaseException:
        receive.close()
        raise
    finally:
        send.close()  # the child's copy stays open: its death is then an end of file here
    return child, receive


def _in_child(files: list[Path], op_dir: Path, only_lines: Mapping[Path, set[int]] | None,
              contents: Mapping[Path, bytes] | None, seconds: float, memory: int) -> HostCompile | str:
    """The child's HostCompile, or why there is none."""
    with tempfile.TemporaryDirectory(prefix="optrace-stub-") as stub_dir:
        child, receive = _started(files, op_dir, only_lines, contents, memory, Path(stub_dir))
        return _outcome(child, receive, seconds, seconds)


def _outcome(child: BaseProcess, receive: Connection, wait: float, seconds: float) -> HostCompile | str:
    """What the child answered within `wait` seconds (`seconds`: its bound, as said)."""
    outcome: HostCompile | str | None = None
    try:
        if receive.poll(wait):
            outcome = receive.recv()
        else:
            outcome = _OfTheMachine(f"the compile check took longer than {seconds:g} s")
    except EOFError:
        pass  # the child died before it answered: its exit status says how
    finally:
        receive.close()
    child.join(5.0)
    if child.is_alive():
        child.kill()
        child.join()
    if outcome is None:
        code = child.exitcode or 0
        how = signal.Signals(-code).name if code < 0 and -code in signal.valid_signals() else f"exit {code}"
        outcome = f"the compile check crashed ({how}) on this file or a header it includes"
    return outcome


def host_compile(files: list[Path], op_dir: Path, only_lines: Mapping[Path, set[int]] | None = None,
                 contents: Mapping[Path, bytes] | None = None, stub_dir: Path | None = None) -> HostCompile:
    """libclang (`-fsyntax-only`) errors of each file — read from a source's translation
    unit when it includes the file, else from the file's own — with include dirs = every
    folder of the operator (`compile_tus`). `only_lines`: per file, the only lines whose
    errors are wanted (check asks for the lines optrace inserted); others are skipped
    before their message is read. `contents`: what libclang reads instead of a file's
    bytes (same lines: engine/compile_scope.py's bodies left out), by resolved path.
    `stub_dir`: an empty folder for the stand-ins, which its caller removes (else one of
    its own, removed here)."""
    out = HostCompile()
    _library_file_without_platform()
    index = cindex.Index.create()
    all_files = list(walk_files(op_dir, CPP_EXTS))
    kernel_dirs = sorted({p.parent for p in all_files} | {op_dir} | {p.parent for p in files})
    # The shims and stand-ins are libclang's unsaved files in an empty folder of ours, not
    # files written there: a real operator has a hundred absent headers, and writing each
    # (a folder, a file) was a tenth of `check`.
    with contextlib.ExitStack() as stack:
        scratch = stub_dir if stub_dir is not None else Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="optrace-stub-")))
        # libclang searches this folder last for what the operator's folders do not hold,
        # `../x.h` and `__has_include("../x.h")` too: the folder sits _STUB_DEPTH empty
        # folders deep in the scratch, so no such `..` leads out of it into the temporary
        # folder (where anyone may put a header, and which moves with TMPDIR) — what the
        # check finds there is the same on every run and no input.
        fake = scratch.joinpath(*(["d"] * _STUB_DEPTH))
        fake.mkdir(parents=True, exist_ok=True)
        virtual: dict[Path, bytes] = {fake / name: _STD_SHIM.encode() for name in _STD_SHIMS}
        virtual[fake / "vector"] = _VECTOR_SHIM.encode()
        virtual[fake / "initializer_list"] = _INIT_LIST_SHIM.encode()
        virtual[fake / "tuple"] = _TUPLE_SHIM.encode()
        virtual[fake / "optrace_c10_shim.h"] = _C10_SHIM.encode()
        for path in sorted({*all_files, *files}):  # in order: the same stand-ins every run
            try:
                data = read_regular(path)
            except OSError:
                continue
            for d in scan_includes(data):
                if ".." in d.target or d.target.startswith("/"):
                    continue  # no stand-in (`..`: looked for in the empty folders above `fake`)
                target = fake / d.target
                # A stand-in for every other include: the folder comes after every folder
                # of the operator in the search order (`-I` last, `-isystem`), so libclang
                # reads one only where the operator has no such header. A standard name
                # keeps its shim; torch's headers bring std::tuple and c10::optional,
                # which an adapter's returns and mode A's optional buffer name.
                torch = target.relative_to(fake).parts[:1] == ("torch",)  # `./torch/...` too
                text = virtual.get(target, _TORCH_SHIM.encode() if torch else b"")
                if str(target) == f"{fake}/{d.target}":
                    virtual.setdefault(target, text)
                elif not target.is_file():
                    # libclang matches an unsaved file by its name as spelt: `./a.h` or
                    # `a//b.h` would not find the stand-in of `a.h`, so a file is written
                    # (for every odd spelling, whichever file spells it first)
                    candidates = [path.parent / d.target, *(k / d.target for k in kernel_dirs)]
                    if not any(c.exists() for c in candidates):
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(text)
        common = ["-x", "c++", "-std=c++17", "-fsyntax-only", "-ferror-limit=0", "-Wno-everything",
                  "-nostdinc", "-nostdinc++", f"-isystem{fake}"]
        dirs = [*[f"-I{d}" for d in kernel_dirs], f"-I{fake}"]
        args = [*common, "-include", str(stub_header()), *dirs]
        # op_host / op_api sources are host code: CANN's host API, not AscendC's.
        host_args = [*common, "-include", str(host_stub_header()), *dirs]
        if not all(_utf8(str(a)) for a in args):
            out.skipped.extend((p, "a folder name is not UTF-8, which libclang cannot take") for p in files)
            return out
        compile_tus(index, files, args, host_args, out, only_lines, kernel_dirs,
                    {**virtual, **(contents or {})})
        # The stand-ins are optrace's, in a folder of this run: no input (the folder itself
        # too: an include that names no file, `#include ""`, is it). A path spelt through
        # it and out (`<stand-ins>/../x.h`, libclang's search of `../x.h` in it) is a file
        # of its parent: an input, kept by the spelling that still leads to it when the
        # folder is gone.
        out.read = _outside_of(out.read, os.fspath(scratch))
        out.looked = _outside_of(out.looked, os.fspath(scratch))
        for name in out.read:
            try:
                out.identities[name] = identity_of(os.stat(name))
            except OSError:
                pass  # gone since libclang read it: the parent finds it gone too
    return out


def _library_file_without_platform() -> None:
    """Name the libclang the wheel would load on Linux (`libclang.so` in its library path,
    `LIBCLANG_LIBRARY_PATH` included), so that cindex does not import `platform` to ask
    which system this is: that import compiles a dozen patterns, a noticeable part of
    `check`. Elsewhere, or when the file is not there, cindex decides as before."""
    config = cindex.Config
    if config.loaded or config.library_file or not sys.platform.startswith("linux"):
        return
    candidate = os.path.join(config.library_path or "", "libclang.so")
    if config.library_path and os.path.isfile(candidate):
        config.set_library_file(candidate)


_HEADER_EXTS = frozenset({".h", ".hpp", ".hh", ".hxx", ".inc", ".inl", ".ipp", ".tpp", ".tcc"})


def _is_kernel(path: Path) -> bool:
    return "op_kernel" in path.parts or path.suffix == ".asc"


def compile_tus(index: cindex.Index, files: list[Path], args: list[str], host_args: list[str],
                out: HostCompile, only_lines: Mapping[Path, set[int]] | None = None,
                include_dirs: Sequence[Path] = (), contents: Mapping[Path, bytes] | None = None) -> None:
    """Parse as few translation units as reach every file: sources first, each read for
    the errors of every asked-for file it includes (with the same stub: kernel or host);
    a header no source reached is parsed on its own. Parsing each header of an include
    chain alone re-parsed the chain below it every time (23 parses of one 5k-line
    operator), and resolving every diagnostic's path was most of `check`.
    A file whose includes (looked up in its folder and `include_dirs`) reach a FIFO, device
    or socket is skipped: libclang would open it and wait for ever."""
    real_of: dict[str, Path | None] = {}  # libclang's file name -> the asked-for file, if any
    asked = {path.resolve(): path for path in files}

    def target(name: str) -> Path | None:
        if name not in real_of:
            real_of[name] = asked.get(Path(name).resolve())
        return real_of[name]

    # libclang takes these contents for the files of these names, wherever included from;
    # as bytes (a GBK comment is not UTF-8), with names it can take.
    unsaved = [(str(p), data) for p, data in (contents or {}).items() if _utf8(str(p))]
    seen: dict[Path, set[HostError]] = {}
    covered: set[Path] = set()
    order = sorted(files, key=lambda p: (p.suffix.lower() in _HEADER_EXTS, str(p)))
    for path in order:
        if path in covered:
            continue
        if not _utf8(str(path)):
            out.skipped.append((path, "its name is not UTF-8"))
            continue
        blocked = _irregular_include(path, include_dirs, out.looked)
        if blocked is not None:  # libclang would open it and wait on a FIFO for ever
            out.skipped.append((path, f"it includes {blocked}, not a regular file"))
            continue
        kernel = _is_kernel(path)
        try:
            tu = index.parse(str(path), args=args if kernel else host_args, unsaved_files=unsaved)
        except cindex.TranslationUnitLoadError as exc:
            out.skipped.append((path, f"libclang could not load the file: {exc}"))
            continue
        reached = {path}
        for inc in tu.get_includes():
            name = _api().file_name(inc.include)
            out.read.add(spelled_absolute(name))
            other = target(name)
            if other is not None and other not in covered and _is_kernel(other) == kernel:
                reached.add(other)
        covered |= reached
        real_of.setdefault(str(path), path)
        for p in sorted(reached):
            out.errors.setdefault(p, [])
            seen.setdefault(p, set())
        def inside(name: str, reached: set[Path] = reached) -> Path | None:
            found = target(name)
            return found if found in reached else None

        for where, err in _errors(tu, inside, only_lines):
            if err not in seen[where]:
                seen[where].add(err)
                out.errors[where].append(err)


#: Empty folders between the scratch folder and the stand-ins' own: more than any `..`
#: chain an include spells (a kernel's deepest climbs a few levels).
_STUB_DEPTH = 32


def _outside_of(paths: set[str], folder: str) -> set[str]:
    """`paths` but those inside `folder` (a real folder optrace made), each spelt through
    `folder` made normal."""
    prefix = os.path.join(folder, "")
    kept = set()
    for path in paths:
        if os.path.join(path, "").startswith(prefix):
            if inside_folder(path, folder):
                continue
            path = os.path.normpath(path)
        kept.add(path)
    return kept


def _irregular_include(path: Path, include_dirs: Sequence[Path],
                       looked: set[str] | None = None) -> Path | None:
    """The first FIFO, device, socket or directory-named-as-a-file that `path`'s includes
    (transitively, as libclang would look them up) reach; None when they are all regular.
    `looked` gets every candidate stat-ed (what the answer rests on)."""
    # Paths as strings and each candidate stat-ed once: an absent header (CANN's) is looked
    # for in every folder of the operator, from every file that includes it. A header is
    # followed once per real folder it is reached in (its quoted includes are looked up
    # there, as libclang does: a header linked into two folders is read from both), so
    # that `./x.h` or `../dir/x.h` do not spell it anew at every step.
    dirs = [os.fspath(k) for k in include_dirs]
    stats: dict[str, os.stat_result | None] = {}

    def stat_of(cand: str) -> os.stat_result | None:
        if cand not in stats:
            if looked is not None:
                looked.add(spelled_absolute(cand))
            try:
                stats[cand] = os.stat(cand)
            except (OSError, ValueError):
                stats[cand] = None
        return stats[cand]

    def key(cand: str, st: os.stat_result) -> tuple[int, int, str]:
        return st.st_dev, st.st_ino, os.path.realpath(os.path.dirname(cand))

    queue, seen = [os.fspath(path)], set()
    first = stat_of(queue[0])
    if first is not None:
        seen.add(key(queue[0], first))
    while queue:
        current = queue.pop()
        try:
            data = read_regular(current)
        except NotRegularFile:
            return Path(current)
        except OSError:
            continue  # unreadable or too large: libclang reports it as an error of its own
        here = os.path.dirname(current)
        for d in scan_includes(data):
            for folder in (here, *dirs):
                cand = os.path.join(folder, d.target)
                st = stat_of(cand)
                if st is None:
                    continue
                if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
                    return Path(cand)
                if stat.S_ISREG(st.st_mode) and key(cand, st) not in seen:
                    seen.add(key(cand, st))
                    queue.append(cand)
                break  # the first candidate that exists is the one included
    return None


class _Diagnostics:
    """Raw prototypes of the libclang calls `_errors` makes per diagnostic: cindex's wrapper
    objects (a Diagnostic, its location, its file) cost more than the calls themselves, and
    a real operator has tens of thousands of errors against the stub."""

    def __init__(self) -> None:
        lib = cindex.conf.lib  # loads libclang and checks its version, once
        raw = ctypes.CDLL(cindex.conf.get_filename())
        self.count = raw["clang_getNumDiagnostics"]
        self.count.argtypes, self.count.restype = [ctypes.c_void_p], ctypes.c_uint
        self.get = raw["clang_getDiagnostic"]
        self.get.argtypes, self.get.restype = [ctypes.c_void_p, ctypes.c_uint], ctypes.c_void_p
        self.severity = raw["clang_getDiagnosticSeverity"]
        self.severity.argtypes, self.severity.restype = [ctypes.c_void_p], ctypes.c_int
        self.location = raw["clang_getDiagnosticLocation"]
        self.location.argtypes, self.location.restype = [ctypes.c_void_p], cindex.SourceLocation
        self.spot = raw["clang_getInstantiationLocation"]
        self.spot.argtypes = [cindex.SourceLocation, ctypes.POINTER(ctypes.c_void_p),
                              ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint),
                              ctypes.POINTER(ctypes.c_uint)]
        self.spot.restype = None
        self.spelling = raw["clang_getDiagnosticSpelling"]
        self.spelling.argtypes = [ctypes.c_void_p]
        self.spelling.restype = cindex._CXString
        self.dispose = raw["clang_disposeDiagnostic"]
        self.dispose.argtypes, self.dispose.restype = [ctypes.c_void_p], None
        # A file's name as the bytes libclang holds (the binding decodes them as strict
        # UTF-8, and a name that is not UTF-8 would raise): decoded as the file system does.
        self.raw_name = raw["clang_getFileName"]
        self.raw_name.argtypes, self.raw_name.restype = [ctypes.c_void_p], cindex._CXString
        self.cstring = raw["clang_getCString"]
        self.cstring.argtypes, self.cstring.restype = [cindex._CXString], ctypes.c_char_p
        self.dispose_string = raw["clang_disposeString"]
        self.dispose_string.argtypes, self.dispose_string.restype = [cindex._CXString], None
        del lib

    def file_name(self, file: cindex.File) -> str:
        name = self.raw_name(file)
        try:
            return os.fsdecode(self.cstring(name) or b"")
        finally:
            self.dispose_string(name)


def _api() -> _Diagnostics:
    if not _DIAGNOSTICS:
        _DIAGNOSTICS.append(_Diagnostics())
    return _DIAGNOSTICS[0]


_DIAGNOSTICS: list[_Diagnostics] = []


def _errors(tu: cindex.TranslationUnit, where: Callable[[str], Path | None],
            only_lines: Mapping[Path, set[int]] | None = None) -> Iterator[tuple[Path, HostError]]:
    """The translation unit's errors in the files `where` maps a name to (and, with
    `only_lines`, on those lines), straight from libclang's C API; each file's name is
    asked once, by its handle."""
    api = _api()
    handle = ctypes.c_void_p()
    line, column, offset = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    by_handle: dict[int, Path | None] = {}
    error = cindex.Diagnostic.Error
    unit = tu.obj
    refs = (ctypes.byref(handle), ctypes.byref(line), ctypes.byref(column), ctypes.byref(offset))
    get, severity, spot, location, dispose = api.get, api.severity, api.spot, api.location, api.dispose
    for i in range(api.count(unit)):
        diag = get(unit, i)
        try:
            if severity(diag) < error:
                continue
            spot(location(diag), *refs)
            key = handle.value
            if key is None:
                continue
            if key not in by_handle:
                by_handle[key] = where(api.file_name(cindex.File(ctypes.cast(key, cindex.c_object_p))))
            path = by_handle[key]
            if path is None or (only_lines is not None and line.value not in only_lines.get(path, ())):
                continue
            message = cindex._CXString.from_result(api.spelling(diag))
            yield path, HostError(line.value, column.value, message)
        finally:
            dispose(diag)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_STD_SHIMS = ("cstddef", "cstdint", "cstring", "functional", "stddef.h", "stdint.h", "string.h",
              "type_traits", "utility", "limits", "cstdlib", "stdlib.h", "climits", "limits.h")
# One text for every header in _STD_SHIMS: a macro guard, not `#pragma once` alone (that
# holds per file, and a TU including <cstddef> and <functional> defined `function` twice).
_STD_SHIM = """#pragma once
#ifndef OPTRACE_STD_SHIM
#define OPTRACE_STD_SHIM
typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long uint64_t; typedef unsigned long size_t; typedef long ptrdiff_t;
typedef unsigned long uintptr_t; typedef long intptr_t;
namespace std {
using ::int8_t; using ::int16_t; using ::int32_t; using ::int64_t; using ::uint8_t;
using ::uint16_t; using ::uint32_t; using ::uint64_t; using ::size_t; using ::ptrdiff_t;
// The type traits kernels test their element type with: a class whose member is
// `static constexpr bool kIsInt32 = std::is_same_v<T, int32_t>;` must not leave, by the
// parser's recovery, a member named `int32_t` hiding the type in the whole class.
template <class A, class B> struct is_same { static constexpr bool value = false; };
template <class A> struct is_same<A, A> { static constexpr bool value = true; };
template <class A, class B> inline constexpr bool is_same_v = is_same<A, B>::value;
template <bool C, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <bool C, class T = void> using enable_if_t = typename enable_if<C, T>::type;
template <bool C, class T, class F> struct conditional { typedef T type; };
template <class T, class F> struct conditional<false, T, F> { typedef F type; };
template <bool C, class T, class F> using conditional_t = typename conditional<C, T, F>::type;
template <class F> class function;
template <class R, class... A> class function<R(A...)> {
public:
    template <class G> function(G) {}
    R operator()(A...) const;
};
}
extern "C" void* memcpy(void*, const void*, size_t);
extern "C" void* memset(void*, int, size_t);
#endif
"""

# The two standard headers an OpDef's `std::vector` lists need, no more: a list from braces
# (`= {ge::DT_FLOAT}`), a list of n copies, and its size.
_INIT_LIST_SHIM = """#pragma once
namespace std {
template <class E> class initializer_list {
    const E *b_;
    unsigned long n_;
public:
    constexpr initializer_list() : b_(nullptr), n_(0) {}
    constexpr unsigned long size() const { return n_; }
    constexpr const E *begin() const { return b_; }
    constexpr const E *end() const { return b_ + n_; }
};
}  // namespace std
"""
_VECTOR_SHIM = """#pragma once
#include <initializer_list>
namespace std {
template <class T> class vector {
public:
    vector();
    vector(unsigned long n, const T &value);
    vector(initializer_list<T> values);
    unsigned long size() const;
    const T &operator[](unsigned long i) const;
};
}  // namespace std
"""
_TUPLE_SHIM = """#pragma once
namespace std {
template <class... T> class tuple {
public:
    tuple();
    template <class... U> tuple(U &&...values);
};
}  // namespace std
"""
_C10_SHIM = """#pragma once
namespace c10 {
struct nullopt_t {
    constexpr explicit nullopt_t(int) {}
};
constexpr nullopt_t nullopt{0};
template <class T> class optional {
public:
    optional();
    optional(nullopt_t);
    template <class U> optional(U &&value);
    bool has_value() const;
    explicit operator bool() const;
    T &value();
    T &operator*();
    T *operator->();
};
}  // namespace c10
"""
_TORCH_SHIM = '#include <tuple>\n#include "optrace_c10_shim.h"\n'
