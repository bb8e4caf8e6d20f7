"""collect in several processes: the same trace as one process, whatever goes wrong."""

from __future__ import annotations

import json
import os
import pickle
import threading
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import point_map, rank_buffer, write_point_map

from optrace.runtime import chrome, workers
from optrace.runtime import collect as collect_module
from optrace.runtime.collect import CollectOptions, collect, collect_processes, rank_runs
from optrace.runtime.decode import decode_rank
from optrace.runtime.errors import ProfilingInputError
from optrace.runtime.save import reset_launch_counters, save_profiling_data
from optrace.runtime.workers import Worker, can_fork

pytestmark = pytest.mark.slow  # collect -j: worker processes forked and killed

needs_fork = pytest.mark.skipif(not can_fork(), reason="fork() is not used on this platform")


@pytest.fixture(autouse=True)
def _fresh_counters() -> None:
    reset_launch_counters()


@pytest.fixture(autouse=True)
def _as_many_processes_as_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests' inputs are tiny and the machine may be busy: without this, -j N
    would fall back to one process by itself (test_falling_back_to_one_process)."""
    monkeypatch.setattr(collect_module, "MIN_PARALLEL_BYTES", 0)
    monkeypatch.setattr(collect_module, "idle_cpus", lambda: 64.0)


def profiling_dir(tmp_path: Path, ranks: int, bad: tuple[int, ...] = ()) -> Path:
    directory = tmp_path / "prof"
    for rank in range(ranks):
        save_profiling_data(rank_buffer(rank=rank, loops=2 + rank).data, rank, directory,
                            aic_cores=2)
    for rank in bad:
        (directory / f"rank{rank:03d}.pt").write_bytes(b"not a zip")
    write_point_map(directory)
    return directory


def run(directory: Path, output: Path, jobs: int, **kwargs: Any) -> collect_module.CollectResult:
    return collect(directory, output, CollectOptions(jobs=jobs, **kwargs))


def summary(result: collect_module.CollectResult) -> list[str]:
    lines: list[str] = collect_module.summary_lines(result)[1:]
    return lines + [str(e) for e in result.errors]


@needs_fork
@pytest.mark.parametrize("side_by_side", [True, False], ids=["one-block", "block-per-rank"])
@pytest.mark.parametrize("jobs", [2, 3, 4])
@pytest.mark.parametrize("bad", [(), (0,), (3,), (0, 1, 2), (3, 4, 5)])
def test_several_processes_write_the_bytes_of_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, side_by_side: bool, jobs: int, bad: tuple[int, ...]
) -> None:
    # A bad file first (the parent's run writes nothing), in the middle, every file of
    # the first runs or of the last: the separators between runs must still make valid
    # JSON, and each run must land at its place.
    if not side_by_side:  # inputs too large to hold a run laid out: blocks of a rank per process
        monkeypatch.setattr(collect_module, "SIDE_BY_SIDE_BLOCK", 1)
    directory = profiling_dir(tmp_path, ranks=6, bad=bad)
    one = run(directory, tmp_path / "one.json", 1)
    several = run(directory, tmp_path / "several.json", jobs)
    assert (tmp_path / "several.json").read_bytes() == (tmp_path / "one.json").read_bytes()
    json.loads((tmp_path / "several.json").read_text())
    assert several.exit_code == one.exit_code == (2 if bad else 0)
    assert summary(several) == summary(one)
    assert [o.spans_written for o in several.outcomes] == [o.spans_written for o in one.outcomes]
    assert [o.cores_written for o in several.outcomes] == [o.cores_written for o in one.outcomes]
    assert several.events == one.events


@needs_fork
def test_progress_counts_every_rank_once(tmp_path: Path) -> None:
    directory = profiling_dir(tmp_path, ranks=5)
    seen: list[tuple[int, int]] = []
    collect(directory, tmp_path / "t.json", CollectOptions(jobs=3), lambda d, t: seen.append((d, t)))
    assert seen[-1] == (5, 5)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


@needs_fork
def test_an_error_in_a_worker_reaches_the_caller_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = profiling_dir(tmp_path, ranks=4)
    real = collect_module.decode_rank

    def failing(buffer: Any, *args: Any) -> Any:
        if Path(buffer.path).name == "rank003.pt":  # only in the last run, a forked child
            raise ValueError("decoder bug")
        return real(buffer, *args)

    monkeypatch.setattr(collect_module, "decode_rank", failing)
    with pytest.raises(ValueError, match="decoder bug"):
        run(directory, tmp_path / "t.json", 2)
    assert os.listdir(tmp_path) == ["prof"]  # no trace, no temporary file left


@needs_fork
def test_a_worker_killed_is_an_error_not_a_short_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = profiling_dir(tmp_path, ranks=4)
    real = collect_module.decode_rank

    def dying(buffer: Any, *args: Any) -> Any:
        if Path(buffer.path).name == "rank003.pt":
            os._exit(9)  # as if the OOM killer took it
        return real(buffer, *args)

    monkeypatch.setattr(collect_module, "decode_rank", dying)
    with pytest.raises(RuntimeError, match=r"ended without a result \(exit status 9"):
        run(directory, tmp_path / "t.json", 2)
    assert os.listdir(tmp_path) == ["prof"]


def test_worker_results_and_exceptions_cross_the_fork() -> None:
    if not can_fork():
        pytest.skip("fork() is not used on this platform")
    assert Worker(lambda: {"spans": [1, 2, 3]}).result() == {"spans": [1, 2, 3]}
    error = ProfilingInputError("rank001.pt", "truncated")
    with pytest.raises(ProfilingInputError) as caught:
        Worker(lambda: (_ for _ in ()).throw(error)).result()
    assert (caught.value.path, caught.value.message) == ("rank001.pt", "truncated")

    class Unpicklable(Exception):
        def __init__(self, a: int, b: int) -> None:
            super().__init__(f"{a}/{b}")

    def raise_unpicklable() -> None:
        raise Unpicklable(1, 2)

    with pytest.raises(RuntimeError, match="Unpicklable: 1/2"):
        Worker(raise_unpicklable).result()


def test_profiling_input_error_pickles_with_its_parts() -> None:
    error = pickle.loads(pickle.dumps(ProfilingInputError(Path("/d/rank000.pt"), "bad")))
    assert (error.path, error.message, str(error)) == ("/d/rank000.pt", "bad", "/d/rank000.pt: bad")


def test_no_fork_while_another_thread_runs(tmp_path: Path) -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    try:
        assert not can_fork()
        assert collect_processes(4, 8, compress=False) == 1
    finally:
        release.set()
        thread.join()


def test_how_many_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collect_module, "can_fork", lambda: True)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3, 4, 5, 6, 7}, raising=False)
    assert collect_processes(None, 16, compress=False) == 1  # the default
    assert collect_processes(0, 16, compress=False) == 4  # one per CPU, at most 4
    assert collect_processes(0, 2, compress=False) == 2  # never more than the files
    assert collect_processes(6, 16, compress=False) == 6  # -j says otherwise
    assert collect_processes(6, 16, compress=True) == 1  # one gzip stream
    monkeypatch.setattr(collect_module, "can_fork", lambda: False)
    assert collect_processes(6, 16, compress=False) == 1


def test_falling_back_to_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()  # the real rule, not the autouse fixture's
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3}, raising=False)
    big = 512 << 20
    monkeypatch.setattr(os, "getloadavg", lambda: (0.3, 0.0, 0.0))
    assert collect_module.worth_processes(2, big) == (2, None)  # an idle machine: as asked
    assert collect_module.worth_processes(1, big) == (1, None)
    many, why = collect_module.worth_processes(8, big)  # 3.7 idle CPUs: 1 + 3 processes
    assert many == 4 and why == "3.7 of 4 CPUs idle (load average)"
    monkeypatch.setattr(os, "getloadavg", lambda: (5.5, 0.0, 0.0))  # the shared machine
    assert collect_module.worth_processes(2, big) == (1, "0.0 of 4 CPUs idle (load average)")
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert collect_module.worth_processes(2, 3 << 20) == (1, None)  # 3 MiB: too little to share


@needs_fork
def test_a_fallback_says_so_and_writes_the_same_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = profiling_dir(tmp_path, ranks=3)
    run(directory, tmp_path / "one.json", 1)
    monkeypatch.setattr(collect_module, "idle_cpus", lambda: 0.4)
    forks: list[int] = []
    real_fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or real_fork())
    run(directory, tmp_path / "two.json", 2)
    assert forks == []  # one process by itself
    assert "-j 2: 1 process (0.4 of" in capsys.readouterr().err
    assert (tmp_path / "two.json").read_bytes() == (tmp_path / "one.json").read_bytes()


@pytest.mark.parametrize(
    "sizes, processes, block, expected",
    [
        ([10] * 8, 2, 20, [(0, 4), (4, 8)]),  # 2 x 20 bytes a block: 4 files
        ([10] * 8, 2, 1, [(0, 2), (2, 4), (4, 6), (6, 8)]),  # never fewer files than processes
        ([10] * 5, 2, 1, [(0, 2), (2, 4), (4, 5)]),
        ([50, 10, 10, 10], 2, 20, [(0, 2), (2, 4)]),
        ([10] * 3, 4, 100, [(0, 3)]),
    ],
)
def test_side_by_side_blocks(monkeypatch: pytest.MonkeyPatch, sizes: list[int], processes: int, block: int,
                             expected: list[tuple[int, int]]) -> None:
    monkeypatch.setattr(collect_module, "SIDE_BY_SIDE_BLOCK", block)
    got = collect_module.side_by_side_blocks(sizes, processes)
    assert [(b.start, b.stop) for b in got] == expected


@pytest.mark.parametrize(
    "sizes, runs, expected",
    [
        ([10] * 8, 2, [(0, 4), (4, 8)]),
        ([10] * 8, 3, [(0, 3), (3, 5), (5, 8)]),
        ([10, 10, 10], 5, [(0, 1), (1, 2), (2, 3)]),  # never more runs than files
        ([1, 1, 1, 97], 3, [(0, 2), (2, 3), (3, 4)]),  # the big last file alone
        ([80, 10, 10], 2, [(0, 1), (1, 3)]),  # a big first file is a run of its own
        ([10, 10, 80], 2, [(0, 2), (2, 3)]),
        ([5], 4, [(0, 1)]),
        ([0, 0, 0, 0], 2, [(0, 2), (2, 4)]),  # unknown sizes: split by count
    ],
)
def test_rank_runs_are_consecutive_and_balanced(
    sizes: list[int], runs: int, expected: list[tuple[int, int]]
) -> None:
    got = rank_runs(sizes, runs)
    assert [(r.start, r.stop) for r in got] == expected
    assert [i for r in got for i in r] == list(range(len(sizes)))


def test_parts_are_appended_without_the_kernel_copy_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # copy_file_range missing or refused (another filesystem, an old kernel): the
    # read / write loop gives the same bytes.
    source = tmp_path / "src"
    source.write_bytes(os.urandom(3 << 20))
    for broken in (None, "refuses"):
        target = tmp_path / f"dst-{broken}"
        if broken is None:
            monkeypatch.delattr(os, "copy_file_range", raising=False)
        else:
            def refuse(*_args: Any) -> int:
                raise OSError(18, "Invalid cross-device link")

            monkeypatch.setattr(os, "copy_file_range", refuse, raising=False)
        with open(source, "rb") as src, open(target, "wb") as dst:
            dst.write(b"head")
            dst.flush()
            chrome.copy_bytes(src.fileno(), dst.fileno(), source.stat().st_size)
        assert target.read_bytes() == b"head" + source.read_bytes()
        monkeypatch.undo()


def test_written_ranks_do_not_keep_their_spans(tmp_path: Path) -> None:
    # A collect of many ranks holds one rank's spans at a time, not all of them.
    directory = profiling_dir(tmp_path, ranks=3)
    result = run(directory, tmp_path / "t.json", 1)
    for outcome in result.outcomes:
        assert outcome.decoded is not None and outcome.decoded.cores == []
        assert outcome.decoded.spans.start.size == 0
        assert outcome.cores_written == 6 and outcome.spans_written > 0


def test_a_temporary_part_leaves_nothing_behind(tmp_path: Path) -> None:
    part = chrome.EventPart(tmp_path)
    part.sink.write_bytes(b'{"ph":"X"}')
    part.close()
    assert os.listdir(tmp_path) == []  # unnamed (O_TMPFILE) or removed at once



@pytest.mark.parametrize(
    "options",
    [
        {},
        {"labels": ["processing compute"]},  # a filter: columns gathered per core
        {"cores": collect_module.parse_core_filter("aiv1-2")},
        {"rank_offsets_us": {0: -1e6}},  # negative timestamps: rows formatted at once
    ],
    ids=["all", "labels", "cores", "negative-offset"],
)
def test_a_rendered_rank_knows_its_size_before_formatting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, Any]
) -> None:
    # Processes writing side by side place their rows by these numbers: they must be
    # exact, rows split into several blocks and drop markers included.
    monkeypatch.setattr(chrome, "_ROWS_PER_BLOCK", 7)
    buffer = rank_buffer(words=32, loops=6)  # 21 records for 15 places: slots overflow
    decoded = decode_rank(buffer, point_map())
    assert any(s.dropped for s in decoded.slots)
    rendered = chrome.render_rank(
        0, decoded, point_map(), labels=options.get("labels"), core_filter=options.get("cores"),
        origin_ns=round(options.get("rank_offsets_us", {}).get(0, 0.0) * 1000),
    )
    size, count = rendered.size, rendered.chunk_count
    chunks = [bytes(c) for c in rendered.chunks]
    assert count == len(chunks) > 3 and all(chunks)
    assert size == sum(map(len, chunks))


@needs_fork
def test_a_wrong_layout_is_caught_and_collected_again_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = profiling_dir(tmp_path, ranks=4)
    run(directory, tmp_path / "one.json", 1)
    real = collect_module._run_layout

    def off_by_one(planned: Any) -> tuple[int, int]:
        size, count = real(planned)
        return size + 1, count  # as if a row were laid out one byte wider than written

    monkeypatch.setattr(collect_module, "_run_layout", off_by_one)
    result = run(directory, tmp_path / "t.json", 2)
    assert "collecting again in one process" in capsys.readouterr().err
    assert (tmp_path / "t.json").read_bytes() == (tmp_path / "one.json").read_bytes()
    assert result.exit_code == 0 and sum(o.spans_written for o in result.outcomes) > 0


@needs_fork
def test_a_worker_failing_while_laying_out_stops_the_collect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = profiling_dir(tmp_path, ranks=4)
    real = chrome.render_rank

    def failing(pid: int, *args: Any, **kwargs: Any) -> Any:
        if pid == 3:  # a rank of the child's run
            raise MemoryError("no room")
        return real(pid, *args, **kwargs)

    monkeypatch.setattr(collect_module, "render_rank", failing)
    with pytest.raises(MemoryError, match="no room"):
        run(directory, tmp_path / "t.json", 2)
    assert os.listdir(tmp_path) == ["prof"]


@needs_fork
@pytest.mark.parametrize("side_by_side", [True, False], ids=["one-block", "block-per-rank"])
def test_results_bigger_than_a_pipe_do_not_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, side_by_side: bool
) -> None:
    # A child's result (every outcome of its run, with messages) can exceed a pipe's
    # buffer: it must not wait on the parent while the parent waits for its ticks to end.
    if not side_by_side:
        monkeypatch.setattr(collect_module, "SIDE_BY_SIDE_BLOCK", 1)
    directory = profiling_dir(tmp_path, ranks=4)
    real = collect_module._plan_rank

    def wordy(outcome: Any, *args: Any) -> Any:
        rendered, meta = real(outcome, *args)
        assert outcome.decoded is not None
        outcome.decoded.notes.extend(f"note {i} " + "x" * 200 for i in range(400))  # ~85 KB a rank
        return rendered, meta

    monkeypatch.setattr(collect_module, "_plan_rank", wordy)
    result = run(directory, tmp_path / "t.json", 2)
    assert all(len(o.decoded.notes) >= 400 for o in result.outcomes if o.decoded is not None)


@needs_fork
def test_a_worker_killed_after_its_layout_is_an_internal_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = profiling_dir(tmp_path, ranks=4)
    real = workers.Channel.send

    def send(self: workers.Channel, message: Any) -> None:
        real(self, message)
        layout = isinstance(message, tuple) and not isinstance(message[1], bool)  # (size, count)
        if os.getpid() != parent and layout:
            os._exit(9)  # a child, right after sending its layout

    parent = os.getpid()
    monkeypatch.setattr(workers.Channel, "send", send)
    with pytest.raises(RuntimeError, match="ended without a result"):
        run(directory, tmp_path / "t.json", 2)
    assert os.listdir(tmp_path) == ["prof"]


@needs_fork
@pytest.mark.parametrize("side_by_side", [True, False], ids=["one-block", "block-per-rank"])
def test_a_fork_failing_part_way_stops_the_started_children_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, side_by_side: bool
) -> None:
    if not side_by_side:
        monkeypatch.setattr(collect_module, "SIDE_BY_SIDE_BLOCK", 1)
    directory = profiling_dir(tmp_path, ranks=6)
    real_fork = os.fork
    forks: list[int] = []

    def fork() -> int:
        if forks:  # the second child cannot be made (EAGAIN: too many processes)
            raise BlockingIOError(11, "Resource temporarily unavailable")
        forks.append(pid := real_fork())
        return pid

    monkeypatch.setattr(os, "fork", fork)
    before = set(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").is_dir() else set()
    with pytest.raises(BlockingIOError):
        run(directory, tmp_path / "t.json", 3)
    assert os.listdir(tmp_path) == ["prof"]
    with pytest.raises(ChildProcessError):  # the first child was stopped and reaped
        os.waitpid(forks[0], 0)
    if before:
        assert set(os.listdir("/proc/self/fd")) <= before  # no pipe left open
