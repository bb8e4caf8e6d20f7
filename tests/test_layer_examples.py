"""Each layer's own examples (`EXAMPLES`, codemods/<layer>.py), run on the example
operator: apply gives the example's after, strip gives every file back. Parametrised over
the registry, so a layer added without examples fails here."""

from __future__ import annotations

import pytest

from optrace.codemods.layer import Layer, LayerExample
from optrace.codemods.registry import LAYERS
from optrace.pipeline.layer_examples import check_layer_example, check_layer_examples, expected_pattern

CASES = [(lay, i, ex) for lay in LAYERS for i, ex in enumerate(lay.EXAMPLES)]


@pytest.mark.parametrize("layer", LAYERS, ids=lambda lay: lay.NAME)
def test_every_layer_has_examples(layer: Layer) -> None:
    assert layer.EXAMPLES, f"{layer.NAME} has no EXAMPLES"


@pytest.mark.parametrize(("layer", "index", "example"), CASES,
                         ids=[f"{lay.NAME}-{i}" for lay, i, _ in CASES])
def test_layer_example(layer: Layer, index: int, example: LayerExample) -> None:
    check_layer_example(layer, example, index)


def test_a_wrong_after_fails_naming_the_layer() -> None:
    """The runner is not a test that cannot fail: an example whose after is not what
    apply writes is an AssertionError naming the layer and showing what apply gave."""
    layer = LAYERS[0]
    good = layer.EXAMPLES[0]
    before, after = good.changes[0]
    bad = LayerExample(good.path, ((before, after.replace("optrace", "0ptrace", 1)), *good.changes[1:]),
                       good.files, good.mode)
    with pytest.raises(AssertionError, match=rf"{layer.NAME} example 0: apply gave"):
        check_layer_example(layer, bad)


def test_a_layer_without_examples_fails() -> None:
    class Bare:
        NAME = "bare"
        EXAMPLES: tuple[LayerExample, ...] = ()

    with pytest.raises(AssertionError, match="bare needs EXAMPLES"):
        check_layer_examples(Bare())  # type: ignore[arg-type]


def test_an_elided_after_matches_any_lines_and_only_there() -> None:
    source = "a\nb\n"
    pattern = expected_pattern(source, (("a\n", "a\nstart\n...\nend\n"),), "t")
    assert pattern.fullmatch("a\nstart\nx\ny\nend\nb\n")
    assert pattern.fullmatch("a\nstart\nend\nb\n")
    assert not pattern.fullmatch("a\nstart\nx\nb\n")
