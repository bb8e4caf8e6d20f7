"""The layers of an operator, in the order the data flows from the kernel to Python.

Each layer is one module of this package holding one class with the whole contract
(`codemods.layer.Layer`): its files (`find`), their reading (`read`), its codemod
(`edits`) and its gate evidence (`verify`), with `EXAMPLES` run as tests. Adding a layer
is its module, one line here and its row in docs/layers.md.

The order matters twice: apply runs the host layers' codemods in it, and `check` verifies
them in it, each layer's `verify` using what the ones before it learnt (`Facts`).
"""

from __future__ import annotations

from optrace.codemods.aclnn import AclnnLayer
from optrace.codemods.autograd_wrappers import AutogradWrappersLayer
from optrace.codemods.build_hook import BuildHookLayer
from optrace.codemods.cpp_callers import CppCallersLayer
from optrace.codemods.graph_converters import GraphConvertersLayer
from optrace.codemods.infer import InferLayer
from optrace.codemods.kernel_entry import EntryLayer
from optrace.codemods.l0op import L0opLayer
from optrace.codemods.layer import Layer
from optrace.codemods.op_def import OpDefLayer
from optrace.codemods.python_callers import PythonCallersLayer
from optrace.codemods.python_fakes import PythonFakesLayer
from optrace.codemods.registration import RegistrationLayer
from optrace.codemods.runtime_block import BaseHeaderLayer
from optrace.codemods.tiling import TilingLayer
from optrace.codemods.torch_adapter import TorchAdapterLayer

# The kernel side: apply edits these on the current bytes, the points being planned
# against the tree as it is.
KERNEL_LAYERS: tuple[Layer, ...] = (
    EntryLayer(),
    BaseHeaderLayer(),
)
# The host layers: apply edits these on the clean bytes (strip's view of each file).
HOST_LAYERS: tuple[Layer, ...] = (
    OpDefLayer(),
    InferLayer(),
    TilingLayer(),
    L0opLayer(),
    AclnnLayer(),
    CppCallersLayer(),
    TorchAdapterLayer(),
    RegistrationLayer(),
    AutogradWrappersLayer(),
    BuildHookLayer(),
    PythonCallersLayer(),
    PythonFakesLayer(),
    GraphConvertersLayer(),
)
LAYERS: tuple[Layer, ...] = (*KERNEL_LAYERS, *HOST_LAYERS)


def layer(name: str) -> Layer:
    """The registered layer called `name` (its NAME); KeyError when there is none."""
    for lay in LAYERS:
        if lay.NAME == name:
            return lay
    raise KeyError(name)
