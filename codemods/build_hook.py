"""Build hook (gate G1): the build runs `optrace preprocess` on the kernels it compiles.

DESCRIPTION: put a block between `# TRACE_PREPROCESSOR_HOOK_START` and
`# TRACE_PREPROCESSOR_HOOK_END` into the project's build script. It fails the build
loudly when optrace is not installed, then runs `optrace preprocess` on the build tree's
copy of the kernels with `--modify` (ids and the build fingerprint go into that copy,
never the checked-in sources) and writes `point_map.json` beside the build output.

Where it goes:

- a shell script that copies the kernels into a build tree (`cp ... op_kernel ...`):
  right after that copy — at the end of the function doing it, or after the loop /
  `if` around it — preprocessing the copy's destination, the map written beside it;
- a shell script that builds from the source tree (no copy): before the first build
  command (`cmake`, `make`, `ninja`, ...); the sources are only read (no `--modify`:
  the kernel's `TRACE_POINT` fallback computes the same ids at compile time), the map
  goes to the build directory;
- a CMake file (when the project has no shell build script): before the kernel target
  (`add_kernels_compile`, `ascendc_library`, ...), as `execute_process` at configure time.

The block carries `# optrace-hook v1`, which is what `strip` looks for; the block is
the same for every operator of the script (it preprocesses the whole build-tree copy),
so instrumenting several operators adds one block, and re-applying rewrites it in
place. A hook block someone else wrote is turned off where it stands, each of its lines
behind `# optrace-off: ` (still readable in the diff), with optrace's block above it;
strip takes the prefix away, so it gives it back byte for byte.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from optrace.codemods.layer import (
    Evidence,
    LayerExample,
    LayerModel,
    LocatingLayer,
    Operator,
    line_of,
    read_or_empty,
)
from optrace.codemods.layer_common import clean_bytes, leading_ws, match_bracket
from optrace.codemods.python_files import caller_files, split_callers
from optrace.engine.cache import once
from optrace.engine.cpp import mask
from optrace.engine.discovery import BUILD_RE, LayerFile, Layers, SearchContext, repo_index
from optrace.engine.edits import REVIEW_WIDTH, Edit, line_end, line_number, line_start, newline_of
from optrace.engine.plan import Plan
from optrace.engine.vocabulary import HOOK_END, HOOK_START, OFF_MARK

CODEMOD = "build-hook"
HOOK_VERSION = b"# optrace-hook v1"
SHELL_SUFFIXES = (".sh", ".bash")

_COPY_RE = re.compile(rb"^[ \t]*(?:cp|rsync|install|cp\s+-\w+)\b([^\n#]*)$", re.M)
_FUNC_RE = re.compile(rb"^[ \t]*(?:function[ \t]+)?([A-Za-z_][\w-]*)[ \t]*\([ \t]*\)[ \t]*\{?[ \t]*$", re.M)
BUILD_CMD_RE = re.compile(
    rb"^[ \t]*(?:cmake\b|make\b|ninja\b|python3?\s+setup\.py|bash\s+\S*build|\./build\.sh|msopgen\b)", re.M
)
_SCRIPT_DIR_RE = re.compile(rb'^[ \t]*(?:local[ \t]+|export[ \t]+)?(\w+)=["\']?\$\(\s*cd\s+"?'
                            rb'\$\(\s*dirname\s+"?\$(?:\{BASH_SOURCE\[0\]\}|\{0\}|0|BASH_SOURCE)"?\s*\)"?',
                            re.M)
_BUILD_DIR_RE = re.compile(rb"(?:-B[ \t]*|mkdir[ \t]+-p[ \t]+)(\"?\$\{?\w+\}?(?:/[\w./${}-]*)?\"?)")
_CMAKE_TARGET_RE = re.compile(rb"^[ \t]*(?:add_kernels_compile|ascendc_library|add_ops_compile_options|"
                              rb"npu_op_kernel|add_library)\s*\(", re.M)
HOOK_BLOCK_RE = re.compile(
    rb"^[ \t]*" + re.escape(HOOK_START) + rb"[^\n]*\n.*?^[ \t]*" + re.escape(HOOK_END) + rb"[^\r\n]*",
    re.S | re.M,
)


@dataclass(frozen=True)
class HookSite:
    """Where the hook goes and what it preprocesses (shell words, quoted as needed)."""

    at: int  # a line start
    indent: bytes
    src: str
    out: str
    modify: bool
    why: str


def build_script(layers: Layers) -> Path | None:
    """The script to hook: a shell script that copies the kernels, else one that builds,
    else a CMake file. (Once in an `unchanged_files` stretch: mode B's and mode A's
    build-hook edits are the same.)"""
    return once(("build_script", id(layers)), lambda: _build_script(layers), layers)


def _build_script(layers: Layers) -> Path | None:
    scripts = [f.path for f in layers.found.get("build_script", [])]
    # A CI job's or a test folder's script only when no other builds (the search ranks
    # them last; this choice goes by what each script does, so it asks again).
    main = [p for p in scripts if not ci_or_test_script(p, layers)]
    chosen = _chosen_script(main, layers, skip_ci=True) if main else None
    return chosen if chosen is not None else _chosen_script(scripts, layers, skip_ci=False)


def _chosen_script(scripts: list[Path], layers: Layers, skip_ci: bool) -> Path | None:
    """The choice among ``scripts`` (see :func:`build_script`); ``skip_ci``: leave out the
    shell scripts beside CMake files that lie in CI or test folders."""
    shell: list[Path] = []
    other: list[Path] = []
    for p in scripts:
        (shell if p.suffix in SHELL_SUFFIXES else other).append(p)
    # The first found shell script that copies the kernels is the answer whatever the
    # CMake files' siblings below are (they come after it): they are looked for only
    # when none does (a repository's every build script is found, a thousand CMake files
    # in ops-nn, and their siblings were a fifth of an operator's mode probe).
    for path in shell:
        if kernel_copies(clean_bytes(path)):
            return path
    found = len(shell)
    # A CMake project is usually driven by a build.sh beside it that runs cmake. Its
    # siblings come from the repository's walk (a repository may have a CMake file in
    # each of a thousand folders: listing them all again for every operator cost more
    # than the rest of its build-hook search).
    index = repo_index(layers.repo_root)
    listed = set(shell)
    for cmake_file in other:
        walked = index.shell_scripts_in(os.path.dirname(os.fspath(cmake_file)))
        siblings = walked if walked is not None else sorted(cmake_file.parent.glob("*.sh"))
        for sibling in siblings:
            if skip_ci and ci_or_test_script(sibling, layers):
                continue
            if sibling not in listed and re.search(rb"^[ \t]*cmake\b", clean_bytes(sibling), re.M):
                shell.append(sibling)
                listed.add(sibling)
    for path in shell[found:]:
        if kernel_copies(clean_bytes(path)):
            return path
    for path in shell:
        if BUILD_CMD_RE.search(clean_bytes(path)):
            return path
    cmake = [p for p in scripts if p.name == "CMakeLists.txt" or p.suffix == ".cmake"]
    for candidate in cmake:
        if _CMAKE_TARGET_RE.search(clean_bytes(candidate)):
            return candidate
    return shell[0] if shell else (cmake[0] if cmake else None)


def _code_lines(data: bytes) -> list[tuple[int, bytes]]:
    """(offset, line) without comments, for shell scanning (a `#` inside quotes kept)."""
    out = []
    pos = 0
    for line in data.split(b"\n"):
        stripped = line.lstrip()
        out.append((pos, b"" if stripped.startswith(b"#") else line))
        pos += len(line) + 1
    return out


_KERNEL_SRC_RE = re.compile(rb"op_kernel/?[\"']?/?\*?[\"']?$")


def kernel_copies(data: bytes) -> list[re.Match[bytes]]:
    """`cp` / `rsync` / `install` lines copying a kernel folder (or its contents), not a
    single file such as op_kernel/CMakeLists.txt."""
    out = []
    for m in _COPY_RE.finditer(data):
        words = shell_words(m.group(1))
        if len(words) >= 2 and any(_KERNEL_SRC_RE.search(w) for w in words[:-1]):
            out.append(m)
    return out


def shell_words(args: bytes) -> list[bytes]:
    """Shell words of a command's arguments, quotes kept, options dropped."""
    words = re.findall(rb'"[^"]*"[^\s]*|\'[^\']*\'|\S+', args)
    return [w for w in words if not w.startswith(b"-") and w not in (b"2>/dev/null", b"||", b"true")]


