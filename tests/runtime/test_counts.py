"""Ranks, launches, cores and spans are counted apart and printed the same way by every
command: a rank file is one launch of one rank, so a 2-rank × 8-launch directory has 2
ranks, 8 launches and the cores of 2 ranks — not 16 ranks of 192 cores."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime.demo import write_demo
from optrace.runtime.format import trace_point_hash
from optrace.runtime.save import save_profiling_data
from optrace.runtime.synth import SlotWriter, new_buffer, simulated_sync


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def _check_counts(tmp_path: Path, ranks: int, launches: int, aic: int) -> None:
    demo = tmp_path / "demo"
    write_demo(demo, ranks=ranks, launches=launches, aic=aic, seed=2)
    cores = ranks * aic * 3  # twice as many AIV as AIC
    expected = f"{ranks} ranks × {launches} launches · {cores} cores"
    traces = [tmp_path / "t.json", tmp_path / "t.pftrace"]
    for trace in traces:
        result = invoke("collect", demo, "-o", trace)
        assert result.exit_code == 0, result.output
        assert f"{ranks} ranks, {launches} launches each" in result.output, result.output
    for source in (demo, *traces):
        text = invoke("report", source).output
        assert text.splitlines()[0].startswith(f"report for {source}: {expected} · "), text[:300]
    for trace in traces:
        shown = invoke("inspect", trace).output.splitlines()[0]
        assert f"trace · {expected} · clock" in shown, shown
        found = json.loads(invoke("inspect", trace, "--format", "json").output)
        assert (found["ranks"], found["launches"], found["cores"], found["rank_files"]) == (
            ranks, launches, cores, ranks * launches)
    page = tmp_path / "r.html"
    assert invoke("report", traces[1], "--html", page).exit_code == 0
    summary = re.search(r"<p>(\d+ ranks[^<]*)", page.read_text(encoding="utf-8"))
    assert summary is not None and summary.group(1).startswith(expected), summary
    compared = invoke("compare", demo, traces[0]).output
    assert f"before: {demo} ({launches} launches)" in compared and f"({launches} launches)" in compared


def test_two_ranks_of_eight_launches_are_counted_as_such(tmp_path: Path) -> None:
    _check_counts(tmp_path, 2, 8, 4)


@pytest.mark.slow
def test_sixty_four_ranks_of_a_hundred_launches_are_counted_as_such(tmp_path: Path) -> None:
    _check_counts(tmp_path, 64, 100, 1)


# ----------------------------------------------------------------------------- odd shapes

FINGERPRINT = 0x0D3A0DA7
LABELS = ["processing", "processing gmm"]


def _point_map(directory: Path) -> None:
    points = {}
    for i, label in enumerate(LABELS):
        for kind in "BE":
            points[str(trace_point_hash(label, kind))] = {
                "label": label, "file": "k.h", "line": 10 * i + (kind == "E"), "event_type": kind,
                "event_id": trace_point_hash(label, "B")}
    (directory / "point_map.json").write_text(json.dumps(
        {"format_version": 1, "fingerprint": FINGERPRINT, "points": points}))


def _core_program(slot: np.ndarray, start: int) -> None:
    writer = SlotWriter(slot, start, fingerprint=FINGERPRINT)
    for label, kind, at in (("processing", "B", 5), ("processing gmm", "B", 10), ("processing gmm", "E", 50),
                            ("processing", "E", 100)):
        writer.record(trace_point_hash(label, kind), start + at)


def _save(data: np.ndarray, rank: int, directory: Path, start: int, **where: Any) -> None:
    save_profiling_data(data, rank, directory, aic_cores=1, aiv_cores=2, barrier=True, clock_mhz=50.0,
                        host_clock=simulated_sync(10**12 + (start - 1_000_000) * 20 + 7000, 30000, 10000),
                        **where)


def _two_launches(run: Path, ranks: tuple[tuple[int, int, list[int]], ...]) -> Path:
    """A profiling directory of two launches: per (rank, words a slot, cores that record)
    each core runs `_core_program` (slots of few words drop what does not fit)."""
    run.mkdir()
    for launch in range(2):
        start = 1_000_000 + launch * 100_000
        for rank, words, cores in ranks:
            data = new_buffer(3, words)
            for core in cores:
                _core_program(data[core], start)
            _save(data, rank, run, start, launch=launch)
    _point_map(run)
    return run


def _tagged(run: Path, launches: int) -> Path:
    """Two ranks, each running two tagged ops a step: ``moe`` then ``attn`` 50 µs later
    (cycles at 50 MHz), ``launches`` steps 2 ms apart."""
    run.mkdir()
    for launch in range(launches):
        for rank in range(2):
            for tag, start in (("moe", 1_000_000 + launch * 100_000), ("attn", 1_050_000 + launch * 100_000)):
                data = new_buffer(3, 128)
                for core in range(3):
                    _core_program(data[core], start)
                _save(data, rank, run, start, tag=tag, launch=launch)
    _point_map(run)
    return run


def test_tagged_launches_are_a_rank_s_launches_not_more_ranks(tmp_path: Path) -> None:
    # Two ranks, each with launches of two tags: 2 ranks of 6 launches, in collect's
    # summary as in the trace it wrote and in what the readers count of it.
    run = _tagged(tmp_path / "run", 3)
    for output in ("t.json", "t.pftrace"):
        collected = invoke("collect", run, "-o", tmp_path / output)
        assert collected.exit_code == 0, collected.output
        shown = collected.output
        assert ": 2 ranks, 6 launches each, 6 cores with spans, 72 spans" in shown, shown
        found = json.loads(invoke("inspect", tmp_path / output, "--format", "json").output)
        assert (found["ranks"], found["launches"], found["cores"]) == (2, 6, 6)
    split = invoke("collect", run, "-o", tmp_path / "s.json", "--split", "rank")
    assert ": 2 ranks, 6 launches each" in split.output, split.output


def test_a_core_whose_records_were_all_dropped_has_no_spans(tmp_path: Path) -> None:
    # Rank 0's one core has slots of 4 words: room for its fingerprint record alone, every
    # record after it dropped. Its track holds the drop marker and no span: collect counts
    # 3 cores with spans (rank 1's), as many as the trace holds spans on.
    run = _two_launches(tmp_path / "run", ((0, 4, [0]), (1, 128, [0, 1, 2])))
    for output in ("t.json", "t.pftrace"):
        collected = invoke("collect", run, "-o", tmp_path / output)
        shown = collected.output
        assert ": 2 ranks (1 with spans), 2 launches each, 3 cores with spans, 12 spans" in shown, shown
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    with_spans = {(e["pid"], e["tid"]) for e in events
                  if e.get("ph") == "X" and e.get("cat") != "optrace.launch"}
    assert len(with_spans) == 3
    # inspect lists the core's rows (one a launch) with their drops: the rows add up to
    # the total, and its track is one of the trace's; ranks and cores are those with spans,
    # as report counts them.
    for output in ("t.json", "t.pftrace"):
        found = json.loads(invoke("inspect", tmp_path / output, "--format", "json").output)
        alone = [t for t in found["tracks"] if t["spans"] == 0]
        assert [t["track"].split(" / ")[1] for t in alone] == ["AIC 0", "AIC 0"] and all(
            t["dropped"] == 4 for t in alone), alone
        assert sum(t["dropped"] for t in found["tracks"]) == found["dropped"] == 8
        assert (found["ranks"], found["cores"], found["trace_tracks"]) == (1, 3, 4)
        assert "4 tracks" in invoke("inspect", tmp_path / output).output
        assert invoke("report", tmp_path / output).output.startswith(
            f"report for {tmp_path / output}: 1 ranks × 2 launches · 3 cores · 12 spans")


def test_a_trace_says_what_collect_skipped_as_its_rank_files_do(tmp_path: Path) -> None:
    # The rank files warn of their dropped records core by core; the trace collected from
    # them names them too (its rank table's skipped records), in report's text, JSON and
    # page, and in compare's notes: the figures of both leave them out.
    run = _two_launches(tmp_path / "run", ((0, 4, [0]), (1, 128, [0, 1, 2])))
    assert any("records dropped" in w for w in json.loads(invoke("report", run, "--format", "json").output)
               ["warnings"])
    for output in ("t.json", "t.pftrace"):
        assert invoke("collect", run, "-o", tmp_path / output).exit_code == 1  # records skipped
        trace = tmp_path / output
        warnings = json.loads(invoke("report", trace, "--format", "json").output)["warnings"]
        assert [w for w in warnings if "records were skipped when it was collected" in w] == [
            f"{trace}: 8 records were skipped when it was collected (dropped when a core's slot was full, "
            "or with unknown ids, an unmatched E or a corrupt time; rank000.pt: 4, rank000_launch1.pt: 4): "
            "the figures leave them out"], warnings
        assert "records were skipped" in invoke("report", trace).output
        page = tmp_path / "r.html"
        assert invoke("report", trace, "--html", page).exit_code == 0
        assert "warnings (see the text report)" in page.read_text(encoding="utf-8")
        notes = json.loads(invoke("compare", run, trace, "--format", "json").output)["notes"]
        assert any("records were skipped when it was collected" in n for n in notes), notes
    # A dataset says so too (its parts' rank table entries), in report and compare, both
    # where the rank that dropped records holds spans and where it holds none (its part
    # has no row, and its entries); a trace of fewer cores (--cores) says its count is of
    # every core. (8 words: the fingerprint and 2 records)
    some = _two_launches(tmp_path / "some", ((0, 8, [0, 1, 2]), (1, 128, [0, 1, 2])))
    def skipped(source: Path) -> list[str]:
        said = json.loads(invoke("report", source, "--format", "json").output)["warnings"]
        return [w.split(": ", 1)[1] for w in said if "records were skipped when it was collected" in w]

    for source, dataset in ((some, tmp_path / "ds"), (run, tmp_path / "ds-none")):
        assert invoke("collect", source, "-o", dataset, "--format", "parquet").exit_code == 1
        assert skipped(dataset), dataset
        notes = json.loads(invoke("compare", source, dataset, "--format", "json").output)["notes"]
        assert any("records were skipped when it was collected" in n for n in notes), notes
    assert skipped(tmp_path / "ds-none") == skipped(tmp_path / "t.json")
    # The rank without a span is not counted among the ranks, as in the trace.
    assert invoke("report", tmp_path / "ds-none").output.startswith(
        f"report for {tmp_path / 'ds-none'}: 1 ranks × 2 launches · 3 cores · 12 spans")


def test_a_trace_of_some_cores_counts_what_was_skipped_on_them(tmp_path: Path) -> None:
    # Rank 0's AIC 0 drops 4 records a launch; its AIVs record nothing. A trace of the AIVs
    # alone misses none of theirs: collect says how many of the 8 were on the cores kept,
    # and report on the trace, as on a dataset of them, warns of none. A trace of the AICs
    # misses all 8, each reader says so. A trace of an earlier version, whose rank table
    # counted every core's, is worded so.
    run = _two_launches(tmp_path / "run", ((0, 4, [0]), (1, 128, [0, 1, 2])))

    def skipped(source: Path) -> list[str]:
        said = json.loads(invoke("report", source, "--format", "json").output)["warnings"]
        return [w.split(": ", 1)[1] for w in said if "records were skipped when it was collected" in w]

    for cores, kept in (("aiv", 0), ("aic", 8)):
        outputs = ((f"{cores}.json", ()), (f"{cores}.pftrace", ()), (f"{cores}-ds", ("--format", "parquet")))
        for output, extra in outputs:
            collected = invoke("collect", run, "-o", tmp_path / output, "--cores", cores, *extra)
            assert collected.exit_code == 1, collected.output  # records skipped in the rank files
            shown = "skipped 8 records" + (" (0 of them on the cores --cores kept)" if not kept else "") + ":"
            assert shown in collected.output, collected.output
            if not kept:
                assert skipped(tmp_path / output) == [], output
            else:
                assert skipped(tmp_path / output) == [
                    "8 records were skipped when it was collected (dropped when a core's slot was full, or "
                    "with unknown ids, an unmatched E or a corrupt time; rank000.pt: 4, "
                    "rank000_launch1.pt: 4 on the cores `--cores` kept): the figures leave them out"], output
    trace = json.loads((tmp_path / "aiv.json").read_text())
    for entry in trace["otherData"]["ranks"]:
        entry["skipped_records"] = entry.pop("skipped_records_every_core")
    (tmp_path / "old.json").write_text(json.dumps(trace))
    assert [w for w in skipped(tmp_path / "old.json")
            if "counted over every core of the rank files, of which `--cores` kept fewer" in w], skipped(
        tmp_path / "old.json")


def _drawn(source: Path, scratch: Path) -> list[str]:
    """The rows report's page draws of `source`, in order (each core of each launch once)."""
    page = scratch / "page.html"
    assert invoke("report", source, "--html", page).exit_code == 0
    rows = re.findall(r"<title>(Rank [^<]*? / (?:AIC|AIV) \d+)", page.read_text(encoding="utf-8"))
    return list(dict.fromkeys(rows))


