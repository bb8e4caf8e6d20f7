"""The op_host layers: the OpDef, the registered infer shape / dtype functions and the
registered tiling function."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import ClassVar

from optrace.codemods.infer import infer_edits, infer_functions
from optrace.codemods.layer_common import output_uses
from optrace.codemods.op_def import op_def_edits, opdef_file, parse_opdef
from optrace.codemods.op_host_registry import INFER_DTYPE, INFER_SHAPE, TILING, host_functions, unresolved
from optrace.codemods.tiling import tiling_edits, tiling_functions
from optrace.engine.cpp import mask
from optrace.engine.diagnostics import InputError
from optrace.engine.discovery import Layers, repo_index
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan
from optrace.engine.source import decode
from optrace.engine.vocabulary import names_profiling
from optrace.pipeline.layer_model import (
    Evidence,
    FileLayer,
    LayerModel,
    Operator,
    line_of,
    read_files,
    read_or_empty,
)


class OpDefLayer(FileLayer):
    NAME: ClassVar[str] = "op_def"
    DESCRIPTION: ClassVar[str] = "op_host OpDef: profiling_data the last output"

    def find(self, layers: Layers) -> list[Path]:
        """The file defining the op's OpDef class first, then the other files discovery
        saw OpDef statements in."""
        first = opdef_file(layers)
        rest = [f.path for f in layers.found.get("op_def", [])]
        return list(dict.fromkeys([first, *rest])) if first is not None else rest

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return op_def_edits(plan, mode)

    def verify(self, model: LayerModel) -> list[Evidence]:
        ev: list[Evidence] = []
        for path, data in list(model.data.items())[:1]:  # the class is in the first (`find`)
            try:
                info = parse_opdef(path, data, model.op.layers.camel)
            except InputError as exc:
                ev.append(Evidence(path, exc.diagnostic.line, exc.diagnostic.message, False))
                continue
            pos = info.profiling_position()
            if pos is None:
                ev.append(Evidence(path, info.outputs[-1].line if info.outputs else info.class_line,
                                   "OpDef has no profiling_data output", False))
                continue
            out = info.outputs[pos]
            last = pos == len(info.outputs) - 1
            ev.append(Evidence(path, out.line, f"OpDef: profiling_data is output {pos} of {len(info.outputs)}"
                               + ("" if last else f"; `{info.outputs[-1].name}` comes after it"), last))
            model.op.facts.output_index = pos
        return ev


def _no_index(path: Path, what: str) -> Evidence:
    # Without the OpDef's index there is nothing to compare this layer with: not a pass.
    return Evidence(path, 1, f"{what}: not compared, the OpDef gives no index for profiling_data", False)


class InferLayer(FileLayer):
    NAME: ClassVar[str] = "infer"
    DESCRIPTION: ClassVar[str] = "infer shape / dtype functions registered for the op"

    def find(self, layers: Layers) -> list[Path]:
        return [f.path for f in layers.found.get("infer", [])]

    def read(self, op: Operator, files: list[Path]) -> LayerModel:
        # The registered functions may sit in any op_host file (found through the registration).
        targets = [t.path for t in infer_functions(op.layers, clean=False)]
        return read_files(self.NAME, op, list(dict.fromkeys([*files, *targets])))

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return infer_edits(plan, mode)

    def verify(self, model: LayerModel) -> list[Evidence]:
        layers = model.op.layers
        index = model.op.facts.output_index
        ev: list[Evidence] = []
        for target in infer_functions(layers, clean=False):  # the registered ones, never helpers
            fn, path = target.function, target.path
            what = "shape" if target.role == INFER_SHAPE else "dtype"
            if index is None:
                ev.append(_no_index(path, f"infer {what} `{fn.name}`"))
                continue
            data = model.data.get(path, b"")
            uses = output_uses(data, fn.body_open, fn.body_close)
            named = [u for u in uses if names_profiling(u.expr)]
            hit = named or [u for u in uses if u.index == index]
            if not hit:
                ev.append(Evidence(path, fn.line, f"infer `{fn.name}` never sets the {what} of "
                                   f"output {index} (profiling_data)", False))
                continue
            u = hit[0]
            ok = u.index == index
            ev.append(Evidence(path, line_of(data, u.offset),
                               f"infer {what}: profiling_data at index {u.index}"
                               + ("" if ok else f", the OpDef has it at {index}"), ok))
        if not ev:
            ev.extend(_misspelt_registrations(model, layers))
        for role in (INFER_SHAPE, INFER_DTYPE):
            for reg in unresolved(layers, role, clean=False):
                ev.append(Evidence(reg.path, reg.line,
                                   f"{role} is registered as `{reg.function or 'a lambda'}`, which is not "
                                   "defined in the op's host files: nothing sets profiling_data's "
                                   f"{role.split()[1]} (write it by hand)", False))
        return ev


_IMPL_RE = re.compile(rb"\bIMPL_OP(?:_INFERSHAPE|_OPTILING)?\s*\(\s*(\w+)\s*\)")


def _misspelt_registrations(model: LayerModel, layers: Layers) -> list[Evidence]:
    """An infer file with no registration for the op, but one for a name a letter or two
    away (ops-nn's masked_scatter registers `MskedScatter`): the op has no infer at run
    time, for any of its outputs. Said with the name, as a warning (OT456), not a G2
    failure: the defect predates optrace, aclnn calls (which allocate the outputs
    themselves) run without an infer, and an error would block every commit of a
    pre-commit `check` on a line optrace did not write; `--strict` makes it one.

    Only a name that is nothing else: not the op's with a suffix (`DemoOpV2`, a sibling
    op), not named anywhere else in the repository (another op's OpDef), and with the op
    itself never named in these files' code (registered through a macro of the project,
    which optrace does not read): those stay "infer not read", a G2 failure."""
    op_type = layers.camel
    own = re.compile(r"\b" + re.escape(op_type) + r"\b")
    if any(own.search(decode(mask(data))) for data in model.data.values()):
        return []
    read = {p.resolve() for p in model.data}
    out = []
    for path, data in model.data.items():
        for m in _IMPL_RE.finditer(data):
            name = m.group(1).decode()
            near = difflib.SequenceMatcher(None, name.lower(), op_type.lower()).ratio() >= 0.85
            versioned = name.lower().startswith(op_type.lower()) or op_type.lower().startswith(name.lower())
            elsewhere = [f for f in repo_index(layers.repo_root).mentioning(name.encode())
                         if f.resolve() not in read and re.search(rb"\b" + re.escape(name.encode()) + rb"\b",
                                                              read_or_empty(f))]
            if name != op_type and near and not versioned and not elsewhere:
                out.append(Evidence(path, line_of(data, m.start()), f"registers its infer functions for "
                                    f"`{name}`, not the op `{op_type}` (a misspelling?): the op has no infer "
                                    "registered, for profiling_data or any other output (graph mode cannot "
                                    "infer their shapes), so optrace edits none; fix the name and apply "
                                    "again", warning=True))
    return out


class TilingLayer(FileLayer):
    NAME: ClassVar[str] = "tiling"
    DESCRIPTION: ClassVar[str] = "tiling function registered for the op"

    def find(self, layers: Layers) -> list[Path]:
        return [f.path for f in layers.found.get("tiling", [])]

    def read(self, op: Operator, files: list[Path]) -> LayerModel:
        targets = [t.path for t in tiling_functions(op.layers, clean=False)]
        return read_files(self.NAME, op, list(dict.fromkeys([*files, *targets])))

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return tiling_edits(plan, mode)

    def verify(self, model: LayerModel) -> list[Evidence]:
        index = model.op.facts.output_index
        targets = tiling_functions(model.op.layers, clean=False)  # registered, reading outputs
        ev: list[Evidence] = []
        for target in targets:
            fn, path = target.function, target.path
            if index is None:
                ev.append(_no_index(path, f"tiling `{fn.name}`"))
                continue
            data = model.data.get(path, b"")
            uses = output_uses(data, fn.body_open, fn.body_close)
            named = [u for u in uses if names_profiling(u.expr)] or [u for u in uses if u.index == index]
            if not named:
                ev.append(Evidence(path, fn.line, f"tiling `{fn.name}` describes outputs but not "
                                   f"profiling_data (output {index})", False))
                continue
            ok = named[0].index == index
            ev.append(Evidence(path, line_of(data, named[0].offset),
                               f"tiling: profiling_data at index {named[0].index}", ok))
        if not targets:
            # Most tiling functions never name the outputs: then there is no order to keep.
            # Without a registered tiling function nothing was read (the gate says so).
            for host in host_functions(model.op.layers, TILING, clean=False):
                ev.append(Evidence(host.path, host.function.line, f"tiling `{host.function.name}` does not "
                                   "describe the outputs: no order to keep"))
        return ev
