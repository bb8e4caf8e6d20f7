"""The source fuzzer: real-looking kernels and host files from our fixtures,
mutated the way a half-saved editor buffer, a merge gone wrong or another encoding would
leave them, then plan / apply / strip / check on each, in-process.

Mutations: truncation at a token boundary, an unbalanced brace, quote, comment or raw
string, an unbalanced or stray `#if` / `#else` / `#endif`, random macros (definitions
that open braces, calls that hide a statement, attributes), random encodings (UTF-16
with BOM, a UTF-8 BOM, GBK text, bytes no encoding has, CR-only or mixed line ends, a NUL
byte), deep nesting (`#if 1`, braces, loops, parentheses, templates 64 to 5,000 levels
deep), repeated content (the file N times over, a stretch pasted again, a line by the
thousand), what crashes the compile check (templates nested 10,000 deep, 100,000 line
continuations: those cases run compile safety), and a name that is not UTF-8 (the file
renamed with GBK / Latin-1 / invalid bytes, its includes spelled so) — one to three per
case, on one source of one operator.

A case passes when no step raises anything but a refusal (`InputError`: exit 2 at the
CLI) — so exit 3 and tracebacks are failures — and, whenever apply wrote, strip gives the
mutated tree back byte for byte (strip ∘ apply = identity).

    python tests/source_fuzz.py --seed 1 --count 5000     # the local run (docs/input-matrix.md)

tests/test_source_fuzz.py runs a seeded ~200-case subset in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fuzz_tally import tally

from optrace.cli.deferred import install as install_deferred
from optrace.engine.diagnostics import InputError
from optrace.engine.discovery import forget_repo_indexes
from optrace.engine.transaction import commit
from optrace.pipeline.apply import apply_changes, strip_changes
from optrace.pipeline.check import check_operator
from optrace.pipeline.plan_output import PlannedMode, plan_json, render_text

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
HOST_REPO = ROOT / "tests" / "data" / "host_repo"
SOURCE_SUFFIXES = (".cpp", ".h", ".hpp", ".cc", ".asc", ".py")

# --------------------------------------------------------------------------- mutations

_BOUNDARY_RE = re.compile(rb"\b|(?<=[;{}()\[\],<>=\"'\n])|(?=[;{}()\[\],<>=\"'\n])")


def _boundaries(data: bytes) -> list[int]:
    return sorted({m.start() for m in _BOUNDARY_RE.finditer(data)} | {0, len(data)})


def _at_boundary(rng: random.Random, data: bytes, insert: bytes) -> bytes:
    pos = rng.choice(_boundaries(data))
    return data[:pos] + insert + data[pos:]


def _at_line_start(rng: random.Random, data: bytes, insert: bytes) -> bytes:
    starts = [0] + [m.end() for m in re.finditer(rb"\n", data)]
    pos = rng.choice(starts)
    return data[:pos] + insert + data[pos:]


def truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.choice(_boundaries(data))]


def unbalance_brace(rng: random.Random, data: bytes) -> bytes:
    braces = [m.start() for m in re.finditer(rb"[{}()]", data)]
    if braces and rng.random() < 0.5:
        pos = rng.choice(braces)
        return data[:pos] + data[pos + 1:]  # one brace or parenthesis less
    return _at_boundary(rng, data, rng.choice([b"{", b"}", b"(", b")", b"{{", b"}}"]))


def unbalance_quote(rng: random.Random, data: bytes) -> bytes:
    return _at_boundary(rng, data, rng.choice([b'"', b"'", b"/*", b"*/", b'R"(', b")\"", b"\\\n", b"//"]))


def unbalance_if(rng: random.Random, data: bytes) -> bytes:
    directive = rng.choice([b"#if 1\n", b"#if 0\n", b"#else\n", b"#endif\n", b"#elif defined(X)\n",
                            b"#ifdef __CCE_KT_TEST__\n", b"#ifndef OPTRACE\n", b"#if\n", b"#include\n",
                            b'#include "missing.h"\n', b"#pragma once\n", b"#error stop\n"])
    return _at_line_start(rng, data, directive)


MACROS = [
    b"#define BEGIN {\n", b"#define END }\n", b"#define CALL(f) f(\n", b"#define EMPTY\n",
    b"#define FOR_EACH(i, n) for (uint32_t i = 0; i < (n); ++i)\n", b"#define __aicore__\n",
    b"#define __global__ __attribute__((weak))\n", b"#define TRACE_POINT(l, e) do {} while (0)\n",
    b"#define return return\n", b"#define SyncAll() AscendC::SyncAll()\n",
]
MACRO_USES = [b" BEGIN ", b" END ", b" CALL(x) ", b" EMPTY ", b"FOR_EACH(i, 4) ", b"[[likely]] ",
              b"__attribute__((always_inline)) ", b" ASCEND_IS_AIC ", b"TRACE_POINT(\"processing\", B);",
              b"TRACE_POINT(\"x y\", E);", b" __aicore__ ", b"template <typename T> "]


def random_macro(rng: random.Random, data: bytes) -> bytes:
    if rng.random() < 0.5:
        return _at_line_start(rng, data, rng.choice(MACROS))
    return _at_boundary(rng, data, rng.choice(MACRO_USES))


def random_encoding(rng: random.Random, data: bytes) -> bytes:
    text = data.decode("utf-8", "replace")
    kind = rng.choice(["utf16", "bom", "gbk", "bad-bytes", "cr", "mixed-eol", "nul", "latin1", "utf16be"])
    if kind == "utf16":
        return text.encode("utf-16")  # with its BOM
    if kind == "utf16be":
        return text.encode("utf-16-be")
    if kind == "bom":
        return b"\xef\xbb\xbf" + data
    if kind == "gbk":
        return _at_line_start(rng, data, "// 分组循环：等待数据就绪\n".encode("gbk"))
    if kind == "bad-bytes":
        return _at_boundary(rng, data, rng.choice([b"\xff\xfe", b"\x80", b"\xc3", b"\xed\xa0\x80"]))
    if kind == "cr":
        return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r")
    if kind == "mixed-eol":
        lines = data.split(b"\n")
        return b"".join(line + rng.choice([b"\n", b"\r\n", b"\r"]) for line in lines)
    if kind == "nul":
        return _at_boundary(rng, data, b"\x00")
    return text.encode("latin-1", "replace")


def _two_line_starts(rng: random.Random, data: bytes) -> tuple[int, int]:
    starts = [0] + [m.end() for m in re.finditer(rb"\n", data)]
    i = rng.randrange(len(starts))
    return starts[i], starts[rng.randrange(i, len(starts))]


NESTING_DEPTHS = [64, 255, 256, 257, 1000, 5000]


def deep_nesting(rng: random.Random, data: bytes) -> bytes:
    """Nesting around a stretch of the file: `#if 1`, braces, loops (the planner's bound is
    256 levels), or one expression of nested parentheses or templates."""
    depth = rng.choice(NESTING_DEPTHS)
    kind = rng.choice(["if", "brace", "loop", "paren", "template"])
    if kind in ("paren", "template"):
        inner = (b"(" * depth + b"1" + b")" * depth if kind == "paren"
                 else b"std::vector<" * depth + b"int" + b">" * depth)
        return _at_line_start(rng, data, b"auto optraceFuzzDeep = " + inner + b";\n")
    open_, close = {"if": (b"#if 1\n", b"#endif\n"), "brace": (b"{\n", b"}\n"),
                    "loop": (b"for (uint32_t expertIdx = 0; expertIdx < 4; ++expertIdx) {\n", b"}\n")}[kind]
    start, end = _two_line_starts(rng, data)
    if rng.random() < 0.15:  # unbalanced as well
        return data[:start] + open_ * depth + data[start:]
    return data[:start] + open_ * depth + data[start:end] + close * depth + data[end:]


REPEAT_BYTES = 2_000_000  # what a repeated file may grow to (a case stays within seconds)


def repeat_content(rng: random.Random, data: bytes) -> bytes:
    """Content written again: the whole file N times over (a bad merge, a generator run
    twice), a stretch of it (a function pasted again), or one line many times (hand-written
    points by the thousand)."""
    kind = rng.choice(["file", "stretch", "line"])
    if kind == "file":
        times = max(2, min(rng.choice([2, 3, 10, 40]), REPEAT_BYTES // max(1, len(data))))
        return data * times
    start, end = _two_line_starts(rng, data)
    if kind == "line":
        end = data.find(b"\n", start) + 1 or len(data)
        times = rng.choice([100, 1000, 5000])
    else:
        times = rng.choice([2, 5, 20])
    times = max(2, min(times, REPEAT_BYTES // max(1, end - start)))
    return data[:end] + data[start:end] * (times - 1) + data[end:]


def compile_crash(rng: random.Random, data: bytes) -> bytes:
    """What overflows libclang's stack or drags it out: a template nested thousands deep,
    a macro of 100,000 line continuations. Cases holding it run check's compile safety."""
    if rng.random() < 0.5:
        n = rng.choice([2_000, 10_000])
        text = (b"template <typename T> struct OptraceFuzzW { T v; };\nusing OptraceFuzzDeep = "
                + b"OptraceFuzzW<" * n + b"int" + b">" * n + b";\n")
    else:
        text = b"#define OPTRACE_FUZZ_LONG \\\n" + b"    1 + \\\n" * 100_000 + b"    1\n"
    return _at_line_start(rng, data, text)


