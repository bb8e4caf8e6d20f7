"""The kernel side: the entry (`__global__ __aicore__`, its points and scaffold) and the
base header carrying the device runtime block.

Apply edits these on the current bytes (`kernel_side`), not on clean bytes as the host
layers: the points are planned against the tree as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from optrace.codemods.kernel_entry import entry_edits, is_system_param
from optrace.codemods.kernel_points import point_edits
from optrace.codemods.runtime_block import block_edits, include_edits
from optrace.engine.cpp import FunctionDef, parameter_name
from optrace.engine.discovery import CPP_EXTS, Layers, walk_files
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan
from optrace.engine.source import read_regular
from optrace.engine.vocabulary import PROFILING_NAMES, RUNTIME_BLOCK_VERSION_RE
from optrace.pipeline.layer_model import Evidence, FileLayer, LayerModel, line_of


@dataclass
class KernelEdits:
    """apply's kernel-side edits: the entry's points and scaffold, the base header's runtime block."""

    entry: list[Edit] = field(default_factory=list)  # trace points and the entry scaffold
    base: list[Edit] = field(default_factory=list)  # the runtime block and its includes
    created: dict[Path, bytes] = field(default_factory=dict)  # a base header the op lacked


def kernel_side(plan: Plan, mode: str | None) -> KernelEdits:
    """Everything apply changes in the kernel: one computation for both kernel layers (the
    includes go to the files that get points)."""
    points = point_edits(plan)
    entry = entry_edits(plan, mode)
    block, created = block_edits(plan)
    files_with_points = {e.path for e in points} | {plan.analysis.entry_fn.src.path}
    return KernelEdits([*points, *entry], [*block, *include_edits(plan, files_with_points)], created)


@dataclass(frozen=True)
class EntryProfiling:
    """Where the kernel entry takes the buffer: its parameter's name and index, and the
    tensor parameters after it (none when it is the last output, as G2 wants)."""

    name: str | None
    index: int | None
    after: tuple[str, ...] = ()


def entry_profiling(entry: FunctionDef) -> EntryProfiling:
    """The one reading of the entry's parameters for G2 (the gate's evidence and check's
    OT410 / OT411 findings)."""
    names = [parameter_name(entry.src.raw, p) for p in entry.parameter_nodes()]
    prof = next((n for n in names if n in PROFILING_NAMES), None)
    if prof is None:
        return EntryProfiling(None, None)
    i = names.index(prof)
    return EntryProfiling(prof, i, tuple(n for n in names[i + 1 :] if not is_system_param(n)))


class EntryLayer(FileLayer):
    NAME: ClassVar[str] = "entry"
    DESCRIPTION: ClassVar[str] = "kernel entry (__global__ __aicore__): the trace points and profiling_data"

    def find(self, layers: Layers) -> list[Path]:
        return [layers.entry.path] if layers.entry is not None else []

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return kernel_side(plan, mode).entry

    def verify(self, model: LayerModel) -> list[Evidence]:
        entry = model.op.analysis.entry_fn
        found = entry_profiling(entry)
        if found.name is None or found.index is None:
            return [Evidence(entry.src.path, entry.line, f"kernel entry `{entry.name}` has no profiling_data",
                             False)]
        model.op.facts.kernel_position = found.index
        later = found.after
        note = (f"kernel entry: `{later[0]}` comes after `{found.name}`" if later
                else f"kernel entry: `{found.name}` is parameter {found.index}, the last tensor output")
        return [Evidence(entry.src.path, entry.line, note, not later)]


class BaseHeaderLayer(FileLayer):
    NAME: ClassVar[str] = "base_header"
    DESCRIPTION: ClassVar[str] = "runtime base header (*_base.h): the device runtime filling profiling_data"

    def find(self, layers: Layers) -> list[Path]:
        """Discovery's base header, and any kernel header carrying the block (apply creates
        `<op>_base.h` when the operator has none)."""
        found = [f.path for f in layers.found.get("base_header", [])]
        kernel_dir = layers.kernel_dir or layers.op_dir
        for path in walk_files(kernel_dir, CPP_EXTS):
            if path not in found and path.suffix.lower() in (".h", ".hpp"):
                try:
                    if RUNTIME_BLOCK_VERSION_RE.search(read_regular(path)):
                        found.append(path)
                except OSError:
                    continue
        return found

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return kernel_side(plan, mode).base

    def verify(self, model: LayerModel) -> list[Evidence]:
        for path, data in model.data.items():
            m = RUNTIME_BLOCK_VERSION_RE.search(data)
            if m is not None:
                return [Evidence(path, line_of(data, m.start()),
                                 f"runtime block v{m.group(1).decode()}: the kernel writes its records "
                                 "into profiling_data")]
        where = ", ".join(p.name for p in model.files)
        return [Evidence(model.files[0], 1, f"no runtime block in {where}: nothing writes the records "
                         "into profiling_data", False)] if model.files else []