def test_a_page_draws_the_same_first_rows_from_the_directory_as_from_its_trace(tmp_path: Path) -> None:
    # 2 ranks x 6 launches x 12 cores: more rows than a page draws. A directory's rows
    # come rank by rank, each rank's launches in order, as a trace's processes hold them.
    demo = tmp_path / "demo"
    write_demo(demo, ranks=2, launches=6, aic=4, seed=3)
    trace = tmp_path / "t.json"
    assert invoke("collect", demo, "-o", trace).exit_code == 0

    from_directory = _drawn(demo, tmp_path)
    assert len(from_directory) == 96 and from_directory[-1].startswith("Rank 1 (launch 1) / ")
    assert from_directory == _drawn(trace, tmp_path)


def test_a_page_draws_a_directory_s_tagged_launches_in_its_trace_s_order(tmp_path: Path) -> None:
    # Each rank runs moe then attn a step, 20 steps: 2 x 40 launches x 3 cores, more rows
    # than a page draws. The trace lays a rank's launches out by time (moe 0, attn 0,
    # moe 1, ...), not by tag (attn 0..19 before moe 0..19); the directory's rows follow.
    run = _tagged(tmp_path / "run", 20)
    trace = tmp_path / "t.json"
    assert invoke("collect", run, "-o", trace).exit_code == 0

    from_directory = _drawn(run, tmp_path)
    assert from_directory[:4] == ["Rank 0 (moe, launch 0) / AIC 0", "Rank 0 (moe, launch 0) / AIV 0",
                                  "Rank 0 (moe, launch 0) / AIV 1", "Rank 0 (attn, launch 0) / AIC 0"]
    assert len(from_directory) == 96 and from_directory == _drawn(trace, tmp_path)


