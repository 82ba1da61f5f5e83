"""Names are data: how a group name (or any value from the data) is shown to a person.

Grouping keeps every name exactly as it is (NFC and NFD spellings stay two groups). Only where a
name is shown, on a terminal, control characters (C0, C1: ESC starts terminal sequences) and the
bidirectional controls (U+202E turns the text after it round) are written as visible escapes, so
no value can move the cursor, recolour the screen, set a window title or disguise itself. In CSV
exports the same escapes hold, and text a spreadsheet would run as a formula is quoted.
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


# What a spreadsheet reads as the start of a formula (OWASP, "CSV Injection"): a cell of text
# starting with one of these gets a leading single quote, which the spreadsheet shows as text.
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")
# Text that spells a plain number (``-0.12``, ``+1e-05``): a spreadsheet reads it as that
# number, never as a formula, so it is written as it is.
_PLAIN_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


def spreadsheet_text(text: str) -> str:
    """``text`` as a CSV cell that no spreadsheet obeys: control and bidirectional characters
    as visible escapes (``printable``), and a leading single quote where it starts as a formula
    does (``=``, ``+``, ``-``, ``@``, tab, carriage return) unless it is a plain number."""
    shown = printable(text)
    if text.startswith(FORMULA_LEADS) and not _PLAIN_NUMBER.fullmatch(text):
        return "'" + shown
    return shown


def spreadsheet_frame(frame):
    """A pandas frame for CSV export: every text cell, and every column name, through
    ``spreadsheet_text``; numbers, booleans, missing values and dates as they are (a numeric
    ``-0.12`` stays the number)."""

    def cell(value):
        return spreadsheet_text(value) if isinstance(value, str) else value

    safe = frame.copy()
    for position in range(len(frame.columns)):
        values = frame.iloc[:, position]
        if values.dtype.kind in "OSU":  # object and text dtypes: the columns that hold text
            safe.isetitem(position, values.map(cell))
    safe.columns = [cell(c) for c in frame.columns]
    return safe


@dataclass(frozen=True)
class StoreLimits:
    """What a result store holds of a name: group names of at most ``group_chars`` characters
    and attribute names (an intersection's too) of at most ``attribute_chars`` (None: any
    length), and whether its text holds NUL (U+0000). db.store.models.store_limits derives them."""

    group_chars: int | None = None
    attribute_chars: int | None = None
    nul: bool = True
