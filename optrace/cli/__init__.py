"""The optrace command, one module per job; read them in this order:

- `start`: the process entry — `collect`, the readers (`inspect`, `report`, `compare`),
  `check` (what pre-commit runs on every commit) and `plan` take their plain spellings
  without the CLI framework, the rest go to `app`;
- `app`: the typer application and its root options; each command module registers
  its commands on it;
- `plan`, `edit` (apply and strip), `check` (check and pre-commit), `preprocess`,
  `runtime` (collect, inspect, report, compare, demo-data): commands that parse, call
  the pipeline or the runtime, and print;
- `check_fast`, `plan_fast`, `collect_fast`, `readers_fast`: the framework-free parsers
  and bodies of check, plan, collect and the readers, shared with their typer commands;
- `common`: exit codes, output targets, the process pool, option help shared by commands;
- `deferred`: what the pipeline imports at first use (LibCST, importlib.metadata);
- `result_cache`, with `check_cache` and `plan_cache`: what check and plan derived per
  operator, kept in the user cache while nothing it was derived from changed.
"""

from __future__ import annotations

from optrace.cli.start import main

__all__ = ["main"]