def test_each_rank_s_tagged_launches_in_its_own_time_order(tmp_path: Path) -> None:
    # Rank 0 runs moe alone at each step's start; rank 1 runs attn 10 µs in, then moe 60 µs
    # in. Rank 1's rows come attn 0, moe 0, attn 1, ... as collect laid them out on its
    # tracks, though moe starts first on rank 0: in the trace's readers as in the directory's.
    run = tmp_path / "run"
    run.mkdir()
    for launch in range(8):
        for rank, tag, offset in ((0, "moe", 0), (1, "attn", 10_000), (1, "moe", 60_000)):
            start = 1_000_000 + launch * 100_000 + offset
            data = new_buffer(3, 128)
            for core in range(3):
                _core_program(data[core], start)
            _save(data, rank, run, start, tag=tag, launch=launch)
    _point_map(run)
    sources: list[Path] = [run]
    for output in ("t.json", "t.pftrace"):
        assert invoke("collect", run, "-o", tmp_path / output).exit_code == 0
        sources.append(tmp_path / output)

    rows = [_drawn(source, tmp_path) for source in sources]
    launches = [row.split(" / ")[0] for row in rows[0] if row.startswith("Rank 1 ")]
    assert list(dict.fromkeys(launches))[:3] == ["Rank 1 (attn, launch 0)", "Rank 1 (moe, launch 0)",
                                                 "Rank 1 (attn, launch 1)"]
    assert len(rows[0]) == 72 and rows[1] == rows[0] and rows[2] == rows[0]


