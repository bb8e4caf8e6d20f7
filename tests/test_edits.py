"""The edit engine: edits as data, conflicts, duplicates, byte preservation, git-applicable diffs."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optrace.engine import edits as edits_module
from optrace.engine.edits import (
    Edit,
    EditConflict,
    EditOutOfRange,
    EditSet,
    apply_edits,
    encode_patch,
    indent_at,
    line_end,
    line_number,
    line_start,
    new_contents,
    newline_of,
    unified_diff,
)

P = Path("k.cpp")


def ins(offset: int, text: bytes, codemod: str = "kernel", path: Path = P) -> Edit:
    return Edit(path, offset, offset, text, codemod)


def rep(start: int, end: int, text: bytes, codemod: str = "kernel", path: Path = P) -> Edit:
    return Edit(path, start, end, text, codemod)


# --- application


def test_offsets_refer_to_the_original_bytes() -> None:
    src = b"0123456789"
    # Given in no particular order; each offset is in `src`, as if applied bottom-up.
    edits = [rep(8, 10, b"END"), ins(0, b"<"), rep(2, 4, b""), ins(5, b"++"), rep(4, 5, b"four")]
    assert apply_edits(src, edits) == b"<01four++567END"


def test_apply_is_pure_and_bytes_in_bytes_out() -> None:
    src = b"abc"
    edits = [ins(1, b"X")]
    assert apply_edits(src, edits) == apply_edits(src, edits) == b"aXbc"
    assert src == b"abc"


def test_same_offset_insertions_concatenate_in_the_order_added() -> None:
    src = b"ab"
    assert apply_edits(src, [ins(1, b"1", "first"), ins(1, b"2", "second")]) == b"a12b"
    assert apply_edits(src, [ins(1, b"2", "second"), ins(1, b"1", "first")]) == b"a21b"


def test_insertions_at_either_end_of_a_replaced_range_are_allowed() -> None:
    src = b"aXXb"
    edits = [rep(1, 3, b"yy"), ins(3, b"]"), ins(1, b"[")]
    assert apply_edits(src, edits) == b"a[yy]b"
    assert apply_edits(src, [ins(1, b"["), ins(3, b"]"), rep(1, 3, b"yy")]) == b"a[yy]b"


def test_empty_insertion_is_ignored() -> None:
    assert apply_edits(b"abc", [ins(1, b""), rep(0, 3, b"z")]) == b"z"
    assert len(EditSet([ins(1, b"")])) == 0


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (rep(2, 6, b"x", "kernel"), rep(4, 8, b"y", "entry")),  # partial overlap
        (rep(2, 6, b"x", "kernel"), rep(3, 4, b"y", "entry")),  # nested
        (rep(2, 6, b"x", "kernel"), rep(2, 6, b"y", "entry")),  # same range, other text
        (rep(2, 6, b"x", "kernel"), ins(4, b"y", "entry")),  # insertion strictly inside
        (ins(4, b"y", "kernel"), rep(2, 6, b"x", "entry")),  # same, added the other way
    ],
)
def test_overlaps_are_refused_naming_both_codemods_and_the_line(
    first: Edit, second: Edit, tmp_path: Path
) -> None:
    path = tmp_path / "k.cpp"
    path.write_bytes(b"\r\nbcdefgh\r\n")  # offsets 2..8 are all on line 2
    edits = [Edit(path, e.start, e.end, e.replacement, e.codemod) for e in (first, second)]
    with pytest.raises(EditConflict) as caught:
        EditSet(edits)
    message = str(caught.value)
    assert "kernel" in message and "entry" in message
    assert message.startswith(f"{os.path.realpath(path)}:2: OT040 ")
    assert f"({path}:2" in message
    assert caught.value.first.codemod == "kernel" and caught.value.second.codemod == "entry"
    assert caught.value.line == 2
    with pytest.raises(EditConflict):
        apply_edits(path.read_bytes(), edits)


def test_conflict_on_an_unreadable_file_falls_back_to_byte_offsets(tmp_path: Path) -> None:
    missing = tmp_path / "gone.cpp"
    with pytest.raises(EditConflict, match=r"replaces bytes 0\.\.4"):
        EditSet([rep(0, 4, b"a", path=missing), rep(2, 3, b"b", path=missing)])


def test_adjacent_ranges_do_not_conflict() -> None:
    assert apply_edits(b"aabbcc", [rep(2, 4, b"B"), rep(0, 2, b"A"), rep(4, 6, b"C")]) == b"ABC"


def test_bad_ranges() -> None:
    with pytest.raises(ValueError):
        Edit(P, 5, 4, b"", "kernel")
    with pytest.raises(ValueError):
        Edit(P, -1, 0, b"", "kernel")
    with pytest.raises(EditOutOfRange, match="past the end"):
        apply_edits(b"abc", [rep(2, 4, b"x")])


# --- duplicates: the "same header fix applied N times" bug


def test_the_same_fix_added_n_times_is_applied_once() -> None:
    fix = ins(0, b'#include "k_base.h"\n', "base_header")
    edits = EditSet([fix] * 5 + [ins(0, b'#include "k_base.h"\n', "entry")])
    assert len(edits) == 1 and len(edits.duplicates) == 5
    assert apply_edits(b"int x;\n", list(edits)) == b'#include "k_base.h"\nint x;\n'


def test_duplicates_through_a_symlink_are_one_file(tmp_path: Path) -> None:
    real = tmp_path / "op_kernel" / "k.h"
    real.parent.mkdir()
    real.write_bytes(b"void f();\n")
    link = tmp_path / "include" / "k.h"
    link.parent.mkdir()
    link.symlink_to(os.path.relpath(real, link.parent))
    dotted = tmp_path / "include" / ".." / "op_kernel" / "k.h"

    edits = EditSet(
        [
            ins(0, b"// traced\n", "a", real),
            ins(0, b"// traced\n", "b", link),
            ins(0, b"// traced\n", "c", dotted),
        ]
    )
    assert edits.files() == [real.resolve()]
    assert len(edits) == 1 and len(edits.duplicates) == 2
    assert new_contents(edits) == {real.resolve(): (b"void f();\n", b"// traced\nvoid f();\n")}
    # Two different edits of the one file through its two names do conflict.
    assert edits.add(rep(0, 4, b"int", "d", link))
    with pytest.raises(EditConflict):
        edits.add(rep(2, 6, b"x", "e", real))


def test_new_contents_reads_each_file_once_and_skips_no_ops(tmp_path: Path) -> None:
    a, b = tmp_path / "a.h", tmp_path / "b.h"
    a.write_bytes(b"aaa")
    b.write_bytes(b"bbb")
    reads: list[Path] = []

    def read(path: Path) -> bytes:
        reads.append(path)
        return path.read_bytes()

    edits = EditSet([ins(0, b"1", path=a), ins(3, b"2", path=a), rep(0, 1, b"b", path=b)])
    assert new_contents(edits, read=read) == {a.resolve(): (b"aaa", b"1aaa2")}
    assert sorted(reads) == sorted([a.resolve(), b.resolve()])


# --- bytes the engine was not asked to touch stay as they are


MIXED = (
    b"\xef\xbb\xbf"  # BOM
    + "// 算子内核\r\n".encode("gbk")  # GBK comment, CRLF
    + b"void f() {\r\n"
    + b"\tint x = 0;\n"  # a stray LF line, tab indent
    + b"\t\tif (x) {  \r\n"  # trailing spaces
    + b"\t\t}\r\n"
    + b"}"  # no final newline
)


def test_helpers_keep_line_endings_and_tabs() -> None:
    data = MIXED
    at = data.index(b"int x")
    assert indent_at(data, at) == b"\t"
    assert indent_at(data, data.index(b"if (x)")) == b"\t\t"
    assert newline_of(data) == b"\r\n"
    assert data[line_start(data, at) : line_end(data, at)] == b"\tint x = 0;"
    brace = data.index(b"if (x)")
    assert data[line_start(data, brace) : line_end(data, brace)] == b"\t\tif (x) {  "
    assert data[line_end(data, brace) : line_end(data, brace, include_newline=True)] == b"\r\n"
    assert line_end(data, len(data) - 1) == len(data)
    assert line_start(data, 0) == 0 and line_number(data, at) == 3


@pytest.mark.parametrize(
    ("data", "newline"),
    [
        (b"a\nb\r\nc\n", b"\n"),
        (b"a\r\nb\r\nc\n", b"\r\n"),
        (b"a\r\nb\n", b"\r\n"),
        (b"a\nb\r\n", b"\n"),
        (b"x", b"\n"),
    ],
)
def test_newline_of(data: bytes, newline: bytes) -> None:
    assert newline_of(data) == newline


def test_line_end_on_a_crlf_line_and_an_empty_line() -> None:
    data = b"ab\r\n\r\n\ncd"
    assert line_end(data, 0) == 2
    assert line_end(data, 4) == 4  # the empty CRLF line
    assert line_end(data, 6) == 6  # the empty LF line
    assert line_end(data, 7) == len(data)


def test_an_edit_changes_only_its_own_bytes() -> None:
    at = MIXED.index(b"\tint x")
    line = indent_at(MIXED, at) + b'MoeTracing(TRACE_POINT("f", "B"));' + newline_of(MIXED)
    out = apply_edits(MIXED, [ins(at, line, "kernel"), rep(len(MIXED) - 1, len(MIXED), b"}", "kernel")])
    assert out == MIXED[:at] + line + MIXED[at:]


# --- unified diff, checked by git itself


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo), "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=False)


DIFF_CASES: dict[str, tuple[bytes | None, bytes | None]] = {
    "op_kernel/crlf.cpp": (b"a\r\nb\r\nc\r\n", b"a\r\nX\r\nb\r\nc\r\n"),
    "op_kernel/gbk.h": (
        "// 中文\nint x;\n".encode("gbk"),
        "// 中文注释\nint x;\n".encode("gbk") + b"\xff\xfe",
    ),
    "op_kernel/no_newline.h": (b"one\ntwo", b"one\ntwo\n"),
    "op_kernel/loses_newline.h": (b"one\ntwo\n", b"zero\none\ntwo"),
    "op_kernel/tabs.h": (b"\tint a;\n\t\tint b;\n", b"\tint a;\n\t\tTRACE();\n\t\tint b;\n"),
    "op_kernel/bom.h": (b"\xef\xbb\xbf#pragma once\r\n", b'\xef\xbb\xbf#pragma once\r\n#include "x.h"\r\n'),
    "op_kernel/lone_cr.h": (b"a\rb\nc\n", b"a\rb\nC\n"),
    "op_kernel/created.h": (None, b"// created\r\n"),
    "op_kernel/new dir/created_empty.h": (None, b""),
    "op_kernel/deleted.h": (b"bye\nbye", None),
    "op_kernel/deleted_exec.sh": (b"#!/bin/sh\n", None),
    "op_kernel/deleted_empty.h": (b"", None),
    "op_kernel/emptied.h": (b"x\n", b""),
    "op_kernel/filled.h": (b"", b"y\r\n"),
    "op_kernel/with space.h": (b"a\n", b"b\n"),
    "op_kernel/unchanged.h": (b"same\n", b"same\n"),
}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_diff_is_a_patch_git_applies(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    assert _git(repo, "init", "-q").returncode == 0
    for rel, (old, _new) in DIFF_CASES.items():
        if old is not None:
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_bytes(old)
    (repo / "op_kernel/deleted_exec.sh").chmod(0o755)
    _git(repo, "add", "-A")
    assert _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "before").returncode == 0

    patch = unified_diff({repo / rel: change for rel, change in DIFF_CASES.items()}, repo)
    assert "--- /dev/null\n+++ b/op_kernel/created.h\n" in patch
    assert "--- a/op_kernel/deleted.h\n+++ /dev/null\n" in patch
    assert "\\ No newline at end of file\n" in patch
    assert "unchanged.h" not in patch
    patch_file = tmp_path / "optrace.patch"
    patch_file.write_bytes(encode_patch(patch))

    check = _git(repo, "apply", "--check", str(patch_file))
    assert check.returncode == 0, check.stderr
    applied = _git(repo, "apply", str(patch_file))
    assert applied.returncode == 0, applied.stderr
    assert "has type" not in applied.stderr  # no mode mismatch warnings
    for rel, (_old, new) in DIFF_CASES.items():
        path = repo / rel
        assert (path.read_bytes() if path.exists() else None) == new, rel

    # And back: the reverse patch restores every original byte.
    reverse = _git(repo, "apply", "-R", str(patch_file))
    assert reverse.returncode == 0, reverse.stderr
    for rel, (old, _new) in DIFF_CASES.items():
        path = repo / rel
        assert (path.read_bytes() if path.exists() else None) == old, rel


def test_diff_shape() -> None:
    root = Path("/repo")
    old = b"".join(b"line %d\n" % i for i in range(20))
    new = old.replace(b"line 10\n", b"line 10\nTRACE\n")
    patch = unified_diff({root / "op" / "k.cpp": (old, new)}, root)
    assert patch.splitlines()[:4] == [
        "diff --git a/op/k.cpp b/op/k.cpp",
        "--- a/op/k.cpp",
        "+++ b/op/k.cpp",
        "@@ -9,6 +9,7 @@",
    ]
    assert unified_diff({root / "k.cpp": (old, old)}, root) == ""
    with pytest.raises(ValueError, match="outside the patch root"):
        unified_diff({Path("/elsewhere/k.cpp"): (old, new)}, root)


def test_diff_quotes_awkward_names() -> None:
    patch = unified_diff({Path("/r/a\tb.h"): (b"", b"x\n")}, Path("/r"))
    assert patch.startswith('diff --git "a/a\\tb.h" "b/a\\tb.h"\n')


def apply_patch(old: bytes, patch: str) -> bytes:
    """A minimal `patch` for one file's hunks, to check diffs without git."""
    body: list[tuple[bytes, bytes]] = []
    hunks: list[tuple[int, int, list[tuple[bytes, bytes]]]] = []
    for raw in encode_patch(patch).split(b"\n")[:-1]:
        if raw.startswith(b"@@ "):
            old_range = raw.split(b" ")[1][1:].split(b",")
            start, length = int(old_range[0]), int(old_range[1]) if len(old_range) > 1 else 1
            body = []
            hunks.append((start - 1 if length else start, length, body))
        elif raw.startswith(b"\\"):
            op, line = body[-1]
            body[-1] = (op, line[:-1])  # "\ No newline at end of file" applies to the line before
        elif hunks and raw[:1] in (b" ", b"-", b"+"):
            body.append((raw[:1], raw[1:] + b"\n"))
    parts = old.split(b"\n")  # not splitlines(): a lone CR is not a line break
    old_lines = [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    out: list[bytes] = []
    at = 0
    for start, _length, lines in hunks:
        out.extend(old_lines[at:start])
        at = start
        for op, line in lines:
            if op in (b" ", b"-"):
                assert old_lines[at] == line, (at, old_lines[at], line)
                at += 1
            if op in (b" ", b"+"):
                out.append(line)
    out.extend(old_lines[at:])
    return b"".join(out)


lines_of = st.lists(st.sampled_from([b"}\n", b"\n", b"a\r\n", b"b\n", b"\tc\n", b"\xff\n"]), max_size=30)


@settings(max_examples=300, deadline=None)
@given(
    lines_of,
    lines_of,
    st.sampled_from([b"", b"}", b"x\r"]),
    st.sampled_from([b"", b"}", b"y"]),
    st.booleans(),
)
def test_the_diff_is_minimal_and_applies(
    a_lines: list[bytes], b_lines: list[bytes], a_end: bytes, b_end: bytes, fallback: bool
) -> None:
    old, new = b"".join(a_lines) + a_end, b"".join(b_lines) + b_end
    # fallback: a tiny budget forces the heuristic matcher used on huge, unrelated files.
    with mock.patch.object(edits_module, "_DIFF_BUDGET", 3 if fallback else edits_module._DIFF_BUDGET):
        patch = unified_diff({Path("/r/k.h"): (old, new)}, Path("/r"))
    assert apply_patch(old, patch) == new
    if fallback:
        return
    # Minimal: the changed lines are exactly those outside a longest common subsequence.
    a, b = edits_module._lines(old), edits_module._lines(new)
    lcs = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) - 1, -1, -1):
        for j in range(len(b) - 1, -1, -1):
            lcs[i][j] = lcs[i + 1][j + 1] + 1 if a[i] == b[j] else max(lcs[i + 1][j], lcs[i][j + 1])
    changed = sum(
        1 for line in patch.split("\n") if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
    )
    assert changed == len(a) + len(b) - 2 * lcs[0][0]


