"""Two regions one after the other: where the first ends and the next begins at the same
offset, the E is written before the B, whatever order the tree lists the two in."""

from __future__ import annotations

from pathlib import Path

from class_op import class_op

from optrace.codemods.kernel_points import point_edits
from optrace.engine.edits import apply_edits
from optrace.pipeline.plan import plan_operator

HEADER = """\
#pragma once
class Steps {
public:
    __aicore__ inline void Init(GM_ADDR x) { n_ = 4; }
    __aicore__ inline void Process()
    {
        Gather(0);
        Scatter(0);
        Gather(1);
        Scatter(1);
    }
private:
    __aicore__ inline void Gather(int k)
    { for (int i = 0; i < n_; ++i) { AscendC::DataCopy(a_, b_, n_); a_ += k; b_ += 1; } }
    __aicore__ inline void Scatter(int k)
    { for (int i = 0; i < n_; ++i) { AscendC::DataCopy(b_, a_, n_); a_ += k; b_ += 1; } }
    int n_ = 0;
    AscendC::LocalTensor<float> a_;
    AscendC::LocalTensor<float> b_;
};
"""


def _labels_in_order(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        if "MoeTracing(TRACE_POINT(" in line:
            label, event = line.split('TRACE_POINT("')[1].split('")')[0].split('", "')
            out.append(f"{event} {label}")
    return out


def test_an_end_and_the_next_begin_at_one_offset_close_first_in_any_tree_order(tmp_path: Path) -> None:
    op = class_op(tmp_path, "steps_op", "Steps", HEADER, "steps.h")
    plan = plan_operator(op)
    header = op / "op_kernel" / "steps.h"
    original = header.read_bytes()
    expected = None
    for flip in (False, True):
        if flip:  # siblings listed against the source's order
            for region in plan.root.walk():
                region.children.reverse()
        edits = [e for e in point_edits(plan) if e.path.resolve() == header.resolve()]
        text = apply_edits(original, edits).decode()
        events = _labels_in_order(text)
        assert len(events) >= 4, text
        open_now: list[str] = []
        for ev in events:  # every E closes the innermost open region
            kind, label = ev.split(" ", 1)
            if kind == "B":
                open_now.append(label)
            else:
                assert open_now and open_now[-1] == label, (ev, open_now, text)
                open_now.pop()
        assert not open_now
        expected = expected or text
        assert text == expected
