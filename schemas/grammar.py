"""The grammars and time limits shared by the Pandera rules (schemas.frames) and their SQL
(db.source). No Pandera here: reading a source's catalogue (``biasaudit audits``) stays light."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

CLOCK_SKEW = timedelta(minutes=5)
# Timestamps before this are implausible (integer epochs read as 1970, zero dates, typos).
EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)

# The one text grammar of timestamps, shared by the Pandera checks and the SQL of every dialect
# (db.source): ISO 8601 date, optional time (T or space) with optional seconds, fraction (up to
# microseconds) and offset (Z or +HH:MM). Text without an offset is UTC. [0-9], not \d: ASCII
# digits only, on every regex engine.
ISO_TIMESTAMP = (
    r"^[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"([T ]([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\.[0-9]{1,6})?)?"
    r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?)?$"
)
ISO_OFFSET = r"(Z|[+-][0-9]{2}:[0-9]{2})$"
# The text grammar of numbers (scores, decision scores) that SQL can cast on every dialect.
DECIMAL_TEXT = r"^[+-]?[0-9]{1,30}(\.[0-9]{1,30})?$"
