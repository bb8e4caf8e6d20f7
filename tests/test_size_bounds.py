"""Issue 14 §4: every kind of input has a size bound, and only the user sets it.

runtime/regular.py bounds each kind — source, config, point_map, rank, trace — by
`[limits] <kind>_bytes` in the user-level config (`$XDG_CONFIG_HOME/optrace/config.toml`).
A file past its bound is refused before a byte of it is read: `path: N bytes, past the
B-byte bound for a K file`, exit 2, no traceback, nothing written; a gzipped trace is
bounded by what it expands to as well, without expanding it whole. A tiny bound in a
temporary user config stands in for a huge file. A repository's `optrace.toml` /
`pyproject.toml` can neither raise nor lower a bound: a clone must not be able to make
optrace read a 50 GB file, nor turn it away from the user's own files.
"""

from __future__ import annotations

import functools
import gzip
import os
import subprocess
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_in_thread import run_cli

from optrace.runtime.demo import write_demo
from optrace.runtime.regular import TooLarge, read_maybe_gzip

KERNEL = (
    b'#include "kernel_operator.h"\n#include "extra.h"\n'
    b"__aicore__ inline void Compute(uint32_t n)\n{\n"
    b"    for (uint32_t groupIdx = 0; groupIdx < n; ++groupIdx) {\n        AscendC::SyncAll();\n    }\n}\n"
    b'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
    b"GM_ADDR tiling)\n{\n    Compute(4);\n}\n"
)
#: A repository config that would lower every bound to nothing and raise none: read as
#: the user's, it would refuse every file.
LOWERING = "".join(f"{kind}_bytes = 1\n" for kind in ("source", "config", "point_map", "rank", "trace"))


# The CLI on a thread with a time limit (tests/cli_in_thread.py); 180 s here.
cli = functools.partial(run_cli, timeout=180)


def snapshot(*roots: Path) -> dict[str, bytes | None]:
    """Every file and directory under the roots (directories as None)."""
    found: dict[str, bytes | None] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames:
                found[os.path.join(dirpath, name)] = None
            for name in filenames:
                found[os.path.join(dirpath, name)] = Path(dirpath, name).read_bytes()
    return found


def refused(code: int, out: str, path: Path, kind: str, bound: int) -> None:
    """Exit 2 naming the file, its size and the bound it is past; no traceback."""
    assert "Traceback" not in out and code == 2, f"exit {code}:\n{out[-3000:]}"
    size = path.stat().st_size
    assert f"{path}: " in out and f"{size} bytes, past the {bound}-byte bound for a {kind} file" in out, out
    assert f"`[limits] {kind}_bytes` in " in out, out  # says where the user raises it


Limits = Callable[..., None]