MUTATIONS: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "truncate": truncate, "brace": unbalance_brace, "quote": unbalance_quote, "if": unbalance_if,
    "macro": random_macro, "encoding": random_encoding, "nesting": deep_nesting, "repeat": repeat_content,
    "compile-crash": compile_crash,
}

# Names that are not UTF-8, as a GBK or Latin-1 checkout leaves them on a UTF-8 system.
NAME_BYTES = [b"\xff\xfe", "分组".encode("gbk"), b"\xe9t\xe9", b"\x80"]


def rename_non_utf8(rng: random.Random, repo: Path, target: str) -> str:
    """The tree mutation: the target file renamed with bytes that are not UTF-8 in its
    name, and every include of it in the repository spelled with the new name. Returns
    the new name (relative, as the workspace's snapshot spells it)."""
    old = repo / target
    raw = os.fsencode(old.name)
    stem, dot, suffix = raw.rpartition(b".")
    new_name = (stem + rng.choice(NAME_BYTES) + dot + suffix) if dot else raw + rng.choice(NAME_BYTES)
    new = Path(os.fsdecode(os.fsencode(old.parent) + b"/" + new_name))
    os.rename(old, new)
    include = re.compile(rb'(#\s*include\s*"(?:[^"\n]*/)?)' + re.escape(raw) + rb'"')
    for path in repo.rglob("*"):
        if path.is_file() and not path.is_symlink() and path.suffix in SOURCE_SUFFIXES:
            data = path.read_bytes()
            if raw in data:
                changed = include.sub(lambda m: m.group(1) + new_name + b'"', data)
                if changed != data:
                    path.write_bytes(changed)
    return new.relative_to(repo).as_posix()


