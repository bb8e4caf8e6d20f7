from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from optrace.engine.analysis import _DEFINE_RE, _OBJECT_DEFINE_RE
from optrace.engine.cpp import CodeIndex, new_parser, parse_file
from optrace.engine.includes import _INCLUDE_RE
from optrace.engine.source import _DEFINE_RE as NORMALISE_DEFINE_RE
from optrace.engine.source import (
    DEFAULT_QUALIFIERS,
    SourceFile,
    blank_comments,
    blank_if0,
    decode,
    directive_matches,
    normalise,
    qualifier_macros,
)


def test_normalise_keeps_length_and_offsets() -> None:
    src = b"extern \"C\" __global__ __aicore__ void k(__gm__ uint8_t* x) {}\n"
    out = normalise(src, DEFAULT_QUALIFIERS)
    assert len(out) == len(src)
    assert b"__global__" not in out and out.index(b"void") == src.index(b"void")


def test_operator_specialisation_becomes_same_length_identifier() -> None:
    src = b"template <> inline void operator()<AscendC::AIC>(Params const &p) {}"
    out = normalise(src, ())
    assert len(out) == len(src)
    assert b"operator___AscendC__AIC_" in out


def test_ascend_is_macro_gets_parentheses() -> None:
    src = b"if ASCEND_IS_AIV { Foo(); }"
    out = normalise(src, ())
    assert out == b"if (ASCENDISAIV) { Foo(); }"


def test_blank_comments_keeps_strings_and_newlines() -> None:
    src = b'a = "// not a comment"; // yes\n/* x\ny */ b;\n'
    out = blank_comments(src)
    assert b'"// not a comment"' in out
    assert b"yes" not in out and out.count(b"\n") == src.count(b"\n") and len(out) == len(src)


def test_if0_blocks_are_dead_and_if1_else_is_dead() -> None:
    src = b"#if 0\n#include \"a.h\"\n#endif\n#if 1\nkeep;\n#else\ndrop;\n#endif\n"
    out = blank_if0(src)
    assert b"a.h" not in out and b"keep" in out and b"drop" not in out


def _directives(text: bytes) -> list[bytes]:
    return [line.strip().split()[0] for line in text.splitlines() if line.strip().startswith(b"#")]


@pytest.mark.parametrize("src, kept, gone", [
    # `#if 0` / `#else`: its `#endif` goes with the `#if 0` (kept alone it is unmatched)
    (b"#if 0\nx;\n#else\ny;\n#endif\n", [b"y;"], [b"x;", b"#endif"]),
    # `#if 1` / `#else`: the `#if 1` goes with its dead `#else` arm and `#endif`
    (b"#if 1\ny;\n#else\nx;\n#endif\nz;\n", [b"y;", b"z;"], [b"x;", b"#if"]),
    # nested live conditionals with empty dead arms
    (b"#if 1\na;\n#if 1\nb;\n#else\n#endif\nc;\n#else\n#endif\nd;\n", [b"a;", b"b;", b"c;", b"d;"], [b"#"]),
    # `#elif X` after a dead `#if 0` is where the build's conditional starts
    (b"#if 0\nx;\n#elif FOO\ny;\n#else\nz;\n#endif\n", [b"#if   FOO", b"y;", b"z;", b"#endif"], [b"x;"]),
    (b"#if 0\nx;\n#elif 1\ny;\n#else\nz;\n#endif\n", [b"y;"], [b"x;", b"z;", b"#"]),
    # an undecided conditional keeps every directive
    (b"#ifdef FOO\nx;\n#else\ny;\n#endif\n", [b"#ifdef FOO", b"#else", b"#endif", b"x;", b"y;"], []),
])
def test_decided_conditionals_leave_matched_directives(src: bytes, kept: list[bytes],
                                                       gone: list[bytes]) -> None:
    """What survives blanking parses as C++: every kept `#if` has its kept `#endif`."""
    out = blank_if0(src)
    assert len(out) == len(src)
    for text in kept:
        assert text in out
    for text in gone:
        assert text not in out
    depth = 0
    for directive in _directives(out):
        depth += directive.startswith(b"#if") - (directive == b"#endif")
        assert depth >= 0
    assert depth == 0


def test_qualifier_macros_detected() -> None:
    src = b"#define CATLASS_DEVICE __aicore__ inline\n#define N 4\n"
    assert qualifier_macros(src, DEFAULT_QUALIFIERS) == {"CATLASS_DEVICE"}


def test_gbk_comment_decodes_and_crlf_lines() -> None:
    raw = "// 发送\r\nint x;\r\n".encode("gbk")
    sf = SourceFile(path=__import__("pathlib").Path("x.h"), raw=raw)
    assert sf.newline == b"\r\n"
    assert sf.line_of(raw.index(b"int")) == 2
    assert "发送" in decode(raw)


@given(st.binary(max_size=400))
def test_normalise_never_changes_length(data: bytes) -> None:
    assert len(normalise(data, DEFAULT_QUALIFIERS)) == len(data)
    assert len(blank_comments(data)) == len(data)
    assert len(blank_if0(data)) == len(data)