def enclosing_function(data: bytes, offset: int) -> tuple[int, int] | None:
    """(start, closing-brace line start) of the shell function around `offset`."""
    for m in _FUNC_RE.finditer(data, 0, offset):
        close = re.compile(rb"^\}[ \t]*$", re.M).search(data, m.end())
        if close is not None and m.start() < offset < close.start():
            return m.start(), close.start()
    return None


# A build command that only cleans (`make clean`, `ninja -t clean`, `--target clean`),
# or one in a function named for cleaning: the hook before it would run only then.
_CLEAN_WORDS = frozenset({b"clean", b"distclean", b"cleanall", b"uninstall"})


def _function_name(data: bytes, start: int) -> bytes:
    m = _FUNC_RE.match(data, start)
    return m.group(1) if m is not None else b""


def _cleans_only(data: bytes, command: re.Match[bytes]) -> bool:
    """Whether a build command only cleans: a word of its line is a clean target (`make
    clean`, `--target clean`; not `--clean-first`) and no other command is chained after
    it (`... --target clean && cmake --build .` builds), or it lies in a function named
    for cleaning (`make_clean`, `clean_build_out`; not `clean_and_build`)."""
    line = data[command.start():line_end(data, command.start())]
    if not re.search(rb"&&|;", line) and any(word in _CLEAN_WORDS for word in line.split()):
        return True
    fn = enclosing_function(data, command.start())
    words = _function_name(data, fn[0]).lower().split(b"_") if fn is not None else []
    return bool(_CLEAN_WORDS.intersection(words)) and b"and" not in words


def first_build_command(data: bytes, start: int = 0) -> re.Match[bytes] | None:
    """The first build command from ``start`` that does not only clean (the first of any
    when every one cleans)."""
    first = None
    for m in BUILD_CMD_RE.finditer(data, start):
        if not _cleans_only(data, m):
            return m
        first = first or m
    return first


# A variable the hook reads (`${BUILD_DIR}`, `$ROOT`) and its assignment at a line start.
_VAR_USE_RE = re.compile(rb"\$\{?([A-Za-z_]\w*)")


