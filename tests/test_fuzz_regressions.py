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


def test_a_python_caller_with_lone_cr_line_ends_is_refused_not_half_edited(tmp_path: Path) -> None:
    """Found: a caller whose lines end in a lone CR (LibCST counts them as lines, the edits
    did not) raised IndexError (exit 3), then once that was fixed, apply wrote edits strip
    could not take back whole."""
    with pytest.raises(InputError) as err:
        parse_python(tmp_path / "caller.py", b"import torch\rtorch.ops._C.op(x)\r")
    assert "lone CR" in err.value.diagnostic.message and err.value.diagnostic.line == 1
    parse_python(tmp_path / "ok.py", b"import torch\r\ntorch.ops._C.op(x)\r\n")  # CRLF is fine


# (seed, case) of the fuzzer's failures, fixed since: replayed exactly.
FOUND = [(1, 73), (1, 287), (1, 312)]


@pytest.mark.parametrize(("seed", "case"), FOUND)
def test_the_fuzzer_cases_that_failed_now_pass(seed: int, case: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_case(case, seed, Workspace(Path(tmp)), fixture_operators())
    assert not outcome.failed, f"{outcome.result}: {outcome.detail}"
