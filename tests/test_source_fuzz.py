"""Issue 14 §7 in CI: a seeded, time-boxed subset (~200 cases) of the source fuzzer
(tests/source_fuzz.py; the local run of 5,000 and its results are in docs/input-matrix.md).
Every case: no exception but a refusal from plan / apply / check / strip (no exit 3, no
traceback), and strip ∘ apply = identity whenever apply wrote. Among the mutations, the
classes of inputs that once crashed or blew up: deep nesting, repeated content, names
that are not UTF-8, and what crashes the compile check."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from source_fuzz import MUTATIONS, TREE_MUTATIONS, fixture_operators, rename_non_utf8, run, summary

CI_CASES = int(os.environ.get("OPTRACE_FUZZ_CASES", "200"))
CI_SECONDS = float(os.environ.get("OPTRACE_FUZZ_SECONDS", "300"))


@pytest.mark.slow  # ~200 plan / apply / check / strip runs on fixture operators (a few minutes)
def test_mutated_fixture_sources_never_crash_and_strip_undoes_apply() -> None:
    seed = int(os.environ.get("OPTRACE_FUZZ_SEED", "14"))
    outcomes = run(seed, CI_CASES, budget_s=CI_SECONDS, compile_every=40)
    report = summary(outcomes)
    failures = [o for o in outcomes if o.failed]
    assert not failures, "\n\n".join(f"seed {seed} case {o.case}: {o.result} {o.operator} {o.file} "
                                     f"{o.mutations}\n{o.detail}" for o in failures)
    results = report["results"]
    assert isinstance(results, dict)
    # Enough ran for the run to mean something, and both paths were taken.
    assert len(outcomes) >= min(CI_CASES, 60), report
    assert results.get("applied", 0) > 0, report
    assert set(report["mutations"]) == {*MUTATIONS, *TREE_MUTATIONS}, report  # type: ignore[arg-type]


def test_every_mutation_changes_real_sources_and_is_seeded() -> None:
    """The fuzzer's own contract: the same seed gives the same bytes, every mutation
    kind does something to a real fixture file, and every fixture operator is a target."""
    operators = fixture_operators()
    assert len(operators) >= 6
    source = next(op for _, op in operators if op.name == "moe_gating_topk")
    data = next((source / "op_kernel").glob("*.cpp")).read_bytes()
    for name, mutate in MUTATIONS.items():
        first = mutate(random.Random(7), data)
        assert first == mutate(random.Random(7), data), name
        assert any(mutate(random.Random(s), data) != data for s in range(5)), name


def test_a_renamed_header_keeps_its_includes(tmp_path: Path) -> None:
    """The tree mutation: the header gets a name of bytes, and its includer follows."""
    kernel = tmp_path / "op" / "op_kernel"
    kernel.mkdir(parents=True)
    (kernel / "step.h").write_bytes(b"#pragma once\n")
    (kernel / "op.cpp").write_bytes(b'#include "step.h"\n#include "other/step.h"\nint x;\n')
    new = rename_non_utf8(random.Random(3), tmp_path, "op/op_kernel/step.h")
    raw = os.fsencode(new).rsplit(b"/", 1)[-1]
    assert not (kernel / "step.h").exists() and (tmp_path / new).read_bytes() == b"#pragma once\n"
    assert raw != b"step.h" and raw.startswith(b"step") and raw.endswith(b".h")
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")
    assert (kernel / "op.cpp").read_bytes() == (b'#include "' + raw + b'"\n#include "other/' + raw
                                                + b'"\nint x;\n')
