"""Plans as text (for review), JSON (versioned, docs/plan-schema.md) and call graphs
(DOT, self-contained HTML, SVG when Graphviz is installed)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from optrace.engine.codes import OT020, OT021, OT108
from optrace.engine.diagnostics import display_path, shown_path
from optrace.engine.model import Region
from optrace.engine.plan import Plan
from optrace.pipeline.graph_page import graph_html
from optrace.pipeline.plan_text import region_summary, submodule_names, toolkit_origin, wrap
from optrace.runtime.atomic import write_output


def _loc(plan: Plan, path: Path | None, line: int) -> str:
    if path is None:
        return "-"
    return f"{display_path(path, plan.analysis.layers.repo_root)}:{line}"


class PlannedMode(NamedTuple):
    """The mode apply would use for the plan's operator, and why (recorded, or chosen)."""

    mode: str
    reason: str


def render_text(plan: Plan, mode: PlannedMode | None = None) -> str:
    """The plan for a reader; `mode` is (mode, why) as apply would choose it."""
    an = plan.analysis
    layers = an.layers
    root_dir = layers.repo_root
    out: list[str] = []
    out.append(f"operator {layers.op_name} ({display_path(layers.op_dir, root_dir)})")
    out.append(f"  repository root: {shown_path(root_dir)}")  # relative to where optrace runs
    declared = an.core_declaration
    if declared is not None:
        kind = declared.describe(display_path(declared.path, root_dir) if declared.path else "")
    else:
        kind = ("mixed AIC/AIV" if an.mixed else "/".join(sorted(an.kernel_cores)) + " only") + (
            " (inferred from the kernel's code; nothing declares it: the buffer is laid out mixed)")
    out.append(f"  kernel: {kind}")
    if mode is not None:
        out.append(f"  mode: {mode.mode} — {mode.reason}")
    out.append("")
    # A file under the operator directory relative to it, as the file legend has them:
    # ops-nn's paths from the root are past 120 columns on their own.
    out.append(f"layers (those under {display_path(layers.op_dir, root_dir)}/ relative to it):")
    for key, title in layers.titles.items():
        hits = layers.found.get(key, [])
        if not hits:
            out.append(f"  - {title}: {'none (optional)' if key in layers.optional else 'MISSING'}")
            continue
        for i, hit in enumerate(hits[:6]):
            head = f"  + {title}:" if i == 0 else "    " + " " * len(title) + " "
            out.append(f"{head} {_short(hit.path, layers.op_dir, root_dir)}:{hit.line}  {hit.detail}")
        if len(hits) > 6:
            out.append(f"    ... and {len(hits) - 6} more")
    out.append("")
    # Each file once, in a legend; other lines say `[n]:line` (readable at 120 columns).
    legend = _file_legend(plan)

    def ref(path: Path | None, line: int) -> str:
        return f"[{legend[path]}]:{line}" if path in legend else _loc(plan, path, line)

    inc = an.includes
    out.append(
        f"include tree: {len(inc.files)} files reached from the entry, "
        f"{len(inc.missing)} quoted header(s) not found, {len(inc.external)} external"
    )
    out.extend(_not_found_lines(plan, ref))
    for cycle in inc.cycles[:5]:
        out.append("  cycle: " + " -> ".join(display_path(p, root_dir) for p in cycle))
    outside = plan.outside_files()
    if outside:
        out.append("")
        out.append("outside the operator directory:")
        for f in outside:
            what = f"{f.role}: apply edits it" if f.edited else (
                f"{f.role}, read: its code is measured at the call sites, never edited")
            shared = ("; also included by " + ", ".join(display_path(o, root_dir) for o in f.included_by)
                      if f.included_by else "")
            out.append(f"  {display_path(f.path, root_dir)}  {what}{shared}")
    out.append("")
    if len(legend) <= 1:
        out.append("files: " + ", ".join(f"[{n}] {display_path(f, root_dir)}" for f, n in legend.items()))
    else:
        out.append(f"files (those under {display_path(layers.op_dir, root_dir)}/ relative to it):")
        for file, n in legend.items():
            out.append(f"  [{n}] {_short(file, layers.op_dir, root_dir)}")
        out.append("")
    out.append("trace tree:  (label [core types] class: why  @ [file]:line)")
    _tree_lines(plan, plan.root, out, "", legend)
    out.append("")
    out.append("labels per core type:")
    budget = plan.analysis.config.density_target
    for core, labels in plan.per_core.items():
        out.append(f"  {core}: {len(labels)}{_over_budget(plan, core, labels, budget)}")
    if plan.variants:
        out.append("  per variant (one launch runs one; the budget holds per variant):")
        for v in plan.variants:
            counts = ", ".join(f"{c} {n}" for c, n in v["labels"].items())  # type: ignore[attr-defined]
            out.append(f"    {v['condition']}: {counts}")
    for est in plan.capacity:
        out.append(f"  {est.core} records per launch: {est.text()}")
    if plan.dropped:
        out.append("")
        out.append(f"dropped by the label budget ({len(plan.dropped)}, {OT108}; setup first, then repeats "
                   "of code planned elsewhere, then the deepest detail):")
        for drop in plan.dropped:
            known = legend.get(drop.path) if drop.path is not None else None
            at = f"[{known}]:{drop.line}" if known else _loc(plan, drop.path, drop.line)
            out.append(f"  {drop.label} [{'+'.join(drop.cores)}] {drop.cost}  @ {at}  — {drop.why}")
    if plan.roles:
        out.append("")
        out.append("AIV roles:")
        for role, (path, line) in plan.roles.items():
            out.append(f"  {role}  ({ref(Path(path), line)})")
    phase = sum(1 for lp in plan.loops if lp.classification == "phase")
    tile = sum(1 for lp in plan.loops if lp.classification == "tile")
    spin = sum(1 for lp in plan.loops if lp.classification == "spin")
    out.append("")
    out.append(f"loops: {phase} phase, {spin} spin-wait, {tile} tile (never a point inside)")
    if plan.lint:
        lint = plan.lint
        out.append("")
        out.append("plan lint:")
        out.append(f"  points in tile loops: {lint['points_in_tile_loops']}")
        out.append(f"  points in spin-wait loops: {lint['points_in_spin_loops']}")
        out.append(f"  longest label: {lint['longest_label_length']} ({lint['longest_label']})")
        out.append(f"  same-span levels: {lint['same_span_levels']}")
        out.append(f"  setup share: {lint['setup_share']}")
        out.append(f"  phases dropped by the budget: {lint['phases_dropped']} "
                   f"({lint['phases_dropped_while_setup_kept']} while setup kept)")
        unbracketed = lint["unbracketed_handshakes"]
        assert isinstance(unbracketed, list)
        out.append(f"  handshakes not bracketed: {len(unbracketed)}"
                   + (f" ({', '.join(unbracketed[:3])}{', ...' if len(unbracketed) > 3 else ''})"
                      if unbracketed else ""))
    diags = plan.diagnostics
    # Missing headers are already listed with the include tree.
    diags = [d for d in diags if d.code != OT021]
    # One partial-parse warning, naming every file: the same sentence per file is noise.
    partial = [d for d in diags if d.code == OT020]
    if len(partial) > 1:
        others = ", ".join(ref(d.path, d.line) for d in partial[1:] if d.path)
        first = replace(partial[0], message=f"{partial[0].message} (also: {others})")
        diags = [first if d is partial[0] else d for d in diags if d.code != OT020 or d is partial[0]]
    if diags:
        out.append("")
        out.append("findings:")
        for d in diags:
            out.append(f"  {ref(d.path, d.line) if d.path else '<optrace>'}: {d.code} {d.message}  "
                       f"[{d.severity.value}]")
    return "\n".join(wrap(out)) + "\n"