def test_diff_of_a_large_repetitive_file_is_fast() -> None:
    # difflib without its junk heuristic took minutes here (every line repeats hundreds of times).
    lines = [b"}\n" if i % 7 == 0 else b"    x%d = y;\n" % (i % 50) for i in range(20000)]
    old = b"".join(lines)
    new = b"".join(line + (b"TRACE();\n" if i % 40 == 0 else b"") for i, line in enumerate(lines))
    new = new.replace(b"    x3 = y;\n}\n", b"}\n", 100)
    started = time.perf_counter()
    patch = unified_diff({Path("/r/k.cpp"): (old, new)}, Path("/r"))
    assert time.perf_counter() - started < 10
    assert apply_patch(old, patch) == new


# --- properties


@st.composite
def edits_on(draw: st.DrawFn) -> tuple[bytes, list[Edit]]:
    """Random bytes (any value: CR, LF, NUL, invalid UTF-8) and non-overlapping edits."""
    data = draw(st.binary(max_size=60))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    replacements = st.binary(max_size=6) | st.sampled_from([b"\r\n", b"\n", b"\t"])
    edits = [
        Edit(P, start, end, draw(replacements), draw(st.sampled_from(["kernel", "entry", "base"])))
        for start, end in zip(cuts[0::2], cuts[1::2], strict=False)
    ]
    return data, draw(st.permutations(edits))


