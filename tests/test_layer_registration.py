"""Registration codemod: the schema gains one return in mode B; declarations follow."""

# ruff: noqa: E501  (inline before / after snippets are verbatim code)

from __future__ import annotations

from pathlib import Path

import pytest
from layer_snippets import make_repo, run

from optrace.codemods.registration import parse_schema, registration_edits
from optrace.codemods.strip import strip_bytes
from optrace.engine.diagnostics import InputError

ADAPTER = ("torch/demo_op.cpp",
           '#include "functions.h"\nstd::tuple<at::Tensor, at::Tensor> demo_op_impl(const at::Tensor &x)\n{\n'
           "    EXEC_NPU_CMD(aclnnDemoOp, x, x, x);\n    return {x, x};\n}\n")
FUNCS = ("torch/functions.h",
         "#pragma once\nstd::tuple<at::Tensor, at::Tensor> demo_op_impl(const at::Tensor &x);\n"
         "std::tuple<at::Tensor, at::Tensor> other_op_impl(const at::Tensor &x);\n")
REG = "torch/pybind.cpp"

BEFORE = """\
#include "functions.h"
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("demo_op", &demo_op_impl, "demo_op doc");
}
TORCH_LIBRARY(my_lib, m)
{
    m.def("demo_op(Tensor x, int k=0) "
          "-> (Tensor, Tensor)");
    m.def("other_op(Tensor x) -> (Tensor, Tensor)");
}
"""

AFTER = """\
#include "functions.h"
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("demo_op", &demo_op_impl, "demo_op doc");
}
TORCH_LIBRARY(my_lib, m)
{
    m.def("demo_op(Tensor x, int k=0) "
          "-> (Tensor, Tensor"/*optrace-str<*/", Tensor"/*>optrace-str*/")");
    m.def("other_op(Tensor x) -> (Tensor, Tensor)");
}
"""


def test_schema_and_declarations_grow_by_one_tensor(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {REG: BEFORE, ADAPTER[0]: ADAPTER[1], FUNCS[0]: FUNCS[1]})
    assert run(registration_edits, op, "B") == {
        REG: AFTER,
        FUNCS[0]: FUNCS[1].replace("std::tuple<at::Tensor, at::Tensor> demo_op_impl",
                                   "std::tuple<at::Tensor, at::Tensor/*optrace<*/, at::Tensor/*>optrace*/> demo_op_impl"),
    }


def test_the_spliced_schema_compiles_to_the_grown_string() -> None:
    # Adjacent literals concatenate: the splice is `"...Tensor" ", Tensor" ")"`.
    line = b'"-> (Tensor, Tensor"/*optrace-str<*/", Tensor"/*>optrace-str*/")"'
    pieces = [p for p in line.replace(b"/*optrace-str<*/", b"").replace(b"/*>optrace-str*/", b"").split(b'"') if p]
    assert b"".join(pieces) == b"-> (Tensor, Tensor, Tensor)"
    assert strip_bytes(line) == b'"-> (Tensor, Tensor)"'


def test_mode_a_keeps_the_arity(tmp_path: Path) -> None:
    op = make_repo(tmp_path, {REG: BEFORE, ADAPTER[0]: ADAPTER[1], FUNCS[0]: FUNCS[1]})
    assert run(registration_edits, op, "A") == {}


@pytest.mark.parametrize(("returns", "after"), [
    ("Tensor", '"demo_op(Tensor x) -> "/*optrace-str<*/"("/*>optrace-str*/"Tensor"/*optrace-str<*/", Tensor)"/*>optrace-str*/""'),
    ("()", '"demo_op(Tensor x) -> ("/*optrace-str<*/"Tensor"/*>optrace-str*/")"'),
    ("Tensor[]", '"demo_op(Tensor x) -> Tensor[]"'),
])
def test_single_empty_and_list_returns(tmp_path: Path, returns: str, after: str) -> None:
    text = f'TORCH_LIBRARY_FRAGMENT(_C, ops)\n{{\n    ops.def("demo_op(Tensor x) -> {returns}");\n}}\n'
    op = make_repo(tmp_path, {REG: text})
    got = run(registration_edits, op, "B")
    if returns == "Tensor[]":
        assert got == {}
    else:
        assert got[REG] == text.replace(f'"demo_op(Tensor x) -> {returns}"', after)


