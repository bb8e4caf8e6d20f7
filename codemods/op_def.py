"""OpDef: `profiling_data` as the op's last output (gate G2, op_host side).

DESCRIPTION: add `this->Output("profiling_data")` after the OpDef's last output, written
like that output (same chain layout, DataType / Format / UnknownShapeFormat lists of the
same length) with every dtype int64 and every format ND; `ParamType(REQUIRED)` in mode
B, `OPTIONAL` in mode A.

The new statement is a copy of the last output's statement (so it follows the file's
formatting and list lengths) with the name, the ParamType, the dtypes and the formats
replaced; chained calls other than ParamType / DataType(List) / Format(List) /
UnknownShapeFormat / AutoContiguous / IgnoreContiguous are left out. Every line ends
with `  // optrace`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from optrace.codemods.layer import Evidence, LayerExample, LayerModel, LocatingLayer
from optrace.codemods.layer_common import (
    CODE_LAYER_SHAPE,
    CODE_OPDEF_OUTPUTS,
    LINE_MARK,
    PROFILING_OUTPUT,
    clean_bytes,
    input_error,
    leading_ws,
    match_bracket,
)
from optrace.engine.cpp import mask, statement_end
from optrace.engine.diagnostics import InputError
from optrace.engine.discovery import LayerFile, Layers, SearchContext, is_host_source
from optrace.engine.edits import REVIEW_WIDTH, Edit, line_end, line_number, line_start, newline_of
from optrace.engine.names import same_op
from optrace.engine.plan import Plan
from optrace.engine.source import read_regular

CODEMOD = "op-def"

_OUTPUT_RE = re.compile(rb"this\s*->\s*Output\s*\(")
_INPUT_RE = re.compile(rb"this\s*->\s*(?:Input|Output|Attr|AICore|SetInfer\w*|SetTiling)\s*\(")
_CHAIN_RE = re.compile(rb"\s*\.\s*([A-Za-z_]\w*)\s*\(")
_KEEP = frozenset({"ParamType", "DataType", "DataTypeList", "Format", "FormatList",
                   "UnknownShapeFormat", "AutoContiguous", "IgnoreContiguous"})
_DTYPE_RE = re.compile(rb"\b((?:ge::)?)DT_[A-Z0-9_]+\b")
_FORMAT_RE = re.compile(rb"\b((?:ge::)?)FORMAT_[A-Z0-9_]+\b")


@dataclass(frozen=True)
class OpDefOutput:
    """One `this->Output("...")` (or Input) statement of an OpDef."""

    name: str
    start: int  # `this`
    end: int  # just past the `;`
    line: int
    # An output whose statement takes its name from a variable: where the statement that
    # names it starts and ends — a loop over a list of names (`for (auto n : kOut) {
    # this->Output(n)...; }`), or a call of a helper lambda (`cfgOutput("y");` of `auto
    # cfgOutput = [this](const char* n) { this->Output(n)...; };`). What goes after the
    # output goes after that statement, once, at its indent.
    loop: tuple[int, int] | None = None

    @property
    def after(self) -> int:
        """Just past the statement, or past the loop or call naming it."""
        return self.loop[1] if self.loop is not None else self.end


@dataclass(frozen=True)
class OpDefInfo:
    """An OpDef class: its outputs, inputs and per-SoC configs, where statements go."""

    path: Path
    outputs: tuple[OpDefOutput, ...]
    class_line: int
    inputs: tuple[OpDefOutput, ...] = ()  # `this->Input("...")` statements, in order
    first_statement: int = -1  # the class's first `this->...` statement (no inputs, no outputs)
    # Per-SoC `OpAICoreConfig cfg; cfg.Output("y")...` declarations: (variable, its outputs).
    # Each needs profiling_data after its last output; without `this->Output`, the first
    # one's outputs are the op's (`outputs` then holds them).
    configs: tuple[tuple[str, tuple[OpDefOutput, ...]], ...] = ()

    def profiling_position(self) -> int | None:
        names = [o.name for o in self.outputs]
        return names.index(PROFILING_OUTPUT) if PROFILING_OUTPUT in names else None

    def profiling_param_type(self, data: bytes) -> str | None:
        for out in self.outputs:
            if out.name == PROFILING_OUTPUT:
                m = re.search(rb"ParamType\s*\(\s*(\w+)\s*\)", data[out.start : out.end])
                return m.group(1).decode() if m else "REQUIRED"
        return None


_CLASS_RE = re.compile(rb"class\s+([A-Za-z_]\w*)\b[^;{]*\bOpDef\b[^;{]*\{")
_AICORE_CONFIG_RE = re.compile(rb"\bOpAICoreConfig\s+([A-Za-z_]\w*)\s*[;({=]")


def _op_class(code: bytes, op_name: str) -> re.Match[bytes] | None:
    """The OpDef class of the op, its name in any spelling (`MoeGmmFFNGate`)."""
    return next((m for m in _CLASS_RE.finditer(code) if same_op(m.group(1).decode(), op_name)), None)


def opdef_file(layers: Layers) -> Path | None:
    """The file defining the op's OpDef class (`class <Camel> : public OpDef`), if any."""
    files = [f.path for f in layers.found.get("op_def", [])]
    for path in files:
        try:
            data = read_regular(path)
        except OSError:
            continue
        if _op_class(mask(data), layers.op_name) is not None:
            return path
    return files[0] if files else None


