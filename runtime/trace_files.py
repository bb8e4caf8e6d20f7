"""Which trace files ``collect`` writes: the format, ``--split``, the JSON size warning.

The Chrome JSON trace is for small runs: chrome://tracing struggles past ~256 MB of it
(docs/runtime.md, "Big runs"), so collect warns when a JSON file would pass
:data:`JSON_WARN_BYTES`, before it is written, and says to write ``.pftrace`` or
``--split``. ``--split rank`` writes one file per rank (all its launches); ``--split SIZE``
fills each file with consecutive rank files (launches) up to SIZE bytes (one larger
than SIZE gets a file of its own, with a warning). Each file is a complete trace of its ranks, with their
metadata (a rank whose launches do not fit in one file continues in the next).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from .atomic import OutputError, output_target
from .chrome import RenderedRank, RowScratch
from .formats import JSON, SPLIT_SUFFIXES, OutputFormat
from .numbers import SPLIT_BYTES, check_number

#: A JSON trace past this many bytes gets a warning (chrome://tracing's practical limit).
JSON_WARN_BYTES = 256 << 20

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_split(text: str) -> str | int:
    """``rank``, or a size: ``256M``, ``1G``, ``500k``, ``1000000`` (binary units)."""
    if text.strip().lower() == "rank":
        return "rank"
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]?)(?:i?b)?\s*", text.lower())
    if match is None:
        raise ValueError(f"--split: {text!r} is not 'rank' or a size like 256M")
    size = int(float(match[1]) * _UNITS[match[2]])
    if size < 1024:
        raise ValueError(f"--split: {text!r} is too small for a trace file (at least 1k)")
    return int(check_number(f"--split {text.strip()}", size, SPLIT_BYTES))


def split_name(output: Path, part: str) -> Path:
    """``trace.json`` -> ``trace.<part>.json`` (``.json.gz``, ``.pftrace`` likewise)."""
    name = output.name
    suffix = next((s for s in SPLIT_SUFFIXES if name.endswith(s) and len(name) > len(s)), output.suffix)
    return output.with_name(f"{name[: len(name) - len(suffix)]}.{part}{suffix}")


def warn(message: str) -> None:
    print(f"optrace: warning: {message}", file=sys.stderr, flush=True)


def json_too_big(path: Path, size: int, projected: bool) -> str:
    about = "would be about" if projected else "is"
    return (f"{path}: the JSON trace {about} {size / (1 << 20):.0f} MB, past the "
            f"{JSON_WARN_BYTES >> 20} MB chrome://tracing handles: write a .pftrace "
            "(-o trace.pftrace, Perfetto's own format, ~5x smaller) or split it (--split rank|SIZE)")


class SizeWatch:
    """Warns once, before the bytes are written, when a JSON trace will pass the limit:
    from its ranks laid out so far, scaled to all its rank files' bytes. Only the process
    that made it warns (collect's forked workers run the same code)."""

    def __init__(self, path: Path, file_bytes: int) -> None:
        self.path = path
        self.file_bytes = file_bytes
        self.seen_files = 0
        self.seen_trace = 0
        self.warned = False
        self.pid = os.getpid()

    def add(self, file_bytes: int, trace_bytes: int) -> None:
        if self.warned or os.getpid() != self.pid:
            return
        self.seen_files += file_bytes
        self.seen_trace += trace_bytes
        if self.seen_trace > JSON_WARN_BYTES:
            projected = self.seen_trace
        elif self.seen_files:
            projected = self.seen_trace * max(self.file_bytes, self.seen_files) // self.seen_files
        else:
            return
        if projected > JSON_WARN_BYTES:
            self.warned = True
            warn(json_too_big(self.path, projected, projected != self.seen_trace))


class _Writer(Protocol):
    events: int

    def __enter__(self) -> Any: ...
    def __exit__(self, *exc: Any) -> None: ...
    def write_rendered(self, rendered: RenderedRank) -> int: ...
    def close(self, other_data: dict[str, Any], names: bytes = b"") -> None: ...
    @staticmethod
    def opening_size() -> int: ...
    @staticmethod
    def rank_size(rendered: RenderedRank, first: bool) -> int: ...
    @staticmethod
    def closing_size(other_data: dict[str, Any], names: bytes = b"") -> int: ...


PlanFunction = Callable[[int, RowScratch, Any], "RenderedRank | None"]


def write_files(
    output: Path,
    fmt: OutputFormat,
    split: str | int | None,
    part_names: Sequence[str],
    plan: PlanFunction,
    other_data: Callable[[list[int]], dict[str, Any]],
    advance: Callable[[int], None],
    inputs: Sequence[Path] = (),
    ranks: Sequence[int] | None = None,
    names: Callable[[list[int]], bytes] | None = None,
) -> tuple[list[Path], int]:
    """Plan each rank file (``part_names[i]`` names file i in warnings; ``ranks[i]``: its
    rank, whose number names its file with ``--split rank``, a rank's files one after the
    other) and write it at once into the file it belongs to, one rank file in memory;
    returns the files written and their events. ``.pftrace`` with no split is one file
    too. ``names``: the JSON name rows of the files at some positions
    (:func:`chrome.name_rows`), written last.

    Every file is written under a temporary name and they all take their names at the
    end, together: when no rank has a span (``--labels`` / ``--cores`` kept none, or no
    point was recorded) or something fails, nothing is written and earlier outputs stay
    as they were; with no span it returns no files. A file that is one of ``inputs``, or
    a FIFO / socket / directory, is refused (runtime/atomic.py); a device is written
    through."""
    writer_class, fresh = fmt.writer()
    sequences = fresh()
    scratch = RowScratch()
    outputs: list[Path] = []
    # (temporary, file it becomes) of each regular output, renamed when all are done; a
    # device output is written straight into (atomic.py) and has no entry.
    pending: list[tuple[Path, Path]] = []
    shown: dict[str, Path] = {}  # temporary -> the output it becomes, as the user named it
    events = 0
    spans = 0
    current: _Writer | None = None
    positions: list[int] = []
    size = 0
    warned = False

    def open_file(path: Path, state: Any = None) -> None:
        """``state``: the Perfetto sequences a rank file was laid out against for it."""
        nonlocal current, size, sequences
        found = output_target(path, inputs)
        outputs.append(path)
        into = path
        if not found.through:  # a symlink to a regular file: the file it names is replaced
            into = found.real.with_name(f".{found.real.name}.{os.getpid()}.{os.urandom(4).hex()}.part.tmp")
            pending.append((into, found.real))
            shown[str(into)] = path
        current = writer_class(into, compress=path.name.endswith(".gz"))
        current.__enter__()
        positions.clear()
        size = writer_class.opening_size()
        sequences = fresh() if state is None else state

    def tail(at: list[int]) -> bytes:
        return names(at) if names is not None and fmt is JSON else b""

    def close_file() -> None:
        nonlocal current, events
        if current is not None:
            # No longer ours to clean up whatever its exit does: a flush failing on a full
            # disk removes the temporary itself (atomic.py), and a second exit would only
            # raise that error again over the one reported.
            closing, current = current, None
            try:
                closing.close(other_data(positions), tail(positions))
            except BaseException as exc:
                closing.__exit__(type(exc), exc, exc.__traceback__)
                raise
            closing.__exit__(None, None, None)
            events += closing.events

    try:
        if split is None:
            open_file(output, sequences)
        file_rank: int | None = None  # --split rank: the rank of the file being written
        rank_of = list(ranks) if ranks is not None else list(range(len(part_names)))
        for position, part in enumerate(part_names):
            rank = rank_of[position]
            starts = split == "rank" and (current is None or file_rank != rank)
            # A new file's first rank file is laid out against that file's (empty) tracks.
            state = fresh() if starts else sequences
            rendered = plan(position, scratch, state)
            if rendered is None:
                advance(1)
                continue
            if starts:
                close_file()
                open_file(split_name(output, f"rank{rank:03d}"), state)
                file_rank = rank
            elif isinstance(split, int):
                first = current is None or not positions
                grown_to = [*positions, position]
                grown = size + writer_class.rank_size(rendered, first) \
                    + writer_class.closing_size(other_data(grown_to), tail(grown_to))
                if current is None or (positions and grown > split):
                    again = current is not None  # laid out against the file before, whose tracks
                    close_file()                  # this one does not have: once more
                    open_file(split_name(output, f"part{len(outputs):03d}"), None if again else state)
                    first = True
                    if again:
                        rendered = plan(position, scratch, sequences)
                        assert rendered is not None
                alone = writer_class.opening_size() + writer_class.rank_size(rendered, True) \
                    + writer_class.closing_size(other_data([position]), tail([position]))
                if first and alone > split:
                    warn(f"{outputs[-1]}: rank file {part} alone needs {alone} bytes, more than "
                         f"--split {split}: it gets a file of its own")
            assert current is not None
            first = not positions
            if fmt.size_warning and not warned:  # once a run, before the bytes are written
                grown = size + writer_class.rank_size(rendered, first)
                if grown > JSON_WARN_BYTES >= size:
                    warned = True
                    warn(json_too_big(outputs[-1], grown, False))
            size += writer_class.rank_size(rendered, first)
            spans += current.write_rendered(rendered)
            positions.append(position)
            advance(1)
        close_file()
        if spans:
            for temporary, real in pending:
                try:
                    os.replace(temporary, real)
                except OSError as exc:
                    raise OutputError(shown[str(temporary)], f"cannot write: {exc.strerror or exc}") from None
            pending.clear()
        else:
            outputs.clear()
            events = 0
    except (OSError, OutputError) as exc:
        # A part's temporary name is ours: the error names the file the user asked for.
        # (OutputError is not an OSError: atomic.py's own, e.g. a flush failing on close.)
        told = _as_part_error(exc, shown, outputs)
        if told is None:
            raise
        raise told from None
    finally:
        if current is not None:  # an exception: the file being written is not left behind
            error = sys.exc_info()[1] or RuntimeError("trace not finished")
            try:
                current.__exit__(type(error), error, error.__traceback__)
            except Exception:  # the error reported is the first one (above)
                pass
        for temporary, _ in pending:  # nothing to show, or an exception: no part is left behind
            try:
                os.unlink(temporary)
            except FileNotFoundError:
                pass
    return outputs, events


def _as_part_error(
    exc: OSError | OutputError, shown: dict[str, Path], outputs: list[Path]
) -> OutputError | None:
    """``exc`` told about the part the user will get instead of its temporary name; None
    when it is about neither (raised as it is)."""
    if isinstance(exc, OutputError):
        if exc.path not in shown:
            return None
        message = exc.message
        for temporary, part in shown.items():
            message = message.replace(temporary, str(part))
        return OutputError(shown[exc.path], message)
    where = os.fsdecode(exc.filename) if exc.filename is not None else None
    if where in shown:  # e.g. its temporary could not be opened
        return OutputError(shown[where], f"cannot write: {exc.strerror or exc}")
    if where is None and outputs:  # a write into the part failed (a full disk)
        return OutputError(outputs[-1], f"cannot write: {exc.strerror or exc}")
    return None
