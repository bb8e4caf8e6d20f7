"""Profile what planning an operator costs once its repository is indexed: in one process,
the repository index built and brought up to date first (as a run over many operators
has it), each operator planned once untimed (imports and first-use costs out), then
again under cProfile — `plan_operator`, the mode probe and the text, as `optrace plan`
does for each operator, in one `reading_only` phase as a `plan` run is. Top N by
cumulative and by own time: what bench/results.md cites as what is left of a cold plan
over a repository (issue #30).

Usage: python bench/profile_plan.py OPDIR... [--repo-root R] [--top 40]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from pathlib import Path

from optrace.cli.deferred import install
from optrace.cli.plan_fast import _plan_mode
from optrace.engine.discovery import default_repo_root, repo_index
from optrace.engine.index_cache import reading_only
from optrace.pipeline.plan import plan_operator
from optrace.pipeline.plan_output import render_text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ops", nargs="+", type=Path)
    parser.add_argument("--repo-root", type=Path)
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    install()
    ops = [op.resolve() for op in args.ops]
    root = (args.repo_root or default_repo_root(ops[0])).resolve()
    with reading_only():  # as `optrace plan` runs: no file it reads is written
        return _profile(ops, args.repo_root, root, args.top)


def _profile(ops: list[Path], repo_root: Path | None, root: Path, top: int) -> int:
    repo_index(root).warm()

    def plan_all() -> None:
        for op in ops:
            plan = plan_operator(op, repo_root)
            render_text(plan, _plan_mode(plan))

    plan_all()
    profile = cProfile.Profile()
    profile.enable()
    plan_all()
    profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top // 2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
