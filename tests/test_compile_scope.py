"""The compile check leaves out function bodies no inserted line depends on
(engine/compile_scope.py) — and still reports every error on an inserted
line, including one that shows only when a template is instantiated from a body that
holds no inserted line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine.analysis import analyse_operator
from optrace.engine.compile_scope import blank_untouched_bodies
from optrace.pipeline.check import _inserted_lines, check_operator

ENTRY = """\
#include "kernel_operator.h"
#include "stages.h"
extern "C" __global__ __aicore__ void scoped(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)
{
    MoeTracing(TRACE_POINT("processing", "B"));  // optrace
    Op op;
    op.Run(x);
    MoeTracing(TRACE_POINT("processing", "E"));  // optrace
}
"""

STAGES = """\
#ifndef STAGES_H
#define STAGES_H
template <typename T>
class Stage {
public:
    __aicore__ inline void operator()(T v)
    {
        v.Missing();  // optrace
    }
};

__aicore__ inline int Helper(int n)
{
    int acc = 0;
    for (int i = 0; i < n; ++i) {
        acc += undeclared_in_helper;
    }
#define HELPER_SCALE 4
    return acc * HELPER_SCALE;
}

__aicore__ inline auto Deduced(int n)
{
    return n + 1;
}

class Op {
public:
    __aicore__ inline void Run(GM_ADDR x)
    {
        stage_(Helper(3) + HELPER_SCALE);
    }
    __aicore__ inline void Idle()
    {
        int unused = also_undeclared;
    }

private:
    Stage<int> stage_;
};
#endif
"""


def _operator(tmp_path: Path, stages: str = STAGES) -> Path:
    op = tmp_path / "repo" / "ops" / "scoped"
    (op / "op_kernel").mkdir(parents=True)
    (op / "op_kernel" / "scoped.cpp").write_text(ENTRY)
    (op / "op_kernel" / "stages.h").write_bytes(stages.encode())
    (tmp_path / "repo" / ".git").mkdir()
    return op


def test_untouched_bodies_are_blanked_line_for_line(tmp_path: Path) -> None:
    op = _operator(tmp_path, STAGES.replace("\n", "\r\n"))
    an = analyse_operator(op)
    keep = {path: _inserted_lines(pf.src.raw) for path, pf in an.parsed.items()}
    out = blank_untouched_bodies(an.index, an.parsed, keep)
    header = next(p for p in out if p.name == "stages.h")
    before, after = an.parsed[header].src.raw, out[header]
    assert len(after) == len(before)
    breaks = [i for i, b in enumerate(before) if b in b"\r\n"]
    assert [i for i, b in enumerate(after) if b in b"\r\n"] == breaks
    text = after.decode()
    assert "undeclared_in_helper" not in text and "also_undeclared" not in text  # bodies left out
    assert "#define HELPER_SCALE 4" in text  # a directive in a left-out body stays
    assert "return n + 1;" in text  # a deduced return type needs its body
    assert "v.Missing();  // optrace" in text  # the inserted line's body
    # Run names the member whose operator() holds the inserted line: kept, so the
    # template is instantiated
    assert "stage_(Helper(3) + HELPER_SCALE);" in text


def test_an_error_on_an_inserted_line_shown_by_an_instantiation_is_still_found(tmp_path: Path) -> None:
    """`v.Missing()` is an error only in Stage<int>, instantiated from Run, which holds
    no inserted line and calls the operator through a member."""
    op = _operator(tmp_path)
    report = check_operator(op)
    found = [(f.code, f.path.name if f.path else None, f.line) for f in report.findings if f.code == "OT420"]
    # (the entry's points: no runtime block in this tree, so MoeTracing is undeclared)
    assert ("OT420", "stages.h", 8) in found and all(f[1] == "scoped.cpp" for f in found if f[2] != 8)
    res = CliRunner().invoke(app, ["check", str(op), "--format", "json"])
    assert "stages.h:8" in res.stdout or '"line": 8' in res.stdout



# A class head with an export macro (`class OP_API Stage`): tree-sitter misreads the
# class, so the function holding the inserted line is not indexed, though no error lies
# on that line. Left out, the bodies that call it would never instantiate it.
MACRO_HEAD = """\
#define OP_API
template <typename T>
class OP_API Stage {
public:
    __aicore__ inline void operator()(T v)
    {
        int a = 1;
        v.Missing();  // optrace
        a = a + 1;
    }
};

class Op {
public:
    __aicore__ inline void Run(GM_ADDR x)
    {
        stage_(3);
    }

private:
    Stage<int> stage_;
};
"""


def test_a_file_tree_sitter_misreads_is_compiled_whole(tmp_path: Path) -> None:
    """No body of a file that does not parse cleanly is left out: the error on the
    inserted line shows only when Run instantiates the misread class."""
    op = _operator(tmp_path, MACRO_HEAD)
    an = analyse_operator(op)
    header = next(p for p in an.parsed if p.name == "stages.h")
    assert an.parsed[header].error_lines  # the premise: tree-sitter misreads it
    keep = {path: _inserted_lines(pf.src.raw) for path, pf in an.parsed.items()}
    out = blank_untouched_bodies(an.index, an.parsed, keep)
    assert header not in out or out[header] == an.parsed[header].src.raw
    report = check_operator(op)
    assert any(f.code == "OT420" and f.path and f.path.name == "stages.h" and f.line == 8
               for f in report.findings), [(f.code, f.path, f.line) for f in report.findings]


FREE_OPERATOR = """\
template <typename T>
struct Wrap {
    T v;
};

template <typename T>
__aicore__ inline Wrap<T> operator+(Wrap<T> a, int b)
{
    a.v.Missing();  // optrace
    return a;
}

__aicore__ inline int Helper(int n)
{
    return n + undeclared_in_helper;
}

class Op {
public:
    __aicore__ inline void Run(GM_ADDR x)
    {
        Wrap<int> w{1};
        w = w + 3;
    }
};
"""


def test_a_free_operator_with_an_inserted_line_keeps_every_body(tmp_path: Path) -> None:
    """`w + 3` calls `operator+` without naming it: the error on its inserted line shows
    only when Run instantiates it, so no body is left out."""
    op = _operator(tmp_path, FREE_OPERATOR)
    an = analyse_operator(op)
    keep = {path: _inserted_lines(pf.src.raw) for path, pf in an.parsed.items()}
    assert blank_untouched_bodies(an.index, an.parsed, keep) == {}
    report = check_operator(op)
    assert any(f.code == "OT420" and f.path and f.path.name == "stages.h" and f.line == 9
               for f in report.findings), [(f.code, f.path, f.line) for f in report.findings]
