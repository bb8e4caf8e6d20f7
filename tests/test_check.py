"""`optrace check`: clean after apply on every fixture; each finding fires on bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optrace.cli.app import app

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
OPERATORS = {
    "umdk_style": "src/cam/comm_operator/ascend_kernels/moe_fused_gmm",
    "msopgen_style": "moe_token_permute",
    "direct_launch": "csrc/ops/moe_gating_topk",
    "l0op_style": "norm/moe_norm_grad",
}
runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def applied(tmp: Path, repo_name: str) -> Path:
    shutil.copytree(FIXTURES / repo_name, tmp / repo_name)
    op = tmp / repo_name / OPERATORS[repo_name]
    assert cli("apply", str(op), "--write")[0] == 0
    return op


@pytest.mark.parametrize("repo_name", sorted(OPERATORS))
def test_check_is_clean_after_apply(tmp_path: Path, repo_name: str) -> None:
    op = applied(tmp_path, repo_name)
    code, out, err = cli("check", str(op))
    assert code == 0, out + err
    assert "profiling compiled in: ON" in out and "0 error(s)" in out
    assert "compile-checked files: 0" not in out


def test_not_instrumented_is_reported_not_failed(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "direct_launch", tmp_path / "d")
    code, out, _ = cli("check", str(tmp_path / "d" / OPERATORS["direct_launch"]))
    assert code == 0 and "not instrumented" in out


def test_broken_insertion_is_caught_by_compile_safety(tmp_path: Path) -> None:
    op = applied(tmp_path, "umdk_style")
    target = op / "op_kernel" / "moe_fused_gmm" / "raw_distributed" / "moe_token_combine.h"
    text = target.read_text()
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "OptraceEnd optraceEnd" in ln)
    target.write_text(text.replace("OptraceEnd optraceEnd", "OptraceEdn optraceEnd", 1))
    code, out, _ = cli("check", str(op), "--format", "json")
    assert code == 1
    findings = json.loads(out)["operators"][0]["findings"]
    hits = [f for f in findings if f["code"] == "OT420"]
    assert hits and hits[0]["line"] == line and "OptraceEdn" in hits[0]["message"]
    assert hits[0]["path"].endswith("raw_distributed/moe_token_combine.h")


HAND = """#include "k_base.h"
extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR profiling_data, GM_ADDR workspace) {
    MoeTracing(TRACE_POINT("processing", "B"));
    for (uint32_t groupIdx = 0; groupIdx < 4; ++groupIdx) {
        MoeTracing(TRACE_POINT("group-loop", "B"), 0, groupIdx);
        if (groupIdx == 2) {
            break;
        }
        MoeTracing(TRACE_POINT("group-loop", "E"), 0, groupIdx);
    }
    MoeTracing(TRACE_POINT("Bad Label", "B"));
    MoeTracing(TRACE_POINT("Bad Label", "E"));
    MoeTracing(TRACE_POINT("never-closed", "B"));
    MoeTracing(TRACE_POINT("processing", "E"));
}
"""


def test_hand_written_mistakes(tmp_path: Path) -> None:
    op = tmp_path / "repo" / "demo_op"
    (op / "op_kernel").mkdir(parents=True)
    (tmp_path / "repo" / "optrace.toml").touch()
    (op / "op_kernel" / "demo_op.cpp").write_text(HAND)
    code, out, _ = cli("check", str(op), "--format", "json")
    assert code == 1
    found = {(f["code"], f["line"]) for f in json.loads(out)["operators"][0]["findings"]}
    assert ("OT407", 7) in found  # break leaves group-loop without its E
    assert ("OT401", 11) in found  # label syntax
    assert ("OT404", 13) in found  # B without E
    assert not any(c == "OT410" for c, _ in found)  # profiling_data is there


def test_g2_profiling_param_missing_or_misplaced(tmp_path: Path) -> None:
    op = tmp_path / "repo" / "demo_op"
    (op / "op_kernel").mkdir(parents=True)
    (tmp_path / "repo" / "optrace.toml").touch()
    src = op / "op_kernel" / "demo_op.cpp"
    body = ('{\n    MoeTracing(TRACE_POINT("processing", "B"));\n'
            '    MoeTracing(TRACE_POINT("processing", "E"));\n}\n')
    src.write_text('extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR y, GM_ADDR workspace) '
                   + body)
    _, out, _ = cli("check", str(op), "--format", "json", "--no-compile")
    assert "OT410" in out
    src.write_text('extern "C" __global__ __aicore__ void demo_op(GM_ADDR x, GM_ADDR profiling_data, '
                   "GM_ADDR y, GM_ADDR workspace) " + body)
    code, out, _ = cli("check", str(op), "--format", "json", "--no-compile")
    assert code == 1 and "OT411" in out and "`y`" in out


def test_sarif_and_strict(tmp_path: Path) -> None:
    op = applied(tmp_path, "direct_launch")
    base = op / "op_kernel" / "optrace_runtime.h"
    old = base.read_text().replace("// optrace-runtime-block v3", "// optrace-runtime-block v0", 1)
    base.write_text(old)
    code, out, _ = cli("check", str(op), "--format", "sarif")
    assert code == 0
    sarif = json.loads(out)
    assert sarif["version"] == "2.1.0"
    result = sarif["runs"][0]["results"][0]
    assert result["ruleId"] == "OT409" and result["level"] == "warning"
    expected = next(i for i, ln in enumerate(old.splitlines(), 1) if "optrace-runtime-block v0" in ln)
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == expected
    # Each rule carries the registry's title, default level and page (engine/codes.py).
    rules = {r["id"]: r for r in sarif["runs"][0]["tool"]["driver"]["rules"]}
    assert rules["OT409"]["shortDescription"]["text"] == "the runtime block is older than this optrace"
    assert rules["OT409"]["defaultConfiguration"]["level"] == "warning"
    assert rules["OT452"]["properties"]["doc"] == "docs/gates.md"
    code, _, err = cli("check", str(op), "--strict")
    assert code == 1 and "OT409" in err and "[error]" in err


def test_an_unfinished_apply_is_reported_by_check_and_plan(tmp_path: Path) -> None:
    """A journal left by a crashed apply means the tree may be half-written: check says so
    (OT044, an error), plan warns; the next apply rolls it back and check is clean."""
    from optrace.engine import transaction
    from optrace.engine.journal import journal_path, operator_journal_name

    op = applied(tmp_path, "msopgen_style")
    repo = tmp_path / "msopgen_style"
    journal = journal_path(repo / ".optrace", operator_journal_name(op, repo))
    journal.write_text(json.dumps({"format": "optrace-journal", "version": 1, "name": "x", "pid": 1,
                                   "started": "", "token": "t", "files": []}))
    # Not recorded in the user's state directory (a clone's): a warning, never acted on.
    code, out, err = cli("check", str(op), "--no-compile")
    assert code == 0 and "OT046" in err and "OT044" not in out + err
    # Recorded, as optrace records the journals it writes: the operator's own crash.
    transaction._remember(repo / ".optrace", journal.name.split(".")[0], "t", journal.read_bytes())
    code, out, err = cli("check", str(op), "--no-compile")
    assert code == 1 and "OT044" in err and "did not finish" in err
    code, _, err = cli("plan", str(op))
    assert code == 0 and "OT044 warning" in err
    assert cli("apply", str(op), "--write")[0] == 0  # recovers the (empty) journal first
    assert not journal.exists()
    assert cli("check", str(op), "--no-compile")[0] == 0


def test_many_pairs_with_exits_are_each_reported_from_one_parse(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Hand-written pairs with a `return` between B and E: each is OT407, and the file is
    parsed once for all of them (it was parsed again per pair: 1,000 pairs took over a
    minute), visiting only the nodes inside each pair."""
    import optrace.pipeline.check as check_module

    n = 300
    kernel = tmp_path / "repo" / "demo_op" / "op_kernel"
    kernel.mkdir(parents=True)
    (tmp_path / "repo" / ".git").mkdir()
    body = "".join(f'    MoeTracing(TRACE_POINT("p{i}", "B"));\n    if (x) {{ return; }}\n'
                   f'    MoeTracing(TRACE_POINT("p{i}", "E"));\n' for i in range(n))
    (kernel / "demo_op.cpp").write_text(
        'extern "C" __global__ __aicore__ void demo_op(GM_ADDR x) {\n' + body + "}\n", encoding="utf-8")
    parses = []
    real = check_module.new_parser

    def counting():  # type: ignore[no-untyped-def]
        parses.append(1)
        return real()

    monkeypatch.setattr(check_module, "new_parser", counting)
    report = check_module.check_operator(tmp_path / "repo" / "demo_op", compile_safety=False)
    found = [d for d in report.findings if d.code == "OT407"]
    assert len(found) == n
    assert sorted(d.line for d in found) == [3 + 3 * i for i in range(n)]
    assert len(parses) == 1
