"""Issue 14 §4/§5 on the source side: a FIFO or an oversized file where a header or a
config is expected is named and skipped (never read, no hang), and every number a
repository's config gives is checked finite and in its documented range."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest
from cli_in_thread import run_cli

KERNEL = (
    b'#include "kernel_operator.h"\n#include "extra.h"\n'
    b"__aicore__ inline void Compute(uint32_t n)\n{\n"
    b"    for (uint32_t groupIdx = 0; groupIdx < n; ++groupIdx) {\n        AscendC::SyncAll();\n    }\n}\n"
    b'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
    b"GM_ADDR tiling)\n{\n    Compute(4);\n}\n"
)


# The CLI on a thread with a time limit (tests/cli_in_thread.py); 180 s here.
cli = functools.partial(run_cli, timeout=180)


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "repo"
    kernel = root / "demo_op" / "op_kernel"
    kernel.mkdir(parents=True)
    (root / "optrace.toml").write_text("")
    (kernel / "demo_op.cpp").write_bytes(KERNEL)
    return root, root / "demo_op"


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_header_that_is_not_a_regular_file_is_named_and_skipped(repo: tuple[Path, Path], kind: str) -> None:
    _root, op = repo
    header = op / "op_kernel" / "extra.h"
    if kind == "fifo":
        os.mkfifo(header)
    else:
        header.mkdir()
    code, out = cli("plan", str(op))
    assert code == 0 and "Traceback" not in out and "trace tree:" in out, out
    if kind == "fifo":
        assert "extra.h: OT011 cannot read: not a regular file (a FIFO)" in out, out
    else:
        assert "extra.h` names a directory" in out, out
    code, out = cli("apply", str(op), "--write")
    assert code == 0, out
    code, out = cli("check", str(op))  # compile safety included: libclang must not open the FIFO
    assert code in (0, 1) and "Traceback" not in out, out
    if kind == "fifo":
        assert "OT421" in out and "not a regular file" in out, out
    assert cli("strip", str(op), "--write")[0] == 0
    assert (op / "op_kernel" / "demo_op.cpp").read_bytes() == KERNEL


def test_a_source_past_the_users_bound_is_named_not_read(
    repo: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, op = repo
    (op / "op_kernel" / "extra.h").write_bytes(b"// big\n" * 2000)
    config = tmp_path / "cfg" / "optrace" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[limits]\nsource_bytes = 8192\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    code, out = cli("plan", str(op))
    assert code == 0 and "extra.h: OT011 cannot read: 14000 bytes, past the 8192-byte bound" in out, out
    # The repository's config cannot raise (or set) the bound.
    (root / "optrace.toml").write_text("[limits]\nsource_bytes = 100000000\n")
    code, out = cli("plan", str(op))
    assert "past the 8192-byte bound" in out, out


def test_a_config_that_is_a_fifo_is_refused_without_hanging(repo: tuple[Path, Path]) -> None:
    root, op = repo
    (root / "optrace.toml").unlink()
    os.mkfifo(root / "optrace.toml")
    code, out = cli("plan", str(op))
    assert code == 2 and "optrace.toml: OT001 cannot read: not a regular file (a FIFO)" in out, out


@pytest.mark.parametrize(("toml", "message"), [
    ("[density]\nmin = nan\n", "`density.min` must be an integer in [1, 10000] labels, not nan"),
    ("[density]\nmax = inf\n", "`density.max` must be an integer in [1, 10000] labels, not inf"),
    ("[density]\ntarget = \"ten\"\n", "`density.target` must be an integer"),
    ("[density]\ntarget = 1e30\n", "`density.target` must be an integer"),
    ("[density]\nmin = 2.5\n", "`density.min` must be an integer"),
    ("[density]\nmin = 20\nmax = 10\n", "`density.min` (20) must not exceed `density.max` (10)"),
    ("density = 3\n", "`density` must be a table"),
    ("[trip_counts]\ngroupIdx = 9223372036854775807\n", "`trip_counts.groupIdx` must be an integer"),
    ("[trip_counts]\ngroupIdx = -1\n", "`trip_counts.groupIdx` must be an integer"),
    ("[trip_counts]\ngroupIdx = true\n", "`trip_counts.groupIdx` must be an integer"),
])
def test_config_numbers_are_finite_and_in_range(repo: tuple[Path, Path], toml: str, message: str) -> None:
    root, op = repo
    (root / "optrace.toml").write_text(toml)
    code, out = cli("plan", str(op))
    assert code == 2 and "Traceback" not in out and "OT003" in out and message in out, out


def test_config_numbers_in_range_are_taken(repo: tuple[Path, Path]) -> None:
    root, op = repo
    (root / "optrace.toml").write_text(
        "[density]\nmin = 2\nmax = 40\ntarget = 12\n[trip_counts]\ngroupIdx = 8\n")
    code, out = cli("plan", str(op))
    assert code == 0, out


@pytest.mark.parametrize("how", ["dotdot", "symlink"])
def test_an_include_resolving_outside_the_repository_is_listed_not_read(
    repo: tuple[Path, Path], tmp_path: Path, how: str
) -> None:
    _root, op = repo
    secret = tmp_path / "outside" / "secret.h"
    secret.parent.mkdir()
    # Were it read, its loop and SyncAll would become trace points of the plan.
    secret.write_text("__aicore__ inline void Leak() { for (int leakIdx = 0; leakIdx < 2; ++leakIdx) "
                      "{ AscendC::SyncAll(); } }\n")
    kernel = op / "op_kernel" / "demo_op.cpp"
    calling = KERNEL.replace(b"    Compute(4);\n", b"    Compute(4);\n    Leak();\n")
    kernel.write_bytes(calling)
    if how == "dotdot":
        kernel.write_bytes(calling.replace(b'"extra.h"', b'"../../../outside/secret.h"'))
    else:
        (op / "op_kernel" / "extra.h").symlink_to(secret)
    code, out = cli("plan", str(op), "--format", "json")
    assert code == 0, out
    assert "outside the repository" in out and "leakIdx" not in out and "Leak" not in out, out
    code, out = cli("apply", str(op), "--write")
    if how == "dotdot":
        assert code == 0 and b"TRACE_POINT" not in secret.read_bytes(), out
    else:  # in the operator by its name: refused rather than instrumented as if external
        assert code == 2 and "extra.h: OT047" in out and b"TRACE_POINT" not in secret.read_bytes(), out


def test_a_configured_include_dir_outside_the_repository_is_read_the_rest_is_listed(
    repo: tuple[Path, Path], tmp_path: Path
) -> None:
    """The configured include dirs are part of what may be read: a header
    found there is planned; one reached through `..` beside it, outside both, is not."""
    root, op = repo
    third = tmp_path / "third_party" / "include"
    third.mkdir(parents=True)
    (third / "extra.h").write_text(
        '#include "../../elsewhere/secret.h"\n'
        "__aicore__ inline void Gather() { for (int expertIdx = 0; expertIdx < 2; ++expertIdx) "
        "{ AscendC::SyncAll(); } }\n")
    secret = tmp_path / "elsewhere" / "secret.h"
    secret.parent.mkdir()
    secret.write_text("__aicore__ inline void Leak() { for (int leakIdx = 0; leakIdx < 2; ++leakIdx) "
                      "{ AscendC::SyncAll(); } }\n")
    (root / "optrace.toml").write_text(f'include_dirs = ["{third}"]\n')
    kernel = op / "op_kernel" / "demo_op.cpp"
    kernel.write_bytes(KERNEL.replace(b"    Compute(4);\n", b"    Compute(4);\n    Gather();\n    Leak();\n"))
    code, out = cli("plan", str(op), "--format", "json")
    assert code == 0, out
    includes = json.loads(out)["operators"][0]["includes"]
    assert str(third / "extra.h") in includes["files"]  # the configured dir's header was read
    assert not any("secret.h" in f for f in includes["files"])
    assert any("secret.h" in e and "outside the repository" in e for e in includes["external"]), includes
    assert "leakIdx" not in out


def test_without_a_marker_an_include_outside_the_grandparent_is_listed_not_read(tmp_path: Path) -> None:
    """No `.git` or `optrace.toml`: the grandparent of the operator directory is the root
    for reading; an include climbing out of it is listed, never read."""
    root = tmp_path / "unmarked" / "ops"
    op = root / "demo_op"
    (op / "op_kernel").mkdir(parents=True)
    secret = tmp_path / "secret.h"
    secret.write_text("__aicore__ inline void Leak() { for (int leakIdx = 0; leakIdx < 2; ++leakIdx) "
                      "{ AscendC::SyncAll(); } }\n")
    (op / "op_kernel" / "demo_op.cpp").write_bytes(
        KERNEL.replace(b'"extra.h"', b'"../../../../secret.h"').replace(b"    Compute(4);\n",
                                                                     b"    Compute(4);\n    Leak();\n"))
    code, out = cli("plan", str(op), "--format", "json")
    assert code == 0, out
    assert "outside the repository" in out and "leakIdx" not in out, out