def _not_found_lines(plan: Plan, ref: Callable[[Path | None, int], str]) -> list[str]:
    """The quoted headers the repository lacks: the project's one line each (a gap worth
    a look), the toolkit's — a submodule not checked out, CANN's include roots — one
    line with their count (JSON lists every one)."""
    submodules = submodule_names(plan.analysis.layers.repo_root)
    first_seen: dict[str, tuple[Path, int, int]] = {}
    toolkit: dict[str, int] = {}
    for includer, line, target in plan.analysis.includes.missing:
        origin = toolkit_origin(target, submodules)
        if origin is not None:
            toolkit[origin] = toolkit.get(origin, 0) + 1
            continue
        where, ln, n = first_seen.get(target, (includer, line, 0))
        first_seen[target] = (where, ln, n + 1)
    out = []
    if toolkit:
        kinds = (("submodule", "in a submodule not checked out"), ("CANN", "under CANN's include roots"))
        parts = [(f"{toolkit[o]} " if len(toolkit) > 1 else "") + what for o, what in kinds if o in toolkit]
        out.append(f"  not found: {sum(toolkit.values())} header(s) of the toolkit, {', '.join(parts)} (as "
                   "expected here; --format json lists them)")
    for target, (where, ln, n) in first_seen.items():
        more = f" and {n - 1} more" if n > 1 else ""
        out.append(f"  not found: \"{target}\" ({ref(where, ln)}{more})")
    return out


