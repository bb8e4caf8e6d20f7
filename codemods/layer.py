"""The layer contract: what every layer of an operator is, and what its verify returns.

A layer has one shape, `Layer`: a NAME and a DESCRIPTION; `find` — its files
(from discovery and the codemod's own search); `read` — the files as they are, for
`verify`; `edits` — what apply changes in it (the codemod's edits of the clean bytes);
`verify` — the gate facts it proves, as `file:line` evidence; `carries` — whether a mode
can go through it and which files that mode's edits touch, without the edits where they
cost (plan's mode probe). Layers verify in the
registry's order and hand what they learnt (the OpDef's index of profiling_data, the
number of tensors the adapter returns, ...) to the later ones through `Facts`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Generic, Protocol, TypeVar

from optrace.codemods.evidence import Evidence as Evidence  # the layers name it from here
from optrace.engine.analysis import Analysis
from optrace.engine.discovery import LayerFile, Layers, SearchContext
from optrace.engine.edits import Edit, resolve
from optrace.engine.plan import Plan
from optrace.engine.source import read_regular


@dataclass
class Facts:
    """What earlier layers' verify learnt, for the later ones (registry order)."""

    kernel_position: int | None = None  # of profiling_data among the entry's parameters
    output_index: int | None = None  # of profiling_data among the OpDef's outputs
    adapter_returns: int | None = None  # tensors the launcher returns (a fixed-size tuple)
    schema_returns: int | None = None  # returns of the op's schema


@dataclass(frozen=True)
class Carry:
    """What a mode does to one layer, as `carries` answers it: the files its edits would
    change (resolved), and whether they use the op's sizes header (created if missing)."""

    edited: frozenset[Path] = frozenset()
    sizes_header: bool = False


def carry_of(edits: list[Edit]) -> Carry:
    """The `Carry` of computed edits."""
    return Carry(frozenset(resolve(e.path) for e in edits),
                 any(e.replacement.find(SIZES_MACRO) >= 0 for e in edits))


class Located(Protocol):
    """One edit (or a few, of one file) a layer's codemod will make, found and not written
    yet (`LocatingLayer.locate`): its file, and whether its text names the sizes macro."""

    @property
    def path(self) -> Path: ...

    @property
    def sizes(self) -> bool: ...


def carry_of_located(located: Iterable[Located]) -> Carry:
    """The `Carry` of located edits: what `carry_of` gives once they are rendered."""
    found = list(located)
    return Carry(frozenset(resolve(t.path) for t in found), any(t.sizes for t in found))


# What an edit names when it needs the op's sizes header (`OPTRACE_PROFILING_NUMEL`, the
# Python fakes' `_OPTRACE_PROFILING_NUMEL` included).
SIZES_MACRO = b"OPTRACE_PROFILING_NUMEL"


@dataclass
class Operator:
    """One instrumented operator as `check` reads it: its analysis and recorded mode."""

    analysis: Analysis
    mode: str
    facts: Facts = field(default_factory=Facts)

    @property
    def layers(self) -> Layers:
        return self.analysis.layers


@dataclass
class LayerModel:
    """A layer's files as read: their bytes, and why any could not be read."""

    layer: str
    op: Operator
    files: list[Path]
    data: dict[Path, bytes] = field(default_factory=dict)
    unreadable: list[Evidence] = field(default_factory=list)


def read_files(name: str, op: Operator, files: list[Path]) -> LayerModel:
    """The default `read`: every file's bytes; a file that cannot be read is a failing
    fact of its own, never skipped."""
    model = LayerModel(name, op, list(files))
    for path in files:
        try:
            model.data[path] = read_regular(path)
        except OSError as exc:
            model.unreadable.append(Evidence(path, 0, f"{name}: cannot read: {exc.strerror or exc}", False))
    return model