def _assigned_at_top_level_before(data: bytes, name: bytes, before: int) -> bool:
    pattern = (rb"^[ \t]*(?:export[ \t]+|readonly[ \t]+|declare[ \t]+(?:-\w+[ \t]+)*)?"
               + re.escape(name) + rb"=")
    return any(enclosing_function(data, m.start()) is None
               for m in re.finditer(pattern, data[:before], re.M))


def _hook_paths(data: bytes, command_end: int) -> tuple[re.Match[bytes] | None, str | None]:
    """What the hook's paths are built from: the script's own directory variable, and the
    build directory (`-B` / `mkdir -p` target) last set before the build command."""
    build_dir = None
    for m in _BUILD_DIR_RE.finditer(data, 0, command_end):
        build_dir = m.group(1).decode(errors="replace")
    return _SCRIPT_DIR_RE.search(data), build_dir


def source_build_site(data: bytes) -> tuple[int, bytes, re.Match[bytes]] | None:
    """Where a hook reading the kernel sources goes in a shell script that builds them
    from the source tree (line start, indent, and the build command it serves): before its
    first build command that does not only clean. When that command lies in a function the
    script's top level does not call (a driver's `build_static_lib`, called by `main` for
    some options only), at the start of the function the top level calls that leads to it
    (`main`), so every build runs it — only along one chain of callers (a function called
    from two others may be reached by either: before its command, where both run it), and
    only when every variable the hook reads is set at the top level before it (else before
    the command, where they are). None without a build command."""
    build = first_build_command(data)
    if build is None:
        return None
    command = line_start(data, build.start()), leading_ws(data, build.start())
    fn = enclosing_function(data, build.start())
    seen: set[bytes] = set()
    moved: tuple[int, bytes] | None = None
    while fn is not None:
        name = _function_name(data, fn[0])
        if not name or name in seen:
            break
        seen.add(name)
        calls = [c for c in re.finditer(rb"^[ \t]*" + re.escape(name) + rb"\b(?![ \t]*\(\))", data, re.M)
                 if not fn[0] <= c.start() <= fn[1]]
        callers = {enclosing_function(data, c.start()) for c in calls}
        if not calls or len(callers) > 1:
            break  # sourced by another script, or reached along several chains
        if callers == {None}:
            if len(seen) > 1:  # the top level calls this one: at its start, after its `{`
                brace = data.find(b"{", fn[0], fn[1])
                body = line_end(data, brace if brace >= 0 else fn[0], include_newline=True)
                moved = (_after_argument_parsing(data, body, fn[1]), _body_indent(data, fn[0], fn[1]))
            break
        fn = next(iter(callers))
    if moved is not None:
        # The names the hook's own text reads: the script-directory variable and those in
        # the build directory (not what the assignment of the former reads, such as bash's
        # `BASH_SOURCE`).
        script_dir, build_dir = _hook_paths(data, build.end())
        used = [m.group(1) for m in _VAR_USE_RE.finditer((build_dir or "").encode())]
        if script_dir is not None:
            used.append(script_dir.group(1))
        if all(_assigned_at_top_level_before(data, name, moved[0]) for name in dict.fromkeys(used)):
            return moved[0], moved[1], build
    return command[0], command[1], build


# A command handed the script's arguments (`checkopts "$@"`): the option parsing a
# driver's `main` starts with. The hook goes after it: `build.sh --help` prints its usage
# without optrace, and an option that sets a path (`--build-path`) is set when it runs.
_ARGUMENTS_RE = re.compile(rb'(?<![\\\w])"?\$(?:@|\*|\{@\}|\{\*\})"?')
_COMPOUND_RE = re.compile(rb"^\s*(?:for|while|until|if|case|select|function|\{|\(|\w+\s*\(\))")


def _after_argument_parsing(data: bytes, body: int, close: int) -> int:
    """The line start after the last command handed the script's arguments in the leading
    run of simple commands of a function body starting at `body`; `body` without one."""
    at = body
    for pos, line in _code_lines(data):
        if pos < body or not line.strip():
            continue
        if pos >= close or _COMPOUND_RE.match(line) or line.rstrip().endswith((b"\\", b"{", b"(")):
            break
        if _ARGUMENTS_RE.search(line):
            at = line_end(data, pos, include_newline=True)
    return at


_OPENERS = re.compile(rb"^\s*(?:for|while|until|if|case|select)\b")
_CLOSERS = re.compile(rb"^\s*(?:done|fi|esac)\b")


def _after_compound(data: bytes, offset: int) -> int:
    """The line start after the outermost loop / `if` holding `offset` (top level), or
    after the line of `offset` when it is not inside one."""
    depth = 0
    target = line_start(data, offset)
    for pos, line in _code_lines(data):
        if _OPENERS.match(line) and not re.search(rb"\b(done|fi|esac)\s*;?\s*$", line):
            depth += 1
        elif _CLOSERS.match(line):
            depth = max(0, depth - 1)
        if pos >= target and depth == 0:
            return line_end(data, pos, include_newline=True)
    return len(data)


def _dest_dir(args: bytes) -> str | None:
    words = shell_words(args)
    if len(words) < 2:
        return None
    dest = words[-1].decode(errors="replace")
    quoted = dest.startswith('"') and dest.endswith('"')
    inner = dest[1:-1] if quoted else dest
    inner = inner.rstrip("/")
    if inner.endswith("/*"):
        inner = inner[:-2]
    return f'"{inner}"'


