"""Runtime commands (collect, inspect, report, compare, demo-data) for the optrace CLI.

Thin: parse arguments, call the runtime modules, print, choose the exit code. The
readers' bodies (inspect, report, compare) are readers_fast.py's, which the console
script runs without typer for their plain spellings. Exit codes
(cli.md): 0 ok, 1 records skipped (collect) / a verdict other than achieved or a flagged
regression (compare --expect / --fail-on-regression), 2 bad input (printed as
``path: message``, no traceback), 3 internal error.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from optrace.cli.collect_fast import failure_code, paths_as_bytes
from optrace.cli.readers_fast import run_compare, run_inspect, run_report
from optrace.runtime.terminal import safe_text

# What report / inspect / compare read as a trace (runtime/spans.py): collect's outputs.
_TRACE_SUFFIXES = ".json / .json.gz / .pftrace"
_DATASET = "a dataset (collect --format parquet)"


def _err(message: str) -> None:
    print(safe_text(message), file=sys.stderr)


@contextmanager
def _guarded() -> Iterator[None]:
    """Bad input -> ``path: message`` and exit 2; anything unexpected -> exit 3
    (`collect_fast.failure_code`, which the fast collect path uses too)."""
    paths_as_bytes()
    try:
        yield
    except typer.Exit:
        raise
    except BaseException as exc:
        code = failure_code(exc)
        if code is None:
            raise
        raise typer.Exit(code) from None


def _bad_usage(message: str) -> typer.Exit:
    _err(f"optrace: {message}")
    return typer.Exit(2)


def cmd_collect(
    profiling_dir: Annotated[Path, typer.Argument(help="Directory holding rank*.pt files.")],
    output: Annotated[Path, typer.Option(
        "-o", "--output", help="Trace to write: .json / .json.gz (Chrome JSON) or .pftrace (Perfetto); "
        "with --format parquet a directory (a Parquet dataset, a folder per rank)."
    )],
    point_map: Annotated[
        Path | None, typer.Option("--point-map", help="Default: point_map.json beside the rank files.")
    ] = None,
    clock_mhz: Annotated[
        float | None,
        typer.Option("--clock-mhz", help="System counter rate in MHz. Default: the rank file's, else 50."),
    ] = None,
    ranks: Annotated[str | None, typer.Option("--ranks", help="Ranks to decode, e.g. 0,2-3 (default: "
                                                 "all).")] = None,
    cores: Annotated[str | None, typer.Option("--cores", help="Cores to decode, e.g. aic,aiv0-7 (default: "
                                                 "all).")] = None,
    labels: Annotated[
        str | None, typer.Option("--labels", help="Comma-separated labels; their sub-labels too.")
    ] = None,
    rank_offsets: Annotated[
        str | None,
        typer.Option(
            "--rank-offsets",
            help="Per-rank shift in µs, e.g. 1=12.5,2=-3, added after the placement (anchors, --align) "
            "as a manual correction.",
        ),
    ] = None,
    align: Annotated[
        str | None,
        typer.Option("--align", metavar="LABEL[@N]",
                     help="LABEL or LABEL@N: shift ranks so the end of LABEL's N-th "
                     "occurrence (default the first; median over a rank's cores) coincides; "
                     "refines the save anchors' placement when there are anchors."),
    ] = None,
    merge: Annotated[
        list[Path] | None,
        typer.Option("--merge", metavar="TRACE_VIEW.json",
                     help="A framework trace (torch_npu trace_view.json, Kineto JSON) to write "
                     "the device tracks into, each launch under its kernel slice; repeat for several."),
    ] = None,
    ignore_fingerprint: Annotated[
        bool, typer.Option("--ignore-fingerprint", help="Decode even with a map from another build.")
    ] = False,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=0,
                     help="Processes decoding and writing consecutive runs of rank files side "
                     "by side; the trace is the same. Default 1 (more pay only on CPUs that "
                     "really run in parallel); 0: one per CPU, at most 4. Always 1 for .gz, "
                     ".pftrace and --split."),
    ] = None,
    fmt: Annotated[
        str | None, typer.Option("--format", help="json, perfetto or parquet (needs the [query] extra). "
                                 "Default: by the output's name.")
    ] = None,
    split: Annotated[
        str | None,
        typer.Option("--split", help="rank: one file per rank, all its launches; SIZE (e.g. 256M): files of "
                     "at most SIZE bytes, each a whole trace (trace.rank000.json, trace.part000.json)."),
    ] = None,
) -> None:
    """Decode rank files into a Chrome / Perfetto trace."""
    from optrace.cli.collect_fast import run_collect

    raise typer.Exit(run_collect(
        profiling_dir, output, point_map=point_map, clock_mhz=clock_mhz, ranks=ranks, cores=cores,
        labels=labels, rank_offsets=rank_offsets, ignore_fingerprint=ignore_fingerprint, jobs=jobs,
        format=fmt, split=split, align=align, merge=merge,
    ))


FormatOption = Annotated[str, typer.Option("--format", help="text or json.")]


def cmd_inspect(
    path: Annotated[Path, typer.Argument(help="A rank file, a profiling directory or a trace "
                                         f"({_TRACE_SUFFIXES}).")],
    fmt: FormatOption = "text",
) -> None:
    """Per-core records, fill %, drops, first / last cycle of rank files (of a trace: per track)."""
    raise typer.Exit(run_inspect(path, fmt))


def cmd_report(
    path: Annotated[Path, typer.Argument(help=f"A trace ({_TRACE_SUFFIXES}), a profiling directory or "
                                         f"{_DATASET}.")],
    point_map: Annotated[
        Path | None, typer.Option("--point-map", help="For a profiling directory (default: beside it).")
    ] = None,
    html: Annotated[Path | None, typer.Option(
        "--html", help="Write a self-contained HTML page (with --png: both).")] = None,
    png: Annotated[Path | None, typer.Option(
        "--png", help="Write the bar charts as a PNG (needs the [report] extra).")] = None,
    clock_mhz: Annotated[float | None, typer.Option(
        "--clock-mhz", help="For a profiling directory: the system counter rate in MHz (default: the "
        "rank file's, else 50). A trace already holds times.")] = None,
    top: Annotated[int, typer.Option("--top", help="Hotspots to list.")] = 10,
    fmt: FormatOption = "text",
) -> None:
    """Per-label statistics, imbalance and hotspots; optionally a picture."""
    raise typer.Exit(run_report(path, point_map=point_map, html=html, png=png, clock_mhz=clock_mhz,
                                top=top, fmt=fmt))


def cmd_compare(
    before: Annotated[Path, typer.Argument(help=f"Trace ({_TRACE_SUFFIXES}), profiling directory or "
                                           f"{_DATASET} before the change.")],
    after: Annotated[Path, typer.Argument(help="The same, after the change.")],
    expect: Annotated[
        float | None, typer.Option("--expect", help="Expected gain in % (30 for -30 %).")
    ] = None,
    label: Annotated[str, typer.Option("--label", help="Label whose total time is judged.")] = "processing",
    point_map: Annotated[
        Path | None, typer.Option("--point-map", help="For profiling directories (default: beside each).")
    ] = None,
    fail_on_regression: Annotated[
        float | None,
        typer.Option("--fail-on-regression", metavar="PCT",
                     help="Exit 1 when a label's median time per launch is significantly slower: "
                     "its gain's 95 % interval below 0 and its upper bound below -PCT % "
                     "(0-1000; gains are positive when faster, as everywhere compare prints)."),
    ] = None,
    fmt: FormatOption = "text",
) -> None:
    """Per-label changes with bootstrap intervals over launches; with --expect, the verdict
    (exit 0 achieved, 1 otherwise); --fail-on-regression PCT: a CI gate."""
    raise typer.Exit(run_compare(before, after, expect=expect, label=label, point_map=point_map,
                                 fail_on_regression=fail_on_regression, fmt=fmt))


def cmd_demo_data(
    directory: Annotated[Path, typer.Argument(
        help="New directory, or one without rank files, to write them into (not a symlink to one).")],
    ranks: Annotated[int, typer.Option("--ranks", help="Ranks (1-64).")] = 2,
    launches: Annotated[int, typer.Option("--launches", help="Launches per rank (1-1000).")] = 8,
    aic: Annotated[int, typer.Option("--aic", help="AIC cores per rank (1-64); twice as many AIV.")] = 4,
    seed: Annotated[int, typer.Option("--seed", help="Random seed: same seed, same timings.")] = 0,
    speedup: Annotated[
        float, typer.Option("--speedup", help="Make the matmul phase (gmm) this many % faster (0-<100).")
    ] = 0.0,
) -> None:
    """Write a small profiling directory (rank files + point map) to try collect, report
    and compare without an Ascend device."""
    from optrace.runtime.demo import write_demo

    with _guarded():
        try:
            made = write_demo(directory.expanduser(), ranks=ranks, launches=launches, aic=aic,
                              seed=seed, speedup=speedup)
        except ValueError as exc:
            raise _bad_usage(str(exc)) from None
        print(f"wrote {made.directory}: {made.files} rank files ({made.ranks} ranks x {made.launches} "
              f"launches, {made.aic} AIC + {made.aiv} AIV cores each) and point_map.json")
        print(f"try: optrace collect {made.directory} -o trace.json; optrace report {made.directory}")


def register(app: typer.Typer) -> None:
    """Add the runtime commands to the top-level app."""
    app.command("collect")(cmd_collect)
    app.command("inspect")(cmd_inspect)
    app.command("report")(cmd_report)
    app.command("compare")(cmd_compare)
    app.command("demo-data")(cmd_demo_data)