TREE_MUTATIONS = {"non-utf8-name": rename_non_utf8}

# --------------------------------------------------------------------------- operators


def fixture_operators() -> list[tuple[Path, Path]]:
    """(repository folder, operator dir) of every fixture operator: an `op_kernel`'s parent."""
    found = []
    for base in (FIXTURES, HOST_REPO.parent):
        for kernel in sorted(base.rglob("op_kernel")):
            op = kernel.parent
            if base == HOST_REPO.parent and not op.is_relative_to(HOST_REPO):
                continue
            top = base / op.relative_to(base).parts[0]
            found.append((top, op))
    return found


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink() and ".optrace" not in p.parts}


@dataclass
class Workspace:
    """One copy of each fixture repository, restored after every case."""

    tmp: Path
    copies: dict[Path, Path] = field(default_factory=dict)  # fixture top -> copy
    pristine: dict[Path, dict[str, bytes]] = field(default_factory=dict)

    def repo(self, top: Path) -> Path:
        copy = self.copies.get(top)
        if copy is None:
            copy = self.tmp / top.name
            shutil.copytree(top, copy, symlinks=True)
            self.copies[top] = copy
            self.pristine[top] = _snapshot(copy)
        return copy

    def restore(self, top: Path) -> None:
        forget_repo_indexes()  # the next case's files are not this one's
        copy = self.copies[top]
        want = self.pristine[top]
        now = _snapshot(copy)
        shutil.rmtree(copy / ".optrace", ignore_errors=True)
        for rel in now.keys() - want.keys():
            (copy / rel).unlink()
        for rel, data in want.items():
            if now.get(rel) != data:
                (copy / rel).parent.mkdir(parents=True, exist_ok=True)
                (copy / rel).write_bytes(data)


