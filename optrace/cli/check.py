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
    REPO_ROOT_HELP,
    TRUST_HELP,
    CheckFormat,
    apply_config_trust,
)
from optrace.engine import index_cache

_FORMAT_HELP = ("text (errors and warnings first, on stderr; then a summary and one line per gate), "
                "json or sarif (everything, evidence included).")
_NO_COMPILE_HELP = ("Skip the compile-safety pass (libclang on the kernel files optrace edited, "
                    "against the AscendC host stub); the other checks still run.")
_VERBOSE_HELP = "Text: also each gate's passing evidence (file:line) and the notes (info findings)."
_STRICT_HELP = "Warnings count as errors (exit 1)."
_NO_CACHE_HELP = ("Neither take nor keep reports in the user cache ($XDG_CACHE_HOME/optrace, else "
                  "~/.cache/optrace), where a report is kept until a file it read changes.")


def check(
    op_dirs: Annotated[list[Path], typer.Argument(help="Operator directories.")],
    repo_root: Annotated[Path | None, typer.Option(help=REPO_ROOT_HELP)] = None,
    fmt: Annotated[CheckFormat, typer.Option("--format", help=_FORMAT_HELP)] = CheckFormat.text,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the report here, not to "
                                                "stdout.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help=_STRICT_HELP)] = False,
    no_compile: Annotated[bool, typer.Option("--no-compile", help=_NO_COMPILE_HELP)] = False,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help=_VERBOSE_HELP)] = False,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, help=JOBS_HELP),
    ] = None,
    trust_config: Annotated[bool, typer.Option("--trust-config", help=TRUST_HELP)] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help=_NO_CACHE_HELP)] = False,
) -> None:
    """Check an operator's trace points and gates G1–G5, as optrace left them or as
    written by hand: label syntax and depth, the root `processing`, B/E pairing and
    nesting on every exit path, whether the code optrace inserted compiles (libclang
    against the AscendC host stub), density and capacity; then G1 preprocess (the build
    hook), G2 output order (profiling_data last in every layer), G3 compile (not
    verifiable here), G4 run + post-process and G5 paths (the Python callers), each with
    file:line evidence. Each operator's summary says whether profiling is compiled in.
    A directory that is no operator is refused (exit 2); an operator without trace points
    is reported as such (exit 0). Exit 1 on errors. A report is kept in the user cache and
    taken from it while no file it read (nor optrace, nor the config) changed."""
    apply_config_trust(trust_config)
    raise typer.Exit(check_command(op_dirs, repo_root, fmt, output, strict, not no_compile, jobs, verbose,
                                   not no_cache))


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
    fmt: Annotated[CheckFormat, typer.Option("--format", help=_FORMAT_HELP)] = CheckFormat.text,
    strict: Annotated[bool, typer.Option("--strict", help=_STRICT_HELP)] = False,
    no_compile: Annotated[bool, typer.Option("--no-compile", help=_NO_COMPILE_HELP)] = False,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help=_VERBOSE_HELP)] = False,
    jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help=JOBS_HELP)] = None,
    trust_config: Annotated[bool, typer.Option("--trust-config", help=TRUST_HELP)] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help=_NO_CACHE_HELP)] = False,
) -> None:
    """Run `check` on the operators the given files belong to: a file inside an operator
    directory belongs to it; any other file (pybind, a sample, the build script, a wrapper
    elsewhere) to every operator whose plan lists it. No operator: nothing runs, exit 0.
    Errors come first, on stderr. This is what the `optrace-check` pre-commit hook calls."""
    from optrace.pipeline.pre_commit import operators_for_files, repository_of

    apply_config_trust(trust_config)
    cwd = Path.cwd()
    root = repository_of(cwd, repo_root)
    if no_cache:
        # Before the files are mapped to operators: a file outside every operator is
        # mapped by searching the repository, whose index is the user cache's too.
        index_cache.set_enabled(False)
    try:
        staged = operators_for_files(list(files or []), root, cwd)
        op_dirs = staged.sorted_operators()
        if not op_dirs:
            raise typer.Exit(EXIT_OK)
        raise typer.Exit(check_command(op_dirs, repo_root, fmt, None, strict, not no_compile, jobs, verbose,
                                       not no_cache))
    finally:
        if no_cache:
            index_cache.reset_enabled()


def register(app: typer.Typer) -> None:
    """Add `check` and `pre-commit` to the application."""
    app.command()(check)
    app.command("pre-commit")(pre_commit)
