"""Profile a `plan` that the user cache answers: what a second plan of one operator costs
when nothing changed (bench/corpus.py's "plan again" row), after the imports.

In one process, with an empty user cache of its own: the operator is planned once (the
entry kept), then planned again under cProfile — a hit, which takes the repository
index's state (a walk of the repository, each searchable file's signature) and reads
the entry. It prints the whole command's CPU as a process (beside the interpreter's
start alone and with plan's imports), the hit's time after the imports, the share of
the index's walk and state, and the functions by cumulative time.

Usage: python bench/profile_hit.py OPDIR [--repo-root ROOT] [--top 25]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optrace.pipeline.plan as plan_module
from optrace.cli.plan_fast import fast_main
from optrace.engine.discovery import RepoIndex, default_repo_root, forget_repo_indexes, resolve_operator_dir


def plan(op_dir: Path, repo_root: Path | None) -> int:
    """One `plan`, as the console script runs its plain spellings (plan_fast.py)."""
    argv = [str(op_dir), "--format", "json", *(["--repo-root", str(repo_root)] if repo_root else [])]
    with contextlib.redirect_stdout(io.StringIO()):  # the plan itself: not this script's
        code = fast_main(argv)
    assert code is not None
    return code


def process_cpu(argv: list[str], rounds: int = 5) -> float:
    """The least CPU (user + system, children) of `rounds` runs of a command."""
    best = float("inf")
    for _ in range(rounds):
        before = os.times()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        after = os.times()
        best = min(best, after.children_user - before.children_user + after.children_system
                   - before.children_system)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("opdir", type=Path)
    parser.add_argument("--repo-root", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="optrace-hit-") as cache:
        os.environ["XDG_CACHE_HOME"] = cache
        if plan(args.opdir, args.repo_root) != 0:
            raise SystemExit("the first plan failed: nothing to profile")
        planned: list[Path] = []
        real = plan_module.plan_operator

        def counted(op_dir: Path, *rest: object, **kw: object) -> object:
            planned.append(op_dir)
            return real(op_dir, *rest, **kw)  # type: ignore[arg-type]

        plan_module.plan_operator = counted  # type: ignore[assignment]
        # Without the profiler first (it weighs Python calls more than C ones): the whole
        # hit, then the index's walk and its state alone, each in a fresh index.
        started = time.process_time()
        plan(args.opdir, args.repo_root)
        hit = time.process_time() - started
        root = (args.repo_root or default_repo_root(resolve_operator_dir(args.opdir))).resolve()
        forget_repo_indexes()
        started = time.process_time()
        index = RepoIndex.build(root)
        walked = time.process_time() - started
        index.state()
        stated = time.process_time() - started - walked
        forget_repo_indexes()
        profile = cProfile.Profile()
        started = time.process_time()
        profile.enable()
        code = plan(args.opdir, args.repo_root)
        profile.disable()
        spent = time.process_time() - started
        entries = list((Path(cache) / "optrace" / "plan").glob("*.json.z"))
        # The whole command, a process each time: the interpreter, the imports, the hit.
        command = process_cpu([sys.executable, "-m", "optrace", "plan", str(args.opdir), "--format", "json",
                               *(["--repo-root", str(args.repo_root)] if args.repo_root else [])])
        bare = process_cpu([sys.executable, "-c", "pass"])
        imports = process_cpu([sys.executable, "-c", "import optrace.cli.plan_fast"])
    stats = pstats.Stats(profile, stream=io.StringIO())
    rows = stats.stats.items()  # type: ignore[attr-defined]
    by_function = {f"{Path(file).name}:{line}({name})": row for (file, line, name), row in rows}

    def cumulative(function: str) -> float:
        found = [row[3] for key, row in by_function.items() if key.endswith(function)]
        return max(found, default=0.0)

    walk = cumulative(f"({RepoIndex.build.__name__})")
    state = cumulative(f"({RepoIndex.state.__name__})")
    print(f"`optrace plan {args.opdir} --format json` answered from the cache, a process (least of 5): "
          f"{command:.3f} s CPU; the interpreter alone {bare:.3f} s, with plan's imports {imports:.3f} s")
    print(f"second plan of {args.opdir}, without the profiler: {hit:.3f} s CPU after the imports; "
          f"the walk of {root} ({len(index.files) + len(index.scripts):,} files kept) {walked:.3f} s, "
          f"its state {stated:.3f} s")
    what = "a hit" if not planned else "a MISS (planned again)"
    print(f"second plan of {args.opdir}: {what}, exit {code}, {len(entries)} entry kept; {spent:.3f} s CPU "
          f"under cProfile, after the imports")
    print(f"  the repository's walk (RepoIndex.build): {walk:.3f} s = {100 * walk / spent:.0f} %")
    print(f"  the index's state (signatures, content hashes): {state:.3f} s = {100 * state / spent:.0f} %")
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(args.top)
    print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
