"""What a reviewer reads: the size and shape of the patch `optrace apply` writes.

    python bench/review.py [--umdk REPO] [--ops-nn REPO] [OPDIR...] [--corpus SAMPLE.json] [--optrace-src DIR]

On a scratch clone of each repository (`git clone --shared`, no end-of-line conversion,
nothing reaches REPO) it runs `optrace apply OPDIR --write` and `optrace plan OPDIR` per
operator, each a fresh process, and measures from `git diff` and the untracked files:

- added lines: every `+` line and every line of a new file, except a generated file
  whose bytes are identical to one another, unrelated operator's run created (the
  runtime header: a reviewer reads it once, or never) — that is the only exclusion;
- files touched: modified plus created, the excluded generated files apart (shown as
  `+N gen`);
- added lines over 120 columns, less those that were already over 120 before the edit
  (a line whose optrace fragments taken out is one of the file's old long lines);
- opaque payloads: added lines holding a run of 40+ base64 characters that is no
  identifier (a `+`, `/` or `=` in it, or digits, capitals and small letters five each or
  more: encoded data in a comment or a string, not `aclnnInnerSomeOpGetWorkspaceSize`);
- plan lines over 120 columns (`plan`'s text output).

Defaults: UMDK's five operators under src/cam/comm_operator/ascend_kernels/ and the
ops-nn sample named below (a kernel with op_host, op_api and a test harness), from the
read-only mirrors; `--corpus bench/corpus/ops-nn-quick30.json` measures the ops-nn operators
of a committed corpus sample instead, and a last row sums them. `--optrace-src DIR` runs
another checkout's optrace (a main worktree, for before / after in one run). Sizes, not
times: the machine's load does not matter.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

MIRRORS = Path("/work/.mirror")
UMDK = MIRRORS / "openeuler-mirror+umdk" / "repo"
UMDK_OPS = tuple(f"src/cam/comm_operator/ascend_kernels/{op}" for op in (
    "fused_deep_moe", "dispatch_layout", "moe_combine_normal", "moe_dispatch_normal", "notify_dispatch"))
OPS_NN = MIRRORS / "hicann+ops-nn" / "repo"
OPS_NN_OPS = ("norm/rms_norm", "activation/swi_glu")
WIDTH = 120
_B64_RE = re.compile(r"[A-Za-z0-9+/]{40,}={0,2}")
_FRAGMENT_RE = re.compile(r"/\*optrace<\*/.*?/\*>optrace\*/")


@dataclass
class Row:
    repo: str
    op: str
    status: str = "ok"
    added: int = 0
    files: int = 0
    generated: int = 0  # files left out: byte-identical to another operator's
    wide: int = 0
    payloads: int = 0
    plan_lines: int = 0
    plan_wide: int = 0
    created: dict[str, bytes] = field(default_factory=dict, repr=False)
    added_by_file: dict[str, list[str]] = field(default_factory=dict, repr=False)
    old_long: dict[str, set[str]] = field(default_factory=dict, repr=False)


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, errors="replace",
                          timeout=600)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, errors="replace",
                          check=True).stdout


def _clone(repo: Path, into: Path) -> Path:
    subprocess.run(["git", "-c", "core.autocrlf=false", "clone", "-q", "--shared", str(repo), str(into)],
                   check=True)
    return into


def measure(repo: Path, name: str, op: str, env: dict[str, str], scratch: Path) -> Row:
    row = Row(name, op)
    work = scratch / f"{name}-{op.replace('/', '_')}"
    _clone(repo, work)
    optrace = [sys.executable, "-m", "optrace"]
    plan = _run([*optrace, "plan", op], work, env)
    lines = plan.stdout.splitlines()
    row.plan_lines = len(lines)
    row.plan_wide = sum(len(ln) > WIDTH for ln in lines)
    res = _run([*optrace, "apply", op, "--write"], work, env)
    if res.returncode != 0:
        row.status = f"apply exit {res.returncode}: {(res.stderr or res.stdout).strip().splitlines()[-1:]}"
        return row
    for path in _git(work, "diff", "--name-only").splitlines():
        old = _git(work, "show", f"HEAD:{path}")
        row.old_long[path] = {ln for ln in old.splitlines() if len(ln) > WIDTH}
        added: list[str] = []
        for ln in _git(work, "diff", "-U0", "--", path).splitlines():
            if ln.startswith("+") and not ln.startswith("+++"):
                added.append(ln[1:])
        row.added_by_file[path] = added
    for path in _git(work, "ls-files", "--others", "--exclude-standard").splitlines():
        data = (work / path).read_bytes()
        row.created[path] = data
        row.added_by_file[path] = data.decode("utf-8", "replace").splitlines()
    return row


def finish(rows: list[Row], show_wide: bool = False) -> None:
    """Counts, a created file left out when another operator's run created the same bytes;
    `show_wide`: each added line past 120 columns named on stderr."""
    digests: dict[str, set[tuple[str, str]]] = {}
    for r in rows:
        for data in r.created.values():
            digests.setdefault(hashlib.sha256(data).hexdigest(), set()).add((r.repo, r.op))
    for r in rows:
        if r.status != "ok":
            continue
        for path, added in r.added_by_file.items():
            if path in r.created and len(digests[hashlib.sha256(r.created[path]).hexdigest()]) > 1:
                r.generated += 1
                continue
            r.files += 1
            r.added += len(added)
            old_long = r.old_long.get(path, set())
            wide = [ln for ln in added if len(ln) > WIDTH and _FRAGMENT_RE.sub("", ln) not in old_long]
            r.wide += len(wide)
            for ln in wide if show_wide else ():
                print(f"{r.repo} {r.op}: {path}: {len(ln)} columns: {ln.strip()[:160]}", file=sys.stderr)
            r.payloads += sum(any(_opaque(m.group()) for m in _B64_RE.finditer(ln)) for ln in added)


def _opaque(run: str) -> bool:
    """A run of base64 characters that is encoded data, not a long identifier."""
    if any(c in run for c in "+/="):
        return True
    digits = sum(c.isdigit() for c in run)
    upper = sum(c.isupper() for c in run)
    return digits >= 5 and upper >= 5 and len(run) - digits - upper >= 5


def table(rows: list[Row]) -> str:
    out = ["| repository | operator | added lines | files | over 120 cols | opaque payloads | plan lines "
           "over 120 |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        op = r.op.rsplit("/", 1)[-1]
        if r.status != "ok":
            out.append(f"| {r.repo} | {op} | {r.status} | | | | {r.plan_wide} / {r.plan_lines} |")
            continue
        gen = f" (+{r.generated} gen)" if r.generated else ""
        out.append(f"| {r.repo} | {op} | {r.added} | {r.files}{gen} | {r.wide} | {r.payloads} | "
                   f"{r.plan_wide} / {r.plan_lines} |")
    corpus = [r for r in rows if r.repo == "ops-nn"]
    if len(corpus) > len(OPS_NN_OPS):  # a corpus sample: its sums
        ok = [r for r in corpus if r.status == "ok"]
        out.append(f"| ops-nn, all {len(corpus)} ({len(ok)} applied) | | {sum(r.added for r in ok)} | "
                   f"{sum(r.files for r in ok)} | {sum(r.wide for r in ok)} "
                   f"({sum(r.wide > 0 for r in ok)} operators) | {sum(r.payloads for r in ok)} | "
                   f"{sum(r.plan_wide for r in corpus)} / {sum(r.plan_lines for r in corpus)} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--umdk", type=Path, default=UMDK)
    ap.add_argument("--ops-nn", type=Path, default=OPS_NN)
    ap.add_argument("ops_nn_ops", nargs="*", default=list(OPS_NN_OPS), help="ops-nn operator directories")
    ap.add_argument("--corpus", type=Path, default=None,
                    help="a corpus sample (bench/corpus/*.json): its ops-nn operators, not the default two")
    ap.add_argument("--show-wide", action="store_true", help="name each added line past 120 columns")
    ap.add_argument("--optrace-src", type=Path, default=None,
                    help="a checkout whose optrace runs instead of the installed one")
    args = ap.parse_args(argv)
    if args.corpus is not None:
        args.ops_nn_ops = [o["op"] for o in json.loads(args.corpus.read_text())["operators"]]
    env = dict(os.environ)
    if args.optrace_src is not None:
        env["PYTHONPATH"] = str(args.optrace_src.resolve()) + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory(prefix="optrace-review-") as tmp:
        env["XDG_STATE_HOME"] = str(Path(tmp) / "state")
        rows: list[Row] = []
        jobs = [(args.umdk, "umdk", op) for op in UMDK_OPS]
        jobs += [(args.ops_nn, "ops-nn", op) for op in args.ops_nn_ops]
        for repo, name, op in jobs:
            if not repo.exists():
                print(f"{name}: {repo} not found, skipped", file=sys.stderr)
                continue
            rows.append(measure(repo, name, op, env, Path(tmp)))
            print(f"measured {name} {op}", file=sys.stderr)
        finish(rows, args.show_wide)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
