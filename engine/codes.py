"""Every OT code optrace can emit: its title, default severity and the page documenting it.

The one source of what a code means (ruff's `codes.rs` in spirit): call sites name a
code as a string, `Diagnostic` takes its default severity from here, SARIF takes the
title and help page from here, and `docs/diagnostics.md` is generated from here
(`python -m optrace.engine.codes > docs/diagnostics.md`; tests/test_codes.py keeps it
current and checks that every code in the source is registered and documented).

Codes outside this table (a trusted team's rules) are allowed: they default to warning.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from enum import StrEnum


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class Code(str):
    """One OT code of the registry, used at every call site (`Diagnostic(OT044, ...)`,
    `f"{path}: {OT044} ..."`): the code itself as a string, with its title, default
    severity and the docs page that explains it."""

    __slots__ = ("doc", "severity", "summary")
    summary: str  # its title (`str.title` is the string method)
    severity: Severity
    doc: str  # the page under docs/ that explains it (and names the code)

    def __new__(cls, code: str, title: str, severity: Severity, doc: str) -> Code:
        self = super().__new__(cls, code)
        self.summary, self.severity, self.doc = title, severity, doc
        return self

    @property
    def code(self) -> str:
        return str.__str__(self)

    def __reduce__(self) -> tuple[Callable[[str], Code], tuple[str]]:
        return lookup, (self.code,)  # unpickled as the registry's own object


E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO  # noqa: E741 — the table reads better

# Input: files, directories, configuration.
OT001 = Code("OT001", "cannot read the input (missing directory or unreadable file)", E, "input-matrix.md")
OT002 = Code("OT002", "invalid TOML in a configuration file", E, "config.md")
OT003 = Code("OT003", "invalid value in a configuration file", E, "config.md")
OT004 = Code("OT004", "a trusted rule module cannot be loaded", E, "config.md")
OT005 = Code("OT005", "rule modules of an untrusted configuration were not loaded", W, "config.md")
OT010 = Code("OT010", "no kernel entry, or the entry does not parse", E, "input-matrix.md")
OT011 = Code("OT011", "cannot read a source file", E, "diagnostics.md")
OT012 = Code("OT012", "binary file (NUL bytes), not parsed", E, "input-matrix.md")
OT013 = Code("OT013", "very large source file", I, "input-matrix.md")
OT014 = Code("OT014", "symlink loop or dangling link", E, "input-matrix.md")
OT015 = Code("OT015", "not one operator directory: it holds several operators", E, "diagnostics.md")
OT016 = Code("OT016", "code nested deeper than the planner follows (256 levels)", E, "diagnostics.md")
OT020 = Code("OT020", "a source file does not fully parse; analysis continues", W, "diagnostics.md")
OT021 = Code("OT021", "an included header is not found (absent submodule?)", I, "diagnostics.md")
OT022 = Code("OT022", "preprocessor conditionals split the entry's statements: read as their first arm", I,
             "diagnostics.md")
OT023 = Code("OT023", "a call the call graph cannot follow, and why (the trace stops there)", I,
             "diagnostics.md")
OT024 = Code("OT024", "a host file named like the op names another operator: not taken (a near miss)", I,
             "diagnostics.md")
OT025 = Code("OT025", "a region's code does not parse: its time moves to the nearest region that can be "
             "placed", W, "diagnostics.md")
OT030 = Code("OT030", "cannot write an output file", E, "input-matrix.md")
# The edit engine and the journal.
OT040 = Code("OT040", "two edits overlap", E, "edits.md")
OT041 = Code("OT041", "an edit lies outside its file", E, "edits.md")
OT042 = Code("OT042", "a file changed while optrace was planning or writing it", E, "edits.md")
OT043 = Code("OT043", "a write failed; the journal rolls it back", E, "edits.md")
OT044 = Code("OT044", "an apply / strip of this operator did not finish", E, "edits.md")
OT045 = Code("OT045", "another optrace process holds the operator", E, "edits.md")
OT046 = Code("OT046", "a journal this user did not record (came with the clone)", E, "edits.md")
OT047 = Code("OT047", "a write outside the repository root", E, "edits.md")
OT048 = Code("OT048", "strip could not take apply's edits back (strip ∘ apply is not the identity): refused",
             E, "faults.md")
# Planning rules (docs/rules.md is generated from the rules themselves).
OT101 = Code("OT101", "keep-existing-points", I, "rules.md")
OT102 = Code("OT102", "lift-main-flow", I, "rules.md")
OT103 = Code("OT103", "merge-thin-wrappers", I, "rules.md")
OT104 = Code("OT104", "fold-depth", I, "rules.md")
OT105 = Code("OT105", "naming", I, "rules.md")
OT106 = Code("OT106", "density", I, "rules.md")
OT107 = Code("OT107", "capacity", I, "rules.md")
OT108 = Code("OT108", "label-budget", I, "rules.md")
OT109 = Code("OT109", "handshake-partners", I, "rules.md")
OT110 = Code("OT110", "same-span", I, "rules.md")
# `optrace preprocess`.
OT200 = Code("OT200", "the source directory does not exist or nothing was written", E, "preprocess.md")
OT201 = Code("OT201", "cannot read a source to preprocess", E, "preprocess.md")
OT202 = Code("OT202", "a label or event a trace point cannot have", E, "preprocess.md")
OT203 = Code("OT203", "a resolved id collision (a note)", I, "preprocess.md")
OT204 = Code("OT204", "a label has a B and no E point (or the reverse)", E, "preprocess.md")
OT205 = Code("OT205", "sources are already preprocessed", E, "preprocess.md")
OT206 = Code("OT206", "cannot write the point map or a source", E, "preprocess.md")
OT207 = Code("OT207", "kernel entries with different core mixes in one map: none recorded", W,
             "preprocess.md")
OT208 = Code("OT208", "`--modify` would rewrite a file that is a symlink or lies outside SRC_DIR: "
             "nothing written", E, "preprocess.md")
# apply: what it would change and what it refuses.
OT300 = Code("OT300", "`--check`: the operator would change", E, "diagnostics.md")
OT302 = Code("OT302", "cannot place a region's points: the code there does not parse", E, "diagnostics.md")
OT310 = Code("OT310", "the OpDef's outputs cannot be read", E, "layers.md")
OT311 = Code("OT311", "a torch schema cannot be read", E, "layers.md")
OT312 = Code("OT312", "a Python file does not parse", E, "layers.md")
OT313 = Code("OT313", "a layer has a shape optrace cannot edit safely", E, "layers.md")
OT314 = Code("OT314", "the mode apply chose (A or B) and why", I, "layers.md")
# check: the trace points as they are.
OT401 = Code("OT401", "a label that is not lowercase `[a-z0-9-]` words, or a bad event", E, "diagnostics.md")
OT402 = Code("OT402", "a label deeper than 7 levels", E, "diagnostics.md")
OT403 = Code("OT403", "no root point: the kernel entry scaffold is missing", E, "diagnostics.md")
OT404 = Code("OT404", "a label has a B and no E anywhere (or the reverse)", E, "diagnostics.md")
OT405 = Code("OT405", "a scope guard does not follow its B", E, "diagnostics.md")
OT406 = Code("OT406", "a label ends while an inner one is still open", E, "diagnostics.md")
OT407 = Code("OT407", "a return / break / continue leaves a B without its E", E, "diagnostics.md")
OT408 = Code("OT408", "a point inside a tile loop (one record per tile)", E, "diagnostics.md")
OT409 = Code("OT409", "the runtime block is older than this optrace", W, "diagnostics.md")
OT410 = Code("OT410", "the kernel entry has no profiling_data parameter", E, "diagnostics.md")
OT411 = Code("OT411", "profiling_data is not the last tensor output of the kernel entry", E,
             "diagnostics.md")
OT412 = Code("OT412", "a hot phase has no points of its own", W, "diagnostics.md")
OT413 = Code("OT413", "a point inside a spin-wait loop (records on every poll)", E, "diagnostics.md")
OT420 = Code("OT420", "code optrace inserted does not compile", E, "diagnostics.md")
OT421 = Code("OT421", "compile safety skipped for a file", W, "diagnostics.md")
# check: the gates.
OT451 = Code("OT451", "gate G1 (preprocess) fails", E, "gates.md")
OT452 = Code("OT452", "gate G2 (output order) fails, or a layer the plan found could not be read", E,
             "gates.md")
OT453 = Code("OT453", "gate G3 (compile) fails", E, "gates.md")
OT454 = Code("OT454", "gate G4 (run + post-process) fails", E, "gates.md")
OT455 = Code("OT455", "gate G5 (paths) fails", E, "gates.md")
OT456 = Code("OT456", "a gate passes over a defect of the operator that optrace's output does not "
             "cause (an infer registered for a misspelt op name)", W, "gates.md")
OT999 = Code("OT999", "internal error (a bug in optrace: exit 3)", E, "diagnostics.md")

_TABLE: tuple[Code, ...] = (
    OT001, OT002, OT003, OT004, OT005, OT010, OT011, OT012, OT013, OT014, OT015, OT016, OT020, OT021,
    OT022, OT023, OT024, OT025, OT030, OT040, OT041, OT042, OT043, OT044, OT045, OT046, OT047, OT048,
    OT101, OT102, OT103, OT104, OT105, OT106, OT107, OT108, OT109, OT110, OT200, OT201, OT202, OT203,
    OT204, OT205, OT206, OT207, OT208, OT300, OT302, OT310, OT311, OT312, OT313, OT314, OT401, OT402,
    OT403, OT404, OT405, OT406, OT407, OT408, OT409, OT410, OT411, OT412, OT413, OT420, OT421, OT451,
    OT452, OT453, OT454, OT455, OT456, OT999,
)

CODES: dict[str, Code] = {c.code: c for c in _TABLE}

# How a code looks in the source and in messages (the registry test scans for it).
CODE_RE = re.compile(r"\bOT\d{3}\b")


def lookup(code: str) -> Code:
    """The registered code; KeyError naming it when it is not one of optrace's."""
    try:
        return CODES[code]
    except KeyError:
        raise KeyError(f"{code} is not a registered optrace code (engine/codes.py)") from None


