"""The call graph page (`plan --graph x.html`) without a browser: the layout computed in
Python keeps every box apart and inside the width a 1400-pixel window shows, every text
line inside its box, expanded or with any groups collapsed; the boxes say what the plan
says (labels, core types, traced functions, groups); the page is self-contained.

tests/runtime/test_report_pages.py opens the same pages in Chromium and reads the boxes'
bounds from the page.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import networkx as nx
from hypothesis import given
from hypothesis import strategies as st
from wide_kernel import write_wide_kernel

from optrace.engine.model import Kind
from optrace.pipeline.graph_page import (
    BOX_W,
    FONT,
    MAX_WIDTH,
    PAD,
    SMALL,
    Box,
    Layout,
    arrange,
    char_width,
    graph_html,
    make_boxes,
    plan_boxes,
    render,
    stack,
)
from optrace.pipeline.plan import plan_operator

FIXTURE_OP = (Path(__file__).parents[1] / "fixtures" / "umdk_style" / "src" / "cam" / "comm_operator"
              / "ascend_kernels" / "moe_fused_gmm")


def shown(boxes: list[Box], collapsed: set[int]) -> set[int]:
    """The boxes outside every collapsed group, worked out independently of `stack`."""
    hidden = set()
    for i in collapsed:
        if boxes[i].group:
            hidden |= set(range(i + 1, boxes[i].last + 1))
    return set(range(len(boxes))) - hidden


def check_layout(layout: Layout, collapsed: set[int]) -> None:
    boxes = layout.boxes
    ys = stack(boxes, collapsed)
    assert set(ys) == shown(boxes, collapsed)
    assert layout.width <= MAX_WIDTH
    rects = [(layout.x(i), ys[i], layout.x(i) + BOX_W, ys[i] + boxes[i].height) for i in ys]
    for left, top, right, bottom in rects:
        assert 0 <= left and right <= layout.right < layout.gutter <= layout.width, (left, right)
        assert bottom > top
    # Rows in order, none sharing a y: no two boxes overlap, whatever their columns.
    ordered = sorted(rects, key=lambda r: r[1])
    for above, below in itertools.pairwise(ordered):
        assert above[3] < below[1], (above, below)
    for i in ys:
        for k, (_cls, text) in enumerate(boxes[i].lines):
            used = len(text) * char_width(FONT if k == 0 else SMALL)
            if k == 0 and boxes[i].cores:
                used += (len(boxes[i].cores) + 2) * char_width(FONT)  # the core badge
            assert used <= BOX_W - 2 * PAD, (text, used)


NAME = st.text(st.sampled_from("abcXYZ_:<>,09 éλ"), min_size=1, max_size=160)


@st.composite
def call_graphs(draw: st.DrawFn) -> tuple[nx.DiGraph, dict[str, Box]]:
    """A call graph from node 0: deep chains and wide fans, long and odd names, traced
    functions, calls off the tree and cycles."""
    n = draw(st.integers(1, 220))
    g = nx.DiGraph()
    g.add_node("f0")
    for i in range(1, n):
        back = draw(st.sampled_from([1, 1, 1, 2, 5, i]))  # mostly the previous: deep
        g.add_edge(f"f{max(0, i - back)}", f"f{i}")
    for _ in range(draw(st.integers(0, n))):
        a, b = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        g.add_edge(f"f{a}", f"f{b}")
    describe = {}
    for node in g.nodes:
        traced = draw(st.booleans())
        describe[node] = Box(
            node=node, full=draw(NAME), where=draw(NAME) + ":123", path="x",
            cores=draw(st.sampled_from(["AIC", "AIV", "AIC+AIV", ""])), cores_from="the plan",
            labels=[draw(NAME) for _ in range(draw(st.integers(1, 3)))] if traced else [],
            inside=[draw(NAME) for _ in range(draw(st.integers(0, 4)))])
    return g, describe


@given(call_graphs(), st.data())
def test_layout_keeps_boxes_apart_and_inside_the_width(graph: tuple[nx.DiGraph, dict[str, Box]],
                                                       data: st.DataObject) -> None:
    g, describe = graph
    boxes = make_boxes(g, "f0", describe)
    assert [b.node for b in boxes] == list(nx.dfs_preorder_nodes(g, "f0"))  # each function once
    layout = arrange(g, boxes)
    groups = {i for i, b in enumerate(boxes) if b.group}
    check_layout(layout, set())
    check_layout(layout, groups)
    check_layout(layout, set(data.draw(st.lists(st.sampled_from(sorted(groups)))) if groups else []))
    # Calls off the tree: every edge of the graph is a tree edge or one of these, once.
    tree = {(boxes[b.parent].node, b.node) for b in boxes if b.parent is not None}
    extra = {(boxes[a].node, boxes[b].node) for a, b, _lane in layout.extra}
    assert tree | extra | {(a, a) for a in g.nodes} >= set(g.edges) and not tree & extra


def test_a_deep_tree_narrows_its_columns_and_a_shallow_one_spreads() -> None:
    chain = nx.path_graph([f"f{i}" for i in range(60)], create_using=nx.DiGraph)
    describe = {n: Box(node=n, full=n, where="a.h:1", path="a.h:1", cores="AIC", cores_from="x")
                for n in chain}
    deep = arrange(chain, make_boxes(chain, "f0", describe))
    assert deep.step < 20 and deep.width <= MAX_WIDTH
    check_layout(deep, set())
    star = nx.star_graph(5, create_using=nx.DiGraph)
    star = nx.relabel_nodes(star, {i: f"f{i}" for i in star})
    shallow = arrange(star, make_boxes(star, "f0", {n: describe[n] for n in star}))
    assert shallow.step > BOX_W  # one column per depth, side by side


def test_boxes_say_what_the_plan_says() -> None:
    plan = plan_operator(FIXTURE_OP)
    g, boxes = plan_boxes(plan)
    by_node = {b.node: b for b in boxes}
    assert set(by_node) == set(nx.descendants(plan.analysis.callgraph, plan.analysis.entry_fn.id)) \
        | {plan.analysis.entry_fn.id}
    measured = {r.function: r for r in plan.root.walk() if r.kind in (Kind.ROOT, Kind.CALL, Kind.BODY)}
    assert {b.node for b in boxes if b.traced} == set(measured) & set(by_node)
    for region in plan.root.walk():
        if region.function in by_node and region.kind in (Kind.CALL, Kind.BODY):
            box = by_node[region.function]
            assert region.label in box.labels and set(box.cores.split("+")) >= set(region.cores)
    specialised = {b.full.rsplit("<", 1)[-1].rstrip(">"): b.cores for b in boxes
                   if b.full.endswith(("<AIC>", "<AIV>"))}
    assert specialised == {"AIC": "AIC", "AIV": "AIV"}
    entry = boxes[0]
    assert entry.node == plan.analysis.entry_fn.id and entry.cores == "AIC+AIV"
    # Any other function runs where its callers run: under one core type's body, that one.
    inherited = [b for b in boxes if b.cores_from == "its callers"]
    for box in inherited:
        callers = set().union(*(set(by_node[c].cores.split("+")) for c in g.predecessors(box.node)))
        assert set(box.cores.split("+")) == callers, box.full
    assert {b.cores for b in inherited} >= {"AIC", "AIV", "AIC+AIV"}
    groups = [i for i, b in enumerate(boxes) if b.group]
    assert len(groups) >= 4 and all(boxes[i].traced and boxes[i].last > i for i in groups)
    # Points inside a function: the plan's loops and waits, on the function holding them.
    assert sum(len(b.inside) for b in boxes) >= 10
    # Every group collapsed: the heads stay, their members go.
    layout = arrange(g, boxes)
    check_layout(layout, set(groups))
    assert len(stack(boxes, set(groups))) < len(boxes) / 2


def test_a_generated_wide_kernel_lays_out_within_the_width(tmp_path: Path) -> None:
    plan = plan_operator(write_wide_kernel(tmp_path, stages=4, fanout=2, depth=6))
    g, boxes = plan_boxes(plan)
    assert len(boxes) > 100 and max(b.depth for b in boxes) >= 7
    assert max(len(b.full) for b in boxes) > 120  # far longer than a box
    layout = arrange(g, boxes)
    check_layout(layout, set())
    check_layout(layout, {i for i, b in enumerate(boxes) if b.group})
    # A cut name keeps its whole in the tooltip.
    longest = max(boxes, key=lambda b: len(b.full))
    assert longest.lines[0][1].endswith("…") and longest.full in _tooltips(graph_html(plan))


def _tooltips(page: str) -> str:
    return "\n".join(re.findall(r"<title>(.*?)</title>", page, re.S))


def test_the_page_is_self_contained() -> None:
    page = graph_html(plan_operator(FIXTURE_OP))
    assert "<link" not in page and "src=" not in page and "@import" not in page
    assert re.findall(r"https?://[^\s\"']*", page) == ["http://www.w3.org/2000/svg"]  # the SVG namespace
    assert re.findall(r"url\([^)]*\)", page) == ["url(#arrow)"] * page.count('class="extra"')
    assert page.count("<script") == 2 and page.count('<script type="application/json"') == 1


def test_a_name_cannot_end_the_pages_script() -> None:
    g = nx.DiGraph([("a", "b")])
    describe = {n: Box(node=n, full=f"{n}</script><script>alert(1)</script>", where="a.h:1", path="a.h:1",
                       cores="AIV", cores_from="x", labels=["l</script>"]) for n in g}
    boxes = make_boxes(g, "a", describe)
    page = render("t</script>", "s", arrange(g, boxes))
    assert page.count("</script>") == 2 and "alert(1)</script>" not in page