def _parent(word: str) -> str:
    inner = word.strip('"')
    parent = inner.rsplit("/", 1)[0] if "/" in inner else "."
    return f'"{parent}"'


def shell_site(path: Path, data: bytes, layers: Layers) -> HookSite:
    copies = kernel_copies(data)
    if copies:
        last = copies[-1]
        dest = _dest_dir(last.group(1)) or '"."'
        src = dest
        fn = enclosing_function(data, last.start())
        if fn is not None:
            at, indent = fn[1], _body_indent(data, fn[0], fn[1])
        else:
            at, indent = _after_compound(data, last.start()), b""
        out = _parent(dest) if dest.strip('"').endswith("op_kernel") else dest
        return HookSite(at, indent, src, out, True, f"after the kernels are copied (line "
                        f"{line_number(data, last.start())})")
    # builds from the source tree
    site = source_build_site(data)
    at, indent, build = site if site is not None else (len(data), b"", None)
    script_dir, build_dir = _hook_paths(data, build.end() if build else len(data))
    kernel_dir = layers.kernel_dir or layers.op_dir
    rel = os.path.relpath(kernel_dir, path.parent).replace(os.sep, "/")
    base = (f"${{{script_dir.group(1).decode()}}}" if script_dir
            else '$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)')
    src = f'"{base}/{rel}"'
    out = build_dir if build_dir else f'"{base}/build_out"'
    if not out.startswith('"'):
        out = f'"{out}"'
    if build_dir and _removed_after(data, out, at):
        # ops-nn's build_static_lib makes `${BUILD_PATH}/bin_tmp` and removes it with
        # `rm -fr` on every build, after the hook (at `main`'s start) wrote the map there.
        parent = _parent(out)
        out = parent if parent != '"."' and not _removed_after(data, parent, at) else f'"{base}/build_out"'
    if layers.op_dir.resolve() not in path.resolve().parents and re.fullmatch(r"[\w.-]+", layers.op_dir.name):
        # A script that builds the repository's operators runs every instrumented one's
        # block: each writes its own map (two blocks writing one `--out` lost the first).
        out = f'{out[:-1]}/optrace/{layers.op_dir.name}"'
    return HookSite(at, indent, src, out, False, "before the first build command (the kernels are built "
                    "from the source tree)")


_RM_RE = re.compile(rb"^[ \t]*(?:sudo[ \t]+)?rm[ \t]+((?:-[A-Za-z]+[ \t]+)+)([^\n;&|]+)", re.M)


def _removed_after(data: bytes, folder: str, at: int) -> bool:
    """Whether the script removes `folder` itself (`rm -r`, the same spelling, quotes
    aside) where it may run after a hook inserted at `at`: after it, or in a function
    other than the one holding it. A removal of its contents (`rm -rf dir/*`, a clean
    option's) or one that runs just before the hook leaves the map alone."""
    want = folder.strip('"').rstrip("/")
    hook_fn = enclosing_function(data, at)
    for m in _RM_RE.finditer(data):
        if not any(b"r" in flag.lower() for flag in m.group(1).split()):
            continue
        targets = {w.decode(errors="replace").strip('"\'').rstrip("/") for w in shell_words(m.group(2))}
        if want not in targets:
            continue
        if m.start() >= at or enclosing_function(data, m.start()) != hook_fn:
            return True
    return False


def _body_indent(data: bytes, start: int, close: int) -> bytes:
    for pos in range(line_end(data, start, include_newline=True), close):
        if pos == line_start(data, pos) and data[pos:pos + 1] not in (b"\n", b"\r"):
            ws = leading_ws(data, pos)
            if ws:
                return ws
    return b"    "


def shell_block(site: HookSite, nl: bytes) -> list[bytes]:
    i = site.indent
    modify = " --modify" if site.modify else ""
    what = "the build tree's copy of the kernels" if site.modify else "the kernel sources (read only)"
    lines = [
        HOOK_START,
        HOOK_VERSION + f": runs `optrace preprocess` on {what} and writes".encode(),
        b"# point_map.json beside the build output (`optrace strip` removes this block).",
        b"if ! command -v optrace >/dev/null 2>&1; then",
        b'    echo "ERROR: optrace is not installed and the kernels are instrumented: '
        b'pip install ascend-optrace" >&2',
        b"    exit 1",
        b"fi",
        f"optrace preprocess {site.src} --out {site.out}{modify} || {{".encode(),
        b'    echo "ERROR: optrace preprocess failed" >&2',
        b"    exit 1",
        b"}",
        HOOK_END,
    ]
    at = lines.index(f"optrace preprocess {site.src} --out {site.out}{modify} || {{".encode())
    if len(i + lines[at]) > REVIEW_WIDTH:  # long paths: `--out` on a continuation line
        lines[at : at + 1] = [f"optrace preprocess {site.src} \\".encode(),
                              f"    --out {site.out}{modify} || {{".encode()]
    return [i + ln if ln else ln for ln in lines]


