"""The Python layers: samples / tests calling the op (G4, G5), fake / Meta
implementations and torchair converters (G2, mode B)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from optrace.codemods.graph_converters import (
    converter_files,
    converters,
    graph_converter_edits,
    output_names,
    the_call,
)
from optrace.codemods.layer_common import PROFILING_OUTPUT
from optrace.codemods.python_callers import PythonSource, caller_files, python_caller_edits
from optrace.codemods.python_fakes import NUMEL_NAME, fake_files, fake_sites, own_returns, python_fake_edits
from optrace.codemods.torch_adapter import torch_names
from optrace.engine.diagnostics import InputError
from optrace.engine.discovery import Layers
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan
from optrace.pipeline.layer_model import Evidence, FileLayer, LayerModel, Operator


class PythonCallersLayer(FileLayer):
    NAME: ClassVar[str] = "python_callers"
    DESCRIPTION: ClassVar[str] = "Python samples / tests: sync and save after each call, absolute paths"
    GATE: ClassVar[str] = "G4/G5"
    MODE_B_ONLY: ClassVar[bool] = True

    def find(self, layers: Layers) -> list[Path]:
        return caller_files(layers)

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return python_caller_edits(plan, mode)

    def verify(self, model: LayerModel) -> list[Evidence]:
        """G4 and G5 evidence, each tagged with its gate."""
        names = set(torch_names(model.op.layers))
        ev4: list[Evidence] = []
        ev5: list[Evidence] = []
        for path, data in model.data.items():
            _python_file(path, data, names, ev4, ev5)
        return [*(_tag(e, "G4") for e in ev4), *(_tag(e, "G5") for e in ev5)]


def _tag(e: Evidence, gate: str) -> Evidence:
    return Evidence(e.path, e.line, e.note, e.ok, gate)


class PythonFakesLayer(FileLayer):
    NAME: ClassVar[str] = "python_fakes"
    DESCRIPTION: ClassVar[str] = "Python fake / Meta implementations: profiling_data returned last"
    MODE_B_ONLY: ClassVar[bool] = True

    def find(self, layers: Layers) -> list[Path]:
        return fake_files(layers)

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return python_fake_edits(plan, mode)

    def verify(self, model: LayerModel) -> list[Evidence]:
        names = torch_names(model.op.layers)
        expected = _expected_returns(model.op)
        want = "" if expected is None else f" of {expected}"
        ev: list[Evidence] = []
        for path, data in model.data.items():
            try:
                src = PythonSource(path, data)
                sites = fake_sites(src, names)
            except InputError as exc:
                ev.append(Evidence(path, exc.diagnostic.line, exc.diagnostic.message, False))
                continue
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


def _expected_returns(op: Operator) -> int | None:
    """What the Python side must return: the schema's count, else the launcher's."""
    facts = op.facts
    return facts.schema_returns if facts.schema_returns is not None else facts.adapter_returns


class GraphConvertersLayer(FileLayer):
    NAME: ClassVar[str] = "graph_converters"
    DESCRIPTION: ClassVar[str] = "graph-mode converters (torchair): profiling_data the last GE output"
    MODE_B_ONLY: ClassVar[bool] = True

    def find(self, layers: Layers) -> list[Path]:
        return converter_files(layers)

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return graph_converter_edits(plan, mode)

    def verify(self, model: LayerModel) -> list[Evidence]:
        layers = model.op.layers
        names = torch_names(layers)
        expected = _expected_returns(model.op)
        want = "" if expected is None else f" of {expected}"
        ev: list[Evidence] = []
        for path, data in model.data.items():
            try:
                src = PythonSource(path, data)
                fns = converters(src, names)
            except InputError as exc:
                ev.append(Evidence(path, exc.diagnostic.line, exc.diagnostic.message, False))
                continue
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


# --- reading a caller (G4, G5) ------------------------------------------------------------------


def _starts_workers(name: str) -> bool:
    spawn = name.endswith(("spawn", "start_processes")) and ("mp" in name or "multiprocessing" in name)
    return spawn or name.split(".")[-1] == "Process"


def _python_file(path: Path, data: bytes, op_names: set[str], ev4: list[Evidence],
                 ev5: list[Evidence]) -> None:
    try:
        module = cst.parse_module(data)
    except cst.ParserSyntaxError as exc:
        ev4.append(Evidence(path, exc.raw_line, f"Python syntax error: {exc.message}", False))
        return
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    pos = wrapper.resolve(PositionProvider)

    calls: list[int] = []
    syncs: list[int] = []
    saves: list[tuple[int, int]] = []
    spawns: list[tuple[int, cst.Call]] = []
    resolves: list[int] = []
    functions: list[tuple[int, int]] = []

    def dotted(node: cst.BaseExpression) -> str:
        if isinstance(node, cst.Name):
            return node.value
        if isinstance(node, cst.Attribute):
            return f"{dotted(node.value)}.{node.attr.value}"
        return ""

    deferred = [0]

    class Visitor(cst.CSTVisitor):
        def visit_Lambda(self, node: cst.Lambda) -> None:
            deferred[0] += 1

        def leave_Lambda(self, original_node: cst.Lambda) -> None:
            deferred[0] -= 1

        def visit_GeneratorExp(self, node: cst.GeneratorExp) -> None:
            deferred[0] += 1

        def leave_GeneratorExp(self, original_node: cst.GeneratorExp) -> None:
            deferred[0] -= 1

        def visit_ListComp(self, node: cst.ListComp) -> None:
            deferred[0] += 1

        def leave_ListComp(self, original_node: cst.ListComp) -> None:
            deferred[0] -= 1

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            r = pos[node]
            functions.append((r.start.line, r.end.line))

        def visit_Call(self, node: cst.Call) -> None:
            line = pos[node].start.line
            name = dotted(node.func)
            if isinstance(node.func, cst.Attribute) and node.func.attr.value in op_names:
                if not deferred[0]:  # a lambda's / comprehension's call is not saved
                    calls.append(line)
            elif name.endswith("synchronize"):
                syncs.append(line)
            elif name.split(".")[-1] in ("save_profiling_data", "_optrace_save"):
                saves.append((line, pos[node].end.line))
            elif _starts_workers(name):
                spawns.append((line, node))
            elif name.endswith("resolve") and "expanduser" in module.code_for_node(node):
                resolves.append(line)

    wrapper.visit(Visitor())

    def enclosing(line: int) -> tuple[int, int]:
        inner = [f for f in functions if f[0] <= line <= f[1]]
        return max(inner, key=lambda f: f[0]) if inner else (1, data.count(b"\n") + 1)

    for line in calls:
        scope = enclosing(line)
        save = next((s for s in saves if line < s[0] <= scope[1]), None)
        if save is None:
            ev4.append(Evidence(path, line, "the op's profiling buffer is never saved after this call",
                                False))
            continue
        sync = next((s for s in syncs if line < s <= save[0]), None)
        note = "device sync, then save_profiling_data" if sync else "no device sync before the save"
        ev4.append(Evidence(path, sync or line, note, sync is not None))
        ev4.append(Evidence(path, save[0], "saves the profiling buffer"))
    for line, _node in spawns:
        scope = enclosing(line)
        before = [r for r in resolves if scope[0] <= r < line]
        if before:
            ev5.append(Evidence(path, before[-1], f"profiling paths made absolute before the workers start "
                                f"(line {line})"))
        else:
            ev5.append(Evidence(path, line, "workers start before the profiling paths are made absolute",
                                False))
