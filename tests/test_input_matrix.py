"""The input matrix: every command against bad input, with its behaviour, message and exit.

One case list (CASES) drives both the tests and docs/input-matrix.md:

    python tests/test_input_matrix.py --write-doc     # regenerate the table

and `test_the_committed_table_is_current` fails when the doc is stale. Exit codes
(cli.md): 0 clean, 1 findings / changes, 2 bad input, 3 internal error — and never a
traceback. A case whose expectation optrace does not meet yet carries `bug=` (the module
to fix): it runs as a strict xfail and the table says so.

Inputs are built fresh per case in a temporary directory. Paths with non-UTF-8 bytes run
optrace in a child process whose stdout is strict UTF-8 (what any UTF-8 locale gives);
everything else runs in-process.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "input-matrix.md"
FUZZ_FIGURES = ROOT / "tests" / "data" / "fuzz_figures.json"  # tests/fuzz_all.py writes it
LONG = os.environ.get("OPTRACE_LONG_FUZZ", "") not in ("", "0")

# --------------------------------------------------------------------------- inputs

KERNEL = (
    b'#include "kernel_operator.h"\n'
    b'#include "extra.h"\n'
    b"// \xb7\xd6\xd7\xe9\xd1\xad\xbb\xb7 (GBK) and bytes no encoding has: \xff\xfe\x80\n"
    b"__aicore__ inline void Compute(uint32_t n)\n"
    b"{\n"
    b"    for (uint32_t groupIdx = 0; groupIdx < n; ++groupIdx) {\n"
    b"        AscendC::SyncAll();\n"
    b"    }\n"
    b"}\n"
    b'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace, '
    b"GM_ADDR tiling)\n"
    b"{\n"
    b'    const char* tag = "\xc4\xe3\xba\xc3";\n'
    b"    (void)tag;\n"
    b"    Compute(4);\n"
    b"}\n"
)
NON_UTF8 = (b"\xb7\xd6\xd7\xe9", b"\xff\xfe\x80", b"\xc4\xe3\xba\xc3")
LABELS = {"processing": (1, 2), "processing dispatch": (3, 4)}
NON_UTF8_NAME = b"\xb7\xd6\xd7\xe9".decode("utf-8", "surrogateescape")  # a GBK folder name


def _ten_mb_header() -> bytes:
    """A generated header of string tables, 10 MB (the size of real generated code)."""
    line = b'    "' + b"0123456789abcdef" * 5 + b'",\n'
    count = 10 * 1024 * 1024 // len(line) + 1
    return b"#pragma once\nconstexpr const char* kBlob[] = {\n" + line * count + b"};\n"


def _numeric_header() -> bytes:
    """12 MB of `0x..` literals (a lookup table): left out of the parse as data (engine/cpp.py)."""
    row = b"    " + b", ".join(b"0x%02x" % (i % 251) for i in range(16)) + b",\n"
    return b"#pragma once\nconstexpr uint8_t kTable[] = {\n" + row * (12 * 1024 * 1024 // len(row)) + b"};\n"


@dataclass
class Scene:
    """The inputs of one case; `paths` fill the placeholders of args and messages."""

    tmp: Path
    paths: dict[str, Path] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # set while the command runs

    def __getitem__(self, key: str) -> Path:
        return self.paths[key]


def _operator(tmp: Path, name: str = "repo", extra: bytes = b"// nothing here\n") -> Scene:
    repo = tmp / name
    kernel = repo / "demo_op" / "op_kernel"
    kernel.mkdir(parents=True)
    (repo / "optrace.toml").write_text("")
    (kernel / "demo_op.cpp").write_bytes(KERNEL)
    (kernel / "extra.h").write_bytes(extra)
    blocker = tmp / "a-file"
    blocker.write_text("a regular file, so nothing can be created under it\n")
    return Scene(tmp, {"root": repo, "op": repo / "demo_op", "src": kernel, "file": blocker,
                       "out": tmp / "out"})


def _cli_inprocess(args: list[str]) -> tuple[int, str, BaseException | None]:
    from typer.testing import CliRunner

    from optrace.cli.app import app

    res = CliRunner().invoke(app, args)
    exc = None if res.exception is None or isinstance(res.exception, SystemExit) else res.exception
    return res.exit_code, res.stdout + res.stderr, exc


def _apply(scene: Scene) -> None:
    """Instrument the operator (the library, so a case sees only its own command's bugs)."""
    from optrace.engine.transaction import commit
    from optrace.pipeline.apply import apply_changes

    commit(apply_changes(scene["op"]).changes, scene["root"] / ".optrace", name="matrix")


def _rank_file(path: Path, slots: int = 6, words: int = 64) -> None:
    from optrace.runtime.pt_writer import write_pt
    from optrace.runtime.synth import SlotWriter, new_buffer

    data = new_buffer(slots, words)
    for s in range(slots):
        writer = SlotWriter(data[s], 1000 + 7 * s, fingerprint=0xC0FFEE11)
        b, e = LABELS["processing"]
        db, de = LABELS["processing dispatch"]
        for n, (point, t) in enumerate([(b, 10), (db, 20), (de, 40), (e, 60)]):
            writer.record(point, 1000 + 7 * s + t + n)
    meta = {"slot_words": words, "aic_cores": slots // 3, "aiv_cores": slots - slots // 3,
            "format_version": 1, "clock_mhz": 50.0, "barrier": True, "fingerprint": 0xC0FFEE11}
    with open(path, "wb") as handle:
        write_pt({"optrace_profiling": 1, "meta": meta, "data": data}, handle)


def _point_map(directory: Path, file_field: bytes = b"op_kernel/op.h") -> None:
    points = []
    for n, (label, (b, e)) in enumerate(LABELS.items()):
        for point, kind in ((b, "B"), (e, "E")):
            points.append(b'"%d": {"label": "%s", "file": "%s", "line": %d, "event_type": "%s"}'
                          % (point, label.encode(), file_field, 10 + n, kind.encode()))
    (directory / "point_map.json").write_bytes(
        b'{"format_version": 1, "fingerprint": 3237998097, "points": {' + b", ".join(points) + b"}}\n")


def _profiling(tmp: Path, name: str = "prof", ranks: int = 2) -> Scene:
    prof = tmp / name
    prof.mkdir(parents=True)
    for rank in range(ranks):
        _rank_file(prof / f"rank{rank:03d}.pt")
    _point_map(prof)
    blocker = tmp / "a-file"
    blocker.write_text("a regular file\n")
    return Scene(tmp, {"prof": prof, "file": blocker, "out": tmp / "trace.json"})


# Scenes per (family, condition); families: "source" (plan / apply / check / preprocess),
# "applied" (strip / check / preprocess start from an applied tree) and "runtime".


def scene_missing(tmp: Path, family: str) -> Scene:
    return Scene(tmp, {"op": tmp / "no-such-op", "src": tmp / "no-such-src", "prof": tmp / "no-such-dir",
                       "out": tmp / "out"})


def scene_empty(tmp: Path, family: str) -> Scene:
    for name in ("repo/demo_op", "src", "prof"):
        (tmp / name).mkdir(parents=True)
    (tmp / "repo" / "optrace.toml").write_text("")
    return Scene(tmp, {"op": tmp / "repo" / "demo_op", "src": tmp / "src", "prof": tmp / "prof",
                       "out": tmp / "out"})


def scene_non_utf8_bytes(tmp: Path, family: str) -> Scene:
    if family == "runtime":  # a point map whose source paths are GBK bytes
        scene = _profiling(tmp)
        _point_map(scene["prof"], b"op_kernel/\xb7\xd6\xd7\xe9.h")
        return scene
    scene = _operator(tmp)
    if family == "applied":
        _apply(scene)
    return scene


def scene_non_utf8_path(tmp: Path, family: str) -> Scene:
    if family == "runtime":
        return _profiling(tmp, f"prof-{NON_UTF8_NAME}")
    scene = _operator(tmp, f"repo-{NON_UTF8_NAME}")
    if family == "applied":
        _apply(scene)
    return scene


def scene_binary(tmp: Path, family: str) -> Scene:
    if family == "runtime":
        scene = _profiling(tmp)
        (scene["prof"] / "rank000.pt").write_bytes(bytes(range(256)) * 64)
        trace = tmp / "trace.json"
        trace.write_bytes(b"\x00\x01PK\x03\x04" + bytes(range(256)) * 16)
        scene.paths["trace"] = trace
        return scene
    scene = _operator(tmp, extra=b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 64)
    if family == "applied":
        _apply(scene)
    return scene


_BIG: dict[str, bytes] = {}


def scene_big(tmp: Path, family: str) -> Scene:
    if family == "runtime":  # 648 slots of 2048 words: a 10.6 MB rank file
        scene = _profiling(tmp, ranks=0)
        _rank_file(scene["prof"] / "rank000.pt", slots=648, words=2048)
        return scene
    if "big" not in _BIG:
        _BIG["big"] = _ten_mb_header()
    scene = _operator(tmp, extra=_BIG["big"])
    if family == "applied":
        _apply(scene)
    return scene


def scene_numeric(tmp: Path, family: str) -> Scene:
    if "numeric" not in _BIG:
        _BIG["numeric"] = _numeric_header()
    scene = _operator(tmp, extra=_BIG["numeric"])
    if family == "applied":
        _apply(scene)
    return scene


def scene_cycle(tmp: Path, family: str) -> Scene:
    scene = _operator(tmp, extra=b'#pragma once\n#include "a.h"\n')
    (scene["src"] / "a.h").write_bytes(b'#include "b.h"\n__aicore__ inline void A() {}\n')
    (scene["src"] / "b.h").write_bytes(b'#include "a.h"\n__aicore__ inline void B() {}\n')
    if family == "applied":
        _apply(scene)
    return scene


def scene_symlink_loop(tmp: Path, family: str) -> Scene:
    if family == "runtime":  # rank000.pt links to itself; rank001.pt is fine
        scene = _profiling(tmp)
        (scene["prof"] / "rank000.pt").unlink()
        os.symlink("rank000.pt", scene["prof"] / "rank000.pt")
        scene.paths["loop"] = scene["prof"] / "rank000.pt"
        return scene
    scene = _operator(tmp, extra=b'#pragma once\n#include "loop.h"\n')
    os.symlink("loop.h", scene["src"] / "loop.h")  # a header that is a link to itself
    os.symlink("..", scene["src"] / "up")  # a folder that leads back up: walks must not loop
    if family == "applied":
        _apply(scene)
    return scene


def scene_arg_loop(tmp: Path, family: str) -> Scene:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "optrace.toml").write_text("")
    loop = tmp / "loop"
    os.symlink("loop", loop)
    return Scene(tmp, {"op": loop, "src": loop, "prof": loop, "out": tmp / "out"})


