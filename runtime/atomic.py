"""Every user-named output (``collect -o``, ``report --html/--png``, ``plan -o/--graph``,
``check -o``, ``apply --patch``, ``preprocess --out``, ``inspect``/``compare -o``) is
written here, so they all keep one promise: the file they replace is intact until the new
one is complete.

A regular file (or a missing one) is written beside the target and renamed over it; a
reader sees the old file or the new one. A symlink is never followed: it is refused, as a
file the command reads is (any file read through runtime/regular.py in this process, or
handed over by its workers, by device and inode). A character device (``/dev/null``,
a terminal) and the process's own streams (``/dev/stdout``, ``/dev/fd/N``) are written
through as shell redirection does, never renamed over. FIFOs, sockets, block devices,
directories and dangling symlinks are refused (:class:`OutputError`, exit 2), as is an
output that is one of the command's inputs (``rewrite``: a file the command read and
rewrites in place on purpose, ``preprocess --modify``, which still never goes through a
link). Errors name the target, never the temporary file. New files get the user's umask; a replaced file keeps
its permission bits (as a shell's ``>`` does), never set-id bits.

A user-named output directory (``demo-data DIR``) is written by :func:`atomic_directory`:
whole or not at all, with the same promises (no symlink followed, errors naming the
target). A dataset (``collect -o DIR --format parquet``) replaces an earlier one
whole: :func:`replace_directory`.

The engine's all-or-nothing commit of source edits (engine/transaction.py) is not a
user-named output and keeps its own journalled writer.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from .errors import ProfilingInputError
from .records import FrozenRecord
from .regular import file_read_as

# The process's own descriptors: whatever they are (a pipe, a terminal, a file the shell
# opened), they are written through, never replaced — as `cmd -o /dev/stdout | less` means.
_OWN_STREAM_RE = re.compile(r"^/(?:dev/(?:stdout|stderr|fd/\d+)|proc/self/fd/\d+)$")


class OutputError(ProfilingInputError):
    """An output optrace will not (or could not) write; ``path`` is the target the user
    named. A ProfilingInputError so the runtime commands print it and exit 2."""


class OutputTarget(FrozenRecord):
    """Where the bytes for a user-named ``path`` go: ``through`` is True when they are
    written into an existing non-regular file (device, own stream) instead of renamed
    over it; otherwise ``real`` is the regular file replaced (a symlink's target).
    (Not a dataclass: collect's start-up time, see records.py.)"""

    __match_args__ = ("path", "real", "through", "mode")
    __slots__ = __match_args__
    path: Path
    real: Path
    through: bool
    mode: int | None  # permission bits of the file replaced; None: a new file (umask)

    def __init__(self, path: Path, real: Path, through: bool, mode: int | None) -> None:
        for name, value in zip(self.__match_args__, (path, real, through, mode), strict=True):
            object.__setattr__(self, name, value)


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def output_target(
    path: str | Path, inputs: Iterable[str | Path] = (), *, rewrite: bool = False
) -> OutputTarget:
    """Check, before anything is computed or written, that ``path`` may be written;
    raises OutputError naming ``path`` otherwise. ``inputs`` are files the command reads
    (rank files, the point map, sources): an output that is one of them is refused, as is
    any file the running command read — unless ``rewrite``: the output is the file read,
    rewritten on purpose (`preprocess --modify`)."""
    target = Path(path)
    if _OWN_STREAM_RE.match(str(target)):
        return OutputTarget(target, target, True, None)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        if os.path.islink(target):
            raise OutputError(target, "a symlink to nothing; not written (name the file itself)") from None
        return OutputTarget(target, target, False, None)
    except OSError as exc:
        raise _as_output_error(target, exc, target) from None
    if stat.S_ISCHR(st.st_mode):
        return OutputTarget(target, target, True, None)
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(target, f"{_kind(st.st_mode)}, not a regular file; not written")
    # Identity after links are resolved: a hard link or a symlink to an input is the input.
    for source in inputs:
        try:
            if _identity(os.stat(source)) == _identity(st):
                raise OutputError(target, f"is an input of this command ({source}); not overwritten")
        except OSError:
            continue
    read_as = None if rewrite else file_read_as(_identity(st))
    if read_as is not None:
        raise OutputError(target, f"is an input of this command ({read_as}); not overwritten")
    if os.path.islink(target):
        # Not followed: a link a clone or another user planted (`trace.json -> ~/.bashrc`)
        # would have the file it points at replaced by what was meant for the link's name.
        raise OutputError(target, f"is a symbolic link (to {os.readlink(target)}); not written through "
                          "(name the file itself, or remove the link)")
    return OutputTarget(target, target, False, stat.S_IMODE(st.st_mode) & 0o777)


def _in_the_way(target: Path) -> Path | None:
    """The nearest ancestor of ``target`` that exists and is not a directory."""
    for parent in target.parents:
        if os.path.lexists(parent):
            return None if os.path.isdir(parent) else parent
    return None


# What writing a file can fail with: those are told as the target's. Other errors raised in
# the block (a worker that could not be forked: EAGAIN) are the block's, and pass through.
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS, errno.EPIPE,
                           errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR, errno.EISDIR,
                           errno.EEXIST, errno.EXDEV, errno.EBADF, errno.ENXIO, errno.EINVAL})