# The operator every layer example starts from: a kernel with one class and an OpDef, in a
# repository of its own (`demo_op/`). An example adds the files its layer needs.
EXAMPLE_KERNEL = """\
#include "kernel_operator.h"

class KernelDemo {
public:
    __aicore__ inline void Init(GM_ADDR x, GM_ADDR y, int32_t experts)
    {
        xGm.SetGlobalBuffer((__gm__ float*)x);
        yGm.SetGlobalBuffer((__gm__ float*)y);
        expertNum = experts;
    }
    __aicore__ inline void Process()
    {
        for (int32_t expertIdx = 0; expertIdx < expertNum; ++expertIdx) {
            CopyIn(expertIdx);
            Compute();
            CopyOut(expertIdx);
        }
        AscendC::SyncAll();
    }

private:
    __aicore__ inline void CopyIn(int32_t e) { AscendC::DataCopy(xLocal, xGm[e * 256], 256); }
    __aicore__ inline void Compute() { AscendC::Exp(yLocal, xLocal, 256); }
    __aicore__ inline void CopyOut(int32_t e) { AscendC::DataCopy(yGm[e * 256], yLocal, 256); }

    AscendC::GlobalTensor<float> xGm, yGm;
    AscendC::LocalTensor<float> xLocal, yLocal;
    int32_t expertNum = 0;
};

extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)
{
    KernelDemo op;
    op.Init(x, y, 8);
    op.Process();
}
"""
EXAMPLE_OPDEF = """\
#include "register/op_def_registry.h"

namespace ops {
class DemoOp : public OpDef {
public:
    explicit DemoOp(const char* name) : OpDef(name)
    {
        this->Input("x").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
        this->Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});
    }
};
OP_ADD(DemoOp);
}  // namespace ops
"""
# A torch binding of the example operator: the adapter launching it, the header declaring
# the adapter, the schema's registration (the Python layers' examples need all three).
EXAMPLE_ADAPTER = """\
#include <torch/extension.h>
#include "aclnn_demo_op.h"
#include "functions.h"

at::Tensor demo_op(const at::Tensor &x)
{
    at::Tensor y = at::empty_like(x);
    EXEC_NPU_CMD(aclnnDemoOp, x, y);
    return y;
}
"""
EXAMPLE_TORCH: Mapping[str, str] = {
    "csrc/demo_op_adapter.cpp": EXAMPLE_ADAPTER,
    "csrc/functions.h": """\
#pragma once
#include <torch/extension.h>

at::Tensor demo_op(const at::Tensor &x);
""",
    "csrc/registration.cpp": """\
#include <torch/library.h>
#include "functions.h"

TORCH_LIBRARY(demo_lib, m)
{
    m.def("demo_op(Tensor x) -> Tensor");
}

TORCH_LIBRARY_IMPL(demo_lib, PrivateUse1, m)
{
    m.impl("demo_op", &demo_op);
}
""",
}
# Its infer shape / dtype (an OpDef's required outputs are sized there: without one, mode
# B is refused).
EXAMPLE_INFER = """\
#include "register/op_impl_registry.h"

namespace ops {
static ge::graphStatus InferShapeDemoOp(gert::InferShapeContext* context)
{
    const gert::Shape* xShape = context->GetInputShape(0);
    gert::Shape* yShape = context->GetOutputShape(0);
    *yShape = *xShape;
    return ge::GRAPH_SUCCESS;
}

static ge::graphStatus InferDataTypeDemoOp(gert::InferDataTypeContext* context)
{
    context->SetOutputDataType(0, context->GetInputDataType(0));
    return ge::GRAPH_SUCCESS;
}

IMPL_OP_INFERSHAPE(DemoOp).InferShape(InferShapeDemoOp).InferDataType(InferDataTypeDemoOp);
}  // namespace ops
"""
EXAMPLE_OPERATOR: Mapping[str, str] = {
    "demo_op/op_kernel/demo_op.cpp": EXAMPLE_KERNEL,
    "demo_op/op_host/demo_op_def.cpp": EXAMPLE_OPDEF,
    "demo_op/op_host/demo_op_infershape.cpp": EXAMPLE_INFER,
}


@dataclass(frozen=True)
class LayerExample:
    """What a layer's codemod does, shown on the example operator and run as a test.

    `files` are added to `EXAMPLE_OPERATOR` (or replace its files); `path` is the layer's
    file among them. Apply in `mode` turns each `before` snippet of that file into its
    `after` (the rest of the file unchanged); an `after` line that is only `...` stands
    for any lines (a long generated block). Strip then gives every file back.
    """

    path: str
    changes: tuple[tuple[str, str], ...]
    files: Mapping[str, str] = field(default_factory=dict)
    mode: str = "B"


class Layer(Protocol):
    """One layer of an operator (kernel entry, OpDef, aclnn wrapper, torch adapter, ...)."""

    NAME: ClassVar[str]  # the discovery key where discovery has one (`torch_adapter`)
    DESCRIPTION: ClassVar[str]
    # The gate its verify speaks for ("G1", "G2", "G4/G5"): a layer the operator has and
    # whose verify read nothing fails that gate (OT452 for G2), it never passes unread.
    GATE: ClassVar[str]
    # Only in mode B does the buffer reach it (Python fakes, converters, the schema).
    MODE_B_ONLY: ClassVar[bool]
    EXAMPLES: ClassVar[tuple[LayerExample, ...]]  # run as tests (pipeline/layer_examples.py)
    FOUND_KEY: ClassVar[str | None]  # discovery's key for its files (engine.discovery.LayerSearch)
    TITLE: ClassVar[str]
    OPTIONAL: ClassVar[bool]

    def search(self, ctx: SearchContext) -> list[LayerFile]: ...

    def find(self, layers: Layers) -> list[Path]: ...

    def read(self, op: Operator, files: list[Path]) -> LayerModel: ...

    # The layer's codemod. Codemods read their files' clean bytes themselves (strip's view),
    # so apply passes no model; `check` never edits.
    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]: ...

    def verify(self, model: LayerModel) -> list[Evidence]: ...

    # What the gate says of an operator without this layer's files: None (nothing: the
    # layer is not the operator's), or a failing fact when the mode needs the layer.
    def absent(self, op: Operator) -> list[Evidence] | None: ...

    # Whether `mode` goes through this layer (InputError as `edits` raises it, the same
    # diagnostic) and what it edits: plan's mode probe. Equal to `carry_of(edits(...))`,
    # answered without writing the edits: a byte-level layer from its `locate`
    # (`LocatingLayer`), a Python layer from the standard `ast` where it can.
    def carries(self, plan: Plan, mode: str) -> Carry: ...

    # The files outside the kernel directory that are this operator's to rewrite from clean
    # bytes and to strip (resolved): apply rebuilds them, strip visits them.
    def owned(self, plan: Plan) -> set[Path]: ...


