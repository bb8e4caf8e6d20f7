"""Layer discovery: which files of a repository make up one operator.

Inside the operator directory files are classified by location and content; files
outside it (torch adapter, registration, build script, Python callers) are found by
searching the repository for the op's name. `optrace.toml` layer entries override any
of it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from optrace.engine.config import Config
from optrace.engine.diagnostics import Diagnostic, InputError, Severity
from optrace.engine.names import op_name_pattern, same_op
from optrace.engine.source import blank_comments, decode, is_binary, read_regular

# `.inl` / `.ipp` / `.tpp` are headers by another name (template bodies included at the end of a
# header): apply reaches them through the include graph, so strip and check must scan them.
CPP_EXTS = frozenset({".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".hxx", ".asc", ".inc", ".inl",
                      ".ipp", ".tpp", ".tcc"})
KERNEL_EXTS = frozenset({".cpp", ".cc", ".cxx", ".asc"})
SCRIPT_EXTS = frozenset({".sh", ".bash", ".cmake", ".txt", ".py"})
SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache",
     "build_out", "output", "dist", ".pytest_cache", ".optrace"}
)
# Files above this size are not searched for the op name (generated blobs, logs).
SEARCH_LIMIT_BYTES = 2 * 1024 * 1024

LAYER_TITLES = {
    "entry": "kernel entry (__global__ __aicore__)",
    "base_header": "runtime base header (*_base.h)",
    "op_def": "op_host OpDef",
    "infer": "infer shape",
    "tiling": "tiling",
    "aclnn": "aclnn wrappers",
    "torch_adapter": "torch adapter (EXEC_NPU_CMD / EXEC_KERNEL_CMD)",
    "registration": "torch registration (PYBIND11_MODULE / TORCH_LIBRARY)",
    "build_script": "build script",
    "python_callers": "Python samples / tests",
    "python_fakes": "Python fake / Meta impls",
    "graph_converters": "graph-mode converters (torchair)",
}

# Layers many repositories legitimately do not have (no torch.compile / graph mode, no
# Python fakes): shown as "none", not as MISSING, and not listed in `missing_layers`.
OPTIONAL_LAYERS = frozenset({"python_fakes", "graph_converters"})

_GLOBAL_RE = re.compile(rb"\b__global__\b")
# What makes a shell / CMake script the kernels' build script.
_BUILD_RE = re.compile(rb"op_kernel|ascend_kernels|msopgen|op_host|ascendc_library|ascendc", re.I)
_AICORE_RE = re.compile(rb"\b__aicore__\b")


@dataclass(frozen=True)
class LayerFile:
    path: Path
    line: int
    detail: str


@dataclass
class EntryPoint:
    path: Path
    line: int
    name: str
    extern_c: bool
    templated: bool


@dataclass
class Layers:
    op_name: str
    camel: str
    op_dir: Path
    repo_root: Path
    entry: EntryPoint | None = None
    kernel_dir: Path | None = None
    found: dict[str, list[LayerFile]] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def missing(self) -> list[str]:
        """Layers an operator needs and does not have (optional ones are not missing)."""
        return [k for k in LAYER_TITLES if not self.found.get(k) and k not in OPTIONAL_LAYERS]


def camel_case(op_name: str) -> str:
    """`fused_deep_moe` -> `FusedDeepMoe` (the OpDef / aclnn spelling)."""
    return "".join(part[:1].upper() + part[1:] for part in op_name.split("_") if part)


def resolve_operator_dir(op_dir: Path) -> Path:
    """The operator directory, resolved; a missing one or a symlink loop is bad input."""
    try:
        resolved = op_dir.resolve(strict=True)
    except RuntimeError:  # Python 3.11 raises this for a symlink loop
        raise InputError(Diagnostic("OT014", "operator directory is a symlink loop", op_dir, 0,
                                    Severity.ERROR)) from None
    except OSError:
        raise InputError(Diagnostic("OT001", "operator directory does not exist", op_dir, 0,
                                    Severity.ERROR)) from None
    if not resolved.is_dir():
        raise InputError(Diagnostic("OT001", "operator directory does not exist", op_dir, 0,
                                    Severity.ERROR))
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
    unmarked grandparent is some unrelated tree above a copied operator (issue 14)."""
    return repo_root or marked_repo_root(op_dir) or op_dir


def walk_files(root: Path, exts: frozenset[str] | None = None) -> Iterator[Path]:
    """Files under root in sorted order, skipping VCS / build dirs and symlink loops
    (a directory reached twice, a file link that loops or dangles: nothing to read)."""
    seen_dirs: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        try:
            st = os.stat(dirpath)
        except OSError:
            dirnames[:] = []
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:
            dirnames[:] = []
            continue
        seen_dirs.add(key)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if exts is None or path.suffix.lower() in exts or (
                exts is SCRIPT_EXTS and name == "CMakeLists.txt"
            ):
                if os.path.islink(path) and not os.path.exists(path):
                    continue  # resolving it would raise (a loop) or find nothing (dangling)
                yield path


