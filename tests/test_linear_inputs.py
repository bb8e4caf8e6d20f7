"""Work linear in the input, held by what made it so (bench/bench_linear.py has the
timings; shared machines are too noisy for a timed test).

- A header pasted over itself N times is one header written N times: each function's
  repeats (`engine.cpp.definition_key`) are left out of the index's names, so a call
  reaches one body, not N, and the plan is the plan of one copy. Following all N made
  every call fan out N ways (N^2 call-graph edges, N^2 variants, and a label budget that
  took 88 s at 8 copies of a real 84 KB header).
- Same-text definitions that a build can tell apart (other `#if` arms, other classes or
  class-template heads) stay apart: each is planned.
- The label budget's variants, computed from bit sets, are the ones the definition gives
  (checked against it on random trees).
"""

from __future__ import annotations

import random
from pathlib import Path

from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.engine.analysis import analyse_operator
from optrace.engine.model import Kind, Region
from optrace.pipeline.plan import plan_operator
from optrace.rules.label_budget import launch_variants, variant_members

runner = CliRunner()

HEADER = """#ifndef STEP_KERNEL_H
#define STEP_KERNEL_H
#define TILE_OF(n) ((n) * 16)
template <typename T>
class StepKernel {
public:
    __aicore__ inline void Process(GM_ADDR x)
    {
        for (uint32_t expertIdx = 0; expertIdx < 8; ++expertIdx) {
            if constexpr (sizeof(T) == 2) {
                CopyIn(x, expertIdx);
            } else {
                Compute(x, expertIdx);
            }
        }
        AscendC::SyncAll();
    }
private:
    __aicore__ inline void CopyIn(GM_ADDR x, uint32_t i)
    {
        for (uint32_t tileIdx = 0; tileIdx < 4; ++tileIdx) {
            AscendC::DataCopy(x, x, TILE_OF(i));
        }
    }
    __aicore__ inline void Compute(GM_ADDR x, uint32_t i)
    {
        for (uint32_t groupIdx = 0; groupIdx < 4; ++groupIdx) {
            AscendC::Add(x, x, x, TILE_OF(i));
        }
    }
};
#endif
"""

ENTRY = """#include "step_kernel.h"
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR tiling)
{
    if (TILING_KEY_IS(0)) {
        StepKernel<half> op;
        op.Process(x);
    } else {
        StepKernel<float> op;
        op.Process(x);
    }
}
"""


def _op(tmp_path: Path, header: str, name: str = "repo") -> Path:
    kernel = tmp_path / name / "demo_op" / "op_kernel"
    kernel.mkdir(parents=True)
    (tmp_path / name / ".git").mkdir()
    (kernel / "step_kernel.h").write_text(header, encoding="utf-8")
    (kernel / "demo_op.cpp").write_text(ENTRY, encoding="utf-8")
    return kernel.parent


def _tree(op: Path) -> list[str]:
    """The plan's tree as labels and lines (lines are the same in every copy's first one)."""
    plan = plan_operator(op)
    return [f"{r.label} @{r.anchor.line if r.anchor else 0}" for r in plan.root.walk()]


def test_a_header_pasted_over_itself_plans_as_one_copy(tmp_path: Path) -> None:
    once = _op(tmp_path, HEADER, "once")
    pasted = _op(tmp_path, HEADER * 12, "pasted")
    assert _tree(pasted) == _tree(once)
    an = analyse_operator(pasted)
    assert len(an.index.by_name["CopyIn"]) == 1 and len(an.index.twins) == 11 * 3
    assert an.callgraph.number_of_edges() == analyse_operator(once).callgraph.number_of_edges()


def test_a_pasted_header_applies_once_and_strips_back(tmp_path: Path) -> None:
    """The first copy is instrumented; an instrumented copy still repeats the others (its
    points are left out of the comparison), so apply stays idempotent."""
    op = _op(tmp_path, HEADER * 3)
    header = op / "op_kernel" / "step_kernel.h"
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    applied = header.read_text(encoding="utf-8")
    copies = applied.split("#endif\n")
    assert "TRACE_POINT" in copies[0] and not any("TRACE_POINT" in c for c in copies[1:])
    again = runner.invoke(app, ["apply", str(op), "--check"])
    assert again.exit_code == 0, again.stdout + again.stderr
    assert runner.invoke(app, ["strip", str(op), "--write"]).exit_code == 0
    assert header.read_text(encoding="utf-8") == HEADER * 3