def default_severity(code: str) -> Severity:
    """The registry's severity; warning for codes outside it (a team's own rules)."""
    found = CODES.get(code)
    return found.severity if found is not None else Severity.WARNING


HEADER = """# Diagnostics: every OT code

Generated by `python -m optrace.engine.codes > docs/diagnostics.md` from the registry in
`engine/codes.py`; tests/test_codes.py keeps it current and checks that every code the
source can emit is registered here and named on its page.

A finding prints as `file:line: OTxxx message`. The severity below is the code's
default (a call site may raise or lower it, e.g. `--strict` turns warnings into errors).
Exit codes: 0 clean, 1 findings, 2 bad input or a refused edit, 3 internal error.

| code | severity | title | documented in |
|------|----------|-------|---------------|
"""

# Longer notes for codes this page is the documentation of.
_NOTES = {
    "OT011": "A file the operator's include graph or `check` needs cannot be read (permissions, a "
             "race with a delete); the kernel entry itself unreadable stops the operator.",
    "OT015": "The directory given holds operator directories below it (`ascend_kernels/`, `csrc/`): "
             "the message lists them; give one, or run the multi-operator form.",
    "OT020": "tree-sitter found syntax it cannot parse; the regions named are left out of the call "
             "graph and the plan carries on with the rest.",
    "OT021": "An `#include` that resolves nowhere in the repository or the configured include "
             "paths (often a git submodule that is not checked out); a note only.",
    "OT022": "A `#if` that opens in one statement and closes in another (`} else if` under `#if`) "
             "(or two heads share one parameter list) can cost tree-sitter the whole kernel entry; the "
             "entry is then read as the first arm of each conditional (offsets unchanged), and the "
             "other arms are not planned.",
    "OT016": "The planner walks statements one inside another — blocks, `#if` arms, loops and the "
             "calls it follows into other functions. Past 256 levels (no real kernel comes close) "
             "it stops with this error at the statement that crossed the bound, instead of "
             "exhausting the interpreter's stack; nothing is written.",
    "OT024": "A host file outside the operator directory whose name holds the op's name among "
             "other words (`aclnn_add_rms_norm.h` for the op `rms_norm`, `aclnn_fused_sgd.h` for "
             "`sgd`) is another operator's: a file is the op's when its name, in normal form "
             "(lower case, without underscores), is the op's. The plan lists each near miss so a "
             "file that is the op's after all can be named in the config.",
    "OT023": "A call from the kernel entry or the kernel class's steps that the call graph could "
             "not follow: its receiver's class is not in the files read (an absent header), its "
             "type is a template parameter no class is bound to (a dependent name), it goes "
             "through a function pointer, or the class has no such method optrace can see. The "
             "plan names it at the call with the reason; on a root-only or thin tree (nothing "
             "but setup below the root) it is a warning — that call is where the trace stops.",
    "OT300": "`apply --check` / `strip --check`: the tree is not what the command would write "
             "(exit 1), as ruff's `--check`.",
    "OT025": "A region bracketing code tree-sitter misreads (a macro that takes a type, "
             "`CALL_OP_IMPL(int, 0)`) could get its points mid-expression. The plan leaves it out: "
             "its time is counted in the nearest region around it that can be placed (the kernel "
             "entry at worst), its children that parse move up keeping their labels, and the "
             "warning names both places. Only the kernel entry itself refuses the operator.",
    "OT302": "apply refuses to place a region's points where the code does not parse. Planning "
             "moves every such region to a parent that can be placed first (OT025), so this is "
             "left for a region planning could not see.",
    "OT401": "`check` reads every TRACE_POINT in the operator's files; a label outside "
             "lowercase `[a-z0-9-]` words, or an event other than B / E, is reported.",
    "OT402": "Labels nest by `-`-separated levels; one deeper than 7 is reported.",
    "OT403": "An instrumented operator has the root point `processing` in the kernel entry's "
             "scaffold; without it the records have no root.",
    "OT404": "Every B point needs its E point somewhere in the operator (and the reverse).",
    "OT405": "A scope guard (the RAII form of an E point) must directly follow its B point.",
    "OT406": "Points nest: an outer label cannot end while an inner one is open.",
    "OT407": "A `return` / `break` / `continue` / `goto` between a B and its E leaves the label "
             "open on that path.",
    "OT408": "A point inside a loop over tiles records once per tile and overflows the slot; "
             "points belong around the loop.",
    "OT409": "The runtime block apply inserted comes from an older optrace; `apply` updates it.",
    "OT410": "Gate G2's kernel side: the entry has no `profiling_data` parameter.",
    "OT411": "Gate G2's kernel side: a tensor output comes after `profiling_data`.",
    "OT412": "A phase the plan marks hot has no points of its own (only its children's).",
    "OT413": "A loop that polls memory another core or rank writes, moving no payload, is a spin "
             "wait: a point inside it records on every poll and fills the slot with the wait's "
             "noise. Its one region belongs around the whole loop.",
    "OT420": "`check` compiles the files optrace changed against the host stub header and keeps "
             "the errors on lines optrace inserted.",
    "OT421": "The compile safety check could not run on a file (no libclang, a file it cannot "
             "parse); the reason is named. libclang runs in a child process with a time and a "
             "memory bound (started as soon as the operator is analysed, while the gates and the "
             "plan are worked out; the bound counts from that start): a file that crashes it (a "
             "template nested thousands deep) or hits a bound is named here, and the other files "
             "are still checked.",
    "OT999": "An exception optrace did not expect: the traceback is printed, exit 3. Please "
             "report it.",
}


def render() -> str:
    rows = [f"| {c.code} | {c.severity.value} | {c.summary} | [{c.doc}]({c.doc}) |\n" for c in _TABLE]
    notes = [f"\n### {code}\n\n{CODES[code].summary}. {text}\n" for code, text in _NOTES.items()]
    return HEADER + "".join(rows) + "\n## Codes documented on this page\n" + "".join(notes)


if __name__ == "__main__":
    sys.stdout.write(render())