class FileLayer:
    """What most layers share: `read` gives the files' bytes; G2, edited in both modes.
    A layer sets NAME and DESCRIPTION and writes find, edits and verify."""

    NAME: ClassVar[str]
    DESCRIPTION: ClassVar[str]
    GATE: ClassVar[str] = "G2"
    MODE_B_ONLY: ClassVar[bool] = False
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = ()
    # Discovery: the key its files are found under (None: found through other layers'),
    # the title plan shows, and whether an operator may lack the layer.
    FOUND_KEY: ClassVar[str | None] = None
    TITLE: ClassVar[str] = ""
    OPTIONAL: ClassVar[bool] = False

    def search(self, ctx: SearchContext) -> list[LayerFile]:
        """The layer's files, discovery's part (a layer with a FOUND_KEY writes its own)."""
        del ctx
        return []

    def read(self, op: Operator, files: list[Path]) -> LayerModel:
        return read_files(self.NAME, op, files)

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        raise NotImplementedError(f"layer {self.NAME} has no edits")

    def carries(self, plan: Plan, mode: str) -> Carry:
        """The layer's edits computed (the kernel layers, which plan's probe does not ask;
        the host layers locate, `LocatingLayer`, or read their Python files with `ast`)."""
        return carry_of(self.edits(plan, mode, None))

    def owned(self, plan: Plan) -> set[Path]:
        """Every file `find` gives outside the kernel directory."""
        layers = plan.analysis.layers
        kernel_dir = layers.kernel_dir
        return {resolve(path) for path in self.find(layers)
                if kernel_dir is None or kernel_dir not in path.parents}

    def find(self, layers: Layers) -> list[Path]:
        raise NotImplementedError(f"layer {self.NAME} has no find")

    def absent(self, op: Operator) -> list[Evidence] | None:
        """Nothing: an operator without the layer's files does not have the layer."""
        del op
        return None


L = TypeVar("L", bound=Located)


class LocatingLayer(FileLayer, Generic[L]):
    """A layer whose codemod is two steps. `locate` finds what the mode edits — the
    anchors, read from the clean bytes, and every check that refuses the mode (the
    InputError `edits` raises) — and `render` writes those edits' text from what it found,
    refusing nothing. `edits` is `render(locate())`; `carries` is answered from `locate`
    alone, so plan's mode probe writes no edit text (issue #30). Each located item renders
    to at least one edit, all in its `path`, naming the sizes macro exactly when its
    `sizes` says so: `carries` equals `carry_of(edits)` (tests/test_mode_probe.py checks
    it per layer on every fixture)."""

    def locate(self, plan: Plan, mode: str) -> Sequence[L]:
        raise NotImplementedError(f"layer {self.NAME} locates nothing")

    def render(self, plan: Plan, mode: str, located: Sequence[L]) -> list[Edit]:
        raise NotImplementedError(f"layer {self.NAME} renders nothing")

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        del model
        return self.render(plan, mode, self.locate(plan, mode))

    def carries(self, plan: Plan, mode: str) -> Carry:
        """What `locate` found: no edit rendered."""
        return carry_of_located(self.locate(plan, mode))


def read_or_empty(path: Path) -> bytes:
    """A file the gates look at beside a layer's own (a build script, a file naming a near
    op name): its bytes, or nothing when it cannot be read."""
    try:
        return read_regular(path)
    except OSError:
        return b""


def line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def output_ordinal(index: int | None) -> str:
    """An output as evidence names it: counted from 1, as `output 3 of 3` is, with the
    index the C++ code uses (`GetOutputShape(2)`) beside it."""
    if index is None:  # an index expression the reader could not evaluate
        return "an output whose index is not a constant"
    return f"output {index + 1} (index {index})"


def not_compared(path: Path, what: str) -> Evidence:
    # Without the OpDef's index there is nothing to compare this layer with: not a pass.
    return Evidence(path, 1, f"{what}: not compared, the OpDef gives no index for profiling_data", False)
