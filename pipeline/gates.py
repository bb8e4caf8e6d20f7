"""Gates G1–G5 of an operator, read from the tree as it is (optrace's work or by hand).

Each gate is ✓ (pass), ✗ (fail), n/a (the operator lacks the layers the gate needs) or
"not verifiable here", with evidence as `file:line` notes. A failing gate is also an
error finding (`OT451`..`OT455`), so `optrace check` exits 1.

- **G1 preprocess** (OT451): the build script has the hook block; it fails loudly
  without optrace; it runs `optrace preprocess` on what the build compiles — the build
  tree's copy, after the last copy of the kernels and with `--modify`, or the sources
  (read only) before the first build command; it writes `point_map.json` (`--out`), and
  the Python callers hand the map they are given to `save_profiling_data(point_map=...)`,
  which puts it beside the rank files where `optrace collect` looks.
- **G2 output order** (OT452): `profiling_data` is the last tensor output of the kernel
  entry (before workspace / tiling), the last OpDef output, the output infer shapes and
  types at that index (constants, enumerators or literals), the same index where tiling
  describes outputs, right before `workspaceSize` in every aclnn declaration, definition
  and call, a named variable in the launch (`EXEC_NPU_CMD`: last; `EXEC_KERNEL_CMD`: the
  kernel's position), returned last in mode B, with as many schema returns as the adapter
  returns; functions registered for the op besides the launcher (autograd wrappers)
  return as many; Python fakes / Meta impls and torchair converters return it last.
- **G3 compile** (OT453): the real build — never run by `check`: "not verifiable here"
  (the summary says whether a CANN toolchain was found, and which script to run).
- **G4 run + post-process** (OT454): after each call of the op in a sample / test, a
  device sync, then `save_profiling_data(...)`; the collector run is reported when present.
- **G5 paths** (OT455): in callers that start workers (`multiprocessing.spawn`,
  `Process`), the profiling paths are made absolute (`expanduser().resolve()`) before
  the first worker starts.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from optrace.codemods.aclnn import aclnn_files, workspace_lists, wrapper_names
from optrace.codemods.autograd_wrappers import fixed_count, wrappers
from optrace.codemods.build_hook import (
    _BUILD_CMD_RE,
    _HOOK_BLOCK_RE,
    SHELL_SUFFIXES,
    _enclosing_function,
    _kernel_copies,
    _words,
    build_script,
    hook_command,
)
from optrace.codemods.graph_converters import converter_files, converters, output_names, the_call
from optrace.codemods.infer import infer_functions
from optrace.codemods.kernel_entry import PROFILING_ARG, _is_system, _param_name, _params, recorded_mode
from optrace.codemods.layer_common import (
    PROFILING_OUTPUT,
    PROFILING_VAR,
    last_ident,
    mask,
    match_bracket,
    output_uses,
    returns_in,
)
from optrace.codemods.op_def import opdef_file, parse_opdef
from optrace.codemods.op_host_registry import INFER_DTYPE, INFER_SHAPE, unresolved
from optrace.codemods.python_callers import PythonSource, caller_files
from optrace.codemods.python_fakes import NUMEL_NAME, fake_files, fake_sites, own_returns
from optrace.codemods.registration import registration_files, schema_strings
from optrace.codemods.tiling import tiling_functions
from optrace.codemods.torch_adapter import launches, torch_names
from optrace.codemods.torch_schema import returns_list
from optrace.engine.analysis import Analysis
from optrace.engine.diagnostics import Diagnostic, InputError, Severity, display_path
from optrace.engine.discovery import Layers
from optrace.engine.source import read_regular

PASS = "pass"
FAIL = "fail"
NA = "n/a"
NOT_VERIFIABLE = "not verifiable here"
SYMBOLS = {PASS: "✓", FAIL: "✗", NA: "n/a", NOT_VERIFIABLE: "not verifiable here"}
TITLES = {"G1": "preprocess", "G2": "output order", "G3": "compile", "G4": "run + post-process",
          "G5": "paths"}
CODES = {"G1": "OT451", "G2": "OT452", "G3": "OT453", "G4": "OT454", "G5": "OT455"}


@dataclass(frozen=True)
class Evidence:
    path: Path | None
    line: int
    note: str
    ok: bool = True

    def to_json(self, root: Path | None) -> dict[str, object]:
        return {"path": display_path(self.path, root) if self.path else None, "line": self.line,
                "note": self.note, "ok": self.ok}


@dataclass
class GateResult:
    gate: str
    status: str
    summary: str
    evidence: list[Evidence] = field(default_factory=list)

    @property
    def title(self) -> str:
        return TITLES[self.gate]

    @property
    def code(self) -> str:
        return CODES[self.gate]

    @property
    def symbol(self) -> str:
        return SYMBOLS[self.status]

    def finding(self) -> Diagnostic | None:
        if self.status != FAIL:
            return None
        bad = next((e for e in self.evidence if not e.ok), None)
        where = bad or (self.evidence[0] if self.evidence else Evidence(None, 0, ""))
        note = f": {bad.note}" if bad is not None else ""
        return Diagnostic(self.code, f"gate {self.gate} ({self.title}) fails{note}", where.path, where.line,
                          Severity.ERROR)

    def to_json(self, root: Path | None) -> dict[str, object]:
        return {"gate": self.gate, "title": self.title, "status": self.status, "symbol": self.symbol,
                "summary": self.summary, "evidence": [e.to_json(root) for e in self.evidence]}


def _gate(gate: str, evidence: list[Evidence], summary_ok: str, summary_fail: str) -> GateResult:
    failed = [e for e in evidence if not e.ok]
    if failed:
        return GateResult(gate, FAIL, summary_fail, evidence)
    return GateResult(gate, PASS, summary_ok, evidence)


def _line(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _read(path: Path) -> bytes:
    try:
        return read_regular(path)
    except OSError:
        return b""


# --- the mode -------------------------------------------------------------------------------


def operator_mode(analysis: Analysis) -> str:
    """A or B: recorded by apply in the entry scaffold, else read from the OpDef."""
    mode = recorded_mode(analysis.entry_fn.src.raw)
    if mode:
        return mode
    path = opdef_file(analysis.layers)
    if path is not None:
        try:
            data = read_regular(path)
            info = parse_opdef(path, data, analysis.layers.camel)
        except Exception:
            return "B"
        if info.profiling_param_type(data) == "OPTIONAL":
            return "A"
    return "B"


# --- G1 ---------------------------------------------------------------------------------------



def gate_g1(analysis: Analysis, mode: str) -> GateResult:
    layers = analysis.layers
    script = build_script(layers)
    if script is None:
        return GateResult("G1", NA, "no build script found for this operator")
    data = _read(script)
    block = next((m for m in _HOOK_BLOCK_RE.finditer(data) if b"optrace" in m.group(0)), None)
    if block is None:
        return GateResult("G1", FAIL, "the build never runs the preprocessor", [
            Evidence(script, 1, "no `# TRACE_PREPROCESSOR_HOOK_START` block running `optrace preprocess`",
                     False)])
    hook_line = _line(data, block.start())
    body = block.group(0)
    ev = [Evidence(script, hook_line, "hook block present")]
    loud = (b"command -v optrace" in body and b"exit 1" in body) or b"FATAL_ERROR" in body
    ev.append(Evidence(script, hook_line, "fails the build when optrace is not installed" if loud
                       else "does not fail the build when optrace is missing", loud))
    shell = script.suffix in SHELL_SUFFIXES
    # Read as the shell / CMake reads it: continuation lines joined, `execute_process(...)`
    # across lines, comments and messages left out.
    pre = hook_command(body, cmake=not shell and script.suffix in (".cmake", ".txt"))
    if pre is None:
        ev.append(Evidence(script, hook_line, "the block does not run `optrace preprocess`", False))
        return _gate("G1", ev, "", "the hook does not preprocess the kernels")
    pre_line = _line(data, block.start() + pre.offset)
    src = pre.src.strip(b'"\'').rstrip(b"/")
    modify = pre.modify
    if pre.out is None:
        ev.append(Evidence(script, pre_line, "no `--out`: point_map.json is not written beside the build",
                           False))
    else:
        ev.append(Evidence(script, pre_line, f"writes {pre.out.decode(errors='replace').strip(chr(34))}"
                                             "/point_map.json"))
    rest = data[: block.start()] + data[block.end() :]
    copies = _kernel_copies(rest) if shell else []
    if copies:
        last = copies[-1]
        last_at = last.start() if last.start() < block.start() else last.start() + len(body)
        copy_line = _line(data, last_at)
        dest = (_words(last.group(1))[-1].strip(b'"\'').rstrip(b"/*").rstrip(b"/"))
        fn_copy = _enclosing_function(data, last_at)
        fn_hook = _enclosing_function(data, block.start())
        after = last_at < block.start() and fn_copy == fn_hook
        later = [c for c in _kernel_copies(data[block.end() :])
                 if _enclosing_function(data, block.end() + c.start()) == fn_hook]
        ok = after and not later
        ev.append(Evidence(script, copy_line, f"kernels copied into the build tree here; the hook runs "
                           f"{'after' if ok else 'NOT after'} the last copy", ok))
        same = src == dest
        ev.append(Evidence(script, pre_line, "preprocesses the build tree's copy" if same
                           else f"preprocesses {src.decode(errors='replace')}, not the copy "
                                f"{dest.decode(errors='replace')}", same))
        ev.append(Evidence(script, pre_line,
                           "--modify: ids and fingerprint go into the copy the build compiles" if modify
                           else "no --modify: the kernel records no build fingerprint", modify))
    else:
        build = _BUILD_CMD_RE.search(data, block.end()) if shell else None
        if shell:
            ev.append(Evidence(script, _line(data, build.start()) if build else hook_line,
                               "builds from the source tree: the hook runs before the build command"
                               if build else "no build command after the hook", build is not None))
        ev.append(Evidence(script, pre_line, "reads the sources only (no --modify)" if not modify
                           else "--modify would rewrite the checked-in sources", not modify))
    ev.extend(_collector_link(analysis, mode))
    return _gate("G1", ev, "the build preprocesses the kernels it compiles and writes the point map",
                 "the point map does not come from the build that compiles the kernels")


def _collector_link(analysis: Analysis, mode: str) -> list[Evidence]:
    """The callers hand the map to save_profiling_data, which copies it beside the ranks."""
    callers = caller_files(analysis.layers)
    if not callers or mode != "B":
        return [Evidence(None, 0, "collector: `optrace collect DIR --point-map <out>/point_map.json`")]

    out = []
    for path in callers:
        data = _read(path)
        code = mask(data)
        for m in re.finditer(rb"(?:save_profiling_data|_optrace_save)\s*\(", code):
            close = match_bracket(code, m.end() - 1)
            ok = b"point_map" in data[m.start() : close if close > 0 else len(data)]
            out.append(Evidence(path, _line(data, m.start()),
                                "the saved rank files get the point map (collect finds it beside them)"
                                if ok else "save_profiling_data without point_map=", ok))
    return out or [Evidence(None, 0, "collector: `optrace collect DIR --point-map <out>/point_map.json`")]


# --- G2 ---------------------------------------------------------------------------------------


def gate_g2(analysis: Analysis, mode: str) -> GateResult:
    ev: list[Evidence] = []
    entry = analysis.entry_fn
    names = [_param_name(entry.src.raw, p) for p in _params(entry)]
    prof = next((n for n in names if n in (PROFILING_ARG, "profilingData")), None)
    if prof is None:
        ev.append(Evidence(entry.src.path, entry.line, f"kernel entry `{entry.name}` has no profiling_data",
                           False))
        kernel_pos = None
    else:
        i = names.index(prof)
        later = [n for n in names[i + 1 :] if not _is_system(n)]
        ev.append(Evidence(entry.src.path, entry.line,
                           f"kernel entry: `{prof}` is parameter {i}, the last tensor output"
                           if not later else f"kernel entry: `{later[0]}` comes after `{prof}`", not later))
        kernel_pos = i
    index = _g2_opdef(analysis, ev)
    if index is not None:
        _g2_infer(analysis, index, ev)
        _g2_tiling(analysis, index, ev)
    _g2_aclnn(analysis, ev)
    _g2_torch(analysis, mode, kernel_pos, ev)
    return _gate("G2", ev, "profiling_data is the last output in every layer the operator has",
                 "profiling_data is not in the same (last) position in every layer")


def _g2_opdef(analysis: Analysis, ev: list[Evidence]) -> int | None:
    path = opdef_file(analysis.layers)
    if path is None:
        return None
    data = _read(path)
    try:
        info = parse_opdef(path, data, analysis.layers.camel)
    except InputError as exc:
        ev.append(Evidence(path, exc.diagnostic.line, exc.diagnostic.message, False))
        return None
    pos = info.profiling_position()
    if pos is None:
        ev.append(Evidence(path, info.outputs[-1].line if info.outputs else info.class_line,
                           "OpDef has no profiling_data output", False))
        return None
    out = info.outputs[pos]
    last = pos == len(info.outputs) - 1
    ev.append(Evidence(path, out.line, f"OpDef: profiling_data is output {pos} of {len(info.outputs)}"
                       + ("" if last else f"; `{info.outputs[-1].name}` comes after it"), last))
    return pos


def _g2_infer(analysis: Analysis, index: int, ev: list[Evidence]) -> None:
    layers = analysis.layers
    for target in infer_functions(layers, clean=False):  # the registered ones, never helpers
        fn, path = target.function, target.path
        what = "shape" if target.role == INFER_SHAPE else "dtype"
        data = _read(path)
        uses = output_uses(data, fn.body_open, fn.body_close)
        named = [u for u in uses if b"rofil" in u.expr]
        hit = named or [u for u in uses if u.index == index]
        if not hit:
            ev.append(Evidence(path, fn.line, f"infer `{fn.name}` never sets the {what} of "
                               f"output {index} (profiling_data)", False))
            continue
        u = hit[0]
        ok = u.index == index
        ev.append(Evidence(path, _line(data, u.offset), f"infer {what}: profiling_data at index {u.index}"
                           + ("" if ok else f", the OpDef has it at {index}"), ok))
    for role in (INFER_SHAPE, INFER_DTYPE):
        for reg in unresolved(layers, role, clean=False):
            ev.append(Evidence(reg.path, reg.line, f"{role} is registered as `{reg.function or 'a lambda'}`, "
                               "which is not defined in the op's host files: nothing sets profiling_data's "
                               f"{role.split()[1]} (write it by hand)", False))


def _g2_tiling(analysis: Analysis, index: int, ev: list[Evidence]) -> None:
    for target in tiling_functions(analysis.layers, clean=False):  # registered, reading outputs
        fn, path = target.function, target.path
        data = _read(path)
        uses = output_uses(data, fn.body_open, fn.body_close)
        named = [u for u in uses if b"rofil" in u.expr] or [u for u in uses if u.index == index]
        if not named:
            ev.append(Evidence(path, fn.line, f"tiling `{fn.name}` describes outputs but not "
                               f"profiling_data (output {index})", False))
            continue
        ok = named[0].index == index
        ev.append(Evidence(path, _line(data, named[0].offset),
                           f"tiling: profiling_data at index {named[0].index}", ok))


def _g2_aclnn(analysis: Analysis, ev: list[Evidence]) -> None:
    names = wrapper_names(analysis.layers, clean=False)  # hand-written wrappers under any name too
    for path in aclnn_files(analysis.layers):
        data = _read(path)
        try:
            lists = workspace_lists(path, data, names)
        except InputError as exc:
            ev.append(Evidence(path, exc.diagnostic.line, exc.diagnostic.message, False))
            continue
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


def _g2_torch(analysis: Analysis, mode: str, kernel_pos: int | None, ev: list[Evidence]) -> None:
    layers = analysis.layers
    adapter_returns: int | None = None
    for f in layers.found.get("torch_adapter", []):
        data = _read(f.path)
        for ln in launches(f.path, data, layers):
            names = [last_ident(data[s:e]) for s, e in ln.args]
            direct = ln.macro == "EXEC_KERNEL_CMD"
            want = (2 + kernel_pos) if direct and kernel_pos is not None else len(names) - 1
            got = next((i for i, n in enumerate(names) if "profiling" in n.lower()), None)
            if got is None:
                ev.append(Evidence(f.path, ln.line, f"{ln.macro} does not pass a profiling tensor", False))
                continue
            arg = data[ln.args[got][0] : ln.args[got][1]].strip()
            named = re.fullmatch(rb"[A-Za-z_]\w*", arg) is not None
            ok = got == want and named
            ev.append(Evidence(f.path, ln.line, f"{ln.macro}: `{names[got]}` is argument {got}"
                               + ("" if got == want else f", expected {want}")
                               + ("" if named else " (a temporary, not a named variable)"), ok))
            if mode == "B" and ln.function is not None:
                code = mask(data)
                rets = returns_in(code, ln.function)
                returned = any(PROFILING_VAR.encode() in data[s:e] or b"profiling" in data[s:e].lower()
                               for s, e in rets) or b".push_back(" + PROFILING_VAR.encode() in \
                    data[ln.function.body_open : ln.function.body_close]
                ev.append(Evidence(f.path, ln.function.line, f"`{ln.function.name}` returns the profiling "
                                   "tensor last" if returned else f"`{ln.function.name}` does not return the "
                                   "profiling tensor (mode B)", returned))
                if ln.function.type_span is not None:
                    text = data[ln.function.type_span[0] : ln.function.type_span[1]]
                    if re.search(rb"\btuple\s*<", text):  # fragments count: part of the code now

                        adapter_returns = fixed_count(text)
    if mode != "B":
        return
    names = torch_names(layers)
    schema_returns: int | None = None
    for reg in registration_files(layers):
        data = _read(reg)
        try:
            strings = schema_strings(reg, data, names)
        except Exception as exc:
            ev.append(Evidence(reg, 1, str(exc), False))
            continue
        for s in strings:
            if returns_list(s.schema):
                ev.append(Evidence(reg, s.line, "schema returns Tensor[]: the list carries the buffer"))
                continue
            n = len(s.schema.returns)
            schema_returns = n if schema_returns is None else schema_returns
            ok = adapter_returns is None or n == adapter_returns
            ev.append(Evidence(reg, s.line, f"schema returns {n} tensor(s)"
                               + ("" if ok else f", the adapter returns {adapter_returns}"), ok))
    if adapter_returns is not None:
        _g2_registered(layers, names, adapter_returns, ev)
    _g2_python(layers, names, schema_returns if schema_returns is not None else adapter_returns, ev)


def _g2_registered(layers: object, names: list[str], returns: int, ev: list[Evidence]) -> None:
    """Functions registered for the op besides the launcher (autograd wrappers, pybind
    entries): a tensor or fixed-size tuple they return must have the launcher's size."""
    assert isinstance(layers, Layers)
    seen: set[str] = set()
    found = wrappers(layers, names, clean=False)
    for w in sorted(found, key=lambda w: w.function.body_open < 0):  # definitions first
        fn = w.function
        if fn.name in seen or fn.type_span is None:
            continue
        seen.add(fn.name)
        n = fixed_count(_read(w.path)[fn.type_span[0] : fn.type_span[1]])
        ev.append(Evidence(w.path, fn.line, f"`{fn.name}` (registered for the op) returns {n} tensor(s)"
                           + ("" if n == returns else f", the launcher returns {returns}"), n == returns))


