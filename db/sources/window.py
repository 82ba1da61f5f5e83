"""The audit's window: its bounds in time, and its canonical columns and filter as SQL.

The SQL here does three things on every engine (through its module, db.sources.engines):

- decides the window on the *parsed* timestamp (``SourceEngine.parsed_timestamp``: typed columns
  as UTC, text in the ISO_TIMESTAMP grammar with its offset honoured); rows whose timestamp is
  NULL, unparseable, before 1900 or in the future (after the audit's clock plus the skew) belong
  to every window, so they are read and quarantined, never silently left out.
  A source without a timestamp column (allowed for window "all" without monitoring) has rows
  without a time, all in the window;
- gives ``row_ok``: a condition true only for rows the Pandera rules accept on the per-row rules
  (id, timestamp, scores), so the push-down may count them unchecked; every other row is fetched
  and judged by Pandera itself;
- reads JSON attribute keys as keys, never as paths.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    and_,
    literal,
    not_,
    null,
    or_,
    select,
    true,
    type_coerce,
)
from sqlalchemy.types import NullType

from biasaudit.db.sources.catalogue import (
    SourceError,
    reflect_source,
    source_columns,
    source_engine,
    table_problems,
)
from biasaudit.db.sources.engines import SourceEngine
from biasaudit.db.sources.engines.base import ATTRIBUTES_JSON
from biasaudit.db.sources.types import is_text
from biasaudit.schemas.config import Audit
from biasaudit.schemas.grammar import CLOCK_SKEW, EARLIEST

AFTER_EPOCH = datetime(
    1970, 1, 2, tzinfo=UTC
)  # later than every zero date (SourceEngine.zero_date)
# How far the per-row rules keep inside the future and earliest bounds, on every engine (SQLite's
# date functions keep milliseconds only).
MARGIN = timedelta(milliseconds=2)


def window_bounds(
    audit: Audit,
    as_of: datetime,
    zone: tzinfo | None = None,
    nominal: Callable[[datetime], datetime] | None = None,
) -> tuple[datetime | None, datetime]:
    """(start, end] of the audit window ending at ``as_of`` (UTC); start is None for all time.

    A window of N days is N calendar days on the wall clock of ``zone`` (default UTC, where a day
    is 24 hours; in a zone with daylight saving, a day is 23 or 25 hours across its changes).
    ``nominal``, a schedule's "latest nominal instant at or before" (flows.schedule), moves the
    end back to the nominal instant of the run and the start to the nominal instant at or before
    N calendar days earlier: consecutive scheduled windows then tile time, whatever the clock
    when each run started."""
    end = as_of.astimezone(UTC) if as_of.tzinfo else as_of.replace(tzinfo=UTC)
    if nominal is not None:
        end = nominal(end)
    days = audit.window_days
    if days is None:
        return None, end
    wall = end.astimezone(zone or UTC).replace(tzinfo=None) - timedelta(days=days)
    # A wall-clock time that occurs twice is its first occurrence; one in a spring-forward gap is
    # as far past the gap's start as it is past the wall-clock time before the gap (fold 0).
    start = wall.replace(tzinfo=zone or UTC).astimezone(UTC)
    return (start if nominal is None else nominal(start)), end


class Window:
    """The canonical columns of one audit's source, as SQL expressions, and the window filter."""

    def __init__(self, table: Table, audit: Audit, engine: SourceEngine):
        problems = table_problems(table, audit, engine)
        if problems:
            raise SourceError("; ".join(problems))
        self.table, self.audit, self.engine = table, audit, engine
        found = source_columns(table, audit)
        # canonical name -> expression of the raw value, in the order rows are fingerprinted
        self.raw: dict[str, Any] = {"prediction_id": found["prediction_id"]}
        when = found["predicted_at"]  # None: the rows have no timestamp (window "all")
        if when is not None:
            self.raw["predicted_at"] = engine.read_timestamp(when)
        self.raw["y_true"] = found["y_true"]
        if not audit.decision:
            self.raw["y_pred"] = found["y_pred"]
        self.model, self.version = found["model_id"], found["model_version"]
        self.raw["model_id"] = self.model if self.model is not None else literal(audit.model_id)
        self.raw["model_version"] = self.version if self.version is not None else null()
        score = found["score"]
        if audit.decision and score is not None and score.name == audit.decision.score:
            # Read for the decision, the column is on the threshold's scale (a decile 1..10 with
            # threshold 5), not a probability: its rule is the decision score's, not [0, 1].
            score = None
        self.has_score = score is not None
        # Scores are read as the numbers SQL compares (a single-precision float widened).
        self.raw["score"] = engine.exact_number(score) if score is not None else null()
        if audit.decision:
            self.raw["decision_score"] = engine.exact_number(found["decision_score"])
        for attribute in audit.attributes:
            column = found[attribute]
            if column is None:
                self.raw[attribute] = engine.json_key(table.c[ATTRIBUTES_JSON], attribute)
            else:
                self.raw[attribute] = engine.attribute(column)
        self.when = when
        self.time = None if when is None else engine.parsed_timestamp(when)
        # When each label arrived (the optional ``labelled_at``), as the time SQL compares.
        arrived = found["labelled_at"]
        self.arrival = None if arrived is None else engine.parsed_timestamp(arrived)
        self.zero = None if when is None else engine.zero_date(when)

    def delay(self):
        """Seconds from the prediction (``predicted_at``, where the source has it; else the
        epoch) to its label's arrival (``labelled_at``), as a double; NULL where either is no
        timestamp, or on an engine this has no date arithmetic for (ClickHouse, Spark SQL)."""
        if self.arrival is None:
            return null()
        return self.engine.seconds_between(self.arrival, self.time)

    def key(self, canonical: str):
        """The expression to group and compare on (exact text: SourceEngine.key)."""
        return self.engine.key(self.raw[canonical])

    def where(self, start: datetime | None, end: datetime, now: datetime, version: bool = True):
        """The model (and, with ``version``, version) filter and the window on the parsed
        timestamp. Rows with no plausible timestamp (ClickHouse's zero date among them) and rows
        in the future (later than ``now`` plus the clock skew) are in every window, to be
        quarantined; rows before ``start``, or after ``end`` but not in the future, are outside
        it."""
        conditions = []
        if self.model is not None:
            conditions.append(self.model == self.audit.model_id)
        if version and self.version is not None and self.audit.model_version is not None:
            conditions.append(self.version == self.audit.model_version)
        if self.time is not None:  # rows without a timestamp are in the window "all"
            t, aware = self.engine.filter_time(self.when, self.time)
            bound = self.engine.bound
            inside = t <= bound(end, aware)
            if start is not None:
                inside = and_(t > bound(start, aware), inside)
            # An engine that rounds times (SQLite: to the millisecond) has its bound lowered so
            # that no future row escapes (one a few milliseconds short of it may be read, and
            # accepted).
            future = max(end, now + CLOCK_SKEW) - self.engine.margin
            implausible = [t.is_(None)]
            # Without a start, a time before EARLIEST or ClickHouse's zero date (the epoch) is
            # at or before the end, so inside already: no test of its own per row.
            if start is not None or end.replace(tzinfo=end.tzinfo or UTC) < AFTER_EPOCH:
                implausible.append(t < bound(EARLIEST, aware))
                implausible += [] if self.zero is None else [self.zero]
            conditions.append(or_(inside, t > bound(future, aware), *implausible))
        return and_(true(), *conditions)

    def selected(self):
        """The raw values under canonical names, as the driver returns them (no type processing:
        SQLite's declared types do not bind its values)."""
        return [type_coerce(e, NullType()).label(name) for name, e in self.raw.items()]

    def query(self, start: datetime | None, end: datetime, now: datetime):
        """The window's rows, their raw values under canonical names."""
        return select(*self.selected()).where(self.where(start, end, now))

    def row_ok(self, now: datetime):
        """True only for rows the Pandera rules accept on the per-row rules (a sound filter: a
        row it does not pass is judged by Pandera). Attribute and label rules are checked on the
        grouped keys instead (db.sources.pushdown).

        Rules that the catalogue or the model filter already guarantee are left out, so the
        scan pays per row only for what can fail: a NOT NULL (or primary key) id needs no null
        check, a non-text id no text check, and the model filter implies a model id; a text id
        holds more than spaces (SourceEngine.non_empty)."""
        c, engine = self.raw, self.engine
        ident = c["prediction_id"]
        rules = []  # a rule that is NULL (a NULL value) fails: db.sources.pushdown_sql counts only TRUE
        if not engine.types_bind or is_text(ident):
            rules.append(engine.non_empty(engine.as_text(ident)))
        elif getattr(ident, "nullable", True):
            rules.append(ident.is_not(None))
        if self.time is not None:
            t, aware = engine.filter_time(self.when, self.time)
            rules.append(t <= engine.bound(now + CLOCK_SKEW - MARGIN, aware))  # future rows read
            if self.zero is None:
                rules.append(t >= engine.bound(EARLIEST + MARGIN, aware))
            else:  # ClickHouse's zero date (1970) is the least value its dates hold
                rules.append(not_(self.zero))
        if self.has_score:
            score, number = c["score"], engine.parsed_number(c["score"])
            rules.append(or_(score.is_(None), and_(number >= 0, number <= 1)))
        if "decision_score" in c:
            number = engine.parsed_number(c["decision_score"])
            rules.append(and_(number >= -1e300, number <= 1e300))  # finite (NaN fails too)
        return and_(true(), *rules)


def window_of(bind: Engine | Connection, audit: Audit) -> Window:
    """The audit's window on its source, reflected through ``bind``."""
    return Window(reflect_source(bind, audit.source), audit, source_engine(bind))