def scene_fifo(tmp: Path, family: str) -> Scene:
    """A FIFO where a file is expected: the included extra.h (runtime: rank000.pt)."""
    if family == "runtime":
        scene = _profiling(tmp)
        (scene["prof"] / "rank000.pt").unlink()
        os.mkfifo(scene["prof"] / "rank000.pt")
        scene.paths["fifo"] = scene["prof"] / "rank000.pt"
        return scene
    scene = _operator(tmp)
    if family == "applied":
        _apply(scene)
    (scene["src"] / "extra.h").unlink()
    os.mkfifo(scene["src"] / "extra.h")
    scene.paths["fifo"] = scene["src"] / "extra.h"
    return scene


def scene_output_input(tmp: Path, family: str) -> Scene:
    """The output names one of the command's inputs (preprocess: OUT/point_map.json is a
    link to a source)."""
    if family == "runtime":
        return _profiling(tmp)
    scene = _operator(tmp)
    if family == "applied":
        _apply(scene)
    scene["out"].mkdir()
    os.symlink(scene["src"] / "demo_op.cpp", scene["out"] / "point_map.json")
    return scene


def _padded(text: bytes, size: int, comment: bytes) -> bytes:
    """`text` padded to exactly `size` bytes with a comment line (or JSON spaces): the
    size is part of the message."""
    pad = size - len(text)
    return text + (comment + b"x" * (pad - len(comment) - 1) + b"\n" if comment else b" " * pad)


def scene_past_bound(tmp: Path, family: str) -> Scene:
    """Files past the bounds of their kind in the user's own `[limits]`: the repository's
    100-byte optrace.toml past config_bytes = 64 and a 50,000-byte extra.h past
    source_bytes = 40000; for the runtime, a 5000-byte rank000.pt past rank_bytes = 4999
    and a 100-byte trace past trace_bytes = 64 (rank001.pt, 4 KB, is within)."""
    config_home = tmp / "user-config"
    (config_home / "optrace").mkdir(parents=True)
    if family == "runtime":
        scene = _profiling(tmp)
        (scene["prof"] / "rank000.pt").write_bytes(_padded(b"PK", 5000, b""))
        trace = tmp / "trace.json"
        trace.write_bytes(_padded(b'{"traceEvents": []}', 100, b""))
        scene.paths["trace"] = trace
        limits = b"[limits]\nrank_bytes = 4999\ntrace_bytes = 64\n"
    else:
        scene = _operator(tmp, extra=_padded(b"#pragma once\n", 50_000, b"// "))
        if family == "applied":
            _apply(scene)
        (scene["root"] / "optrace.toml").write_bytes(_padded(b"", 100, b"# "))
        limits = b"[limits]\nconfig_bytes = 64\nsource_bytes = 40000\n"
    (config_home / "optrace" / "config.toml").write_bytes(limits)
    scene.env["XDG_CONFIG_HOME"] = str(config_home)
    return scene


def _input_kept(scene: Scene) -> None:
    if "prof" in scene.paths:
        assert (scene["prof"] / "rank000.pt").read_bytes()[:2] == b"PK"
        assert json.loads((scene["prof"] / "point_map.json").read_bytes())["points"]
    else:
        data = (scene["src"] / "demo_op.cpp").read_bytes()
        assert data == KERNEL or b"TRACE_POINT" in data, "a source was overwritten"


def scene_unwritable(tmp: Path, family: str) -> Scene:
    if family == "runtime":
        return _profiling(tmp)
    scene = _operator(tmp)
    if family == "applied":
        _apply(scene)
    return scene


def scene_journal_blocked(tmp: Path, family: str) -> Scene:
    scene = scene_unwritable(tmp, family)
    journal = scene["root"] / ".optrace"
    if journal.is_dir():  # left by the apply an applied tree starts from
        for leftover in journal.iterdir():
            leftover.unlink()
        journal.rmdir()
    journal.write_bytes(b"a file where the journal directory goes\n")
    return scene


VICTIM = b"a file outside the repository\n"


def scene_clone_journal(tmp: Path, family: str) -> Scene:
    """A journal the clone brought (not recorded in the user's state directory) for this
    very operator, which would roll a file outside the repository back to other bytes."""
    import hashlib

    from optrace.engine.journal import journal_path, operator_journal_name

    scene = scene_unwritable(tmp, family)
    if family == "runtime":
        return scene
    victim = tmp / "victim.txt"
    victim.write_bytes(VICTIM)
    journal = journal_path(scene["root"] / ".optrace", operator_journal_name(scene["op"], scene["root"]))
    journal.parent.mkdir(exist_ok=True)
    backup = journal.with_suffix(".backup")
    backup.mkdir()
    (backup / "old.bin").write_bytes(b"pwned\n")
    entry = {"path": str(victim), "action": "modify", "old_sha256": hashlib.sha256(b"pwned\n").hexdigest(),
             "new_sha256": hashlib.sha256(VICTIM).hexdigest(), "mode": 0o4755, "backup": "old.bin@0+6",
             "created_dirs": []}
    journal.write_text(json.dumps({"format": "optrace-journal", "version": 2, "name": "demo_op", "pid": 1,
                                   "started": "", "token": "c0ffee", "files": [entry]}))
    scene.paths |= {"journal": journal, "victim": victim}
    return scene


