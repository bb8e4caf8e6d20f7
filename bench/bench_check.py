"""`optrace check` of one instrumented operator against a bare tree-sitter parse of its files.

This is what the pre-commit hook runs on every commit: its CPU time as a
ratio of a bare tree-sitter parse of the same C / C++ files, both in their own process
(interpreter start-up included), measured in the same run, alternating, best of N. The
operator is generated deterministically (`forest.py`, seed 7): a UMDK-style 1C2V MoE
operator with op_host / torch adapter / shared pybind, sample and build script, at least
5,000 lines of C / C++, instrumented with `optrace apply --write` first — pre-commit
checks instrumented trees.

    python bench/bench_check.py [--headers 20] [--repeat 5] [--json]

With ``--opdir`` it times a real operator instead, through the user cache check keeps
(docs/internals.md): a scratch clone of its repository at HEAD (``--repo`` for a bare
mirror, the operator then given relative to it), instrumented with ``apply --write``;
each of ``--rounds`` rounds times, one after the other, a bare tree-sitter parse of the
operator's C / C++ files plus their include closure (found by this script: quoted
includes resolved beside the includer, in the operator, its op_kernel and the repository
root), ``check --no-cache`` (as before the cache), ``check`` with an empty cache (cold: networkx
and every import included),
``check`` again with nothing changed (warm) and ``check`` after one kernel file changed
(a comment appended, its mtime a second in the past, as an edit before a commit). It
prints CPU and wall, best and median, and each as a ratio of the bare parse's.

    python bench/bench_check.py --opdir src/cam/comm_operator/ascend_kernels/fused_deep_moe \
        --repo /path/to/umdk [--rounds 15] [--before /tmp/wt_before] [--json]

``--before DIR`` (a `git worktree` of an earlier commit) times each row of that checkout
too, through PYTHONPATH, in the same rounds: a before / after pair under the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from forest import write_forest

BARE_PARSE = r"""
import sys
from pathlib import Path
import tree_sitter_cpp
from tree_sitter import Language, Parser
parser = Parser(Language(tree_sitter_cpp.language()))
n = 0
for path in sorted(Path(sys.argv[1]).rglob("*")):
    if path.suffix in (".h", ".cpp"):
        n += len(parser.parse(path.read_bytes()).root_node.children)
print(n)
"""

TARGET = 4.5
OPDIR_TARGETS = {"cold": 5.0, "warm": 1.5, "changed": 3.0}

# The bare parse of a list of files (one path a line, in the file named by argv[1]).
BARE_PARSE_LIST = r"""
import sys
import tree_sitter_cpp
from tree_sitter import Language, Parser
parser = Parser(Language(tree_sitter_cpp.language()))
n = 0
for line in open(sys.argv[1], encoding="utf-8").read().splitlines():
    with open(line, "rb") as f:
        n += len(parser.parse(f.read()).root_node.children)
print(n)
"""
CPP_SUFFIXES = (".h", ".hpp", ".hh", ".cpp", ".cc", ".cxx", ".c", ".inl")
_INCLUDE_RE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.M)


# As a user runs it: an installed package has its bytecode compiled (pip does it), so the
# warm-up run may write .pyc files even where the environment says not to; without them
# compiling optrace's modules from source was a third of a one-operator check.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def cpu_of(cmd: list[str]) -> float:
    """User + system CPU seconds of one command and its children (it runs alone)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess[bytes]]:
    """(CPU seconds of the command and its children, wall seconds, its result)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, check=False, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall, done


def include_closure(op_dir: Path, root: Path) -> list[Path]:
    """The operator's C / C++ files and every file their quoted includes reach."""
    found = [p.resolve() for p in sorted(op_dir.rglob("*")) if p.suffix in CPP_SUFFIXES and p.is_file()]
    seen = set(found)
    stack = list(found)
    while stack:
        path = stack.pop()
        for m in _INCLUDE_RE.finditer(path.read_bytes()):
            name = m.group(1).decode("utf-8", "replace")
            for base in (path.parent, op_dir, op_dir / "op_kernel", root):
                cand = base / name
                if cand.is_file():
                    cand = cand.resolve()
                    if cand not in seen:
                        seen.add(cand)
                        found.append(cand)
                        stack.append(cand)
                    break
    return found


