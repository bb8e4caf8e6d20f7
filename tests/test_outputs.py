"""Issue 14 §3: every user-named output goes through runtime/atomic.py and never destroys
what it replaces — inputs refused, FIFOs, sockets and symlinks refused (no hang, no file
replaced behind a link), devices written through, the target named in every error, the old file intact on any
failure, the user's umask on new files."""

from __future__ import annotations

import errno
import importlib.util
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_in_thread import run_cli
from full_disk import FullDisk, fill_disk
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime.atomic import OutputError, atomic_output, output_target, write_output
from optrace.runtime.demo import write_demo

ROOT = Path(__file__).resolve().parent.parent
KERNEL = (
    b'#include "kernel_operator.h"\n'
    b"__aicore__ inline void Compute(uint32_t n)\n{\n"
    b"    for (uint32_t i = 0; i < n; ++i) {\n        AscendC::SyncAll();\n    }\n}\n"
    b'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
    b"GM_ADDR tiling)\n{\n    Compute(4);\n}\n"
)


def cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.stdout + res.stderr


@pytest.fixture
def umask() -> Iterator[int]:
    old = os.umask(0o027)
    try:
        yield 0o027
    finally:
        os.umask(old)


@pytest.fixture
def operator(tmp_path: Path) -> tuple[Path, Path]:
    repo = tmp_path / "repo"
    kernel = repo / "demo_op" / "op_kernel"
    kernel.mkdir(parents=True)
    (repo / "optrace.toml").write_text("")
    (kernel / "demo_op.cpp").write_bytes(KERNEL)
    return repo / "demo_op", kernel / "demo_op.cpp"


@pytest.fixture
def profiling(tmp_path: Path) -> Path:
    return write_demo(tmp_path / "prof", ranks=1, launches=2, aic=1, seed=3, speedup=0.0).directory


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


# ------------------------------------------------------------------ the helper itself


def test_a_new_file_gets_the_users_umask(tmp_path: Path, umask: int) -> None:
    write_output(tmp_path / "new" / "out.txt", b"x")
    assert stat.S_IMODE(os.stat(tmp_path / "new" / "out.txt").st_mode) == 0o666 & ~umask


