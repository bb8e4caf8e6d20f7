"""Gates G1–G5 of an operator, read from the tree as it is (optrace's work or by hand).

Each gate is ✓ (pass), ✗ (fail), n/a (the operator lacks the layers the gate needs) or
"not verifiable here", with evidence as `file:line` notes. A failing gate is also an
error finding (`OT451`..`OT455`), so `optrace check` exits 1.

The gates are assembled from the layers' `verify` (`codemods/registry.py`, one ordered
registry): G1 from the build hook, G2 from every layer that carries profiling_data (and
the Python callers that are library code), G4 and G5 from the Python callers that are
samples / tests. A layer the operator has whose verify read nothing — its
files unreadable, or nothing in them the layer's reader recognises — fails its gate with
a note naming the layer and why; it never passes unread. Only G3 is "not verifiable here".

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
  return as many; Python fakes / Meta impls and torchair converters return it last;
  library code calling the op (mode B) unpacks it.
- **G3 compile** (OT453): the real build — never run by `check`: "not verifiable here"
  (the summary says whether a CANN toolchain was found, and which script to run).
- **G4 run + post-process** (OT454): after each call of the op in a sample / test, a
  device sync, then `save_profiling_data(...)`; the collector run is reported when present.
  Library code calling the op is G2's: it unpacks the buffer, never saves it.
- **G5 paths** (OT455): in callers that start workers (`multiprocessing.spawn`,
  `Process`), the profiling paths are made absolute (`expanduser().resolve()`) before
  the first worker starts.
"""

from __future__ import annotations

from optrace.codemods.kernel_entry import recorded_mode
from optrace.codemods.layer import Evidence, Layer, Operator
from optrace.codemods.op_def import opdef_file, parse_opdef
from optrace.codemods.python_files import split_callers
from optrace.codemods.registry import LAYERS, layer
from optrace.engine.analysis import Analysis
from optrace.engine.diagnostics import InputError
from optrace.engine.source import read_regular
from optrace.pipeline.gate_result import (
    FAIL,
    NA,
    NOT_VERIFIABLE,
    PASS,
    TITLES,
    GateResult,
    cann_toolchain,
)

__all__ = ["Evidence", "GateResult", "evaluate_gates", "operator_mode"]

def _gate(gate: str, evidence: list[Evidence], summary_ok: str, summary_fail: str) -> GateResult:
    failed = [e for e in evidence if not e.ok]
    if failed:
        return GateResult(gate, FAIL, summary_fail, evidence)
    return GateResult(gate, PASS, summary_ok, evidence)


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


# --- what the layers say ------------------------------------------------------------------------


