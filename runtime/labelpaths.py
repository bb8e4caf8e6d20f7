"""Label paths against nesting: a label names its parent (``processing combine wait`` is a
part of ``processing combine``, the longest other label its words start with), and a
span whose parent label exists should lie inside a span of it on the same core. Where it
does not, the trace says one thing by its names and another by its nesting — a reader
believes the names — so ``collect`` and ``report`` say so.
"""

from __future__ import annotations

import numpy as np


def label_parents(labels: list[str]) -> list[int]:
    """Per label, the index of its parent label (the longest other label that is a
    prefix of it at a word boundary), or -1."""
    index = {label: i for i, label in enumerate(labels)}
    parents: list[int] = []
    for label in labels:
        words = label.split(" ")
        parent = -1
        for cut in range(len(words) - 1, 0, -1):
            found = index.get(" ".join(words[:cut]))
            if found is not None:
                parent = found
                break
        parents.append(parent)
    return parents


def outside_parent(
    labels: list[str], label: np.ndarray, track: np.ndarray, start: np.ndarray, end: np.ndarray
) -> list[tuple[str, str, int]]:
    """(child, parent, spans) for every label with spans that lie inside no span of its
    parent label on their track: one vectorised search per parent label, over the spans
    of it and of its children's labels (grouped by label once, in their order)."""
    if label.size == 0:
        return []
    parents = label_parents(labels)
    base = min(int(label.min()), 0)  # a label id below 0 (none named): counted, never a child
    ids = label.astype(np.int64) - base
    counts = np.bincount(ids)
    present = set((np.flatnonzero(counts) + base).tolist())
    # Each label's spans, in their order: a stable sort by label (by radix where the ids fit
    # in 16 bits, as they do: a trace's labels are a few hundred).
    # One byte a key where the ids fit (numpy's radix sort then makes one pass, not two).
    narrow = np.uint8 if counts.size <= 1 << 8 else np.uint16 if counts.size <= 1 << 16 else None
    by_label = np.argsort(ids.astype(narrow) if narrow is not None else ids, kind="stable")
    del ids
    bounds = np.concatenate([[0], np.cumsum(counts)])
    # One key orders spans by track, then start: track × width + (start - lo).
    lo, width = _key_scale(track, start, end)
    # The children of each parent label checked together (a kernel's phases are children of
    # one `processing`): one search per parent, not per child label.
    children_of: dict[int, list[int]] = {}
    pairs: list[tuple[int, int]] = []  # (child, parent), in the children's order
    for child in sorted(present):
        parent = parents[child] if 0 <= child < len(parents) else -1
        if parent < 0:
            continue
        if parent not in present:
            continue  # the parent not recorded at all (another variant of the kernel): no claim
        children_of.setdefault(parent, []).append(child)
        pairs.append((child, parent))
    missing_of: dict[int, int] = {}
    for parent, kids in children_of.items():
        theirs = by_label[bounds[parent - base] : bounds[parent - base + 1]]
        pieces = [by_label[bounds[child - base] : bounds[child - base + 1]] for child in kids]
        children = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        mine, inside = _inside(theirs, children, track, start, end, lo, width)
        outside = label[mine[~inside]].astype(np.int64) - base
        counts_out = np.bincount(outside, minlength=max(kids) - base + 1) if outside.size else None
        for child in kids:
            missing_of[child] = int(counts_out[child - base]) if counts_out is not None else 0
    return [(labels[child], labels[parent], missing_of[child])
            for child, parent in pairs if missing_of[child]]


