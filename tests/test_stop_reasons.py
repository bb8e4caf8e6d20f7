"""A call the call graph cannot follow is a finding (OT023) at the call, naming why; on a
root-only or thin tree it is a warning, the place the trace stops."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from class_op import class_op

from optrace.engine.diagnostics import Severity
from optrace.pipeline.plan import is_thin, plan_operator

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "unresolved_call" / "moe_gate_stub"

def _op(tmp_path: Path, header: str) -> Path:
    return class_op(tmp_path, "stop_op", "Stop", header, "k.h")


def _reasons(op: Path) -> list[tuple[int, str, Severity]]:
    plan = plan_operator(op)
    return [(d.line, d.message, d.severity) for d in plan.findings if d.code == "OT023"]


def test_the_fixture_names_the_absent_class_and_the_function_pointer() -> None:
    reasons = _reasons(FIXTURE)
    assert [line for line, _, _ in reasons] == [29, 30]
    assert "the class `Selector` of `selector` is not in the files read" in reasons[0][1]
    assert "third_party/fast_topk/fast_topk.h" in reasons[0][1]
    assert "function pointer" in reasons[1][1]
    assert all(sev == Severity.INFO for _, _, sev in reasons)  # the tree is not thin


def test_on_a_thin_tree_the_stop_is_a_warning(tmp_path: Path) -> None:
    op = _op(tmp_path, """\
#pragma once
class Stop {
public:
    __aicore__ inline void Init(GM_ADDR x) { n_ = 1; }
    __aicore__ inline void Process() { (*finish_)(this); }
    void (*finish_)(Stop *) = nullptr;
    int n_ = 0;
};
""")
    plan = plan_operator(op)
    assert is_thin(plan.root)
    reasons = [(d.path.name, d.line, d.severity) for d in plan.findings if d.code == "OT023"]
    assert reasons == [("k.h", 5, Severity.WARNING)]


def test_a_dependent_name_is_named(tmp_path: Path) -> None:
    op = _op(tmp_path, """\
#pragma once
template <typename Impl>
class StopBase {
public:
    __aicore__ inline void Process() { impl_.Run(); }
    Impl impl_;
};
class Stop : public StopBase<int> {
public:
    __aicore__ inline void Init(GM_ADDR x) { }
};
""")
    reasons = _reasons(op)
    assert len(reasons) == 1 and reasons[0][0] == 5
    assert "dependent name: `impl_` has the type of the template parameter `Impl`" in reasons[0][1]


def test_a_thin_tree_with_nothing_unfollowed_says_what_it_reached(tmp_path: Path) -> None:
    op = _op(tmp_path, """\
#pragma once
class Stop {
public:
    __aicore__ inline void Init(GM_ADDR x) { n_ = 1; }
    __aicore__ inline void Process() { n_ += 1; }
    int n_ = 0;
};
""")
    reasons = _reasons(op)
    assert len(reasons) == 1 and reasons[0][2] == Severity.WARNING
    assert "stops at the root" in reasons[0][1] and "2 function(s)" in reasons[0][1]


def test_followed_calls_and_library_calls_are_not_findings(tmp_path: Path) -> None:
    op = _op(tmp_path, """\
#pragma once
class Stop {
public:
    __aicore__ inline void Init(GM_ADDR x) { xGm_.SetGlobalBuffer((__gm__ float *)x); }
    __aicore__ inline void Process()
    {
        for (uint32_t expertIdx = 0; expertIdx < n_; ++expertIdx) {
            AscendC::LocalTensor<float> t = q_.AllocTensor<float>();
            AscendC::DataCopy(t, xGm_[expertIdx], n_);
            q_.FreeTensor(t);
            AscendC::SyncAll();
        }
    }
    AscendC::TQue<AscendC::TPosition::VECIN, 2> q_;
    AscendC::GlobalTensor<float> xGm_;
    uint32_t n_ = 0;
};
""")
    assert _reasons(op) == []


def test_recursion_is_named_where_the_call_goes_back(tmp_path: Path) -> None:
    op = _op(tmp_path, """\
#pragma once
class Stop {
public:
    __aicore__ inline void Init(GM_ADDR x) { n_ = 1; }
    __aicore__ inline void Process() { Split(n_); }
    __aicore__ inline void Split(int depth)
    {
        for (int expertIdx = 0; expertIdx < depth; ++expertIdx) {
            AscendC::SyncAll();
            Merge(depth - 1);
        }
    }
    __aicore__ inline void Merge(int depth) { if (depth > 0) { Split(depth); } }
    int n_ = 0;
};
""")
    plan = plan_operator(op)
    rec = [d for d in plan.findings if d.code == "OT023" and "recursion" in d.message]
    assert len(rec) == 1 and rec[0].line == 13 and rec[0].path.name == "k.h"
    assert "Stop::Split -> Stop::Merge -> Stop::Split" in rec[0].message


_TANGLE = """\
#pragma once
class Stop {
public:
    __aicore__ inline void Init(GM_ADDR x) { n_ = 1; }
    __aicore__ inline void Process() { Alpha(n_); }
    __aicore__ inline void Alpha(int d)
    {
        for (int expertIdx = 0; expertIdx < d; ++expertIdx) {
            AscendC::SyncAll();
            Beta(d - 1);
            Gamma(d - 1);
            Delta(d - 1);
        }
    }
    __aicore__ inline void Beta(int d) { if (d > 0) { Alpha(d); Gamma(d); Delta(d); } }
    __aicore__ inline void Gamma(int d) { if (d > 0) { Alpha(d); Beta(d); Delta(d); } }
    __aicore__ inline void Delta(int d) { if (d > 0) { Alpha(d); Beta(d); Gamma(d); } }
    int n_ = 0;
};
"""

_RECURSION = """
import sys
from pathlib import Path
from optrace.pipeline.plan import plan_operator
plan = plan_operator(Path(sys.argv[1]))
for d in plan.findings:
    if "recursion" in d.message:
        print(d.line, d.message)
"""


def test_the_cycles_named_are_the_same_in_every_process(tmp_path: Path) -> None:
    """Four functions calling each other hold dozens of cycles, of which five are named:
    the same five whatever the process's string hashing (they once depended on it)."""
    op = _op(tmp_path, _TANGLE)
    seen = set()
    for seed in ("1", "2", "3", "77", "1234"):
        out = subprocess.run([sys.executable, "-c", _RECURSION, str(op)], capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, check=True, timeout=120).stdout
        assert out.count("recursion") == 5, out
        seen.add(out)
    assert len(seen) == 1, seen
