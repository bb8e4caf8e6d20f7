"""Atomic exchange and no-replace renames: Linux's `renameat2`, for engine/transaction.py.

A plain `rename(tmp, target)` cannot tell what it replaced: a file another editor saved
between optrace's check of the target and the rename is silently lost. `exchange(a, b)`
swaps the two names in one step (`RENAME_EXCHANGE`), so what was at the target at that
instant is still there afterwards, under the other name, to be compared and swapped back;
`rename_noreplace(src, dst)` (`RENAME_NOREPLACE`) fails instead of replacing a file
someone created meanwhile.

Reached through ctypes: glibc >= 2.28 exports `renameat2`; with a libc that does not,
the raw system call is made by its number (Linux >= 3.15 has it). Where
neither exists (another OS, an architecture not in `_SYSCALL_NUMBERS`), or the kernel
or the filesystem refuses the flag (ENOSYS, EINVAL: some network and FUSE filesystems),
`Unsupported` is raised and the caller falls back to a plain rename (docs/edits.md says
what that leaves open).

Only the standard library: `ctypes` is cheap to import, `ctypes.util` (not used) costs many
times more; libc is looked up at the first call.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
_AT_FDCWD = -100

# renameat2's system call number, by machine and pointer width, for a libc without the
# wrapper (glibc < 2.28). The generic table (aarch64, riscv64, loongarch64) shares 276.
_SYSCALL_NUMBERS: dict[tuple[str, int], int] = {
    ("x86_64", 64): 316,
    ("amd64", 64): 316,
    ("x86_64", 32): 353,  # a 32-bit Python on a 64-bit kernel: the i386 table
    ("i386", 32): 353,
    ("i686", 32): 353,
    ("aarch64", 64): 276,
    ("arm64", 64): 276,
    ("riscv64", 64): 276,
    ("loongarch64", 64): 276,
    ("ppc64le", 64): 357,
    ("ppc64", 64): 357,
    ("s390x", 64): 347,
    ("armv7l", 32): 382,
    ("armv6l", 32): 382,
}

# Errors that mean "this kernel / libc / filesystem cannot do it", not "this rename failed".
_UNSUPPORTED = frozenset({errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP})

_Call = Callable[[bytes, bytes, int], int]


class Unsupported(OSError):
    """`renameat2` with this flag is not available here; nothing was renamed."""


def _load(*, wrapper_ok: bool = True) -> tuple[_Call | None, str]:
    """The renameat2 call and how it is reached ("libc", "syscall"), or (None, why not).
    `wrapper_ok=False` skips libc's wrapper (the tests reach the system call that way)."""
    if not sys.platform.startswith("linux"):
        return None, f"not Linux ({sys.platform})"
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own libc, no file lookup
    except OSError as exc:
        return None, f"no libc to call ({exc})"
    wrapper = getattr(libc, "renameat2", None) if wrapper_ok else None
    if wrapper is not None:
        wrapper.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        wrapper.restype = ctypes.c_int

        def via_libc(src: bytes, dst: bytes, flags: int) -> int:
            return int(wrapper(_AT_FDCWD, src, _AT_FDCWD, dst, flags))

        return via_libc, "libc"
    bits = ctypes.sizeof(ctypes.c_void_p) * 8
    machine = os.uname().machine
    number = _SYSCALL_NUMBERS.get((machine.lower(), bits))
    syscall = getattr(libc, "syscall", None)
    if number is None or syscall is None:
        return None, f"libc has no renameat2 and its system call number on {machine} is not known"
    syscall.restype = ctypes.c_long

    def via_syscall(src: bytes, dst: bytes, flags: int) -> int:
        return int(syscall(ctypes.c_long(number), ctypes.c_long(_AT_FDCWD), ctypes.c_char_p(src),
                           ctypes.c_long(_AT_FDCWD), ctypes.c_char_p(dst), ctypes.c_uint(flags)))

    return via_syscall, "syscall"


@functools.cache
def _loaded() -> tuple[_Call | None, str]:
    # At the first write, not at import: `check` imports the transaction module and
    # never writes (its start-up runs on every commit through the pre-commit hook).
    return _load()


def how() -> str:
    """How renameat2 is reached here ("libc", "syscall"), or why it is not."""
    return _loaded()[1]


def available() -> bool:
    """True when the call exists here; a filesystem may still refuse it (`Unsupported`)."""
    return _loaded()[0] is not None


def _renameat2(src: Path, dst: Path, flags: int) -> None:
    call, why = _loaded()
    if call is None:
        raise Unsupported(errno.ENOSYS, f"renameat2 is unavailable: {why}", str(src), None, str(dst))
    if call(os.fsencode(src), os.fsencode(dst), flags) == 0:
        return
    code = ctypes.get_errno()
    kind = Unsupported if code in _UNSUPPORTED else OSError
    raise kind(code, os.strerror(code), str(src), None, str(dst))


def exchange(a: Path, b: Path) -> None:
    """Swap the names `a` and `b` atomically (both must exist; either may be any kind of
    file). Unsupported when the system or the filesystem cannot."""
    _renameat2(a, b, RENAME_EXCHANGE)


def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename `src` to `dst` unless `dst` exists (FileExistsError then, nothing renamed).
    Unsupported when the system or the filesystem cannot."""
    _renameat2(src, dst, RENAME_NOREPLACE)