def test_a_replaced_file_keeps_its_permission_bits_not_set_id_bits(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_bytes(b"old")
    os.chmod(target, 0o4751)
    write_output(target, b"new")
    assert target.read_bytes() == b"new" and stat.S_IMODE(os.stat(target).st_mode) == 0o751


def test_a_symlink_is_refused_and_the_file_it_points_at_kept(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_bytes(b"old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    with pytest.raises(OutputError, match="is a symbolic link") as err:
        write_output(link, b"new")
    assert err.value.path == str(link)
    assert link.is_symlink() and real.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "real.txt"]


def test_a_dangling_symlink_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "elsewhere" / "x")
    with pytest.raises(OutputError, match="symlink to nothing") as err:
        write_output(link, b"new")
    assert err.value.path == str(link) and not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("kind", ["fifo", "socket", "directory", "link-to-fifo"])
def test_fifos_sockets_and_directories_are_refused_never_replaced(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "out"
    server = None
    if kind == "fifo":
        fifo(target)
    elif kind == "link-to-fifo":
        target.symlink_to(fifo(tmp_path / "pipe"))
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(target))
    else:
        target.mkdir()
    before = os.lstat(target)
    try:
        with pytest.raises(OutputError, match="not a regular file") as err:
            write_output(target, b"data")  # a FIFO would block here: it never gets opened
    finally:
        if server is not None:
            server.close()
    assert str(err.value).startswith(f"{target}: ")
    after = os.lstat(target)
    assert (after.st_ino, stat.S_IFMT(after.st_mode)) == (before.st_ino, stat.S_IFMT(before.st_mode))
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_dev_null_is_written_through() -> None:
    write_output("/dev/null", b"discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize("stdout", ["pipe", "file"])
def test_dev_stdout_is_written_through_as_by_the_shell(tmp_path: Path, stdout: str) -> None:
    """A pipe (which os.stat calls a FIFO) or a file the shell opened: written into, after
    what the process already wrote, never replaced."""
    script = ("import sys; from optrace.runtime.atomic import write_output; "
              "print('first', flush=True); write_output('/dev/stdout', b'second\\n')")
    if stdout == "pipe":
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60, check=True)
        assert done.stdout == b"first\nsecond\n"
        return
    out = tmp_path / "captured.txt"
    with open(out, "wb") as handle:
        subprocess.run([sys.executable, "-c", script], stdout=handle, timeout=60, check=True)
    assert out.read_bytes() == b"first\nsecond\n"


@pytest.mark.parametrize("how", ["same", "hard-link", "symlink"])
def test_an_output_that_is_an_input_is_refused(tmp_path: Path, how: str) -> None:
    source = tmp_path / "input.txt"
    source.write_bytes(b"precious")
    target = source
    if how == "hard-link":
        target = tmp_path / "other-name.txt"
        os.link(source, target)
    elif how == "symlink":
        target = tmp_path / "link.txt"
        target.symlink_to(source)
    with pytest.raises(OutputError, match="is an input of this command"):
        write_output(target, b"clobbered", inputs=[source])
    assert source.read_bytes() == b"precious"


def test_a_failed_write_keeps_the_old_file_and_names_the_target(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_bytes(b"old")
    with pytest.raises(OutputError) as err, atomic_output(target) as handle:
        handle.write(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a full disk does
    assert str(err.value) == f"{target}: cannot write: No space left on device"
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_an_exception_of_the_caller_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    target.write_bytes(b"old")
    with pytest.raises(KeyError), atomic_output(target) as handle:
        handle.write(b"half")
        raise KeyError("boom")
    assert target.read_bytes() == b"old" and len(list(tmp_path.iterdir())) == 1


def test_a_parent_that_is_a_file_names_the_target(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(OutputError) as err:
        write_output(blocker / "sub" / "out.txt", b"x")
    assert err.value.path == str(blocker / "sub" / "out.txt")
    assert ".tmp" not in str(err.value)


def test_output_target_says_what_is_replaced(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_bytes(b"")
    os.chmod(real, 0o640)
    found = output_target(real)
    assert (found.real, found.through, found.mode) == (real, False, 0o640)
    assert output_target("/dev/stdout").through and output_target("/dev/null").through


# ------------------------------------------------------------------ through the CLI


def test_collect_refuses_a_rank_file_or_the_point_map_as_its_output(profiling: Path) -> None:
    for victim in (next(profiling.glob("rank*.pt")), profiling / "point_map.json"):
        before = victim.read_bytes()
        code, out = cli("collect", str(profiling), "-o", str(victim))
        assert code == 2 and f"{victim}: is an input of this command" in out, out
        assert victim.read_bytes() == before


def test_collect_refuses_a_symlink_and_a_fifo_and_writes_dev_null(profiling: Path, tmp_path: Path) -> None:
    real = tmp_path / "traces" / "real.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "trace.json"
    link.symlink_to(real)
    code, out = cli("collect", str(profiling), "-o", str(link))
    assert code == 2 and f"{link}: is a symbolic link" in out, out
    assert link.is_symlink() and real.read_text() == "old"
    assert cli("collect", str(profiling), "-o", "/dev/null", "-j", "2")[0] == 0
    pipe = fifo(tmp_path / "pipe.json")
    code, out = cli("collect", str(profiling), "-o", str(pipe))
    assert code == 2 and f"{pipe}: a FIFO, not a regular file" in out, out
    code, out = cli("collect", str(profiling), "-o", str(pipe), "--split", "rank")
    assert code == 2 and str(pipe) in out
    code, out = cli("collect", str(profiling), "-o", "/dev/null", "--split", "rank")
    assert code == 2 and "/dev/null: --split" in out


def test_collect_split_refuses_a_part_that_is_a_fifo(profiling: Path, tmp_path: Path) -> None:
    rank = next(profiling.glob("rank*.pt")).name[:7]  # a part per rank: "rank000", all its launches
    pipe = fifo(tmp_path / f"trace.{rank}.json")
    code, out = cli("collect", str(profiling), "-o", str(tmp_path / "trace.json"), "--split", "rank")
    assert code == 2 and f"{pipe}: a FIFO" in out, out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prof", pipe.name]


def test_report_refuses_to_write_over_the_trace_it_reads(profiling: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    assert cli("collect", str(profiling), "-o", str(trace))[0] == 0
    before = trace.read_bytes()
    code, out = cli("report", str(trace), "--html", str(trace))
    assert code == 2 and f"{trace}: is an input of this command" in out
    assert trace.read_bytes() == before
    code, out = cli("report", str(profiling), "--html", str(profiling / "point_map.json"))
    assert code == 2 and "is an input of this command" in out


# Without matplotlib `report --png` stops before it looks at its output (it says how to
# get the extra; tests/runtime/test_analysis.py), so these need it to reach the output.
needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None,
    reason="report --png needs matplotlib, the [report] extra (pip install 'ascend-optrace[report]'), "
    "not installed here")


@needs_matplotlib
@pytest.mark.parametrize("case", ["new", "replace", "symlink", "dev-null", "the-trace", "the-point-map",
                                  "fifo", "directory", "parent-is-a-file", "rename-fails"])
def test_report_png_through_the_cli(
    profiling: Path, tmp_path: Path, umask: int, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """`report --png` gets runtime/atomic.py's promises through the CLI: a new file with
    the umask, a replaced one keeping its permission bits, devices written
    through, an input / FIFO / directory / symlink refused before anything is read, the old file
    intact when the write fails."""
    trace = tmp_path / "trace.json"
    assert cli("collect", str(profiling), "-o", str(trace))[0] == 0
    source = trace if case == "the-trace" else profiling
    png = {"new": tmp_path / "new" / "r.png", "replace": tmp_path / "r.png", "symlink": tmp_path / "link.png",
           "dev-null": Path("/dev/null"), "the-trace": trace, "the-point-map": profiling / "point_map.json",
           "fifo": tmp_path / "pipe.png", "directory": tmp_path / "dir.png",
           "parent-is-a-file": tmp_path / "a-file" / "r.png", "rename-fails": tmp_path / "r.png"}[case]
    real = tmp_path / "real.png"
    if case in ("replace", "rename-fails"):
        png.write_bytes(b"the old picture")
        os.chmod(png, 0o4751)
    elif case == "symlink":
        real.write_bytes(b"the old picture")
        png.symlink_to(real)
    elif case == "fifo":
        os.mkfifo(png)
    elif case == "directory":
        png.mkdir()
    elif case == "parent-is-a-file":
        png.parent.write_text("a regular file")
    if case == "rename-fails":  # the helper's own last step, as a full disk would fail it
        def failing_rename(src: object, dst: object) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        monkeypatch.setattr(os, "replace", failing_rename)
    kept = {p: p.read_bytes() for p in (trace, profiling / "point_map.json")}
    code, out = cli("report", str(source), "--png", str(png))
    assert "Traceback" not in out
    written = png
    if case in ("new", "replace", "dev-null"):
        assert code == 0 and f"wrote {png}" in out, out
        if case != "dev-null":
            assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if case == "new":
            assert stat.S_IMODE(os.stat(png).st_mode) == 0o666 & ~umask
        if case == "replace":
            assert stat.S_IMODE(os.stat(png).st_mode) == 0o751  # not the set-id bit
    else:
        why = {"the-trace": "is an input of this command", "the-point-map": "is an input of this command",
               "symlink": "is a symbolic link",
               "fifo": "a FIFO, not a regular file", "directory": "a directory",
               "parent-is-a-file": f"cannot write: {png.parent} is not a directory",
               "rename-fails": "cannot write: No space left on device"}[case]
        assert code == 2 and f"{png}: " in out and why in out, out
        assert "hotspots" not in out or case == "rename-fails", out  # refused before the report
        assert ".tmp" not in out, out  # the target is named, not a temporary
        if case == "rename-fails":
            assert png.read_bytes() == b"the old picture"
            assert sorted(p.name for p in tmp_path.iterdir()) == ["prof", "r.png", "trace.json"]
        if case == "symlink":
            assert png.is_symlink() and real.read_bytes() == b"the old picture"
    assert {p: p.read_bytes() for p in kept} == kept


@pytest.mark.parametrize("command", [["plan", "-o"], ["check", "--no-compile", "-o"], ["apply", "--patch"],
                                     ["strip", "--patch"], ["plan", "--graph"]])
def test_source_commands_refuse_a_source_as_their_output(
    operator: tuple[Path, Path], command: list[str]
) -> None:
    op, source = operator
    code, out = cli(command[0], str(op), *command[1:], str(source))
    if "--graph" in command:  # refused by its suffix first, before any work
        assert code == 2 and f"{source}: OT030 the graph's format is chosen by its suffix" in out, out
        alias = source.with_name("kernel-graph.dot")  # a graph's name, the source's bytes
        os.link(source, alias)
        code, out = cli(command[0], str(op), *command[1:], str(alias))
        assert code == 2 and f"{alias}: OT030 is an input of this command" in out, out
        alias.unlink()
    else:
        assert code == 2 and f"{source}: OT030 is an input of this command" in out, out
    assert source.read_bytes() == KERNEL


@pytest.mark.parametrize("command", [["plan", "-o"], ["check", "--no-compile", "-o"], ["apply", "--patch"]])
def test_source_commands_refuse_a_fifo_without_hanging(
    operator: tuple[Path, Path], tmp_path: Path, command: list[str]
) -> None:
    op, _ = operator
    pipe = fifo(tmp_path / "out.fifo")
    result: list[tuple[int, str]] = []
    worker = threading.Thread(target=lambda: result.append(cli(command[0], str(op), *command[1:], str(pipe))))
    worker.start()
    worker.join(timeout=120)
    if worker.is_alive():  # release the blocked open before failing
        os.close(os.open(pipe, os.O_RDONLY | os.O_NONBLOCK))
        pytest.fail("the FIFO was opened: the command hung")
    code, out = result[0]
    assert code == 2 and f"{pipe}: OT030 a FIFO, not a regular file" in out


def test_apply_patch_refuses_a_symlink(operator: tuple[Path, Path], tmp_path: Path) -> None:
    op, source = operator
    real = tmp_path / "patches" / "p.patch"
    real.parent.mkdir()
    real.write_bytes(b"an older patch\n")
    link = tmp_path / "p.patch"
    link.symlink_to(real)
    code, out = cli("apply", str(op), "--patch", str(link))
    assert code == 2 and f"{link}: OT030 is a symbolic link" in out, out
    assert link.is_symlink() and real.read_bytes() == b"an older patch\n"
    assert source.read_bytes() == KERNEL


UMDK = Path(__file__).resolve().parents[1] / "fixtures" / "umdk_style"
UMDK_OP = Path("src/cam/comm_operator/ascend_kernels/moe_fused_gmm")
#: Host-layer files of the bundled operator, outside its directory: every one is read by
#: plan, check, apply and strip (discovery finds them), so none may be an output.
HOST_FILES = ["src/cam/comm_operator/pybind/pybind.cpp", "src/cam/comm_operator/pybind/moe_fused_gmm.cpp",
              "src/cam/examples/moe_fused_gmm_sample.py", "build/cam/comm_operator/compile_ascend_proj.sh",
              "optrace.toml"]


@pytest.fixture(scope="module")
def umdk_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("umdk") / "repo"
    shutil.copytree(UMDK, root, symlinks=True)
    return root


@pytest.mark.parametrize("victim", HOST_FILES)
@pytest.mark.parametrize("command", [["plan", "-o"], ["check", "--no-compile", "-o"], ["apply", "--patch"],
                                     ["strip", "--patch"], ["plan", "--graph"],
                                     ["plan", "-j", "2", "--graph"]])
def test_no_output_replaces_a_host_layer_file_or_the_config(
    umdk_copy: Path, command: list[str], victim: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside the operator directory too: a file any part of the run read (found by
    discovery, the config) is refused by identity, through a hard link as well, and the
    run writes nothing."""
    monkeypatch.chdir(umdk_copy)
    before = {p: p.read_bytes() for p in umdk_copy.rglob("*") if p.is_file()}
    graph = "--graph" in command
    # A graph's suffix says its format: the link named as a graph reaches the identity check.
    alias = Path("alias-of-" + (Path(victim).stem + ".dot" if graph else Path(victim).name))
    for target in (Path(victim), alias):
        if target == alias:
            os.link(victim, target)
        try:
            code, out = cli(command[0], str(UMDK_OP), *command[1:], str(target))
        finally:
            if target == alias:
                target.unlink()
        if graph and target != alias:  # refused before any work: no graph is a .cpp / .py / .sh / .toml
            assert code == 2 and f"{target}: OT030 the graph's format is chosen by its suffix" in out, out
        else:
            assert code == 2 and f"{target}: OT030 is an input of this command" in out, out
        after = {p: p.read_bytes() for p in umdk_copy.rglob("*") if p.is_file()}
        assert after == before  # nothing written: no graph, no patch, no report


def test_an_output_beside_the_sources_is_still_written(
    umdk_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(umdk_copy)
    graph = "src/cam/comm_operator/pybind/graph.dot"
    code, out = cli("plan", str(UMDK_OP), "-o", "plan.txt", "--graph", graph)
    try:
        assert code == 0, out
        assert "moe_fused_gmm" in Path("plan.txt").read_text()
        assert Path(graph).read_text().startswith("digraph")
    finally:
        Path("plan.txt").unlink(missing_ok=True)
        Path(graph).unlink(missing_ok=True)


def test_preprocess_writes_the_point_map_with_the_umask_not_0600(tmp_path: Path, umask: int) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "k.cpp").write_text('void f() { TRACE_POINT("processing", B); TRACE_POINT("processing", E); }\n')
    out = tmp_path / "out"
    code, text = cli("preprocess", str(src), "--out", str(out))
    assert code == 0, text
    assert stat.S_IMODE(os.stat(out / "point_map.json").st_mode) == 0o666 & ~umask


def test_preprocess_refuses_a_point_map_that_is_a_source(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    source = src / "k.cpp"
    source.write_text('void f() { TRACE_POINT("processing", B); TRACE_POINT("processing", E); }\n')
    out = tmp_path / "out"
    out.mkdir()
    (out / "point_map.json").symlink_to(source)
    before = source.read_bytes()
    code, text = cli("preprocess", str(src), "--out", str(out))
    assert code == 2 and f"{out / 'point_map.json'}: OT206 is an input of this command" in text, text
    assert source.read_bytes() == before


def test_no_other_module_renames_files_into_place() -> None:
    """One output helper: os.replace appears only in it, in the engine's journalled
    commit, and in collect's multi-file rename (which checks its targets with it); no
    user-named path is written with write_text."""
    allowed = {"runtime/atomic.py", "engine/transaction.py", "runtime/trace_files.py",
               # files in directories these modules made themselves (a compile shim, the
               # rule examples' scratch repositories, the user cache's entries), never a user-named path
               "engine/host_compile.py", "pipeline/rule_examples.py", "runtime/usercache.py",
               # a dataset's marker file, inside the temporary directory atomic.py made
               "runtime/dataset.py"}
    found = set()
    folders = [ROOT / f for f in ("engine", "rules", "codemods", "runtime", "pipeline")]
    for path in [p for f in folders for p in f.rglob("*.py")] + list((ROOT / "optrace").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "os.replace(" in text or "mkstemp(" in text or ".write_text(" in text:
            found.add(path.relative_to(ROOT).as_posix())
    assert found <= allowed, found - allowed


@pytest.mark.parametrize("split", [None, "rank"])
def test_a_full_disk_during_collect_names_the_output_not_a_temporary(
    profiling: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: str | None
) -> None:
    from optrace.runtime.chrome import EventSink

    out = tmp_path / "out" / "trace.json"
    out.parent.mkdir()
    previous = out.with_name(f"trace.{sorted(profiling.glob('rank*.pt'))[0].stem}.json") if split else out
    previous.write_text("the previous trace")

    def full(self: object, rendered: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(EventSink, "write_rendered", full)
    code, text = cli("collect", str(profiling), "-o", str(out), *(["--split", split] if split else []))
    assert code == 2 and "No space left on device" in text and ".tmp" not in text, text
    assert f"{previous}: cannot write" in text if split else f"{out}: cannot write" in text, text
    assert previous.read_text() == "the previous trace"
    assert sorted(p.name for p in out.parent.iterdir()) == [previous.name]


def _split_run(tmp_path: Path, split: str, suffix: str) -> tuple[Path, list[Path]]:
    """Three rank files (three ranks for `--split rank`, a part per rank; three launches of
    one rank by size); the output and the parts a whole `collect --split` makes of them."""
    ranks, launches = (3, 1) if split == "rank" else (1, 3)
    profiling = write_demo(tmp_path / "prof3", ranks=ranks, launches=launches, aic=1, seed=3,
                           speedup=0.0).directory
    clean = tmp_path / "clean"
    clean.mkdir()
    code, text = cli("collect", str(profiling), "-o", str(clean / f"trace{suffix}"), "--split", split)
    assert code == 0, text
    parts = sorted(clean.iterdir())
    assert len(parts) == 3, parts
    return profiling, parts


@pytest.mark.parametrize("suffix", [".json", ".pftrace.gz"])
@pytest.mark.parametrize("split", ["1k", "rank"])
def test_a_full_disk_at_any_point_of_collect_split_names_the_part_never_a_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, split: str, suffix: str
) -> None:
    """ENOSPC from the write system call (tests/full_disk.py) at the first byte, inside a
    part, at the first byte of the second part and at the last byte of all: the error
    names the part being written as the user will see it, never `.….part.tmp`; the parts
    of an earlier run stay as they were, no temporary is left, and a rerun on a disk with
    room writes them all."""
    profiling, parts = _split_run(tmp_path, split, suffix)
    sizes = [p.stat().st_size for p in parts]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    total = sum(sizes)
    out = tmp_path / "out"
    out.mkdir()
    output = out / f"trace{suffix}"
    for part in parts:  # an earlier run's parts
        (out / part.name).write_bytes(b"the previous part")
    disk = fill_disk(monkeypatch, None)
    for budget in (0, sizes[0] // 2, starts[1], total - 1):
        disk.left, disk.used = budget, 0
        code, text = cli("collect", str(profiling), "-o", str(output), "--split", split)
        failing = out / parts[max(i for i, start in enumerate(starts) if start <= budget)].name
        assert code == 2, (budget, text)
        assert f"{failing}: cannot write: No space left on device" in text, (budget, text)
        assert ".tmp" not in text, (budget, text)
        assert sorted(p.name for p in out.iterdir()) == [p.name for p in parts], budget
        assert all((out / p.name).read_bytes() == b"the previous part" for p in parts), budget
    disk.left = None
    code, text = cli("collect", str(profiling), "-o", str(output), "--split", split)
    assert code == 0, text
    assert [(out / p.name).stat().st_size for p in parts] == sizes


@pytest.mark.parametrize("which", ["first", "last"])
def test_a_part_that_cannot_take_its_name_is_named_not_its_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    """Every part is complete and the renames into place begin (the last step): a rename
    failing names the part it was to become."""
    profiling, parts = _split_run(tmp_path, "1k", ".json")
    out = tmp_path / "out"
    out.mkdir()
    renames: list[str] = []
    real_replace = os.replace

    def replace(src: str | Path, dst: str | Path) -> None:
        if ".tmp" not in Path(dst).name:  # a part's own name, not the temporary it is written as
            renames.append(Path(dst).name)
            if which == "first" or len(renames) == len(parts):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    code, text = cli("collect", str(profiling), "-o", str(out / "trace.json"), "--split", "1k")
    assert code == 2 and f"{out / renames[-1]}: cannot write: No space left on device" in text, text
    assert ".tmp" not in text, text
    # The parts renamed before the failing one are the new run's: what is left is whole
    # traces, never a temporary.
    assert all(".tmp" not in p.name for p in out.iterdir())


@pytest.mark.parametrize("suffix", [".json.gz", ".pftrace.gz"])
def test_a_gzipped_trace_does_not_carry_its_temporary_name(
    profiling: Path, tmp_path: Path, suffix: str
) -> None:
    """gzip puts the name of the file it writes into its header, and that file is the
    temporary one (`gunzip -N` would restore it): no name, so the same run gives the
    same bytes too."""
    made = []
    for run in ("a", "b"):
        output = tmp_path / run / f"trace{suffix}"
        output.parent.mkdir()
        assert cli("collect", str(profiling), "-o", str(output))[0] == 0
        parts = tmp_path / run / "parts"
        parts.mkdir()
        assert cli("collect", str(profiling), "-o", str(parts / f"trace{suffix}"), "--split", "rank")[0] == 0
        made.append([output.read_bytes(), *(p.read_bytes() for p in sorted(parts.iterdir()))])
    for data in made[0]:
        assert data[:2] == b"\x1f\x8b" and not data[3] & 0x08, data[:40]  # FNAME: no name stored
        assert b".tmp" not in data[:200]
    assert made[0] == made[1]


# ------------------------------------------------------------------ demo-data: all or nothing

DEMO = ("--ranks", "2", "--launches", "2", "--aic", "1")
DEMO_NAMES = ["rank000.pt", "rank001.pt", "rank000_launch1.pt", "rank001_launch1.pt"]  # as written


def tree(*roots: Path) -> dict[str, object]:
    """Every entry under the roots (the roots' own listings included): links as links,
    files byte for byte — a temporary left behind counts as a difference."""
    found: dict[str, object] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = Path(dirpath) / name
                if path.is_symlink():
                    found[str(path)] = ("link", os.readlink(path))
                elif stat.S_ISREG(path.lstat().st_mode):
                    found[str(path)] = ("file", path.read_bytes())
                else:
                    found[str(path)] = ("other", stat.S_IFMT(path.lstat().st_mode))
    return found


def demo_written(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("planted", [
    "fifo", "directory", "symlink", "dangling-symlink", "rank-file-directory"])
def test_demo_data_refuses_what_is_planted_at_its_names_and_writes_nothing(
    tmp_path: Path, planted: str
) -> None:
    """Before: a FIFO or a directory at point_map.json failed after 2-6 rank files were
    written (and a rerun was refused: rank files there); a symlink there was followed and
    the file outside overwritten (exit 0). Now each is refused before anything is
    written, and once it is gone a rerun writes the whole directory."""
    target = tmp_path / "demo"
    target.mkdir()
    outside = tmp_path / "outside.json"
    outside.write_text("the user's file")
    place = target / ("rank000_launch1.pt" if planted == "rank-file-directory" else "point_map.json")
    if planted == "fifo":
        os.mkfifo(place)
    elif planted in ("directory", "rank-file-directory"):
        place.mkdir()
    elif planted == "symlink":
        place.symlink_to(outside)
    else:
        place.symlink_to(tmp_path / "nothing-here.json")
    before = tree(tmp_path)
    code, text = run_cli("demo-data", target, *DEMO, timeout=60)
    assert code == 2, text
    assert f"{place}: " in text and "is there already; not overwritten" in text, text
    assert ".tmp" not in text
    assert tree(tmp_path) == before
    assert outside.read_text() == "the user's file"
    if place.is_dir() and not place.is_symlink():
        place.rmdir()
    else:
        place.unlink()
    code, text = run_cli("demo-data", target, *DEMO, timeout=60)
    assert code == 0, text
    assert len([n for n in demo_written(target) if n.endswith(".pt")]) == 4
    assert "point_map.json" in demo_written(target)


def test_demo_data_does_not_follow_a_symlink_at_the_target(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "demo").symlink_to(elsewhere, target_is_directory=True)
    code, text = cli("demo-data", str(tmp_path / "demo"), *DEMO)
    assert code == 2 and f"{tmp_path / 'demo'}: a symlink; not followed" in text, text
    assert list(elsewhere.iterdir()) == []
    (tmp_path / "file").write_text("x")
    code, text = cli("demo-data", str(tmp_path / "file"), *DEMO)
    assert code == 2 and f"{tmp_path / 'file'}: not a directory" in text, text


def _demo_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FullDisk, list[tuple[str, int]]]:
    """The files a demo-data run writes, in order, with the bytes written into each (the
    zip format rewrites its headers: more than the file's size), on a disk with room."""
    disk = fill_disk(monkeypatch, None)
    clean = tmp_path / "clean"
    assert cli("demo-data", str(clean), *DEMO)[0] == 0
    # Each is written under a temporary name beside itself: `.NAME.PID.RANDOM.tmp`.
    writes = [(re.sub(r"^\.(.*)\.\d+\.[0-9a-f]{8}\.tmp$", r"\1", Path(name).name), counted[0])
              for name, counted in disk.files]
    assert [name for name, _ in writes] == [*DEMO_NAMES, "point_map.json"]
    return disk, writes


@pytest.mark.parametrize("target_is", [
    "new", "new-relative", "new-with-parents", "empty", "holding-other-files"])
def test_demo_data_on_a_full_disk_changes_nothing_and_a_rerun_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target_is: str
) -> None:
    """ENOSPC from the write system call (tests/full_disk.py) in the first rank file,
    after two, in the last one and at the point map's last byte: exit 2 naming the
    file under the target (never the temporary directory), the target as it was (not
    made, or empty / its files as they were; parents made for it removed), and a rerun
    with room writes everything. Before: 2-6 rank files were left and the rerun refused."""
    disk, writes = _demo_writes(tmp_path, monkeypatch)
    names, sizes = [name for name, _ in writes], [size for _, size in writes]
    work = tmp_path / "work"
    work.mkdir()
    target = work / "a" / "b" / "demo" if target_is == "new-with-parents" else work / "demo"
    if target_is == "new-relative":  # as typed: the message names it so, not the resolved temporary
        monkeypatch.chdir(work)
        target = Path("demo")
    if target_is in ("empty", "holding-other-files"):
        target.mkdir()
    if target_is == "holding-other-files":
        (target / "README").write_text("the user's notes")
    before = tree(work)
    for budget in (0, sizes[0] // 2, sizes[0] + sizes[1], sum(sizes[:3]) + 7, sum(sizes) - 1):
        disk.left = budget
        code, text = cli("demo-data", str(target), *DEMO)
        failing = names[max(i for i in range(len(sizes)) if sum(sizes[:i]) <= budget)]
        assert code == 2, (budget, text)
        assert f"{target / failing}: cannot write: No space left on device" in text, (budget, text)
        assert ".tmp" not in text, (budget, text)
        assert tree(work) == before, budget
    disk.left = None
    code, text = cli("demo-data", str(target), *DEMO)
    assert code == 0, text
    kept = ["README"] if target_is == "holding-other-files" else []
    assert sorted([*names, *kept]) == demo_written(target)


@pytest.mark.parametrize("target_is", ["new", "empty"])
def test_demo_data_failing_to_move_its_files_into_place_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target_is: str
) -> None:
    """The last step fails: the temporary directory's rename onto a new target, or (into
    an existing directory) the third file's move. The files moved already are taken
    back: the target is as it was, and the error names it or the file."""
    target = tmp_path / "demo"
    if target_is == "empty":
        target.mkdir()
    before = tree(tmp_path)
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if target_is == "new":
        def rename(src: object, dst: object) -> None:
            raise OSError(full.errno, full.strerror, src, None, dst)
        monkeypatch.setattr(os, "rename", rename)
        shown = f"{target}: cannot write: No space left on device"
    else:
        moved: list[object] = []
        real_link = os.link

        def link(src: object, dst: object, **kwargs: object) -> None:
            moved.append(dst)
            if len(moved) == 3:
                raise OSError(full.errno, full.strerror, src, None, dst)
            real_link(src, dst, **kwargs)  # type: ignore[arg-type]
        monkeypatch.setattr(os, "link", link)
        shown = "rank000_launch1.pt: cannot write: No space left on device"
    code, text = cli("demo-data", str(target), *DEMO)
    assert code == 2 and shown in text and ".tmp" not in text, text
    assert tree(tmp_path) == before


def test_demo_data_into_the_current_directory_keeps_that_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An existing directory is filled in place, not replaced: a shell inside it (here,
    the working directory) still sees the files."""
    target = tmp_path / "demo"
    target.mkdir(mode=0o750)
    inode = target.stat().st_ino
    monkeypatch.chdir(target)
    code, text = cli("demo-data", ".", *DEMO)
    assert code == 0, text
    assert demo_written(Path(".")) == sorted([*DEMO_NAMES, "point_map.json"])
    assert target.stat().st_ino == inode and stat.S_IMODE(target.stat().st_mode) == 0o750