def cmake_block(path: Path, layers: Layers) -> tuple[list[bytes], str]:
    kernel_dir = layers.kernel_dir or layers.op_dir
    rel = os.path.relpath(kernel_dir, path.parent).replace(os.sep, "/")
    lines = [
        HOOK_START,
        HOOK_VERSION + b": runs `optrace preprocess` on the kernel sources (read only) at configure",
        b"# time and writes point_map.json into the build directory (`optrace strip` removes this block).",
        b"find_program(OPTRACE_EXECUTABLE optrace)",
        b"if(NOT OPTRACE_EXECUTABLE)",
        b'  message(FATAL_ERROR "optrace is not installed, but the kernels are instrumented: '
        b'pip install ascend-optrace (or run optrace strip)")',
        b"endif()",
        b"execute_process(COMMAND ${OPTRACE_EXECUTABLE} preprocess "
        + f"${{CMAKE_CURRENT_SOURCE_DIR}}/{rel}".encode(),
        b"                --out ${CMAKE_BINARY_DIR} RESULT_VARIABLE OPTRACE_PREPROCESS_RESULT)",
        b"if(NOT OPTRACE_PREPROCESS_RESULT EQUAL 0)",
        b'  message(FATAL_ERROR "optrace preprocess failed")',
        b"endif()",
        HOOK_END,
    ]
    return lines, "before the kernel target (configure time)"


# --- reading a hook block back (gate G1) ------------------------------------------------------


@dataclass(frozen=True)
class HookCommand:
    """The `optrace preprocess` command a hook block runs, read as the shell or CMake
    reads it (continuation lines joined, comments and messages left out)."""

    offset: int  # where the command starts, in the block
    src: bytes  # as written, quotes kept
    out: bytes | None  # the `--out` value, quotes kept
    modify: bool


_COMMAND_END_RE = re.compile(rb"[;&|\n]")
_CMAKE_CALL_RE = re.compile(rb"\b(execute_process|add_custom_command|add_custom_target)\s*\(", re.I)
_CMAKE_KEYWORD_RE = re.compile(rb"[A-Z][A-Z0-9_]*")


def _shell_words(text: bytes, start: int, stop_at_newline: bool) -> list[tuple[int, bytes]]:
    """(offset, word) of one shell command from `start`: quotes, `$(...)` / `${...}` and
    backslash-newline continuations kept inside words; it ends at `;`, `&&`, `||`, `|`, a
    redirection's target or (with `stop_at_newline`) an unescaped newline, and skips `#`
    comments at word starts."""
    words: list[tuple[int, bytes]] = []
    cur = bytearray()
    cur_at = -1
    quote = 0
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if quote:
            if c == 0x5C and quote == 0x22 and i + 1 < len(text):
                cur += text[i : i + 2]
                i += 2
                continue
            if c == quote and depth == 0:
                quote = 0
            elif c == 0x28 and text[i - 1 : i] == b"$":
                depth += 1
            elif c == 0x29 and depth:
                depth -= 1
            cur.append(c)
            i += 1
            continue
        if c == 0x5C and text[i + 1 : i + 2] in (b"\n", b"\r"):  # a continuation line
            i += 3 if text[i + 1 : i + 3] == b"\r\n" else 2
            continue
        if depth == 0 and c in b" \t":
            if cur:
                words.append((cur_at, bytes(cur)))
                cur = bytearray()
            i += 1
            continue
        if depth == 0 and (c in b";|&>\r" or (c == 0x0A and stop_at_newline)):
            break
        if depth == 0 and c == 0x23 and not cur:  # a comment
            nl = text.find(b"\n", i)
            if stop_at_newline or nl < 0:
                break
            i = nl + 1
            continue
        if not cur:
            cur_at = i
        if c in b"\"'":
            quote = c
        elif c == 0x28 and text[i - 1 : i] in (b"$", b"<"):
            depth += 1
        elif c == 0x29 and depth:
            depth -= 1
        elif c == 0x0A:  # a newline inside `$(...)`
            pass
        cur.append(c)
        i += 1
    if cur:
        words.append((cur_at, bytes(cur)))
    return words


def _preprocess_command(words: list[tuple[int, bytes]]) -> HookCommand | None:
    """The command when `words` run `optrace preprocess`: some word before `preprocess`
    names optrace (`optrace`, `${OPTRACE_EXECUTABLE}`, `python -m optrace`)."""
    names = [w for _at, w in words]
    if b"preprocess" not in names:
        return None
    k = names.index(b"preprocess")
    if not any(b"optrace" in w.lower() for w in names[:k]):
        return None
    src: bytes | None = None
    out: bytes | None = None
    modify = False
    rest = names[k + 1 :]
    j = 0
    while j < len(rest):
        w = rest[j]
        if w == b"--out" and j + 1 < len(rest):
            out = rest[j + 1]
            j += 2
            continue
        if w.startswith(b"--out="):
            out = w[len(b"--out=") :]
        elif w == b"--modify":
            modify = True
        elif not w.startswith(b"-") and src is None:
            src = w
        j += 1
    if src is None:
        return None
    return HookCommand(words[0][0], src, out, modify)


