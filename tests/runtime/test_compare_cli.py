"""`optrace compare` through the CLI on multi-launch runs, and `optrace demo-data`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.runtime.compare import INCONCLUSIVE, NOT_ACHIEVED, compare
from optrace.runtime.demo import LABELS, write_demo
from optrace.runtime.formats import load_spans
from optrace.runtime.rankfile import find_rank_files


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    made = {
        "before": write_demo(root / "before", seed=1).directory,
        "same": write_demo(root / "same", seed=2).directory,
        "faster": write_demo(root / "faster", seed=3, speedup=30).directory,
        "few": write_demo(root / "few", seed=4, launches=3).directory,
    }
    return made


# ----------------------------------------------------------------------------- demo-data


def test_demo_data_is_a_profiling_directory(runs: dict[str, Path], tmp_path: Path) -> None:
    names = [name for name, _ in find_rank_files(runs["before"])]
    assert len(names) == 16 and {n.launch for n in names} == set(range(8))
    assert {n.rank for n in names} == {0, 1}
    result = invoke("collect", runs["before"], "-o", tmp_path / "t.json")
    assert result.exit_code == 0, result.output  # every record decoded, nothing skipped
    assert "wrote" in result.output and "skipped" not in result.output
    report = invoke("report", runs["before"])
    assert report.exit_code == 0 and all(label in report.output for label in LABELS)
    table = load_spans(runs["before"])
    assert len(table.launches) == 8 and not table.warnings


def test_demo_data_cli(tmp_path: Path) -> None:
    result = invoke("demo-data", tmp_path / "d", "--launches", "5", "--ranks", "1", "--aic", "2")
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "5 rank files" in result.output
    assert (tmp_path / "d" / "point_map.json").is_file()
    again = invoke("demo-data", tmp_path / "d")
    assert again.exit_code == 2 and "already holds rank files" in again.output
    for option, value in (("--speedup", "nan"), ("--speedup", "100"), ("--launches", "0"), ("--ranks", "65")):
        bad = invoke("demo-data", tmp_path / "e", option, value)
        assert bad.exit_code == 2 and f"{option} must be" in bad.output, bad.output
        assert not (tmp_path / "e").exists()  # nothing written


# ----------------------------------------------------------------------------- compare


def test_expected_gain_achieved_with_intervals(runs: dict[str, Path]) -> None:
    result = invoke("compare", runs["before"], runs["faster"], "--expect", "20")
    assert result.exit_code == 0, result.output
    assert "before: " in result.output and "(8 launches)" in result.output
    # One sign: the gain is positive in the table, the summary, the expectation and JSON,
    # and the verdict prints the rule it applied with its numbers.
    low = json.loads(invoke("compare", runs["before"], runs["faster"], "--expect", "20",
                            "--format", "json").output)["gain_interval"][0]
    assert f"expected gain 20 %: achieved: lower bound {low:.1f} % ≥ max(20 / 2, 1) = 10 %" in result.output
    table = next(line for line in result.output.splitlines() if line.startswith("processing gmm"))
    assert table.split()[4].startswith("+")  # 30 % faster: a positive gain
    assert "-" not in result.output.split("gain on 'processing':")[1].splitlines()[0]
    document = json.loads(invoke("compare", runs["before"], runs["faster"], "--expect", "20",
                                 "--format", "json").output)
    assert document["verdict"] == "achieved" and document["launches"] == {"before": 8, "after": 8}
    low, high = document["gain_interval"]
    assert 10 <= low <= document["gain_percent"] <= high
    gmm = next(row for row in document["labels"] if row["label"] == "processing gmm")
    assert gmm["median_gain_interval"][0] > 20  # the matmuls: 30 % faster
    assert document["expect_percent"] == 20 and "≥" in document["rule"]
    assert document["sign"].startswith("gain")
    assert document["intervals"]["resamples"] == 10_000


def test_no_change_is_not_achieved_or_inconclusive_and_exits_1(runs: dict[str, Path]) -> None:
    result = invoke("compare", runs["before"], runs["same"], "--expect", "20", "--format", "json")
    assert result.exit_code == 1
    assert json.loads(result.output)["verdict"] in (NOT_ACHIEVED, INCONCLUSIVE)
    # expecting 1 % of a run that did not change: the interval straddles 0
    result = invoke("compare", runs["before"], runs["same"], "--expect", "1")
    assert result.exit_code == 1 and "expected gain 1 %: inconclusive: interval [" in result.output
    assert "straddles 0 %" in result.output


def test_fail_on_regression(runs: dict[str, Path]) -> None:
    # faster -> before: the matmuls ~43 % slower, processing ~24 %
    result = invoke("compare", runs["faster"], runs["before"], "--fail-on-regression", "5")
    assert result.exit_code == 1
    assert ("regression gate 5 %: FAILED: processing, processing combine, processing combine wait, "
            "processing gmm") in result.output
    assert "upper bound below -5 %" in result.output
    assert "processing gmm !" in result.output
    document = json.loads(invoke("compare", runs["faster"], runs["before"], "--fail-on-regression", "5",
                                 "--format", "json").output)
    # `combine` holds `combine wait`: it is slower with it.
    assert document["regressions"] == ["processing", "processing combine", "processing combine wait",
                                       "processing gmm"]
    assert invoke("compare", runs["faster"], runs["before"], "--fail-on-regression", "60").exit_code == 0
    passed = invoke("compare", runs["before"], runs["same"], "--fail-on-regression", "0")
    assert passed.exit_code == 0 and "regression gate 0 %: passed" in passed.output


def test_a_run_against_itself_gains_zero_not_minus_zero(runs: dict[str, Path]) -> None:
    # -0.0 is the sign of a slowdown: a label that did not change reads 0.0, in the text
    # and in the JSON (the gain was -change, and -0.0 is what 0.0 negates to).
    text = invoke("compare", runs["before"], runs["before"], "--expect", "20")
    assert "-0.0" not in text.output and "+0.0%" in text.output, text.output
    document = json.loads(invoke("compare", runs["before"], runs["before"], "--format", "json").output)
    assert str(document["gain_percent"]) == "0.0"
    for row in document["labels"]:
        for key in ("median_gain_percent", "p99_gain_percent"):
            assert str(row[key]) == "0.0", (row["label"], key, row[key])
        for key in ("median_gain_interval", "p99_gain_interval"):
            assert "-0.0" not in json.dumps(row[key])


def test_the_regression_gate_is_described_in_gains(runs: dict[str, Path]) -> None:
    # --help speaks the sign compare prints (positive = faster) and the rule it applies.
    shown = " ".join(invoke("compare", "--help").output.split())
    assert "lower bound above" not in shown
    assert "upper bound below -PCT %" in shown


def test_trace_and_directory_give_the_same_launches(runs: dict[str, Path], tmp_path: Path) -> None:
    trace = tmp_path / "before.json.gz"
    assert invoke("collect", runs["before"], "-o", trace).exit_code == 0
    from_trace = load_spans(trace)
    assert sorted(from_trace.launches) == sorted(load_spans(runs["before"]).launches)
    a = compare(from_trace, load_spans(runs["faster"]), expect=20)
    b = compare(load_spans(runs["before"]), load_spans(runs["faster"]), expect=20)
    assert a.verdict == b.verdict and a.gain == pytest.approx(b.gain, abs=0.01)
    assert a.gain_interval is not None and b.gain_interval is not None
    assert a.gain_interval == pytest.approx(b.gain_interval, abs=0.05)


def test_fewer_than_five_launches(runs: dict[str, Path]) -> None:
    result = invoke("compare", runs["few"], runs["faster"], "--expect", "20")
    note = "fewer than 5 launches per run (3 before, 8 after): point estimates only, no intervals"
    assert note in result.output
    assert "[" not in result.output.split("gain on")[1].splitlines()[0]  # no interval
    document = json.loads(invoke("compare", runs["few"], runs["faster"], "--format", "json").output)
    assert document["intervals"] is None and document["gain_interval"] is None
    gated = invoke("compare", runs["few"], runs["faster"], "--fail-on-regression", "5")
    assert gated.exit_code == 2
    assert "3 launches: --fail-on-regression needs at least 5 launches per run" in gated.output


@pytest.mark.parametrize(
    ("option", "value"),
    [("--expect", "nan"), ("--expect", "inf"), ("--expect", "150"), ("--fail-on-regression", "-1"),
     ("--fail-on-regression", "nan"), ("--fail-on-regression", "1e9")],
)
def test_numeric_options_are_checked(runs: dict[str, Path], option: str, value: str) -> None:
    result = invoke("compare", runs["before"], runs["same"], option, value)
    assert result.exit_code == 2
    assert f"optrace: {option} must be a finite number in [" in result.output
    assert "label" not in result.output  # refused before comparing


def test_the_documented_demo_gives_the_documented_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/runtime.md shows `compare` on the README's demo pair: the same bytes here."""
    docs = (Path(__file__).parents[2] / "docs" / "runtime.md").read_text(encoding="utf-8")
    command = "$ optrace compare demo/before demo/after --expect 20 --fail-on-regression 2\n"
    shown = docs.split(command, 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    assert invoke("demo-data", "demo/before").exit_code == 0
    assert invoke("demo-data", "demo/after", "--seed", "1", "--speedup", "30").exit_code == 0
    result = invoke(*command[2:].split()[1:])
    assert result.exit_code == 0
    assert result.output == shown


@pytest.mark.parametrize("name", ["before.pftrace", "before.pftrace.gz"])
def test_a_pftrace_gives_the_same_launches(runs: dict[str, Path], tmp_path: Path, name: str) -> None:
    """The .pftrace's launch slices name each span's launch, as a JSON trace's do: compare
    resamples the same 8 launches of 2 rank processes."""
    trace = tmp_path / name
    assert invoke("collect", runs["before"], "-o", trace).exit_code == 0
    json_trace = tmp_path / "before.json"
    assert invoke("collect", runs["before"], "-o", json_trace).exit_code == 0
    from_pftrace, from_json = load_spans(trace), load_spans(json_trace)
    assert len(from_pftrace.launches) == 8 and from_pftrace.processes == 2
    from_dir = load_spans(runs["before"])
    assert sorted(from_pftrace.launches) == sorted(from_json.launches) == sorted(from_dir.launches)
    a = compare(from_pftrace, load_spans(runs["faster"]), expect=20)
    b = compare(from_json, load_spans(runs["faster"]), expect=20)
    assert (a.launches_before, a.verdict) == (8, b.verdict)
    assert a.gain == pytest.approx(b.gain, abs=0.01)
    assert a.gain_interval is not None and b.gain_interval is not None
    assert a.gain_interval == pytest.approx(b.gain_interval, abs=0.05)


def test_a_pftrace_without_launch_slices_or_rank_table_has_a_launch_per_process(
    runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optrace.runtime import perfetto_read

    trace = tmp_path / "before.pftrace"
    assert invoke("collect", runs["before"], "-o", trace).exit_code == 0
    found = perfetto_read.read_spans(trace)
    assert sorted(found.process_pids.values()) == [1, 2]  # the JSON pid (the rank) plus one
    found.metadata = {}  # as a trace from another producer: no rank table, no launch slices
    found.launches = []
    monkeypatch.setattr(perfetto_read, "read_spans", lambda path, progress=None: found)
    table = load_spans(trace)
    assert len(table.launches) == 2 == table.processes  # each process its own launch
