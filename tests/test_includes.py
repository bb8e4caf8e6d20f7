from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import pytest

from optrace.engine.includes import build_include_graph, scan_includes


def write(p: Path, text: str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_scan_ignores_comments_and_if0() -> None:
    src = b'#include "a.h"\n// #include "b.h"\n#if 0\n#include "c.h"\n#endif\n#include <d.h>\n'
    names = [(d.target, d.quoted) for d in scan_includes(src)]
    assert names == [("a.h", True), ("d.h", False)]


def test_graph_follows_subdirs_lists_missing_and_cycles(tmp_path: Path) -> None:
    entry = write(tmp_path / "k.cpp", '#include "k.h"\n#include <kernel_operator.h>\n')
    write(tmp_path / "k.h", '#include "sub/a.h"\n#include "catlass/catlass.hpp"\n')
    write(tmp_path / "sub/a.h", '#include "b.h"\n')
    write(tmp_path / "sub/b.h", '#include "a.h"\n')
    g = build_include_graph(entry.resolve(), [tmp_path.resolve()])
    names = sorted(p.name for p in g.files)
    assert names == ["a.h", "b.h", "k.cpp", "k.h"]
    assert [m[2] for m in g.missing] == ["catlass/catlass.hpp"]
    assert g.missing[0][1] == 2  # the line of the include
    assert "kernel_operator.h" in g.external
    assert g.cycles and {p.name for p in g.cycles[0]} == {"a.h", "b.h"}


def test_symlink_loop_is_a_located_diagnostic(tmp_path: Path) -> None:
    entry = write(tmp_path / "k.cpp", '#include "loop.h"\n')
    os.symlink(tmp_path / "loop.h", tmp_path / "loop.h")
    g = build_include_graph(entry.resolve(), [])
    assert [d.code for d in g.diagnostics] == ["OT014"]
    assert g.diagnostics[0].line == 1


def unreadable(monkeypatch: pytest.MonkeyPatch, victim: Path) -> None:
    """`victim` cannot be opened (EACCES), whoever runs the test: its mode is 0, and —
    since root (CI) reads a file of mode 0 anyway — opening it fails at `io.open`, where
    every `Path.read_bytes` ends up, and at `os.open`, where the bounded reader of
    untrusted files (runtime/regular.py) opens it — as the kernel would fail it for
    another user."""
    victim.chmod(0)
    real_open = io.open
    real_os_open = os.open

    def denying_os(file: object, *args: object, **kwargs: object) -> int:
        if isinstance(file, str | bytes | os.PathLike) and os.path.realpath(file) == os.path.realpath(victim):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return real_os_open(file, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", denying_os)

    def denying(file: object, *args: object, **kwargs: object) -> object:
        if isinstance(file, str | bytes | os.PathLike) and os.path.realpath(file) == os.path.realpath(victim):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(io, "open", denying)


def test_unreadable_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = write(tmp_path / "k.cpp", '#include "x.h"\n')
    x = write(tmp_path / "x.h", "int a;\n")
    unreadable(monkeypatch, x)
    g = build_include_graph(entry.resolve(), [])
    assert [d.code for d in g.diagnostics] == ["OT011"]
    assert g.diagnostics[0].path == x.resolve() and "Permission denied" in g.diagnostics[0].message
    assert x.resolve() not in g.files


def test_an_unreadable_header_is_named_by_plan_and_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from optrace.cli.app import app

    repo = tmp_path / "repo"
    write(repo / "optrace.toml", "")
    write(repo / "demo_op" / "op_kernel" / "demo_op.cpp",
          '#include "x.h"\nextern "C" __global__ __aicore__ void demo_op(GM_ADDR x) { SyncAll(); }\n')
    x = write(repo / "demo_op" / "op_kernel" / "x.h", "int a;\n")
    unreadable(monkeypatch, x)
    res = CliRunner().invoke(app, ["plan", str(repo / "demo_op")])
    assert res.exit_code == 0 and "op_kernel/x.h: OT011 cannot read: Permission denied" in res.stderr
    res = CliRunner().invoke(app, ["check", str(repo / "demo_op"), "--no-compile"])
    assert "x.h: OT011 cannot read: Permission denied" in res.stderr


def test_binary_header_is_reported_not_parsed(tmp_path: Path) -> None:
    entry = write(tmp_path / "k.cpp", '#include "blob.h"\n')
    (tmp_path / "blob.h").write_bytes(b"\x00\x01\x02" * 100)
    g = build_include_graph(entry.resolve(), [])
    assert [d.code for d in g.diagnostics] == ["OT012"]
    assert all(p.name != "blob.h" for p in g.files)