def _key_scale(track: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[int | float, int | float]:
    """``lo`` and ``width`` of the key that orders spans by track, then start: track x
    width + (start - lo). In integers where the times are integers and every key fits in
    63 bits (exact, and a search over integers is faster); else in floats."""
    if start.dtype.kind in "iu" and end.dtype.kind in "iu" and track.dtype.kind in "iu":
        # The keys use the starts; the ends too in the width, as the floats' does (a span
        # may end before it starts: damaged input). Every value an int64 (uint64 times
        # past 2**63 are not), every key within 2**62.
        lo_i = int(np.min(start))
        hi_i = max(int(np.max(start)), int(np.max(end)))
        width_i = max(hi_i - lo_i + 1, 1)
        tracks_top = max(abs(int(np.min(track))), abs(int(np.max(track)))) + 1
        if -(1 << 63) <= lo_i and hi_i < 1 << 63 and (tracks_top + 1) * width_i < 1 << 62:
            return lo_i, width_i
    lo = float(np.min(start))
    return lo, float(np.max(end)) - lo + 1.0


def _keys(track: np.ndarray, start: np.ndarray, rows: np.ndarray, lo: int | float,
          width: int | float) -> np.ndarray:
    """The (track, start) keys of ``rows`` (see :func:`_key_scale`)."""
    kind = np.int64 if isinstance(width, int) else np.float64
    keys: np.ndarray = np.take(track, rows).astype(kind) * width + (np.take(start, rows).astype(kind) - lo)
    return keys


def _inside(theirs: np.ndarray, children: np.ndarray, track: np.ndarray, start: np.ndarray, end: np.ndarray,
            lo: int | float, width: int | float) -> tuple[np.ndarray, np.ndarray]:
    """Of the spans ``children``, those on cores that ran a span of ``theirs`` (the parent
    label's spans), and whether each lies inside one of them on its core."""
    # np.take, not array[rows]: the same gathers in less time (numpy's fancy indexing
    # goes through its general index machinery).
    theirs_track = np.take(track, theirs)
    rows = theirs_track.size and 0 <= int(theirs_track.min()) and int(theirs_track.max()) < 1 << 24
    per_core = np.bincount(theirs_track) if rows else None  # track ids a table's rows
    if per_core is not None and int(per_core.max()) == 1:
        # One span of the parent a core (a kernel's `processing`): each child's is its
        # core's, looked up — the last parent span starting by the child's start there.
        slot = np.full(per_core.size, -1, np.int64)
        slot[theirs_track] = theirs
        child_track = np.take(track, children)
        ran = (child_track >= 0) & (child_track < per_core.size)  # -1 would index from the end
        if ran.all():
            found = np.take(slot, child_track)
            ran = found >= 0  # only on cores that ran the parent
            mine, found = (children, found) if ran.all() else (children[ran], found[ran])
        else:
            ran[ran] = slot[child_track[ran]] >= 0
            mine, found = children[ran], slot[child_track[ran]]
        return mine, ((np.take(start, found) <= np.take(start, mine))
                      & _ends_by(np.take(end, found), np.take(end, mine)))
    # Only on cores that ran the parent: a core whose role has no such phase is not
    # contradicted by a child it runs alone.
    on = _on_tracks_of(np.take(track, children), theirs_track)
    # In the table's order (each child label's spans are, one label after another; a
    # merge of those runs): a table in (track, start) order then asks its searches in
    # ascending order, which numpy's search answers faster.
    mine = np.sort(children if on.all() else children[on], kind="stable")
    key_theirs = _keys(track, start, theirs, lo, width)
    if bool((key_theirs[1:] >= key_theirs[:-1]).all()):  # a table in (track, start) order
        order, keys = theirs, key_theirs
    else:
        by_key = np.argsort(key_theirs, kind="stable")
        order, keys = theirs[by_key], key_theirs[by_key]
    at = np.searchsorted(keys, _keys(track, start, mine, lo, width), side="right") - 1
    found = np.take(order, np.maximum(at, 0))
    on_track = (at >= 0) & (np.take(track, found) == np.take(track, mine))
    inside = on_track & _ends_by(np.take(end, found), np.take(end, mine))
    doubt = np.flatnonzero(on_track & ~inside)
    if doubt.size:
        # The last span of the parent's started by the child's start ended before its end;
        # an earlier one may still hold it (a label nested in itself: `processing` inside
        # `processing`). Per track of those children, the latest end of the parent's spans
        # started by each place: rare, a loop over those tracks only.
        order_track = np.take(track, order)
        order_end = np.take(end, order)
        child_track = np.take(track, mine[doubt])
        for one in np.unique(child_track).tolist():
            places = np.flatnonzero(order_track == one)  # the track's spans, by start
            reach = np.maximum.accumulate(order_end[places])
            which = doubt[child_track == one]
            k = np.searchsorted(places, at[which], side="right") - 1
            inside[which] = _ends_by(reach[k], np.take(end, mine[which]))
    return mine, inside


def _ends_by(parent_end: np.ndarray, child_end: np.ndarray) -> np.ndarray:
    """Whether each parent's end is at or after its child's: exactly for integer times
    (cycles); for float ones (µs read from a trace, whose times are whole ns) on the ns
    they stand for — ts + dur of two spans ending on one cycle differ in their last bits
    (2469.24 + 19.54 against 2469.5 + 19.28), and a slack wider than a ns would hide a
    child a ns outside at large times."""
    if parent_end.dtype.kind == "f" or child_end.dtype.kind == "f":
        found: np.ndarray = np.rint(parent_end * 1000.0) >= np.rint(child_end * 1000.0)
        return found
    return np.asarray(parent_end >= child_end)


def _on_tracks_of(tracks: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """Per entry of ``tracks``, whether it is one of ``theirs``' tracks. Not np.unique +
    np.isin: np.unique imports numpy.ma on its first call (~14 ms, a sixth of a cold
    collect of 8 ranks). Track ids are a table's small row numbers: a lookup table."""
    if not theirs.size or not tracks.size:
        return np.zeros(tracks.size, bool)
    low = min(int(theirs.min()), int(tracks.min()))
    high = max(int(theirs.max()), int(tracks.max()))
    if low < 0 or high >= 1 << 24:  # not row numbers: sort and search
        ran = np.sort(theirs)
        at = np.minimum(np.searchsorted(ran, tracks), ran.size - 1)
        return np.asarray(ran[at] == tracks)
    table = np.zeros(high + 1, bool)
    table[theirs] = True
    found: np.ndarray = table[tracks]
    return found


def disagreement(child: str, parent: str) -> str:
    """The words collect's note and report's warning use (no count: notes of several
    rank files group by their text)."""
    return (f"label path and nesting disagree: '{child}' spans lie outside '{parent}', which "
            "their label names as their parent")