def _g2_python(layers: object, names: list[str], expected: int | None, ev: list[Evidence]) -> None:
    """Python fakes / Meta impls and torchair converters return the op's outputs,
    profiling_data last (mode B)."""
    assert isinstance(layers, Layers)
    want = "" if expected is None else f" of {expected}"
    for path in fake_files(layers):
        try:
            src = PythonSource(path, _read(path))
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
                        if ok else f"{what} returns {n} value(s), the op returns {expected}" if not count_ok
                        else f"{what} does not return profiling_data last")
                ev.append(Evidence(path, src.line_of(ret), note, ok))
    for path in converter_files(layers):
        try:
            src = PythonSource(path, _read(path))
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
            ev.append(Evidence(path, src.line_of(call), note + ("" if ok else f" (want {PROFILING_OUTPUT} "
                                                                              f"last{want})"), ok))


# --- G3 -----------------------------------------------------------------------------------------


def cann_toolchain() -> str | None:
    """Where a CANN toolchain is, if this machine has one."""
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        value = os.environ.get(var)
        if value and Path(value).is_dir():
            return value
    for exe in ("ccec", "bisheng"):
        found = shutil.which(exe)
        if found:
            return found
    default = Path("/usr/local/Ascend/ascend-toolkit/latest")
    return str(default) if default.is_dir() else None