# --------------------------------------------------------------------------- one case


@dataclass
class Outcome:
    case: int
    operator: str
    file: str
    mutations: list[str]
    result: str  # applied | no-change | refused:<step> | FAIL:<why>
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.result.startswith("FAIL")


# Past this a case is a hang: above every bound optrace sets itself (the compile check's
# child and its retries: 2 x 60 s), with room for a loaded machine.
CASE_SECONDS = 300


class _Hang(BaseException):  # not caught as a failure of a step: the case itself ran out
    """A case past its time limit (a pattern backtracking for ever: found once)."""


def _alarm(_signum: int, _frame: object) -> None:
    raise _Hang


def run_case(case: int, seed: int, ws: Workspace, operators: list[tuple[Path, Path]],
             compile_every: int = 0, limit_s: int = CASE_SECONDS) -> Outcome:
    """Case `case` of the run seeded `seed` (the same pair gives the same case); one that
    runs past `limit_s` seconds is a failure too (main thread only: a SIGALRM)."""
    timed = threading.current_thread() is threading.main_thread()
    if timed:
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(limit_s)
    try:
        return _run_case(case, seed, ws, operators, compile_every)
    except _Hang:
        return Outcome(case, "?", "?", [], f"FAIL:hang past {limit_s} s")
    finally:
        if timed:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)


def _run_case(case: int, seed: int, ws: Workspace, operators: list[tuple[Path, Path]],
              compile_every: int) -> Outcome:
    rng = random.Random(f"optrace-source-fuzz-{seed}-{case}")
    top, fixture_op = rng.choice(operators)
    repo = ws.repo(top)
    op = repo / fixture_op.relative_to(top)
    sources = sorted(rel for rel in ws.pristine[top] if rel.endswith(SOURCE_SUFFIXES))
    target = rng.choice(sources)
    kinds = [*MUTATIONS, *TREE_MUTATIONS]
    names = [rng.choice(kinds) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
    data = ws.pristine[top][target]
    for name in names:
        if name in MUTATIONS:
            data = MUTATIONS[name](rng, data)
    outcome = Outcome(case, fixture_op.relative_to(top.parent).as_posix(), target, names, "")
    (repo / target).write_bytes(data)
    for name in names:
        if name in TREE_MUTATIONS and (repo / target).exists():
            target = TREE_MUTATIONS[name](rng, repo, target)
    compile_every = 1 if "compile-crash" in names else compile_every
    mutated = _snapshot(repo)
    step = "plan"
    try:
        try:
            # apply plans first (plan_operator, exactly what `optrace plan` computes); the
            # plan it made is rendered as `plan` and `plan --format json` render it.
            applied = apply_changes(op)
        except InputError as exc:
            outcome.result, outcome.detail = "refused:plan/apply", exc.diagnostic.format()[:200]
            return outcome
        assert applied.plan is not None
        render_text(applied.plan, PlannedMode("B", "fuzz"))
        json.dumps(plan_json(applied.plan, PlannedMode("B", "fuzz")))
        if not applied.changes:
            outcome.result = "no-change"
            return outcome
        step = "apply --write"
        commit(applied.changes, repo / ".optrace", name="fuzz")
        step = "check"
        forget_repo_indexes()  # each step a process of its own, as at the CLI: none sees another's reads
        try:
            check_operator(op, compile_safety=bool(compile_every) and case % compile_every == 0)
        except InputError as exc:  # a refusal of the applied tree: allowed, reported
            outcome.detail = f"check refused: {exc.diagnostic.format()[:200]}"
        step = "strip"
        forget_repo_indexes()
        stripped = strip_changes(op)  # an InputError here is a failure: apply wrote
        step = "strip --write"
        commit(stripped.changes, repo / ".optrace", name="fuzz")
        after = _snapshot(repo)
        if after != mutated:
            changed = sorted(k for k in after.keys() | mutated.keys() if after.get(k) != mutated.get(k))
            outcome.result, outcome.detail = "FAIL:strip-not-identity", ", ".join(changed)[:300]
        else:
            outcome.result = "applied"
        return outcome
    except Exception as exc:  # exit 3 at the CLI: a failure of optrace, whatever it is
        outcome.result = f"FAIL:{step}:{type(exc).__name__}"
        outcome.detail = "".join(traceback.format_exception(exc))[-1500:]
        return outcome
    finally:
        ws.restore(top)


def run(seed: int, count: int, *, budget_s: float | None = None, compile_every: int = 0,
        progress: Callable[[Outcome], None] | None = None, start: int = 0) -> list[Outcome]:
    """Cases `start` … `start + count - 1` of run `seed` (stopping early after `budget_s`
    seconds): a long run can be split over processes, each case the same."""
    operators = fixture_operators()
    began = time.monotonic()
    outcomes = []
    # In memory when the machine has it: every case commits twice, and a commit's fsyncs
    # on a shared disk cost more than all the parsing.
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="optrace-fuzz-", dir=shm) as tmp:
        ws = Workspace(Path(tmp))
        for case in range(start, start + count):
            if budget_s is not None and time.monotonic() - began > budget_s:
                break
            outcomes.append(run_case(case, seed, ws, operators, compile_every))
            if progress is not None:
                progress(outcomes[-1])
    return outcomes