def scene_rule_module(tmp: Path, family: str) -> Scene:
    """The repository's config names a rule module the repository ships (the user did not
    pass --trust-config nor list the repository in the user-level config)."""
    scene = scene_unwritable(tmp, family)
    if family == "runtime":
        return scene
    (scene["root"] / "optrace.toml").write_text('[rules]\nmodules = ["matrix_rules"]\n')
    marker = tmp / "imported"
    (scene["root"] / "matrix_rules.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    scene.paths["marker"] = marker
    return scene


# --------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Condition:
    key: str
    title: str  # the row header in the table
    build: Callable[[Path, str], Scene]


def scene_gm_qualifier(tmp: Path, family: str) -> Scene:
    """The entry's system parameters written `__gm__ uint8_t *workspace` (qualifier first)."""
    if family == "runtime":
        return _profiling(tmp)
    scene = _operator(tmp)
    entry = scene["op"] / "op_kernel" / "demo_op.cpp"
    entry.write_bytes(GM_KERNEL)
    if family == "applied":
        _apply(scene)
    return scene


GM_KERNEL = KERNEL.replace(b"GM_ADDR workspace, GM_ADDR tiling",
                           b"__gm__ uint8_t *workspace, __gm__ uint8_t *tiling")


def _gm_restored(scene: Scene) -> None:
    assert (scene["src"] / "demo_op.cpp").read_bytes() == GM_KERNEL


def _gm_kept(scene: Scene) -> None:
    entry = (scene["op"] / "op_kernel" / "demo_op.cpp").read_bytes()
    # a head past 120 columns gets the parameter on a line of its own, inside its fragment
    entry = re.sub(rb"/\*optrace<\*/\n\s+(.*),\n\s+/\*>optrace\*/", rb"/*optrace<*/\1, /*>optrace*/", entry)
    assert b"/*optrace<*/GM_ADDR profiling_data, /*>optrace*/__gm__ uint8_t *workspace" in entry


CONDITIONS = {c.key: c for c in [
    Condition("missing", "missing directory", scene_missing),
    Condition("empty", "empty directory", scene_empty),
    Condition("non-utf8", "non-UTF-8 bytes in the input", scene_non_utf8_bytes),
    Condition("non-utf8-path", "non-UTF-8 bytes in the path", scene_non_utf8_path),
    Condition("binary", "a binary file named `.h` (runtime: `.pt`, `.json`)", scene_binary),
    Condition("big", "a 10 MB header (runtime: a 10 MB rank file)", scene_big),
    Condition("big-numeric", "a 12 MB header of numeric literals", scene_numeric),
    Condition("cycle", "an include cycle", scene_cycle),
    Condition("symlink-loop", "a symlink loop inside the input", scene_symlink_loop),
    Condition("gm-qualifier", "entry parameters written `__gm__ uint8_t *workspace`", scene_gm_qualifier),
    Condition("arg-loop", "the argument is a symlink loop", scene_arg_loop),
    Condition("unwritable", "unwritable output (its parent is a regular file)", scene_unwritable),
    Condition("journal", "unwritable journal (`.optrace` is a regular file)", scene_journal_blocked),
    Condition("clone-journal", "a journal that came with the clone (not recorded in the user's state "
              "directory), rolling a file outside the repository back", scene_clone_journal),
    Condition("rule-module", "`[rules] modules` in the repository's config (no --trust-config)",
              scene_rule_module),
    Condition("fifo", "a FIFO where a file is expected (the included `extra.h`; runtime: `rank000.pt`)",
              scene_fifo),
    Condition("output-input", "the output names one of the command's inputs", scene_output_input),
    Condition("past-bound", "a file past the bound of its kind in the user's `[limits]` (`optrace.toml`, "
              "and for preprocess `extra.h`; runtime: `rank000.pt`, a trace)", scene_past_bound),
]}

PLACEHOLDERS = {"op": "OPDIR", "src": "SRC_DIR", "prof": "PROFILING_DIR", "file": "FILE", "out": "OUT",
                "trace": "TRACE", "loop": "PROFILING_DIR/rank000.pt", "root": "REPO",
                "journal": "REPO/.optrace/journal-OP.json", "fifo": "FIFO"}


@dataclass(frozen=True)
class Case:
    command: str  # as shown, with placeholders: "apply {op} --write"
    condition: str
    code: int | None  # None: not applicable
    message: str  # must appear in stdout + stderr; placeholders from the scene
    behaviour: str
    family: str = "source"
    bug: str | None = None  # the expectation is right, optrace is not yet: strict xfail
    slow: bool = False  # runs with OPTRACE_LONG_FUZZ=1 only
    check: Callable[[Scene], None] | None = None  # more than code and message

    @property
    def id(self) -> str:
        words = self.command.split()
        option = next((w.lstrip("-") for w in words[1:] if w.startswith("-")), None)
        return f"{words[0]}-{self.condition}" + (f"-{option}" if option else "")

    @property
    def applicable(self) -> bool:
        return self.code is not None


def _bytes_kept(scene: Scene) -> None:
    data = (scene["src"] / "demo_op.cpp").read_bytes()
    assert all(raw in data for raw in NON_UTF8), "non-UTF-8 bytes were not kept"
    assert b"TRACE_POINT" in data or b"optrace" not in data


def _restored(scene: Scene) -> None:
    assert (scene["src"] / "demo_op.cpp").read_bytes() == KERNEL
    assert not (scene["src"] / "demo_op_base.h").exists()


def _table_untouched(scene: Scene) -> None:
    assert (scene["src"] / "extra.h").read_bytes() == _BIG["numeric"]


def _loop_left_alone(scene: Scene) -> None:
    assert os.readlink(scene["src"] / "loop.h") == "loop.h"


def _clone_journal_untouched(scene: Scene) -> None:
    assert scene["victim"].read_bytes() == VICTIM and stat.S_IMODE(os.stat(scene["victim"]).st_mode) != 0o4755
    assert scene["journal"].exists() and scene["journal"].with_suffix(".backup").is_dir()
    assert not scene["journal"].with_suffix(".lock").exists()


def _not_imported(scene: Scene) -> None:
    assert not scene["marker"].exists(), "the repository's rule module was imported"


def _map_written(scene: Scene) -> None:
    assert json.loads((scene["out"] / "point_map.json").read_text())["points"]


def _trace_written(scene: Scene) -> None:
    assert json.loads(scene["out"].read_text())["traceEvents"]


N_A = None
CASES: list[Case] = [
    # ---- plan
    Case("plan {op}", "missing", 2, "{op}: OT001", "refused, nothing planned"),
    Case("plan {op}", "empty", 2, "{op}: OT010", "no kernel entry: refused"),
    Case("plan {op}", "non-utf8", 0, "trace tree:", "planned; the bytes are read, never decoded"),
    Case("plan {op}", "non-utf8-path", 0, "trace tree:", "planned"),
    Case("plan {op}", "binary", 0, "demo_op/op_kernel/extra.h: OT012", "planned; the binary header is named "
         "and not parsed"),
    Case("plan {op}", "big", 0, "OT013", "planned; the header is named as very large (a note)"),
    Case("plan {op}", "big-numeric", 0, "OT013", "planned as without the table, whose elements are left out "
         "of the parse (engine/cpp.py); the header is named as very large (a note)"),
    Case("plan {op}", "cycle", 0, "cycle: demo_op/op_kernel/a.h -> demo_op/op_kernel/b.h",
         "planned; the cycle is shown and cut"),
    Case("plan {op}", "symlink-loop", 0, "demo_op/op_kernel/extra.h:2: OT014", "planned; the looping "
         "include is named"),
    Case("plan {op}", "gm-qualifier", 0, "trace tree:", "planned"),
    Case("plan {op}", "arg-loop", 2, "{op}", "refused, naming the path"),
    Case("plan {op} -o {file}/plan.txt", "unwritable", 2, "{file}/plan.txt: OT030", "refused before "
         "planning; nothing written"),
    Case("plan {op}", "journal", N_A, "", "plan writes no journal"),
    Case("plan {op}", "clone-journal", 0, "{journal}: OT046 warning", "planned; the journal is named, "
         "never read or acted on, nothing written", check=_clone_journal_untouched),
    Case("plan {op}", "rule-module", 0, "optrace.toml:2: OT005 rule modules not loaded: matrix_rules",
         "planned without the module, which is named as skipped (with how to trust it), never imported",
         check=_not_imported),
    # ---- apply
    Case("apply {op} --write", "missing", 2, "{op}: OT001", "refused, nothing written"),
    Case("apply {op} --write", "empty", 2, "{op}: OT010", "no kernel entry: refused"),
    Case("apply {op} --write", "non-utf8", 0, "2 file(s) written", "applied; every non-UTF-8 byte kept",
         check=_bytes_kept),
    Case("apply {op} --write", "non-utf8-path", 0, "2 file(s) written", "applied"),
    Case("apply {op} --write", "binary", 0, "demo_op/op_kernel/extra.h: OT012", "applied; the binary "
         "header is named and left alone"),
    Case("apply {op} --write", "big", 0, "2 file(s) written", "applied; the big header is not touched"),
    Case("apply {op} --write", "big-numeric", 0, "2 file(s) written", "applied; the table header is not "
         "touched", check=_table_untouched),
    Case("apply {op} --write", "cycle", 0, "2 file(s) written", "applied"),
    Case("apply {op} --write", "symlink-loop", 0, "demo_op/op_kernel/extra.h:2: OT014", "applied; the link "
         "is named and left alone", check=_loop_left_alone),
    Case("apply {op} --write", "gm-qualifier", 0, "2 file(s) written", "applied; the new parameter goes "
         "before the neighbour's `__gm__`, never between it and its type", check=_gm_kept),
    Case("apply {op} --write", "arg-loop", 2, "{op}", "refused, naming the path"),
    Case("apply {op} --patch {file}/p.patch", "unwritable", 2, "{file}/p.patch: OT030", "refused; "
         "nothing written"),
    Case("apply {op} --write", "journal", 2, "{root}/.optrace: OT043", "refused before any file changes"),
    Case("apply {op}", "clone-journal", 0, "{journal}: OT046 warning", "the diff; the journal is named and "
         "ignored, nothing written", check=_clone_journal_untouched),
    Case("apply {op} --write", "clone-journal", 2, "{journal}: OT046", "refused, saying how to remove the "
         "journal; it and every file are left untouched", check=_clone_journal_untouched),
    Case("apply {op} --write", "rule-module", 0, "2 file(s) written", "applied as planned without the "
         "module, never imported", check=_not_imported),
    # ---- strip (on an applied tree where there is one)
    Case("strip {op} --write", "missing", 2, "{op}: OT001", "refused"),
    Case("strip {op} --write", "empty", 2, "{op}: OT010", "no kernel entry and nothing optrace wrote: "
         "refused, as plan refuses it"),
    Case("strip {op} --write", "non-utf8", 0, "2 file(s) written", "the original bytes, every one",
         family="applied", check=_restored),
    Case("strip {op} --write", "non-utf8-path", 0, "2 file(s) written", "the original bytes",
         family="applied"),
    Case("strip {op} --write", "binary", 0, "2 file(s) written", "the original bytes; the binary "
         "header untouched", family="applied", check=_restored),
    Case("strip {op} --write", "big", 0, "2 file(s) written", "the original bytes", family="applied",
         check=_restored),
    Case("strip {op} --write", "big-numeric", 0, "2 file(s) written", "the original bytes",
         family="applied", check=_restored),
    Case("strip {op} --write", "cycle", 0, "2 file(s) written", "the original bytes", family="applied",
         check=_restored),
    Case("strip {op} --write", "symlink-loop", 0, "2 file(s) written", "the original bytes; the link "
         "left alone", family="applied", check=_restored),
    Case("strip {op} --write", "gm-qualifier", 0, "2 file(s) written", "the original bytes",
         family="applied", check=_gm_restored),
    Case("strip {op} --write", "arg-loop", 2, "{op}", "refused, naming the path"),
    Case("strip {op} --patch {file}/p.patch", "unwritable", 2, "{file}/p.patch: OT030", "refused; "
         "nothing written", family="applied"),
    Case("strip {op} --write", "journal", 2, "{root}/.optrace: OT043", "refused before any file changes",
         family="applied"),
    Case("strip {op} --write", "clone-journal", 2, "{journal}: OT046", "refused, saying how to remove the "
         "journal; it and every file are left untouched", family="applied", check=_clone_journal_untouched),
    Case("strip {op} --write", "rule-module", 0, "2 file(s) written", "the original bytes; the module "
         "never imported", family="applied", check=_not_imported),
    # ---- check (on an applied tree where there is one)
    Case("check {op}", "missing", 2, "{op}: OT001", "refused"),
    Case("check {op}", "empty", 2, "{op}: OT010", "no kernel entry: refused (an operator without "
         "points is reported as not instrumented, exit 0)"),
    Case("check {op}", "non-utf8", 0, "0 error(s)", "clean; compile safety parses the file as bytes",
         family="applied"),
    Case("check {op}", "non-utf8-path", 0, "0 error(s)", "clean", family="applied"),
    Case("check {op}", "binary", 0, "0 error(s)", "clean; the binary header is not a source",
         family="applied"),
    Case("check {op}", "big", 0, "0 error(s)", "clean", family="applied"),
    Case("check {op}", "big-numeric", 0, "0 error(s)", "clean", family="applied"),
    Case("check {op}", "cycle", 0, "0 error(s)", "clean", family="applied"),
    Case("check {op}", "symlink-loop", 0, "0 error(s)", "clean; the dangling link is not a source",
         family="applied"),
    Case("check {op}", "gm-qualifier", 0, "0 error(s)", "clean: the inserted parameter compiles with "
         "`__gm__` as an address space (libclang)", family="applied"),
    Case("check {op}", "arg-loop", 2, "{op}", "refused, naming the path"),
    Case("check {op} -o {file}/check.txt", "unwritable", 2, "{file}/check.txt: OT030", "refused",
         family="applied"),
    Case("check {op}", "journal", N_A, "", "check writes no journal"),
    Case("check {op}", "clone-journal", 0, "OT046", "clean; the journal is named (a warning), never acted "
         "on", family="applied", check=_clone_journal_untouched),
    Case("check {op}", "rule-module", 0, "0 error(s)", "clean; the module never imported", family="applied",
         check=_not_imported),
    # ---- preprocess (the kernel folder of an applied tree)
    Case("preprocess {src} --out {out}", "missing", 2, "{src}: OT200", "refused, nothing written"),
    Case("preprocess {src} --out {out}", "empty", 0, "0 points", "an empty map"),
    Case("preprocess {src} --out {out}", "non-utf8", 0, "8 points", "map written; sources read as bytes",
         family="applied", check=_map_written),
    Case("preprocess {src} --out {out}", "non-utf8-path", 0, "8 points", "map written", family="applied"),
    Case("preprocess {src} --out {out}", "binary", 0, "8 points", "map written; the binary file skipped",
         family="applied", check=_map_written),
    Case("preprocess {src} --out {out}", "big", 0, "8 points", "map written", family="applied"),
    Case("preprocess {src} --out {out}", "big-numeric", N_A, "", "as plan"),
    Case("preprocess {src} --out {out}", "cycle", 0, "8 points", "map written (includes are not followed)",
         family="applied"),
    Case("preprocess {src} --out {out}", "symlink-loop", 0, "8 points", "map written; the loops skipped",
         family="applied"),
    Case("preprocess {src} --out {out}", "gm-qualifier", 0, "8 points", "map written", family="applied"),
    Case("preprocess {src} --out {out}", "arg-loop", 2, "{src}: OT200", "refused, naming the path"),
    Case("preprocess {src} --out {file}/out", "unwritable", 2,
         "{file}/out/point_map.json: OT206 cannot write: {file} is not a directory", "refused; nothing "
         "written", family="applied"),
    Case("preprocess {src} --out {out}", "journal", N_A, "", "preprocess writes no journal"),
    Case("preprocess {src} --out {out}", "clone-journal", N_A, "", "preprocess reads no journal"),
    Case("preprocess {src} --out {out}", "rule-module", N_A, "", "preprocess runs no rules"),
    # ---- collect
    Case("collect {prof} -o {out}", "missing", 2, "{prof}: no such directory", "refused", family="runtime"),
    Case("collect {prof} -o {out}", "empty", 2, "{prof}: no rank*.pt files", "refused", family="runtime"),
    Case("collect {prof} -o {out}", "non-utf8", 0, "2 ranks", "collected; the paths kept as bytes",
         family="runtime", check=_trace_written),
    Case("collect {prof} -o {out}", "non-utf8-path", 0, "2 ranks", "collected", family="runtime",
         check=_trace_written),
    Case("collect {prof} -o {out}", "binary", 2, "{prof}/rank000.pt: not a zip-format .pt file",
         "the other ranks are collected; the bad file is named", family="runtime"),
    Case("collect {prof} -o {out}", "big", 0, "1 ranks, 648 cores", "collected", family="runtime"),
    Case("collect {prof} -o {out}", "big-numeric", N_A, "", "no headers"),
    Case("collect {prof} -o {out}", "cycle", N_A, "", "no includes"),
    Case("collect {prof} -o {out}", "gm-qualifier", N_A, "", "no kernel sources"),
    Case("collect {prof} -o {out}", "symlink-loop", 2, "{loop}: cannot read", "rank001 collected; the "
         "looping rank file is named", family="runtime"),
    Case("collect {prof} -o {out}", "arg-loop", 2, "{prof}: no such directory", "refused, naming the path",
         family="runtime"),
    Case("collect {prof} -o {file}/trace.json", "unwritable", 2,
         "{file}/trace.json: cannot write: {file} is not a directory", "refused "
         "(naming the file in the way); nothing written", family="runtime"),
    Case("collect {prof} -o {out}", "journal", N_A, "", "no journal"),
    Case("collect {prof} -o {out}", "clone-journal", N_A, "", "no journal"),
    Case("collect {prof} -o {out}", "rule-module", N_A, "", "no rules"),
    # ---- inspect
    Case("inspect {prof}", "missing", 2, "{prof}: no such file or directory", "refused", family="runtime"),
    Case("inspect {prof}", "empty", 2, "{prof}: no rank*.pt files", "refused", family="runtime"),
    Case("inspect {prof}", "non-utf8", N_A, "", "reads only rank files (binary)"),
    Case("inspect {prof}", "non-utf8-path", 0, "rank000.pt: optrace format v1", "inspected",
         family="runtime"),
    Case("inspect {prof}", "binary", 2, "rank000.pt: ERROR not a zip-format .pt file", "the other ranks "
         "are shown; the bad file is named", family="runtime"),
    Case("inspect {prof}", "big", 0, "648 cores used", "inspected", family="runtime"),
    Case("inspect {prof}", "big-numeric", N_A, "", "no headers"),
    Case("inspect {prof}", "cycle", N_A, "", "no includes"),
    Case("inspect {prof}", "gm-qualifier", N_A, "", "no kernel sources"),
    Case("inspect {prof}", "symlink-loop", 2, "{loop}: cannot read", "rank001 shown; the looping rank "
         "file is named", family="runtime"),
    Case("inspect {prof}", "arg-loop", 2, "{prof}: cannot read", "refused, naming the path",
         family="runtime"),
    Case("inspect {prof}", "unwritable", N_A, "", "writes only to stdout"),
    Case("inspect {prof}", "journal", N_A, "", "no journal"),
    Case("inspect {prof}", "clone-journal", N_A, "", "no journal"),
    Case("inspect {prof}", "rule-module", N_A, "", "no rules"),
    # ---- report
    Case("report {prof}", "missing", 2, "{prof}: no such file or directory", "refused", family="runtime"),
    Case("report {prof}", "empty", 2, "{prof}: no rank*.pt files", "refused", family="runtime"),
    Case("report {prof}", "non-utf8", 0, "processing total", "reported", family="runtime"),
    Case("report {prof}", "non-utf8-path", 0, "processing total", "reported", family="runtime"),
    Case("report {trace}", "binary", 2, "{trace}: not a readable JSON trace", "refused, naming the file",
         family="runtime"),
    Case("report {prof}", "big", 0, "processing total", "reported", family="runtime"),
    Case("report {prof}", "big-numeric", N_A, "", "no headers"),
    Case("report {prof}", "cycle", N_A, "", "no includes"),
    Case("report {prof}", "gm-qualifier", N_A, "", "no kernel sources"),
    Case("report {prof}", "symlink-loop", 0, "{loop}: cannot read", "reported from rank001; the looping "
         "rank file is named", family="runtime"),
    Case("report {prof}", "arg-loop", 2, "{prof}: no such file or directory", "refused, naming the path",
         family="runtime"),
    Case("report {prof} --html {file}/r.html", "unwritable", 2,
         "{file}/r.html: cannot write: {file} is not a directory", "refused "
         "(naming the file in the way); nothing written", family="runtime"),
    Case("report {prof}", "journal", N_A, "", "no journal"),
    Case("report {prof}", "clone-journal", N_A, "", "no journal"),
    Case("report {prof}", "rule-module", N_A, "", "no rules"),
    # ---- compare
    Case("compare {prof} {prof}", "missing", 2, "{prof}: no such file or directory", "refused",
         family="runtime"),
    Case("compare {prof} {prof}", "empty", 2, "{prof}: no rank*.pt files", "refused", family="runtime"),
    Case("compare {prof} {prof}", "non-utf8", 0, "processing", "compared", family="runtime"),
    Case("compare {prof} {prof}", "non-utf8-path", 0, "processing", "compared", family="runtime"),
    Case("compare {trace} {trace}", "binary", 2, "{trace}: not a readable JSON trace", "refused, naming "
         "the file", family="runtime"),
    Case("compare {prof} {prof}", "big", 0, "processing", "compared", family="runtime"),
    Case("compare {prof} {prof}", "big-numeric", N_A, "", "no headers"),
    Case("compare {prof} {prof}", "cycle", N_A, "", "no includes"),
    Case("compare {prof} {prof}", "gm-qualifier", N_A, "", "no kernel sources"),
    Case("compare {prof} {prof}", "symlink-loop", 0, "processing", "compared from rank001", family="runtime"),
    Case("compare {prof} {prof}", "arg-loop", 2, "{prof}: no such file or directory", "refused, naming "
         "the path", family="runtime"),
    Case("compare {prof} {prof}", "unwritable", N_A, "", "writes only to stdout"),
    Case("compare {prof} {prof}", "journal", N_A, "", "no journal"),
    Case("compare {prof} {prof}", "clone-journal", N_A, "", "no journal"),
    Case("compare {prof} {prof}", "rule-module", N_A, "", "no rules"),
]

FUZZ_RUNS = [
    "| 14, at optrace dc84b16 (the new classes: deep nesting, repeated content, compile-check "
    "crashes, names that are not UTF-8 — ~300 cases each; `tests/fuzz_all.py --scale 10`) | 2,000 "
    "(cases 0–1999 in 2 processes, 7.5 min; compile safety on 40 and on every compile-crash case) "
    "| 1,774 | 0 | 226 | **0** | — (a clean run at the final code) |",
    "| 14, at optrace dd8a0a6 (the same, the first 10× run) | 2,000 (2 processes, 36 min on a loaded "
    "machine) | 1,767 | 0 | 226 | 7 hangs past the then 120 s a case (352, 354, 405, 458, 1692, 1854 "
    "among them) | 352: a template cut off a few hundred levels deep kept libclang busy to the compile "
    "check's 300 s bound, then its retry another 300 s (the bound is 60 s now, the retries share one "
    "more); 1854: an op_host file pasted over itself had its namespaces matched anew for each "
    "function (cubic; now found once a file); 354–1692: multi-MB host files stripped, parsed and "
    "scanned hundreds of times by one apply (the last two large files' answers are kept now: "
    "25–90 s became 3–13 s). An earlier pass of the run (8a623bc) found case 1130, a shared header "
    "named in bytes (exit 3), and case 1120, the runtime block written into a UTF-16 base header "
    "(now OT012). All replay clean (`tests/test_fuzz_regressions.py`) |",
    "| 14, at optrace 8093905 (the new classes' first 200 cases) | 200 | 174 | 0 | 26 | 1: case 24 "
    "exit 3 | an op_api file named with bytes `\\xff\\xfe`: the repository search encoded file "
    "names as UTF-8; an operator directory named in bytes crashed the same way (now OT001) |",
    "| 6, at optrace 347cd24 (check's patterns behind literal pre-checks, directives matched only "
    "at lines starting with `#`, the Python layers' LibCST half handed in by the CLI) | 2,000 "
    "(cases 0–1999, 4.4 min; compile safety on 40) | 1,804 | 0 | 196 | **0** | — |",
    "| 5, at optrace f9084b5 (absent headers as libclang's unsaved files, the engine's scans cached "
    "by content, host functions through the node index) | 2,000 (cases 0–1999, 5 min; compile "
    "safety on 40) | 1,775 | 0 | 225 | **0** | — |",
    "| 3, at optrace a491ebb (the compile check leaving untouched bodies out, brackets matched "
    "by a regex) | 600 (cases 0–599, 4 min; compile safety on 12) | 533 | 0 | 67 | **0** | — |",
    "| 1, at optrace 34725db (today's fixtures, l0op_style among them) | 5,000 (cases 0–4999 in 2 "
    "processes with `--start`, 25 min on 2 shared cores; compile safety on 100) | 4,462 | 0 | 538 "
    "| **0** | — (a clean run at the final code) |",
    "| 1, at optrace 5b65a61 | 5,000 (2 processes, 10 min) | 4,457 | 0 | 542 | 1: case 2645 strip "
    "not the identity | a stray `*/` in a Meta kernel's return type: the adapter's codemod edited "
    "it, but only the autograd-wrappers layer claimed its file and no longer recognised the "
    "kernel, so strip skipped the file; the adapter layer finds it now (2c9a961, "
    "`tests/test_fuzz_regressions.py`) |",
    "| 2, at optrace 242473d | 2,500 (cases 0–2499, 10 min) | 2,248 | 0 | 252 | 0 | — |",
    "| 1 | 5,000 (cases 0–4999, split over 2–5 processes with `--start`, ~50 min on 2 shared "
    "cores; compile safety on 100) | 4,494 | 0 | 503 | 4: cases 389, 2034, 4605 strip not the "
    "identity; case 4489 hung | 389, 2034: a `TRACE_POINT` or a quote in the kernel entry's "
    "parameter list — after apply the entry was not found again, so strip left the build hook "
    "(apply now refuses, OT010); 4605: a `/*` left open in the shared pybind.cpp swallowed a "
    "marker (apply now checks strip ∘ apply before writing, OT048); 4489: `namespace <name>` "
    "without its `{` made the op_host registry's pattern backtrack exponentially (now "
    "possessive). All four replay clean (`tests/test_fuzz_regressions.py`) |",
    "| 1 (a first attempt, stopped near case 320 to restart with the fixes) | ~320 | | | | 3: "
    "cases 73, 287, 312 exit 3 | 73: a Python caller with a byte not in its declared encoding "
    "(UnicodeDecodeError); 287, 312: Python callers with lone-CR line ends (IndexError) — both "
    "refused now (OT312) and replayed clean |",
    "| 14 (CI) | 200, time-boxed to 300 s | | | | 0 | — |",
]

# Issue 14 §3/§4: non-regular inputs and outputs that are inputs.
CASES += [
    Case("plan {op}", "fifo", 0, "demo_op/op_kernel/extra.h: OT011 cannot read: not a regular file (a FIFO)",
         "planned; the FIFO is named and never opened"),
    Case("plan {op} -o {src}/demo_op.cpp", "output-input", 2, "{src}/demo_op.cpp: OT030 is an input of this "
         "command", "refused before planning; the source intact", check=_input_kept),
    Case("apply {op} --write", "fifo", 0, "2 file(s) written", "applied; the FIFO is named and never opened"),
    Case("apply {op} --patch {src}/demo_op.cpp", "output-input", 2, "{src}/demo_op.cpp: OT030 is an input",
         "refused before anything is computed; the source intact", check=_input_kept),
    Case("strip {op} --write", "fifo", 0, "2 file(s) written", "the original bytes; the FIFO never opened",
         family="applied"),
    Case("strip {op} --patch {src}/demo_op.cpp", "output-input", 2, "{src}/demo_op.cpp: OT030 is an input",
         "refused; the source intact", family="applied", check=_input_kept),
    Case("check {op}", "fifo", 1, "not a regular file (a FIFO)", "the FIFO is an error (OT011); compile "
         "safety is skipped for the file including it (OT421), never opened", family="applied"),
    Case("check {op} -o {src}/demo_op.cpp", "output-input", 2, "{src}/demo_op.cpp: OT030 is an input",
         "refused; the source intact", family="applied", check=_input_kept),
    Case("preprocess {src} --out {out}", "fifo", 2,
         "extra.h: OT201 cannot read: not a regular file (a FIFO)",
         "refused (a map without that file's points would give other ids); the FIFO never opened, nothing "
         "written", family="applied"),
    Case("preprocess {src} --out {out}", "output-input", 2, "{out}/point_map.json: OT206 is an input",
         "refused; the linked source intact", family="applied", check=_input_kept),
    Case("collect {prof} -o {out}", "fifo", 2, "{fifo}: cannot read: not a regular file (a FIFO)",
         "rank001 collected; "
         "the FIFO is named, never opened", family="runtime"),
    Case("collect {prof} -o {prof}/rank001.pt", "output-input", 2, "{prof}/rank001.pt: is an input of this "
         "command", "refused before decoding; the rank file intact", family="runtime", check=_input_kept),
    Case("inspect {prof}", "fifo", 2, "not a regular file (a FIFO)", "rank001 shown; the FIFO named",
         family="runtime"),
    Case("inspect {prof}", "output-input", N_A, "", "writes only to stdout"),
    Case("report {prof}", "fifo", 0, "{fifo}: cannot read: not a regular file (a FIFO)",
         "reported from rank001; the "
         "FIFO named", family="runtime"),
    Case("report {prof} --html {prof}/point_map.json", "output-input", 2, "{prof}/point_map.json: is an "
         "input of this command", "refused before reading; the point map intact", family="runtime",
         check=_input_kept),
    Case("compare {prof} {prof}", "fifo", 0, "processing", "compared from rank001", family="runtime"),
    Case("compare {prof} {prof}", "output-input", N_A, "", "writes only to stdout"),
]

# Issue 14 §4: size bounds, set only by the user (tests/test_size_bounds.py has the rest:
# point maps, .json.gz / .pftrace, gzip expansion, the repository's config ignored).
_CONFIG_PAST = "100 bytes, past the 64-byte bound for a config file"
CASES += [
    Case("plan {op}", "past-bound", 2, "{root}/optrace.toml: OT001 cannot read: " + _CONFIG_PAST,
         "refused before planning, the config never read"),
    Case("apply {op} --write", "past-bound", 2, "{root}/optrace.toml: OT001 cannot read: " + _CONFIG_PAST,
         "refused; nothing written", check=_input_kept),
    Case("strip {op} --write", "past-bound", 0, "2 file(s) written", "the original bytes: strip reads no "
         "config, and never the header past its bound", family="applied", check=_restored),
    Case("check {op}", "past-bound", 1, "optrace.toml: OT001 cannot read: " + _CONFIG_PAST, "an error "
         "of the check, as every finding", family="applied"),
    Case("preprocess {src} --out {out}", "past-bound", 2,
         "extra.h: OT201 cannot read: 50000 bytes, past the 40000-byte bound for a source file",
         "refused (a map without that file's points would give other ids); nothing written",
         family="applied"),
    Case("collect {prof} -o {out}", "past-bound", 2, "{prof}/rank000.pt: cannot read: 5000 bytes, past "
         "the 4999-byte bound for a rank file", "rank001 collected; rank000 named, never read",
         family="runtime", check=_trace_written),
    Case("inspect {prof}", "past-bound", 2, "rank000.pt: ERROR cannot read: 5000 bytes, past the 4999-byte "
         "bound for a rank file", "rank001 shown; rank000 named, never read", family="runtime"),
    Case("report {trace}", "past-bound", 2, "{trace}: not a readable JSON trace: 100 bytes, past the "
         "64-byte bound for a trace file", "refused before reading", family="runtime"),
    Case("compare {trace} {trace}", "past-bound", 2, "{trace}: not a readable JSON trace: 100 bytes, past "
         "the 64-byte bound for a trace file", "refused before reading", family="runtime"),
]

# The source fuzzer's recorded runs (tests/source_fuzz.py), rendered as the
# table's last section. Each run: `python tests/source_fuzz.py --seed S --count N`.
FUZZ_SECTION = [
    "## Source fuzzer",
    "",
    "`tests/source_fuzz.py` mutates the fixtures' kernels, headers, host files and Python",
    "callers — truncation at a token boundary, unbalanced braces / quotes / comments / raw",
    "strings / `#if`, random macros, random encodings (UTF-16, BOMs, GBK, bad bytes, CR-only",
    "and mixed line ends, NUL), and the classes of input that once crashed optrace or blew",
    "its time up: deep nesting (`#if 1`, braces, loops, parentheses, templates 64 to 5,000",
    "levels), repeated content (the file N times over, a stretch pasted again, a line by the",
    "thousand), what crashes the compile check (templates nested 10,000 deep, 100,000 line",
    "continuations: such a case runs compile safety) and a file name that is not UTF-8 (its",
    "includes spelled so) — one to three mutations a case, and runs plan / apply / check",
    "(compile safety on every 50th case, 40th in CI) / strip on each, in-process. A case fails on",
    "any exception but a refusal (exit 3 at the CLI) or when strip after a written apply does",
    "not give the mutated bytes back. CI runs 200 cases of seed 14",
    "(`tests/test_source_fuzz.py`); every failure found is replayed by",
    "`tests/test_fuzz_regressions.py`.",
    "",
    "| seed | cases | applied (strip ∘ apply = identity) | no change | refused (exit 2) | failures | "
    "found and fixed |",
    "|---|---|---|---|---|---|---|",
    *FUZZ_RUNS,
    "",
]

# `bench/trials_writes.py`'s recorded run, rendered after the fuzzer's.
WRITES_SECTION = ['',
    '## Writes killed or out of space',
    '',
    '`python bench/trials_writes.py --kills 12 --sizes 18` on a copy of the bundled operator',
    '(23 files changed by `apply --write`), each step the installed `optrace` as a user runs it.',
    '**kill -9**: `apply --write` killed after a delay spread over 30–110 % of its uninterrupted',
    'run, or 0–40 ms after its journal appears (the commit under way); then left in place or',
    'moved (`mv repo moved`), and the next command (`strip --write`, which recovers first) run.',
    'Bytes lost: original bytes not back; stray files: anything outside `.optrace/` that was',
    'not there (`.X.optrace-<token>.tmp`, a half-made header); dead journals: a journal, its',
    'temp file or its backups left after the recovery. A kill that came after the run ended',
    'counts as a trial, not as killed mid-run. **Disk full**: the copy on a tmpfs of its own',
    'whose free space goes from nothing to twice what `apply --write` needs; the tree must be',
    'the original or the fully applied one, nothing in between, nothing stray.',
    '',
    'At optrace 74e98ce (outputs against everything read, journals keyed by a repository id):',
    '',
    '| killed | trials | killed mid-run | repository moved | bytes lost | stray files | dead journals '
    '| recovery exit |',
    '|---|---|---|---|---|---|---|---|',
    '| any time (30-110 % of the run) | 12 | 10 | no | 0 | 0 | 0 | 0 |',
    '| any time (30-110 % of the run) | 12 | 9 | yes | 0 | 0 | 0 | 0 |',
    '| in the commit (0-40 ms in) | 12 | 12 | no | 0 | 0 | 0 | 0 |',
    '| in the commit (0-40 ms in) | 12 | 12 | yes | 0 | 0 | 0 | 0 |',
    '',
    '| sizes | refused, original | applied | mixed | stray files | exits |',
    '|---|---|---|---|---|---|',
    '| 18 | 13 | 5 | 0 | 0 | 0, 2 |',
    '',
    'Before the journal was keyed by a repository id (optrace 293fae0, `--kills 6 --sizes 0`):',
    'kills in the commit followed by a move left **46 stray files and 9 dead journals** in 6',
    'trials; the rows without a move were clean, as they are above.']

COMMANDS = ["plan", "apply", "strip", "check", "preprocess", "collect", "inspect", "report", "compare"]


# --------------------------------------------------------------------------- running a case


def _fill(template: str, scene: Scene) -> str:
    return template.format(**{k: str(v) for k, v in scene.paths.items()})


def run_case(case: Case, tmp: Path) -> tuple[Scene, int, str]:
    scene = CONDITIONS[case.condition].build(tmp, case.family)
    args = [_fill(part, scene) for part in case.command.split()]
    if case.condition == "non-utf8-path":
        # A child with a strict UTF-8 stdout, as under any UTF-8 locale.
        env = {**os.environ, **scene.env, "PYTHONIOENCODING": "utf-8:strict"}
        done = subprocess.run([sys.executable, "-m", "optrace", *args], capture_output=True, env=env,
                              timeout=300, check=False)
        output = (done.stdout + done.stderr).decode("utf-8", "surrogateescape")
        return scene, done.returncode, output
    saved = {key: os.environ.get(key) for key in scene.env}
    os.environ.update(scene.env)
    try:
        code, output, exc = _cli_inprocess(args)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    if exc is not None:  # the real CLI turns this into exit 3 with a traceback
        return scene, 3, output + f"\nTraceback (uncaught {type(exc).__name__}: {exc})"
    return scene, code, output


def _params() -> list[object]:
    out = []
    for case in CASES:
        if not case.applicable:
            continue
        marks = []
        if case.bug:
            marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=case.bug))
        if case.slow and not LONG:
            marks.append(pytest.mark.skip(reason="slow: runs with OPTRACE_LONG_FUZZ=1"))
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