def _as_output_error(target: Path, exc: OSError, temporary: Path) -> OutputError:
    """An OSError of the write, told about the target (the temporary name is ours)."""
    blocker = _in_the_way(target) if isinstance(exc, (NotADirectoryError, FileExistsError)) else None
    if blocker is not None:
        return OutputError(target, f"cannot write: {blocker} is not a directory")
    where = exc.filename
    message = exc.strerror or str(exc)
    if where is not None and os.fsdecode(where) not in (str(target), str(temporary)):
        message = f"{message}: {os.fsdecode(where)}"  # e.g. a parent that is a file
    return OutputError(target, f"cannot write: {message}")


@contextmanager
def atomic_output(
    path: str | Path, buffering: int = 1 << 20, *, inputs: Iterable[str | Path] = (), rewrite: bool = False
) -> Iterator[IO[bytes]]:
    """A binary file that becomes ``path`` when the block exits without an exception
    (for a regular target its ``name`` is the temporary file's path, for other processes
    writing into it). On any failure the previous file is left as it was."""
    found = output_target(path, inputs, rewrite=rewrite)
    if found.through:
        try:
            # No O_CREAT, no O_TRUNC: a device or stream the process already has; O_APPEND
            # so /dev/stdout redirected to a file continues it instead of overwriting it.
            handle = open(found.path, "ab", buffering=buffering,
                          opener=lambda name, _flags: os.open(name, os.O_WRONLY | os.O_APPEND))
        except OSError as exc:
            raise _as_output_error(found.path, exc, found.path) from None
        with handle:
            yield handle
        return
    real = found.real
    tmp = real.parent / f".{real.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        # "x": created here or refused (O_EXCL); the umask decides the mode as for any
        # open() (tempfile.mkstemp would leave the final file 0600).
        handle = open(tmp, "xb", buffering=buffering)
    except OSError as exc:
        raise _as_output_error(found.path, exc, tmp) from None
    try:
        with handle:
            yield handle
            if found.mode is not None:
                os.fchmod(handle.fileno(), found.mode)
        os.replace(tmp, real)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if (isinstance(exc, OSError) and not isinstance(exc, OutputError) and exc.errno in _WRITE_ERRNOS
                and exc.filename in (None, str(tmp))):
            raise _as_output_error(found.path, exc, tmp) from exc
        raise  # the block's own failure (a fork refused with EAGAIN, ...) is not a write error


def write_output(path: str | Path, data: bytes, *, inputs: Iterable[str | Path] = (),
                 rewrite: bool = False) -> None:
    """Write ``data`` as ``path``, with :func:`atomic_output`'s promises."""
    with atomic_output(path, inputs=inputs, rewrite=rewrite) as handle:
        handle.write(data)


def _remove_tree(path: Path) -> None:
    """Remove a directory this module made, with what is in it (links not followed)."""
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _remove_tree(Path(entry.path))
        else:
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass


def _move_in(source: Path, target: Path) -> None:
    """``source`` (a file of ours) becomes ``target``, never over anything there: a hard
    link fails on an existing name, whatever it is (a symlink is not followed)."""
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK):
            raise
        # A filesystem without hard links: checked, then renamed (a rename does not
        # follow a link at the target either; only a name made in between is replaced).
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target)) from None
        os.rename(source, target)
    else:
        os.unlink(source)