@dataclass
class RepoIndex:
    """One pass over a repository: which files mention which words.

    Planning many operators of one repository asks "which files name this op?" once per
    operator; answering from an index keeps that linear in the repository size instead
    of operators x files.
    """

    root: Path
    files: list[Path] = field(default_factory=list)
    by_word: dict[bytes, list[int]] = field(default_factory=dict)
    scripts: list[Path] = field(default_factory=list)
    # Every C/C++ file by its name, kernel sources included: where an include that is not
    # found beside its includer may be (`../other_op/...` of a flattened build tree).
    sources: dict[str, list[Path]] = field(default_factory=dict)
    _build_scripts: list[Path] | None = None

    def build_scripts(self) -> list[Path]:
        """Shell / CMake files that build Ascend kernels (the same for every operator)."""
        if self._build_scripts is None:
            self._build_scripts = [
                p for p in self.scripts if _BUILD_RE.search(_read(p) or b"")
            ]
        return self._build_scripts

    @classmethod
    def build(cls, root: Path) -> RepoIndex:
        index = cls(root)
        word_re = re.compile(rb"[A-Za-z_][A-Za-z0-9_]{2,}")
        for path in walk_files(root):
            ext = path.suffix.lower()
            if ext not in CPP_EXTS and ext not in (".sh", ".bash", ".py", ".cmake") and (
                path.name != "CMakeLists.txt"
            ):
                continue
            if ext in CPP_EXTS:
                index.sources.setdefault(path.name, []).append(path)
                if "op_kernel" in path.parts:
                    continue  # kernel sources never hold another layer; they are most of the bytes
            if ext in (".sh", ".bash", ".cmake") or path.name == "CMakeLists.txt":
                try:
                    if path.stat().st_size <= SEARCH_LIMIT_BYTES:
                        index.scripts.append(path)
                except OSError:
                    pass
                continue
            data = _read(path)
            if data is None:
                continue
            n = len(index.files)
            index.files.append(path)
            # Lowercased, with the file's own name, so `aclnn_<op>.cpp` and `CMake` match.
            words = set(word_re.findall(data.lower())) | {path.stem.lower().encode()}
            for word in words:
                index.by_word.setdefault(word, []).append(n)
        return index

    def mentioning(self, *words: bytes) -> list[Path]:
        hits: set[int] = set()
        for w in words:
            hits.update(self.by_word.get(w.lower(), ()))
        return [self.files[i] for i in sorted(hits)]


_REPO_INDEXES: dict[Path, RepoIndex] = {}


def repo_index(root: Path) -> RepoIndex:
    """The index of a repository root, built once per process."""
    if root not in _REPO_INDEXES:
        _REPO_INDEXES[root] = RepoIndex.build(root)
    return _REPO_INDEXES[root]


def _read(path: Path, limit: int = SEARCH_LIMIT_BYTES) -> bytes | None:
    try:
        if path.stat().st_size > limit:
            return None
        data = read_regular(path)
    except OSError:
        return None
    return None if is_binary(data) else data


