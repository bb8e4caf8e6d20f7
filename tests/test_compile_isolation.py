"""libclang runs in a child process with a time and a memory bound: a file that crashes it
(templates nested 10,000 deep overflow its stack) or a bound it hits is a finding naming
the file (OT421), never `check` dying with exit 139 or 3; the other files keep their
errors."""

from __future__ import annotations

import tempfile
from pathlib import Path
from unittest import mock

from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine.host_compile import host_compile_bounded

runner = CliRunner()
DEEP = 10_000


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _deep_header(kernel: Path) -> Path:
    return _write(kernel / "deep.h", "#pragma once\ntemplate <typename T> struct W { T v; };\n"
                  f"using Deep = {'W<' * DEEP}int{'>' * DEEP};\n")


def test_check_survives_a_header_that_crashes_libclang(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    kernel = repo / "demo_op" / "op_kernel"
    _deep_header(kernel)
    _write(kernel / "demo_op.cpp", '#include "deep.h"\n'
           'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n'
           "    for (int expertIdx = 0; expertIdx < 8; ++expertIdx) {\n        DataCopy(x, x, 8);\n    }\n"
           "    SyncAll();\n}\n")
    (repo / ".git").mkdir()
    assert runner.invoke(app, ["apply", str(repo / "demo_op"), "--write"]).exit_code == 0
    res = runner.invoke(app, ["check", str(repo / "demo_op")])
    assert res.exit_code == 0, res.stdout + res.stderr
    assert "OT421" in res.stderr and "the compile check crashed (SIG" in res.stderr, res.stderr
    assert "demo_op.cpp" in res.stderr


def test_a_crash_costs_only_its_own_file_and_leaves_nothing_behind(tmp_path: Path) -> None:
    kernel = tmp_path / "op" / "op_kernel"
    _deep_header(kernel)
    crashing = _write(kernel / "a.cpp", '#include "deep.h"\nint a = 1;\n')
    broken = _write(kernel / "b.cpp", "int b = undeclared_name;\n")
    private = tmp_path / "tmp"  # the stand-ins' folders of this call only
    private.mkdir()
    with mock.patch.object(tempfile, "tempdir", str(private)):
        result = host_compile_bounded([crashing, broken], tmp_path / "op")
    assert not list(private.iterdir())  # the crashed child's folder too
    assert [p for p, _ in result.skipped] == [crashing]
    assert "crashed" in result.skipped[0][1]
    assert [e.line for e in result.errors[broken]] == [1]


def test_the_time_bound_is_a_skipped_file_not_a_hang(tmp_path: Path) -> None:
    source = _write(tmp_path / "op" / "op_kernel" / "k.cpp", "int k = 1;\n")
    result = host_compile_bounded([source], tmp_path / "op", seconds=0.0)
    assert result.skipped == [(source, "the compile check took longer than 0 s")]


def test_the_memory_bound_is_a_skipped_file(tmp_path: Path) -> None:
    # A file libclang needs far more than 1 MiB for, whatever the process already mapped.
    text = "".join(f"int k{i} = {i};\n" for i in range(300_000))
    source = _write(tmp_path / "op" / "op_kernel" / "k.cpp", text)
    result = host_compile_bounded([source], tmp_path / "op", memory=1 << 20)
    assert [p for p, _ in result.skipped] == [source]
    # How libclang meets the bound varies (a MemoryError, a failed parse, a crash); every
    # way is the file skipped with the reason, and this process unharmed.
    assert any(w in result.skipped[0][1] for w in ("needed more than", "crashed", "failed", "could not")), \
        result.skipped


def test_within_its_bounds_the_child_gives_the_errors(tmp_path: Path) -> None:
    source = _write(tmp_path / "op" / "op_kernel" / "k.cpp", "int k = 1;\nint j = nope;\n")
    result = host_compile_bounded([source], tmp_path / "op")
    assert not result.skipped and [e.line for e in result.errors[source]] == [2]


def test_the_retries_after_a_bound_share_one_more_bound(tmp_path: Path) -> None:
    """A batch past its time bound is retried file by file within one more bound, not one
    each (a file libclang cannot finish made a check of N files last N + 1 bounds); a file
    left when it is spent is skipped and says so."""
    import time

    files = [_write(tmp_path / "op" / "op_kernel" / f"k{i}.cpp", f"int k{i} = 1;\n") for i in range(3)]
    started = time.monotonic()
    result = host_compile_bounded(files, tmp_path / "op", seconds=0.0)
    assert time.monotonic() - started < 30
    assert [p for p, _ in result.skipped] == files and not result.errors
    assert all("ran out of time" in why for _, why in result.skipped), result.skipped


def test_a_started_compile_answers_after_its_caller_worked_past_the_bound(tmp_path: Path) -> None:
    """check starts libclang and plans meanwhile: the bound counts from the start, and a
    child that answered within it is heard however long the caller took to ask."""
    import time

    from optrace.engine.host_compile import start_host_compile

    source = _write(tmp_path / "op" / "op_kernel" / "k.cpp", "int k = 1;\nint j = nope;\n")
    pending = start_host_compile([source], tmp_path / "op", seconds=20.0)
    time.sleep(0.2)
    result = pending.result()
    assert not result.skipped and [e.line for e in result.errors[source]] == [2]


def test_a_cancelled_compile_leaves_no_child_and_no_folder(tmp_path: Path) -> None:
    import multiprocessing

    from optrace.engine.host_compile import start_host_compile

    source = _write(tmp_path / "op" / "op_kernel" / "k.cpp", "int k = 1;\n")
    private = tmp_path / "tmp"
    private.mkdir()
    with mock.patch.object(tempfile, "tempdir", str(private)):
        pending = start_host_compile([source], tmp_path / "op")
        pending.cancel()
    assert not list(private.iterdir()) and not multiprocessing.active_children()


def test_a_check_that_fails_while_libclang_runs_stops_it(tmp_path: Path) -> None:
    """An error in the plan while the compile child runs (it started after the analysis)
    stops the child and removes its folder: the error is reported as before."""
    import multiprocessing

    import optrace.pipeline.check as check_module

    repo = tmp_path / "repo"
    kernel = repo / "demo_op" / "op_kernel"
    _write(kernel / "demo_op.cpp", 'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n'
           "    for (int expertIdx = 0; expertIdx < 8; ++expertIdx) {\n        DataCopy(x, x, 8);\n    }\n"
           "    SyncAll();\n}\n")
    (repo / ".git").mkdir()
    assert runner.invoke(app, ["apply", str(repo / "demo_op"), "--write"]).exit_code == 0
    private = tmp_path / "tmp"
    private.mkdir()
    started: list[object] = []
    real_start = check_module.start_compile_check

    def start(*args: object) -> object:
        started.append(real_start(*args))  # type: ignore[arg-type]
        return started[-1]

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("a planner bug")

    with mock.patch.object(tempfile, "tempdir", str(private)), \
            mock.patch.object(check_module, "start_compile_check", start), \
            mock.patch.object(check_module, "plan_from_analysis", broken):
        try:
            check_module.check_operator(repo / "demo_op", repo)
        except RuntimeError as exc:
            assert "a planner bug" in str(exc)
        else:
            raise AssertionError("the planner's error was lost")
    assert started, "the compile check did not start before the plan"
    assert not list(private.iterdir()) and not multiprocessing.active_children()


def test_ctrl_c_is_the_parents_to_act_on_not_the_compile_childs(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group; the child ignores it (the parent, planning
    meanwhile, stops it if it stops), so it neither dies as a crash nor prints its own
    traceback."""
    import os
    import signal
    import time

    from optrace.engine.host_compile import start_host_compile

    text = "".join(f"int k{i} = {i};\n" for i in range(60_000)) + "int j = nope;\n"
    source = _write(tmp_path / "op" / "op_kernel" / "k.cpp", text)
    pending = start_host_compile([source], tmp_path / "op")
    time.sleep(0.2)  # libclang takes longer than this on 60,000 lines: the signal comes while it runs
    assert pending.pid is not None
    os.kill(pending.pid, signal.SIGINT)
    result = pending.result()
    assert not result.skipped and [e.line for e in result.errors[source]] == [60_001]
