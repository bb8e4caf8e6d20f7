"""`relabel_below`: relabelling one subtree from its parent gives what relabelling the whole
tree gives, when only that subtree's words changed — the promise naming relies on when it
relabels after each cut instead of the whole tree."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from optrace.engine.model import ROOT_LABEL, Kind, Region, assign_labels, relabel_below

_WORDS = st.lists(st.sampled_from(["", "gather", "g", "scatter-tail", "wait-x", "aiv"]), max_size=3)


def _region(words: list[str]) -> Region:
    return Region(list(words), Kind.CALL, frozenset({"AIV"}), None, "")


@st.composite
def _trees(draw: st.DrawFn) -> tuple[Region, list[Region]]:
    """A tree of up to 25 regions (the root without words, as the planner builds it) and
    its regions in preorder."""
    root = Region([], Kind.ROOT, frozenset({"AIV"}), None, "")
    order = [root]
    for _ in range(draw(st.integers(0, 24))):
        parent = order[draw(st.integers(0, len(order) - 1))]
        child = _region(draw(_WORDS))
        parent.children.append(child)
        order.append(child)
    return root, order


@settings(max_examples=300, deadline=None)
@given(_trees(), st.data())
def test_one_subtree_relabelled_from_its_parent_is_the_whole_tree_relabelled(
    tree: tuple[Region, list[Region]], data: st.DataObject
) -> None:
    root, order = tree
    assign_labels(root)
    if len(order) < 2:
        return
    at = data.draw(st.integers(1, len(order) - 1))
    node = order[at]
    parent = next(r for r in order if any(c is node for c in r.children))
    # Replace one word of each of a few regions of `node`'s subtree (as a cut does: same
    # number of words), or give a word-less region its first word's replacement.
    below = node.regions()
    for region in data.draw(st.lists(st.sampled_from(below), min_size=1, max_size=4)):
        if region.words:
            i = data.draw(st.integers(0, len(region.words) - 1))
            region.words[i] = data.draw(st.sampled_from(["", "c", "cut-word", "x-y-z"]))
    whole = copy.deepcopy(root)
    assign_labels(whole)
    relabel_below(node, parent)
    assert [(r.label, r.depth) for r in root.regions()] == [(r.label, r.depth) for r in whole.regions()]


def test_under_a_parent_without_words_a_subtree_starts_from_nothing() -> None:
    """The root's label is `processing`, but nothing of it is in its children's labels; a
    region under a word-less region below the root starts from nothing too."""
    root = Region([], Kind.ROOT, frozenset({"AIV"}), None, "")
    empty = _region([])
    leaf = _region(["gather"])
    root.children.append(empty)
    empty.children.append(leaf)
    assign_labels(root)
    leaf.words = ["gath"]
    relabel_below(leaf, empty)
    assert (root.label, empty.label, leaf.label, leaf.depth) == (ROOT_LABEL, ROOT_LABEL, "gath", 2)