def test_directive_lines_are_not_blanked() -> None:
    src = (b"#ifndef CATLASS_DEVICE\n#define CATLASS_DEVICE __aicore__ inline\n#endif\n"
           b"CATLASS_DEVICE void f();\n")
    out = normalise(src, (*DEFAULT_QUALIFIERS, "CATLASS_DEVICE"))
    assert out.startswith(b"#ifndef CATLASS_DEVICE\n#define CATLASS_DEVICE __aicore__ inline\n")
    assert out.endswith(b"               void f();\n")


def test_only_lines_starting_with_a_directive_keep_their_qualifiers() -> None:
    """Indented directives and CRLF lines are directives; a qualifier on a line that has a
    `#` further on (a stringised macro argument) is blanked like any other."""
    src = (b"  #  if defined(__aicore__)\r\n\t#define Q __aicore__\r\n#endif\r\n"
           b"__aicore__ void f() { S(#x); }  __aicore__ \r\n")
    out = normalise(src, DEFAULT_QUALIFIERS)
    lines = out.split(b"\r\n")
    assert lines[:3] == [b"  #  if defined(__aicore__)", b"\t#define Q __aicore__", b"#endif"]
    assert lines[3] == b"           void f() { S(#x); }             "


def test_directive_matches_are_what_finditer_finds() -> None:
    """`directive_matches` tries a `^[ \\t]*#` pattern only at lines starting with `#`:
    the same matches as finditer, on directives with continuation lines, two `#` on a
    line, CRLF, a `#` in a comment or mid-line, and random mixtures of them."""
    patterns = [_INCLUDE_RE, _DEFINE_RE, _OBJECT_DEFINE_RE, NORMALISE_DEFINE_RE]
    pieces = [b"#", b" ", b"\t", b"\n", b"\r\n", b"define", b"include", b"X", b"(", b")", b"\\",
              b"\\\n", b'"a.h"', b"<b.h>", b"  #  define Y(a) a\\\n z", b"/*#*/", b"x # y"]
    fixed = [b'#include "a.h"\n  # define F(x) x \\\n  + 1\n#define G 1 # 2\n\t#include <b.h>\r\n',
             b"int a; # define X 1\n#define\n#define Y\\\n#define Z 3\n", b"", b"#", b"\n#include"]
    rnd = random.Random(12)
    cases = fixed + [b"".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 30))) for _ in range(3000)]
    for data in cases:
        for pattern in patterns:
            expected = [(m.span(), m.groups()) for m in pattern.finditer(data)]
            assert [(m.span(), m.groups()) for m in directive_matches(pattern, data)] == expected, data


def test_comments_inside_a_continued_define_are_blanked_for_the_parse() -> None:
    """tree-sitter-cpp ends a multi-line `#define` at a `/* */` comment in its body and
    loses the templated entry after it; the parse sees them blanked, offsets kept."""
    raw = ("#define IMPL(cls, ...)          \\\n"
           "    do {                         \\\n"
           "        /* 创建实例 */            \\\n"
           "        cls<__VA_ARGS__> op;     \\\n"
           "        /* a comment over \\\n"
           "           two lines */          \\\n"
           "        op.Process();            \\\n"
           "    } while (0)\n"
           "/* outside: kept */\n"
           "template <int8_t MODE>\n"
           "__global__ __aicore__ void tpl_op(GM_ADDR x) { IMPL(Kernel, MODE); }\n").encode()
    text = normalise(raw, DEFAULT_QUALIFIERS)
    assert len(text) == len(raw) and text.count(b"\\\n") == raw.count(b"\\\n")
    assert "创建".encode() not in text and b"two lines" not in text and b"/* outside: kept */" in text
    index = CodeIndex()
    index.add_file(parse_file(new_parser(), SourceFile(Path("k.cpp"), raw, text)))
    assert [f.name for f in index.functions.values()] == ["tpl_op"]


@example([b"x", b"if", b" ", b"A", b"("])
@example([b"#if", b" ", b"A", b"("])
@example([b"_", b"if", b"\t", b"KEY_IS", b" ", b"("])
@example([b"if", b" ", b"A", b"("])
@given(st.lists(st.sampled_from([b"if", b" ", b"\t", b"(", b")", b"#", b"x", b"_", b"KEY_IS", b"A", b"\n",
                                 b"0", b"{", b"#if", b"elif"]), max_size=24))
def test_the_macro_condition_pattern_finds_what_its_lookbehind_first_form_found(tokens: list[bytes]) -> None:
    """The pattern starts with its literal `if` (a search skips to each one) and checks
    the byte before it afterwards: the same matches as the form that started with the
    lookbehind and was tried at every byte of a file."""
    import re

    from optrace.engine.source import _MACRO_CONDITION_RE

    before = re.compile(rb"(?<![#\w])if([ \t]+)([A-Z_][A-Z0-9_]*)([ \t]*)\(")
    text = b"".join(tokens)
    assert ([(m.span(), m.groups()) for m in _MACRO_CONDITION_RE.finditer(text)]
            == [(m.span(), m.groups()) for m in before.finditer(text)])