def _inverse(original: bytes, applied: list[Edit]) -> list[Edit]:
    """Edits that turn the result back into `original`.

    Edits that touch are merged first, so the inverse has no two insertions at one offset
    (which the duplicate rule could legitimately merge).
    """
    groups: list[tuple[int, int, bytes]] = []
    for edit in applied:
        if groups and groups[-1][1] == edit.start:
            start, _end, text = groups[-1]
            groups[-1] = (start, edit.end, text + edit.replacement)
        else:
            groups.append((edit.start, edit.end, edit.replacement))
    inverse = []
    shift = 0
    for start, end, text in groups:
        inverse.append(Edit(P, start + shift, start + shift + len(text), original[start:end], "inverse"))
        shift += len(text) - (end - start)
    return inverse


@settings(max_examples=300, deadline=None)
@given(edits_on())
def test_inverse_edits_restore_the_original(case: tuple[bytes, list[Edit]]) -> None:
    original, edits = case
    result = apply_edits(original, edits)
    applied = list(EditSet(edits).edits_for(P))  # the engine's own order, duplicates gone
    assert apply_edits(result, _inverse(original, applied)) == original


@settings(max_examples=300, deadline=None)
@given(edits_on())
def test_apply_equals_literal_bottom_up_and_duplicates_are_idempotent(case: tuple[bytes, list[Edit]]) -> None:
    original, edits = case
    ordered = list(EditSet(edits).edits_for(P))
    buffer = bytearray(original)
    for edit in reversed(ordered):  # bottom-up; same-offset insertions last-added first
        buffer[edit.start : edit.end] = edit.replacement
    assert apply_edits(original, edits) == bytes(buffer)
    assert apply_edits(original, edits + edits) == bytes(buffer)
