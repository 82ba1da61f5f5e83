"""The grammars and time limits shared by the Pandera rules (schemas.frames) and their SQL
(db.sources). No Pandera here: reading a source's catalogue (``biasaudit audits``) stays light."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

CLOCK_SKEW = timedelta(minutes=5)
# Timestamps before this are implausible (integer epochs read as 1970, zero dates, typos).
EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)

# The one text grammar of timestamps, shared by the Pandera checks and the SQL of every dialect
# (db.sources): ISO 8601 date, optional time (T or space) with optional seconds, fraction (up to
# microseconds) and offset (Z or +HH:MM). Text without an offset is UTC. [0-9], not \d: ASCII
# digits only, on every regex engine.
ISO_TIMESTAMP = (
    r"^[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"([T ]([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\.[0-9]{1,6})?)?"
    r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?)?$"
)
ISO_OFFSET = r"(Z|[+-][0-9]{2}:[0-9]{2})$"
# The text grammar of numbers (scores, decision scores) that SQL can cast on every dialect: the
# notations SQL and CSV writers use (``0.5``, ``+.5``, ``1.``, ``5e-05``, ``1E-3``), with spaces
# around (a CSV writer's padding; SQL trims them before its cast). At most 30 digits before and
# after the point; an exponent of at most two digits, or three up to 269 where at most 8 digits
# precede the point, so that every match lies within 1e-300 and 1e278 of zero, where every
# dialect's cast is exact and none overflows, underflows or fails the statement (PostgreSQL
# refuses '1e-400' as out of range). NaN and infinities are no numbers here (schemas.frames).
NUMBER_PAD = " "
DECIMAL_TEXT = (
    r"^ *[+-]?("
    r"([0-9]{1,30}(\.[0-9]{0,30})?|\.[0-9]{1,30})([eE][+-]?[0-9]{1,2})?"
    r"|([0-9]{1,8}(\.[0-9]{0,30})?|\.[0-9]{1,30})[eE][+-]?(1[0-9]{2}|2[0-6][0-9])"
    r") *$"
)
# Text that spells NaN (any case, spaces around), kept apart from missing values and from text
# that is no number: its own quarantine rule.
NAN_TEXT = r"^ *[+-]?[nN][aA][nN] *$"
