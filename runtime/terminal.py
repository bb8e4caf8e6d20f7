"""Text from input data made safe for a terminal.

Labels, file names and trace names come from files a user was handed; printed raw, an
ESC sequence in one could retitle the window, write the clipboard (OSC 52) or hide text,
and a bidi override could make a line read other than it is. Before such text reaches a
terminal, every control character but newline and tab, every bidi control and every
undecodable byte of a file name is written as its escape (`\\x1b`, `\\u202e`, `\\xff`).
JSON, SARIF and HTML outputs keep their own escaping and do not go through here.
"""

from __future__ import annotations

import re

# C0 controls but \t and \n, DEL, C1 controls; bidi embeddings, overrides, isolates and
# marks; lone surrogates (the undecodable bytes of a surrogate-escaped file name).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    ch = m.group(0)
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's stand-in for the byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def safe_text(text: str) -> str:
    """`text` with what a terminal would act on written as escapes (see the module)."""
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text
