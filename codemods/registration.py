"""Registration: the op's torch schema and the adapter's declarations follow (gate G2).

DESCRIPTION: in mode B, every `TORCH_LIBRARY` / `_FRAGMENT` / `_EXPAND` schema string of
the op (`m.def("op(...) -> (Tensor, Tensor)")`) gains one `Tensor` return, spliced into
the literal as an adjacent literal (`"... Tensor"/*optrace-str<*/", Tensor"/*>optrace-str*/")"`);
a `-> Tensor[]` return already carries the extra element and stays. The adapter's C++
declarations (in the headers the registration and adapter include) get the same return
type as its definition. `PYBIND11_MODULE` `m.def("op", &fn)` entries point at the adapter,
whose new type they pick up: they stay valid untouched. Mode A changes nothing here
(the Python arity is unchanged).

Every schema of the op is parsed in both modes (`torch_schema.py`: torch's whole
grammar, `Tensor(a!)`, `Tensor!`, `Tensor?[]`, `*`, defaults, overloads, named returns —
named returns name the new one `profiling_data`): one that does not parse is bad input
(`file:line`, exit 2, nothing written).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

from optrace.codemods.layer import EXAMPLE_TORCH, Evidence, LayerExample, LayerModel, LocatingLayer
from optrace.codemods.layer_common import (
    CODE_SCHEMA,
    PROFILING_OUTPUT,
    clean_bytes,
    input_error,
    mask_keep_includes,
    match_bracket,
    string_fragment,
    string_literals,
)
from optrace.codemods.torch_adapter import (
    adapter_functions,
    hand_instrumented,
    return_type_edits,
    return_type_growth,
    torch_names,
)
from optrace.codemods.torch_schema import Schema, parse_schema, returns_list
from optrace.engine.cache import by_content
from optrace.engine.cpp import functions, mask
from optrace.engine.diagnostics import InputError
from optrace.engine.discovery import CPP_EXTS, LayerFile, Layers, SearchContext, repo_index
from optrace.engine.edits import Edit, line_number, resolve
from optrace.engine.names import op_key, op_name_pattern
from optrace.engine.plan import Plan
from optrace.engine.probes import looked_at
from optrace.engine.source import read_regular
from optrace.engine.vocabulary import REGISTRATION_RE, TORCH_LIBRARY_RE, may_register

__all__ = ["Schema", "SchemaString", "parse_schema", "registration_edits", "returns_list", "schema_strings"]

CODEMOD = "registration"

_DEF_RE = re.compile(rb"\.\s*def\s*\(")


@dataclass(frozen=True)
class SchemaString:
    """A torch schema string literal of a registration, with each character's file offset."""

    path: Path
    text: str
    offsets: tuple[int, ...]  # file offset of each character of text
    line: int
    schema: Schema


def registration_files(layers: Layers) -> list[Path]:
    """Discovered registrations, plus files defining a schema under one of the op's torch
    names (found by that name when it differs from the kernel op's)."""
    files = [f.path for f in layers.found.get("registration", [])]
    extra = [n for n in torch_names(layers) if n != layers.op_name]
    for path in repo_index(layers.repo_root).mentioning(*[n.encode() for n in extra]):
        if path.suffix.lower() in CPP_EXTS and path not in files and re.search(
                TORCH_LIBRARY_RE, read_regular(path)):
            files.append(path)
    return files


def schema_strings(path: Path, data: bytes, op_name: str | Sequence[str]) -> list[SchemaString]:
    """The op's schema strings in `.def(...)` calls of a registration file (`op_name`:
    one name or all the op's torch names)."""
    names = [op_name] if isinstance(op_name, str) else list(op_name)
    wanted = _name_pattern(tuple(names))
    out = []
    for text, offsets, first_lit in _def_strings(bytes(data)):
        # A cheap test first: a schema of the op spells one of its names (in any spelling).
        key = op_key(text)
        if not any(op_key(n) in key for n in names) or wanted.match(text) is None:
            continue
        try:
            schema = parse_schema(text)
        except ValueError as exc:
            name = text.split("(")[0].strip()
            raise input_error(CODE_SCHEMA, f"the schema of `{name}` does not parse: {exc}", path, data,
                              first_lit) from None
        out.append(SchemaString(path, text, offsets, line_number(data, first_lit), schema))
    return out