def _over_budget(plan: Plan, core: str, labels: list[str], budget: int) -> str:
    """Why a core type's count may stand over the label budget: the rule that allowed it,
    with the numbers (the budget counts phase and setup labels per launch)."""
    if len(labels) <= budget:
        return ""
    shakes = {r.label for r in plan.root.walk() if r.cost == "handshake" and core in r.cores} & set(labels)
    work = len(labels) - len(shakes)
    why = [f"{work} phase / setup, budget {budget} (density.target)"]
    if shakes:
        why.append(f"+ {len(shakes)} handshakes, which the budget does not count: every wait and notify "
                   "stays bracketed")
    kept = plan.over_budget.get(core)
    if kept is not None:
        why.append(f"one launch keeps {kept} phase / setup labels, {kept - budget} over the budget: what is "
                   f"left holds handshakes, and a phase holding a handshake stays with it ({OT108})")
    elif work > budget:
        why.append("the budget holds per variant, and no one launch runs more than "
                   f"{budget} of them (see per variant)")
    return " (" + "; ".join(why) + ")"


def _short(path: Path, op_dir: Path, root: Path) -> str:
    """A path under the operator directory relative to it, else relative to the root."""
    try:
        return path.resolve().relative_to(op_dir.resolve()).as_posix()
    except ValueError:
        return display_path(path, root)


def _file_legend(plan: Plan) -> dict[Path, int]:
    """Each file the text names by line, numbered: the trace tree's first (in tree order),
    then those only the include tree, the roles and the findings name."""
    files: dict[Path, int] = {}
    named = [r.anchor.path for r in plan.root.walk() if r.anchor is not None]
    submodules = submodule_names(plan.analysis.layers.repo_root)
    named += [includer for includer, _line, target in plan.analysis.includes.missing
              if toolkit_origin(target, submodules) is None]
    named += [Path(path) for path, _line in plan.roles.values()]
    # The findings the text lists (a missing header's is in the include tree instead).
    named += [d.path for d in plan.diagnostics if d.path is not None and d.code != OT021 and d.path.is_file()]
    for path in named:
        if path not in files:
            files[path] = len(files) + 1
    return files


def _tree_lines(plan: Plan, region: Region, out: list[str], indent: str, legend: dict[Path, int]) -> None:
    cores = "+".join(sorted(region.cores))
    anchor = region.anchor
    loc = f"[{legend[anchor.path]}]:{anchor.line}" if anchor else "-"
    line = f"{indent}{region.label} [{cores}] {region_summary(region)}  @ {loc}"
    if region.role:
        line += f"  role: {region.role}"
    if region.shared_with:
        line += f"  (same code as `{region.shared_with}`)"
    out.append(line)
    for child in region.children:
        _tree_lines(plan, child, out, indent + "  ", legend)


def region_json(plan: Plan, region: Region) -> dict[str, object]:
    anchor = region.anchor
    root = plan.analysis.layers.repo_root
    return {
        "label": region.label,
        "depth": region.depth,
        "kind": region.kind.value,
        "cores": sorted(region.cores),
        "file": display_path(anchor.path, root) if anchor else None,
        "line": anchor.line if anchor else None,
        "end_line": anchor.end_line if anchor else None,
        "placement": ("inside" if anchor.inside else "around") if anchor else None,
        "index": region.index_var,
        "hot": region.hot,
        "cost": region.cost,
        "flag": region.flag,
        "role": region.role,
        "reason": region.reason,
        "shared_with": region.shared_with,
        "covers": display_path(region.covers, root) if region.covers else None,
        "notes": region.notes,
        "children": [region_json(plan, c) for c in region.children],
    }


