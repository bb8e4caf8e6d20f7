"""What the source fuzzer (tests/source_fuzz.py) found, each as a minimal case and as the
fuzzer's own case (seed, number), which replays the same bytes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from source_fuzz import Workspace, fixture_operators, run_case

from optrace.codemods.python_callers import parse_python
from optrace.engine.diagnostics import InputError


@pytest.mark.parametrize("data", [b"x = '\xff'\n", b"# -*- coding: no-such-codec -*-\nx = 1\n",
                                  "x = 1\n".encode("utf-16")])
def test_a_python_caller_not_in_its_encoding_is_refused_not_a_crash(tmp_path: Path, data: bytes) -> None:
    """Found: a caller with a byte that is not UTF-8 raised UnicodeDecodeError (exit 3)."""
    with pytest.raises(InputError) as err:
        parse_python(tmp_path / "caller.py", data)
    assert "not Python source in its declared encoding" in err.value.diagnostic.message


# (seed, case) of the fuzzer's failures, fixed since: replayed exactly.
FOUND = [(1, 73)]


@pytest.mark.parametrize(("seed", "case"), FOUND)
def test_the_fuzzer_cases_that_failed_now_pass(seed: int, case: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_case(case, seed, Workspace(Path(tmp)), fixture_operators())
    assert not outcome.failed, f"{outcome.result}: {outcome.detail}"