def _made_parents(target: Path) -> list[Path]:
    """The missing ancestors of ``target``, outermost first (to make, and to remove
    again when the write fails)."""
    missing = []
    for parent in target.parents:
        if os.path.lexists(parent):
            break
        missing.append(parent)
    return missing[::-1]


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """A temporary directory for the block to fill; when it exits without an exception
    its files become ``path``'s, all of them, and on any failure nothing of ``path``
    changes: what was made (the temporary, parents made for it) is removed.

    ``path`` missing: the temporary is made beside it and renamed into place, so the
    directory appears whole or not at all. ``path`` an existing directory: the temporary
    is made inside it (it keeps its inode, owner and mode, a shell inside it stays
    there, and its parent need not be writable), and each file is moved in under its
    name, never over anything already there; a failure removes the ones moved. A
    symlink at ``path`` is refused, not followed, as is anything but a directory.
    Errors name ``path`` or the file under it, never the temporary."""
    target = Path(path)
    try:
        st: os.stat_result | None = os.lstat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _as_output_error(target, exc, target) from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise OutputError(target, "a symlink; not followed (name the directory itself)")
    if st is not None and not stat.S_ISDIR(st.st_mode):
        kind = "a regular file" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)
        raise OutputError(target, f"{kind}, not a directory; not written")
    suffix = f"{os.getpid()}.{os.urandom(4).hex()}.tmp"
    parents = _made_parents(target) if st is None else []
    temporary = target.parent / f".{target.name}.{suffix}" if st is None else target / f".optrace.{suffix}"
    made: list[Path] = []
    moved: list[Path] = []
    try:
        for parent in parents:
            os.mkdir(parent)
            made.append(parent)
        os.mkdir(temporary)  # the user's umask decides its mode, as for any new directory
        yield temporary
        if st is None:
            if os.path.lexists(target):  # made in the meantime: not replaced
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
            os.rename(temporary, target)
        else:
            for name in sorted(os.listdir(temporary)):
                _move_in(temporary / name, target / name)
                moved.append(target / name)
            os.rmdir(temporary)
    except BaseException as exc:
        for done in moved:
            try:
                os.unlink(done)
            except FileNotFoundError:
                pass
        _remove_tree(temporary)
        for parent in reversed(made):
            try:
                os.rmdir(parent)
            except OSError:
                pass  # something else was put there meanwhile: not ours to remove
        if isinstance(exc, (OSError, OutputError)):
            raise _as_directory_error(target, temporary, exc) from None
        raise


def _as_directory_error(target: Path, temporary: Path, exc: OSError | OutputError) -> OutputError:
    """An error of :func:`atomic_directory` told about ``target`` (or the file under it
    being written), never about the temporary directory — however the block named it:
    as given, or resolved (``save_profiling_data`` resolves its directory)."""
    # Its parent still exists when this runs: realpath resolves it like the block did.
    spellings = sorted({str(temporary), os.path.abspath(temporary), os.path.realpath(temporary)},
                       key=len, reverse=True)

    def shown(where: str | bytes) -> Path:
        inside = Path(os.fsdecode(where))
        for spelling in spellings:
            if inside.is_relative_to(spelling):
                return target / inside.relative_to(spelling)
        return inside

    if isinstance(exc, OutputError):
        message = exc.message
        for spelling in spellings:  # the longest first: a relative one is inside the others
            message = message.replace(spelling, str(target))
        return OutputError(shown(exc.path), message)
    if exc.filename is None:  # a write into a file (a full disk)
        return OutputError(target, f"cannot write: {exc.strerror or exc}")
    where = shown(exc.filename)
    if not where.is_relative_to(target):  # a parent in the way, or not writable
        return _as_output_error(target, exc, temporary)
    if isinstance(exc, FileExistsError):
        return OutputError(where, "is there already; not overwritten")
    return OutputError(where, f"cannot write: {exc.strerror or exc}")


@contextmanager
def replace_directory(path: str | Path) -> Iterator[Path]:
    """A temporary directory for the block to fill, which becomes ``path`` whole (a
    dataset: ``collect --format parquet``). A new or empty ``path``: through
    :func:`atomic_directory`. An existing one (the caller checked it holds only what it
    replaces): the temporary is made beside it, and once complete the old directory is
    renamed aside, the new one renamed in and the old one removed; until then ``path``
    is untouched, and on any failure the temporary is removed. A symlink is refused."""
    target = Path(path)
    try:
        st: os.stat_result | None = os.lstat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _as_output_error(target, exc, target) from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise OutputError(target, "a symlink; not followed (name the directory itself)")
    if st is None or (stat.S_ISDIR(st.st_mode) and not os.listdir(target)):
        with atomic_directory(target) as into:
            yield into
        return
    suffix = f"{os.getpid()}.{os.urandom(4).hex()}"
    temporary = target.parent / f".{target.name}.{suffix}.tmp"
    aside = target.parent / f".{target.name}.{suffix}.old"
    try:
        os.mkdir(temporary)
    except OSError as exc:
        raise _as_output_error(target, exc, temporary) from None
    try:
        yield temporary
        os.rename(target, aside)
        try:
            os.rename(temporary, target)
        except OSError:
            os.rename(aside, target)  # the old one back: the target never goes missing for good
            raise
    except BaseException as exc:
        _remove_tree(temporary)
        if isinstance(exc, OSError):
            raise _as_directory_error(target, temporary, exc) from None
        raise
    _remove_tree(aside)
