"""The pieces of the plan's text that keep it readable at 120 columns: each region's class
and why in a few words, headers of the toolkit told from the project's, and lines wrapped
at word boundaries.

The text is for review (`optrace plan`); JSON keeps every field (docs/plan-schema.md).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from optrace.engine.discovery import read_bounded
from optrace.engine.model import Kind, Region

TEXT_WIDTH = 120

# Top-level names under the CANN toolkit's include roots (`$ASCEND_HOME_PATH/include`, the
# AscendC compiler's `tikcpp/tikcfw` with its `impl` / `interface` trees): a quoted include
# starting with one of them, not found in the repository, is the toolkit's, not a gap.
CANN_ROOTS = frozenset({
    "acl", "aclnn", "aclnnop", "ascendc", "exe_graph", "experiment", "graph", "hccl", "impl", "interface",
    "kernel_tiling", "lib", "op_common", "opdev", "platform", "register", "runtime", "tikcfw", "tiling",
})
_CANN_HEADER = re.compile(r"kernel_[\w]+\.h|acl[\w]*\.h|hccl[\w]*\.h|ge_[\w]+\.h")

_HANDSHAKE_CLASS = {"wait": "wait", "notify": "notify", "sync": "barrier"}
_PRIMITIVE = re.compile(r"((?:spin-wait )?[A-Za-z_][\w]*(?: loop)?) in ")
_QUALIFIED = re.compile(r"([\w:~<>()]+?) \(")
_LOOP_VAR = re.compile(r"loop over `([^`]+)`")


def region_class(region: Region) -> str:
    """What the region is, one word: phase / setup (work), wait / notify / barrier (a
    handshake), root, existing."""
    if region.kind == Kind.ROOT:
        return "root"
    if region.kind == Kind.EXISTING:
        return "existing"
    if region.cost == "handshake":
        return _HANDSHAKE_CLASS.get(region.hot or "", "handshake")
    return region.cost


def _short_name(qualified: str) -> str:
    """`Ns::Class::Method` -> `Method`; `Class::operator()<AIC>` -> `operator()<AIC>`."""
    return qualified.rsplit("::", 1)[-1]


def region_why(region: Region) -> str:
    """Why the region is there, in a few words (its full reason is in JSON)."""
    if region.kind == Kind.ROOT:
        return "kernel entry"
    if region.kind == Kind.EXISTING:
        return "B/E already in the source"
    if region.kind == Kind.LOOP:
        var = region.index_var or next(iter(_LOOP_VAR.findall(region.reason)), None)
        over = f" over `{var}`" if var and var != "None" else ""
        return f"tile loop{over}, whole" if region.tile_loop else f"loop{over}"
    if region.kind == Kind.BODY:
        return f"{'/'.join(sorted(region.cores))} body"
    flag = f" `{region.flag}`" if region.flag else ""
    if region.kind == Kind.CALL and region.function:
        return f"call `{_short_name(region.function.rsplit(':', 1)[-1])}`{flag}"
    primitive = _PRIMITIVE.match(region.reason)
    if primitive is not None:
        return f"{primitive.group(1)}{flag}"
    qualified = _QUALIFIED.match(region.reason)
    if qualified is not None:
        return f"in `{_short_name(qualified.group(1))}`{flag}"
    return region.reason.split(" (", 1)[0][:40]


def region_summary(region: Region) -> str:
    """`class: why`, e.g. `phase: loop over `groupIdx``, `wait: CrossCoreWaitFlag `flag``."""
    return f"{region_class(region)}: {region_why(region)}"


def submodule_names(repo_root: Path) -> frozenset[str]:
    """The submodules `.gitmodules` lists, by path and by the path's last part (how their
    headers are usually included: `catlass/...` for `third_party/catlass`)."""
    data = read_bounded(repo_root / ".gitmodules", 1 << 20)
    if data is None:
        return frozenset()
    paths = re.findall(rb"^\s*path\s*=\s*(\S.*?)\s*$", data, re.M)
    names = {p.decode("utf-8", "replace").strip("/") for p in paths}
    return frozenset(names | {n.rsplit("/", 1)[-1] for n in names})


def toolkit_origin(target: str, submodules: frozenset[str]) -> str | None:
    """Whose header a quoted include the repository lacks is: `submodule` (a path under a
    submodule `.gitmodules` lists, absent until it is checked out), `CANN` (under one of
    the toolkit's include roots), else None (the project's own: worth a look)."""
    first = target.split("/", 1)[0]
    if first in submodules or any(target.startswith(f"{s}/") for s in submodules if "/" in s):
        return "submodule"
    if first in CANN_ROOTS or ("/" not in target and _CANN_HEADER.fullmatch(target)):
        return "CANN"
    return None


def wrap(lines: list[str], width: int = TEXT_WIDTH) -> list[str]:
    """Every line within `width`; a continuation is indented four past its line's own
    indent. A line breaks first where its fields part (two spaces: a path and what it is),
    else between words; a single word longer than the width (a path) stays whole."""
    out: list[str] = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip(" ")))
        while len(line) > width:
            # After the line's own leading spaces (a continuation's are deeper): a break
            # there would only move text right.
            lead = len(line) - len(line.lstrip(" "))
            field = line.rfind("  ", lead + 1, width + 1)
            if field <= lead:
                break
            out.append(line[:field])
            line = f"{indent}    {line[field:].lstrip(' ')}"
        if len(line) <= width:
            out.append(line)
            continue
        leading = " " * (len(line) - len(line.lstrip(" ")))  # deeper than `indent` once continued
        out.extend(textwrap.wrap(line.strip(" "), width=width, initial_indent=leading,
                                 subsequent_indent=indent + "    ", break_long_words=False,
                                 break_on_hyphens=False) or [line])
    return out