def test_the_same_text_in_other_preprocessor_arms_or_classes_stays_apart(tmp_path: Path) -> None:
    step = ("__aicore__ inline void Step(GM_ADDR x)\n{\n"
            "    for (uint32_t expertIdx = 0; expertIdx < 8; ++expertIdx) {\n"
            "        AscendC::DataCopy(x, x, 8);\n    }\n    AscendC::SyncAll();\n}\n")
    header = f"#pragma once\n#if defined(ARCH_A)\n{step}#else\n{step}#endif\n"
    kernel = tmp_path / "repo" / "demo_op" / "op_kernel"
    kernel.mkdir(parents=True)
    (tmp_path / "repo" / ".git").mkdir()
    (kernel / "step.h").write_text(header, encoding="utf-8")
    (kernel / "demo_op.cpp").write_text(
        '#include "step.h"\nextern "C" __global__ __aicore__ void demo_op(GM_ADDR x)\n{\n    Step(x);\n}\n',
        encoding="utf-8")
    an = analyse_operator(kernel.parent)
    assert len(an.index.by_name["Step"]) == 2 and not an.index.twins  # both arms: a build picks one
    header = ("template <typename T> struct Pick { __aicore__ inline void Run() { AscendC::SyncAll(); } };\n"
              "template <> struct Pick<half> { __aicore__ inline void Run() { AscendC::SyncAll(); } };\n")
    (kernel / "step.h").write_text(header, encoding="utf-8")
    assert len(analyse_operator(kernel.parent).index.by_name["Run"]) == 2


# --------------------------------------------------------------------------- the variants


def _reference_variants(root: Region) -> list[tuple[tuple[str, int], ...]]:
    """The definition, pair by pair: maximal combinations of arms."""
    tuples = {t for r in root.walk() for t in (r.variant, *r.also_variants) if t}
    return sorted(t for t in tuples if not any(o != t and set(t) < set(o) for o in tuples)) or [()]


def _reference_members(root: Region, variants: list[tuple[tuple[str, int], ...]]) -> dict[int, list[int]]:
    def compatible(variant: tuple[tuple[str, int], ...], arms: tuple[tuple[str, int], ...]) -> bool:
        chosen = dict(arms)
        return all(chosen.get(d, a) == a for d, a in variant)

    out: dict[int, list[int]] = {}

    def visit(node: Region, inherited: list[tuple[tuple[str, int], ...]]) -> None:
        extra = [*inherited, *node.also_variants]
        out[id(node)] = [v for v, arms in enumerate(variants)
                         if compatible(node.variant, arms) or any(compatible(t, arms) for t in extra)]
        for child in node.children:
            visit(child, extra)

    visit(root, [])
    return out


def _random_tree(rng: random.Random) -> Region:
    dispatches = [f"d{i}" for i in range(rng.randint(1, 5))]

    def arms() -> tuple[tuple[str, int], ...]:
        picked = rng.sample(dispatches, rng.randint(0, len(dispatches)))
        return tuple((d, rng.randint(0, 2)) for d in picked)

    root = Region([], Kind.ROOT, frozenset({"AIV"}), None, "root")
    nodes = [root]
    for _ in range(rng.randint(1, 25)):
        parent = rng.choice(nodes)
        child = Region(["x"], Kind.CALL, frozenset({"AIV"}), None, "r", variant=arms(),
                       also_variants=[arms() for _ in range(rng.randint(0, 2))])
        parent.children.append(child)
        nodes.append(child)
    return root


def test_variants_and_their_members_are_the_definitions() -> None:
    rng = random.Random(32)
    for _ in range(400):
        root = _random_tree(rng)
        variants = launch_variants(root)
        assert variants == _reference_variants(root)
        assert variant_members(root, variants) == _reference_members(root, variants)


# --------------------------------------------------------------------------- namespaces


def _reference_namespace_at(code: bytes, offset: int) -> tuple[str, ...]:
    """The definition, namespace by namespace (each matched anew: cubic on a pasted file)."""
    import re

    from optrace.engine.source import match_bracket

    pattern = re.compile(rb"\bnamespace\s+((?:[A-Za-z_]\w*+\s*+(?:::\s*+)?)*+)\{")
    out: list[str] = []
    for m in pattern.finditer(code, 0, offset):
        close = match_bracket(code, m.end() - 1)
        if m.end() <= offset and (close < 0 or offset < close):
            out.extend(p for p in re.split(r"\s*::\s*", m.group(1).decode().strip()) if p)
    return tuple(out)


def test_namespaces_found_once_a_file_are_the_definitions() -> None:
    from optrace.codemods.op_host_registry import namespace_at

    rng = random.Random(32)
    parts = [b"namespace a {", b"namespace b::c {", b"namespace {", b"}", b"(", b")", b"[", b"]", b"{",
             b" x ", b"namespace d", b"\n"]
    for _ in range(2000):
        code = b"".join(rng.choice(parts) for _ in range(rng.randint(0, 25)))
        for offset in range(0, len(code) + 1, 3):
            assert namespace_at(code, offset) == _reference_namespace_at(code, offset), (code, offset)