@pytest.mark.slow  # every command against every bad input
@pytest.mark.parametrize("case", _params())
def test_input_matrix(case: Case, tmp_path: Path) -> None:
    scene, code, output = run_case(case, tmp_path)
    assert "Traceback" not in output, output[-3000:]
    assert code == case.code, f"exit {code}, expected {case.code}:\n{output[-3000:]}"
    assert _fill(case.message, scene) in output, output[-3000:]
    if case.check is not None:
        case.check(scene)


# --------------------------------------------------------------------------- the table


def _shown(template: str) -> str:
    text = template
    for key, name in PLACEHOLDERS.items():
        text = text.replace("{" + key + "}", name)
    return text


def render_doc() -> str:
    lines = [
        "# Input matrix",
        "",
        "<!-- Generated by `python tests/test_input_matrix.py --write-doc` from the case list in",
        "tests/test_input_matrix.py; test_the_committed_table_is_current fails when it is stale. -->",
        "",
        "What every command does with bad input: the behaviour, the message (a stable code or the",
        "offending path, on stderr unless the command's normal output carries it) and the exit",
        "code — **0** clean, **1** findings / changes, **2** bad input, **3** internal error. No",
        "case ends in a traceback. Each row is a test (`tests/test_input_matrix.py`, id",
        "`<command>-<input>`); a row marked **known bug** is a strict xfail naming the module to",
        "fix, and shows the behaviour optrace should have. Non-UTF-8 paths run with a strict",
        "UTF-8 stdout, as under any UTF-8 locale.",
        "",
        "Inputs: missing / empty directory; non-UTF-8 bytes in files (GBK comments and strings,",
        "bytes no encoding has; for the runtime commands a point map whose source paths are GBK",
        "bytes); a directory whose name is GBK bytes; a binary file where a header (runtime: a",
        "rank file, a trace) is expected; a 10 MB header (runtime: a 10.6 MB rank file); a 12 MB",
        "header of numeric literals (a lookup table); an include cycle; a header that is a",
        "symlink to itself plus a folder link back up (runtime: a rank file linking to itself);",
        "the argument itself a symlink loop; an output path under a regular file; the journal",
        "directory `.optrace` taken by a regular file; a journal a clone brought (not recorded in",
        "the user's state directory) that would roll a file outside the repository back with a",
        "setuid mode; a rule module the repository's config names and ships; a FIFO where a",
        "file is expected; an output that names one of the command's inputs; a file past the",
        "bound the user's config sets for its kind. Hostile traces, numbers, bounds and outputs",
        "in detail: `docs/faults.md`.",
        "",
    ]
    for command in COMMANDS:
        lines += [f"## `{command}`", "", "| input | invocation | behaviour | message | exit |",
                  "|---|---|---|---|---|"]
        for case in CASES:
            if case.command.split()[0] != command:
                continue
            title = CONDITIONS[case.condition].title
            if not case.applicable:
                lines.append(f"| {title} | | n/a: {case.behaviour} | | |")
                continue
            behaviour = case.behaviour
            if case.bug:
                behaviour = f"**known bug** ({case.bug}); expected: {behaviour}"
            if case.slow:
                behaviour += " (long run only)"
            message = f"`{_shown(case.message)}`" if case.message else ""
            lines.append(f"| {title} | `optrace {_shown(case.command)}` | {behaviour} | {message} | "
                         f"{case.code} |")
        lines.append("")
    lines += FUZZ_SECTION
    lines += figures_section()
    lines += WRITES_SECTION
    return "\n".join(lines)


