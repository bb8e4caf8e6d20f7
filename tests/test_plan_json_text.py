"""The plan's JSON text is json.dumps(indent=2)'s, byte for byte, written without json's
pure-Python indenting encoder."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optrace.pipeline.plan_doc import indented_json, plans_json

_KEYS = st.one_of(st.text(max_size=8), st.integers(-(10**20), 10**20), st.booleans(), st.none(),
                  st.floats(allow_nan=True, allow_infinity=True))
_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=12),  # controls, quotes, non-ASCII
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.tuples(inner, inner),
                            st.dictionaries(_KEYS, inner, max_size=5)),
    max_leaves=40,
)


@settings(max_examples=400)
@given(_VALUES)
def test_the_text_is_json_dumps_indent_2(value: Any) -> None:
    assert indented_json(value) == json.dumps(value, indent=2)


def test_a_plan_document_and_its_edge_values() -> None:
    class Label(str):
        pass

    class Count(int):
        pass

    plans: list[dict[str, object]] = [
        {"name": "moe", "tree": {"children": [{"label": Label("processing \"x\"\n"), "cores": ["AIC", "AIV"],
                                               "children": []}], "empty": {}},
         "counts": (Count(3), 0, -1, 2**70),
         "ratios": [0.1, 1e-300, 1e300, -0.0, math.inf, -math.inf, math.nan],
         "keys": {7: "seven", 2.5: "x", True: "t", None: "n"}, "text": "naïve ✓ \u0000 \ud800"},
    ]
    assert plans_json(plans) == json.dumps({"version": 1, "operators": plans}, indent=2) + "\n"


@pytest.mark.parametrize("value", [{"a": {1, 2}}, [object()], {("a", "b"): 1}])
def test_what_json_refuses_is_refused(value: Any) -> None:
    with pytest.raises(TypeError):
        json.dumps(value, indent=2)
    with pytest.raises(TypeError):
        indented_json(value)