def _named_statements(path: Path, data: bytes, code: bytes, kind: bytes, lo: int, hi: int,
                      strict: bool = True, receiver: bytes = rb"\bthis\s*->") -> list[OpDefOutput]:
    out: list[OpDefOutput] = []
    for m in re.finditer(receiver + rb"\s*" + kind + rb"\s*\(", code[:hi]):
        if m.start() < lo:
            continue
        close = match_bracket(code, m.end() - 1)
        arg = data[m.end() : close].strip() if close > 0 else b""
        name = re.fullmatch(rb'"([^"\\]*)"', arg)
        if name is None and not strict:
            name = re.fullmatch(rb"(.*)", arg, re.S)  # an input only lends its layout
        named = (_loop_names(data, code, arg, m.start(), lo) or _helper_names(data, code, arg, m.start(), hi)
                 if name is None else None)
        if named is not None:
            end = statement_end(code, m.start())
            out.extend(OpDefOutput(n, m.start(), end, line_number(data, site[0]), site) for n, site in named)
            continue
        if name is None:
            raise input_error(CODE_OPDEF_OUTPUTS, "cannot locate the OpDef's outputs: "
                              f"`this->{kind.decode()}({arg.decode(errors='replace')})` does not name the "
                              f"{kind.decode().lower()} with a string literal", path, data, m.start())
        end = statement_end(code, m.start())
        out.append(OpDefOutput(name.group(1).decode(), m.start(), end, line_number(data, m.start())))
    return out


_RANGE_FOR_RE = re.compile(rb"\bfor\s*\(\s*(?:const\s+)?(?:auto|char\s*(?:const\s*)?\*|std::string)"
                           rb"\s*[&*]?\s*([A-Za-z_]\w*)\s*:\s*([A-Za-z_]\w*)\s*\)\s*\{")


_LAMBDA_RE = re.compile(rb"\bauto\s+([A-Za-z_]\w*)\s*=\s*\[[^\]]*\]\s*\(\s*(?:const\s+)?"
                        rb"(?:char\s*(?:const\s*)?\*|std::string\s*&?|auto)\s*([A-Za-z_]\w*)\s*\)[^{;]*\{")
_NAME_ARG_RE = re.compile(rb'\s*\(\s*"([^"\\]*)"\s*\)\s*;')


def _helper_names(data: bytes, code: bytes, arg: bytes, at: int,
                  hi: int) -> list[tuple[str, tuple[int, int]]] | None:
    """`this->Output(n)` in a helper lambda (`auto cfgOutput = [this](const char* n) {
    ... };`) called with string literals (`cfgOutput("y");`): each call's name and the
    call statement's (start, end); None otherwise (a call with anything but a literal too)."""
    for m in reversed(list(_LAMBDA_RE.finditer(code, 0, at))):
        close = match_bracket(code, m.end() - 1)
        if m.group(2) != arg or close < at:
            continue
        calls = list(re.finditer(rb"(?<![\w.>])" + re.escape(m.group(1)) + rb"\s*\(", code[:hi]))
        found = []
        for call in calls:
            if call.start() < close:
                continue
            literal = _NAME_ARG_RE.match(data, call.end() - 1)
            if literal is None:
                return None
            found.append((literal.group(1).decode(), (call.start(), literal.end())))
        return found or None
    return None