def scratch_clone(opdir: str, repo: Path | None, into: Path) -> Path:
    """The operator's directory in a clone of its repository at HEAD (sharing objects)."""
    if repo is None:
        top = subprocess.run(["git", "-C", opdir, "rev-parse", "--show-toplevel"], check=True,
                             capture_output=True, text=True).stdout.strip()
        repo, rel = Path(top), Path(opdir).resolve().relative_to(Path(top).resolve())
    else:
        rel = Path(opdir)
    subprocess.run(["git", "-c", "core.autocrlf=false", "clone", "-q", "--shared", str(repo), str(into)],
                   check=True)
    return into / rel


def opdir_bench(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="optrace-check-opdir-") as tmp_name:
        tmp = Path(tmp_name)
        op = scratch_clone(args.opdir, args.repo, tmp / "repo")
        root = tmp / "repo"
        env = {**ENV, "XDG_CACHE_HOME": str(tmp / "warm-cache")}  # never the user's cache
        applied = subprocess.run([sys.executable, "-m", "optrace", "apply", str(op), "--write"], env=env,
                                 capture_output=True)
        if applied.returncode != 0:
            raise SystemExit(f"apply --write failed:\n{applied.stderr.decode(errors='replace')}")
        files = include_closure(op, root)
        listing = tmp / "files.txt"
        listing.write_text("".join(f"{p}\n" for p in files), encoding="utf-8")
        kernels = sorted((p for p in (op / "op_kernel").rglob("*.cpp")), key=lambda p: -p.stat().st_size)
        kernel = kernels[0] if kernels else next(p for p in files if op in p.parents)
        lines = sum(p.read_bytes().count(b"\n") for p in files)
        check = [sys.executable, "-m", "optrace", "check", str(op)]
        parse = [sys.executable, "-c", BARE_PARSE_LIST, str(listing)]
        # Each side (this checkout; with --before, another one through PYTHONPATH) with a
        # warm cache of its own, every row of both in every round.
        sides = {"": env}
        if args.before is not None:
            before_path = os.pathsep.join(
                p for p in (str(args.before.resolve()), env.get("PYTHONPATH", "")) if p)
            sides[" (before)"] = {**env, "PYTHONPATH": before_path,
                                  "XDG_CACHE_HOME": str(tmp / "warm-cache-before")}
        timed(parse, env)
        first = {side: timed(check, side_env)[2] for side, side_env in sides.items()}  # .pyc written, warm
        times: dict[str, list[tuple[float, float]]] = {"bare": []}
        for side in sides:
            for k in ("no-cache", "cold", "warm", "changed"):
                times[k + side] = []
        for n in range(args.rounds):
            times["bare"].append(timed(parse, env)[:2])
            for side, side_env in sides.items():
                times["no-cache" + side].append(timed([*check, "--no-cache"], side_env)[:2])
                cold_env = {**side_env, "XDG_CACHE_HOME": str(tmp / f"cold-{n}")}
                cpu, wall, cold = timed(check, cold_env)
                shutil.rmtree(tmp / f"cold-{n}", ignore_errors=True)
                times["cold" + side].append((cpu, wall))
                cpu, wall, warm = timed(check, side_env)
                times["warm" + side].append((cpu, wall))
                if (warm.returncode, warm.stdout) != (cold.returncode, cold.stdout):
                    raise SystemExit("a warm check answered otherwise than a cold one")
            with open(kernel, "ab") as handle:
                handle.write(f"// bench round {n}\n".encode())
            past = time.time() - 1
            os.utime(kernel, (past, past))
            for side, side_env in sides.items():
                cpu, wall, changed = timed(check, side_env)
                times["changed" + side].append((cpu, wall))
                if changed.returncode != first[side].returncode:
                    raise SystemExit("check after a comment was added exited otherwise")
    best = {k: (min(c for c, _ in v), min(w for _, w in v)) for k, v in times.items()}
    median = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v))
              for k, v in times.items()}
    rows: dict[str, dict[str, object]] = {}
    for k in (k for k in times if k != "bare"):
        ratio_cpu, ratio_cpu_median = best[k][0] / best["bare"][0], median[k][0] / median["bare"][0]
        rows[k] = {
            "cpu_s": best[k][0], "wall_s": best[k][1],
            "cpu_median_s": median[k][0], "wall_median_s": median[k][1],
            "ratio_cpu": ratio_cpu, "ratio_wall": best[k][1] / best["bare"][1],
            "ratio_cpu_median": ratio_cpu_median,
            "ratio_wall_median": median[k][1] / median["bare"][1],
            "target": OPDIR_TARGETS.get(k),
            "met": k not in OPDIR_TARGETS or max(ratio_cpu, ratio_cpu_median) <= OPDIR_TARGETS[k],
        }
    return {"opdir": args.opdir, "before": str(args.before) if args.before is not None else None,
            "files": len(files), "lines": lines, "rounds": args.rounds,
            "bare_cpu_s": best["bare"][0], "bare_wall_s": best["bare"][1],
            "bare_cpu_median_s": median["bare"][0], "bare_wall_median_s": median["bare"][1],
            "changed_file": kernel.relative_to(op).as_posix(), "load_average": os.getloadavg(), **rows}