def hook_command(block: bytes, cmake: bool) -> HookCommand | None:
    """The `optrace preprocess` command of a hook block (shell or CMake), or None."""
    if cmake:
        code = _cmake_code(block)
        for m in _CMAKE_CALL_RE.finditer(code):
            close = _cmake_close(code, m.end() - 1)
            words = [(at, w) for at, w in _cmake_words(code, m.end(), close)]
            # Each COMMAND runs on its own: the words up to the next keyword.
            group: list[tuple[int, bytes]] = []
            for at, w in [*words, (close, b"COMMAND")]:
                if _CMAKE_KEYWORD_RE.fullmatch(w):
                    found = _preprocess_command(group) if group else None
                    if found is not None:
                        return found
                    group = []
                else:
                    group.append((at, w))
        return None
    pos = 0
    while pos < len(block):
        words = _shell_words(block, pos, stop_at_newline=True)
        found = _preprocess_command(words)
        if found is not None:
            return found
        # the next command: past the words read (continuations included) and their end
        end = max((at + len(w) for at, w in words), default=pos)
        nxt = _COMMAND_END_RE.search(block, end)
        pos = nxt.end() if nxt else len(block)
    return None


def _cmake_code(text: bytes) -> bytes:
    """Same length, `#` comments blanked (outside quoted arguments)."""
    out = bytearray(text)
    quote = False
    i = 0
    while i < len(out):
        c = out[i]
        if c == 0x5C and quote:
            i += 2
            continue
        if c == 0x22:
            quote = not quote
        elif c == 0x23 and not quote:
            while i < len(out) and out[i] != 0x0A:
                out[i] = 0x20
                i += 1
            continue
        i += 1
    return bytes(out)


def _cmake_close(code: bytes, open_at: int) -> int:
    depth = 0
    quote = False
    for i in range(open_at, len(code)):
        c = code[i]
        if c == 0x22 and code[i - 1 : i] != b"\\":
            quote = not quote
        elif quote:
            continue
        elif c == 0x28:
            depth += 1
        elif c == 0x29:
            depth -= 1
            if depth == 0:
                return i
    return len(code)


_CMAKE_WORD_RE = re.compile(rb'"(?:\\.|[^"\\])*"|[^\s"()]+')


def _cmake_words(code: bytes, start: int, end: int) -> list[tuple[int, bytes]]:
    return [(m.start(), m.group(0)) for m in _CMAKE_WORD_RE.finditer(code, start, end)]


@dataclass(frozen=True)
class HookTarget:
    """The build script the hook goes into, as before optrace (located: the hook's place
    in it and its text are `render_hook`'s). The hook never names the sizes macro."""

    path: Path
    data: bytes
    sizes: bool = False


def locate_hook(plan: Plan, mode: str) -> list[HookTarget]:
    """The script to hook, if the search found one: the same in both modes, never refused."""
    del mode  # the hook is the same in both modes
    path = build_script(plan.analysis.layers)
    return [] if path is None else [HookTarget(path, clean_bytes(path))]


def build_hook_edits(plan: Plan, mode: str) -> list[Edit]:
    return render_hook(plan, locate_hook(plan, mode))


def render_hook(plan: Plan, located: Sequence[HookTarget]) -> list[Edit]:
    """The hook block, at its place in each located script (one at most)."""
    return [edit for target in located for edit in _hook_edits(plan.analysis.layers, target)]


def _hook_edits(layers: Layers, located: HookTarget) -> list[Edit]:
    path, data = located.path, located.data
    nl = newline_of(data)
    if path.suffix in SHELL_SUFFIXES or path.suffix not in (".cmake", ".txt"):
        site = shell_site(path, data, layers)
        lines = shell_block(site, nl)
        at = site.at
        note = site.why
    else:
        lines, note = cmake_block(path, layers)
        target = _CMAKE_TARGET_RE.search(data)
        at = line_start(data, target.start()) if target else len(data)
    foreign = HOOK_BLOCK_RE.search(data)
    if foreign is not None:
        # A hook block written by hand (the legacy preprocessor): ours takes its place and
        # it stays below, commented out line by line, for strip to turn back on.
        off = b"\n".join(OFF_MARK + ln for ln in foreign.group(0).split(b"\n"))
        body = nl.join(lines) + nl + off
        return [Edit(path, line_start(data, foreign.start()), foreign.end(), body, CODEMOD,
                     "turn off the hand-written hook block, add optrace's")]
    body = nl.join(lines) + nl
    if at == len(data) and data and not data.endswith(b"\n"):
        body = nl + body[: -len(nl)]
    return [Edit(path, at, at, body, CODEMOD, note)]


# A build that copies the kernels into its tree: the hook preprocesses the copy.
_EXAMPLE_BUILD = """\
#!/bin/bash
set -e
PROJ_DIR=$(cd "$(dirname "$0")" && pwd)
BUILD_DIR="${PROJ_DIR}/build"

mkdir -p "${BUILD_DIR}"
cp -r "${PROJ_DIR}/demo_op/op_kernel" "${BUILD_DIR}/op_kernel"
cmake -S "${PROJ_DIR}" -B "${BUILD_DIR}"
cmake --build "${BUILD_DIR}" -j
"""


# A script copying the kernels into a build tree (ranks the build scripts found).
_COPIES_KERNELS_RE = re.compile(rb"\b(cp|rsync|copy)\b[^\n]*(op_kernel|ascend_kernels|\$\{?\w*kernel)", re.I)
# What ranks a build script whatever the operator, kept by content in the index's store:
# the line the search shows it at, and whether it copies the kernels ("<line> <0|1>").
_RANK_KIND = "build-hook-rank1"


