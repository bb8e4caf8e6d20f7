"""`python -m optrace` runs the same CLI as the `optrace` console script.

`python -m` puts the current directory first on `sys.path`: run inside a cloned
repository, any module of that repository named like one optrace imports (a rule module
its config names, `typer.py`, `numpy.py`) would be imported from there — code execution
by accident. It is taken off before anything else is imported.
"""

import os
import sys

if sys.path and not sys.flags.safe_path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from optrace.cli.start import main

if __name__ == "__main__":
    main()