def layer_evidence(lay: Layer, op: Operator) -> list[Evidence] | None:
    """What one layer's verify proves, None when the operator does not have the layer.

    A layer found and not read is a failing fact naming it and why, never silence."""
    try:
        files = lay.find(op.layers)
    except InputError as exc:  # finding its files meant reading another layer that refuses
        d = exc.diagnostic
        return [Evidence(d.path, d.line, f"{lay.NAME} not found: {d.code} {d.message}", False)]
    if not files:
        return lay.absent(op)
    if lay.MODE_B_ONLY and op.mode != "B":
        return [Evidence(files[0], 0, f"{lay.NAME}: mode {op.mode}, profiling_data does not reach it")]
    shown = ", ".join(p.name for p in files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    try:
        model = lay.read(op, files)
        evidence = [*model.unreadable, *lay.verify(model)]
    except InputError as exc:  # a reader refusing the layer's shape: say so, with its place
        d = exc.diagnostic
        return [Evidence(d.path or files[0], d.line, f"{lay.NAME} not read: {d.code} {d.message}", False)]
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return [Evidence(files[0], 0, f"{lay.NAME} not read ({shown}): {exc}", False)]
    if not evidence:
        return [Evidence(files[0], 1, f"{lay.NAME} not read: nothing in {shown} is what optrace reads as "
                         f"the {lay.DESCRIPTION.split(':')[0]}", False)]
    return evidence


# --- G1, G2, G4, G5 from the layers ------------------------------------------------------------------


def _from(gate: str, evidence: list[Evidence], summary_ok: str, summary_fail: str) -> GateResult:
    failed = [e for e in evidence if not e.ok]
    return GateResult(gate, FAIL if failed else PASS, summary_fail if failed else summary_ok, evidence)


def _layer_gates(analysis: Analysis, mode: str) -> list[GateResult]:
    op = Operator(analysis, mode)
    found: dict[str, list[Evidence]] = {}
    for lay in LAYERS:  # registry order: later layers use what earlier ones learnt
        ev = layer_evidence(lay, op)
        if ev is not None:
            found[lay.NAME] = ev
    hook = found.get("build_hook")
    g1 = (GateResult("G1", NA, "no build script found for this operator") if hook is None else
          _from("G1", hook, "the build preprocesses the kernels it compiles and writes the point map",
                "the point map does not come from the build that compiles the kernels"))
    callers = found.get("python_callers", [])
    samples = "python_callers" in found and _has_samples(op)
    # Library code calling the op is G2's evidence (it unpacks profiling_data, mode B); so
    # is the callers' unread / unreadable fact when no sample or test calls the op.
    g2_ev = [e for lay in LAYERS if lay.GATE == "G2" for e in found.get(lay.NAME, [])]
    g2_ev += [e for e in callers if e.gate == "G2" or (not samples and not e.gate and not e.ok)]
    g2 = _from("G2", g2_ev, "profiling_data is the last output in every layer the operator has",
               "profiling_data is not in the same (last) position in every layer")
    torch = "torch_adapter" in found or "registration" in found
    why = _python_na(mode, torch, samples)
    if why is not None:
        return [g1, g2, GateResult("G4", NA, why), GateResult("G5", NA, why)]
    ev4 = [e for e in callers if e.gate not in ("G2", "G5")]
    ev5 = [e for e in callers if e.gate == "G5"]
    g4 = _from("G4", ev4, "every call is followed by a device sync, then save_profiling_data",
               "a call of the op does not sync and save its profiling buffer")
    if not ev5:
        g5 = GateResult("G5", PASS, "no caller starts worker processes: paths resolve in the caller's "
                        "working directory when saved")
    else:
        g5 = _from("G5", ev5, "profiling paths are absolute before any worker starts",
                   "a worker may start with relative profiling paths")
    return [g1, g2, g4, g5]


def _has_samples(op: Operator) -> bool:
    """Some of the op's Python callers are samples / tests (the rest is library code)."""
    try:
        files = layer("python_callers").find(op.layers)
    except InputError:  # its "not found" evidence is G4's
        return True
    return bool(split_callers(files, op.layers.repo_root, op.analysis.config.sample_globs)[0])


def _python_na(mode: str, torch: bool, samples: bool) -> str | None:
    """Why G4 / G5 do not apply, from the layers the registry found."""
    if not torch:
        return "no torch layer"
    if not samples:
        return "no Python samples / tests call the op"
    if mode != "B":
        return "mode A: profiling_data does not reach Python"
    return None


# --- G3 -----------------------------------------------------------------------------------------


def gate_g3(analysis: Analysis) -> GateResult:
    script = next(iter(_build_hook().find(analysis.layers)), None)
    where = [Evidence(script, 1, "the project's full build")] if script else []
    found = cann_toolchain()
    if found is None:
        return GateResult("G3", NOT_VERIFIABLE, "no CANN toolchain here (ASCEND_HOME_PATH unset, no ccec): "
                          "run the real build where CANN is installed", where)
    return GateResult("G3", NOT_VERIFIABLE, f"CANN found at {found}; `optrace check` never runs builds: "
                      "run the build script, its exit status is G3", where)


def _build_hook() -> Layer:
    return next(lay for lay in LAYERS if lay.NAME == "build_hook")


# --- all of them -----------------------------------------------------------------------------------


def evaluate_gates(analysis: Analysis, instrumented: bool) -> list[GateResult]:
    """G1..G5 for one operator (all n/a when it carries no trace points at all)."""
    if not instrumented:
        return [GateResult(g, NA, "not instrumented") for g in TITLES]
    mode = operator_mode(analysis)
    g1, g2, g4, g5 = _layer_gates(analysis, mode)
    return [g1, g2, gate_g3(analysis), g4, g5]