def test_report_reads_a_tagged_directory_s_files_once(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # Ordering a rank's tagged launches reads its files (their cycles); those reads are kept
    # for decoding, as collect keeps them, not made again.
    import optrace.runtime.placement as placement
    import optrace.runtime.rankfile as rankfile

    run = _tagged(tmp_path / "run", 4)
    reads: list[str] = []
    for module in (placement, rankfile):
        real = module.read_rank_file

        def counted(path: Path, rank: int, real: Any = real) -> Any:
            reads.append(Path(path).name)
            return real(path, rank)

        monkeypatch.setattr(module, "read_rank_file", counted)
    assert invoke("report", run).exit_code == 0
    assert len(reads) == 16 and len(set(reads)) == 16, sorted(reads)


def test_a_launch_whose_records_were_all_dropped_is_counted_by_every_reader(tmp_path: Path) -> None:
    # Launch 1 of both ranks: slots of 4 words, room for the fingerprint alone. The
    # directory, the traces and the dataset each count 3 launches (the dataset's rows hold
    # 2 of them; its rank table, all 3).
    run = tmp_path / "run"
    run.mkdir()
    for launch in range(3):
        start = 1_000_000 + launch * 100_000
        for rank in range(2):
            data = new_buffer(3, 4 if launch == 1 else 128)
            for core in range(1 if launch == 1 else 3):
                _core_program(data[core], start)
            _save(data, rank, run, start, launch=launch)
    _point_map(run)
    sources = [run]
    for output, extra in (("t.json", ()), ("t.pftrace", ()), ("ds", ("--format", "parquet"))):
        assert invoke("collect", run, "-o", tmp_path / output, *extra).exit_code == 1  # dropped records
        sources.append(tmp_path / output)
    for source in sources:
        shown = invoke("report", source).output
        assert shown.startswith(f"report for {source}: 2 ranks × 3 launches · 6 cores · 24 spans"), shown


def test_anchors_that_place_ranks_years_apart_are_not_used(tmp_path: Path) -> None:
    # Rank 1's host reading is 2**62 ns (146 years) after rank 0's: another clock. Placed by
    # it, collect wrote times its own readers refuse (past 1e18 ns); the anchors are set
    # aside with a note, and every reader reads the traces.
    run = tmp_path / "run"
    run.mkdir()
    for rank, host in ((0, 10**12), (1, 10**12 + 2**62)):
        data = new_buffer(3, 128)
        for core in range(3):
            _core_program(data[core], 1_000_000)
        save_profiling_data(data, rank, run, aic_cores=1, aiv_cores=2, barrier=True, clock_mhz=50.0,
                            host_clock=simulated_sync(host, 30000, 10000))
    _point_map(run)
    for output in ("t.json", "t.pftrace"):
        collected = invoke("collect", run, "-o", tmp_path / output)
        assert collected.exit_code == 0, collected.output
        assert "anchors not used: they place rank001.pt 146 years after the first rank" in collected.output
        for command in (("report", tmp_path / output), ("inspect", tmp_path / output)):
            assert invoke(*command).exit_code == 0, invoke(*command).output


def test_a_record_years_from_its_launch_is_dropped_and_the_trace_stays_readable(tmp_path: Path) -> None:
    """One core's `processing gmm` E lies 6e16 cycles (~38 years at 50 MHz) after its
    launch's start (a corrupt counter inside the launch): collect wrote it at 1.2e18 ns,
    past what its own readers take, and they refused the trace (exit 2). It is dropped and
    counted as skipped (exit 1: findings), the trace reads, and the rank's spans end where
    the records left say."""
    run = tmp_path / "run"
    run.mkdir()
    start = 1_000_000
    data = new_buffer(3, 128)
    for core in range(3):
        writer = SlotWriter(data[core], start, fingerprint=FINGERPRINT)
        gmm_end = 60_000_000_000_000_000 if core == 0 else 50
        for label, kind, at in (("processing", "B", 5), ("processing gmm", "B", 10),
                                ("processing gmm", "E", gmm_end), ("processing", "E", 100)):
            writer.record(trace_point_hash(label, kind), start + at)
    _save(data, 0, run, start)
    _point_map(run)
    for output in ("t.json", "t.pftrace"):
        trace = tmp_path / output
        collected = invoke("collect", run, "-o", trace)
        assert collected.exit_code == 1, collected.output
        assert ("skipped 1 records: 0 dropped or overwritten (slot full), 0 with unknown ids, 0 unmatched E, "
                "1 years from their launch's start") in collected.output, collected.output
        assert "1 records whose timestamp lies years from the launch's start" in collected.output
        for command in ("report", "inspect"):
            read = invoke(command, trace, "--format", "json")
            assert read.exit_code == 0, (command, output, read.output)
        found = json.loads(invoke("report", trace, "--format", "json").output)
        assert any("1 records were skipped when it was collected" in w for w in found["warnings"]), found
        spans = json.loads(invoke("inspect", trace, "--format", "json").output)
        assert spans["ranks"] == 1 and spans["cores"] == 3
        # every span within its launch's length: `processing` is ~2 µs (100 cycles at 50 MHz)
        # on each of the 3 cores
        assert found["processing_total_us"] < 3 * 2.1, found["processing_total_us"]


def _far_run(run: Path, far_launch: int, far_core: int, far_label_at: tuple[str, int], launches: int = 2,
             corrupt_start: bool = False) -> Path:
    """A rank of ``launches`` launches 2 ms apart, every core running `_core_program`, but
    in launch ``far_launch`` core ``far_core`` writes `processing gmm` ``kind`` at ``at``
    cycles from the launch's start (years: a corrupt counter), or (``corrupt_start``) that
    core's start word lies 2**62 cycles before the others' (a corrupt header word)."""
    run.mkdir()
    kind, at = far_label_at
    for launch in range(launches):
        start = 1_000_000 + launch * 100_000
        data = new_buffer(3, 128)
        for core in range(3):
            writer = SlotWriter(data[core], start, fingerprint=FINGERPRINT)
            times = {"B": 10, "E": 50}
            if launch == far_launch and core == far_core and not corrupt_start:
                times[kind] = at
            for label, k, when in (("processing", "B", 5), ("processing gmm", "B", times["B"]),
                                   ("processing gmm", "E", times["E"]), ("processing", "E", 100)):
                writer.record(trace_point_hash(label, k), start + when)
        if launch == far_launch and corrupt_start:
            data[far_core][-1] = np.array((start - 2**62) % 2**64, dtype=np.uint64).view(np.int64)
        _save(data, 0, run, start, launch=launch)
    _point_map(run)
    return run


@pytest.mark.parametrize("shape", ["far E in launch 0", "far B before launch 1", "corrupt start word"])
def test_a_corrupt_counter_leaves_launches_where_their_other_records_are(tmp_path: Path, shape: str) -> None:
    """A far record does not stretch its launch (the next one was laid end to end after
    it, at ~1.2e18 ns, which the readers refuse), and a core's corrupt start word is not
    the launch's cycle 0 (taken so, every record lay years from it and all were dropped)."""
    where = tmp_path / "run"
    run = {"far E in launch 0": lambda: _far_run(where, 0, 0, ("E", 6 * 10**16)),
           "far B before launch 1": lambda: _far_run(where, 1, 1, ("B", -6 * 10**16)),
           "corrupt start word": lambda: _far_run(where, 0, 2, ("E", 0), corrupt_start=True)}[shape]()
    for output in ("t.json", "t.pftrace"):
        trace = tmp_path / output
        collected = invoke("collect", run, "-o", trace)
        assert collected.exit_code in (0, 1), collected.output
        assert "laid end to end" not in collected.output, collected.output
        for command in ("report", "inspect"):
            read = invoke(command, trace, "--format", "json")
            assert read.exit_code == 0, (shape, command, output, read.output)
        found = json.loads(invoke("inspect", trace, "--format", "json").output)
        assert (found["launches"], found["cores"]) == (2, 3), found
        report = json.loads(invoke("report", trace, "--format", "json").output)
        # six `processing` spans of ~2 µs (100 cycles at 50 MHz), none stretched to years
        assert report["processing_total_us"] < 6 * 2.1, (shape, report["processing_total_us"])
