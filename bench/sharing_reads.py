"""Count the sources engine/sharing.py reads while one `optrace plan` or `apply` runs: who
else includes each operator's headers (session 43: 6,080 reads for a plan of a
20-operator forest, 12,160 for its apply, before each source was read once).

Usage: python bench/sharing_reads.py plan|apply OPDIR... [-- extra optrace arguments]
(run it in a scratch copy for apply --write; the user cache is a temporary folder)
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from optrace.engine import sharing


def main() -> int:
    args = sys.argv[1:]
    if len(args) < 2 or args[0] not in ("plan", "apply"):
        print(__doc__, file=sys.stderr)
        return 2
    reads: list[str] = []
    real = sharing.read_bounded

    def counted(path: Path, *rest: object) -> bytes | None:
        reads.append(os.fspath(path))
        return real(path, *rest)  # type: ignore[arg-type]

    sharing.read_bounded = counted  # type: ignore[assignment]
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="optrace-sharing-reads-")
    from optrace.cli.app import app

    argv = [a for a in args if a != "--"] + ["--jobs", "1"]
    try:
        app(argv, standalone_mode=False)
    except SystemExit:
        pass
    print(f"sharing read {len(reads)} sources ({len(set(reads))} distinct)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
