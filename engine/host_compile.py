"""Host compile of kernel sources with libclang against the AscendC host stub.

`check` keeps the errors that land on code optrace inserted (compile safety, OT420);
the corpus run compares every error before and after `apply` (bench/corpus.py). Both
need the same translation-unit setup, which this module owns: the stub header, small
shims for the standard headers the libclang wheel lacks, and empty stand-ins for project
headers that are absent (submodules, CANN), so no include is fatal and parsing reaches
every line.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from clang import cindex

from optrace.engine.discovery import CPP_EXTS, walk_files
from optrace.engine.includes import scan_includes
from optrace.engine.source import NotRegularFile, read_regular


def stub_header() -> Path:
    return Path(str(resources.files("optrace.runtime").joinpath("stub/ascendc_host_stub.h")))


def host_stub_header() -> Path:
    """The CANN host API names optrace's op_host / aclnn insertions use."""
    return Path(str(resources.files("optrace.runtime").joinpath("stub/cann_host_stub.h")))


@dataclass(frozen=True)
class HostError:
    line: int
    column: int
    message: str


@dataclass
class HostCompile:
    """Errors per compiled file (in that file only), and files that could not be compiled."""

    errors: dict[Path, list[HostError]] = field(default_factory=dict)
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def host_compile(files: list[Path], op_dir: Path) -> HostCompile:
    """libclang (`-fsyntax-only`) on each file, include dirs = every folder of the operator.

    """
    out = HostCompile()
    index = cindex.Index.create()
    all_files = list(walk_files(op_dir, CPP_EXTS))
    kernel_dirs = sorted({p.parent for p in all_files} | {op_dir} | {p.parent for p in files})
    with tempfile.TemporaryDirectory(prefix="optrace-stub-") as tmp:
        fake = Path(tmp)
        for name in _STD_SHIMS:
            (fake / name).write_text(_STD_SHIM)
        for path in {*all_files, *files}:
            try:
                data = read_regular(path)
            except OSError:
                continue
            for d in scan_includes(data):
                if d.target in _STD_SHIMS or ".." in d.target or d.target.startswith("/"):
                    continue
                candidates = [path.parent / d.target, *(k / d.target for k in kernel_dirs)]
                if not any(c.exists() for c in candidates):
                    target = fake / d.target
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.touch()
        common = ["-x", "c++", "-std=c++17", "-fsyntax-only", "-ferror-limit=0", "-Wno-everything",
                  "-nostdinc", "-nostdinc++", f"-isystem{fake}"]
        dirs = [*[f"-I{d}" for d in kernel_dirs], f"-I{fake}"]
        args = [*common, "-include", str(stub_header()), *dirs]
        # op_host / op_api sources are host code: CANN's host API, not AscendC's.
        host_args = [*common, "-include", str(host_stub_header()), *dirs]
        if not all(_utf8(str(a)) for a in args):
            out.skipped.extend((p, "a folder name is not UTF-8, which libclang cannot take") for p in files)
            return out
        for path in files:
            if not _utf8(str(path)):
                out.skipped.append((path, "its name is not UTF-8"))
                continue
            blocked = _irregular_include(path, kernel_dirs)
            if blocked is not None:  # libclang would open it and wait on a FIFO for ever
                out.skipped.append((path, f"it includes {blocked}, not a regular file"))
                continue
            try:
                kernel = "op_kernel" in path.parts or path.suffix == ".asc"
                tu = index.parse(str(path), args=args if kernel else host_args)
            except cindex.TranslationUnitLoadError as exc:
                out.skipped.append((path, f"libclang could not load the file: {exc}"))
                continue
            errors = out.errors.setdefault(path, [])
            real = path.resolve()
            for diag in tu.diagnostics:
                loc = diag.location
                if diag.severity < cindex.Diagnostic.Error or loc.file is None:
                    continue
                # Compare names first: resolving every diagnostic's path was a third of check.
                name = loc.file.name
                if name != str(path) and Path(name).resolve() != real:
                    continue
                errors.append(HostError(loc.line, loc.column, diag.spelling))
    return out


def _irregular_include(path: Path, include_dirs: list[Path]) -> Path | None:
    """The first FIFO, device, socket or directory-named-as-a-file that `path`'s includes
    (transitively, as libclang would look them up) reach; None when they are all regular."""
    queue, seen = [path], {path}
    while queue:
        current = queue.pop()
        try:
            data = read_regular(current)
        except NotRegularFile:
            return current
        except OSError:
            continue  # unreadable or too large: libclang reports it as an error of its own
        for d in scan_includes(data):
            for cand in [current.parent / d.target, *(k / d.target for k in include_dirs)]:
                try:
                    mode = os.stat(cand).st_mode
                except (OSError, ValueError):
                    continue
                if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
                    return cand
                if stat.S_ISREG(mode) and cand not in seen:
                    seen.add(cand)
                    queue.append(cand)
                break  # the first candidate that exists is the one included
    return None


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_STD_SHIMS = ("cstddef", "cstdint", "cstring", "functional", "stddef.h", "stdint.h", "string.h",
              "type_traits", "utility", "limits", "cstdlib", "stdlib.h", "climits", "limits.h")
_STD_SHIM = """#pragma once
typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long int64_t;
typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;
typedef unsigned long uint64_t; typedef unsigned long size_t; typedef long ptrdiff_t;
typedef unsigned long uintptr_t; typedef long intptr_t;
namespace std {
using ::int8_t; using ::int16_t; using ::int32_t; using ::int64_t; using ::uint8_t;
using ::uint16_t; using ::uint32_t; using ::uint64_t; using ::size_t; using ::ptrdiff_t;
template <class F> class function;
template <class R, class... A> class function<R(A...)> {
public:
    template <class G> function(G) {}
    R operator()(A...) const;
};
}
extern "C" void* memcpy(void*, const void*, size_t);
extern "C" void* memset(void*, int, size_t);
"""
