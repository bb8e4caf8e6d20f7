"""A profiling parameter that would take its line past 120 columns goes on a line of its
own inside its fragment; strip takes exactly the fragment back, and check attributes only
the fragment's columns to optrace (the original code after it stays the user's)."""

from __future__ import annotations

import re
from pathlib import Path

from optrace.codemods.strip import strip_bytes
from optrace.engine.edits import REVIEW_WIDTH, Edit, apply_edits
from optrace.engine.vocabulary import FRAG_CLOSE, FRAG_OPEN
from optrace.pipeline.check import _inserted_code

PARAM = FRAG_OPEN + b"const aclTensor *profilingData, " + FRAG_CLOSE
ARG = FRAG_OPEN + b", profilingData" + FRAG_CLOSE


def _insert(data: bytes, before: bytes, text: bytes) -> bytes:
    at = data.index(before)
    return apply_edits(data, [Edit(Path("x.cpp"), at, at, text, "aclnn")])


def test_a_parameter_past_the_width_goes_on_its_own_line_and_strip_takes_it_back() -> None:
    head = b"aclnnStatus aclnnDemoGetWorkspaceSize(const aclTensor *x, const aclTensor *y, "
    data = head + b"uint64_t *workspaceSize,\n" + b" " * 38 + b"aclOpExecutor **executor);\n"
    assert len(data.split(b"\n")[0]) <= REVIEW_WIDTH < len(data.split(b"\n")[0]) + len(PARAM)
    new = _insert(data, b"uint64_t", PARAM)
    pad = b" " * len(b"aclnnStatus aclnnDemoGetWorkspaceSize(")
    assert new.startswith(head + FRAG_OPEN + b"\n" + pad + b"const aclTensor *profilingData,\n" + pad
                          + FRAG_CLOSE + b"uint64_t *workspaceSize,\n")
    assert max(len(ln) for ln in new.split(b"\n")) <= REVIEW_WIDTH
    assert strip_bytes(new, Path("x.cpp")) == data
    # an argument after the last one: the comma stays on the line, the name goes below
    call = b"    return aclnnInner(" + b", ".join(bytes([c]) * 3 for c in range(97, 116)) + b");\n"
    assert len(call) - 1 <= REVIEW_WIDTH < len(call) - 1 + len(ARG)
    new = _insert(call, b");", ARG)
    pad = b" " * len(b"    return aclnnInner(")
    assert new == call.replace(b");", FRAG_OPEN + b",\n" + pad + b"profilingData" + FRAG_CLOSE + b");")
    assert strip_bytes(new, Path("x.cpp")) == call


def test_short_lines_and_lines_already_past_the_width_keep_the_fragment_inline() -> None:
    short = b"void f(int x, uint64_t *workspaceSize);\n"
    assert _insert(short, b"uint64_t", PARAM) == short.replace(b"uint64_t", PARAM + b"uint64_t")
    long = b"void f(" + b"int a, " * 20 + b"uint64_t *workspaceSize);\n"
    assert len(long) > REVIEW_WIDTH
    assert _insert(long, b"uint64_t", PARAM) == long.replace(b"uint64_t", PARAM + b"uint64_t")


def test_check_blames_only_the_fragment_of_a_wrapped_line() -> None:
    data = (b"void f(int x, " + FRAG_OPEN + b"\n       const aclTensor *profilingData,\n       " + FRAG_CLOSE
            + b"int workspace, &tilingData);\n")
    lines, fragments = _inserted_code(data)
    assert lines == {2}  # the parameter's own line is wholly optrace's
    assert fragments[1] == [(len(b"void f(int x, ") + 1, len(data.split(b"\n")[0]))]
    close_end = len(b"       " + FRAG_CLOSE)
    assert fragments[3] == [(1, close_end)]  # `int workspace, &tilingData)` stays the user's


def test_statements_in_a_fragment_past_the_width_go_a_line_each() -> None:
    """A one-line function that gets statements before its return (an infer function):
    a statement a line inside the fragment, the block's braces on lines of their own, the
    return where the closing marker ends; strip takes the fragment and its breaks back."""
    data = (b"static ge::graphStatus InferShapeDemo(gert::InferShapeContext* context) "
            b"{ return GRAPH_SUCCESS; }\n")
    body = (b"constexpr uint32_t idx = 0; gert::Shape *shape = context->GetOutputShape(idx); "
            b"if (shape != nullptr) { shape->SetDimNum(1); shape->SetDim(0, 8); } ")
    new = _insert(data, b"return", FRAG_OPEN + body + FRAG_CLOSE)
    assert new.split(b"\n")[1:8] == [
        b"    constexpr uint32_t idx = 0;", b"    gert::Shape *shape = context->GetOutputShape(idx);",
        b"    if (shape != nullptr) {", b"        shape->SetDimNum(1);", b"        shape->SetDim(0, 8);",
        b"    }", b"    " + FRAG_CLOSE + b"return GRAPH_SUCCESS; }"]
    assert max(len(ln) for ln in new.split(b"\n")) <= REVIEW_WIDTH
    assert strip_bytes(new, Path("x.cpp")) == data
    # a fragment that is no run of whole statements stays inline
    assert _insert(data, b"GRAPH_SUCCESS", FRAG_OPEN + b"0 + " + FRAG_CLOSE).count(b"\n") == 1