def _loop_names(data: bytes, code: bytes, arg: bytes, at: int,
                lo: int) -> list[tuple[str, tuple[int, int]]] | None:
    """`this->Output(n)` in `for (auto n : kOut) { ... }` over `kOut[] = {"y1", "y2"}`:
    each name in order with the loop's (start, end past its `}`); None otherwise."""
    if re.fullmatch(rb"[A-Za-z_]\w*", arg) is None:
        return None
    for m in reversed(list(_RANGE_FOR_RE.finditer(code, lo, at))):
        close = match_bracket(code, m.end() - 1)
        if m.group(1) != arg or close < at:
            continue
        array = re.compile(rb"\b" + re.escape(m.group(2)) + rb"\s*\[\s*\d*\s*\]\s*=\s*\{([^{}]*)\}")
        listed = next(reversed(list(array.finditer(code, 0, m.start()))), None)  # the nearest before
        if listed is None:
            return None
        text = data[listed.start(1) : listed.end(1)]
        names = re.findall(rb'"([^"\\]*)"', text)
        if not names or re.fullmatch(rb'\s*"[^"\\]*"(?:\s*,\s*"[^"\\]*")*\s*,?\s*', text) is None:
            return None  # not a plain list of string literals
        return [(n.decode(), (m.start(), close + 1)) for n in names]
    return None


def parse_opdef(path: Path, data: bytes, camel: str) -> OpDefInfo:
    """The OpDef's outputs in order (none: profiling_data becomes the only one). Raises
    InputError when they cannot be located."""
    code = mask(data)
    lo, hi = 0, len(code)
    cls = _op_class(code, camel)
    if cls is None:
        cls = re.search(rb"class\s+\w+\s*:\s*public\s+(?:ops::)?OpDef[^;{]*\{", code)
    class_line = 1
    if cls is not None:
        close = match_bracket(code, cls.end() - 1)
        lo, hi = cls.start(), close if close > 0 else len(code)
        class_line = line_number(data, cls.start())
    outputs = _named_statements(path, data, code, b"Output", lo, hi)
    configs = tuple(
        (name, tuple(found)) for name in dict.fromkeys(
            m.group(1).decode() for m in _AICORE_CONFIG_RE.finditer(code, lo, hi))
        if (found := _named_statements(path, data, code, b"Output", lo, hi,
                                       receiver=rb"\b" + name.encode() + rb"\s*\.")))
    if not outputs and configs:
        outputs = list(configs[0][1])
    inputs = [] if outputs else _named_statements(path, data, code, b"Input", lo, hi, strict=False)
    first = _INPUT_RE.search(code, lo, hi)
    if not outputs and not inputs and (cls is None or first is None):
        raise input_error(CODE_OPDEF_OUTPUTS, "cannot locate the OpDef's outputs: no "
                          '`this->Output("...")` statement in the OpDef, and no class body with '
                          "`this->Input` / `this->Attr` to add profiling_data to", path, data,
                          first.start() if first else lo)
    return OpDefInfo(path, tuple(outputs), class_line, tuple(inputs), first.start() if first else -1, configs)


def op_outputs(plan_or_layers: Plan | Layers) -> OpDefInfo | None:
    """The OpDef of the op as it is before optrace (None: the op has no OpDef)."""
    layers = plan_or_layers if isinstance(plan_or_layers, Layers) else plan_or_layers.analysis.layers
    path = opdef_file(layers)
    if path is None:
        return None
    return parse_opdef(path, clean_bytes(path), layers.op_name)


def profiling_index(plan: Plan) -> int | None:
    """Where profiling_data is (or will be) among the OpDef outputs; None without OpDef."""
    info = op_outputs(plan)
    if info is None:
        return None
    pos = info.profiling_position()
    return pos if pos is not None else len(info.outputs)


def _profiling_types(method: str, call: bytes, arg: bytes) -> bytes:
    """The template output's dtype / format call made profiling_data's: each listed type
    int64, each format ND. A list that is not written out (`dtypes.find(soc)->second`) gets
    a vector of its length, so the per-SoC list lengths still agree."""
    if method in ("DataType", "DataTypeList"):
        if _DTYPE_RE.search(call):
            return _DTYPE_RE.sub(lambda d: d.group(1) + b"DT_INT64", call)
        return (call[: call.index(b"(") + 1] + b"std::vector<ge::DataType>((" + arg
                + b").size(), ge::DT_INT64))")
    if method in ("Format", "FormatList", "UnknownShapeFormat"):
        if _FORMAT_RE.search(call):
            return _FORMAT_RE.sub(lambda f: f.group(1) + b"FORMAT_ND", call)
        return (call[: call.index(b"(") + 1] + b"std::vector<ge::Format>((" + arg
                + b").size(), ge::FORMAT_ND))")
    return call


