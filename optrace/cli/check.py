"""`optrace check` and `optrace pre-commit`: typer's spellings of the check body in
check_fast.py (which pre-commit's plain spellings reach without typer)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from optrace.cli.check_fast import check_command
from optrace.cli.common import (
    EXIT_OK,
    JOBS_HELP,
    TRUST_HELP,
    CheckFormat,
    apply_config_trust,
)


def check(
    op_dirs: Annotated[list[Path], typer.Argument(help="Operator directories.")],
    repo_root: Annotated[Path | None, typer.Option(help="Repository root (see `plan`).")] = None,
    fmt: Annotated[CheckFormat, typer.Option("--format", help="text, json or sarif.")] = CheckFormat.text,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here, not stdout.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Warnings count as errors.")] = False,
    compile_safety: Annotated[
        bool, typer.Option(" /--no-compile", help="Skip the libclang compile-safety pass.")
    ] = True,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, help=JOBS_HELP),
    ] = None,
    trust_config: Annotated[bool, typer.Option("--trust-config", help=TRUST_HELP)] = False,
) -> None:
    """Check trace points and the kernel side of gate G2: label syntax and depth, the root
    `processing`, B/E pairing and nesting (every exit path), the profiling_data parameter,
    and whether the code optrace inserted compiles (libclang against the AscendC host stub).
    Each operator's summary says whether profiling is compiled in. Exit 1 on errors."""
    apply_config_trust(trust_config)
    raise typer.Exit(check_command(op_dirs, repo_root, fmt, output, strict, compile_safety, jobs))


def pre_commit(
    files: Annotated[
        list[Path] | None,
        typer.Argument(help="Staged files, as pre-commit passes them (after `--`, so a name "
                       "starting with `-` stays a file)."),
    ] = None,
    repo_root: Annotated[
        Path | None,
        typer.Option(help="Repository the files belong to (default: the one holding the "
                     "current directory)."),
    ] = None,
    fmt: Annotated[CheckFormat, typer.Option("--format", help="text, json or sarif.")] = CheckFormat.text,
    strict: Annotated[bool, typer.Option("--strict", help="Warnings count as errors.")] = False,
    compile_safety: Annotated[
        bool, typer.Option(" /--no-compile", help="Skip the libclang compile-safety pass.")
    ] = True,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help=JOBS_HELP)] = None,
    trust_config: Annotated[bool, typer.Option("--trust-config", help=TRUST_HELP)] = False,
) -> None:
    """Run `check` on the operators the given files belong to: a file inside an operator
    directory belongs to it; any other file (pybind, a sample, the build script, a wrapper
    elsewhere) to every operator whose plan lists it. No operator: nothing runs, exit 0.
    This is what the `optrace-check` pre-commit hook calls."""
    from optrace.pipeline.pre_commit import operators_for_files, repository_of

    apply_config_trust(trust_config)
    cwd = Path.cwd()
    root = repository_of(cwd, repo_root)
    staged = operators_for_files(list(files or []), root, cwd)
    op_dirs = staged.sorted_operators()
    if not op_dirs:
        raise typer.Exit(EXIT_OK)
    raise typer.Exit(check_command(op_dirs, repo_root, fmt, None, strict, compile_safety, jobs))


def register(app: typer.Typer) -> None:
    """Add `check` and `pre-commit` to the application."""
    app.command()(check)
    app.command("pre-commit")(pre_commit)