def _rank_facts(data: bytes | None) -> str:
    line = SearchContext.at(Path(), data, BUILD_RE.pattern, "").line
    return f"{line} {1 if data is not None and _COPIES_KERNELS_RE.search(data) else 0}"


# Folders of CI jobs and tests: a script there runs a pipeline's checks (ops-nn's
# scripts/ci/check_kernel_ut.sh lists the operators with unit tests), not the build a user
# runs, so it takes the hook only when no other script builds the kernels.
_CI_OR_TEST_DIRS = frozenset({"ci", ".ci", ".github", ".gitlab", "test", "tests", "ut", "st"})


def ci_or_test_script(path: Path, layers: Layers) -> bool:
    """Whether ``path`` lies in a CI or test folder that is not one of the operator's own
    ancestors (an operator kept under tests/ has its build there)."""
    root = os.fspath(layers.repo_root)
    found = _relative_parts(os.fspath(path), root)
    own = _own_parts(os.fspath(layers.op_dir), root)
    if found is None or own is None:
        return False
    folders = found[:-1]
    shared = 0
    while shared < min(len(folders), len(own)) and folders[shared] == own[shared]:
        shared += 1
    return any(part.lower() in _CI_OR_TEST_DIRS for part in folders[shared:])


@functools.lru_cache(maxsize=64)
def _own_parts(op_dir: str, root: str) -> tuple[str, ...] | None:
    """The operator directory's parts below the root: the same for every script ranked."""
    return _relative_parts(op_dir, root)


def _relative_parts(path: str, root: str) -> tuple[str, ...] | None:
    """`Path(path).relative_to(root).parts` (None: not below it) of two absolute paths as
    `Path` spells them, by their text: the mode probe and the search rank a repository's
    every build script (~3k calls a plan on ops-nn), and `relative_to` took 60 us a call."""
    if not (os.path.isabs(path) and os.path.isabs(root)):
        try:
            return Path(path).relative_to(root).parts
        except ValueError:
            return None
    if path == root:
        return ()
    prefix = root if root.endswith(os.sep) else root + os.sep
    if not path.startswith(prefix):
        return None
    return tuple(path[len(prefix):].split(os.sep))