def _statement_text(data: bytes, code: bytes, out: OpDefOutput, param_type: str) -> list[bytes]:
    """The last output's statement (or, without outputs, the last input's) rewritten for
    profiling_data, as lines."""
    paren = code.index(b"(", out.start)
    head_close = match_bracket(code, paren)
    head = re.sub(rb"\bInput\s*\($", b"Output(", data[out.start : paren + 1])
    pieces = [head, f'"{PROFILING_OUTPUT}"'.encode(), b")"]
    pos = head_close + 1
    saw_param_type = False
    while True:
        m = _CHAIN_RE.match(code, pos)
        if m is None or m.end() > out.end:
            break
        close = match_bracket(code, m.end() - 1)
        if close < 0:
            break
        method = m.group(1).decode()
        if method in _KEEP:
            call = data[m.start() : close + 1]
            if method == "ParamType":
                saw_param_type = True
                call = data[m.start() : m.end()] + param_type.encode() + b")"
            call = _profiling_types(method, call, data[m.end() : close].strip())
            if not saw_param_type and method != "ParamType" and param_type == "OPTIONAL":
                pieces.append(b".ParamType(OPTIONAL)")
                saw_param_type = True
            pieces.append(call)
        pos = close + 1
    if not saw_param_type and param_type == "OPTIONAL":
        pieces.append(b".ParamType(OPTIONAL)")
    pieces.append(data[pos : out.end])  # whitespace / newline before the `;`, and the `;`
    text = b"".join(pieces)
    indent = leading_ws(data, out.loop[0] if out.loop is not None else out.start)
    lines = (indent + text).replace(b"\r\n", b"\n").split(b"\n")
    if out.loop is not None:
        # out of the loop's body: its continuation lines one body's indent to the left
        deeper = len(leading_ws(data, out.start)) - len(indent)
        lines = lines[:1] + [ln[min(deeper, len(ln) - len(ln.lstrip())):] for ln in lines[1:]]
    # The template's comments describe its own dtypes, not profiling_data's; a line that
    # is only a comment would also not carry the line mark strip looks for.
    return [ln.rstrip() for ln in lines if ln.strip() and not ln.lstrip().startswith((b"//", b"/*", b"*"))]


def _at_width(line: bytes) -> list[bytes]:
    """A copied line the line mark would take past the review width: its brace list on a
    continuation line (`.Format({` / `    ge::FORMAT_ND, ...})`)."""
    brace = line.find(b"({")
    if len(line + LINE_MARK) <= REVIEW_WIDTH or brace < 0:
        return [line]
    indent = line[: len(line) - len(line.lstrip())]
    return [line[: brace + 2], indent + b"    " + line[brace + 2 :].lstrip()]


@dataclass(frozen=True)
class OpDefTarget:
    """Where profiling_data's statement goes in the OpDef (located; its text is
    `render_op_def`'s): after `template`, the statement it copies (the last output, or a
    per-SoC config's, or the last input), or, without one, before the class's first
    statement. Its text never names the sizes macro."""

    path: Path
    data: bytes  # the clean bytes
    info: OpDefInfo
    template: OpDefOutput | None
    sizes: bool = False


# The layers through which a caller receives the op's outputs: an aclnn API written by
# hand, a torch binding, Python callers, fakes and graph converters of a torch op.
_API_LAYERS = ("aclnn", "torch_adapter", "registration", "python_callers", "python_fakes", "graph_converters")
# A build declaration of the operator's sources, `add_modules_sources(... OPTYPE <op>
# ... ACLNNTYPE <kind> ...)`, in the operator folder's CMakeLists.txt or its op_host's. The
# kinds for which the build generates no aclnn API from the OpDef: the op is reached only
# through a hand-written API, or only from graphs.
_MODULE_SOURCES_RE = re.compile(rb"\badd_modules_sources\s*\(([^)]*)\)")
_NO_GENERATED_API = (b"aclnn_exclude", b"no_need_aclnn")


