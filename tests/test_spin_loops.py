"""Spin waits (docs/rules.md "Loops"): a loop whose exit condition is re-loaded from
memory another core or rank writes and whose body moves no payload gets one wait region
around it, no index, no point inside; the index is always a counter the loop declares."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from class_op import class_op
from typer.testing import CliRunner

from optrace.cli.app import app
from optrace.pipeline.plan import plan_operator

ROOT = Path(__file__).resolve().parent.parent

HEADER = """\
#pragma once
// A delay helper as UMDK's base header writes it: polling the clock, named for waiting.
__aicore__ inline void SPIN_WAIT_CYCLES()
{
    int64_t st = AscendC::GetSystemCycle();
    while (AscendC::GetSystemCycle() - st < 1000) {
        ;
    }
}
class Poll {
public:
    __aicore__ inline void Init(GM_ADDR x) { n_ = 4; }
    __aicore__ inline void Process()
    {
        Work();
        {LOOP}
        Work();
    }
    __aicore__ inline void Work()
    {
        for (uint32_t row = 0; row < n_; ++row) {
            AscendC::DataCopy(a_, xGm_[row], n_);
            AscendC::Muls(a_, a_, 2.0f, n_);
            AscendC::DataCopy(yGm_[row], a_, n_);
        }
    }
    uint32_t n_ = 0;
    int32_t ready_ = 0;
    AscendC::LocalTensor<float> a_;
    AscendC::LocalTensor<float> s_;
    AscendC::GlobalTensor<float> xGm_;
    AscendC::GlobalTensor<float> yGm_;
    AscendC::GlobalTensor<int32_t> flagGm_;
};
"""

# The UMDK shape, its body well past a kilobyte: a status copy, a gather and a sum, the
# re-loaded float, the wait primitive under the same test.
LONG_POLL = """\
float sumOfFlag = -1.0f;
        float minTarget = static_cast<float>(n_) - 0.5f;
        float maxTarget = static_cast<float>(n_) + 0.5f;
        while ((sumOfFlag < minTarget) || (sumOfFlag > maxTarget)) {
            AscendC::DataCopy(s_, flagGm_[0], n_);  // the status words other ranks publish here
            AscendC::SetFlag<AscendC::HardEvent::MTE2_V>(0);
            AscendC::WaitFlag<AscendC::HardEvent::MTE2_V>(0);
            AscendC::GatherMask(a_, s_, a_, true, n_, {1, (uint16_t)n_, 1, 0}, n_);  // keep the counts
            AscendC::PipeBarrier<PIPE_V>();
            AscendC::ReduceSum(s_, a_, s_, n_);  // one sum over every rank's status word
            AscendC::SetFlag<AscendC::HardEvent::V_S>(0);
            AscendC::WaitFlag<AscendC::HardEvent::V_S>(0);
            sumOfFlag = s_.GetValue(0);
            if ((sumOfFlag < minTarget) || (sumOfFlag > maxTarget)) {
                // not every rank has written yet: give the others the bus for a while
                SPIN_WAIT_CYCLES();
            }
            // padding a real kernel would carry as comments and logging, so the body is long
            // padding a real kernel would carry as comments and logging, so the body is long
            // padding a real kernel would carry as comments and logging, so the body is long
            // padding a real kernel would carry as comments and logging, so the body is long
            // padding a real kernel would carry as comments and logging, so the body is long
        }"""

CASES = {
    "long-status-poll": (LONG_POLL, "spin"),
    "flag-read-in-condition": (
        "while (flagGm_.GetValue(0) == 0) { AscendC::PipeBarrier<PIPE_ALL>(); }", "spin"),
    "forever-until-flag": (
        "while (true) { AscendC::DataCacheCleanAndInvalid(flagGm_); "
        "if (flagGm_.GetValue(0) == 1) { break; } SPIN_WAIT_CYCLES(); }", "spin"),
    "do-while-reload": (
        "do { ready_ = flagGm_.GetValue(0); SPIN_WAIT_CYCLES(); } while (ready_ == 0);", "spin"),
    # Payload out: copies into global memory while a count grows is a copy loop.
    "copy-until-count": (
        "int32_t copied = 0; while (copied < ready_) { AscendC::DataCopy(yGm_[copied], a_, n_); "
        "AscendC::PipeBarrier<PIPE_MTE3>(); copied = flagGm_.GetValue(copied); }", "not spin"),
    # A counted loop of waits (the drain of a pipeline) counts rounds, it does not poll.
    "counted-waits": ("uint32_t stageUsed = n_; while (stageUsed > 0) { "
                      "AscendC::CrossCoreWaitFlag(stageUsed); --stageUsed; }", "not spin"),
    "for-with-counter": ("for (int32_t s = 0; s < n_; ++s) { AscendC::PipeBarrier<PIPE_ALL>(); "
                         "ready_ = flagGm_.GetValue(s); }", "not spin"),
}


def _op(tmp_path: Path, loop: str) -> Path:
    return class_op(tmp_path, "poll_op", "Poll", HEADER.replace("{LOOP}", loop), "poll.h")


@pytest.mark.parametrize("name", sorted(CASES))
def test_spin_classification(tmp_path: Path, name: str) -> None:
    loop, expected = CASES[name]
    plan = plan_operator(_op(tmp_path, loop))
    kinds = [lp.classification for lp in plan.loops if lp.function == "Poll::Process"]
    assert kinds, [(lp.function, lp.line) for lp in plan.loops]
    assert (kinds[0] == "spin") == (expected == "spin"), (name, kinds)
    assert plan.lint["points_in_spin_loops"] == 0
    if expected == "spin":
        waits = [r for r in plan.root.walk() if r.kind.value == "wait"]
        assert len(waits) == 1 and waits[0].index_var is None and not waits[0].children
        assert waits[0].anchor is not None and not waits[0].anchor.inside  # around the loop


def test_a_while_loop_carries_no_index_and_a_declared_counter_does(tmp_path: Path) -> None:
    header_loop = ("float level = 0.0f; while (level < 1.0f) { Work(); AscendC::SyncAll(); "
                   "level = level + 0.25f; }\n"
                   "        for (uint32_t expertIdx = 0; expertIdx < n_; ++expertIdx) { Work(); "
                   "AscendC::SyncAll(); }\n"
                   "        for (auto rankIdx = 0; rankIdx < n_; ++rankIdx) { Work(); AscendC::SyncAll(); }\n"
                   "        float g = 0.0f; for (g = 0.0f; g < 2.0f; g += 1.0f) { Work(); "
                   "AscendC::SyncAll(); }")
    plan = plan_operator(_op(tmp_path, header_loop))
    loops = {r.reason.split("`")[1]: r for r in plan.root.walk() if r.kind.value == "loop"}
    assert loops["level"].index_var is None
    assert loops["expertIdx"].index_var == "expertIdx"
    assert loops["rankIdx"].index_var == "rankIdx"
    assert loops["g"].index_var is None  # a float counter is no index


def test_check_errs_on_a_point_inside_a_spin_loop(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "fixtures" / "spin_wait", repo)
    op = repo / "moe_combine_poll"
    runner = CliRunner()
    assert runner.invoke(app, ["apply", str(op), "--write"]).exit_code == 0
    clean = runner.invoke(app, ["check", str(op)])
    assert "OT413" not in clean.output + clean.stderr
    header = op / "op_kernel" / "moe_combine_poll.h"
    text = header.read_text()
    poll = "            sumOfFlag = sumLocal.GetValue(0);\n"
    assert poll in text
    inside = ('            MoeTracing(TRACE_POINT("recv-count poll", "B"));\n'
              '            MoeTracing(TRACE_POINT("recv-count poll", "E"));\n')
    header.write_text(text.replace(poll, poll + inside))
    found = runner.invoke(app, ["check", str(op)])
    assert found.exit_code == 1 and "OT413" in found.output + found.stderr
    assert "spin-wait loop on `sumOfFlag`" in found.output + found.stderr
