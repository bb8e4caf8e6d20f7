"""The console script's entry point: ``collect`` skips the CLI framework's import.

See ``optrace.runtime.collect_cli``: collect's speed is promised from process start, and
typer / click / rich / pydantic would be a third of it. Every other command, and any
collect invocation the fast parser does not recognise, runs the full CLI.
"""

from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["collect"]:
        from optrace.runtime.collect_cli import fast_main

        code = fast_main(argv[1:])
        if code is not None:
            sys.exit(code)
    from optrace.cli import main as full_main

    full_main()
