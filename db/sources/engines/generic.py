"""An engine biasaudit has no module for: its SQL is the ANSI defaults, and what those cannot do
safely on an engine whose text comparison and time functions are unknown is refused, each in one
line naming the engine."""

from __future__ import annotations

from sqlalchemy import Table, func

from biasaudit.db.sources.engines.base import ATTRIBUTES_JSON, SourceEngine
from biasaudit.db.sources.types import is_text
from biasaudit.schemas.config import Audit


class Generic(SourceEngine):
    """Any other SQLAlchemy dialect: typed timestamps and scores only, and no SQL that groups
    text or finds repeated text ids (the push-down, stream mode's duplicate scan), which would take
    the engine's collation, maybe blind to case or trailing spaces, for equality; no JSON keys.
    (The model filter compares its text by the engine's collation, as on MariaDB; without date
    arithmetic here, label arrival counts nothing.)"""

    parses_text = False

    def __init__(self, name: str):
        self.name = name
        self.label = f"{name} (an engine biasaudit has no module for)"

    def refusals(self, table: Table, audit: Audit) -> list[str]:
        where = f"source {audit.source!r} on {self.label}"
        found = []
        if audit.scan.mode == "pushdown":
            found.append(
                f"{where}: scan mode 'pushdown' groups text in SQL, whose exact comparison is "
                "unknown here; use scan.mode 'memory' or 'stream'"
            )
        json = [
            a
            for a in audit.attributes
            if audit.source_column(a) not in table.c and ATTRIBUTES_JSON in table.c
        ]
        if json:
            found.append(
                f"{where}: attributes {', '.join(map(repr, json))} would be read from the JSON "
                f"column {ATTRIBUTES_JSON!r}, which is not read here; give each a column"
            )
        return found

    def duplicates_refusal(self, table: Table, audit: Audit) -> str | None:
        """Why the window's repeated ids cannot be found here (None: they can): a text id is
        compared by the engine's unknown collation."""
        ident = table.c[audit.source_column("prediction_id")]
        if not is_text(ident):
            return None
        return (
            f"source {audit.source!r} on {self.label}: repeated prediction ids in text column "
            f"{ident.name!r} cannot be found exactly; declare its primary key or unique "
            "constraint, or set scan.ids_unique = true"
        )

    def non_empty(self, text):
        """A length, which no collation changes (the per-row rules of label arrival's count)."""
        return func.length(func.trim(text)) > 0
