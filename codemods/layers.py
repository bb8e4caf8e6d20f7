"""The cross-layer codemods in run order, and what each operator owns.

DESCRIPTION: run op_def, infer, tiling, aclnn, torch_adapter, registration,
autograd_wrappers, build_hook, python_callers, python_fakes and graph_converters for one
operator and mode; create the shared profiling-size header;
report every file the operator's layers live in, so apply can rebuild them and strip
can visit them.

Every edit here refers to the file's clean bytes (see `layer_common`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from optrace.codemods.aclnn import aclnn_edits, aclnn_files
from optrace.codemods.autograd_wrappers import autograd_wrapper_edits, wrapper_files
from optrace.codemods.build_hook import build_hook_edits, build_script
from optrace.codemods.graph_converters import converter_files, graph_converter_edits
from optrace.codemods.infer import infer_edits
from optrace.codemods.layer_common import sizes_header_content, sizes_header_path
from optrace.codemods.op_def import op_def_edits, opdef_file
from optrace.codemods.python_callers import python_caller_edits
from optrace.codemods.python_fakes import fake_files, python_fake_edits
from optrace.codemods.python_files import caller_files
from optrace.codemods.registration import registration_changes
from optrace.codemods.tiling import tiling_edits
from optrace.codemods.torch_adapter import torch_adapter_edits
from optrace.engine.discovery import Layers
from optrace.engine.edits import Edit, resolve
from optrace.engine.plan import Plan

# Layers whose discovered files the operator owns (besides registrations and declarations).
OWN_LAYERS = ("op_def", "infer", "tiling", "aclnn", "torch_adapter", "python_callers", "python_fakes",
              "graph_converters")


@dataclass
class LayerEdits:
    edits: list[Edit] = field(default_factory=list)
    created: dict[Path, bytes] = field(default_factory=dict)
    scopes: set[Path] = field(default_factory=set)  # every file the operator's layers live in


def owned_files(plan: Plan) -> set[Path]:
    """Every file the layer codemods may touch for this operator (resolved)."""
    layers = plan.analysis.layers
    kernel_dir = layers.kernel_dir
    _, regions = registration_changes(plan, "A")
    scopes = {resolve(path) for path in regions}
    for key in OWN_LAYERS:
        for f in layers.found.get(key, []):
            if kernel_dir is None or kernel_dir not in f.path.parents:
                scopes.add(resolve(f.path))
    for owned in (opdef_file(layers), build_script(layers), *aclnn_files(layers), *caller_files(layers),
                  *fake_files(layers), *converter_files(layers), *wrapper_files(layers)):
        if owned is not None:
            scopes.add(resolve(owned))
    return scopes


def sizes_header(layers: Layers) -> Path:
    host = [f.path for key in ("infer", "op_def", "torch_adapter") for f in layers.found.get(key, [])]
    return sizes_header_path(layers.op_dir, host)


def layer_edits(plan: Plan, mode: str) -> LayerEdits:
    """All cross-layer edits of one operator in `mode` ("A" or "B")."""
    out = LayerEdits()
    out.edits.extend(op_def_edits(plan, mode))
    out.edits.extend(infer_edits(plan, mode))
    out.edits.extend(tiling_edits(plan, mode))
    out.edits.extend(aclnn_edits(plan, mode))
    out.edits.extend(torch_adapter_edits(plan, mode))
    reg_edits, _ = registration_changes(plan, mode)
    out.edits.extend(reg_edits)
    out.edits.extend(autograd_wrapper_edits(plan, mode))
    out.edits.extend(build_hook_edits(plan, mode))
    out.edits.extend(python_caller_edits(plan, mode))
    out.edits.extend(python_fake_edits(plan, mode))
    out.edits.extend(graph_converter_edits(plan, mode))
    out.scopes = owned_files(plan)
    header = sizes_header(plan.analysis.layers)
    if any(e.replacement.find(b"OPTRACE_PROFILING_NUMEL") >= 0 for e in out.edits):
        out.created[header.resolve()] = sizes_header_content()
    return out