class BuildHookLayer(LocatingLayer[HookTarget]):
    NAME: ClassVar[str] = "build_hook"
    DESCRIPTION: ClassVar[str] = "build hook: the build runs `optrace preprocess` on the kernels it compiles"
    GATE: ClassVar[str] = "G1"
    FOUND_KEY: ClassVar[str | None] = "build_script"
    TITLE: ClassVar[str] = "build script"
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (LayerExample(
        path="build.sh",
        files={"build.sh": _EXAMPLE_BUILD, "CMakeLists.txt": "project(demo)\nadd_subdirectory(demo_op)\n"},
        changes=(('/op_kernel"\n',
                  '/op_kernel"\n'
                  "# TRACE_PREPROCESSOR_HOOK_START\n"
                  "...\n"
                  'optrace preprocess "${BUILD_DIR}/op_kernel" --out "${BUILD_DIR}" --modify || {\n'
                  "...\n"
                  "# TRACE_PREPROCESSOR_HOOK_END\n"),),
    ),)

    def search(self, ctx: SearchContext) -> list[LayerFile]:
        """The repository's scripts building kernels; the one that copies the kernels
        into a build tree is where the hook goes: ranked first (outside CI and test
        folders, names the op, copies op_kernel, is a shell script), then shallower paths."""
        # Every operator asks this of the same scripts (~1,500 in ops-nn): what does not
        # depend on the operator is derived once per script content (the store: a script
        # apply edited is read again), and the op's names are looked up in the scripts'
        # words (`build_scripts_naming_op`) instead of searching every script's bytes.
        paths = ctx.index.build_scripts()
        facts = [value.split(" ") for value in ctx.index.script_values(_RANK_KIND, _rank_facts)]
        scripts = [LayerFile(path, int(line), "copies / builds the kernels")
                   for path, (line, _) in zip(paths, facts, strict=True)]
        if len(scripts) > 1:
            named = ctx.build_scripts_naming_op()
            copies = {path for path, (_, copy) in zip(paths, facts, strict=True) if copy == "1"}

            def score(f: LayerFile) -> tuple[bool, int, int]:
                s = (4 if f.path in named else 0) + (2 if f.path in copies else 0)
                s += 1 if f.path.suffix in (".sh", ".bash") else 0
                return (ci_or_test_script(f.path, ctx.layers), -s, len(f.path.parts))

            scripts.sort(key=score)
        return scripts

    def find(self, layers: Layers) -> list[Path]:
        script = build_script(layers)
        return [script] if script is not None else []

    def locate(self, plan: Plan, mode: str) -> list[HookTarget]:
        return locate_hook(plan, mode)

    def render(self, plan: Plan, mode: str, located: Sequence[HookTarget]) -> list[Edit]:
        return render_hook(plan, located)

    def verify(self, model: LayerModel) -> list[Evidence]:
        if not model.data:
            return []
        script, data = next(iter(model.data.items()))
        block = next((m for m in HOOK_BLOCK_RE.finditer(data) if b"optrace" in m.group(0)), None)
        if block is None:
            return [Evidence(script, 1, "no `# TRACE_PREPROCESSOR_HOOK_START` block running "
                             "`optrace preprocess`", False)]
        hook_line = line_of(data, block.start())
        body = block.group(0)
        ev = [Evidence(script, hook_line, "hook block present")]
        loud = (b"command -v optrace" in body and b"exit 1" in body) or b"FATAL_ERROR" in body
        ev.append(Evidence(script, hook_line, "fails the build when optrace is not installed" if loud
                           else "does not fail the build when optrace is missing", loud))
        shell = script.suffix in SHELL_SUFFIXES
        # Read as the shell / CMake reads it: continuation lines joined, `execute_process(...)`
        # across lines, comments and messages left out.
        pre = hook_command(body, cmake=not shell and script.suffix in (".cmake", ".txt"))
        if pre is None:
            ev.append(Evidence(script, hook_line, "the block does not run `optrace preprocess`", False))
            return ev
        pre_line = line_of(data, block.start() + pre.offset)
        src = pre.src.strip(b'"\'').rstrip(b"/")
        modify = pre.modify
        if pre.out is None:
            ev.append(Evidence(script, pre_line, "no `--out`: point_map.json is not written beside the build",
                               False))
        else:
            ev.append(Evidence(script, pre_line, f"writes {pre.out.decode(errors='replace').strip(chr(34))}"
                                                 "/point_map.json"))
        rest = data[: block.start()] + data[block.end() :]
        copies = kernel_copies(rest) if shell else []
        if copies:
            last = copies[-1]
            last_at = last.start() if last.start() < block.start() else last.start() + len(body)
            copy_line = line_of(data, last_at)
            dest = (shell_words(last.group(1))[-1].strip(b'"\'').rstrip(b"/*").rstrip(b"/"))
            fn_copy = enclosing_function(data, last_at)
            fn_hook = enclosing_function(data, block.start())
            after = last_at < block.start() and fn_copy == fn_hook
            later = [c for c in kernel_copies(data[block.end() :])
                     if enclosing_function(data, block.end() + c.start()) == fn_hook]
            ok = after and not later
            ev.append(Evidence(script, copy_line, f"kernels copied into the build tree here; the hook runs "
                               f"{'after' if ok else 'NOT after'} the last copy", ok))
            same = src == dest
            ev.append(Evidence(script, pre_line, "preprocesses the build tree's copy" if same
                               else f"preprocesses {src.decode(errors='replace')}, not the copy "
                                    f"{dest.decode(errors='replace')}", same))
            ev.append(Evidence(script, pre_line,
                               "--modify: ids and fingerprint go into the copy the build compiles" if modify
                               else "no --modify: the kernel records no build fingerprint", modify))
        else:
            if shell:
                # Where apply puts it, read on the script without the block: before the
                # first build command that does not only clean, or at the start of the
                # function the top level calls that leads to it.
                site = source_build_site(rest)
                # (or, placed by hand, before a build command of its own function)
                next_build = first_build_command(data, block.end())
                ok = site is not None and (site[0] == block.start() or (
                    next_build is not None and enclosing_function(data, next_build.start())
                    == enclosing_function(data, block.start()))
                    or _top_level_before_its_call(data, block, rest, site[0]))
                ev.append(Evidence(script, hook_line,
                                   "builds from the source tree: the hook runs before the build command"
                                   if ok else "no build command after the hook" if site is None
                                   else "the hook does not run before the build command (it belongs at line "
                                        f"{line_of(rest, site[0])})", ok))
            ev.append(Evidence(script, pre_line, "reads the sources only (no --modify)" if not modify
                               else "--modify would rewrite the checked-in sources", not modify))
        ev.extend(_collector_link(model.op))
        return ev


def _top_level_before_its_call(data: bytes, block: re.Match[bytes], rest: bytes, site: int) -> bool:
    """A hook placed by hand at the top level, before the top level's call of the function
    apply would put it in (`main "$@"`): it runs before that function, so before its build."""
    fn = enclosing_function(rest, site)
    if fn is None or enclosing_function(data, block.start()) is not None:
        return False
    name = _function_name(rest, fn[0])
    call = re.compile(rb"^[ \t]*" + re.escape(name) + rb"\b(?![ \t]*\(\))", re.M) if name else None
    return call is not None and any(enclosing_function(data, m.start()) is None
                                    for m in call.finditer(data, block.end()))


def _collector_link(op: Operator) -> list[Evidence]:
    """The callers hand the map to save_profiling_data, which copies it beside the ranks
    (samples and tests: library code calling the op never saves)."""
    callers = split_callers(caller_files(op.layers), op.layers.repo_root, op.analysis.config.sample_globs)[0]
    if not callers or op.mode != "B":
        return [Evidence(None, 0, "collector: `optrace collect DIR --point-map <out>/point_map.json`")]

    out = []
    for path in callers:
        data = read_or_empty(path)
        code = mask(data)
        for m in re.finditer(rb"(?:save_profiling_data|_optrace_save)\s*\(", code):
            close = match_bracket(code, m.end() - 1)
            ok = b"point_map" in data[m.start() : close if close > 0 else len(data)]
            out.append(Evidence(path, line_of(data, m.start()),
                                "the saved rank files get the point map (collect finds it beside them)"
                                if ok else "save_profiling_data without point_map=", ok))
    return out or [Evidence(None, 0, "collector: `optrace collect DIR --point-map <out>/point_map.json`")]
