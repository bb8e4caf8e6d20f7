"""The LibCST half of the Python layers: their edits (the codemods), and the reading of
fake / Meta implementations and torchair converters for G2.

Imported only where it is needed, through the `PythonBackend` the pipeline is handed
(pipeline/layer_python.py): LibCST and these codemods take ~0.16 s to import, and `check`
of an operator without fakes or converters never needs them (issue 12 §4).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import libcst as cst

from optrace.codemods.graph_converters import converters, graph_converter_edits, output_names, the_call
from optrace.codemods.layer_common import PROFILING_OUTPUT
from optrace.codemods.python_callers import PythonSource, python_caller_edits
from optrace.codemods.python_fakes import NUMEL_NAME, fake_sites, own_returns, python_fake_edits
from optrace.codemods.torch_adapter import torch_names
from optrace.engine.diagnostics import InputError
from optrace.pipeline.layer_model import Evidence, LayerModel
from optrace.pipeline.layer_python import PythonBackend, expected_returns

_T = TypeVar("_T")


def _read_each(model: LayerModel, find: Callable[[PythonSource, list[str]], list[_T]],
               ev: list[Evidence]) -> Iterator[tuple[Path, PythonSource, list[_T]]]:
    """Each file of the layer parsed, with what `find` reads in it for the op's torch
    names; a file LibCST or `find` refuses is ✗ evidence at its line instead."""
    names = torch_names(model.op.layers)
    for path, data in model.data.items():
        try:
            src = PythonSource(path, data)
            found = find(src, names)
        except InputError as exc:
            ev.append(Evidence(path, exc.diagnostic.line, exc.diagnostic.message, False))
            continue
        yield path, src, found


def fake_evidence(model: LayerModel) -> list[Evidence]:
    """Each fake / Meta implementation returns profiling_data last, as many values as the op."""
    expected = expected_returns(model.op)
    want = "" if expected is None else f" of {expected}"
    ev: list[Evidence] = []
    for path, src, sites in _read_each(model, fake_sites, ev):
        done: set[int] = set()
        for site in sites:
            if id(site.function) in done:
                continue
            done.add(id(site.function))
            for ret in own_returns(site.function):
                value = ret.value
                items = list(value.elements) if isinstance(value, (cst.Tuple, cst.List)) else []
                last = src.code(items[-1].value if items else value) if value is not None else ""
                counted = bool(items) and not any(isinstance(el, cst.StarredElement) for el in items)
                n = len(items) if counted else None
                # What apply inserts (a buffer of the shared size), or a value named for it:
                # not any name that happens to contain "profiling" (`profiling_enabled`).
                named = re.fullmatch(r"\w*profiling_data\w*", last.strip()) is not None
                last_ok = NUMEL_NAME in last or named
                count_ok = n is None or expected is None or n == expected
                ok = last_ok and count_ok
                what = f"{site.how} `{site.function.name.value}`"
                note = (f"{what} returns profiling_data last" + (f" ({n}{want} outputs)" if n else "")
                        if ok else f"{what} returns {n} value(s), the op returns {expected}"
                        if not count_ok else f"{what} does not return profiling_data last")
                ev.append(Evidence(path, src.line_of(ret), note, ok))
    return ev


def converter_evidence(model: LayerModel) -> list[Evidence]:
    """Each torchair converter's custom-op call has profiling_data as its last GE output."""
    layers = model.op.layers
    expected = expected_returns(model.op)
    want = "" if expected is None else f" of {expected}"
    ev: list[Evidence] = []
    for path, src, fns in _read_each(model, converters, ev):
        for fn in fns:
            try:
                call, outputs = the_call(src, fn, layers.camel)
            except InputError as exc:
                ev.append(Evidence(path, exc.diagnostic.line, exc.diagnostic.message, False))
                continue
            got = output_names(outputs)
            ok = bool(got) and got[-1] == PROFILING_OUTPUT and (expected is None or len(got) == expected)
            note = f"torchair converter `{fn.name.value}`: GE outputs {', '.join(str(g) for g in got)}"
            tail = "" if ok else f" (want {PROFILING_OUTPUT} last{want})"
            ev.append(Evidence(path, src.line_of(call), note + tail, ok))
    return ev


BACKEND = PythonBackend(caller_edits=python_caller_edits, fake_edits=python_fake_edits,
                        converter_edits=graph_converter_edits, fake_evidence=fake_evidence,
                        converter_evidence=converter_evidence)