@pytest.fixture
def limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Limits:
    """Write `[limits]` to a user-level config of this test's own (XDG_CONFIG_HOME)."""
    config = tmp_path / "user-config" / "optrace" / "config.toml"
    config.parent.mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "user-config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "user-state"))
    stamp = [1_000_000_000]

    def write(**bounds: int) -> None:
        config.write_text("[limits]\n" + "".join(f"{k}_bytes = {v}\n" for k, v in bounds.items()))
        # The bounds are cached per (path, mtime): a new mtime each time, however fast.
        stamp[0] += 10
        os.utime(config, (stamp[0], stamp[0]))

    return write


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "repo"
    kernel = root / "demo_op" / "op_kernel"
    kernel.mkdir(parents=True)
    (kernel / "demo_op.cpp").write_bytes(KERNEL)
    (kernel / "extra.h").write_bytes(b"// nothing here\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root, root / "demo_op"


@pytest.fixture
def profiling(tmp_path: Path) -> Path:
    return write_demo(tmp_path / "prof", ranks=2, launches=1, aic=1, seed=3, speedup=0.0).directory


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The demo profiling directory collected as each trace format report reads."""
    tmp = tmp_path_factory.mktemp("traces")
    made = write_demo(tmp / "prof", ranks=2, launches=1, aic=1, seed=3, speedup=0.0)
    found = {}
    for name in ("trace.json", "trace.json.gz", "trace.pftrace"):
        code, out = cli("collect", made.directory, "-o", tmp / name)
        assert code == 0, out
        found[name] = (tmp / name).read_bytes()
    return found


# ------------------------------------------------------------------------------ configs


def _big_config(root: Path, name: str) -> Path:
    """Valid TOML with the right table and keys, well past a 200-byte bound: refused by
    its size, not by what it says."""
    config = root / name
    table = "[tool.optrace]\n" if name == "pyproject.toml" else ""
    config.write_text(table + 'include_dirs = ["op_kernel"]\n' + "# padding\n" * 100)
    return config


@pytest.mark.parametrize("name", ["optrace.toml", "pyproject.toml"])
@pytest.mark.parametrize("args", [["plan"], ["plan", "--format", "json"], ["apply"], ["apply", "--write"],
                                  ["apply", "--check"], ["apply", "--patch", "{tmp}/p.patch"]])
def test_a_config_past_the_bound_is_refused_before_it_is_read(
    repo: tuple[Path, Path], tmp_path: Path, limits: Limits, name: str, args: list[str]
) -> None:
    root, op = repo
    config = _big_config(root, name)
    limits(config=200)
    (tmp_path / "p.patch").write_bytes(b"the user's patch from before\n")
    before = snapshot(root, tmp_path / "p.patch")
    command = [args[0], op, *(a.format(tmp=tmp_path) for a in args[1:])]
    code, out = cli(*command)
    refused(code, out, config, "config", 200)
    assert f"{config}: OT001 cannot read: " in out, out
    # Not even an empty patch over the user's file (apply --patch wrote one before).
    assert snapshot(root, tmp_path / "p.patch") == before, "something was written"
    limits(config=100_000)  # the user raises it: the same config is read
    code, out = cli(*command)
    assert code in (0, 1) and "OT001" not in out, out


@pytest.mark.parametrize("name", ["optrace.toml", "pyproject.toml"])
def test_check_names_a_config_past_the_bound_as_an_error(
    repo: tuple[Path, Path], limits: Limits, name: str
) -> None:
    """On an instrumented operator the config is an error of the check (exit 1, as every
    finding); the operator is checked no further than its files' own points."""
    root, op = repo
    assert cli("apply", op, "--write")[0] == 0
    config = _big_config(root, name)
    limits(config=200)
    before = snapshot(root)
    code, out = cli("check", op, "--no-compile")
    assert "Traceback" not in out and code == 1, out
    # check names files as they are reached from where it runs (here: absolute)
    size = config.stat().st_size
    assert f"{config}: OT001 cannot read: {size} bytes, past the 200-byte bound" in out, out
    assert snapshot(root) == before


# ----------------------------------------------------------------------------- point maps


@pytest.mark.parametrize("command", ["collect", "collect --point-map", "report", "report --html", "compare"])
def test_a_point_map_past_the_bound_is_refused(
    profiling: Path, tmp_path: Path, limits: Limits, command: str
) -> None:
    point_map = profiling / "point_map.json"
    if "--point-map" in command:  # named by the option, outside the directory
        point_map = point_map.rename(tmp_path / "elsewhere.json")
    out_path = tmp_path / ("r.html" if "html" in command else "t.json")
    args: list[object] = {
        "collect": ["collect", profiling, "-o", out_path],
        "collect --point-map": ["collect", profiling, "-o", out_path, "--point-map", point_map],
        "report": ["report", profiling],
        "report --html": ["report", profiling, "--html", out_path],
        "compare": ["compare", profiling, profiling],
    }[command]
    limits(point_map=100)
    code, out = cli(*args)
    refused(code, out, point_map, "point_map", 100)
    assert not out_path.exists()
    limits(point_map=point_map.stat().st_size)  # at the bound exactly: read
    code, out = cli(*args)
    assert code in (0, 1) and "-byte bound" not in out, out


# ----------------------------------------------------------------------------- rank files


@pytest.mark.parametrize("command", ["collect", "inspect", "inspect-file", "report"])
def test_a_rank_file_past_the_bound_is_named_never_read_and_the_others_kept(
    profiling: Path, tmp_path: Path, limits: Limits, command: str
) -> None:
    ranks = sorted(profiling.glob("rank*.pt"))
    victim = ranks[0]
    # Garbage, so a read would say "not a zip-format .pt file": the size is judged first.
    victim.write_bytes(b"\x00" * (ranks[1].stat().st_size + 1))
    limits(rank=ranks[1].stat().st_size)
    out_path = tmp_path / "t.json"
    args: list[object] = {"collect": ["collect", profiling, "-o", out_path],
                          "inspect": ["inspect", profiling], "inspect-file": ["inspect", victim],
                          "report": ["report", profiling]}[command]
    code, out = cli(*args)
    assert "Traceback" not in out and "zip" not in out, out
    size = victim.stat().st_size
    assert f"{victim}: " in out, out
    assert f"{size} bytes, past the {size - 1}-byte bound for a rank file" in out, out
    # A bad rank file is named and the others are used (docs/faults.md): collect and
    # inspect exit 2 with what they could read, report goes on from the other rank.
    assert code == (0 if command == "report" else 2), out
    if command == "collect":
        assert out_path.exists() and "1 ranks" in out, out
    if command == "inspect":
        assert f"{ranks[1].name}: optrace format" in out, out


@pytest.mark.parametrize("command", ["collect", "inspect", "report", "compare"])
def test_every_rank_file_past_the_bound_writes_nothing(
    profiling: Path, tmp_path: Path, limits: Limits, command: str
) -> None:
    limits(rank=1000)
    out_path = tmp_path / "t.json"
    args: list[object] = {"collect": ["collect", profiling, "-o", out_path],
                          "inspect": ["inspect", profiling], "report": ["report", profiling],
                          "compare": ["compare", profiling, profiling]}[command]
    code, out = cli(*args)
    for rank in profiling.glob("rank*.pt"):
        assert f"{rank}: " in out and "past the 1000-byte bound for a rank file" in out, out
    assert "Traceback" not in out and code == 2, out
    assert not out_path.exists()


# ---------------------------------------------------------------------------------- traces


@pytest.mark.parametrize("name", ["trace.json", "trace.json.gz", "trace.pftrace"])
@pytest.mark.parametrize("command", ["report", "report --html", "compare", "compare-second", "inspect"])
def test_a_trace_past_the_bound_is_refused(
    traces: dict[str, bytes], tmp_path: Path, limits: Limits, name: str, command: str
) -> None:
    trace = tmp_path / name
    trace.write_bytes(traces[name])
    other = tmp_path / "other.json"  # compare's other side: a trace within the bound
    other.write_text('{"traceEvents": []}')
    html = tmp_path / "r.html"
    args: list[object] = {
        "report": ["report", trace], "report --html": ["report", trace, "--html", html],
        "compare": ["compare", trace, other], "compare-second": ["compare", other, trace],
        "inspect": ["inspect", trace],
    }[command]
    bound = trace.stat().st_size - 1  # one byte too many
    limits(trace=bound)
    code, out = cli(*args)
    refused(code, out, trace, "trace", bound)
    assert not html.exists()
    # Within the bound, of the file and of what it expands to: read.
    limits(trace=len(gzip.decompress(traces[name])) if name.endswith(".gz") else bound + 1)
    code, out = cli(*args)
    assert "-byte bound" not in out and "Traceback" not in out, out


def test_a_framework_trace_to_merge_past_the_bound_is_refused(
    profiling: Path, traces: dict[str, bytes], tmp_path: Path, limits: Limits
) -> None:
    framework = tmp_path / "trace_view.json"
    framework.write_bytes(traces["trace.json"])
    out_path = tmp_path / "t.json"
    limits(trace=1000)
    code, out = cli("collect", profiling, "-o", out_path, "--merge", framework)
    refused(code, out, framework, "trace", 1000)
    assert "[Errno" not in out and not out_path.exists(), out


def _gzip_of_zeros(total: int, prefix: bytes = b'{"traceEvents": [') -> bytes:
    """A gzip member of `total` bytes that are mostly zeros, built a MiB at a time (the
    test never holds the expanded bytes either): ~1 KB per MiB."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip header and trailer
    parts = [packer.compress(prefix)]
    chunk = b"\x00" * (1 << 20)
    for _ in range(total // len(chunk)):
        parts.append(packer.compress(chunk))
    parts.append(packer.flush())
    return b"".join(parts)


@pytest.mark.parametrize(("name", "command"), [
    *[(name, command) for name in ("trace.json.gz", "trace.pftrace.gz")
      for command in ("report", "compare", "inspect")],
    ("trace_view.json.gz", "collect --merge"),  # --merge takes JSON framework traces only
])
def test_a_small_gzip_expanding_past_the_bound_is_refused(
    profiling: Path, tmp_path: Path, limits: Limits, name: str, command: str
) -> None:
    bomb = tmp_path / name
    bomb.write_bytes(_gzip_of_zeros(8 << 20))  # ~8 KB on disk, 8 MiB expanded
    limits(trace=1 << 20)
    out_path = tmp_path / "t.json"
    args: list[object] = {"report": ["report", bomb], "compare": ["compare", bomb, bomb],
                          "inspect": ["inspect", bomb],
                          "collect --merge": ["collect", profiling, "-o", out_path, "--merge", bomb]}[command]
    code, out = cli(*args)
    assert "Traceback" not in out and code == 2, out
    assert f"{bomb}: " in out and f"more than {1 << 20} bytes uncompressed, past the {1 << 20}-byte bound " \
        "for a trace file" in out, out
    assert not out_path.exists()


def test_gzip_is_expanded_only_to_one_byte_past_the_bound(tmp_path: Path, limits: Limits) -> None:
    """256 MiB of zeros in 256 KB of gzip: refused with at most a few bound's worth of
    memory, never expanded whole; a member within the bound is read."""
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(_gzip_of_zeros(256 << 20))
    assert bomb.stat().st_size < 1 << 20
    limits(trace=1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(TooLarge, match=r"more than 1048576 bytes uncompressed, past the 1048576-byte"):
            read_maybe_gzip(bomb, "trace")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{peak} bytes at the peak: the gzip was expanded past its bound"
    # Concatenated members are one stream (gzip's rule): the bound holds for their sum.
    member = gzip.compress(b"x" * (600 << 10))
    bomb.write_bytes(member + member)
    with pytest.raises(TooLarge):
        read_maybe_gzip(bomb, "trace")
    bomb.write_bytes(member)
    assert len(read_maybe_gzip(bomb, "trace")) == 600 << 10


# ------------------------------------------------------------- the repository cannot set them


def test_the_repositorys_config_cannot_lower_the_bounds(
    repo: tuple[Path, Path], traces: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    limits: Limits,
) -> None:
    """A clone whose optrace.toml / pyproject.toml set every bound to one byte: every
    command still reads every file (the defaults hold), from inside the clone too."""
    root, op = repo
    (root / "optrace.toml").write_text("[limits]\n" + LOWERING)
    (root / "pyproject.toml").write_text("[tool.optrace.limits]\n" + LOWERING + "[limits]\n" + LOWERING)
    made = write_demo(root / "profiling", ranks=2, launches=1, aic=1, seed=3, speedup=0.0).directory
    for name, data in traces.items():
        (root / name).write_bytes(data)
    monkeypatch.chdir(root)
    limits()  # a user config without bounds: the defaults
    commands: list[list[object]] = [
        ["plan", op], ["apply", op], ["check", op, "--no-compile"],
        ["collect", made, "-o", root / "t.json"], ["inspect", made], ["report", made],
        *[[command, root / name] for name in traces for command in ("report", "inspect")],
    ]
    for args in commands:
        code, out = cli(*args)
        assert code in (0, 1) and "-byte bound" not in out and "Traceback" not in out, (args, out)


@pytest.mark.parametrize("kind", ["source", "point_map", "rank", "trace"])
def test_the_repositorys_config_cannot_raise_the_bounds(
    repo: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limits: Limits, kind: str
) -> None:
    root, op = repo
    raising = "".join(f"{k}_bytes = 100000000000\n"
                      for k in ("source", "config", "point_map", "rank", "trace"))
    (root / "optrace.toml").write_text("[limits]\n" + raising)
    (root / "pyproject.toml").write_text("[tool.optrace.limits]\n" + raising)
    (op / "op_kernel" / "extra.h").write_bytes(b"// a header\n" * 100)  # 1200 bytes; the kernel 312
    made = write_demo(root / "profiling", ranks=1, launches=1, aic=1, seed=3, speedup=0.0).directory
    trace = root / "t.json"
    assert cli("collect", made, "-o", trace)[0] == 0
    monkeypatch.chdir(root)
    limits(**{kind: 1000 if kind == "source" else 100})
    if kind == "source":  # a header past the bound is skipped with OT011, the rest planned
        code, out = cli("plan", op)
        assert code == 0 and "extra.h: OT011 cannot read: 1200 bytes, past the 1000-byte bound" in out, out
        return
    code, out = cli("report", trace) if kind == "trace" else cli("collect", made, "-o", root / "t2.json")
    assert "Traceback" not in out and code == 2, out
    assert f"past the 100-byte bound for a {kind} file" in out, out


@pytest.mark.parametrize("name", ["optrace.toml", "pyproject.toml"])
def test_check_of_an_operator_without_points_still_names_a_config_past_the_bound(
    repo: tuple[Path, Path], limits: Limits, name: str
) -> None:
    """Not instrumented, the operator is not checked — but its repository's config being
    unreadable is said (exit 1), not swallowed into "not instrumented" with exit 0."""
    root, op = repo
    config = _big_config(root, name)
    limits(config=200)
    code, out = cli("check", op, "--no-compile")
    assert "Traceback" not in out and code == 1, out
    assert f"{name}: OT001 cannot read: {config.stat().st_size} bytes, past the 200-byte bound" in out, out
