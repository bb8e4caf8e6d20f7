"""The torch schema parser: torch's whole schema grammar, table-driven.

Each row is a schema written the way torch's schema documentation writes them (the
`func:` lines of native_functions.yaml and `torch.library` definitions): alias
annotations, optional and list types, keyword-only arguments, defaults of every kind,
overload names, tuple / single / named / empty returns. The table is ours; the grammar
is torch's.
"""

# ruff: noqa: E501  (one schema per row)

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from optrace.codemods.torch_schema import parse_schema, returns_list


@dataclass
class Row:
    schema: str
    name: str  # as written, overload included
    args: list[str]  # argument names, in order
    returns: list[str]  # each return as written
    kwarg_only: list[str] = field(default_factory=list)
    defaults: dict[str, str] = field(default_factory=dict)
    mutable: list[str] = field(default_factory=list)  # arguments written to (`!`)
    return_names: list[str | None] | None = None
    parenthesised: bool = False


ROWS = [
    Row("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
        "add.Tensor", ["self", "other", "alpha"], ["Tensor"], ["alpha"], {"alpha": "1"}),
    Row("add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
        "add.out", ["self", "other", "alpha", "out"], ["Tensor(a!)"], ["alpha", "out"], {"alpha": "1"}, ["out"]),
    Row("add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
        "add_.Tensor", ["self", "other", "alpha"], ["Tensor(a!)"], ["alpha"], {"alpha": "1"}, ["self"]),
    Row("view(Tensor(a) self, SymInt[] size) -> Tensor(a)", "view", ["self", "size"], ["Tensor(a)"]),
    Row("max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
        "max.dim", ["self", "dim", "keepdim"], ["Tensor values", "Tensor indices"], [], {"keepdim": "False"},
        return_names=["values", "indices"], parenthesised=True),
    Row("max.dim_max(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) max, Tensor(b!) max_values) -> (Tensor(a!) values, Tensor(b!) indices)",
        "max.dim_max", ["self", "dim", "keepdim", "max", "max_values"], ["Tensor(a!) values", "Tensor(b!) indices"],
        ["max", "max_values"], {"keepdim": "False"}, ["max", "max_values"], ["values", "indices"], True),
    Row("index.Tensor(Tensor self, Tensor?[] indices) -> Tensor", "index.Tensor", ["self", "indices"], ["Tensor"]),
    Row("cat(Tensor[] tensors, int dim=0) -> Tensor", "cat", ["tensors", "dim"], ["Tensor"], [], {"dim": "0"}),
    Row("empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
        "empty.memory_format", ["size", "dtype", "layout", "device", "pin_memory", "memory_format"], ["Tensor"],
        ["dtype", "layout", "device", "pin_memory", "memory_format"],
        {"dtype": "None", "layout": "None", "device": "None", "pin_memory": "None", "memory_format": "None"}),
    Row("to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=contiguous_format) -> Tensor(a)",
        "to.dtype", ["self", "dtype", "non_blocking", "copy", "memory_format"], ["Tensor(a)"], [],
        {"non_blocking": "False", "copy": "False", "memory_format": "contiguous_format"}),
    Row("scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor",
        "scatter_reduce.two", ["self", "dim", "index", "src", "reduce", "include_self"], ["Tensor"],
        ["include_self"], {"include_self": "True"}),
    Row("nll_loss(Tensor self, Tensor target, Tensor? weight=None, int reduction=Mean, SymInt ignore_index=-100) -> Tensor",
        "nll_loss", ["self", "target", "weight", "reduction", "ignore_index"], ["Tensor"], [],
        {"weight": "None", "reduction": "Mean", "ignore_index": "-100"}),
    Row("layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor",
        "layer_norm", ["input", "normalized_shape", "weight", "bias", "eps", "cudnn_enable"], ["Tensor"], [],
        {"weight": "None", "bias": "None", "eps": "1e-05", "cudnn_enable": "True"}),
    Row("split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
        "split.Tensor", ["self", "split_size", "dim"], ["Tensor(a)[]"], [], {"dim": "0"}),
    Row("_foreach_add_.List(Tensor(a!)[] self, Tensor[] other, *, Scalar alpha=1) -> ()",
        "_foreach_add_.List", ["self", "other", "alpha"], [], ["alpha"], {"alpha": "1"}, ["self"],
        parenthesised=True),
    Row("conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, SymInt[2] padding=0, SymInt[2] dilation=1, SymInt groups=1) -> Tensor",
        "conv2d", ["input", "weight", "bias", "stride", "padding", "dilation", "groups"], ["Tensor"], [],
        {"bias": "None", "stride": "1", "padding": "0", "dilation": "1", "groups": "1"}),
    Row("gelu(Tensor self, *, str approximate='none') -> Tensor", "gelu", ["self", "approximate"], ["Tensor"],
        ["approximate"], {"approximate": "'none'"}),
    Row('npu_ns::moe_gmm(Tensor! x, Tensor? bias=None, int[] dims=[0, 1], float scale=1.0, str mode="sum", ScalarType? dtype=None, Tensor?[] extras=[]) -> (Tensor, Tensor)',
        "npu_ns::moe_gmm", ["x", "bias", "dims", "scale", "mode", "dtype", "extras"], ["Tensor", "Tensor"], [],
        {"bias": "None", "dims": "[0, 1]", "scale": "1.0", "mode": '"sum"', "dtype": "None", "extras": "[]"}, ["x"],
        parenthesised=True),
    Row("sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
        "sum.dim_IntList", ["self", "dim", "keepdim", "dtype"], ["Tensor"], ["dtype"],
        {"keepdim": "False", "dtype": "None"}),
    Row("fused(Tensor x, Tensor(a!)? out, Dict(str, Tensor) extra, (int, int) pair, Tensor[](b!) bufs, Any tag) -> (Tensor, Tensor[])",
        "fused", ["x", "out", "extra", "pair", "bufs", "tag"], ["Tensor", "Tensor[]"], [], {}, ["out", "bufs"],
        parenthesised=True),
    Row("aminmax(Tensor self, *, int? dim=None, bool keepdim=False) -> (Tensor min, Tensor max)",
        "aminmax", ["self", "dim", "keepdim"], ["Tensor min", "Tensor max"], ["dim", "keepdim"],
        {"dim": "None", "keepdim": "False"}, return_names=["min", "max"], parenthesised=True),
    Row("clamp_bounds(Tensor x, float lo=-inf, float hi=inf, int[] shape = [2, 3]) -> Tensor",
        "clamp_bounds", ["x", "lo", "hi", "shape"], ["Tensor"], [], {"lo": "-inf", "hi": "inf", "shape": "[2, 3]"}),
    Row("reduce_to(Tensor x, int mode=at::Reduction::Mean) -> Tensor(a!) out", "reduce_to", ["x", "mode"],
        ["Tensor(a!) out"], [], {"mode": "at::Reduction::Mean"}, return_names=["out"]),
    Row("  aten::nothing ( ) -> ( )  ", "aten::nothing", [], [], parenthesised=True),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.schema.split("(")[0].strip() for r in ROWS])
