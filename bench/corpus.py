"""The corpus run: optrace as a new user would meet it, on real public repositories.

    python bench/corpus.py REPO [OPDIR...] [--sample N --seed S] [--jobs N] [--timeout SEC]

On a scratch git copy of REPO (a clone at HEAD, no end-of-line conversion), for every
operator directory found (`engine.discovery.find_operator_dirs`: an `op_kernel/` holding
a kernel entry, `ascend_kernels/<op>`, `csrc/ops/<op>`; directories under a `tests/` or
`test/` folder are unit-test harnesses, not operators, and are left out) or given:

    plan --format json -> plan again -> apply --write -> apply --check (nothing left to
    change: apply is idempotent) -> check --format json
    -> strip --write -> the tree is byte-identical to before
    -> apply --check says changes are needed

each step a fresh `optrace` process with a per-operator time limit (a timeout is a
failure). The run has a user cache of its own, empty at its start (`XDG_CACHE_HOME` in
its temporary folder): each operator's first plan is a first plan (the repository index
built by the first operator of each scratch copy, then shared), the second one is
answered from the cache and must print the same bytes. Beside them: a bare tree-sitter
parse of the files the plan read, in its own process under the same load (both plans'
times are judged as ratios of it), and a host compile
with libclang against the AscendC stub of every C++ file apply wrote, before and after:
an error after apply that was not there before is a compile regression, whatever
`check` says.

It prints one line per operator and a summary, writes a JSON report (`--json`, default
bench/corpus/<name>.json) and refreshes this repository's section of
bench/corpus-results.md. Local evidence only: CI has no network and never runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from queue import Queue
from typing import Any

from bench_collect import compile_bytecode  # bench/ is this script's folder: first on sys.path

from optrace.codemods.strip import strip_bytes
from optrace.engine.discovery import CPP_EXTS, find_operator_dirs
from optrace.engine.host_compile import host_compile

HERE = Path(__file__).resolve().parent
RESULTS_MD = HERE / "corpus-results.md"

# The bare parse: what reading and parsing the plan's files costs with nothing else,
# interpreter start and tree-sitter import included (as plan's time includes them).
BARE_PARSE = r"""
import sys
import tree_sitter_cpp
from tree_sitter import Language, Parser
parser = Parser(Language(tree_sitter_cpp.language()))
n = 0
for name in sys.stdin.read().splitlines():
    try:
        data = open(name, "rb").read()
    except OSError:
        continue
    n += len(parser.parse(data).root_node.children)
print(n)
"""

# plan's mode probe against apply's edit-computing choice, on the tree as planned (before
# apply writes): "same", or both answers.
PROBE_CHECK = r"""
import sys
from pathlib import Path
from optrace.cli.deferred import install
from optrace.engine.diagnostics import InputError
from optrace.pipeline.apply import choose_mode, probe_mode
from optrace.pipeline.plan import plan_operator
install()
plan = plan_operator(Path(sys.argv[1]))
def outcome(decide):
    try:
        m = decide(plan)
    except InputError as exc:
        return ("refused", exc.diagnostic.format(), [])
    return (m.mode, m.why.format(), sorted(map(str, m.edited)))
probed, computed = outcome(probe_mode), outcome(choose_mode)
print("same" if probed == computed else f"probe {probed} / edits {computed}")
"""

DIAG_RE = re.compile(r"\b(OT\d{3})\b")
# The plan lint's name figures (OT105), each a column of the report.
NAME_LINT = ("labels_with_repeated_word", "sibling_label_clashes", "regions_folded_for_length")
TRACEBACK = "Traceback (most recent call last)"


@dataclass
class Step:
    rc: int | None = None  # None: not run (an earlier step failed)
    secs: float = 0.0
    timeout: bool = False
    traceback: bool = False
    codes: dict[str, int] = field(default_factory=dict)
    stderr_head: str = ""


@dataclass
class OperatorResult:
    op: str
    category: str
    steps: dict[str, Step] = field(default_factory=dict)
    labels_per_core: dict[str, int] = field(default_factory=dict)
    regions: int = 0
    root_only: bool = False
    thin: bool = False  # nothing but setup below the root (root-only trees included)
    entry_calls: int = 0  # call expressions in the entry's body (root-only judged among these)
    stop_reasons: list[str] = field(default_factory=list)  # OT023: calls the graph could not follow
    spin_loops: list[str] = field(default_factory=list)  # `file:line var (function)` of each spin wait
    missing_headers: int = 0
    partial_parses: int = 0
    plan_codes: dict[str, int] = field(default_factory=dict)
    mode: str | None = None
    lint: dict[str, Any] = field(default_factory=dict)
    written_inside: list[str] = field(default_factory=list)
    written_outside: list[str] = field(default_factory=list)
    # files outside the operator the plan marks "edited", and how they differ from what
    # apply wrote there (`+f`: written, not marked; `-f`: marked, not written)
    edited_marked: list[str] = field(default_factory=list)
    edited_differs: list[str] = field(default_factory=list)
    identical: bool | None = None
    not_restored: list[str] = field(default_factory=list)
    compiled_files: int = 0
    new_compile_errors: list[str] = field(default_factory=list)
    check_errors: list[str] = field(default_factory=list)
    parse_secs: float | None = None
    plan_ratio: float | None = None
    # The same plan again, nothing changed (the run's own user cache holds its entry now):
    # its time over the bare parse, and whether it printed the first plan's bytes.
    plan_again_ratio: float | None = None
    plan_again_same: bool | None = None
    probe_same: bool | None = None  # plan's mode probe gave apply's choice (None: not compared)
    probe_diff: str = ""
    failures: list[str] = field(default_factory=list)


# --- scratch copies ---------------------------------------------------------------------


def git(cwd: Path, *args: str, data: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", "-c", "core.autocrlf=false", "-c", "core.safecrlf=false", *args],
        cwd=cwd,
        input=data,
        check=True,
        capture_output=True,
    ).stdout


def make_scratch(repo: Path, into: Path) -> Path:
    """A clone at HEAD sharing REPO's objects; nothing optrace does reaches REPO."""
    subprocess.run(
        ["git", "clone", "-q", "--shared", "--no-checkout", str(repo), str(into)],
        check=True,
        capture_output=True,
    )
    git(into, "config", "core.autocrlf", "false")
    git(into, "checkout", "-q", "HEAD")
    return into


