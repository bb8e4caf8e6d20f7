"""A small directed graph: the include graph and the call graph.

What optrace asks of its graphs is small — nodes and edges with attributes, successors,
predecessors, everything reachable backwards, a few elementary cycles to report — and
networkx, which it used for this, was a tenth of the CPU of `check` on one operator
(its import builds a dispatch wrapper for every algorithm it has), which pre-commit runs
on every commit (issue 12 §4). The interface follows networkx's names for what is used.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any, Generic, TypeVar

N = TypeVar("N", bound=Hashable)


class NodeView(Generic[N]):
    """`g.nodes`: iterate the nodes in insertion order, `g.nodes[n]` their attributes,
    `g.nodes(data=True)` (node, attributes) pairs."""

    def __init__(self, attrs: dict[N, dict[str, Any]]) -> None:
        self._attrs = attrs

    def __iter__(self) -> Iterator[N]:
        return iter(self._attrs)

    def __len__(self) -> int:
        return len(self._attrs)

    def __contains__(self, node: object) -> bool:
        return node in self._attrs

    def __getitem__(self, node: N) -> dict[str, Any]:
        return self._attrs[node]

    def __call__(self, data: bool = False) -> Iterator[Any]:
        return iter(self._attrs.items()) if data else iter(self._attrs)


class DiGraph(Generic[N]):
    """Nodes and directed edges (one per ordered pair) with attributes, in insertion order."""

    def __init__(self) -> None:
        self._nodes: dict[N, dict[str, Any]] = {}
        self._succ: dict[N, dict[N, dict[str, Any]]] = {}
        self._pred: dict[N, dict[N, dict[str, Any]]] = {}

    def add_node(self, node: N, **attrs: Any) -> None:
        if node not in self._nodes:
            self._nodes[node] = {}
            self._succ[node] = {}
            self._pred[node] = {}
        self._nodes[node].update(attrs)

    def add_edge(self, a: N, b: N, **attrs: Any) -> None:
        self.add_node(a)
        self.add_node(b)
        data = self._succ[a].setdefault(b, {})
        data.update(attrs)
        self._pred[b][a] = data

    @property
    def nodes(self) -> NodeView[N]:
        return NodeView(self._nodes)

    @property
    def edges(self) -> list[tuple[N, N]]:
        return [(a, b) for a, succ in self._succ.items() for b in succ]

    def __contains__(self, node: object) -> bool:
        return node in self._nodes

    def __len__(self) -> int:
        return len(self._nodes)

    def successors(self, node: N) -> Iterator[N]:
        return iter(self._succ[node])

    def predecessors(self, node: N) -> Iterator[N]:
        return iter(self._pred[node])

    def ancestors(self, node: N) -> set[N]:
        """Every node with a path to `node` (not `node` itself unless on a cycle)."""
        seen: set[N] = set()
        todo = list(self._pred.get(node, ()))
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(self._pred[n])
        return seen

    def descendants(self, node: N) -> set[N]:
        """Every node `node` has a path to (not `node` itself unless on a cycle)."""
        seen: set[N] = set()
        todo = list(self._succ.get(node, ()))
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(self._succ[n])
        return seen

    def simple_cycles(self, limit: int, budget: int = 200_000) -> list[list[N]]:
        """Up to `limit` elementary cycles, each starting at its earliest-inserted node,
        found in insertion order of that node; the search stops after `budget` steps (a
        report lists a few cycles, it never needs all of them)."""
        order = {n: i for i, n in enumerate(self._nodes)}
        cycles: list[list[N]] = []
        steps = 0
        for start in self._nodes:
            low = order[start]
            path = [start]
            on_path = {start}
            stack = [iter(self._succ[start])]
            while stack and len(cycles) < limit and steps < budget:
                steps += 1
                nxt = next(stack[-1], None)
                if nxt is None:
                    stack.pop()
                    on_path.discard(path.pop())
                    continue
                if nxt == start:
                    cycles.append(list(path))
                elif order[nxt] > low and nxt not in on_path:
                    path.append(nxt)
                    on_path.add(nxt)
                    stack.append(iter(self._succ[nxt]))
            if len(cycles) >= limit or steps >= budget:
                break
        return cycles
