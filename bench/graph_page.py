"""The plan's graph page on a real operator, read in headless Chromium as the tests read
it (tests/runtime/test_report_pages.py's checks): at 1400x900, expanded and with every
group collapsed, no horizontal scroll, no overlapping boxes, no text outside its box; the
figures printed, a screenshot of each state kept.

Usage: python bench/graph_page.py OPDIR OUTDIR
       (e.g. UMDK's src/cam/comm_operator/ascend_kernels/fused_deep_moe)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE.parent / "tests" / "runtime")]

from browser import Browser, find_chromium  # noqa: E402
from test_report_pages import check_graph_page, invoke  # noqa: E402

from optrace.pipeline.graph_page import arrange, plan_boxes, stack  # noqa: E402
from optrace.pipeline.plan import plan_operator  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    op, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{op.resolve().name}-graph.html"
    result = invoke("plan", op, "--graph", target)
    if result.exit_code != 0:
        print(f"plan exit {result.exit_code}", file=sys.stderr)
        return 1
    graph, boxes = plan_boxes(plan_operator(op))
    layout = arrange(graph, boxes)
    groups = {i for i, b in enumerate(boxes) if b.group}
    print(f"functions {len(boxes)}, traced {sum(b.traced for b in boxes)}, groups {len(groups)}, "
          f"depth {max(b.depth for b in boxes)}, longest name {max(len(b.full) for b in boxes)}, "
          f"column step {layout.step:.0f} px, drawing width {layout.width:.0f} px, "
          f"page {target.stat().st_size // 1024} KB")
    with Browser(find_chromium()) as browser:
        page = browser.new_page()
        page.load(target, width=1400, height=900)
        for state in ("expanded", "collapsed"):
            if state == "collapsed":
                page.evaluate("document.getElementById('collapse-all').click()")
            seen = page.evaluate("({sw: document.documentElement.scrollWidth, "
                                 "cw: document.documentElement.clientWidth, "
                                 "sh: document.documentElement.scrollHeight})")
            found = check_graph_page(page, boxes, state)  # asserts: no overlap, no text outside
            assert set(found["tops"]) == set(stack(boxes, groups if state == "collapsed" else ()))
            print(f"{state}: scrollWidth {seen['sw']} <= clientWidth {seen['cw']}, "
                  f"page height {seen['sh']} px, boxes shown {found['count']}, overlaps 0, "
                  "texts outside their box 0")
            (out / f"{op.resolve().name}-graph-{state}.png").write_bytes(page.screenshot())
        errors = page.errors()
    print(f"console errors: {len(errors)}")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
