"""Agent-written text made safe for a terminal: every control and invisible character shown
as an escape.

What a diagnosing agent writes (its root cause, evidence, queries, overrides, its patch)
reaches a person's terminal, who approves on what they see. A terminal obeys ESC sequences
(ECMA-48: cursor moves, erasing a line), a carriage return or backspace overwrites what was
printed, and the bidirectional controls reorder text on screen (Unicode UAX #9; the "Trojan
Source" attack, CVE-2021-42574): a line can look absent while `git apply` still reads it.
Every such character is printed as a Python-style escape (`\\x1b`, `\\u202e`), so what is
shown is what is there. Newlines and tabs stay: they lay out a diff.
"""

from __future__ import annotations

import re

# C0 controls but TAB and LF, DEL and the C1 controls; the soft hyphen and the Unicode format
# characters that are invisible or reorder text: ALM, Mongolian vowel separator, zero-width
# space/joiners and LRM/RLM, the line and paragraph separators, the bidi embeddings and
# overrides (U+202A-U+202E), word joiner and invisible operators, the bidi isolates
# (U+2066-U+2069), the deprecated format controls, BOM, interlinear annotations, and the tag
# characters (invisible ASCII look-alikes).
_HIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064"
    "\u2066-\u206f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")


def _escape(found: re.Match[str]) -> str:
    point = ord(found.group())
    if point < 0x100:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}" if point < 0x10000 else f"\\U{point:08x}"


def visible(text: str) -> str:
    """`text` with every control or invisible character replaced by its escape."""
    return _HIDDEN.sub(_escape, text)


def hidden_count(text: str) -> int:
    """How many characters `visible` escapes in `text`."""
    return len(_HIDDEN.findall(text))


def visible_bytes(data: bytes) -> str:
    """Bytes (a patch) as text for a terminal: invalid UTF-8 as U+FFFD, then `visible`."""
    return visible(data.decode("utf-8", "replace"))