def _line(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


_HEAD_RE = re.compile(rb"\b__global__\b")


def find_entries(kernel_files: list[Path]) -> list[EntryPoint]:
    """`__global__ __aicore__` function definitions, with or without extern "C".

    A lexical scan (comments blanked) is enough here and keeps discovery cheap: the name is
    the identifier before the first `(` after `__global__`, and it is a definition when
    the matching `)` is followed by `{`.
    """
    entries: list[EntryPoint] = []
    for path in kernel_files:
        data = _read(path)
        if data is not None:
            entries.extend(entries_in(path, data))
    return entries


def entries_in(path: Path, data: bytes) -> list[EntryPoint]:
    """The kernel entries of one file's bytes (see :func:`find_entries`)."""
    entries: list[EntryPoint] = []
    code = blank_comments(data)
    if _GLOBAL_RE.search(code) and _AICORE_RE.search(code):
        for m in _HEAD_RE.finditer(code):
            paren = code.find(b"(", m.end())
            if paren < 0:
                continue
            head = code[m.end() : paren]
            if b"__aicore__" not in head and b"__aicore__" not in code[max(0, m.start() - 40) : m.start()]:
                continue
            names = re.findall(rb"[A-Za-z_]\w*", head)
            if not names or b";" in head or b"{" in head:
                continue
            close = _matching_paren(code, paren)
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
            entries.append(
                EntryPoint(path, _line(code, m.start()), decode(names[-1]),
                           extern_c=b'extern "C"' in before, templated=b"template" in before)
            )
    return entries


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
        data = _read(path)
        if data is not None and _GLOBAL_RE.search(data) and find_entries([path]):
            found.add(op_dir)
    return sorted(found)


def _matching_paren(code: bytes, open_at: int) -> int:
    depth = 0
    for i in range(open_at, min(len(code), open_at + 20000)):
        c = code[i]
        if c == 0x28:
            depth += 1
        elif c == 0x29:
            depth -= 1
            if depth == 0:
                return i
    return -1


def discover(op_dir: Path, repo_root: Path, config: Config) -> Layers:
    """Classify the operator's files into layers; raises InputError without an entry."""
    if not op_dir.is_dir():
        raise InputError(
            Diagnostic("OT001", "operator directory does not exist", op_dir, 0, Severity.ERROR)
        )
    if "entry" not in config.layers:
        refuse_parent_of_operators(op_dir)
    op_name = op_dir.name
    layers = Layers(op_name, camel_case(op_name), op_dir, repo_root)
    op_files = list(walk_files(op_dir))
    cpp_files = [p for p in op_files if p.suffix.lower() in CPP_EXTS]

    # --- kernel entry and tree -------------------------------------------------------
    if "entry" in config.layers:
        kernel_candidates = list(config.layers["entry"])
    else:
        preferred = [p for p in cpp_files if "op_kernel" in p.parts]
        kernel_candidates = [p for p in (preferred or cpp_files) if p.suffix.lower() in KERNEL_EXTS]
    entries = find_entries(kernel_candidates)
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
        raise InputError(
            Diagnostic(
                "OT010",
                "no kernel entry (`__global__ __aicore__` function definition) found under "
                "the operator directory",
                op_dir,
                0,
                Severity.ERROR,
            )
        )

    def put(layer: str, path: Path, data: bytes | None, pattern: bytes | None, detail: str) -> None:
        line = 1
        if data is not None and pattern is not None:
            m = re.search(pattern, data)
            if m:
                line = _line(data, m.start())
        layers.found.setdefault(layer, []).append(LayerFile(path, line, detail))

    # --- inside the operator directory ---------------------------------------------------
    camel = op_name_pattern(op_name)  # any spelling: `MoeGmmFFNGate` for moe_gmm_ffn_gate
    for path in cpp_files:
        data = _read(path)
        if data is None:
            continue
        name = path.name.lower()
        code = blank_comments(data)
        if (name.endswith("_base.h") and "op_kernel" in path.parts) or (
            name.endswith("_base.h") and layers.kernel_dir and layers.kernel_dir in path.parents
        ):
            put("base_header", path, None, None, "kernel base header")
        if re.search(rb"\bOpDef\b", code) and re.search(rb"this->\s*(Input|Output|Attr|AICore)\s*\(", code):
            put("op_def", path, code, rb"this->\s*Output\s*\(", "OpDef outputs")
        if re.search(rb"InferShape|IMPL_OP_INFERSHAPE|InferDataType", code) and not name.endswith(".h"):
            put("infer", path, code, rb"InferShape\w*\s*\(", "infer shape")
        if "tiling" in name and name.endswith((".cpp", ".cc")) and "op_kernel" not in path.parts:
            put("tiling", path, code, rb"Tiling\w*\s*\(", "tiling function")
        if name.startswith("aclnn_") or re.search(rb"aclnnInner" + camel, code):
            if "op_kernel" not in path.parts:
                put("aclnn", path, code, rb"aclnn(?:Inner)?" + camel, "aclnn wrapper")

    # --- the rest of the repository, by op name ------------------------------------------
    _search_repository(layers, op_dir, put)

    for key, paths in config.layers.items():
        if key == "entry":
            continue
        layers.found[key] = [LayerFile(p, 1, "configured in optrace.toml") for p in paths]
    return layers


def refuse_parent_of_operators(op_dir: Path) -> None:
    """A folder holding operators (`ascend_kernels/`, `csrc/`) is not one: taking the first
    kernel entry found below it would instrument an arbitrary one of them."""
    found = find_operator_dirs(op_dir)
    if not found or op_dir.resolve() in found:
        return
    shown = [p.relative_to(op_dir.resolve()).as_posix() for p in found]
    listing = ", ".join(shown[:20]) + (f" and {len(shown) - 20} more" if len(shown) > 20 else "")
    raise InputError(Diagnostic(
        "OT015", f"not one operator directory: it holds {len(found)} operator director"
        f"{'y' if len(found) == 1 else 'ies'} below it ({listing}); give one of them", op_dir, 0,
        Severity.ERROR))


def _kernel_dir(entry: Path, op_dir: Path) -> Path:
    for parent in entry.parents:
        if parent.name == "op_kernel":
            return parent
        if parent == op_dir:
            break
    return entry.parent


def _search_repository(layers: Layers, op_dir: Path, put: object) -> None:
    """Torch adapter, registration, aclnn outside the op dir, build script, callers,
    Python fakes and torchair converters."""
    assert callable(put)
    op = layers.op_name.encode()
    camel = op_name_pattern(layers.op_name)  # any spelling (acronyms, case)
    op_word = re.compile(rb"\b" + camel + rb"\b")  # the op named in any spelling
    exec_re = re.compile(
        rb"EXEC_NPU_CMD(?:_V\d+)?\s*\(\s*aclnn" + camel + rb"\b|EXEC_KERNEL_CMD\s*\(\s*" + op + rb"\b"
    )
    reg_re = re.compile(rb"\bTORCH_LIBRARY(?:_FRAGMENT|_EXPAND|_IMPL)?\s*\(|PYBIND11_MODULE\s*\(")
    call_re = re.compile(rb"\.\s*" + re.escape(op) + rb"\s*\(")
    # Fakes name the op as a string ("ns::op", "op" for lib.impl) or as torch.ops.ns.op.
    op_ref = (rb"(?:['\"](?:\w+::)?" + re.escape(op) + rb"(?:\.\w+)?['\"]|\btorch\.ops\.\w+\."
              + re.escape(op) + rb"\b)")
    fake_re = re.compile(rb"\b(?:register_fake|impl_abstract)\s*\(\s*" + op_ref
                         + rb"|\bimpl\s*\([^)]*" + op_ref + rb"[^)]*['\"]Meta['\"]")
    converter_re = re.compile(rb"\bregister_fx_node_ge_converter\s*\(\s*torch\.ops\.\w+\." + re.escape(op)
                              + rb"\b")
    index = repo_index(layers.repo_root)
    for path in index.build_scripts():
        put("build_script", path, _read(path), _BUILD_RE.pattern, "copies / builds the kernels")
    spelled = layers.camel.encode()  # the index is lower case: one spelling finds them all
    candidates = index.mentioning(op, spelled, b"aclnn" + spelled, b"aclnn_" + op,
                                  b"aclnnInner" + spelled + b"GetWorkspaceSize")
    for path in candidates:
        inside = op_dir in path.parents
        ext = path.suffix.lower()
        if inside and ext in CPP_EXTS:
            # Direct-launch projects keep the launcher (EXEC_KERNEL_CMD) in op_host/.
            data = _read(path)
            code = blank_comments(data) if data is not None else b""
            if "op_kernel" not in path.parts and exec_re.search(code):
                put("torch_adapter", path, code, exec_re.pattern, "EXEC_*_CMD call")
            if "op_kernel" not in path.parts and reg_re.search(code) and op_word.search(code):
                put("registration", path, code, op_word.pattern, "registers the op")
            continue
        if inside:
            continue
        data = _read(path)
        if data is None:
            continue
        if ext in CPP_EXTS:
            code = blank_comments(data)
            if exec_re.search(code):
                put("torch_adapter", path, code, exec_re.pattern, "EXEC_*_CMD call")
            if reg_re.search(code) and op_word.search(code):
                put("registration", path, code, op_word.pattern, "registers the op")
            if (path.name.lower().startswith("aclnn_") and op in path.name.encode()) or re.search(
                rb"aclnnInner" + camel + rb"GetWorkspaceSize", code
            ):
                put("aclnn", path, code, rb"aclnn(?:Inner)?" + camel, "aclnn wrapper (outside op dir)")
        elif ext == ".py":
            if call_re.search(data):
                put("python_callers", path, data, call_re.pattern, "calls the op")
            if fake_re.search(data):
                put("python_fakes", path, data, fake_re.pattern, "fake / Meta impl of the op")
            if converter_re.search(data):
                put("graph_converters", path, data, converter_re.pattern, "torchair converter")
    # The script that copies the kernels into a build tree is where the hook goes: rank
    # it first (names the op, copies op_kernel, is a shell script), then shallower paths.
    scripts = layers.found.get("build_script", [])
    if len(scripts) > 1:
        copy_re = re.compile(rb"\b(cp|rsync|copy)\b[^\n]*(op_kernel|ascend_kernels|\$\{?\w*kernel)", re.I)

        def score(f: LayerFile) -> tuple[int, int]:
            data = _read(f.path) or b""
            s = (4 if op_word.search(data) else 0) + (2 if copy_re.search(data) else 0)
            s += 1 if f.path.suffix in (".sh", ".bash") else 0
            return (-s, len(f.path.parts))

        scripts.sort(key=score)

