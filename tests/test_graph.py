"""engine/graph.py: the small directed graph behind the include and call graphs."""

from __future__ import annotations

from optrace.engine.graph import DiGraph


def test_nodes_edges_attributes_in_insertion_order() -> None:
    g: DiGraph[str] = DiGraph()
    g.add_node("main", label="main()", line=3)
    g.add_edge("main", "a", line=5)
    g.add_edge("main", "b")
    g.add_edge("a", "b", line=9)
    g.add_node("main", file="k.cpp")  # attributes merge
    assert list(g.nodes) == ["main", "a", "b"] and len(g) == 3 and "a" in g and "z" not in g
    assert g.nodes["main"] == {"label": "main()", "line": 3, "file": "k.cpp"}
    assert list(g.nodes(data=True))[1] == ("a", {})
    assert g.edges == [("main", "a"), ("main", "b"), ("a", "b")]
    assert list(g.successors("main")) == ["a", "b"] and list(g.predecessors("b")) == ["main", "a"]


def test_ancestors_are_everything_that_reaches_a_node() -> None:
    g: DiGraph[int] = DiGraph()
    for a, b in [(1, 2), (2, 3), (4, 3), (3, 5), (6, 6)]:
        g.add_edge(a, b)
    assert g.ancestors(5) == {1, 2, 3, 4}
    assert g.ancestors(1) == set()
    assert g.ancestors(6) == {6}  # on its own cycle


def test_simple_cycles_each_once_from_its_earliest_node_with_a_limit() -> None:
    g: DiGraph[str] = DiGraph()
    for a, b in [("a", "b"), ("b", "c"), ("c", "a"), ("b", "a"), ("c", "c"), ("d", "e")]:
        g.add_edge(a, b)
    assert sorted(g.simple_cycles(20)) == [["a", "b"], ["a", "b", "c"], ["c"]]
    assert len(g.simple_cycles(2)) == 2
    # A complete graph has very many cycles: the limit and the step budget bound the search.
    k: DiGraph[int] = DiGraph()
    for a in range(12):
        for b in range(12):
            if a != b:
                k.add_edge(a, b)
    assert len(k.simple_cycles(20)) == 20
    assert len(k.simple_cycles(10**9, budget=5000)) < 10**9


def test_descendants_are_everything_a_node_reaches() -> None:
    g: DiGraph[int] = DiGraph()
    for a, b in [(1, 2), (2, 3), (3, 4), (2, 5), (6, 1)]:
        g.add_edge(a, b)
    assert g.descendants(1) == {2, 3, 4, 5}
    assert g.descendants(4) == set()
    g.add_edge(4, 1)  # a cycle: the node reaches itself
    assert g.descendants(1) == {1, 2, 3, 4, 5}