def summary(outcomes: list[Outcome]) -> dict[str, object]:
    results = Counter(o.result.split(":", 1)[0] if not o.failed else o.result for o in outcomes)
    mutations = Counter(m for o in outcomes for m in o.mutations)
    return {"cases": len(outcomes), "results": dict(sorted(results.items())),
            "mutations": dict(sorted(mutations.items())),
            "failures": [o.__dict__ for o in outcomes if o.failed][:20]}


def exit_of(outcome: Outcome) -> int | str:
    """The case's outcome as a fuzz figure (tests/fuzz_tally.py): 0 (planned, applied,
    checked and stripped back, or nothing to change), 2 (refused as bad input), a hang, or
    a crash (any other failure: an exception, or strip not giving the bytes back)."""
    if outcome.result.startswith("FAIL:hang"):
        return "hang"
    if outcome.failed:
        return "crash"
    return 2 if outcome.result.startswith("refused") else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--start", type=int, default=0, help="first case number (to split a run)")
    parser.add_argument("--log", type=Path, help="append one JSON line per case here (a run cut short "
                        "still has its results)")
    parser.add_argument("--compile-every", type=int, default=50,
                        help="run check's libclang compile-safety pass on every Nth case (0: never)")
    args = parser.parse_args()
    started = time.monotonic()
    install_deferred()  # run as a script: the pipeline is handed its LibCST half as the CLI does

    log = args.log.open("a", encoding="utf-8") if args.log else None

    def tick(outcome: Outcome) -> None:
        if log is not None:
            fields = {k: v for k, v in outcome.__dict__.items() if k != "detail" or outcome.failed}
            log.write(json.dumps(fields) + "\n")
            log.flush()
        if outcome.failed:  # as it happens: a long run is worth reading before it ends
            print(f"FAIL case {outcome.case}: {outcome.result} {outcome.operator} {outcome.file} "
                  f"{outcome.mutations}\n{outcome.detail}", file=sys.stderr, flush=True)
        if (outcome.case + 1) % 250 == 0:
            print(f"  {outcome.case + 1} cases, {time.monotonic() - started:.0f} s",
                  file=sys.stderr, flush=True)

    with tally("source fuzzer: mutated fixture operators through plan, apply, check, strip",
               "an operator with one to three mutations") as counts:

        def counted(outcome: Outcome) -> None:
            counts.count(exit_of(outcome))
            tick(outcome)

        outcomes = run(args.seed, args.count, compile_every=args.compile_every, progress=counted,
                       start=args.start)
    report = summary(outcomes)
    report["seed"] = args.seed
    report["first_case"] = args.start
    report["seconds"] = round(time.monotonic() - started)
    print(json.dumps(report, indent=1))
    return 1 if any(o.failed for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
