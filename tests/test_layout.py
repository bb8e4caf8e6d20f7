"""engine/layout.py: inserted C++ laid out at the review width without changing a token."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from optrace.engine.layout import statements, wrap_line

_WORDS = st.sampled_from([b"a", b"ctx", b"x->Get(i)", b"Foo(a, b)", b"\"s, t = u\"", b"'c'", b"v[k, j]",
                          b"this->Output(\"p\")", b"{1, 2}"])


@st.composite
def _lines(draw: st.DrawFn) -> bytes:
    parts = draw(st.lists(_WORDS, min_size=1, max_size=14))
    joins = draw(st.lists(st.sampled_from([b" = ", b".Set(", b", ", b"->Go(", b" + "]), min_size=len(parts),
                          max_size=len(parts)))
    text = b"".join(p + j for p, j in zip(parts, joins, strict=True))
    return b" " * draw(st.integers(0, 12)) + text + b")" * text.count(b"(") + b";"


def _tokens(text: bytes) -> bytes:
    return re.sub(rb"\s+", b"", text)


@settings(max_examples=300, deadline=None)
@given(_lines(), st.integers(30, 120))
def test_a_wrapped_line_keeps_every_token_and_literal(line: bytes, width: int) -> None:
    pieces = wrap_line(line, width)
    assert _tokens(b"".join(pieces)) == _tokens(line)
    for literal in re.findall(rb'"[^"]*"', line):
        assert any(literal in piece for piece in pieces)  # never split
    assert pieces[0].startswith(line[: len(line) - len(line.lstrip())])
    if len(pieces) > 1:
        assert all(len(p) <= width for p in pieces[:-1])


def test_breaks_go_where_a_reviewer_expects_them() -> None:
    assign = b"    const Desc *desc = context->GetOutputDesc(index);"
    assert wrap_line(assign, 30) == [b"    const Desc *desc =", b"            context->GetOutputDesc(index);"]
    chain = b"    this->Output(\"p\").ParamType(REQUIRED).DataType({ge::DT_INT64});"
    assert wrap_line(chain, 50) == [b"    this->Output(\"p\").ParamType(REQUIRED)",
                                    b"            .DataType({ge::DT_INT64});"]
    assert wrap_line(b"    short(a, b);", 120) == [b"    short(a, b);"]
    assert wrap_line(b"    Call(a, b); // note, about it", 10) == [b"    Call(a, b); // note, about it"]


def test_statements_of_a_fragment_a_line_each() -> None:
    body = b"int i = 0; if (p != nullptr) { p->Set(1, 2); while (k) { --k; } } f(\"{;}\"); "
    assert statements(body) == [(0, b"int i = 0;"), (0, b"if (p != nullptr) {"), (1, b"p->Set(1, 2);"),
                                (1, b"while (k) {"), (2, b"--k;"), (1, b"}"), (0, b"}"), (0, b"f(\"{;}\");")]
    for no in (b", profilingData", b"x + 1", b"a; b", b"}", b"{ a;", b"a; /* c */ b;", b"f(\"open);", b"  "):
        assert statements(no) is None, no