def test_a_whole_inserted_line_past_the_width_breaks_into_marked_lines() -> None:
    """At an assignment's `=`, before a call chain's `.`, after a `,` in brackets; never in a
    string; a line with a comment or a preprocessor line left whole; strip removes each
    marked piece."""
    data = b"void f()\n{\n    Run();\n}\n"
    chain = (b"        this->Output(\"profiling_data\").ParamType(REQUIRED).DataType({ge::DT_INT64})"
             b".Format({ge::FORMAT_ND}).UnknownShapeFormat({ge::FORMAT_ND});  // optrace\n")
    assign = (b"    const gert::CompileTimeTensorDesc *optraceDescriptor = tilingContextGen->GetOutputDesc("
              b"optraceProfilingDataIndex);  // optrace\n")
    text = (b"    Log(\"a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, t, u, v, w, x, y, z\", "
            b"theFirstValue, theSecondValue);  // optrace\n")
    directive = b"#include \"" + b"x" * 120 + b".h\"  // optrace\n"
    for line in (chain, assign, text, directive):
        new = _insert(data, b"    Run", line)
        added = [ln for ln in new.split(b"\n") if ln.endswith(b"// optrace")]
        def tokens(text: bytes) -> bytes:
            return re.sub(rb"\s+", b"", text)
        assert tokens(b"".join(ln[: -len(b"  // optrace")] for ln in added)) == tokens(line.split(b"  //")[0])
        if line is directive:
            assert len(added) == 1
        else:
            assert len(added) > 1 and max(len(ln) for ln in added) <= REVIEW_WIDTH, added
        assert strip_bytes(new, Path("x.cpp")) == data
    assert b'"a, b, c' in _insert(data, b"    Run", text)  # the literal whole


def test_any_element_a_fragment_adds_past_the_width_goes_below_and_a_macro_line_stays() -> None:
    """A type grown by one (`std::tuple<A, B, C>` of a torch adapter's return) takes the new
    element to the next line as a parameter does; a directive or a macro continuation line
    keeps it inline (a line break would end it)."""
    head = b"std::tuple<at::Tensor, at::Tensor"
    data = head + b"> moe_fused_gmm_impl(const at::Tensor &x, const at::Tensor &expert_ids,\n    int k);\n"
    new = _insert(data, b"> moe_fused", FRAG_OPEN + b", at::Tensor" + FRAG_CLOSE)
    assert new.startswith(head + FRAG_OPEN + b",\n        at::Tensor" + FRAG_CLOSE + b"> moe_fused_gmm_impl(")
    assert max(len(ln) for ln in new.split(b"\n")) <= REVIEW_WIDTH
    assert strip_bytes(new, Path("x.cpp")) == data
    macro = b"#define RUN(x) Launch(" + b"a, " * 30 + b"x)\n"
    assert _insert(macro, b"x)\n", FRAG_OPEN + b"profilingData, " + FRAG_CLOSE).count(b"\n") == 1


def test_a_bracket_far_right_gives_its_continuation_two_steps_in() -> None:
    """Aligned under a `(` at column 57 or so, the line the fragment ends on would pass 120
    columns itself (the rest of the parameter list after the closing marker): the
    continuation goes two steps past the line's own indent instead."""
    head = b"extern \"C\" __global__ __aicore__ void fused_kernel_entry("
    data = head + b"GM_ADDR x, GM_ADDR workspace, GM_ADDR tiling, GM_ADDR lastname)\n"
    assert len(head) <= REVIEW_WIDTH // 2 and len(data) - 1 <= REVIEW_WIDTH
    new = _insert(data, b"GM_ADDR workspace", FRAG_OPEN + b"GM_ADDR profiling_data, " + FRAG_CLOSE)
    assert new.split(b"\n")[1:3] == [b"        GM_ADDR profiling_data,",
                                     b"        " + FRAG_CLOSE + b"GM_ADDR workspace, GM_ADDR tiling, "
                                     b"GM_ADDR lastname)"]
    assert max(len(ln) for ln in new.split(b"\n")) <= REVIEW_WIDTH
    assert strip_bytes(new, Path("x.cpp")) == data
