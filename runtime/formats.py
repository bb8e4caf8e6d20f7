"""collect's output formats: one entry each, instead of ``"json"`` / ``"perfetto"`` spread
over collect and its writers.

An entry says which output names select it (``--format`` overrides), how its trace is
written (the writer class and the per-file state it lays ranks out against), how its
files are recognised and read back (``recognises`` / ``reader``: :func:`load_spans` asks
the entries in turn), and what ``--merge`` does with it (the suffix of the device trace
collected beside the output before both are merged; None: it cannot be merged). The
writers are imported when a collect uses them, not with this module: a JSON collect never
pays for the Perfetto encoder, nor a trace for DuckDB (collect's start-up).

- ``json``: Chrome JSON (``.json``, ``.json.gz``); the only one written by several
  processes side by side (``-j``) and warned about past chrome://tracing's size.
- ``perfetto``: Perfetto's protobuf (``.pftrace``, ``.pftrace.gz``, ``.perfetto-trace``).
- ``parquet``: a directory of Parquet files, a folder per rank (runtime/dataset.py);
  asked for by ``--format parquet`` or an output name ending in ``.parquet``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .chrome import ChromeTraceWriter
from .dataset_layout import is_dataset
from .errors import ProfilingInputError
from .progress import reading
from .records import FrozenRecord
from .regular import open_regular

if TYPE_CHECKING:
    from .spans import Closing, SpanTable


class OutputFormat(FrozenRecord):
    __match_args__ = ("name", "suffixes", "merge_suffix", "side_by_side", "size_warning", "directory",
                      "describe", "recognises")
    __slots__ = __match_args__
    name: str  # --format's value
    suffixes: tuple[str, ...]  # output names that select it (and that --split keeps last)
    merge_suffix: str | None  # --merge: the device trace's temporary suffix; None: refused
    side_by_side: bool  # several processes may write one file (-j): Chrome JSON's rows
    size_warning: bool  # warned about past chrome://tracing's limit (trace_files.JSON_WARN_BYTES)
    directory: bool  # the output is a directory of files (a dataset), not a trace file
    describe: str  # for --help and errors
    recognises: Callable[[Path], bool]  # an input of this format (by its name or its first bytes)

    def __init__(self, name: str, suffixes: tuple[str, ...], merge_suffix: str | None, side_by_side: bool,
                 size_warning: bool, directory: bool, describe: str,
                 recognises: Callable[[Path], bool]) -> None:
        values = (name, suffixes, merge_suffix, side_by_side, size_warning, directory, describe, recognises)
        for field, value in zip(self.__match_args__, values, strict=True):
            object.__setattr__(self, field, value)

    def writer(self) -> tuple[Any, Callable[[], Any]]:
        """(the trace writer class, a new file's layout state) — trace formats only."""
        if self.name == PERFETTO.name:
            from .perfetto import PerfettoTraceWriter, Sequences  # only for .pftrace (start-up)

            return PerfettoTraceWriter, Sequences  # a file's own: its ranks' tracks and sequences
        if self.name == JSON.name:
            return ChromeTraceWriter, _no_state
        raise ValueError(f"{self.name} is not written as a trace file")

    def reader(self) -> Callable[[Path], SpanTable]:
        """Its spans, read back (report, compare, inspect, the pages). Imported when an
        input is read, not with this module: a collect never pays for the readers."""
        if self.name == PARQUET.name:
            from .query import load_dataset  # DuckDB's reader, the [query] extra

            return load_dataset
        from . import spans

        return spans.load_perfetto_trace if self.name == PERFETTO.name else spans.load_trace

    def matches(self, output: Path) -> bool:
        return output.name.endswith(self.suffixes)


def _no_state() -> None:
    return None


def _any_file(path: Path) -> bool:
    return True


def is_protobuf(path: Path) -> bool:
    """A Perfetto trace: named so, or starting like one (a packet, field 1, not JSON)."""
    if path.name.endswith((".pftrace", ".pftrace.gz", ".perfetto-trace", ".pb")):
        return True
    try:
        with open_regular(path, "trace") as handle:  # a FIFO is never opened blocking
            head = handle.read(2)
    except OSError:
        return False
    return head[:1] == b"\x0a"


JSON = OutputFormat("json", (".json.gz", ".json"), ".json", side_by_side=True, size_warning=True,
                    directory=False, describe="Chrome JSON (.json, .json.gz)",
                    recognises=_any_file)  # what is no other format's is read as JSON
PERFETTO = OutputFormat("perfetto", (".pftrace.gz", ".pftrace", ".perfetto-trace"), ".pftrace",
                        side_by_side=False, size_warning=False, directory=False,
                        describe="Perfetto protobuf (.pftrace)", recognises=is_protobuf)
PARQUET = OutputFormat("parquet", (".parquet",), None, side_by_side=False, size_warning=False,
                       directory=True, describe="a Parquet dataset (a directory, a folder per rank)",
                       recognises=is_dataset)

#: Every format, in the order --help lists them; the default (an unknown name) is the first.
FORMATS: tuple[OutputFormat, ...] = (JSON, PERFETTO, PARQUET)
#: The order an input is recognised in: the catch-all (JSON) last.
_RECOGNISED = (PARQUET, PERFETTO, JSON)
BY_NAME = {f.name: f for f in FORMATS}

#: Trace-file names --split knows (``trace.json`` -> ``trace.rank000.json``); ``.pb`` is
#: a Perfetto trace read back, never chosen by its name.
SPLIT_SUFFIXES = (*JSON.suffixes, *PERFETTO.suffixes, ".pb")


def names() -> str:
    """``json, perfetto or parquet``."""
    listed = [f.name for f in FORMATS]
    return f"{', '.join(listed[:-1])} or {listed[-1]}"


def output_format(output: Path, requested: str | None) -> OutputFormat:
    """The format asked for (``--format``), else the one the output's name selects, else JSON."""
    if requested is not None:
        found = BY_NAME.get(requested)
        if found is None:
            raise ValueError(f"--format must be {names()}, not {requested!r}")
        return found
    return next((f for f in FORMATS if f.matches(output)), JSON)


def input_format(path: Path) -> OutputFormat | None:
    """The format ``path`` holds; None for a directory that is no dataset (rank files)."""
    if path.is_dir():
        return PARQUET if PARQUET.recognises(path) else None
    return next(f for f in _RECOGNISED if not f.directory and f.recognises(path))


def span_chunks(path: Path, point_map: Path | None = None, clock_mhz: float | None = None,
                nested: bool = True) -> tuple[Iterator[SpanTable], Closing]:
    """The spans of what :func:`load_spans` reads, a rank at a time where its format
    allows (a profiling directory: a rank file at a time), else as one table; the
    source's closing is complete once the tables are (runtime/rollup.py sums them)."""
    if path.is_dir() and input_format(path) is None and path.suffix != ".pt":
        from .spans import profiling_dir_chunks  # with the readers (collect's start-up)

        return profiling_dir_chunks(path, point_map, clock_mhz, nested)
    if path.is_file() and path.suffix != ".pt" and input_format(path) is PERFETTO:
        from .spans import perfetto_chunks

        return perfetto_chunks(path, nested)
    if path.is_file() and path.suffix != ".pt" and input_format(path) is JSON:
        from .spans import json_chunks

        return json_chunks(path, nested)
    from .spans import whole_table_chunks

    return whole_table_chunks(load_spans(path, point_map, clock_mhz))


F = TypeVar("F", bound="Folds")


class Folds(Protocol):
    """What sums a source's tables (runtime/rollup.py's rollups); ``nested``: whether it
    reads the spans' depth and self time (the tables leave them out otherwise)."""

    nested: bool

    def add(self, table: SpanTable) -> None: ...


def fold_spans(path: Path, make: Callable[[], F], point_map: Path | None = None,
               clock_mhz: float | None = None) -> tuple[F, Closing]:
    """``make()``'s rollup given the spans of ``path`` a rank at a time where the input
    allows (:func:`span_chunks`), or given them whole where a trace turns out not to
    (perfetto_read.Regroup: a fresh rollup, the trace read again as one table)."""
    from .perfetto_read import Regroup, read_spans
    from .spans import load_perfetto_trace, load_trace, other_data, read_trace_events, whole_table_chunks

    rollup = make()
    chunks, closing = span_chunks(path, point_map, clock_mhz, rollup.nested)
    try:
        try:
            for table in chunks:
                rollup.add(table)
        finally:  # a rollup that raised: the source's progress line closed now, not at GC
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
    except Regroup:
        rollup = make()
        if input_format(path) is JSON:
            events = read_trace_events(path)
            chunks, closing = whole_table_chunks(load_trace(path, events), other_data(events))
        else:
            progress = reading(path)
            try:
                found = read_spans(path, progress.update)
            finally:
                progress.close()
            metadata = found.metadata if isinstance(found.metadata, dict) else {}
            chunks, closing = whole_table_chunks(load_perfetto_trace(path, found), metadata)
        for table in chunks:
            rollup.add(table)
    return rollup, closing


def load_spans(path: Path, point_map: Path | None = None, clock_mhz: float | None = None) -> SpanTable:
    """Every span of a profiling directory (decoded from its rank files), a dataset or a
    trace file (.json / .json.gz, .pftrace), read by its format's reader."""
    if not path.exists():
        raise ProfilingInputError(path, "no such file or directory")
    if path.suffix == ".pt":
        raise ProfilingInputError(
            path, "expected a trace or a profiling directory (`optrace inspect` reads .pt files)"
        )
    found = input_format(path)
    if found is None:
        from .spans import load_profiling_dir  # with the readers (collect's start-up)

        return load_profiling_dir(path, point_map, clock_mhz)
    return found.reader()(path)