@lru_cache(maxsize=256)
def _name_pattern(names: tuple[str, ...]) -> re.Pattern[str]:
    """A schema string naming one of `names` in any spelling (`ns::name.overload(`)."""
    spellings = "|".join(op_name_pattern(n).decode() for n in names)
    return re.compile(r"\s*(?:\w+::)?(?:" + spellings + r")(?:\.\w+)?\s*\(")


_SCHEMA_WRAPPER_RE = re.compile(rb"\s*(?:TORCH_SELECTIVE_SCHEMA|(?:torch|c10)::schema)\s*\(")
_ESCAPES = {ord("n"): "\n", ord("t"): "\t"}


def _first_argument_end(code: bytes, start: int, close: int) -> int:
    """Where the first top-level argument of code[start:close] ends (a `,` or `close`)."""
    depth = 0
    for i in range(start, close):
        if code[i] in b"([{":
            depth += 1
        elif code[i] in b")]}":
            depth -= 1
        elif code[i] == 0x2C and depth == 0:
            return i
    return close


@by_content(32)
def _def_strings(data: bytes) -> tuple[tuple[str, tuple[int, ...], int], ...]:
    """Every `.def(...)` whose first argument is a (sequence of) string literal(s), in file
    order: the literal text, the file offset of each of its characters and where its first
    literal starts. Whatever the op, a file's candidates are the same: cached by content
    (a registration file lists every operator of the repository)."""
    code = mask(data)
    out = []
    for m in _DEF_RE.finditer(code):
        close = match_bracket(code, m.end() - 1)
        if close < 0:
            continue
        start = m.end()
        first_end = _first_argument_end(code, start, close)
        wrapper = _SCHEMA_WRAPPER_RE.match(code, start, first_end)
        if wrapper is not None:  # m.def(TORCH_SELECTIVE_SCHEMA("...")), m.def(torch::schema("...", kind))
            inner_close = match_bracket(code, wrapper.end() - 1)
            if inner_close < 0:
                continue
            start, first_end = wrapper.end(), _first_argument_end(code, wrapper.end(), inner_close)
        lits = string_literals(data, start, first_end)
        between = code[start : first_end]
        if not lits or re.sub(rb'"[^"]*"', b"", between).strip():
            continue  # not a (sequence of) string literal(s): pybind's m.def("name", &fn)
        text_parts: list[str] = []
        offsets: list[int] = []
        for s, e in lits:
            raw = data[s + 1 : e - 1]
            i = 0
            while i < len(raw):
                if raw[i : i + 2] in (b"\\\n", b"\\\r"):
                    i += 2 if raw[i : i + 2] == b"\\\n" else 3  # line splice inside the literal
                    continue
                if raw[i] == 0x5C and i + 1 < len(raw):  # an escape: `\"mean\"` is `"mean"`
                    text_parts.append(_ESCAPES.get(raw[i + 1], chr(raw[i + 1])))
                    offsets.append(s + 1 + i)
                    i += 2
                    continue
                text_parts.append(chr(raw[i]))
                offsets.append(s + 1 + i)
                i += 1
        out.append(("".join(text_parts), tuple(offsets), lits[0][0]))
    return tuple(out)


def _schema_edits(s: SchemaString) -> list[Edit]:
    sch = s.schema
    if returns_list(sch):
        return []
    # Named returns (`-> (Tensor(a!) values, Tensor indices)`) name the new one too.
    extra = f"Tensor {PROFILING_OUTPUT}".encode() if sch.named_returns else b"Tensor"
    if sch.parenthesised:
        close = s.offsets[sch.returns_end - 1]
        return [string_fragment(s.path, close, b", " + extra if sch.returns else extra, CODEMOD,
                                "one more return")]
    first = s.offsets[sch.returns_start]
    last = s.offsets[sch.returns_end - 1] + 1
    return [string_fragment(s.path, first, b"(", CODEMOD, "one more return"),
            string_fragment(s.path, last, b", " + extra + b")", CODEMOD, "one more return")]