def print_opdir(result: dict[str, object]) -> None:
    print(f"check of {result['opdir']}: {result['files']} C / C++ files with their include closure, "
          f"{result['lines']:,} lines; {result['rounds']} interleaved rounds; load average at the end "
          f"{', '.join(f'{x:.1f}' for x in result['load_average'])}")  # type: ignore[attr-defined]
    print(f"  bare tree-sitter parse: CPU best {result['bare_cpu_s']:.3f} s, "
          f"median {result['bare_cpu_median_s']:.3f} s; "
          f"wall best {result['bare_wall_s']:.3f} s, median {result['bare_wall_median_s']:.3f} s")
    names = {"no-cache": "check --no-cache (no cache read or written)",
             "cold": "cold check (empty cache)", "warm": "warm check (nothing changed)",
             "changed": f"after one kernel file changed ({result['changed_file']})"}
    sides = [""] + ([" (before)"] if result.get("before") else [])
    for k, title in ((k + side, title + side) for k, title in names.items() for side in sides):
        r: dict[str, float] = result[k]  # type: ignore[assignment]
        print(f"  {title}: CPU best {r['cpu_s']:.3f} s = {r['ratio_cpu']:.2f}x, "
              f"median {r['cpu_median_s']:.3f} s = {r['ratio_cpu_median']:.2f}x; "
              f"wall best {r['wall_s']:.3f} s = {r['ratio_wall']:.2f}x, "
              f"median {r['wall_median_s']:.3f} s = {r['ratio_wall_median']:.2f}x "
              + (f"(target <= {r['target']}x: {'met' if r['met'] else 'NOT met'})" if r["target"] else ""))


def cpp_lines(root: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in root.rglob("*") if p.suffix in (".h", ".cpp"))


def main(argv: list[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--headers", type=int, default=20, help="kernel headers in the include chain")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--opdir", help="time this operator (cold, warm, changed) instead of a generated one")
    ap.add_argument("--repo", type=Path, help="with --opdir: the repository (a bare mirror or a work tree)")
    ap.add_argument("--rounds", type=int, default=15, help="with --opdir: interleaved rounds")
    ap.add_argument("--before", type=Path, help="with --opdir: another checkout (a `git worktree` of an "
                    "earlier commit), each of its rows timed in the same rounds through PYTHONPATH")
    args = ap.parse_args(argv)
    if args.opdir:
        found = opdir_bench(args)
        if args.json:
            print(json.dumps(found, indent=1))
        else:
            print_opdir(found)
        return found
    with tempfile.TemporaryDirectory(prefix="optrace-check-bench-") as tmp:
        root = Path(tmp) / "repo"
        ops, _ = write_forest(root, 1, headers=args.headers)
        op = ops[0]
        subprocess.run([sys.executable, "-m", "optrace", "apply", str(op), "--write"], check=True,
                       stdout=subprocess.DEVNULL)
        lines = cpp_lines(root)
        # the check itself, every time: its user cache would answer from the second run on
        # (the --opdir rows measure that)
        check = [sys.executable, "-m", "optrace", "check", "--no-cache", str(op)]
        parse = [sys.executable, "-c", BARE_PARSE, str(root)]
        cpu_of(check)  # warm the page cache and write the .pyc files once, for both
        cpu_of(parse)
        check_s, parse_s = [], []
        for _ in range(args.repeat):
            parse_s.append(cpu_of(parse))
            check_s.append(cpu_of(check))
    ratio = min(check_s) / min(parse_s)
    result: dict[str, object] = {
        "lines": lines, "parse_cpu_s": min(parse_s), "check_cpu_s": min(check_s),
        "ratio": ratio, "target": TARGET, "met": ratio <= TARGET, "repeat": args.repeat,
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"check of one instrumented operator, {lines:,} lines of C / C++: "
              f"{min(check_s):.2f} s CPU; bare tree-sitter parse {min(parse_s):.2f} s CPU; "
              f"ratio {ratio:.1f}x (target <= {TARGET}x: {'met' if ratio <= TARGET else 'NOT met'})")
    return result


if __name__ == "__main__":
    main()
