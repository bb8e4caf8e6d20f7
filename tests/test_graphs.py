"""The include graph and the call graph are networkx graphs, asked with its algorithms."""

from __future__ import annotations

from pathlib import Path

import networkx as nx

from optrace.engine.analysis import analyse_operator
from optrace.engine.includes import build_include_graph
from optrace.pipeline.plan import plan_operator
from optrace.pipeline.plan_output import graph_html

KERNEL = """\
#include "kernel_operator.h"
#include "stage.h"

__aicore__ inline void Leaf() { AscendC::PipeBarrier<PIPE_ALL>(); }
__aicore__ inline void Mid() { Leaf(); Leaf(); }
__aicore__ inline void Top() { Mid(); Leaf(); }

extern "C" __global__ __aicore__ void chain_op(GM_ADDR x) {
    Top();
    Stage();
}
"""


def _op(tmp_path: Path) -> Path:
    op = tmp_path / "chain_op"
    (op / "op_kernel").mkdir(parents=True)
    (op / "op_kernel" / "chain_op.cpp").write_text(KERNEL)
    (op / "op_kernel" / "stage.h").write_text(
        '#pragma once\n#include "stage.h"\n__aicore__ inline void Stage() { Mid(); }\n')
    return op


def test_both_graphs_are_networkx_digraphs_with_their_attributes(tmp_path: Path) -> None:
    an = analyse_operator(_op(tmp_path))
    assert isinstance(an.callgraph, nx.DiGraph) and isinstance(an.includes.graph, nx.DiGraph)
    names = {an.callgraph.nodes[n]["label"]: n for n in an.callgraph}
    assert set(names) >= {"chain_op", "Top", "Mid", "Leaf", "Stage"}
    # Reachability is networkx's: everything the entry reaches, everything reaching Leaf.
    assert {an.callgraph.nodes[n]["label"] for n in nx.descendants(an.callgraph, an.entry_fn.id)} \
        == {"Top", "Mid", "Leaf", "Stage"}
    assert {an.callgraph.nodes[n]["label"] for n in nx.ancestors(an.callgraph, names["Leaf"])} \
        == {"chain_op", "Top", "Mid", "Stage"}
    assert an.callgraph.edges[names["Top"], names["Mid"]]["line"] == 6
    # The header includes itself: a cycle of one file, reported once.
    assert [[p.name for p in c] for c in an.includes.cycles] == [["stage.h"]]


def test_cycles_reported_are_bounded_on_a_dense_include_graph(tmp_path: Path) -> None:
    # Twelve headers each including all the others hold millions of elementary cycles;
    # the report names twenty, each starting at its earliest-discovered file.
    names = [f"h{i}.h" for i in range(12)]
    for n in names:
        (tmp_path / n).write_text("".join(f'#include "{m}"\n' for m in names if m != n))
    entry = tmp_path / "k.cpp"
    entry.write_text('#include "h0.h"\n')
    g = build_include_graph(entry.resolve(), [tmp_path.resolve()])
    assert len(g.cycles) == 20
    order = list(g.files)
    assert all(order.index(c[0]) == min(order.index(p) for p in c) for c in g.cycles)


def test_graph_page_draws_each_function_once_and_later_calls_as_other_edges(tmp_path: Path) -> None:
    plan = plan_operator(_op(tmp_path))
    page = graph_html(plan)
    # Mid is called from Top and from Stage: one box (under Top, called first), one edge
    # off the tree (from Stage); Leaf, called from Mid and Top, likewise.
    assert page.count('<text class="name" x="8" y="15">Mid</text>') == 1
    assert page.count('<text class="name" x="8" y="15">Leaf</text>') == 1
    assert page.count('class="extra"') == 2
    assert page.count('<g class="node') == 5  # chain_op, Top, Mid, Leaf, Stage
