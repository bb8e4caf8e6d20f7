"""plan's outputs in the user's cache, so that planning an unchanged repository again
costs a walk of it and a read of each operator's files rather than their analysis.

What planning one operator printed (its text or its JSON document, and its warnings for
stderr) is an entry of the user cache (kind ``plan``), taken back while nothing it was
derived from changed: result_cache.py says what every entry's name covers and what is
recorded while the operator is planned. Besides that, a plan's entry is named by:

- the output's form (text or JSON) and the working directory (stderr's messages name
  paths relative to it);
- the operator directory and `--repo-root` as spelled, not only resolved (the plan
  shows paths as the user gave them).

The repository index (engine/discovery.py) is built and brought up to date before the
recording starts, for every operator of a run at once; what the operator's plan took
from it is covered by the index's state (the paths walked and the content hash of each
file searched), an input of the entry compared on lookup like the files it lists. A
file added where the walk looks, or a changed searchable file anywhere in the
repository, is a miss for every operator of it: the plan's layer search may find it.

Only a plan that succeeded and drew no graph is kept. A hit imports neither the parser
nor networkx.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

from optrace.cli import result_cache
from optrace.cli.result_cache import Recording, recording
from optrace.engine.discovery import repo_index

__all__ = ["KIND", "PlanEntry", "Recording", "lookup", "recording", "store"]

KIND = "plan"
FORMAT = "optrace-plan-cache"
SCHEMA = 3


class PlanEntry(NamedTuple):
    """An operator's entry (its name and inputs) and, on a hit, what the plan printed."""

    found: result_cache.Lookup
    extra: dict[str, str]
    root: Path
    text: str | None = None
    doc: dict[str, object] | None = None
    messages: tuple[str, ...] = ()
    # When the index the state was taken from began its walk (`RepoIndex.built_ns`).
    since_ns: int = 0

    @property
    def hit(self) -> bool:
        return self.text is not None or self.doc is not None


def lookup(op_dir: Path, repo_root: Path | None, as_json: bool, shared: bytes) -> PlanEntry | None:
    """The operator's entry, with what its plan printed when nothing it was derived from
    changed; None when the operator cannot be cached (not an operator directory: the
    plan says why). `shared`: result_cache.shared_name_part(), once per run."""
    dirs = result_cache.real_dirs(op_dir, repo_root)
    if dirs is None:
        return None
    real, _ = dirs
    inputs = result_cache.index_inputs(op_dir, repo_root)
    if inputs is None:
        return None  # refused by the plan
    root, extra = inputs.root, inputs.extra
    name = result_cache.entry_name(
        FORMAT, SCHEMA, real, root, b"json" if as_json else b"text",
        os.fsencode(os.getcwd()), os.fsencode(op_dir), os.fsencode(repo_root) if repo_root else b"-",
        shared=shared)
    found = result_cache.lookup(KIND, FORMAT, SCHEMA, name, real, extra)
    payload = _payload(found.payload, as_json)
    if payload is None:
        return PlanEntry(found, extra, root, since_ns=inputs.since_ns)
    text, doc, messages = payload
    return PlanEntry(found, extra, root, text, doc, messages, inputs.since_ns)


_Payload = tuple[str | None, dict[str, object] | None, tuple[str, ...]]


def _payload(value: Any, as_json: bool) -> _Payload | None:
    """(text, document, messages) of an entry's payload; None for anything else."""
    if not isinstance(value, dict) or set(value) != {"text", "doc", "messages"}:
        return None
    text, doc, messages = value["text"], value["doc"], value["messages"]
    if not (isinstance(messages, list) and all(isinstance(m, str) for m in messages)):
        return None
    if as_json:
        if text is not None or not isinstance(doc, dict):
            return None
        return None, doc, tuple(messages)
    if doc is not None or not isinstance(text, str):
        return None
    return text, None, tuple(messages)


def store(entry: PlanEntry, rec: Recording, text: str | None, doc: dict[str, object] | None,
          messages: list[str]) -> bool:
    """Keep what the plan printed (`text`, or `doc` for JSON), planned while `rec` recorded."""
    payload = {"text": text, "doc": doc, "messages": messages}
    # The journal directories are looked up by name (a journal appearing must miss); the
    # files the index hashed are covered by its state, not listed one by one (a
    # repository's thousand build scripts, which every operator's build-hook search reads).
    journals = (entry.root / ".optrace", entry.found.op_dir / ".optrace")
    if not repo_index(entry.root).state_holds(entry.extra["index"]):
        return False  # a file of the state hashed anew since: the answers may be of its new bytes
    return result_cache.store(KIND, FORMAT, entry.found, rec, payload, SCHEMA, journals, entry.extra,
                              repo_index(entry.root).hashed(), covered_since_ns=entry.since_ns)