def graph_only(layers: Layers) -> InputError | None:
    """Mode B's refusal for an operator no caller can take profiling_data from (None: one
    can): its build generates no aclnn API (`ACLNNTYPE aclnn_exclude`), none is written by
    hand and no torch binding or Python code calls it. Such an op runs only inside graphs
    (ops-nn's TensorFlow-plugin operators): its graph IR (`REG_OP`, op_graph/) declares
    the outputs a node has, and a required output it does not declare is one the graph
    never gives the kernel. Mode A's optional output is left out there: the kernel sees a
    null buffer and records nothing, as it should."""
    if any(layers.found.get(key) for key in _API_LAYERS):
        return None
    declared: tuple[Path, bytes, int, bytes] | None = None
    for cmake in (layers.op_dir / "CMakeLists.txt", layers.op_dir / "op_host" / "CMakeLists.txt"):
        try:
            data = clean_bytes(cmake) if cmake.is_file() else b""
        except OSError:
            continue
        for call in _MODULE_SOURCES_RE.finditer(data):
            words = call.group(1).split()
            values = dict(itertools.pairwise(words))  # KEY value: each word's next
            optype, kind = values.get(b"OPTYPE"), values.get(b"ACLNNTYPE")
            if kind is None or (optype is not None and not same_op(optype.decode(errors="replace"),
                                                                    layers.op_name)):
                continue
            if kind not in _NO_GENERATED_API:
                return None  # the build makes the op an aclnn API (aclnn, aclnn_inner)
            at = call.start(1) + call.group(1).index(b"ACLNNTYPE")
            declared = declared or (cmake, data, at, kind)
    if declared is None:
        return None  # nothing says the build makes no API: mode B as before
    cmake, data, at, kind = declared
    ir = _graph_ir(layers)
    where = f" (`REG_OP({layers.camel})`, {ir})" if ir else ""
    return input_error(
        CODE_LAYER_SHAPE,
        f"no caller can take profiling_data as the op's last output: its build makes no aclnn API "
        f"(`ACLNNTYPE {kind.decode()}`), none is written by hand and no torch binding or Python code "
        f"calls it; graphs run it, and its graph IR{where} does not declare the output mode B requires",
        cmake, data, at)


def _graph_ir(layers: Layers) -> str:
    """`<file>:<line>` of the op's `REG_OP(<Op>)` under op_graph/ ("" when none)."""
    graph = layers.op_dir / "op_graph"
    pattern = re.compile(rb"\bREG_OP\s*\(\s*" + re.escape(layers.camel.encode()) + rb"\s*\)")
    try:
        headers = sorted(p for p in graph.iterdir() if p.suffix in (".h", ".hpp") and p.is_file())
    except OSError:
        return ""
    for header in headers:
        try:
            data = clean_bytes(header)
        except OSError:
            continue
        found = pattern.search(data)
        if found:
            return f"{header.relative_to(layers.op_dir).as_posix()}:{line_number(data, found.start())}"
    return ""


def locate_op_def(plan: Plan, mode: str) -> list[OpDefTarget]:
    """The OpDef's statements profiling_data goes after (none: no OpDef, or one that has
    it already). Raises the InputError of an OpDef whose outputs cannot be located."""
    layers = plan.analysis.layers
    path = opdef_file(layers)
    if path is None:
        return []
    if mode == "B":  # the same place in both modes (the ParamType differs), but not B for all
        refusal = graph_only(layers)
        if refusal is not None:
            raise refusal
    data = clean_bytes(path)
    info = parse_opdef(path, data, layers.op_name)
    if info.profiling_position() is not None:
        return []  # written by hand: G2 checks its position, nothing to add
    template = info.outputs[-1] if info.outputs else info.inputs[-1] if info.inputs else None
    if template is None:
        return [OpDefTarget(path, data, info, None)]
    templates = [template]
    # every per-SoC config gets it after its own last output (the first config's outputs
    # stand for the op's when the class has no `this->Output`: then `template` is one)
    templates += [outs[-1] for _name, outs in info.configs
                  if outs[-1] is not template and PROFILING_OUTPUT not in [o.name for o in outs]]
    return [OpDefTarget(path, data, info, tpl) for tpl in templates]


def op_def_edits(plan: Plan, mode: str) -> list[Edit]:
    """Edits (on the clean bytes) adding profiling_data as the OpDef's last output."""
    return render_op_def(mode, locate_op_def(plan, mode))