def reset(scratch: Path) -> None:
    git(scratch, "checkout", "-q", "--", ".")
    git(scratch, "clean", "-qfdx")


def status(scratch: Path) -> list[str]:
    """Every path that differs from HEAD, untracked and ignored ones included, but the
    journal folder `.optrace/` (which keeps its own .gitignore and may stay)."""
    out = git(scratch, "status", "--porcelain", "-z", "-uall", "--ignored").split(b"\0")
    paths = []
    for entry in out:
        if len(entry) < 4:
            continue
        path = entry[3:].decode("utf-8", "surrogateescape")
        if path == ".optrace" or path.startswith(".optrace/"):
            continue
        paths.append(path)
    return paths


def head_bytes(scratch: Path, path: str) -> bytes | None:
    try:
        return git(scratch, "show", f"HEAD:{path}")
    except subprocess.CalledProcessError:
        return None  # a file apply created


# --- running optrace --------------------------------------------------------------------


def optrace_cmd() -> list[str]:
    script = Path(sys.executable).with_name("optrace")
    return [str(script)] if script.exists() else [sys.executable, "-m", "optrace"]


def run(cmd: list[str], cwd: Path, budget: float, data: str | None = None) -> tuple[Step, str]:
    """One command in its own process group; killed with its children past the budget."""
    step = Step()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="surrogateescape",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(data, timeout=max(budget, 1.0))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        step.timeout = True
    step.secs = time.perf_counter() - t0
    step.rc = proc.returncode
    step.traceback = TRACEBACK in err
    step.codes = dict(Counter(DIAG_RE.findall(err)))
    step.stderr_head = "\n".join(
        err.strip().splitlines()[-3:] if step.traceback else err.strip().splitlines()[:3]
    )
    return step, out


def walk_regions(region: dict[str, Any]) -> list[dict[str, Any]]:
    out = [region]
    for child in region.get("children", []):
        out.extend(walk_regions(child))
    return out


