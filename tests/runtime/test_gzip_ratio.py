"""A small `.json.gz` costs memory in proportion to its size: a gzipped trace expands to
at most `[limits] gzip_ratio` (64) times its own size, at least 1 MiB, and never past
`trace_bytes` (docs/config.md; docs/faults.md, "Hostile traces and numbers").

Parsed as JSON, each expanded byte can cost 25 bytes of memory (`{},` is an empty dict):
85 KB of gzip expanding 1000 times took 2.2 GB before.
"""

from __future__ import annotations

import functools
import gzip
import json
import random
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from cli_in_thread import assert_refused, run_cli

from optrace.runtime import regular
from optrace.runtime.demo import write_demo
from optrace.runtime.regular import DEFAULT_GZIP_RATIO, TooExpanded, read_maybe_gzip

cli = functools.partial(run_cli, timeout=120)


@pytest.fixture(scope="module")
def profiling(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_demo(tmp_path_factory.mktemp("gz") / "prof", ranks=1, launches=1, aic=1, seed=5,
                      speedup=0.0).directory


def gzip_of(unit: bytes, count: int, *, every: int = 0) -> bytes:
    """A gzipped trace of `count` `unit`s in its traceEvents; every `every` units, 8
    bytes of random whitespace (deflate cannot shrink them: the ratio falls)."""
    rng = random.Random(1)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(b'{"traceEvents": [')]
    step = every or 100_000
    for done in range(0, count, step):
        parts.append(packer.compress(unit * min(step, count - done)))
        if every:
            parts.append(packer.compress(bytes(rng.choice(b" \t\n\r") for _ in range(8))))
    parts.append(packer.compress(unit.rstrip(b",") + b"]}") + packer.flush())
    return b"".join(parts)


#: 29 million empty objects in 85 KB: 87 MB expanded, and parsed 2.2 GB of memory (exit 0).
EMPTY_OBJECTS = functools.cache(lambda: gzip_of(b"{},", 29_000_000))


#: Run by a fresh interpreter: starts `optrace ARGS`, waits for it and prints its exit
#: code and peak RSS (KB). Linux keeps a process's peak across exec, and a child forked
#: from the test run would start with the test run's pages as its peak; forked from this
#: small interpreter, it starts with a few MB.
MEASURE = """
import json, os, subprocess, sys
child = subprocess.Popen([sys.executable, "-m", "optrace", *sys.argv[1:]])
_, status, usage = os.wait4(child.pid, 0)
print(json.dumps([os.waitstatus_to_exitcode(status), usage.ru_maxrss]), file=sys.stderr)
"""


