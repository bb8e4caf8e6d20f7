"""The build hook (G1): the build script runs `optrace preprocess` on what it compiles."""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

from optrace.codemods.build_hook import (
    BUILD_CMD_RE,
    HOOK_BLOCK_RE,
    SHELL_SUFFIXES,
    build_hook_edits,
    build_script,
    enclosing_function,
    hook_command,
    kernel_copies,
    shell_words,
)
from optrace.codemods.layer_common import match_bracket
from optrace.codemods.python_files import caller_files, split_callers
from optrace.engine.cpp import mask
from optrace.engine.discovery import Layers
from optrace.engine.edits import Edit
from optrace.engine.plan import Plan
from optrace.pipeline.layer_model import Evidence, FileLayer, LayerModel, Operator, line_of, read_or_empty


class BuildHookLayer(FileLayer):
    NAME: ClassVar[str] = "build_hook"
    DESCRIPTION: ClassVar[str] = "build hook: the build runs `optrace preprocess` on the kernels it compiles"
    GATE: ClassVar[str] = "G1"

    def find(self, layers: Layers) -> list[Path]:
        script = build_script(layers)
        return [script] if script is not None else []

    def edits(self, plan: Plan, mode: str, model: LayerModel | None) -> list[Edit]:
        return build_hook_edits(plan, mode)

    def verify(self, model: LayerModel) -> list[Evidence]:
        if not model.data:
            return []
        script, data = next(iter(model.data.items()))
        block = next((m for m in HOOK_BLOCK_RE.finditer(data) if b"optrace" in m.group(0)), None)
        if block is None:
            return [Evidence(script, 1, "no `# TRACE_PREPROCESSOR_HOOK_START` block running "
                             "`optrace preprocess`", False)]
        hook_line = line_of(data, block.start())
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
            return ev
        pre_line = line_of(data, block.start() + pre.offset)
        src = pre.src.strip(b'"\'').rstrip(b"/")
        modify = pre.modify
        if pre.out is None:
            ev.append(Evidence(script, pre_line, "no `--out`: point_map.json is not written beside the build",
                               False))
        else:
            ev.append(Evidence(script, pre_line, f"writes {pre.out.decode(errors='replace').strip(chr(34))}"
                                                 "/point_map.json"))
        rest = data[: block.start()] + data[block.end() :]
        copies = kernel_copies(rest) if shell else []
        if copies:
            last = copies[-1]
            last_at = last.start() if last.start() < block.start() else last.start() + len(body)
            copy_line = line_of(data, last_at)
            dest = (shell_words(last.group(1))[-1].strip(b'"\'').rstrip(b"/*").rstrip(b"/"))
            fn_copy = enclosing_function(data, last_at)
            fn_hook = enclosing_function(data, block.start())
            after = last_at < block.start() and fn_copy == fn_hook
            later = [c for c in kernel_copies(data[block.end() :])
                     if enclosing_function(data, block.end() + c.start()) == fn_hook]
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
            build = BUILD_CMD_RE.search(data, block.end()) if shell else None
            if shell:
                ev.append(Evidence(script, line_of(data, build.start()) if build else hook_line,
                                   "builds from the source tree: the hook runs before the build command"
                                   if build else "no build command after the hook", build is not None))
            ev.append(Evidence(script, pre_line, "reads the sources only (no --modify)" if not modify
                               else "--modify would rewrite the checked-in sources", not modify))
        ev.extend(_collector_link(model.op))
        return ev


def _collector_link(op: Operator) -> list[Evidence]:
    """The callers hand the map to save_profiling_data, which copies it beside the ranks
    (samples and tests: library code calling the op never saves)."""
    callers = split_callers(caller_files(op.layers), op.layers.repo_root, op.analysis.config.sample_globs)[0]
    if not callers or op.mode != "B":
        return [Evidence(None, 0, "collector: `optrace collect DIR --point-map <out>/point_map.json`")]

    out = []
    for path in callers:
        data = read_or_empty(path)
        code = mask(data)
        for m in re.finditer(rb"(?:save_profiling_data|_optrace_save)\s*\(", code):
            close = match_bracket(code, m.end() - 1)
            ok = b"point_map" in data[m.start() : close if close > 0 else len(data)]
            out.append(Evidence(path, line_of(data, m.start()),
                                "the saved rank files get the point map (collect finds it beside them)"
                                if ok else "save_profiling_data without point_map=", ok))
    return out or [Evidence(None, 0, "collector: `optrace collect DIR --point-map <out>/point_map.json`")]