def gate_g3(analysis: Analysis) -> GateResult:
    script = build_script(analysis.layers)
    where = [Evidence(script, 1, "the project's full build")] if script else []
    found = cann_toolchain()
    if found is None:
        return GateResult("G3", NOT_VERIFIABLE, "no CANN toolchain here (ASCEND_HOME_PATH unset, no ccec): "
                          "run the real build where CANN is installed", where)
    return GateResult("G3", NOT_VERIFIABLE, f"CANN found at {found}; `optrace check` never runs builds: "
                      "run the build script, its exit status is G3", where)


# --- G4, G5 --------------------------------------------------------------------------------------


def _python_na(analysis: Analysis, mode: str) -> str | None:
    layers = analysis.layers
    if not layers.found.get("torch_adapter") and not layers.found.get("registration"):
        return "no torch layer"

    if not caller_files(layers):
        return "no Python samples / tests call the op"
    if mode != "B":
        return "mode A: profiling_data does not reach Python"
    return None


def gate_g4_g5(analysis: Analysis, mode: str) -> tuple[GateResult, GateResult]:
    why = _python_na(analysis, mode)
    if why is not None:
        return GateResult("G4", NA, why), GateResult("G5", NA, why)
    ev4: list[Evidence] = []
    ev5: list[Evidence] = []

    names = set(torch_names(analysis.layers))
    for path in caller_files(analysis.layers):
        _python_file(path, names, ev4, ev5)
    g4 = _gate("G4", ev4, "every call is followed by a device sync, then save_profiling_data",
               "a call of the op does not sync and save its profiling buffer")
    if not ev5:
        g5 = GateResult("G5", PASS, "no caller starts worker processes: paths resolve in the caller's "
                        "working directory when saved")
    else:
        g5 = _gate("G5", ev5, "profiling paths are absolute before any worker starts",
                   "a worker may start with relative profiling paths")
    return g4, g5


def _starts_workers(name: str) -> bool:
    spawn = name.endswith(("spawn", "start_processes")) and ("mp" in name or "multiprocessing" in name)
    return spawn or name.split(".")[-1] == "Process"


def _python_file(path: Path, op_names: set[str], ev4: list[Evidence], ev5: list[Evidence]) -> None:
    data = _read(path)
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


# --- all of them -----------------------------------------------------------------------------------


def evaluate_gates(analysis: Analysis, instrumented: bool) -> list[GateResult]:
    """G1..G5 for one operator (all n/a when it carries no trace points at all)."""
    if not instrumented:
        return [GateResult(g, NA, "not instrumented") for g in TITLES]
    mode = operator_mode(analysis)
    g4, g5 = gate_g4_g5(analysis, mode)
    return [gate_g1(analysis, mode), gate_g2(analysis, mode), gate_g3(analysis), g4, g5]
