"""One C++ toolkit for kernel and host code (engine/source.py, engine/cpp.py): the host
codemods' scanner (codemods/layer_common.py) is the engine's lexer, bracket matcher and
declarator descent, so both sides read raw strings, comments and declarators alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from optrace.codemods.layer_common import mask_keep_includes, string_literals
from optrace.engine.cpp import CodeIndex, functions, mask, new_parser, parameter_name, parse_file
from optrace.engine.source import (
    DEFAULT_QUALIFIERS,
    SourceFile,
    blank_comments,
    blank_literals,
    match_bracket,
    normalise,
)

RAW = b'const char *s = R"x(a " // b )x"; // gone\nint f(int a) { return a; }\n'


def test_a_raw_string_is_a_string_on_both_sides() -> None:
    kernel = blank_comments(RAW)
    assert b'R"x(a " // b )x"' in kernel and b"gone" not in kernel and len(kernel) == len(RAW)
    host = mask(RAW)
    assert host == blank_literals(RAW) and b"//" not in host and len(host) == len(RAW)
    assert host[host.index(b"int f"):] == RAW[RAW.index(b"int f"):]  # the code after it is intact
    assert mask_keep_includes(RAW) == kernel
    # Only plain literals are schema / name strings; the raw string's `"` does not open one.
    assert string_literals(RAW, 0, len(RAW)) == []
    plain = b'm.def("op(Tensor x) -> Tensor"); // "not this"\n'
    assert [plain[s:e] for s, e in string_literals(plain, 0, len(plain))] == [b'"op(Tensor x) -> Tensor"']


@pytest.mark.parametrize(("code", "close"), [
    (b"f(a, (b), [c])", 13), (b"f(a, {b)", -1), (b"f(a", -1), (b"{ g(); }", 7),
])
def test_one_bracket_matcher(code: bytes, close: int) -> None:
    open_at = code.index(b"(") if code.startswith(b"f") else 0
    assert match_bracket(code, open_at) == close


def test_functions_returning_references_are_found_on_both_sides() -> None:
    code = b"struct S { int v; };\nS &pick(S &a) { return a; }\nint plain() { return 1; }\n"
    host = [f.name for f in functions(code)]
    assert host == ["pick", "plain"]
    src = SourceFile(Path("k.cpp"), code)
    src.text = normalise(code, DEFAULT_QUALIFIERS)
    index = CodeIndex()
    index.add_file(parse_file(new_parser(), src))
    assert {"pick", "plain"} <= set(index.by_name)


ONE_MODEL = b"""\
template <typename T>
__aicore__ inline int Scale(T *x, int n)
{
    return n * 2;
}
class Stage {
public:
    __aicore__ inline void Process(GM_ADDR a, const int &len) { Scale(a, len); }
};
extern "C" __global__ __aicore__ void one_model(GM_ADDR x, GM_ADDR workspace) { Stage s; }
"""


def test_kernel_and_host_functions_are_one_model(tmp_path: Path) -> None:
    """A kernel FunctionDef's `sig` is the CppFunction host code sees for that function:
    same name, offsets of its template, return type, parameters and body braces."""
    path = tmp_path / "k.cpp"
    path.write_bytes(ONE_MODEL)
    src = SourceFile(path, ONE_MODEL, normalise(ONE_MODEL, DEFAULT_QUALIFIERS))
    index = CodeIndex()
    index.add_file(parse_file(new_parser(), src))
    host = {f.name: f for f in functions(ONE_MODEL)}
    kernel = {f.name: f for f in index.functions.values()}
    assert set(kernel) == set(host) == {"Scale", "Process", "one_model"}
    for name, fn in kernel.items():
        assert fn.sig == host[name], name
    scale = kernel["Scale"].sig
    assert ONE_MODEL[scale.start:].startswith(b"template <typename T>")
    assert [ONE_MODEL[a:b] for a, b in kernel["Process"].sig.params] == [b"GM_ADDR a", b"const int &len"]
    assert [parameter_name(ONE_MODEL, p) for p in kernel["one_model"].parameter_nodes()] == ["x", "workspace"]
