"""The words optrace writes and reads, defined once: provenance markers, the profiling
buffer's names and how to recognise them, the TRACE_POINT call, the modes, and the
patterns of a torch launch (`EXEC_NPU_CMD` / `EXEC_KERNEL_CMD`) and of a registration
(`TORCH_LIBRARY` / `PYBIND11_MODULE`).

Discovery, the codemods, strip, check and preprocess all ask this module, so what one
of them writes or finds is what the others read (they used to keep their own copies,
which had drifted: discovery found launches the torch codemod could not read).
"""

from __future__ import annotations

import re
from functools import lru_cache

from optrace.engine.names import op_name_pattern

# --- provenance markers (what `strip` removes, exactly) -----------------------------------------

LINE_MARK = b"  // optrace"  # ends a C++ line optrace inserted
HASH_MARK = b"  # optrace"  # ends a Python / shell / CMake line optrace inserted
FRAG_OPEN = b"/*optrace<*/"  # around a fragment inserted inside a line
FRAG_CLOSE = b"/*>optrace*/"
STR_OPEN = b'"/*optrace-str<*/'  # around a fragment inserted inside a string literal (a schema)
STR_CLOSE = b'/*>optrace-str*/"'
CREATED_MARK = b"// optrace-created-file:"  # first line of a file optrace created
SCAFFOLD_BEGIN = b"// optrace-scaffold begin"  # the kernel entry's prologue, `mode=A|B`
SCAFFOLD_END = b"// optrace-scaffold end"
RUNTIME_BLOCK_BEGIN = b"// optrace-runtime-block v"  # + its version
RUNTIME_BLOCK_END = b"// optrace-runtime-block end"
EDIT_MARK = b"# optrace-edit"  # + N: the next N Python lines are a statement optrace rewrote
HOIST_NAME = "_optrace_outputs"  # a hoisted call's old outputs, where the call stood
OFF_MARK = b"# optrace-off: "  # a build script's line optrace turned into a comment
HOOK_START = b"# TRACE_PREPROCESSOR_HOOK_START"  # the build hook block
HOOK_END = b"# TRACE_PREPROCESSOR_HOOK_END"

RUNTIME_BLOCK_VERSION_RE = re.compile(re.escape(RUNTIME_BLOCK_BEGIN) + rb"(\d+)")
# A line carrying any of optrace's insertions (check's compile safety keeps errors on these).
INSERTED_LINE_RE = re.compile(rb"//\s*optrace\b|" + re.escape(FRAG_OPEN) + rb"|optrace-scaffold|"
                              rb"optrace-runtime-block")

# --- modes -------------------------------------------------------------------------------------

MODE_A = "A"  # profiling_data optional: no arity change above the kernel
MODE_B = "B"  # profiling_data the last output of the op, up to Python
MODES = (MODE_A, MODE_B)
MODE_RE = re.compile(re.escape(SCAFFOLD_BEGIN) + rb" mode=([AB])")  # the mode apply recorded

# --- the profiling buffer's names ----------------------------------------------------------------

PROFILING_OUTPUT = "profiling_data"  # kernel parameter, OpDef output, schema return, Python name
PROFILING_VAR = "profilingData"  # C++ variables and parameters on the host
PROFILING_NAMES = (PROFILING_OUTPUT, PROFILING_VAR)
NUMEL_MACRO = "OPTRACE_PROFILING_NUMEL"
INDEX_VAR = "optraceProfilingDataIndex"


def names_profiling(text: str | bytes) -> bool:
    """An identifier or expression that names the profiling buffer, however it is spelled
    by hand (`profiling_data`, `profilingData`, `ProfilingOut`, `outputs[kProfiling]`)."""
    if isinstance(text, bytes):
        return b"profiling" in text.lower()
    return "profiling" in text.lower()


# --- the trace point -----------------------------------------------------------------------------

# `TRACE_POINT("label", "B")`: group 1 the label (escapes kept, no newline), group 2 the
# event type. One pattern for every reader of points (planning's existing points, check,
# preprocess), so they agree on what a point is.
TRACE_POINT_CALL = rb'TRACE_POINT\s*\(\s*"((?:[^"\\\n]|\\.)*)"\s*,\s*"([^"\n]*)"\s*\)'

# A label is lowercase words, one level each under the root `processing`: at most
# MAX_DEPTH levels in all. preprocess refuses a point that breaks this, and check reports
# it, from this one definition.
MAX_DEPTH = 7
_LABEL_RE = re.compile(r"^[a-z0-9-]+( [a-z0-9-]+)*$")


def label_problem(label: str, event: str) -> str:
    """What is wrong with a point `TRACE_POINT(label, event)`, or "" when nothing is."""
    if event not in ("B", "E"):
        return f'event type "{event}" must be "B" or "E"'
    if not _LABEL_RE.match(label):
        return f'label "{label}" must be lowercase words of [a-z0-9-] separated by single spaces'
    if label != "processing" and len(label.split()) > MAX_DEPTH - 1:
        return f'label "{label}" is deeper than {MAX_DEPTH} levels (processing + {MAX_DEPTH - 1})'
    return ""

# --- torch: launches and registrations ----------------------------------------------------------


@lru_cache(maxsize=256)
def launch_pattern(op_name: str) -> re.Pattern[bytes]:
    """A launch of the op: `EXEC_NPU_CMD(aclnn<Op>, ...)` (the op in any spelling, `_V2`
    variants too, and ops-nn torch extensions' `ACLNN_CMD` of the same shape; group 1
    the macro) or `EXEC_KERNEL_CMD(<op>, ...)` (group 2)."""
    camel = op_name_pattern(op_name)
    op = re.escape(op_name.encode())
    return re.compile(rb"\b(EXEC_NPU_CMD(?:_V\d+)?|ACLNN_CMD)\s*\(\s*aclnn" + camel
                      + rb"\b|\b(EXEC_KERNEL_CMD)\s*\(\s*" + op + rb"\b")


# What every launch above names (`EXEC_NPU_CMD`, `ACLNN_CMD`, `EXEC_KERNEL_CMD`) and every
# registration below (`TORCH_LIBRARY...`, `PYBIND11_MODULE`): a file without them is passed
# over without its pattern, which, starting with `\b`, would walk the file byte by byte.
LAUNCH_HINT = b"_CMD"
REGISTRATION_HINTS = (b"TORCH_LIBRARY", b"PYBIND11_MODULE")


def may_register(code: bytes) -> bool:
    """False when `code` cannot hold a REGISTRATION_RE match (a substring test)."""
    return any(h in code for h in REGISTRATION_HINTS)


# A library block that defines schemas (`m.def(...)`): TORCH_LIBRARY, _FRAGMENT, _EXPAND.
TORCH_LIBRARY_RE = re.compile(rb"\bTORCH_LIBRARY(?:_FRAGMENT|_EXPAND)?\s*\(")
# Any registration of torch ops: the above, implementations (TORCH_LIBRARY_IMPL) and pybind.
REGISTRATION_RE = re.compile(rb"\bTORCH_LIBRARY(?:_FRAGMENT|_EXPAND|_IMPL)?\s*\(|\bPYBIND11_MODULE\s*\(")
# A Meta implementation block: group 1 the name of the module variable.
META_IMPL_RE = re.compile(
    rb"TORCH_LIBRARY_IMPL\s*\(\s*\w+\s*,\s*(?:c10::DispatchKey::)?Meta\s*,\s*(\w+)\s*\)\s*\{"
)
