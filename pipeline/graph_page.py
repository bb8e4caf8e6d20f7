"""`plan --graph x.html`: the call graph from the kernel entry as one self-contained page.

Every function the entry reaches is a box: its name, where it is, its core type (AIC,
AIV or AIC+AIV), the trace labels that measure it (traced functions are highlighted) and
the points placed inside it. A traced function that calls others heads a group (the
phases); a group collapses to its head box. The page needs nothing from the network and
runs no one else's script: the layout is computed here and drawn as inline SVG, and a
few lines of our own script collapse and expand groups.

The layout is an indented tree in columns: the spanning tree a depth-first walk from the
entry meets (each function once, under its first caller, callees in call order), one row
per box. A box's column is its depth; the step between columns shrinks with the depth of
the tree so the widest row still fits a 1400-pixel window, and rows never share a y, so
no two boxes can overlap whatever the step. Calls that are not tree edges run in a gutter
right of the boxes. Collapsing only removes rows: the script stacks the remaining rows
again, as :func:`stack` does.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from optrace.engine.model import Kind, Region
from optrace.engine.plan import Plan

BOX_W = 300  # px: a box fits ~38 characters of the name line
FONT = 12  # px, the name line
SMALL = 11  # px, the other lines
# Advance of one character, in em, of the monospace fonts the page asks for (Liberation
# Mono and DejaVu Sans Mono are 0.60): a little more, so a text measured by the browser
# is never wider than the room counted here.
CHAR_EM = 0.62
PAD = 8  # px inside the box, left and right
LINE = 15  # px per text line
TOP_PAD = 4  # px above the first line
ROW_GAP = 8  # px between rows
MARGIN = 12  # px around the drawing
# The widest drawing: a 1400-pixel window, less the body's margins and a scrollbar.
MAX_WIDTH = 1340
MAX_STEP = BOX_W + 36  # columns no further apart than this on shallow trees
LANE = 5  # px between the gutter's lanes
MAX_LANES = 10
HEADER = 4  # px above the first row

CORE_CLASS = {"AIC": "aic", "AIV": "aiv", "AIC+AIV": "mixed"}


def char_width(size: int) -> float:
    return CHAR_EM * size


def chars_in(width: float, size: int) -> int:
    """How many characters of a `size`-pixel monospace line fit in `width` pixels."""
    return max(0, int(width / char_width(size)))


def fit(text: str, room: int) -> str:
    """`text` cut to `room` characters, an ellipsis marking the cut."""
    if len(text) <= room:
        return text
    return text[: max(0, room - 1)] + "…" if room > 0 else ""


def fit_middle(text: str, room: int) -> str:
    """`text` cut in its middle (a qualified name's start and end say most)."""
    if len(text) <= room:
        return text
    if room < 5:
        return fit(text, room)
    head = (room - 1) // 2
    return text[:head] + "…" + text[len(text) - (room - 1 - head):]


@dataclass
class Box:
    """One function of the call graph, as drawn."""

    node: str
    full: str  # its name as the plan shows it (class::method)
    where: str  # file:line
    path: str  # the file's path (from the repository's root) and line
    cores: str  # "AIC", "AIV", "AIC+AIV" or "" (unknown)
    cores_from: str  # why: "the plan", "its specialisation", "its callers", "the kernel"
    labels: list[str] = field(default_factory=list)  # trace labels measuring it
    inside: list[str] = field(default_factory=list)  # labels of the points in its body
    callers: list[str] = field(default_factory=list)  # callers other than its tree parent
    index: int = 0  # its place in the preorder (the boxes' list)
    depth: int = 0
    parent: int | None = None  # index of the tree parent
    last: int = 0  # index of the last box of its subtree (itself when a leaf)
    lines: list[tuple[str, str]] = field(default_factory=list)  # (css class, text), fitted
    group: bool = False  # heads a group: traced, with callees

    @property
    def traced(self) -> bool:
        return bool(self.labels)

    @property
    def height(self) -> int:
        return TOP_PAD + LINE * len(self.lines) + 4


@dataclass
class Layout:
    """The boxes in preorder with where they go: columns, the width, the gutter's lanes."""

    boxes: list[Box]
    extra: list[tuple[int, int, int]]  # calls off the tree: (caller, callee, gutter lane)
    step: float  # px between columns
    width: float  # of the drawing
    right: float  # x of the rightmost box's right edge
    gutter: float  # x of the gutter's first lane

    def x(self, i: int) -> float:
        return MARGIN + self.boxes[i].depth * self.step


def name_parts(full: str) -> tuple[str, str]:
    """(scope, name) of a qualified name; templates' `::` inside `<...>` do not split."""
    depth = 0
    cut = -1
    i = 0
    while i < len(full):
        c = full[i]
        if c == "<":
            depth += 1
        elif c == ">":
            depth = max(0, depth - 1)
        elif depth == 0 and full.startswith("::", i):
            cut = i
            i += 1
        i += 1
    if cut < 0:
        return "", full
    return full[:cut], full[cut + 2:]


def box_lines(box: Box) -> list[tuple[str, str]]:
    """The box's text, each line cut to the box's width (the whole in its tooltip)."""
    inner = BOX_W - 2 * PAD
    scope, name = name_parts(box.full)
    badge = chars_in(inner, FONT) - (len(box.cores) + 2 if box.cores else 0)
    lines = [("name", fit(name, badge))]
    room = chars_in(inner, SMALL)
    where = fit_middle(box.where, room)
    left = room - len(where) - 2
    lines.append(("where", (fit_middle(scope, left) + "  " if scope and left >= 12 else "") + where))
    if box.labels:
        more = f" (+{len(box.labels) - 1})" if len(box.labels) > 1 else ""
        lines.append(("label", "◆ " + fit(box.labels[0], room - 2 - len(more)) + more))
    if box.inside:
        # Inside a traced function its own label is every point's prefix: said once.
        own = box.labels[0] + " " if box.labels else "\0"
        words = ", ".join(label.removeprefix(own) for label in box.inside)
        lines.append(("inside", fit(f"points inside: {words}", room)))
    return lines


def order_tree(g: nx.DiGraph, start: str) -> tuple[list[str], dict[str, str]]:
    """The depth-first preorder from `start` (callees in the order they are called) and
    each node's tree parent. networkx walks it without recursion."""
    order = [start]
    parent: dict[str, str] = {}
    for caller, callee in nx.dfs_edges(g, start):
        order.append(callee)
        parent[callee] = caller
    return order, parent


def make_boxes(g: nx.DiGraph, start: str, describe: Mapping[str, Box]) -> list[Box]:
    """The boxes in preorder, with depth, parent, subtree extent, other callers, lines."""
    order, parent = order_tree(g, start)
    index = {n: i for i, n in enumerate(order)}
    boxes = [describe[n] for n in order]
    for i, box in enumerate(boxes):
        box.index = i
        box.last = i
        up = parent.get(box.node)
        box.parent = index[up] if up is not None else None
        box.depth = 0 if box.parent is None else boxes[box.parent].depth + 1
        box.callers = [str(g.nodes[c].get("label", c)) for c in g.predecessors(box.node)
                       if c in index and c != up and c != box.node]
    for i in range(len(boxes) - 1, 0, -1):  # a subtree's last box, children before parents
        up_i = boxes[i].parent
        assert up_i is not None
        boxes[up_i].last = max(boxes[up_i].last, boxes[i].last)
    for box in boxes:
        box.group = box.traced and box.last > box.index and box.parent is not None
        box.lines = box_lines(box)
        if box.group:
            below = box.last - box.index
            box.lines.append(("toggle", f"▾ {below} function{'s' if below > 1 else ''} below"))
    return boxes


def arrange(g: nx.DiGraph, boxes: list[Box]) -> Layout:
    """Columns and the gutter's lanes: everything within MAX_WIDTH."""
    index = {b.node: i for i, b in enumerate(boxes)}
    extra = []
    for a, b in g.edges:
        if a in index and b in index and a != b and boxes[index[b]].parent != index[a]:
            extra.append((index[a], index[b]))
    extra.sort(key=lambda e: (min(e), max(e)))
    lane_end: list[int] = []
    placed = []
    for a, b in extra:
        low, high = min(a, b), max(a, b)
        free = next((k for k, end in enumerate(lane_end) if end < low), None)
        if free is None and len(lane_end) < MAX_LANES:
            lane_end.append(-1)
            free = len(lane_end) - 1
        lane = free if free is not None else low % MAX_LANES  # full: share a lane
        lane_end[lane] = max(lane_end[lane], high)
        placed.append((a, b, lane))
    gutter = (12 + LANE * len(lane_end)) if lane_end else 0
    deepest = max((b.depth for b in boxes), default=0)
    room = MAX_WIDTH - 2 * MARGIN - gutter - BOX_W
    step = min(MAX_STEP, room / deepest) if deepest else MAX_STEP
    right = MARGIN + deepest * step + BOX_W
    return Layout(boxes, placed, step, right + gutter + MARGIN, right, right + 12)


def stack(boxes: list[Box], collapsed: Iterable[int] = ()) -> dict[int, float]:
    """The y of every box shown when the groups headed by `collapsed` are shut: rows in
    preorder, a shut group's members left out. The page's script does the same."""
    shut = set(collapsed)
    ys: dict[int, float] = {}
    y = float(HEADER)
    skip = -1
    for i, box in enumerate(boxes):
        if i <= skip:
            continue
        ys[i] = y
        y += box.height + ROW_GAP
        if i in shut and box.group:
            skip = box.last
    return ys


# --- from the plan ----------------------------------------------------------------------


def _function_at(plan: Plan, nodes: Iterable[str], region: Region) -> str | None:
    """The innermost of `nodes` whose body holds `region`'s anchor."""
    anchor = region.anchor
    if anchor is None:
        return None
    best: tuple[int, str] | None = None
    for node in nodes:
        fn = plan.analysis.index.functions.get(node)
        if fn is None or fn.src.path != anchor.path:
            continue
        if fn.node.start_byte <= anchor.start < fn.node.end_byte:
            span = fn.node.end_byte - fn.node.start_byte
            if best is None or span < best[0]:
                best = (span, node)
    return best[1] if best else None


def _cores(plan: Plan, g: nx.DiGraph, traced: Mapping[str, set[str]]) -> dict[str, tuple[set[str], str]]:
    """Each function's core types and why: a traced function's are the plan's; a
    core-type specialisation's its own; the entry's the kernel's; any other function runs
    where its callers run (a fixed point over the graph, cycles included)."""
    an = plan.analysis
    known: dict[str, tuple[set[str], str]] = {}
    for node in g.nodes:
        fn = an.index.functions.get(node)
        if traced.get(node):
            known[node] = (set(traced[node]), "the plan")
        elif fn is not None and fn.core:
            known[node] = ({fn.core}, "its specialisation")
        elif node == an.entry_fn.id:
            known[node] = (set(an.kernel_cores), "the kernel")
    cores = {n: known.get(n, (set(), "its callers")) for n in g.nodes}
    # A worklist: a function is looked at again only when a caller's core types grew.
    todo = list(g.nodes)
    while todo:
        node = todo.pop()
        for callee in g.successors(node):
            if callee in known or cores[node][0] <= cores[callee][0]:
                continue
            cores[callee] = (cores[callee][0] | cores[node][0], "its callers")
            todo.append(callee)
    return cores


def plan_boxes(plan: Plan) -> tuple[nx.DiGraph, list[Box]]:
    an = plan.analysis
    start = an.entry_fn.id
    g = an.callgraph.subgraph(nx.descendants(an.callgraph, start) | {start})
    labels: dict[str, list[str]] = {}
    traced: dict[str, set[str]] = {}
    inside: dict[str, list[str]] = {}
    for region in plan.root.walk():
        fid = region.function
        if fid is not None and fid in g and region.kind in (Kind.ROOT, Kind.CALL, Kind.BODY):
            labels.setdefault(fid, []).append(region.label)
            traced.setdefault(fid, set()).update(region.cores)
            continue
        holder = _function_at(plan, g.nodes, region)
        if holder is not None:
            inside.setdefault(holder, []).append(region.label)
    cores = _cores(plan, g, traced)
    root = an.layers.repo_root
    describe = {}
    for node, data in g.nodes(data=True):
        path = Path(str(data.get("file", "")))
        which, why = cores[node]
        # The box names the file; the tooltip the path from the repository's root.
        try:
            shown = path.relative_to(root).as_posix()
        except ValueError:
            shown = str(path)
        describe[node] = Box(
            node=node, full=str(data.get("label", node)), where=f"{path.name}:{data.get('line', '')}",
            path=f"{shown}:{data.get('line', '')}", cores="+".join(sorted(which)), cores_from=why,
            labels=labels.get(node, []), inside=inside.get(node, []))
    return g, make_boxes(g, start, describe)


# --- the page ---------------------------------------------------------------------------


def _tooltip(box: Box) -> str:
    lines = [box.full, box.path, f"core type: {box.cores or 'unknown'} (from {box.cores_from})"]
    lines += [f"traced as: {label}" for label in box.labels]
    lines += [f"point inside: {label}" for label in box.inside]
    if box.callers:
        lines.append("also called from: " + ", ".join(box.callers))
    return "\n".join(lines)


def _box_svg(i: int, box: Box, x: float, y: float) -> str:
    e = html.escape
    kind = " traced" if box.traced else ""
    kind += " group" if box.group else ""
    out = [f'<g class="node{kind}" id="n{i}" transform="translate({x:.1f},{y:.1f})">',
           f"<title>{e(_tooltip(box))}</title>",
           f'<rect class="box" width="{BOX_W}" height="{box.height}" rx="4"/>']
    for k, (cls, text) in enumerate(box.lines):
        base = TOP_PAD + LINE * k + (FONT if k == 0 else SMALL) - 1
        out.append(f'<text class="{cls}" x="{PAD}" y="{base}">{e(text)}</text>')
    if box.cores:
        w = len(box.cores) * char_width(SMALL) + 6
        out.append(f'<rect class="core {CORE_CLASS.get(box.cores, "mixed")}" x="{BOX_W - PAD - w:.1f}" '
                   f'y="{TOP_PAD}" width="{w:.1f}" height="{LINE - 2}" rx="3"/>'
                   f'<text class="core" x="{BOX_W - PAD - w + 3:.1f}" y="{TOP_PAD + SMALL}">'
                   f"{box.cores}</text>")
    out.append("</g>")
    return "".join(out)


STYLE = """
body{margin:12px;font:13px/1.4 "Liberation Sans","DejaVu Sans",sans-serif;color:#222}
h1{font-size:17px;margin:0 0 4px;overflow-wrap:anywhere}
p{margin:2px 0 6px;overflow-wrap:anywhere}
button{font:inherit;margin-right:6px}
svg{display:block;max-width:100%;height:auto;margin-top:8px}
svg text{font-family:"Liberation Mono","DejaVu Sans Mono",monospace;font-size:11px;fill:#333;
 white-space:pre}
svg text.name{font-size:12px;font-weight:bold;fill:#111}
svg text.where{fill:#666}
svg text.label{fill:#8a4b00}
svg text.inside{fill:#555}
svg text.toggle{fill:#2456a4;cursor:pointer}
svg text.core{fill:#fff;font-size:11px}
.box{fill:#fff;stroke:#9aa3ad}
.traced .box{fill:#ffe2ad;stroke:#c07a00;stroke-width:1.5}
.group{cursor:pointer}
.core.aic{fill:#2f6fb7}.core.aiv{fill:#2e8b57}.core.mixed{fill:#7b4fa6}
.band{fill:rgba(47,111,183,.06);stroke:rgba(47,111,183,.35);stroke-dasharray:4 3}
.tree{fill:none;stroke:#9aa3ad}
.extra{fill:none;stroke:#b9a0d0;stroke-dasharray:3 3}
svg.no-extra .extra{display:none}
.legend span{display:inline-block;padding:0 6px;margin-right:6px;border-radius:3px;color:#fff}
"""

# Stacks the rows shown (a shut group's members hidden) as `stack` does, and redraws the
# bands and the edges between the boxes shown; a call into a shut group ends at its head.
SCRIPT = """
(() => {
const G = JSON.parse(document.getElementById('graph-data').textContent);
const svg = document.getElementById('graph');
const shut = new Set();
const el = i => document.getElementById('n' + i);
function lay() {
  const y = [], rep = [], end = [];
  let cur = G.top, skip = -1, head = -1;
  G.nodes.forEach((n, i) => {
    const box = el(i);
    if (i <= skip) { box.style.display = 'none'; rep[i] = head; }
    else {
      box.style.display = ''; rep[i] = i; y[i] = cur;
      box.setAttribute('transform', `translate(${n.x},${cur})`);
      cur += n.h + G.gap;
      if (n.group && shut.has(i)) { skip = n.last; head = i; }
      const t = box.querySelector('text.toggle');
      if (t) t.textContent = (shut.has(i) ? '\\u25b8' : '\\u25be') + t.textContent.slice(1);
    }
    end[i] = cur;
  });
  svg.querySelectorAll('rect.band').forEach(b => {
    const i = +b.dataset.i, n = G.nodes[i];
    if (rep[i] !== i) { b.style.display = 'none'; return; }
    b.style.display = '';
    b.setAttribute('y', y[i] - 3);
    b.setAttribute('height', (shut.has(i) ? n.h : end[n.last] - G.gap - y[i]) + 6);
    b.setAttribute('width', shut.has(i) ? G.w + 8 : G.right - n.x + 8);
  });
  svg.querySelectorAll('path.tree').forEach(p => {
    const a = +p.dataset.a, b = +p.dataset.b, n = G.nodes[a];
    if (rep[b] !== b) { p.style.display = 'none'; return; }
    p.style.display = '';
    p.setAttribute('d', `M${n.x + G.trunk} ${y[a] + n.h}V${y[b] + 10}H${G.nodes[b].x}`);
  });
  const drawn = new Set();
  svg.querySelectorAll('path.extra').forEach(p => {
    const a = rep[+p.dataset.a], b = rep[+p.dataset.b];
    if (a === b || drawn.has(a + ' ' + b)) { p.style.display = 'none'; return; }
    drawn.add(a + ' ' + b);
    p.style.display = '';
    const gx = G.gutter + G.lane * +p.dataset.lane;
    p.setAttribute('d', `M${G.nodes[a].x + G.w} ${y[a] + 8}H${gx}V${y[b] + 12}H${G.nodes[b].x + G.w}`);
  });
  const h = cur - G.gap + G.top;
  svg.setAttribute('height', h);
  svg.setAttribute('viewBox', `0 0 ${G.width} ${h}`);
}
G.nodes.forEach((n, i) => {
  if (n.group) el(i).addEventListener('click', () => {
    shut.has(i) ? shut.delete(i) : shut.add(i); lay(); });
});
document.getElementById('collapse-all').onclick = () => {
  G.nodes.forEach((n, i) => { if (n.group) shut.add(i); }); lay(); };
document.getElementById('expand-all').onclick = () => { shut.clear(); lay(); };
document.getElementById('other-calls').onchange = e => svg.classList.toggle('no-extra', !e.target.checked);
lay();
})();
"""


def render(title: str, subtitle: str, layout: Layout) -> str:
    """The page: header, legend, buttons, the SVG as :func:`stack` lays it out expanded,
    the layout's figures for the script, and the script."""
    boxes = layout.boxes
    ys = stack(boxes)
    height = max((ys[i] + b.height for i, b in enumerate(boxes)), default=0) + HEADER
    trunk = min(10.0, layout.step / 2)
    parts = [f'<svg id="graph" xmlns="http://www.w3.org/2000/svg" width="{layout.width:.0f}" '
             f'height="{height:.0f}" viewBox="0 0 {layout.width:.0f} {height:.0f}" role="img">',
             '<defs><marker id="arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="6" '
             'markerHeight="6" orient="auto"><path d="M6 0L0 3L6 6z" fill="#b9a0d0"/></marker></defs>']
    right = layout.right
    for i, box in enumerate(boxes):
        if box.group:
            x = layout.x(i) - 4
            bottom = ys[box.last] + boxes[box.last].height
            parts.append(f'<rect class="band" data-i="{i}" x="{x:.1f}" y="{ys[i] - 3:.1f}" '
                         f'width="{right - x + 4:.1f}" height="{bottom - ys[i] + 6:.1f}" rx="6"/>')
    for i, box in enumerate(boxes):
        if box.parent is not None:
            a = box.parent
            parts.append(f'<path class="tree" data-a="{a}" data-b="{i}" d="M{layout.x(a) + trunk:.1f} '
                         f'{ys[a] + boxes[a].height:.1f}V{ys[i] + 10:.1f}H{layout.x(i):.1f}"/>')
    for a, b, lane in layout.extra:
        gx = layout.gutter + LANE * lane
        parts.append(f'<path class="extra" data-a="{a}" data-b="{b}" data-lane="{lane}" '
                     f'marker-end="url(#arrow)" d="M{layout.x(a) + BOX_W:.1f} {ys[a] + 8:.1f}H{gx:.1f}'
                     f'V{ys[b] + 12:.1f}H{layout.x(b) + BOX_W:.1f}"/>')
    for i, box in enumerate(boxes):
        parts.append(_box_svg(i, box, layout.x(i), ys[i]))
    parts.append("</svg>")
    data = {"top": HEADER, "gap": ROW_GAP, "w": BOX_W, "trunk": trunk, "gutter": layout.gutter,
            "right": right, "lane": LANE, "width": round(layout.width),
            "nodes": [{"x": round(layout.x(i), 1), "h": b.height, "last": b.last, "group": b.group}
                      for i, b in enumerate(boxes)]}
    # `</` never ends the data's script element early, whatever a name holds.
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    traced = sum(1 for b in boxes if b.traced)
    groups = sum(1 for b in boxes if b.group)
    legend = ('<p class="legend">core type: <span class="core aic" style="background:#2f6fb7">AIC</span>'
              '<span style="background:#2e8b57">AIV</span><span style="background:#7b4fa6">AIC+AIV</span>'
              '<span style="background:#ffe2ad;color:#8a4b00;border:1px solid #c07a00">traced</span>'
              "a group (dashed band) is a traced function and what it calls: click its box to collapse "
              "it; dashed purple lines: calls not drawn as the tree (hover a box for all its callers)</p>")
    t = html.escape(title)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{t}</title><style>{STYLE}</style>"
        f"</head><body><h1>{t}</h1><p>{html.escape(subtitle)} {len(boxes)} functions, {traced} traced, "
        f"{groups} groups.</p>{legend}<p><button id='collapse-all'>collapse all groups</button>"
        "<button id='expand-all'>expand all</button><label><input type='checkbox' id='other-calls' "
        "checked> other calls</label></p>" + "".join(parts)
        + f'<script type="application/json" id="graph-data">{blob}</script><script>{SCRIPT}</script>'
        "</body></html>\n"
    )


def graph_html(plan: Plan) -> str:
    """The call graph page for `plan` (see the module's description)."""
    g, boxes = plan_boxes(plan)
    layers = plan.analysis.layers
    subtitle = f"From the kernel entry {plan.analysis.entry_fn.display}:"
    return render(f"optrace call graph: {layers.op_name}", subtitle, arrange(g, boxes))