def test_schema_grammar(row: Row) -> None:
    s = parse_schema(row.schema)
    assert s.name == row.name
    assert (f"{s.namespace}::" if s.namespace else "") + s.op + (f".{s.overload}" if s.overload else "") == row.name
    assert [a.name for a in s.arguments] == row.args
    assert [a.name for a in s.arguments if a.kwarg_only] == row.kwarg_only
    assert {a.name: a.default for a in s.arguments if a.default is not None} == row.defaults
    assert [a.name for a in s.arguments if a.type.mutable] == row.mutable
    assert list(s.returns) == row.returns
    assert s.parenthesised == row.parenthesised
    if row.return_names is not None:
        assert [r.name for r in s.return_values] == row.return_names
        assert s.named_returns
    else:
        assert not s.named_returns
    # The returns' offsets cover exactly what is written after `->`.
    assert row.schema[s.returns_start : s.returns_end] == row.schema.rsplit(") ->", 1)[1].strip()
    assert ("*" in s.args) == bool(row.kwarg_only)


def test_types_are_read_structurally() -> None:
    s = parse_schema("f(Tensor?[] a, Tensor(a!)[] b, int[2] c, SymInt[] d, ScalarType? e, Tensor! f) -> Tensor")
    a, b, c, d, e, f = (arg.type for arg in s.arguments)
    assert (a.base, a.optional, a.list_sizes, a.mutable) == ("Tensor", True, (None,), False)
    assert (b.base, b.alias, b.list_sizes, b.mutable) == ("Tensor", "a!", (None,), True)
    assert (c.base, c.list_sizes) == ("int", (2,))
    assert (d.base, d.is_list, d.is_tensor) == ("SymInt", True, False)
    assert (e.base, e.optional) == ("ScalarType", True)
    assert (f.alias, f.mutable) == ("!", True)


@pytest.mark.parametrize(("schema", "carries"), [
    ("f(Tensor x) -> Tensor[]", True),
    ("f(Tensor(a -> *) x) -> Tensor(a)[]", True),
    ("f(Tensor x) -> (Tensor[])", False),  # a tuple of one list: grows like any tuple
    ("f(Tensor x) -> int[]", False),
    ("f(Tensor x) -> Tensor", False),
])
def test_a_tensor_list_return_carries_the_buffer(schema: str, carries: bool) -> None:
    assert returns_list(parse_schema(schema)) is carries


@pytest.mark.parametrize(("schema", "why"), [
    ("demo_op(Tensor x, int) -> Tensor", "needs a name"),
    ("demo_op(Tensor x", "closing the arguments"),
    ("demo_op(Tensor x) Tensor", "before the returns"),
    ("demo_op(Tensor x) -> (Tensor,)", "a return after `,`"),
    ("demo_op(Tensor x,) -> Tensor", "an argument after `,`"),
    ("(Tensor x) -> Tensor", "the operator name"),
    ("demo_op(Tensor(a! x) -> Tensor", "closing the alias annotation"),
    ("demo_op(Tensor x=) -> Tensor", "a default value"),
    ("demo_op(Tensor x) -> Tensor out extra", "the end of the schema"),
    ("demo_op(Tensor x, *, *, int k) -> Tensor", "a second `*`"),
    ("demo_op(Tensor[ x) -> Tensor", "closing the list type"),
    ('demo_op(str s="open) -> Tensor', "unexpected `\"`"),
    ("demo_op(Tensor x) -> (Tensor", "closing the returns"),
    ("demo_op(Tensor x, int[] k=[1, 2) -> Tensor", "closing the default value"),
    ("demo_op.(Tensor x) -> Tensor", "an overload name"),
    ("demo_op(Tensor x) ->", "a type"),
])
def test_what_does_not_parse_says_why(schema: str, why: str) -> None:
    with pytest.raises(ValueError, match="column") as caught:
        parse_schema(schema)
    assert why in str(caught.value)
