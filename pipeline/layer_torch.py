"""The host layers between the OpDef and Python: the aclnn wrappers, the torch adapter
(the launch), the op's schema registration and the other functions registered for it
(autograd wrappers)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

from optrace.codemods.aclnn import aclnn_edits, aclnn_files, workspace_lists, wrapper_names
from optrace.codemods.autograd_wrappers import autograd_wrapper_edits, fixed_count, wrapper_files, wrappers
from optrace.codemods.l0op import l0op_edits, threading
from optrace.codemods.layer_common import clean_bytes
from optrace.codemods.registration import registration_changes, registration_files, schema_strings
from optrace.codemods.torch_adapter import launches, meta_functions, torch_adapter_edits, torch_names
from optrace.codemods.torch_schema import returns_list
from optrace.engine.cpp import CppFunction, last_ident, mask, returns_in
from optrace.engine.diagnostics import InputError
from optrace.engine.discovery import Layers
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan
from optrace.engine.vocabulary import PROFILING_VAR, names_profiling
from optrace.pipeline.layer_model import Evidence, FileLayer, LayerModel


class L0opLayer(FileLayer):
    NAME: ClassVar[str] = "l0op"
    DESCRIPTION: ClassVar[str] = ("l0 launch (ADD_TO_LAUNCHER_LIST_AICORE): the profiling output last in "
                                  "OP_OUTPUT, passed down from the aclnn API")

    def find(self, layers: Layers) -> list[Path]:
        return threading(layers).files()

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        del mode  # both modes: mode A's adapter passes a null tensor down the same chain
        return l0op_edits(plan.analysis.layers)

    def verify(self, model: LayerModel) -> list[Evidence]:
        th = threading(model.op.layers, clean=False)
        ev: list[Evidence] = []
        for path, data, at, message in th.errors:
            if path in model.data:
                ev.append(Evidence(path, data.count(b"\n", 0, at) + 1, message, False))
        for ln in th.launches:
            if ln.path not in model.data:
                continue
            data = model.data[ln.path]
            outs = [last_ident(data[s:e]) for s, e in ln.outputs or ()]
            if outs and names_profiling(outs[-1]):
                ev.append(Evidence(ln.path, ln.line,
                                   f"launch of {ln.op_type}: profiling output last in OP_OUTPUT"))
            else:
                ev.append(Evidence(ln.path, ln.line, f"launch of {ln.op_type}: OP_OUTPUT({', '.join(outs)}) "
                                   "has no profiling output last", False))
        for site in th.sites:
            if site.path not in model.data:
                continue
            data = model.data[site.path]
            pos = site.profiling_item(data)
            kind = "call" if site.is_call else "signature"
            if pos is None:
                what = "argument" if site.is_call else "parameter"
                ev.append(Evidence(site.path, site.line, f"{site.function} {kind} has no profiling {what} "
                                   "(it reaches the launch)", False))
            elif pos != len(site.items) - 1:
                ev.append(Evidence(site.path, site.line, f"{site.function} {kind}: profiling output is not "
                                   "last", False))
            else:
                ev.append(Evidence(site.path, site.line, f"{site.function} {kind}: profiling output last"))
        return ev


class AclnnLayer(FileLayer):
    NAME: ClassVar[str] = "aclnn"
    DESCRIPTION: ClassVar[str] = "aclnn wrappers: the profiling output right before workspaceSize"

    def find(self, layers: Layers) -> list[Path]:
        return aclnn_files(layers)

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return aclnn_edits(plan, mode)

    def verify(self, model: LayerModel) -> list[Evidence]:
        names = wrapper_names(model.op.layers, clean=False)  # hand-written wrappers under any name too
        launched = bool(threading(model.op.layers, clean=False).launches)
        ev: list[Evidence] = []
        for path, data in model.data.items():
            try:
                lists = workspace_lists(path, data, names)
            except InputError as exc:
                ev.append(Evidence(path, exc.diagnostic.line, exc.diagnostic.message, False))
                continue
            if not lists and launched:
                ev.extend(_foreign_api(path, data))
            for wl in lists:
                pos = wl.profiling_item(data)
                kind = "call" if wl.is_call else "signature"
                if pos is None:
                    ev.append(Evidence(path, wl.line, f"{wl.function} {kind} has no profiling output "
                                       "(stale wrapper?)", False))
                elif pos != wl.workspace - 1:
                    ev.append(Evidence(path, wl.line, f"{wl.function} {kind}: profiling output is not right "
                                       "before workspaceSize", False))
                else:
                    ev.append(Evidence(path, wl.line, f"{wl.function} {kind}: profiling output last"))
        return ev


_API_RE = re.compile(rb"\b(aclnn\w*GetWorkspaceSize)\s*\(")


def _foreign_api(path: Path, data: bytes) -> list[Evidence]:
    """An l0op-style operator's aclnn header that declares an API none of its files define
    (a copy of another operator's header: `aclnn_threshold_backward.h` beside `relu_grad`,
    whose API is defined where it launches its own op): it reaches no launch of this op,
    so no order is at stake. Said, not failed; a header that declares nothing stays
    unread (OT452)."""
    code = mask(data)
    return [Evidence(path, data.count(b"\n", 0, m.start()) + 1,
                     f"{m.group(1).decode()} is declared here and defined outside the operator: it "
                     "reaches no launch of this op (not its wrapper)")
            for m in _API_RE.finditer(code)]


class TorchAdapterLayer(FileLayer):
    NAME: ClassVar[str] = "torch_adapter"
    DESCRIPTION: ClassVar[str] = ("torch adapter (EXEC_NPU_CMD / EXEC_KERNEL_CMD): passes and returns the "
                                  "buffer")

    def find(self, layers: Layers) -> list[Path]:
        found = [f.path for f in layers.found.get("torch_adapter", [])]
        # Its codemod also edits the op's Meta kernels registered apart from the adapter
        # (`torch_binding_meta.cpp`): their file is this layer's too, or strip would not
        # visit it when no other layer happens to claim it (the source fuzzer found one:
        # a Meta kernel whose return type no longer parsed).
        names = torch_names(layers)
        for layer_file in layers.found.get("registration", []):
            if layer_file.path in found:
                continue
            try:
                data = clean_bytes(layer_file.path)
            except OSError:
                continue
            if meta_functions(data, names):
                found.append(layer_file.path)
        return found

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return torch_adapter_edits(plan, mode)

    def verify(self, model: LayerModel) -> list[Evidence]:
        op = model.op
        kernel_pos = op.facts.kernel_position
        ev: list[Evidence] = []
        for path, data in model.data.items():
            try:
                found = launches(path, data, op.layers)
            except InputError as exc:
                ev.append(Evidence(path, exc.diagnostic.line, exc.diagnostic.message, False))
                continue
            for ln in found:
                names = [last_ident(data[s:e]) for s, e in ln.args]
                direct = ln.macro == "EXEC_KERNEL_CMD"
                want = (2 + kernel_pos) if direct and kernel_pos is not None else len(names) - 1
                got = next((i for i, n in enumerate(names) if names_profiling(n)), None)
                if got is None:
                    ev.append(Evidence(path, ln.line, f"{ln.macro} does not pass a profiling tensor", False))
                    continue
                arg = data[ln.args[got][0] : ln.args[got][1]].strip()
                named = re.fullmatch(rb"[A-Za-z_]\w*", arg) is not None
                ok = got == want and named
                ev.append(Evidence(path, ln.line, f"{ln.macro}: `{names[got]}` is argument {got}"
                                   + ("" if got == want else f", expected {want}")
                                   + ("" if named else " (a temporary, not a named variable)"), ok))
                if op.mode == "B" and ln.function is not None:
                    ev.append(self._returned(path, data, ln.function))
                    if ln.function.type_span is not None:
                        text = data[ln.function.type_span[0] : ln.function.type_span[1]]
                        if re.search(rb"\btuple\s*<", text):
                            op.facts.adapter_returns = fixed_count(text)
        return ev

    @staticmethod
    def _returned(path: Path, data: bytes, fn: CppFunction) -> Evidence:
        """Mode B: the launcher returns the buffer (last in its tuple, or pushed last)."""
        rets = returns_in(mask(data), fn)
        returned = any(names_profiling(data[s:e])
                       for s, e in rets) or b".push_back(" + PROFILING_VAR.encode() in \
            data[fn.body_open : fn.body_close]
        return Evidence(path, fn.line, f"`{fn.name}` returns the profiling tensor last" if returned
                        else f"`{fn.name}` does not return the profiling tensor (mode B)", returned)


class RegistrationLayer(FileLayer):
    NAME: ClassVar[str] = "registration"
    DESCRIPTION: ClassVar[str] = "torch registration (PYBIND11_MODULE / TORCH_LIBRARY): the schema's returns"
    MODE_B_ONLY: ClassVar[bool] = True

    def find(self, layers: Layers) -> list[Path]:
        return registration_files(layers)

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return registration_changes(plan, mode)[0]

    def verify(self, model: LayerModel) -> list[Evidence]:
        op = model.op
        names = torch_names(op.layers)
        adapter_returns = op.facts.adapter_returns
        ev: list[Evidence] = []
        for path, data in model.data.items():
            try:
                strings = schema_strings(path, data, names)
            except InputError as exc:
                ev.append(Evidence(path, exc.diagnostic.line, exc.diagnostic.message, False))
                continue
            if not strings and b"PYBIND11_MODULE" in data:
                # A pybind11 binding has no schema: the bound function's own return type
                # (the adapter's, checked there) is what Python receives.
                for name in names:
                    m = re.search(rb'\.def\s*\(\s*"' + re.escape(name.encode()) + rb'"', data)
                    if m is not None:
                        ev.append(Evidence(path, data.count(b"\n", 0, m.start()) + 1,
                                           f"pybind11 binds `{name}`: no schema, the adapter's return "
                                           "type is what Python gets"))
            for s in strings:
                if returns_list(s.schema):
                    ev.append(Evidence(path, s.line, "schema returns Tensor[]: the list carries the buffer"))
                    continue
                n = len(s.schema.returns)
                if op.facts.schema_returns is None:
                    op.facts.schema_returns = n
                ok = adapter_returns is None or n == adapter_returns
                ev.append(Evidence(path, s.line, f"schema returns {n} tensor(s)"
                                   + ("" if ok else f", the adapter returns {adapter_returns}"), ok))
        return ev


class AutogradWrappersLayer(FileLayer):
    NAME: ClassVar[str] = "autograd_wrappers"
    DESCRIPTION: ClassVar[str] = "functions registered for the op besides the launcher (autograd wrappers)"
    MODE_B_ONLY: ClassVar[bool] = True

    def find(self, layers: Layers) -> list[Path]:
        return wrapper_files(layers)

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return autograd_wrapper_edits(plan, mode)

    def verify(self, model: LayerModel) -> list[Evidence]:
        """A tensor or fixed-size tuple they return has the launcher's size."""
        op = model.op
        returns = op.facts.adapter_returns
        seen: set[str] = set()
        ev: list[Evidence] = []
        found = wrappers(op.layers, torch_names(op.layers), clean=False)
        for w in sorted(found, key=lambda w: w.function.body_open < 0):  # definitions first
            fn = w.function
            if fn.name in seen or fn.type_span is None or w.path not in model.data:
                continue
            seen.add(fn.name)
            n = fixed_count(model.data[w.path][fn.type_span[0] : fn.type_span[1]])
            if returns is None:
                ev.append(Evidence(w.path, fn.line, f"`{fn.name}` (registered for the op): not compared, the "
                                   "launcher returns no fixed-size tuple"))
                continue
            ev.append(Evidence(w.path, fn.line, f"`{fn.name}` (registered for the op) returns {n} tensor(s)"
                               + ("" if n == returns else f", the launcher returns {returns}"), n == returns))
        return ev
