"""``optrace check`` without the CLI framework.

check is what the pre-commit hook runs on every commit (issue 12 §4: its CPU against a
bare parse of the operator). typer and click cost some 30 ms to import and parse, so the
console script hands ``check`` to :func:`fast_main` first. Only the plain spellings of
check's options are taken here; anything else (``--help``, a typo, a bad value, ``--``)
returns None and the full CLI handles it, with its usual help and usage errors. Both run
:func:`optrace.commands.check_command`, so they behave the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from optrace.collect_cli import paths_as_bytes, split_plain
from optrace.commands import CheckFormat, apply_config_trust, check_command

_VALUE_OPTIONS = {"--repo-root": "repo_root", "--format": "format", "-o": "output", "--output": "output",
                  "-j": "jobs", "--jobs": "jobs"}
_FLAGS = {"--strict": "strict", "--no-compile": "no_compile", "--trust-config": "trust_config"}


class CheckArgs(NamedTuple):
    op_dirs: list[Path]
    repo_root: Path | None
    fmt: CheckFormat
    output: Path | None
    strict: bool
    compile_safety: bool
    jobs: int | None
    trust_config: bool


def parse_fast(argv: Sequence[str]) -> CheckArgs | None:
    """check's arguments in their plain spellings, or None for the full CLI to parse."""
    split = split_plain(argv, _VALUE_OPTIONS, _FLAGS)
    if split is None:
        return None
    values, positional = split
    op_dirs = [Path(p) for p in positional]
    fmt = values.get("format", "text")
    jobs = values.get("jobs")
    if not op_dirs or fmt not in {f.value for f in CheckFormat}:
        return None
    if jobs is not None and not (isinstance(jobs, str) and jobs.isdigit() and int(jobs) >= 1):
        return None  # not a positive integer: the full CLI's usage error
    repo_root, output = values.get("repo_root"), values.get("output")
    return CheckArgs(op_dirs, Path(str(repo_root)) if repo_root is not None else None, CheckFormat(str(fmt)),
                     Path(str(output)) if output is not None else None, bool(values.get("strict")),
                     not values.get("no_compile"), int(str(jobs)) if jobs is not None else None,
                     bool(values.get("trust_config")))


def fast_main(argv: Sequence[str]) -> int | None:
    """Run check from its arguments (those after ``check``) and return its exit code, or
    None when the full CLI should parse them."""
    args = parse_fast(argv)
    if args is None:
        return None
    paths_as_bytes()
    apply_config_trust(args.trust_config)
    try:
        return check_command(args.op_dirs, args.repo_root, args.fmt, args.output, args.strict,
                              args.compile_safety, args.jobs)
    finally:
        apply_config_trust(False)