def test_a_schema_that_does_not_parse_is_bad_input(tmp_path: Path) -> None:
    text = 'TORCH_LIBRARY(my_lib, m)\n{\n    m.def("demo_op(Tensor x, int) -> Tensor");\n}\n'
    op = make_repo(tmp_path, {REG: text})
    for mode in ("A", "B"):
        with pytest.raises(InputError) as caught:
            run(registration_edits, op, mode)
        assert caught.value.diagnostic.code == "OT311" and caught.value.diagnostic.line == 3


def test_schema_parser() -> None:
    s = parse_schema("ns::demo_op.out(Tensor(a!) x, Tensor[] w, Tensor? b=None, *, str g, int k=0) -> (Tensor(a!), Tensor)")
    assert s.name == "ns::demo_op.out" and len(s.args) == 6 and s.returns == ("Tensor(a!)", "Tensor")
    for bad in ("demo_op(Tensor x", "demo_op(Tensor x) Tensor", "demo_op(Tensor x) -> (Tensor,)", "(Tensor x) -> Tensor"):
        with pytest.raises(ValueError):
            parse_schema(bad)


@pytest.mark.parametrize(("schema", "after"), [
    # What apply refused before (exit 2): `Tensor!`, `Tensor?[]`, defaults of every kind.
    ('demo_op(Tensor! out, Tensor?[] extras, int[] dims=[0, 1], str mode=\\"sum\\", *, ScalarType? dtype=None) -> (Tensor, Tensor)',
     '"demo_op(Tensor! out, Tensor?[] extras, int[] dims=[0, 1], str mode=\\"sum\\", *, ScalarType? dtype=None) -> (Tensor, Tensor"/*optrace-str<*/", Tensor"/*>optrace-str*/")"'),
    # Named returns name the new one.
    ("demo_op.out(Tensor x, *, Tensor(a!) out) -> (Tensor(a!) values, Tensor indices)",
     '"demo_op.out(Tensor x, *, Tensor(a!) out) -> (Tensor(a!) values, Tensor indices"/*optrace-str<*/", Tensor profiling_data"/*>optrace-str*/")"'),
    ("demo_op.inplace(Tensor(a!) self) -> Tensor(a!) result",
     '"demo_op.inplace(Tensor(a!) self) -> "/*optrace-str<*/"("/*>optrace-str*/"Tensor(a!) result"/*optrace-str<*/", Tensor profiling_data)"/*>optrace-str*/""'),
    ("demo_op(Tensor(a -> *) self) -> Tensor(a)[]", None),
])
def test_the_whole_schema_grammar_is_edited(tmp_path: Path, schema: str, after: str | None) -> None:
    text = f'TORCH_LIBRARY(my_lib, m)\n{{\n    m.def("{schema}");\n}}\n'
    op = make_repo(tmp_path, {REG: text})
    got = run(registration_edits, op, "B")
    if after is None:
        assert got == {}
    else:
        assert got == {REG: text.replace(f'"{schema}"', after)}


def test_schema_wrappers_and_escapes(tmp_path: Path) -> None:
    text = ('TORCH_LIBRARY_FRAGMENT(my_lib, m)\n{\n'
            '    m.def(TORCH_SELECTIVE_SCHEMA("my_lib::demo_op(Tensor x, str mode=\\"a,b)\\") -> Tensor"));\n}\n')
    op = make_repo(tmp_path, {REG: text})
    assert run(registration_edits, op, "B")[REG] == text.replace(
        '"my_lib::demo_op(Tensor x, str mode=\\"a,b)\\") -> Tensor"',
        '"my_lib::demo_op(Tensor x, str mode=\\"a,b)\\") -> "/*optrace-str<*/"("/*>optrace-str*/"Tensor"'
        '/*optrace-str<*/", Tensor)"/*>optrace-str*/""')


def test_a_schema_spelling_the_op_otherwise_is_the_ops(tmp_path: Path) -> None:
    text = 'TORCH_LIBRARY(my_lib, m)\n{\n    m.def("DemoOP(Tensor x) -> (Tensor, Tensor)");\n}\n'
    op = make_repo(tmp_path, {REG: text})
    assert '"DemoOP(Tensor x) -> (Tensor, Tensor"/*optrace-str<*/", Tensor"/*>optrace-str*/")"' in \
        run(registration_edits, op, "B")[REG]