def _run_measured(args: list[str], tmp_path: Path) -> tuple[int, str, int, float]:
    """(exit code, output, peak RSS in bytes, seconds) of `python -m optrace ARGS`."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", MEASURE, *args], capture_output=True, text=True,
                          errors="replace", timeout=300)
    seconds = time.monotonic() - started
    *output, measured = done.stderr.rstrip("\n").split("\n")
    code, rss_kb = json.loads(measured)
    return code, done.stdout + "\n".join(output), rss_kb * 1024, seconds


@pytest.mark.parametrize("name", ["empty-objects-1000x", "worst-case-under-the-ratio"])
def test_a_small_gzip_costs_memory_in_proportion_to_its_size(tmp_path: Path, name: str) -> None:
    """An 85 KB `.json.gz`: refused at once (1000 times its size), or read within 256 MB
    however its content is chosen (just under 64 times its size)."""
    path = tmp_path / "trace.json.gz"
    if name == "empty-objects-1000x":
        path.write_bytes(EMPTY_OBJECTS())
    else:
        path.write_bytes(gzip_of(b"{},", 1_700_000, every=120))  # 89 KB, 59 times its size
    size = path.stat().st_size
    assert 80_000 < size < 95_000
    ratio = len(gzip.decompress(path.read_bytes())) / size
    code, out, rss, seconds = _run_measured(["report", str(path)], tmp_path)
    assert "Traceback" not in out, out
    assert rss < 256 << 20, f"{rss >> 20} MB at the peak, ratio {ratio:.0f}\n{out}"
    if name == "empty-objects-1000x":
        assert ratio > 1000
        assert code == 2 and seconds < 20, f"exit {code} in {seconds:.1f} s\n{out}"
        assert (f"{path}: not a readable JSON trace: more than {DEFAULT_GZIP_RATIO * size} bytes "
                f"uncompressed from {size} bytes of gzip, past {DEFAULT_GZIP_RATIO} times its size "
                "(`[limits] gzip_ratio` in ") in out, out
    else:
        assert 50 < ratio < DEFAULT_GZIP_RATIO
        assert code == 0, out


@pytest.mark.parametrize("command", ["report", "compare", "inspect", "collect --merge"])
def test_a_gzip_past_the_ratio_is_refused_and_the_user_can_raise_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profiling: Path, command: str
) -> None:
    """2 MiB of `{},` in 2 KB: past 64 times its size and past the 1 MiB floor; read
    (exit 0) once `[limits] gzip_ratio` in the user's config allows it."""
    bomb = tmp_path / ("trace_view.json.gz" if command == "collect --merge" else "trace.json.gz")
    bomb.write_bytes(gzip_of(b"{},", 700_000))
    out = tmp_path / "t.json"
    args: list[object] = {"report": ["report", bomb], "compare": ["compare", bomb, bomb],
                          "inspect": ["inspect", bomb],
                          "collect --merge": ["collect", profiling, "-o", out, "--merge", bomb]}[command]
    config = tmp_path / "config" / "optrace" / "config.toml"
    config.parent.mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    code, text = cli(*args)
    assert_refused(code, text, bomb, f"from {bomb.stat().st_size} bytes of gzip, past 64 times its size "
                   f"(`[limits] gzip_ratio` in {config})")
    assert not out.exists()
    config.write_text("[limits]\ngzip_ratio = 5000\n")
    code, text = cli(*args)
    assert "gzip_ratio" not in text and "Traceback" not in text, text
    # read: a list of empty objects is a trace of no spans, and no framework trace to merge
    expected = {"report": (0, ""), "inspect": (0, ""), "compare": (2, "no 'processing' spans to compare"),
                "collect --merge": (2, "event 0 is not an object with a 'ph'")}[command]
    assert code == expected[0] and expected[1] in text, text


def test_the_gzip_ratio_has_a_floor_and_the_trace_bound_still_holds(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b"x" * (1 << 20)))  # 1 MiB from ~1 KB: the floor lets it through
    assert len(read_maybe_gzip(path, "trace")) == 1 << 20
    path.write_bytes(gzip.compress(b"x" * ((1 << 20) + 1)))
    with pytest.raises(TooExpanded, match=r"more than 1048576 bytes uncompressed from \d+ bytes of gzip"):
        read_maybe_gzip(path, "trace")


def test_limits_past_what_a_read_can_ask_for_are_no_bound(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`trace_bytes` and `gzip_ratio` of 2**63 - 1 (positive integers the config takes):
    a read of the bound plus one byte overflowed, and every gzipped trace failed (exit 3)."""
    config = tmp_path / "config" / "optrace" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f"[limits]\ntrace_bytes = {2**63 - 1}\ngzip_ratio = {2**63 - 1}\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b"x" * (3 << 20)))  # past the 1 MiB floor: the ratio is used
    assert len(read_maybe_gzip(path, "trace")) == 3 << 20


def test_a_gzip_expanded_in_pieces_is_the_same_bytes_and_bound(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Past one piece (1 GiB; here 1,000 bytes) the rest is read in pieces: the same bytes,
    and one byte past the bound still refused."""
    monkeypatch.setattr(regular, "_GZIP_PIECE", 1000)
    raw = bytes(range(256)) * 50
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(raw))
    assert read_maybe_gzip(path, "trace") == raw
    monkeypatch.setattr(regular, "_GZIP_PIECE", len(raw))  # exactly one piece, then the end
    assert read_maybe_gzip(path, "trace") == raw
    path.write_bytes(gzip.compress(b"x" * ((1 << 20) + 1)))
    with pytest.raises(TooExpanded):
        read_maybe_gzip(path, "trace")
