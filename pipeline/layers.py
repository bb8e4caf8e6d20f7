"""What apply, strip and check do with the registered layers (codemods/registry.py).

Each layer (`codemods.layer.Layer`) knows its files (`find`), reads them (`read`), edits them
(`edits`, the layer's codemod) and verifies them (`verify`, its gate evidence). Apply
takes the host layers' edits from here, strip the files they own, and `check` assembles
G1, G2, G4 and G5 from their `verify` (`pipeline/gates.py`). The order is the order of the
data: each layer's verify may use what the ones before it learnt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from optrace.codemods.kernel_entry import entry_edits
from optrace.codemods.kernel_points import point_edits
from optrace.codemods.layer_common import buffer_core_type, sizes_header_content, sizes_header_path
from optrace.codemods.registry import HOST_LAYERS, KERNEL_LAYERS, LAYERS, layer
from optrace.codemods.runtime_block import block_edits, include_edits, points_files
from optrace.engine.cache import unchanged_files
from optrace.engine.discovery import Layers
from optrace.engine.edits import Edit, resolve
from optrace.engine.plan import Plan

__all__ = ["HOST_LAYERS", "KERNEL_LAYERS", "LAYERS", "KernelEdits", "LayerEdits", "kernel_side", "layer",
           "layer_carries", "layer_edits", "owned_files", "sizes_header"]

@dataclass
class LayerEdits:
    """The edits and created files of the host layers, and the files they live in."""

    edits: list[Edit] = field(default_factory=list)
    created: dict[Path, bytes] = field(default_factory=dict)
    scopes: set[Path] = field(default_factory=set)  # every file the operator's layers live in


def owned_files(plan: Plan) -> set[Path]:
    """Every file the host layers may touch for this operator (resolved): what strip
    visits outside the operator directory and apply rebuilds from clean bytes."""
    scopes: set[Path] = set()
    for lay in HOST_LAYERS:
        scopes |= lay.owned(plan)
    return scopes


def sizes_header(layers: Layers) -> Path:
    host = [f.path for key in ("infer", "op_def", "torch_adapter") for f in layers.found.get(key, [])]
    return sizes_header_path(layers.op_dir, host)


def layer_edits(plan: Plan, mode: str) -> LayerEdits:
    """All host-layer edits of one operator in `mode` ("A" or "B"), of the clean bytes."""
    out = LayerEdits()
    for lay in HOST_LAYERS:
        out.edits.extend(lay.edits(plan, mode, None))
    out.scopes = owned_files(plan)
    header = sizes_header(plan.analysis.layers)
    if any(e.replacement.find(b"OPTRACE_PROFILING_NUMEL") >= 0 for e in out.edits):
        out.created[header.resolve()] = sizes_header_content(buffer_core_type(plan.analysis.declared_cores))
    return out


def layer_carries(plan: Plan, mode: str) -> frozenset[Path]:
    """What `layer_edits(plan, mode)` would edit and create (resolved), and the same
    InputError where it raises one, asked of each layer's `carries`: the mode probe of
    plan, which computes no LibCST edits. It writes nothing: what the layers derive from
    the files by path (the operator's host sources, their registrations, the l0op chain,
    the build script) is found once (`unchanged_files`), not by each layer again."""
    edited: set[Path] = set()
    header = False
    with unchanged_files():
        for lay in HOST_LAYERS:
            carry = lay.carries(plan, mode)
            edited |= carry.edited
            header = header or carry.sizes_header
    if header:
        edited.add(resolve(sizes_header(plan.analysis.layers)))
    return frozenset(edited)


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
    with_points = points_files(plan, points)
    block, created = block_edits(plan, with_points)
    return KernelEdits([*points, *entry], [*block, *include_edits(plan, with_points)], created)