def figures_section() -> list[str]:
    """Every fuzzer's figures at N times its CI size, from tests/data/fuzz_figures.json."""
    if not FUZZ_FIGURES.exists():
        return []
    run = json.loads(FUZZ_FIGURES.read_text(encoding="utf-8"))
    scale = run["scale"]
    lines = [
        "", f"## Every fuzzer at {scale}× its CI size", "",
        f"`{run['command']}` at optrace {run['commit']} ({run['date']}, {run['minutes']} min on 2 shared",
        "cores): each fuzzer at "
        f"{scale} times the inputs CI gives it (`OPTRACE_FUZZ_SCALE={scale}`; the source fuzzer",
        f"{scale} × 200 cases of seed 14). An input's exit is what the command — or the CLI around the",
        "function a fuzzer calls in-process — exits with: 0 clean or read, 1 findings, 2 refused as",
        "bad input. A crash is exit 3, a traceback, an exception other than a refusal, or a broken",
        "promise (strip ∘ apply not the identity); a hang is an input past its time bound (the",
        "source fuzzer: 300 s a case; the runtime fuzzers: 5 s an input, 30–60 s a command).",
        "`tests/fuzz_all.py` runs them and writes the figures (`tests/data/fuzz_figures.json`),",
        "`tests/fuzz_tally.py` counts them.", "",
        "| fuzzer | one input | inputs | exit 0 | exit 1 | exit 2 | crashes | hangs | seconds |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    total = {"inputs": 0, "crashes": 0, "hangs": 0}
    for fuzzer in run["fuzzers"]:
        exits = fuzzer["exits"]
        lines.append(f"| {fuzzer['fuzzer']} | {fuzzer['what']} | {fuzzer['inputs']:,} | "
                     + " | ".join(f"{exits.get(code, 0):,}" for code in ("0", "1", "2"))
                     + f" | {fuzzer['crashes']} | {fuzzer['hangs']} | {fuzzer['seconds']:,} |")
        for key in total:
            total[key] += fuzzer[key]
    lines += ["", f"In all: {total['inputs']:,} inputs, **{total['crashes']} crashes, "
              f"{total['hangs']} hangs**.", "", *FIGURES_BEFORE]
    return lines


# What the earlier ten-times runs found (each fixed, with its test), shown under the table.
FIGURES_BEFORE = [
    "The first ten-times run (optrace dd8a0a6, 36 min on a loaded machine) found: the archive",
    "fuzzer, 1 crash at archive 4,256 of its sequence (a zip directory offset too large to seek",
    "to: ValueError, exit 3 — now refused, named:",
    "`tests/runtime/test_pt_zip.py::test_a_directory_offset_past_what_a_seek_takes_is_refused`);",
    "the source fuzzer, 7 hangs (its table above). The other fuzzers were clean then too.",
]


def test_the_committed_table_is_current() -> None:
    assert DOC.exists() and DOC.read_text(encoding="utf-8") == render_doc(), (
        "docs/input-matrix.md is stale: run `python tests/test_input_matrix.py --write-doc`")


def test_every_command_meets_every_input() -> None:
    """The matrix is complete: each command has a row (maybe n/a) for each input."""
    seen = {(c.command.split()[0], c.condition) for c in CASES}
    assert seen == {(cmd, cond) for cmd in COMMANDS for cond in CONDITIONS}
    assert len({c.id for c in CASES}) == len(CASES)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-doc"]:
        DOC.write_text(render_doc(), encoding="utf-8")
        print(f"wrote {DOC}")
    elif sys.argv[1:] == ["--explore"]:  # print what each case does now, expected or not
        import tempfile

        for case in CASES:
            if not case.applicable or (case.slow and not LONG):
                continue
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    scene, code, output = run_case(case, Path(tmp) / "t")
                except Exception as exc:
                    print(f"ERR {case.id:32} {type(exc).__name__}: {exc}")
                    continue
                hit = _fill(case.message, scene) in output
                mark = "ok " if code == case.code and hit and "Traceback" not in output else "BAD"
                tail = " | ".join(output.strip().splitlines()[-2:])[:300]
                print(f"{mark} {case.id:32} exit {code} (want {case.code}) msg={hit} :: {tail}")
    else:
        print("usage: python tests/test_input_matrix.py --write-doc | --explore", file=sys.stderr)
        sys.exit(2)