def declaration_files(layers: Layers) -> list[Path]:
    """Registration files and the local headers they and the adapters include."""
    seen: list[Path] = []
    sources = [*registration_files(layers), *[f.path for f in layers.found.get("torch_adapter", [])]]
    for src in sources:
        if src not in seen:
            seen.append(src)
        try:
            data = read_regular(src)
        except OSError:
            continue
        for m in re.finditer(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', mask_keep_includes(data), re.M):
            spelled = src.parent / m.group(1).decode(errors="replace")
            looked_at(spelled)  # whether it is there, and where it leads, decide the list
            target = spelled.resolve()
            if target.is_file() and layers.repo_root in target.parents and target not in seen \
                    and "op_kernel" not in target.parts:
                seen.append(target)
    return seen


Region = tuple[int, int]


@dataclass(frozen=True)
class RegistrationTarget:
    """A schema string whose returns take one more `Tensor`, or a declaration of the
    launcher whose return type grows (located; the fragments are `render_registration`'s).
    Never the sizes macro."""

    path: Path
    data: bytes  # the clean bytes
    schema: SchemaString | None = None
    type_span: tuple[int, int] | None = None
    sizes: bool = False


def _registration_scan(plan: Plan, mode: str) -> tuple[list[RegistrationTarget], dict[Path, list[Region]]]:
    """What mode B changes (nothing in mode A, or for a kernel instrumented by hand), and
    the regions of each file that belong to this op: its schema strings and its adapter's
    declared return types. Registration files are often shared by several operators; only
    these regions are this op's to rewrite or strip. Raises for a schema of the op that
    does not parse (both modes) and a declaration returning void (mode B)."""
    layers = plan.analysis.layers
    targets: list[RegistrationTarget] = []
    regions: dict[Path, list[Region]] = {}
    edit = mode == "B" and not hand_instrumented(plan)
    names = torch_names(layers)
    for reg_path in registration_files(layers):
        data = clean_bytes(reg_path)
        for s in schema_strings(reg_path, data, names):
            regions.setdefault(reg_path, []).append((s.offsets[0] - 1, s.offsets[-1] + 2))
            if edit and not returns_list(s.schema):  # `-> Tensor[]` carries the new element
                targets.append(RegistrationTarget(reg_path, data, schema=s))
    adapters = adapter_functions(layers)
    launchers = {fn.name for fns in adapters.values() for fn in fns}
    definitions = {fn.start for fns in adapters.values() for fn in fns}
    for path in declaration_files(layers):
        data = clean_bytes(path)
        for fn in functions(data, declarations=True):
            if fn.body_open >= 0 or fn.name not in launchers or fn.type_span is None:
                continue
            if path in adapters and fn.start in definitions:
                continue
            regions.setdefault(path, []).append((fn.type_span[0], fn.type_span[1]))
            if edit and return_type_growth(path, data, fn.type_span) is not None:
                targets.append(RegistrationTarget(path, data, type_span=fn.type_span))
    return targets, regions


def locate_registration(plan: Plan, mode: str) -> list[RegistrationTarget]:
    return _registration_scan(plan, mode)[0]


def render_registration(located: Sequence[RegistrationTarget]) -> list[Edit]:
    """One more return in each located schema string, one more tensor in each located
    declaration's return type."""
    edits: list[Edit] = []
    for target in located:
        if target.schema is not None:
            edits.extend(_schema_edits(target.schema))
        else:
            edits.extend(return_type_edits(target.path, target.data, target.type_span, CODEMOD))
    return edits


def registration_changes(plan: Plan, mode: str) -> tuple[list[Edit], dict[Path, list[Region]]]:
    """Edits (on clean bytes), and the regions of each file that belong to this op
    (`_registration_scan`)."""
    targets, regions = _registration_scan(plan, mode)
    return render_registration(targets), regions


def registration_edits(plan: Plan, mode: str) -> list[Edit]:
    return registration_changes(plan, mode)[0]


_REGISTERED_RE = re.compile(rb'\.(?:def|impl)\s*\(\s*(?:TORCH_SELECTIVE_SCHEMA\s*\(\s*)?"')
_NAME_RE = re.compile(rb"(?:\w+::)?(\w+)")


def _no_schema_here(path: Path, data: bytes, names: Sequence[str]) -> list[Evidence]:
    """A file found for the op that holds no schema of it: one registering only its
    kernels for a dispatch key (`TORCH_LIBRARY_IMPL(ns, Meta, m)`: the torch adapter
    layer's part), or another operator's registration naming this op in a string. Either
    way nothing here carries the op's outputs: said, not failed."""
    registered = []
    for m in _REGISTERED_RE.finditer(mask(data)):  # outside comments and strings
        name = _NAME_RE.match(data, m.end())
        if name is not None:
            registered.append((name.group(1).decode(), data.count(b"\n", 0, m.start()) + 1))
    if not registered:
        return []
    mine = [(n, line) for n, line in registered if n in names]
    if mine:
        return [Evidence(path, mine[0][1], f"registers kernels of `{mine[0][0]}` for a dispatch key, "
                         "no schema (the schema is in the op's registration file)")]
    others = sorted({n for n, _ in registered})
    more = f" and {len(others) - 3} more" if len(others) > 3 else ""
    shown = ", ".join(f"`{n}`" for n in others[:3]) + more
    return [Evidence(path, registered[0][1], f"registers {shown}, not this op (its names: "
                     f"{', '.join(names)}): another operator's registration, left as it is")]


class RegistrationLayer(LocatingLayer[RegistrationTarget]):
    NAME: ClassVar[str] = "registration"
    DESCRIPTION: ClassVar[str] = "torch registration (PYBIND11_MODULE / TORCH_LIBRARY): the schema's returns"
    MODE_B_ONLY: ClassVar[bool] = True
    FOUND_KEY: ClassVar[str | None] = "registration"
    TITLE: ClassVar[str] = "torch registration (PYBIND11_MODULE / TORCH_LIBRARY)"
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (
        LayerExample(
            path="csrc/registration.cpp",
            files=EXAMPLE_TORCH,
            changes=(('-> Tensor");',
                      '-> "/*optrace-str<*/"("/*>optrace-str*/"Tensor"/*optrace-str<*/", Tensor)"'
                      '/*>optrace-str*/"");'),),
        ),
        # The header declaring the adapter gets the definition's return type.
        LayerExample(
            path="csrc/functions.h",
            files=EXAMPLE_TORCH,
            changes=(("at::Tensor demo_op(",
                      "/*optrace<*/std::tuple</*>optrace*/at::Tensor/*optrace<*/, at::Tensor>"
                      "/*>optrace*/ demo_op("),),
        ),
    )

    def search(self, ctx: SearchContext) -> list[LayerFile]:
        """Files registering the op: a registration naming it in a string — a schema
        (`"ns::op(Tensor x) -> Tensor"`), an impl or def name, a pybind name — not
        anywhere in the file (a message may say the op's name)."""
        op_string = re.compile(rb"[\"'](?:\w+::)?(?:" + ctx.camel + rb"|" + ctx.any_name
                               + rb")(?:\.\w+)?\s*[(\"']")
        return [ctx.at(path, code, op_string.pattern, "registers the op")
                for path, code in ctx.cpp_candidates()
                if may_register(code) and REGISTRATION_RE.search(code) and op_string.search(code)]

    def find(self, layers: Layers) -> list[Path]:
        return registration_files(layers)

    def locate(self, plan: Plan, mode: str) -> list[RegistrationTarget]:
        return locate_registration(plan, mode)

    def render(self, plan: Plan, mode: str, located: Sequence[RegistrationTarget]) -> list[Edit]:
        return render_registration(located)

    def owned(self, plan: Plan) -> set[Path]:
        """The files holding the op's schema strings: registration files are often shared
        by several operators, and only these regions of them are this op's."""
        return {resolve(path) for path in _registration_scan(plan, "A")[1]}

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
            if not strings and b"PYBIND11_MODULE" not in data:
                ev.extend(_no_schema_here(path, data, names))
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