def plan_json(plan: Plan, mode: PlannedMode | None = None) -> dict[str, object]:
    an = plan.analysis
    layers = an.layers
    root = layers.repo_root
    return {
        **({"mode": mode.mode, "mode_reason": mode.reason} if mode is not None else {}),
        "name": layers.op_name,
        "op_dir": display_path(layers.op_dir, root),
        "repo_root": str(root),
        "mixed": an.mixed,
        "cores": sorted(an.kernel_cores),
        # What declared them (None: inferred, the buffer laid out mixed).
        "cores_declared_by": None if an.core_declaration is None else {
            "source": an.core_declaration.source, "detail": an.core_declaration.detail,
            "file": display_path(an.core_declaration.path, root) if an.core_declaration.path else None,
            "line": an.core_declaration.line},
        "layers": {
            key: [
                {"file": display_path(h.path, root), "line": h.line, "detail": h.detail}
                for h in layers.found.get(key, [])
            ]
            for key in layers.titles
        },
        "missing_layers": layers.missing(),
        "includes": {
            "files": [display_path(p, root) for p in an.includes.files],
            "missing": [
                {"file": display_path(p, root), "line": ln, "header": t}
                for p, ln, t in an.includes.missing
            ],
            "external": sorted(an.includes.external),
            "cycles": [[display_path(p, root) for p in c] for c in an.includes.cycles],
        },
        "outside": [
            {"file": display_path(f.path, root), "role": f.role, "edited": f.edited,
             "included_by": [display_path(o, root) for o in f.included_by]}
            for f in plan.outside_files()
        ],
        "tree": region_json(plan, plan.root),
        "labels_per_core": {core: len(labels) for core, labels in plan.per_core.items()},
        "labels": plan.per_core,
        "variants": plan.variants,
        "dropped": [
            {"label": d.label, "file": display_path(d.path, root) if d.path else None, "line": d.line,
             "class": d.cost, "cores": list(d.cores), "why": d.why}
            for d in plan.dropped
        ],
        "over_budget": plan.over_budget,
        "lint": plan.lint,
        "capacity": [
            {"core": e.core, "records": e.records, "unknown_loops": list(e.unknown_loops)}
            for e in plan.capacity
        ],
        "roles": [
            {"condition": role, "file": display_path(Path(p), root), "line": ln}
            for role, (p, ln) in plan.roles.items()
        ],
        "loops": [
            {"file": display_path(lp.path, root), "line": lp.line, "var": lp.var,
             "class": lp.classification, "why": lp.reason, "function": lp.function}
            for lp in plan.loops
        ],
        "diagnostics": [d.to_json(root) for d in plan.diagnostics],
    }


# --- call graph -------------------------------------------------------------------------


def _traced_functions(plan: Plan) -> set[str]:
    return {r.function for r in plan.root.walk() if r.function}


def graph_dot(plan: Plan) -> str:
    g = plan.analysis.callgraph
    traced = _traced_functions(plan)
    lines = [f'digraph "{plan.analysis.layers.op_name}" {{', "  rankdir=LR;",
             '  node [shape=box, fontname="monospace", fontsize=10];']
    ids = {n: f"n{i}" for i, n in enumerate(g.nodes)}
    for node, data in g.nodes(data=True):
        label = f"{data.get('label', node)}\\n{Path(str(data.get('file', ''))).name}:{data.get('line', '')}"
        style = ', style=filled, fillcolor="#ffd27f"' if node in traced else ""
        lines.append(f'  {ids[node]} [label="{label}"{style}];')
    for a, b in g.edges:
        lines.append(f"  {ids[a]} -> {ids[b]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


# The graph's formats by suffix: written by optrace, or drawn by Graphviz's `dot`.
GRAPH_OWN = (".dot", ".gv", ".html", ".htm")
GRAPH_DRAWN = (".svg", ".png")


def graph_refusal(path: Path) -> str | None:
    """Why `--graph path` cannot be written here, naming the suffixes that can; None when
    it can. Asked before any operator is planned: a wrong suffix costs nothing."""
    suffix = path.suffix.lower()
    if suffix in GRAPH_OWN or (suffix in GRAPH_DRAWN and shutil.which("dot") is not None):
        return None
    usable = ", ".join(GRAPH_OWN + (GRAPH_DRAWN if shutil.which("dot") is not None else ()))
    if suffix in GRAPH_DRAWN:
        return f"{suffix} is drawn by Graphviz's `dot`, which is not on PATH; without it: {usable}"
    return f"the graph's format is chosen by its suffix ({suffix or 'none given'}): use {usable}" + (
        "" if shutil.which("dot") is not None else f" ({', '.join(GRAPH_DRAWN)} with Graphviz installed)")


def graph_bytes(plan: Plan, path: Path) -> bytes:
    """The call graph as ``path``'s suffix asks (see :func:`graph_refusal`): .html, .dot,
    or .svg / .png drawn by Graphviz's ``dot`` (RuntimeError without it)."""
    suffix = path.suffix.lower()
    if suffix in (".html", ".htm"):
        return graph_html(plan).encode("utf-8")
    if suffix in GRAPH_DRAWN:
        dot = shutil.which("dot")
        if dot is None:
            raise RuntimeError(graph_refusal(path))
        return subprocess.run([dot, f"-T{suffix[1:]}"], input=graph_dot(plan).encode(), check=True,
                              capture_output=True).stdout
    return graph_dot(plan).encode("utf-8")


def write_graph(plan: Plan, path: Path, inputs: Iterable[Path] = ()) -> None:
    """The call graph as ``path`` (:func:`graph_bytes`), through the one output helper:
    an input among ``inputs`` or a FIFO is refused (OutputError)."""
    write_output(path, graph_bytes(plan, path), inputs=inputs)