_CALL_RE = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^;{}()]*>)?\s*\(")
_NOT_CALLS = {
    "if",
    "for",
    "while",
    "switch",
    "return",
    "sizeof",
    "decltype",
    "static_cast",
    "reinterpret_cast",
    "const_cast",
    "dynamic_cast",
    "alignof",
    "catch",
}


def entry_calls(path: Path, line: int) -> int:
    """Calls in the entry's body that could reach kernel code (not all-caps macros)."""
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return 0
    lines = text.splitlines(keepends=True)
    start = sum(len(x) for x in lines[: max(line - 1, 0)])
    brace = text.find("{", text.find(")", start))
    if brace < 0:
        return 0
    depth, end = 0, len(text)
    for i in range(brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                end = i
                break
    body = re.sub(r"//[^\n]*|/\*.*?\*/", "", text[brace:end], flags=re.S)
    return sum(
        1 for m in _CALL_RE.finditer(body) if m.group(1) not in _NOT_CALLS and not m.group(1).isupper()
    )


def compile_errors(files: list[Path], op_dir: Path, scratch: Path) -> set[tuple[str, str, str]]:
    """Host-compile errors as (file, message, source line text).

    The stub knows little of CANN (`aclTensor`, `ge::`, `gert::`, `TPipe`...), so the same
    error on an inserted line is context when the file had it before apply: an error is new
    when its message is new to the file, or, for messages naming no identifier (`expected
    ';'`), when no line with that text had it (line numbers move, line text does not)."""
    result = host_compile(files, op_dir)
    keys: set[tuple[str, str, str]] = set()
    for path, errors in result.errors.items():
        src = path.read_bytes().decode("utf-8", "replace").splitlines()
        rel = path.relative_to(scratch).as_posix()
        for e in errors:
            text = src[e.line - 1] if 0 < e.line <= len(src) else ""
            # The line as it was: a fragment apply spliced into a line the stub could not
            # compile before (`std::tuple<..., c10::optional<...>>`) leaves the error the same.
            text = strip_bytes(text.encode() + b"\n", path).decode("utf-8", "replace").strip()
            keys.add((rel, e.message, text))
    return keys


def new_errors(before: set[tuple[str, str, str]], after: set[tuple[str, str, str]]) -> list[str]:
    messages = {(f, m) for f, m, _ in before}
    return [f"{f}: {m}  [{t[:80]}]" for f, m, t in sorted(after - before)
            if (f, m) not in messages or "'" not in m]


def run_operator(op_rel: str, scratch: Path, timeout: float, compile_diff: bool,
                 plan_only: bool = False) -> OperatorResult:
    parts = Path(op_rel).parts
    category = "/".join(parts[:2]) if parts[0] == "experimental" and len(parts) > 2 else parts[0]
    res = OperatorResult(op_rel, category)
    op_dir = scratch / op_rel
    deadline = time.perf_counter() + timeout
    cmd = optrace_cmd()

    def left() -> float:
        return deadline - time.perf_counter()

    def do(name: str, args: list[str]) -> tuple[Step, str]:
        step, out = run([*cmd, *args], scratch, left())
        res.steps[name] = step
        if step.timeout:
            res.failures.append(f"{name}: timeout")
        elif step.traceback or (step.rc or 0) >= 3:
            res.failures.append(f"{name}: exit {step.rc}" + (" (traceback)" if step.traceback else ""))
        return step, out

    try:
        # 1. plan
        step, out = do("plan", ["plan", op_rel, "--format", "json"])
        doc: dict[str, Any] = {}
        if step.rc == 0:
            try:
                doc = json.loads(out)["operators"][0]
            except (ValueError, KeyError, IndexError):
                res.failures.append("plan: exit 0 without a JSON operator")
        elif not step.timeout:
            res.failures.append(f"plan: exit {step.rc}")
        read_files: list[str] = []
        if doc:
            res.labels_per_core = dict(doc.get("labels_per_core", {}))
            regions = walk_regions(doc["tree"]) if doc.get("tree") else []
            res.regions = len(regions)
            res.root_only = len(regions) <= 1
            res.thin = not any(r.get("kind") != "root" and r.get("cost") != "setup" for r in regions)
            res.stop_reasons = [f"{d['path']}:{d['line']} {d['message']}" for d in doc.get("diagnostics", [])
                                if d["code"] == "OT023"]
            res.spin_loops = [f"{lp['file']}:{lp['line']} `{lp['var']}` ({lp['function']})"
                              for lp in doc.get("loops", []) if lp.get("class") == "spin"]
            res.missing_headers = len(doc.get("includes", {}).get("missing", []))
            codes = Counter(d["code"] for d in doc.get("diagnostics", []))
            res.plan_codes = dict(codes)
            res.partial_parses = codes.get("OT020", 0)
            res.mode = doc.get("mode")
            res.lint = dict(doc.get("lint", {}))
            res.edited_marked = sorted(o["file"] for o in doc.get("outside", []) if o.get("edited"))
            entry = doc.get("layers", {}).get("entry") or []
            if entry:
                res.entry_calls = entry_calls(scratch / entry[0]["file"], entry[0]["line"])
            read_files = sorted(
                {
                    *doc.get("includes", {}).get("files", []),
                    *(h["file"] for hits in doc.get("layers", {}).values() for h in hits),
                }
            )
            read_files = [f for f in read_files if Path(f).suffix.lower() in CPP_EXTS]
            # The bare parse of the same files, in its own process, now (same load).
            bare, _ = run(
                [sys.executable, "-c", BARE_PARSE],
                scratch,
                max(left(), 1.0),
                data="\n".join(str(scratch / f) for f in read_files),
            )
            probe, said = run([sys.executable, "-c", PROBE_CHECK, op_rel], scratch, max(left(), 1.0))
            if probe.rc == 0:
                res.probe_same = said.strip() == "same"
                res.probe_diff = "" if res.probe_same else said.strip()[:400]
                if not res.probe_same:
                    res.failures.append("mode probe differs from apply's choice")
            # The second run of the same plan: a cold-vs-warm pair per operator.
            again, again_out = run([*cmd, "plan", op_rel, "--format", "json"], scratch, max(left(), 1.0))
            res.steps["plan_again"] = again
            if again.rc != step.rc:
                res.failures.append(f"plan again: exit {again.rc}, the first {step.rc}")
            res.plan_again_same = again_out == out
            if not res.plan_again_same:
                res.failures.append("plan again printed another plan than the first")
            if bare.rc == 0 and bare.secs > 0:
                res.parse_secs = bare.secs
                res.plan_ratio = step.secs / bare.secs
                if again.rc == step.rc:
                    res.plan_again_ratio = again.secs / bare.secs
        if step.rc != 0 or plan_only:
            return res

        # 2. apply --write, in the default mode (optrace chooses per operator)
        step, _ = do("apply", ["apply", op_rel, "--write"])
        if step.rc != 0:
            if not step.timeout and step.rc not in (2,):
                res.failures.append(f"apply: exit {step.rc}")
            return res
        written = status(scratch)
        for path in written:
            (res.written_inside if (scratch / path).is_relative_to(op_dir) else res.written_outside).append(
                path
            )
        marked, wrote = set(res.edited_marked), set(res.written_outside)
        res.edited_differs = [f"+{p}" for p in sorted(wrote - marked)]
        res.edited_differs += [f"-{p}" for p in sorted(marked - wrote)]
        cpp_written = [
            scratch / p for p in written if Path(p).suffix.lower() in CPP_EXTS and (scratch / p).is_file()
        ]
        after: set[tuple[str, str, str]] = set()
        if compile_diff and cpp_written:
            after = compile_errors(cpp_written, op_dir, scratch)

        # 2b. apply again, on its own output: nothing left to change (every codemod is
        # idempotent); 1 here is a second apply that would edit the tree again
        step, _ = do("apply_again", ["apply", op_rel, "--check"])
        if step.rc != 0 and not step.timeout:
            res.failures.append(f"apply --check after apply: exit {step.rc} (expected 0: not idempotent)")

        # 3. check on optrace's own output: any error is a failure of optrace
        step, out = do("check", ["check", op_rel, "--format", "json"])
        try:
            reports = json.loads(out).get("operators", []) if out.strip() else []
        except ValueError:
            reports = []
        for rep in reports:
            for f in rep.get("findings", []):
                if f.get("severity") == "error":
                    res.check_errors.append(
                        f"{f.get('path')}:{f.get('line')}: {f.get('code')} {f.get('message')}"
                    )
            for g in rep.get("gates", []):
                if g.get("status") == "fail":
                    res.check_errors.append(f"{g.get('gate')} ✗ {g.get('summary', '')}")
        if step.rc not in (0, None) and not res.check_errors:
            res.check_errors.append(f"check exit {step.rc}: {step.stderr_head}")
        if res.check_errors:
            res.failures.append(f"check: {len(res.check_errors)} error(s) on optrace's own output")

        # 4. strip --write: every byte back, inside the operator and out
        step, _ = do("strip", ["strip", op_rel, "--write"])
        if step.rc != 0:
            res.failures.append(f"strip: exit {step.rc}")
        left_over = status(scratch)
        res.not_restored = sorted(
            set(left_over)
            | {
                p
                for p in written
                if (scratch / p).exists() and (scratch / p).read_bytes() != head_bytes(scratch, p)
            }
            | {p for p in written if not (scratch / p).exists() and head_bytes(scratch, p) is not None}
        )
        res.identical = not res.not_restored
        if not res.identical:
            res.failures.append(f"strip: {len(res.not_restored)} file(s) not restored")

        # 5. apply --check on the stripped tree: changes are needed again
        step, _ = do("apply_check", ["apply", op_rel, "--check"])
        if step.rc != 1 and not step.timeout:
            res.failures.append(f"apply --check after strip: exit {step.rc} (expected 1)")

        # The compile before apply, on the original bytes.
        if compile_diff and cpp_written:
            reset(scratch)
            existing = [p for p in cpp_written if p.exists()]
            before = compile_errors(existing, op_dir, scratch) if existing else set()
            res.compiled_files = len(cpp_written)
            res.new_compile_errors = new_errors(before, after)
            if res.new_compile_errors:
                res.failures.append(f"compile: {len(res.new_compile_errors)} new error(s) after apply")
    finally:
        reset(scratch)
    return res


# --- selection, summary, report -----------------------------------------------------------


def select(ops: list[str], sample: int | None, seed: int) -> list[str]:
    """A seeded sample spread across categories (round-robin over shuffled groups)."""
    if sample is None or sample >= len(ops):
        return ops
    rng = random.Random(seed)
    groups: dict[str, list[str]] = {}
    for op in sorted(ops):
        parts = Path(op).parts
        key = "/".join(parts[:2]) if parts[0] == "experimental" and len(parts) > 2 else parts[0]
        groups.setdefault(key, []).append(op)
    for g in groups.values():
        rng.shuffle(g)
    order = sorted(groups)
    picked: list[str] = []
    while len(picked) < sample:
        for key in order:
            if groups[key] and len(picked) < sample:
                picked.append(groups[key].pop())
    return sorted(picked)


def pct(n: int, d: int) -> str:
    return f"{100 * n / d:.1f} %" if d else "n/a"


def quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def summarise(results: list[OperatorResult]) -> dict[str, Any]:
    n = len(results)
    planned = [r for r in results if r.steps.get("plan") and r.steps["plan"].rc == 0]
    applied = [r for r in planned if r.steps.get("apply") and r.steps["apply"].rc == 0]
    steps = [s for r in results for s in r.steps.values()]
    calling = [r for r in planned if r.entry_calls > 0]
    ratios = [r.plan_ratio for r in planned if r.plan_ratio is not None]
    again = [r.plan_again_ratio for r in planned if r.plan_again_ratio is not None]
    codes: Counter[str] = Counter()
    for r in results:
        for s in r.steps.values():
            codes.update(s.codes)
    refusals: Counter[str] = Counter()
    for r in results:
        plan = r.steps.get("plan")
        if plan and plan.rc == 2:
            refusals.update(plan.codes.keys() or ["(no code)"])
    apply_refusals: Counter[str] = Counter()
    for r in planned:
        ap = r.steps.get("apply")
        if ap and ap.rc == 2:
            apply_refusals.update(ap.codes.keys() or ["(no code)"])
    lint_keys = sorted({k for r in planned for k in r.lint})
    return {
        "operators": n,
        "tracebacks": sum(s.traceback for s in steps),
        "exit3": sum(1 for s in steps if (s.rc or 0) >= 3 and not s.timeout),
        "timeouts": sum(s.timeout for s in steps),
        "plan_ok": len(planned),
        "plan_refusals": dict(refusals),
        "apply_ok": len(applied),
        "apply_refusals": dict(apply_refusals),
        "modes": dict(Counter(r.mode or "?" for r in applied)),
        "strip_identical": sum(1 for r in applied if r.identical),
        "written_outside": sum(1 for r in applied if r.written_outside),
        "edited_differs": sum(1 for r in applied if r.edited_differs),
        "compile_regressions": sum(1 for r in applied if r.new_compile_errors),
        "check_errors_on_own_output": sum(1 for r in applied if r.check_errors),
        "apply_again_compared": sum(1 for r in applied if "apply_again" in r.steps),
        "apply_again_changes": sum(
            1 for r in applied if r.steps.get("apply_again") and r.steps["apply_again"].rc != 0
        ),
        "apply_check_after_strip_ok": sum(
            1 for r in applied if r.steps.get("apply_check") and r.steps["apply_check"].rc == 1
        ),
        "with_calls": len(calling),
        "root_only": sum(1 for r in calling if r.root_only),
        "root_only_or_thin": sum(1 for r in calling if r.root_only or r.thin),
        "thin_without_reason": sum(1 for r in calling if (r.root_only or r.thin) and not r.stop_reasons),
        "spin_loops": sum(len(r.spin_loops) for r in planned),
        "plan_ratio_median": statistics.median(ratios) if ratios else None,
        "plan_ratio_p95": quantile(ratios, 0.95) if ratios else None,
        "plan_again_ratio_median": statistics.median(again) if again else None,
        "plan_again_ratio_p95": quantile(again, 0.95) if again else None,
        "plan_again_compared": sum(1 for r in planned if r.plan_again_same is not None),
        "plan_again_differs": sum(1 for r in planned if r.plan_again_same is False),
        "codes": dict(sorted(codes.items())),
        "lint": {
            # a length is a maximum over the corpus (the 32-character target), counts add up
            k: (max if k.endswith("_length") or k.startswith("deepest") else sum)(
                float(r.lint.get(k) or 0) for r in planned)
            for k in lint_keys
            if all(isinstance(r.lint.get(k, 0), int | float) for r in planned)
        },
    }


def targets(s: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """Issues #11 §2 and #23 (the stricter where both set one), each as (target, measured,
    met)."""
    applied = s["apply_ok"]
    rows = [
        (
            "0 tracebacks, 0 exit 3, 0 timeouts",
            f"{s['tracebacks']} / {s['exit3']} / {s['timeouts']}",
            s["tracebacks"] == s["exit3"] == s["timeouts"] == 0,
        ),
        (
            "strip restores every byte (100 % of applied)",
            f"{s['strip_identical']} of {applied}",
            s["strip_identical"] == applied,
        ),
        ("0 compile regressions after apply", str(s["compile_regressions"]), s["compile_regressions"] == 0),
        (
            "0 operators where check errs on optrace's output",
            str(s["check_errors_on_own_output"]),
            s["check_errors_on_own_output"] == 0,
        ),
        (
            "the plan's \"edited\" marks = apply's diff outside the operator (operators that differ)",
            f"{s.get('edited_differs', '?')} of {applied}",
            s.get("edited_differs") == 0,
        ),
        (
            "plan exits 0 on >= 99.5 %",
            f"{s['plan_ok']} of {s['operators']} ({pct(s['plan_ok'], s['operators'])})",
            s["plan_ok"] >= 0.995 * s["operators"],
        ),
        (
            "apply exits 0 on >= 95 % of planned",
            f"{applied} of {s['plan_ok']} ({pct(applied, s['plan_ok'])})",
            applied >= 0.95 * s["plan_ok"],
        ),
        (
            "root-only or thin trees <= 0.5 % (kernels that call), each with its reason",
            f"{s.get('root_only_or_thin', s['root_only'])} of {s['with_calls']} "
            f"({pct(s.get('root_only_or_thin', s['root_only']), s['with_calls'])}), "
            f"{s.get('thin_without_reason', '?')} without a reason",
            s.get("root_only_or_thin", s["root_only"]) <= 0.005 * s["with_calls"]
            and s.get("thin_without_reason") == 0,
        ),
        (
            "0 points in spin-wait loops",
            f"{s['lint']['points_in_spin_loops']:g}" if "points_in_spin_loops" in s["lint"] else "?",
            s["lint"].get("points_in_spin_loops", 1) == 0,
        ),
    ]
    if s.get("apply_again_compared") is not None:  # (a report of an earlier run has no such step)
        rows.insert(2, (
            "a second apply changes nothing (operators where it would)",
            f"{s['apply_again_changes']} of {s['apply_again_compared']}",
            s["apply_again_changes"] == 0 and s["apply_again_compared"] == applied,
        ))
    if s.get("plan_only"):
        # apply, check and strip were not run: only what the plan says is measured
        rows = [r for r in rows if not r[0].startswith(("strip", "0 compile", "0 operators where check",
                                                        "the plan's \"edited\"", "apply exits",
                                                        "a second apply"))]
    names = [s["lint"].get(k) for k in NAME_LINT]
    rows.append(
        (
            "names: 0 labels with a repeated word / 0 siblings sharing a label (counters ignored) "
            "/ 0 regions folded by OT105",
            " / ".join("?" if n is None else f"{n:g}" for n in names),
            all(n == 0 for n in names),
        )
    )
    kept = s["lint"].get("phases_dropped_while_setup_kept")
    rows.append(
        (
            "the label budget drops no phase while setup is kept (phases so dropped)",
            "?" if kept is None else f"{kept:g}",
            kept == 0,
        )
    )
    if s["plan_ratio_median"] is not None:
        rows.append(
            (
                "plan <= 3x a bare parse (median), <= 5x (p95)",
                f"{s['plan_ratio_median']:.2f}x, {s['plan_ratio_p95']:.2f}x",
                s["plan_ratio_median"] <= 3.0 and s["plan_ratio_p95"] <= 5.0,
            )
        )
    if s.get("plan_again_ratio_median") is not None:
        rows.append(
            (
                "plan again, nothing changed, <= 1.5x a bare parse (median; p95 shown)",
                f"{s['plan_again_ratio_median']:.2f}x, {s['plan_again_ratio_p95']:.2f}x",
                s["plan_again_ratio_median"] <= 1.5,
            )
        )
    if s.get("plan_again_compared"):
        rows.append(
            (
                "plan again prints the first plan's bytes (operators that differ)",
                f"{s['plan_again_differs']} of {s['plan_again_compared']}",
                s["plan_again_differs"] == 0,
            )
        )
    return rows


def line_for(i: int, n: int, r: OperatorResult) -> str:
    def st(name: str) -> str:
        s = r.steps.get(name)
        if s is None:
            return "-"
        return "T/O" if s.timeout else f"{s.rc}{'!' if s.traceback else ''}"

    labels = " ".join(f"{k}:{v}" for k, v in sorted(r.labels_per_core.items())) or "-"
    names = "/".join(str(r.lint.get(k, "-")) for k in NAME_LINT)
    ident = {True: "same", False: "DIFF", None: "-"}[r.identical]
    plan_s = r.steps["plan"].secs if "plan" in r.steps else 0.0
    again = f" again {r.steps['plan_again'].secs:4.1f}s" if "plan_again" in r.steps else ""
    return (
        f"[{i:>4}/{n}] {r.op:<60} plan {st('plan')} {plan_s:5.1f}s{again}  apply {st('apply')} "
        f"again {st('apply_again')}  "
        f"check {st('check')}  strip {st('strip')} {ident}  labels {labels}  names {names}"
        + (f"  edited-marks-differ {len(r.edited_differs)}" if r.edited_differs else "")
        + {True: "  probe same", False: "  probe DIFF", None: ""}[r.probe_same]
        + (f"  FAIL: {'; '.join(r.failures)}" if r.failures else "")
    )


def render_md(name: str, meta: dict[str, Any], s: dict[str, Any], results: list[OperatorResult]) -> str:
    out = [
        f"## {name}",
        "",
        f"Commit `{meta['commit']}`, {meta['date']}, optrace at `{meta.get('optrace', '?')}`, "
        f"{s['operators']} operators "
        f"({meta['selection']}), `{meta['command']}`.",
        "",
        "| target (issues #11 §2, #23, #30) | measured | met |",
        "|---|---|---|",
    ]
    out += [f"| {t} | {m} | {'yes' if ok else '**no**'} |" for t, m, ok in targets(s)]
    out += [
        "",
        f"Default mode chosen: {s['modes']}. Plan refusals: {s['plan_refusals'] or 'none'}. "
        f"Apply refusals: {s['apply_refusals'] or 'none'}. "
        f"Operators whose apply wrote outside the operator directory: {s['written_outside']}.",
        "",
    ]
    if s["lint"]:
        out += [
            "Plan lint, summed over planned operators: "
            + ", ".join(f"{k} {v:g}" for k, v in s["lint"].items())
            + ".",
            "",
        ]
    out += [
        "Diagnostic codes over all steps: "
        + (", ".join(f"{k} {v}" for k, v in s["codes"].items()) or "none")
        + ".",
        "",
    ]
    differs = [r for r in results if r.edited_differs]
    if differs:
        out += [f"### The plan's \"edited\" marks against apply's diff ({len(differs)} differ)", "",
                "`+file`: apply wrote it, the plan did not mark it; `-file`: marked, not written.", ""]
        out += [f"- `{r.op}`: " + ", ".join(f"`{d}`" for d in r.edited_differs[:6])
                + (f" (+{len(r.edited_differs) - 6} more)" if len(r.edited_differs) > 6 else "")
                for r in differs]
        out.append("")
    thin = [r for r in results if (r.root_only or r.thin) and r.entry_calls]
    out += [f"### Root-only or thin trees ({len(thin)}), with the reasons the plan gives", ""]
    if not thin:
        out.append("None.")
    for r in thin:
        out.append(f"- `{r.op}`" + ("" if r.stop_reasons else ": **no reason given**"))
        out += [f"  - {reason[:240]}" for reason in r.stop_reasons[:5]]
    out.append("")
    named = [r for r in results if any(r.lint.get(k) for k in NAME_LINT)]
    out += [f"### Names: labels with a repeated word / siblings sharing a label / folded by OT105 "
            f"({len(named)} operators not 0)", ""]
    if not named:
        out.append("None.")
    out += [f"- `{r.op}`: " + " / ".join(str(r.lint.get(k, "?")) for k in NAME_LINT) for r in named]
    out.append("")
    spins = [(r.op, loop) for r in results for loop in r.spin_loops]
    out += [f"### Loops classified as spin waits ({len(spins)})", ""]
    if not spins:
        out.append("None.")
    out += [f"- {loop}" for _, loop in spins]
    out.append("")
    failed = [r for r in results if r.failures]
    out += [f"### Failures ({len(failed)})", ""]
    if not failed:
        out.append("None.")
    for r in failed:
        out.append(f"- `{r.op}`: " + "; ".join(r.failures))
        for step_name, step in r.steps.items():
            if (step.traceback or step.timeout or (step.rc or 0) >= 2) and step.stderr_head:
                first = step.stderr_head.splitlines()[0][:200]
                out.append(f"  - {step_name}: `{first}`")
        for e in r.new_compile_errors[:3] + r.check_errors[:3] + r.not_restored[:3]:
            out.append(f"  - {e[:200]}")
    return "\n".join(out) + "\n"


def update_results_md(name: str, section: str) -> None:
    start, end = f"<!-- corpus:{name}:start -->", f"<!-- corpus:{name}:end -->"
    head = (
        "# Corpus results\n\nWritten by `python bench/corpus.py` (bench/README.md): optrace run as a new "
        "user would on public repositories fetched locally (never committed). Local evidence for "
        "the issues that cite it, not a CI check.\n\n"
    )
    text = RESULTS_MD.read_text(encoding="utf-8") if RESULTS_MD.exists() else head
    block = f"{start}\n{section}{end}\n"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) + 1 :]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    RESULTS_MD.write_text(text, encoding="utf-8")


def _shown_args(argv: list[str], opdirs: list[str]) -> list[str]:
    """The command's arguments, a long list of operators said by its count and ends."""
    if len(opdirs) <= 10:
        return argv
    listed = set(opdirs)
    kept = [a for a in argv if a not in listed]
    at = next((i for i, a in enumerate(argv) if a in listed), len(kept))
    return [*kept[:at], f"<{len(opdirs)} operators: {opdirs[0]} ... {opdirs[-1]}>", *kept[at:]]


def _short_command(command: str) -> str:
    """A saved command with its operator list (the words between the repository and the
    first option) said by its count and ends when long."""
    words = command.split()
    repo = 2  # python bench/corpus.py REPO
    end = next((i for i in range(repo + 1, len(words)) if words[i].startswith("-")), len(words))
    ops = words[repo + 1 : end]
    return " ".join(words[: repo + 1] + _shown_args(ops, ops) + words[end:])


def render_saved(report_paths: list[Path], section: str | None = None) -> int:
    """The results section of saved reports (runs made with --no-md, or on another day).
    Several reports of one repository at one commit of it and of optrace (a run split in
    parts, each writing its report as it ends) are rendered as one run."""
    reports = [json.loads(p.read_text(encoding="utf-8")) for p in report_paths]
    metas = [r["meta"] for r in reports]
    keys = {(m["repo"], m["commit"], m["optrace"]) for m in metas}
    if len(keys) != 1:
        print(f"reports of different runs (repository, its commit, optrace): {sorted(keys)}", file=sys.stderr)
        return 2
    results = []
    for report in reports:
        for op in report["operators"]:
            steps = {k: Step(**v) for k, v in op.pop("steps").items()}
            results.append(OperatorResult(**op, steps=steps))
    results.sort(key=lambda r: r.op)
    summary = summarise(results)
    summary["plan_only"] = any(r["summary"].get("plan_only", False) for r in reports)
    meta = dict(metas[0])
    if len(reports) > 1:
        meta["selection"] = " + ".join(m["selection"] for m in metas) + f" ({len(results)} in all)"
        meta["command"] = "; ".join(_short_command(m["command"]) for m in metas)
    name = section or meta["repo"]
    update_results_md(name, render_md(name, meta, summary, results))
    print(f"{RESULTS_MD}: section {name} from {', '.join(map(str, report_paths))}")
    return 0 if all(ok for _, _, ok in targets(summary)) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("repo", type=Path, help="a git repository (work tree or bare mirror)")
    ap.add_argument("opdirs", nargs="*", help="operator directories, relative to REPO (default: all found)")
    ap.add_argument("--sample", type=int, help="a seeded sample of N operators across categories")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--jobs", "-j", type=int, default=1, help="operators at once, each in its own scratch copy"
    )
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per operator, all steps")
    ap.add_argument("--name", help="the repository's name in the report (default: REPO's folder name)")
    ap.add_argument("--json", type=Path, help="JSON report (default bench/corpus/<name>.json)")
    ap.add_argument("--no-compile", action="store_true", help="skip the before/after host compile")
    ap.add_argument("--no-md", action="store_true", help="do not refresh bench/corpus-results.md")
    ap.add_argument("--plan-only", action="store_true",
                    help="run plan alone (tree, lint, ratio to a bare parse): no apply, check or strip")
    ap.add_argument("--render", type=Path, metavar="REPORT", nargs="+",
                    help="only refresh bench/corpus-results.md from saved JSON reports (the parts of "
                    "one run, e.g. --jobs split over several commands, are rendered as one)")
    args = ap.parse_args(argv)
    if args.render is not None:
        return render_saved(args.render, args.name)  # --name: the section, beside the repository's own

    # As an installed copy has it (pip writes bytecode): with PYTHONDONTWRITEBYTECODE set, a
    # checkout's every `optrace` process compiled its modules from source, ~0.15 s of a plan
    # of one operator against a bare parse of ~0.03 s.
    compile_bytecode()
    repo = args.repo.resolve()
    name = args.name or (repo.parent.name if repo.name == "repo" else repo.name)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="optrace-corpus-") as tmp:
        # The run's own user cache: a first plan is not answered by an earlier run's entry
        # (the same optrace over the same repository), and the user's cache is left alone.
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")
        scratches: Queue[Path] = Queue()
        first = make_scratch(repo, Path(tmp) / "s0")
        scratches.put(first)
        for j in range(1, max(1, args.jobs)):
            scratches.put(make_scratch(repo, Path(tmp) / f"s{j}"))
        if args.opdirs:
            ops = [Path(o).as_posix().strip("/") for o in args.opdirs]
            selection = "given"
        else:
            found = [p.relative_to(first).as_posix() for p in find_operator_dirs(first)]
            ops = [o for o in found if not {"tests", "test"} & set(Path(o).parts)]
            selection = (
                f"all {len(ops)} found"
                if args.sample is None
                else f"seeded sample {args.sample} of {len(ops)}, seed {args.seed}"
            )
            ops = select(ops, args.sample, args.seed)
        print(f"{name} @ {commit[:12]}: {len(ops)} operator(s), {args.jobs} job(s)", flush=True)
        results: list[OperatorResult] = []
        lock = threading.Lock()

        def work(op: str) -> OperatorResult:
            scratch = scratches.get()
            try:
                r = run_operator(op, scratch, args.timeout, not args.no_compile, args.plan_only)
            except Exception as exc:  # the harness itself: report, keep going
                r = OperatorResult(op, Path(op).parts[0], failures=[f"harness: {type(exc).__name__}: {exc}"])
                try:
                    reset(scratch)
                except subprocess.CalledProcessError:
                    pass
            finally:
                scratches.put(scratch)
            with lock:
                results.append(r)
                print(line_for(len(results), len(ops), r), flush=True)
            return r

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            list(pool.map(work, ops))
    results.sort(key=lambda r: r.op)
    summary = summarise(results)
    summary["plan_only"] = args.plan_only
    print()
    for t, m, ok in targets(summary):
        print(f"  {'ok ' if ok else 'NO '} {t}: {m}")
    optrace_commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                    text=True).stdout.strip() or "unknown"
    meta = {
        "repo": name,
        "commit": commit,
        "optrace": optrace_commit,
        "date": time.strftime("%Y-%m-%d"),
        "selection": selection,
        "command": "python bench/corpus.py " + " ".join(_shown_args(sys.argv[1:] if argv is None else argv,
                                                                  args.opdirs)),
    }
    report = {"meta": meta, "summary": summary, "operators": [asdict(r) for r in results]}
    out = args.json or HERE / "corpus" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if not args.no_md:
        update_results_md(name, render_md(name, meta, summary, results))
    print(f"\nreport: {out}" + ("" if args.no_md else f"; summary: {RESULTS_MD}"))
    return 0 if all(ok for _, _, ok in targets(summary)) else 1


if __name__ == "__main__":
    sys.exit(main())
