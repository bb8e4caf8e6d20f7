"""Profile a `plan` that the user cache answers: what a second plan of one operator costs
when nothing changed (bench/corpus.py's "plan again" row), after the imports.

In one process, with an empty user cache of its own: the operator is planned once (the
entry kept), then planned again under cProfile — a hit, which takes the repository
index's state (a walk of the repository, each searchable file's signature) and reads
the entry. It prints the hit's time, the share of the index's walk and state, and the
functions by cumulative time.

Usage: python bench/profile_hit.py OPDIR [--repo-root ROOT] [--top 25]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import tempfile
import time
from pathlib import Path

import optrace.pipeline.plan as plan_module
from optrace.cli.app import app
from optrace.engine.discovery import RepoIndex, default_repo_root, forget_repo_indexes, resolve_operator_dir


def plan(op_dir: Path, repo_root: Path | None) -> int:
    argv = ["plan", str(op_dir), "--format", "json", *(["--repo-root", str(repo_root)] if repo_root else [])]
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the plan itself: not this script's
            app(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


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
    stats = pstats.Stats(profile, stream=io.StringIO())
    rows = stats.stats.items()  # type: ignore[attr-defined]
    by_function = {f"{Path(file).name}:{line}({name})": row for (file, line, name), row in rows}

    def cumulative(function: str) -> float:
        found = [row[3] for key, row in by_function.items() if key.endswith(function)]
        return max(found, default=0.0)

    walk = cumulative(f"({RepoIndex.build.__name__})")
    state = cumulative(f"({RepoIndex.state.__name__})")
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
