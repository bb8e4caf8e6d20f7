"""Strip: remove exactly what `apply` added, from the provenance markers it left.

DESCRIPTION: delete marked lines (`... // optrace`), marked fragments
(`/*optrace<*/ ... /*>optrace*/`), the entry scaffold and runtime block (between their
begin / end marker lines), and files optrace created. Everything else — including
trace points someone wrote by hand — stays byte for byte.

Markers rather than a manifest: a manifest goes stale as soon as someone edits the file;
markers travel with the code they mark.
"""

from __future__ import annotations

import re

CODEMOD = "strip"

_BLOCK_RE = re.compile(
    rb"(\r?\n)?(// optrace-runtime-block v\d+\b.*?// optrace-runtime-block end[^\r\n]*)(\r?\n)?", re.S
)
_SCAFFOLD_RE = re.compile(rb"^// optrace-scaffold begin[^\n]*\n.*?^// optrace-scaffold end\r?\n", re.S | re.M)
_LINE_RE = re.compile(rb"^[^\n]*  // optrace\r?\n", re.M)
_LAST_LINE_RE = re.compile(rb"\r?\n[^\n]*  // optrace\Z")
_FRAGMENT_RE = re.compile(rb"/\*optrace<\*/.*?/\*>optrace\*/")
CREATED_MARK = b"// optrace-created-file:"


def is_created(data: bytes) -> bool:
    return data.startswith(CREATED_MARK)


def strip_bytes(data: bytes) -> bytes:
    """The file as it was before apply (apply's insertions are whole marked units)."""

    def block(m: re.Match[bytes]) -> bytes:
        # Inserted as `block + newline` after a line; at the end of a file that did not
        # end with a newline, as `newline + block`: give back the newline that was there.
        if m.group(3) is not None:
            return m.group(1) or b""
        return b""

    out = _BLOCK_RE.sub(block, data)
    out = _SCAFFOLD_RE.sub(b"", out)
    out = _LINE_RE.sub(b"", out)
    out = _LAST_LINE_RE.sub(b"", out)
    return _FRAGMENT_RE.sub(b"", out)
