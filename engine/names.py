"""Operator names in all their spellings, compared by one normal form.

One operator is spelled several ways across its layers: the directory and the torch op
are snake case (`moe_gmm_ffn_gate`), the OpDef class, the aclnn functions and the
registrations are camel case — and camel case keeps acronyms as their authors wrote
them (`MoeGmmFFNGate`, `MoeGmmFfnGate`). Two spellings name the same operator when they
have the same normal form: lower case, underscores between two letters or digits dropped
(`moegmmffngate`; `add_` — torch's in-place variant — stays apart from `add`). Every
place that compares operator names (discovery, the layer codemods, the gates) asks
this module, never builds a spelling and compares it byte for byte.
"""

from __future__ import annotations

import re
from functools import lru_cache

_INNER_UNDERSCORES = re.compile(r"(?<=[A-Za-z0-9])_+(?=[A-Za-z0-9])")


def op_key(name: str) -> str:
    """The normal form of an operator name: `MoeGmmFFNGate`, `MoeGmmFfnGate` and
    `moe_gmm_ffn_gate` all give `moegmmffngate`; a leading or trailing `_` stays."""
    return _INNER_UNDERSCORES.sub("", name).lower()


def same_op(a: str, b: str) -> bool:
    """`a` and `b` spell the same operator (case-, underscore- and acronym-insensitive)."""
    return op_key(a) == op_key(b)


@lru_cache(maxsize=256)
def op_name_pattern(name: str) -> bytes:
    """A regex (bytes, no groups, no anchors) matching every spelling of `name` whose
    normal form is `name`'s: each letter in either case, any `_`s between two
    characters (`_*`). `aclnn` + it matches `aclnnMoeGmmFFNGate` and `aclnnMoeGmmFfnGate`."""
    key = op_key(name)
    core = key.strip("_")
    parts = [f"[{ch.lower()}{ch.upper()}]" if ch.isalpha() else re.escape(ch) for ch in core]
    lead = "_" * (len(key) - len(key.lstrip("_")))
    trail = "_" * (len(key) - len(key.rstrip("_")))
    return (lead + "_*".join(parts) + trail).encode()


@lru_cache(maxsize=256)
def op_name_re(name: str) -> re.Pattern[bytes]:
    """A whole identifier spelling `name` (word boundaries on both sides)."""
    return re.compile(rb"(?<![A-Za-z0-9_])" + op_name_pattern(name) + rb"(?![A-Za-z0-9_])")
