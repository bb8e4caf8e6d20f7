"""Which core types a kernel runs, from what declares it (issue #11 §3).

The buffer layout trusts a declaration only: a kernel laid out vector-only whose launch
also starts cube cores would write AIC i and AIV i into one slot. In order:

1. the kernel's own `KERNEL_TASK_TYPE_DEFAULT(...)` / `KERNEL_TASK_TYPE(key, ...)`;
2. where it says nothing, the compiled kernels' metadata in the operator's build output
   (the `.json` beside each kernel binary: `"magic": "RT_DEV_BINARY_MAGIC_ELF_AIVEC"`
   (vector cores), `"..._AICUBE"` (cube cores), `"RT_DEV_BINARY_MAGIC_ELF"` with
   `"coreType": "MIX"` or a `"taskRation"` (both)) — what the compiler decided;
3. else the op_host config: `ExtendCfgInfo("coreType.value", "VectorCore")` on every
   config of the OpDef (an `"AiCore"` config may start either kind: no decision).

Anything else is inferred from the kernel's code (core-type tests) and laid out mixed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from optrace.engine.names import op_key
from optrace.engine.probes import looked_at
from optrace.engine.source import blank_comments, read_regular

# KERNEL_TASK_TYPE values: MIX_AIC_1_0 runs cube cores only, MIX_AIV_1_0 vector cores only.
_TASK_TYPE_RE = re.compile(rb"\bKERNEL_TYPE_(AIV_ONLY|AIC_ONLY|MIX_\w+)")
_CFG_CORE_RE = re.compile(rb'\.\s*ExtendCfgInfo\s*\(\s*"coreType\.value"\s*,\s*"(\w+)"\s*\)')

# The build output's metadata: bounded so a tree of build products is not read whole.
METADATA_MAX_BYTES = 1 << 20
METADATA_MAX_FILES = 256
_WALK_SKIP = frozenset({".git", ".hg", ".svn", ".optrace", "node_modules", "__pycache__", ".venv", "venv"})

AIC_AIV = frozenset({"AIC", "AIV"})


@dataclass(frozen=True)
class CoreDeclaration:
    """The core types a kernel runs and what said so (`file:line` where there is one)."""

    cores: frozenset[str]
    source: str  # "kernel" | "binary metadata" | "op_host config"
    detail: str  # the words that said it: "KERNEL_TYPE_AIV_ONLY", "magic ..._AIVEC"
    path: Path | None = None
    line: int = 0

    def describe(self, shown: str) -> str:
        """`AIV only, declared by the kernel: KERNEL_TYPE_AIV_ONLY at x.cpp:12`; `shown` is
        the path as displayed."""
        kind = "mixed AIC/AIV" if len(self.cores) > 1 else next(iter(self.cores)) + " only"
        where = f" at {shown}" + (f":{self.line}" if self.line else "") if self.path is not None else ""
        return f"{kind}, declared by the {self.source}: {self.detail}{where}"


def task_type_cores(kind: bytes) -> frozenset[str]:
    if kind in (b"AIV_ONLY", b"MIX_AIV_1_0"):
        return frozenset({"AIV"})
    if kind in (b"AIC_ONLY", b"MIX_AIC_1_0"):
        return frozenset({"AIC"})
    return AIC_AIV if kind.startswith(b"MIX") else frozenset()


def from_kernel(path: Path | None, entry_src: bytes) -> CoreDeclaration | None:
    """The union over the kernel's KERNEL_TASK_TYPE declarations; None when it has none."""
    code = blank_comments(entry_src)
    found = list(_TASK_TYPE_RE.finditer(code))
    declared = {core for m in found for core in task_type_cores(m.group(1))}
    if not declared:
        return None
    kinds = sorted({m.group(0).decode() for m in found})
    return CoreDeclaration(frozenset(declared), "kernel", ", ".join(kinds), path,
                           code.count(b"\n", 0, found[0].start()) + 1)


def metadata_cores(doc: dict[str, object]) -> tuple[frozenset[str], str] | None:
    """The core types one compiled kernel's metadata names, and the field that said it;
    None when it does not say (a plain AI Core binary may start either kind)."""
    magic = doc.get("magic")
    core_type = doc.get("coreType")
    ration = doc.get("taskRation")
    if magic == "RT_DEV_BINARY_MAGIC_ELF_AIVEC":
        return frozenset({"AIV"}), f"magic {magic}"
    if magic == "RT_DEV_BINARY_MAGIC_ELF_AICUBE":
        return frozenset({"AIC"}), f"magic {magic}"
    if isinstance(ration, str):  # "cube:vector" tasks of a mixed launch, e.g. "1:2"
        parts = ration.split(":")
        if len(parts) == 2 and all(p.strip().isdigit() for p in parts):
            cube, vector = (int(p) for p in parts)
            cores = ({"AIC"} if cube else set()) | ({"AIV"} if vector else set())
            if cores:
                return frozenset(cores), f"taskRation {ration}"
    if core_type == "MIX":
        return AIC_AIV, "coreType MIX"
    if core_type == "VectorCore" and magic is None:
        return frozenset({"AIV"}), "coreType VectorCore"
    return None


def _json_files(root: Path) -> Iterator[Path]:
    """`.json` files under root (build output included: that is where the metadata is),
    not following links, at most METADATA_MAX_FILES of them."""
    count = 0
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _WALK_SKIP)
        for name in sorted(filenames):
            if name.endswith(".json") and not name.endswith("_binary.json"):  # the latter: build inputs
                yield Path(dirpath, name)
                count += 1
                if count >= METADATA_MAX_FILES:
                    return


def from_binary_metadata(op_dir: Path, names: Iterable[str]) -> CoreDeclaration | None:
    """The union over the compiled kernels' metadata under the operator directory whose
    kernel is this operator's (its name starts with the op's or the entry's name, in
    normal form). None when there is none, or when one of them does not say: a union
    missing one binary's cores would lay that binary's launch out wrong."""
    keys = {op_key(n) for n in names if n}
    found: set[str] = set()
    first: tuple[Path, str] | None = None
    for path in _json_files(op_dir):
        try:
            looked_at(path)  # a link is skipped: one made a file (or the reverse) changes the answer
            if path.is_symlink():
                continue
            doc = json.loads(read_regular(path, bound=METADATA_MAX_BYTES))
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(doc, dict):
            continue
        name = doc.get("kernelName") or doc.get("binFileName")
        if not isinstance(name, str) or not any(op_key(name).startswith(k) for k in keys):
            continue
        said = metadata_cores(doc)
        if said is None:
            return None
        found |= said[0]
        first = first or (path, said[1])
    if first is None:
        return None
    return CoreDeclaration(frozenset(found), "binary metadata", first[1], first[0], 0)


def from_op_host(files: Iterable[Path]) -> CoreDeclaration | None:
    """AIV only when every `coreType.value` config of the OpDef files says VectorCore."""
    values: list[tuple[str, Path, int]] = []
    for path in files:
        try:
            code = blank_comments(read_regular(path))
        except OSError:
            continue
        for m in _CFG_CORE_RE.finditer(code):
            values.append((m.group(1).decode(), path, code.count(b"\n", 0, m.start()) + 1))
    if not values or any(v != "VectorCore" for v, _, _ in values):
        return None
    _, path, line = values[0]
    return CoreDeclaration(frozenset({"AIV"}), "op_host config", 'coreType.value "VectorCore"', path, line)