def render_op_def(mode: str, located: Sequence[OpDefTarget]) -> list[Edit]:
    """profiling_data's statement at each located place: a copy of the template's,
    REQUIRED in mode B, OPTIONAL in mode A."""
    param_type = "OPTIONAL" if mode == "A" else "REQUIRED"
    edits = []
    for target in located:
        path, data, info, tpl = target.path, target.data, target.info, target.template
        nl = newline_of(data)
        if tpl is None:
            # No inputs, no outputs: profiling_data is the only tensor, one dtype, before the
            # class's first statement (its Attr / AICore configuration).
            # Qualified always: `ge::DT_INT64` compiles with or without `using namespace ge`,
            # the bare name only with it (an OpDef file that names no dtype has none).
            ge = b"ge::"
            at = line_start(data, info.first_statement)
            line = (leading_ws(data, info.first_statement) + b'this->Output("' + PROFILING_OUTPUT.encode()
                    + b'").ParamType(' + param_type.encode() + b").DataType({" + ge + b"DT_INT64}).Format({"
                    + ge + b"FORMAT_ND}).UnknownShapeFormat({" + ge + b"FORMAT_ND});")
            edits.append(Edit(path, at, at, line + LINE_MARK + nl, CODEMOD,
                              "profiling_data, the only output"))
            continue
        code = mask(data)
        lines = [part for line in _statement_text(data, code, tpl, param_type) for part in _at_width(line)]
        at = line_end(data, tpl.after - 1, include_newline=True)
        body = b"".join(line + LINE_MARK + nl for line in lines)
        if not data[:at].endswith(b"\n"):
            body = nl + body[: -len(nl)]
        note = ("profiling_data output" if info.outputs else
                "profiling_data, the only output (after the inputs)")
        edits.append(Edit(path, at, at, body, CODEMOD, note))
    return edits


class OpDefLayer(LocatingLayer[OpDefTarget]):
    NAME: ClassVar[str] = "op_def"
    DESCRIPTION: ClassVar[str] = "op_host OpDef: profiling_data the last output"
    FOUND_KEY: ClassVar[str | None] = "op_def"
    TITLE: ClassVar[str] = "op_host OpDef"
    EXAMPLES: ClassVar[tuple[LayerExample, ...]] = (LayerExample(
        path="demo_op/op_host/demo_op_def.cpp",
        changes=(('this->Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});\n',
                  'this->Output("y").ParamType(REQUIRED).DataType({ge::DT_FLOAT}).Format({ge::FORMAT_ND});\n'
                  '        this->Output("profiling_data").ParamType(REQUIRED).DataType({ge::DT_INT64})'
                  ".Format({ge::FORMAT_ND});  // optrace\n"),),
    ),)

    def search(self, ctx: SearchContext) -> list[LayerFile]:
        """Host files declaring an OpDef: outputs in its class (`this->Output`), on per-SoC
        configs or through helpers (`AddOutput(config, "y", ...)`), registered with
        OP_ADD. Found either way; apply refuses what it cannot locate."""
        out: list[LayerFile] = []
        for path in ctx.operator_cpp:
            code = ctx.code(path)
            if is_host_source(path, ctx.op_dir) and re.search(rb"\bOpDef\b", code) and (
                    re.search(rb"this->\s*(Input|Output|Attr|AICore)\s*\(", code)
                    or re.search(rb"\bOP_ADD\s*\(", code)):
                out.append(ctx.at(path, code, rb"this->\s*Output\s*\(|\bOP_ADD\s*\(", "OpDef outputs"))
        return out

    def find(self, layers: Layers) -> list[Path]:
        """The file defining the op's OpDef class first, then the other files discovery
        saw OpDef statements in."""
        first = opdef_file(layers)
        rest = [f.path for f in layers.found.get("op_def", [])]
        return list(dict.fromkeys([first, *rest])) if first is not None else rest

    def locate(self, plan: Plan, mode: str) -> list[OpDefTarget]:
        return locate_op_def(plan, mode)

    def render(self, plan: Plan, mode: str, located: Sequence[OpDefTarget]) -> list[Edit]:
        return render_op_def(mode, located)

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
            after = "" if last else f"; `{info.outputs[-1].name}` comes after it"
            ev.append(Evidence(path, out.line, f"OpDef: profiling_data is output {pos + 1} of "
                               f"{len(info.outputs)}{after}", last))
            model.op.facts.output_index = pos
        return ev
