"""The layers of an operator, in one ordered registry (issue 12 §1).

Each layer (`model.Layer`) knows its files (`find`), reads them (`read`), edits them
(`edits`, the layer's codemod) and verifies them (`verify`, its gate evidence). Apply
takes the host layers' edits from here, strip the files they own, and `check` assembles
G1, G2, G4 and G5 from their `verify` (`pipeline/gates.py`). The order is the order of the
data: each layer's verify may use what the ones before it learnt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from optrace.codemods.layer_common import buffer_core_type, sizes_header_content, sizes_header_path
from optrace.codemods.registration import registration_changes
from optrace.engine.discovery import Layers
from optrace.engine.edits import Edit, resolve
from optrace.engine.plan import Plan
from optrace.pipeline.layer_build_hook import BuildHookLayer
from optrace.pipeline.layer_kernel import BaseHeaderLayer, EntryLayer, KernelEdits, kernel_side
from optrace.pipeline.layer_model import Evidence, Facts, Layer, LayerModel, Operator
from optrace.pipeline.layer_op_host import InferLayer, OpDefLayer, TilingLayer
from optrace.pipeline.layer_python import GraphConvertersLayer, PythonCallersLayer, PythonFakesLayer
from optrace.pipeline.layer_torch import (
    AclnnLayer,
    AutogradWrappersLayer,
    L0opLayer,
    RegistrationLayer,
    TorchAdapterLayer,
)

__all__ = ["HOST_LAYERS", "KERNEL_LAYERS", "LAYERS", "Evidence", "Facts", "KernelEdits", "Layer",
           "LayerEdits", "LayerModel", "Operator", "kernel_side", "layer", "layer_edits", "owned_files",
           "sizes_header"]

KERNEL_LAYERS: tuple[Layer, ...] = (EntryLayer(), BaseHeaderLayer())
# The host layers in the order apply runs their codemods (and check verifies them).
HOST_LAYERS: tuple[Layer, ...] = (
    OpDefLayer(), InferLayer(), TilingLayer(), L0opLayer(), AclnnLayer(), TorchAdapterLayer(),
    RegistrationLayer(), AutogradWrappersLayer(), BuildHookLayer(), PythonCallersLayer(), PythonFakesLayer(),
    GraphConvertersLayer(),
)
LAYERS: tuple[Layer, ...] = (*KERNEL_LAYERS, *HOST_LAYERS)


def layer(name: str) -> Layer:
    return next(lay for lay in LAYERS if lay.NAME == name)


@dataclass
class LayerEdits:
    """The edits and created files of the host layers, and the files they live in."""

    edits: list[Edit] = field(default_factory=list)
    created: dict[Path, bytes] = field(default_factory=dict)
    scopes: set[Path] = field(default_factory=set)  # every file the operator's layers live in


def owned_files(plan: Plan) -> set[Path]:
    """Every file the host layers may touch for this operator (resolved): what strip
    visits outside the operator directory and apply rebuilds from clean bytes."""
    layers = plan.analysis.layers
    kernel_dir = layers.kernel_dir
    _, regions = registration_changes(plan, "A")
    scopes = {resolve(path) for path in regions}
    for lay in HOST_LAYERS:
        if isinstance(lay, RegistrationLayer):
            continue  # shared files: only the regions above are this op's
        for path in lay.find(layers):
            if kernel_dir is None or kernel_dir not in path.parents:
                scopes.add(resolve(path))
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
