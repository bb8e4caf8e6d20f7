"""Headers that are mostly data: a 12 MB numeric table is left out of the parse.

The elements of long brace lists (names, numbers, `. + -`, commas, nested braces) cannot
hold a function, call, loop or declaration, so `engine/cpp.py` parses the file without
them (tree-sitter's included ranges). These tests hold the two promises that makes: the
index of every file is the one a full parse gives, and an operator including such a table
plans, applies and strips exactly as without it. Speed is not asserted (shared machines
are noisy); the report of the change has the numbers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from optrace.engine import cpp
from optrace.engine.analysis import analyse_operator
from optrace.engine.source import DEFAULT_QUALIFIERS, SourceFile, normalise
from optrace.engine.transaction import commit
from optrace.pipeline.apply import apply_changes, strip_changes
from optrace.pipeline.plan import plan_operator
from optrace.pipeline.plan_output import plan_json

pytestmark = pytest.mark.slow  # megabyte headers planned, applied and stripped

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CPP_SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cce", ".inl"}

KERNEL = b"""#include "kernel_operator.h"
#include "table.h"
__aicore__ inline void Compute(uint32_t n)
{
    for (uint32_t groupIdx = 0; groupIdx < n; ++groupIdx) {
        AscendC::SyncAll();
    }
}
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, GM_ADDR tiling)
{
    Compute(kTable[0]);
}
"""


def numeric_table(megabytes: int = 12) -> bytes:
    """`static const int64_t kTable[] = {1, 2, 3, ...};`, as a generator writes it."""
    row = b"    " + b", ".join(b"%d" % (i * 7919 % 1000003) for i in range(16)) + b",\n"
    count = megabytes * 1024 * 1024 // len(row)
    return b"#pragma once\n#include <cstdint>\nstatic const int64_t kTable[] = {\n" + row * count + b"};\n"


def _operator(tmp: Path, table: bytes) -> Path:
    kernel = tmp / "repo" / "demo_op" / "op_kernel"
    kernel.mkdir(parents=True)
    (tmp / "repo" / "optrace.toml").write_text("")
    (kernel / "demo_op.cpp").write_bytes(KERNEL)
    (kernel / "table.h").write_bytes(table)
    return kernel.parent


def _tree(op_dir: Path) -> dict[str, object]:
    """The planned regions (labels, kinds, anchors, cores, placement), paths repo-relative."""
    tree = plan_json(plan_operator(op_dir))["tree"]
    assert isinstance(tree, dict)
    return tree


@pytest.fixture(scope="module")
def table() -> bytes:
    return numeric_table()


def test_a_12mb_numeric_table_plans_as_without_it(tmp_path: Path, table: bytes) -> None:
    with_table = _operator(tmp_path / "big", table)
    without = _operator(tmp_path / "small", b"#pragma once\nstatic const int64_t kTable[] = {1, 2};\n")
    tree = _tree(with_table)
    assert tree["children"]
    assert tree == _tree(without)

    an = analyse_operator(with_table)
    header = (with_table / "op_kernel" / "table.h").resolve()
    skipped = an.parsed[header].skipped
    assert len(skipped) == 1 and skipped[0][1] - skipped[0][0] > 11 * 1024 * 1024
    assert not an.parsed[header].error_lines
    notes = [d for d in an.diagnostics if d.path == header]
    assert [(d.code, d.severity.value) for d in notes] == [("OT013", "info")]
    assert "very large source (12 MiB)" in notes[0].message
    assert {fn.name for fn in an.index.functions.values()} >= {"Compute", "demo_op"}


def test_apply_and_strip_leave_the_table_byte_identical(tmp_path: Path, table: bytes) -> None:
    op_dir = _operator(tmp_path, table)
    src = op_dir / "op_kernel"
    journal = tmp_path / "repo" / ".optrace"
    commit(apply_changes(op_dir).changes, journal, name="apply")
    assert (src / "table.h").read_bytes() == table
    assert b"TRACE_POINT" in (src / "demo_op.cpp").read_bytes()  # apply instrumented the kernel
    commit(strip_changes(op_dir).changes, journal, name="strip")
    assert (src / "demo_op.cpp").read_bytes() == KERNEL
    assert (src / "table.h").read_bytes() == table


# --------------------------------------------------------------------------- the rule


def _parse(text: bytes, min_bytes: int, monkeypatch: pytest.MonkeyPatch) -> cpp.ParsedFile:
    monkeypatch.setattr(cpp, "TABLE_MIN_BYTES", min_bytes)
    return cpp.parse_file(cpp.new_parser(), SourceFile(Path("t.h"), text, text))


def _index(pf: cpp.ParsedFile) -> list[tuple[str, int, int]]:
    assert pf.nodes is not None
    return sorted((t, n.start_byte, n.end_byte) for t, nodes in pf.nodes.nodes.items() for n in nodes)


TABLE = b"1, -2, 0x3fULL, 4.5e-3f, kFive, Ns::kSix, +7, "


@pytest.mark.parametrize(("text", "skipped"), [
    (b"int t[] = {" + TABLE * 40 + b"8};\nvoid f() { g(); }\n", True),
    (b"int t[][2] = {\n" + b"  {1, 2}, {3, 4},\n" * 40 + b"};\n", True),
    (b"struct S { static constexpr int k[] = {" + TABLE * 40 + b"}; void m() { h(); } };\n", True),
    (b"void f() { auto v = {" + TABLE * 40 + b"g(1), 2}; for (;;) { h(); } }\n", True),
    (b"int t[] = {g(1), " + TABLE * 40 + b"h(2)};\n", True),
    # Not a list, or not well formed: parsed in full, errors reported as before.
    (b"/* {" + TABLE * 40 + b"*/ void f() { g(); }\n", False),
    (b'const char* s = "{' + TABLE * 40 + b'"; void f() { g(); }\n', False),
    (b"int x = f(a, " + TABLE * 40 + b"4);\n", False),
    (b"template <int... N> struct L {}; L<" + TABLE * 40 + b"1> l;\n", False),
    (b"int t[] = {" + TABLE * 40 + b"4 5};\n", False),
    (b"int t[] = {" + TABLE * 40 + b",, 5};\n", False),
    (b"enum E {" + b"kA, kB, kC, " * 100 + b"kD};\n", False),
    (b"#define T {" + TABLE * 40 + b"}\nvoid f() { g(); }\n", False),
])
def test_only_list_elements_are_left_out(text: bytes, skipped: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    pf = _parse(text, 256, monkeypatch)
    full = _parse(text, 1 << 40, monkeypatch)
    assert bool(pf.skipped) is skipped
    assert _index(pf) == _index(full)
    assert pf.error_lines == full.error_lines
    for s, e in pf.skipped:
        assert e - s >= 256
        assert b"(" not in text[s:e] and b";" not in text[s:e]


def _fixture_sources() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*") if p.suffix in CPP_SUFFIXES and p.is_file())


@pytest.mark.parametrize("min_bytes", [2, 24])
def test_fixture_files_index_as_in_a_full_parse(min_bytes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the threshold near zero every small list in real kernel code is a candidate:
    whatever is left out, the index and the parse errors are those of a full parse."""
    files = _fixture_sources()
    assert len(files) > 20
    left_out = 0
    for path in files:
        raw = path.read_bytes()
        text = normalise(raw, DEFAULT_QUALIFIERS)
        monkeypatch.setattr(cpp, "TABLE_MIN_BYTES", min_bytes)
        pf = cpp.parse_file(cpp.new_parser(), SourceFile(path, raw, text))
        monkeypatch.setattr(cpp, "TABLE_MIN_BYTES", 1 << 40)
        full = cpp.parse_file(cpp.new_parser(), SourceFile(path, raw, text))
        assert _index(pf) == _index(full), path
        assert pf.error_lines == full.error_lines, path
        left_out += bool(pf.skipped)
    assert left_out > 0  # the comparison saw files parsed without some lists
