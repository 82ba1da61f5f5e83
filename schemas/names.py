"""Names are data: how a group name (or any value from the data) is shown to a person.

Grouping keeps every name exactly as it is (NFC and NFD spellings stay two groups). Only where a
name is shown, on a terminal, control characters (C0, C1: ESC starts terminal sequences) and the
bidirectional controls (U+202E turns the text after it round) are written as visible escapes, so
no value can move the cursor, recolour the screen, set a window title or disguise itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# C0 and DEL, C1, the line and paragraph separators, and the bidirectional formatting characters
# (marks, embeddings, overrides, isolates, the Arabic letter mark).
_UNSHOWABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control and bidirectional formatting character as a visible escape
    (``\\x1b``, ``\\u202e``); everything else unchanged."""
    return _UNSHOWABLE.sub(_escape, text)


@dataclass(frozen=True)
class StoreLimits:
    """What a result store holds of a name: group names of at most ``group_chars`` characters
    and attribute names (an intersection's too) of at most ``attribute_chars`` (None: any
    length), and whether its text holds NUL (U+0000). db.models.store_limits derives them."""

    group_chars: int | None = None
    attribute_chars: int | None = None
    nul: bool = True
