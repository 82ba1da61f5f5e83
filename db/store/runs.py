"""Writing audit runs: visible progress, one transaction for the results, gap-free versions.

A run's life: ``start_run`` commits a row with status ``running`` (so an operator sees it) and
takes the run's lease; the results and the promotion to ``succeeded`` with the next version number
commit together in ``save_run``, so a reader never sees half a run; ``record_failed_run`` marks it
``failed`` with the error; ``release_run`` gives the lease back. Re-running identical input (same
fingerprint) with an identical configuration returns the existing run unless forced. On PostgreSQL a
transaction-scoped advisory lock serialises version numbering per audit and model; everywhere, the
unique constraint on (audit_name, model_id, version) is the last word.

A run knows itself by its row's id, never by equal input: a retry of ``save_run`` whose earlier
attempt committed (the reply to COMMIT lost) finds its own row succeeded and returns it; a run is
deleted only while ``running`` (replaced by an identical one), and a succeeded run is never marked
failed, so a failed run never has results.

Nothing stays stuck. While a run is going its process proves it is alive to the server:
- on PostgreSQL it holds a session-level advisory lock on its own connection, which the server
  releases the moment that session ends (kill -9, power loss, and, through the session limits
  below, a network cut);
- everywhere a heartbeat thread renews ``heartbeat_at`` every ``lease / 6`` seconds
  (``BIASAUDIT_LEASE_SECONDS``, default 30), on PostgreSQL through the lock's own session.
The heartbeat is the database's time, and a lease is judged lapsed in SQL by the database's time
(db.store.clock): no client's clock takes part, so two machines whose clocks differ agree on who is
alive. The next run of the audit marks a ``running`` row failed as abandoned when its owner is gone:
the advisory lock is free (PostgreSQL), or its heartbeat is older than the lease (SQLite, MariaDB;
rows without a heartbeat fall back to ``started_at`` and the configured ``stale_run_hours``). A run
whose row was so marked cannot later promote itself to succeeded (``RunLost``).

A session the client lost is ended by the server, so its locks never outlive the run's lease for
long (``session_silence``: two leases, at least 10 s): every transaction of a run is bounded by
``idle_in_transaction_session_timeout`` (PostgreSQL) or ``wait_timeout`` and
``net_read_timeout``/``net_write_timeout`` (MariaDB), and the lease's session on PostgreSQL by
``idle_session_timeout`` (its heartbeats keep it busy while the process lives); db.engine adds the
server's TCP keepalives. On PostgreSQL a run's writing transactions name themselves
(``application_name`` = ``biasaudit run ID``): the next run, once it holds the run lock (so the
owner's session has ended), terminates what is left of them before it marks the row failed, so a
session stuck where the server's own limits do not reach (a COPY waiting for data) holds nothing.
On MariaDB they hold a lock named after the run (db.store.lost): the next run, once the run's lease
lapsed, ends those idle for a lease, so it need not wait for ``wait_timeout``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, cast

import pandas as pd
from sqlalchemy import (
    Connection,
    Engine,
    Table,
    and_,
    delete,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from biasaudit.db.engine import statement_timeout
from biasaudit.db.store.clock import server_now
from biasaudit.db.store.lost import end_sessions, tag_session
from biasaudit.db.store.models import AuditRun, QuarantinedRow

RUNNING, SUCCEEDED, FAILED = "running", "succeeded", "failed"
log = logging.getLogger(__name__)
ABANDONED = "abandoned: its process ended or lost the database before the run finished"


class SavedRun(NamedTuple):
    """A succeeded run as this process found or wrote it: id, whether it is new, version."""

    run_id: int
    new: bool
    version: int


@dataclass
class RunRecord:
    """Everything about a run except its result tables."""

    audit_name: str
    model_id: str
    model_version: str | None
    as_of: datetime
    window_start: datetime | None
    window_end: datetime
    config: dict[str, Any]
    config_hash: str
    code_version: str
    started_at: datetime
    input_fingerprint: str | None = None
    flow_run_id: str | None = None
    rows_read: int = 0
    rows_valid: int = 0
    rows_quarantined: int = 0
    rows_unlabelled: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)

    def columns(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _columns(frame: pd.DataFrame, run_id: int) -> tuple[list[str], list[list[Any]]]:
    """Column names and values as Python objects, ``run_id`` first, NaN turned into NULL (built
    column by column: DataFrame.to_dict boxes every cell on its own and was most of persist's
    time)."""
    names = ["run_id", *frame.columns]
    columns = [[run_id] * len(frame)] + [
        column.astype(object).where(column.notna(), None).tolist() for _, column in frame.items()
    ]
    return names, columns


def _records(frame: pd.DataFrame, run_id: int) -> list[dict]:
    """Rows as dicts of Python values for executemany, with NaN turned into NULL."""
    names, columns = _columns(frame, run_id)
    return [dict(zip(names, values)) for values in zip(*columns)]


# COPY parses text as the column's type: integers and booleans held as floats are made ints
# (rounded, as INSERT's cast of a float to an integer does) and bools first.
_COPY_CASTS: dict[type, Callable[[Any], Any]] = {int: round, bool: bool}


def _python_type(kind: Any) -> type:
    """The Python type a column type holds; ``object`` where SQLAlchemy does not say (its REAL,
    under SQLAlchemy 2.0)."""
    try:
        return kind.python_type
    except NotImplementedError:
        return object


def _insert_results(connection: Connection, table: Table, frame: pd.DataFrame, run_id: int) -> None:
    """Insert a result frame: through COPY on PostgreSQL with psycopg 3, else one Core executemany.
    COPY parses text as the column's type, where INSERT would cast a parameter: integers and
    booleans held as floats (a frame with a missing value) are made ints and bools first, then
    each value goes through its column type's bind processor, as in an INSERT."""
    dialect = connection.dialect
    if dialect.name != "postgresql" or dialect.driver != "psycopg":
        connection.execute(insert(table), _records(frame, run_id))
        return
    from psycopg import sql

    names, columns = _columns(frame, run_id)
    for position, name in enumerate(names):
        kind = table.c[name].type
        cast_to = _COPY_CASTS.get(_python_type(kind))
        if cast_to is not None:
            columns[position] = [None if v is None else cast_to(v) for v in columns[position]]
        process = kind.bind_processor(dialect)
        if process is not None:
            columns[position] = [process(value) for value in columns[position]]
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(*([table.schema] if table.schema else []), table.name),
        sql.SQL(", ").join(map(sql.Identifier, names)),
    )
    driver = cast(Any, connection.connection.driver_connection)  # this transaction's psycopg one
    shown = statement.as_string(driver)
    try:
        with driver.cursor() as cursor, cursor.copy(statement) as copy:
            for row in zip(*columns):
                copy.write_row(row)
    except dialect.loaded_dbapi.Error as error:  # as SQLAlchemy's own: db.retry retries a drop
        raise DBAPIError.instance(shown, None, error, dialect.loaded_dbapi.Error) from error


def _lock_key(*parts: str) -> int:
    """A signed 64-bit advisory-lock key for ``parts``."""
    digest = hashlib.sha256("\0".join(parts).encode()).digest()[:8]
    return int.from_bytes(digest) - (1 << 63)


def _lock_versioning(session: Session, audit_name: str, model_id: str) -> None:
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key(audit_name, model_id)}
        )


LEASE_ENV = "BIASAUDIT_LEASE_SECONDS"


def lease_seconds() -> float:
    """How long a run may go without a heartbeat before the next run takes it for dead."""
    value = float(os.environ.get(LEASE_ENV) or 30.0)
    if not 1.0 <= value <= 86_400.0:
        raise ValueError(f"{LEASE_ENV} must be between 1 and 86400 seconds, not {value}")
    return value


def session_silence() -> float:
    """Seconds the server lets a run's session stay silent (idle inside a transaction, or the
    lease's session idle) before it ends the session and releases its locks: two leases, at
    least 10 s."""
    return max(10.0, 2 * lease_seconds())


def _tag(run_id: int) -> str:
    """The ``application_name`` of run ``run_id``'s writing transactions (PostgreSQL)."""
    return f"biasaudit run {run_id}"


def bound_session(connection: Connection, run_id: int | None = None) -> None:
    """Have the server end this session if its client falls silent: for the rest of the
    transaction on PostgreSQL (``idle_in_transaction_session_timeout``, and the run's tag as
    ``application_name``), for the session on MariaDB (``wait_timeout``, ``net_read_timeout``,
    ``net_write_timeout``, and a name of the run: db.store.lost). SQLite has no session to end: a
    process that is gone holds no lock."""
    silence = round(session_silence())
    backend = connection.dialect.name
    if backend == "postgresql":
        connection.execute(
            text("SELECT set_config('idle_in_transaction_session_timeout', :ms, true)"),
            {"ms": str(silence * 1000)},
        )
        if run_id is not None:
            connection.execute(
                text("SELECT set_config('application_name', :tag, true)"), {"tag": _tag(run_id)}
            )
    elif backend in ("mysql", "mariadb"):
        connection.exec_driver_sql(
            f"SET SESSION wait_timeout = {silence}, net_read_timeout = {silence}, "
            f"net_write_timeout = {silence}"
        )
        if run_id is not None:
            tag_session(connection, run_id)


def _bound_lock_session(lock: Connection) -> None:
    """The lease's session on PostgreSQL: ended by the server when idle (no heartbeat) or idle in
    a transaction for ``session_silence`` (``idle_session_timeout`` needs PostgreSQL 14; before
    it, TCP keepalives alone end a session whose network died)."""
    ms = str(round(session_silence()) * 1000)
    lock.execute(
        text("SELECT set_config('idle_in_transaction_session_timeout', :ms, false)"), {"ms": ms}
    )
    if _server_version(lock) >= 140000:
        lock.execute(text("SELECT set_config('idle_session_timeout', :ms, false)"), {"ms": ms})
    lock.commit()


def _server_version(connection: Connection) -> int:
    return int(connection.scalar(text("SELECT current_setting('server_version_num')")) or 0)


class RunLease:
    """A live run's proof of life: the PostgreSQL session lock (if any) and the heartbeat thread.

    It owns its engine (one connection for the lock, short ones for heartbeats), so it outlives the
    unit of work that started the run.
    """

    def __init__(self, engine: Engine, run_id: int, lock: Connection | None, every: float):
        self.engine, self.run_id, self.lock = engine, run_id, lock
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, args=(every,), name=f"biasaudit-heartbeat-{run_id}", daemon=True
        )
        self._thread.start()

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                if self.lock is not None:  # PostgreSQL: the lock's session, kept from idling
                    with self.lock.begin():
                        self._renew(self.lock)
                else:
                    with self.engine.begin() as connection:
                        self._renew(connection)
            except SQLAlchemyError as exc:  # the database is away: the run's own steps retry
                log.debug("heartbeat of run %s failed: %s", self.run_id, type(exc).__name__)

    def _renew(self, connection: Connection) -> None:
        """Set the run's heartbeat to the database's time. While the run's own persist holds its
        row the heartbeat gives up at once (that transaction is the proof of life then)."""
        backend = connection.dialect.name
        if backend == "postgresql":
            connection.exec_driver_sql("SET LOCAL lock_timeout = '500ms'")
        else:
            bound_session(connection, self.run_id)
            if backend in ("mysql", "mariadb"):
                connection.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 1")
        connection.execute(
            update(AuditRun)
            .where(AuditRun.id == self.run_id, AuditRun.status == RUNNING)
            .values(heartbeat_at=server_now(backend))
        )

    def release(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self.lock is not None:
            try:
                if self._thread.is_alive():  # a heartbeat waits on a silent network
                    self.lock.invalidate()
                else:
                    self.lock.close()  # closing the session releases its advisory lock
            except SQLAlchemyError:
                pass
        self.engine.dispose()


_LEASES: dict[int, RunLease] = {}
_LEASES_LOCK = threading.Lock()


def release_run(run_id: int | None) -> None:
    """Give back the lease of run ``run_id`` held by this process (no-op if none)."""
    if run_id is None:
        return
    with _LEASES_LOCK:
        lease = _LEASES.pop(run_id, None)
    if lease is not None:
        lease.release()


def _lease_engine(engine: Engine) -> Engine:
    from biasaudit.db.engine import make_engine

    return make_engine(engine.url.render_as_string(hide_password=False))


def _try_run_lock(lock: Connection, audit_name: str, model_id: str) -> bool:
    """Take the run's session-level advisory lock on ``lock`` if free (PostgreSQL)."""
    got = lock.scalar(
        text("SELECT pg_try_advisory_lock(:k)"), {"k": _lock_key("run", audit_name, model_id)}
    )
    lock.commit()  # a session-level lock outlives the transaction
    return bool(got)


def _running(record: RunRecord) -> Any:
    return and_(
        AuditRun.audit_name == record.audit_name,
        AuditRun.model_id == record.model_id,
        AuditRun.status == RUNNING,
    )


def _end_lost_sessions(lock: Connection, record: RunRecord) -> None:
    """Terminate what is left of the writing sessions of the audit's ``running`` runs
    (PostgreSQL; this process holds the run lock, so their owner's session has ended and none of
    them belongs to a live run): a session the server's limits do not end (a COPY waiting for data
    from a client that is gone) would otherwise hold its run's row and the versioning lock until
    the statement timeout. Only sessions of this database and role can be ended; others are left
    to the server's limits."""
    dead = [_tag(run_id) for run_id in lock.scalars(select(AuditRun.id).where(_running(record)))]
    if not dead:
        lock.commit()
        return
    wait = ", 5000" if _server_version(lock) >= 140000 else ""  # ms to wait for each to end
    try:
        found = lock.scalars(
            text(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND application_name = ANY(:tags)"
            ),
            {"tags": dead},
        ).all()
        # one by one, after the search: never a predicate the planner could evaluate first
        terminate = text(f"SELECT pg_terminate_backend(:pid{wait})")
        ended = [pid for pid in found if lock.scalar(terminate, {"pid": pid})]
        lock.commit()
    except DBAPIError as exc:  # no right to end them: the server's own limits will
        lock.rollback()
        log.warning("could not end the sessions of lost runs: %s", type(exc).__name__)
        return
    _log_ended(record, ended)


def _end_lapsed_sessions(engine: Engine, record: RunRecord, lease: float, stale: timedelta) -> None:
    """End the idle sessions of the audit's ``running`` runs whose lease lapsed by the database's
    clock (MariaDB, db.store.lost): the rows they lock are then free at once, not after the server's
    ``wait_timeout``. Idle means silent for half a lease: a lost run's last statement can follow
    its last heartbeat by a heartbeat period (lease / 6), and the server counts idle seconds
    whole, so a full lease would miss it at the first look (the start then waits a lease for the
    row it locks and looks again)."""
    with engine.connect() as connection:
        backend = engine.dialect.name
        lapsed = list(
            connection.scalars(
                select(AuditRun.id).where(_running(record), _silent(backend, lease, stale))
            )
        )
        try:
            ended = end_sessions(connection, lapsed, lease / 2) if lapsed else []
            connection.commit()
        except DBAPIError as exc:  # not allowed to look or end: the server's limits will
            connection.rollback()
            log.warning("could not end the sessions of lost runs: %s", type(exc).__name__)
            return
    _log_ended(record, ended)


def _log_ended(record: RunRecord, ended: list[int]) -> None:
    """A warning naming the sessions of lost runs this start ended (none: nothing)."""
    if ended:
        log.warning(
            "audit %r: ended %d session(s) of lost run(s) (%s)",
            record.audit_name,
            len(ended),
            ", ".join(map(str, ended)),
        )


def _silent(backend: str, lease: float, stale: timedelta) -> Any:
    """A run row with no sign of life by the database's clock (db.store.clock): its heartbeat older
    than ``lease`` seconds, or, for a row without one, ``started_at`` older than ``stale``."""
    return or_(
        AuditRun.heartbeat_at < server_now(backend, lease),
        and_(
            AuditRun.heartbeat_at.is_(None),
            AuditRun.started_at < server_now(backend, stale.total_seconds()),
        ),
    )


def _mark_dead_runs(
    session: Session, record: RunRecord, owner_gone: bool, lease: float, stale: timedelta
) -> list[int]:
    """Mark the audit's ``running`` rows whose owner is gone as failed; returns their ids.

    ``owner_gone``: this process holds the run lock, so no live process runs this audit. Else a
    row is dead when its heartbeat is older than the lease by the database's clock (db.store.clock).
    """
    backend = session.get_bind().dialect.name
    same = _running(record)
    condition = same if owner_gone else and_(same, _silent(backend, lease, stale))
    proof = (
        "its session lock was free"
        if owner_gone
        else f"no heartbeat for {lease:g} s by the database's clock"
    )
    error = f"{ABANDONED} ({proof})"
    dead = list(session.scalars(select(AuditRun.id).where(condition)))
    if dead:
        session.execute(
            update(AuditRun)
            .where(AuditRun.id.in_(dead), condition)
            .values(status=FAILED, error=error, finished_at=server_now(backend))
        )
        log.warning(
            "audit %r: run(s) %s had no live process: marked failed (%s)",
            record.audit_name,
            dead,
            error,
        )
    return dead


class RunLost(RuntimeError):
    """This run was marked failed by another process while it was going (its lease lapsed)."""


class RunInProgress(RuntimeError):
    """Another run of the same audit and model is still running after the wait."""


def start_run(
    engine: Engine,
    record: RunRecord,
    wait: timedelta = timedelta(0),
    poll: float = 1.0,
    stale: timedelta = timedelta(hours=6),
) -> int:
    """Commit a ``running`` row for the run, take its lease and return its id, once no live run of
    the same audit and model is going (waiting up to ``wait``): runs of one audit never overlap,
    and a run whose process is gone is marked failed instead of waited for.

    On PostgreSQL the session-level run lock decides who is alive; on SQLite and MariaDB the
    heartbeat (two processes starting within the same instant may both pass the check there;
    versions stay distinct either way). ``stale`` applies to rows without a heartbeat.
    """
    deadline = time.monotonic() + wait.total_seconds()
    lease, announced = lease_seconds(), False
    lease_engine = _lease_engine(engine)
    lock: Connection | None = None
    try:
        while True:
            owner_gone = False
            busy: int | str | None = None
            if engine.dialect.name == "postgresql":
                lock = lock or lease_engine.connect()
                owner_gone = _try_run_lock(lock, record.audit_name, record.model_id)
                busy = None if owner_gone else "(held by a live process)"
                if owner_gone:
                    _end_lost_sessions(lock, record)
            elif engine.dialect.name in ("mysql", "mariadb"):
                _end_lapsed_sessions(engine, record, lease, stale)
            if busy is None:  # (PostgreSQL: the run lock is free; else the rows decide)
                with Session(engine) as session, session.begin():
                    _bound_start(session.connection(), lease)
                    _lock_versioning(session, record.audit_name, record.model_id)
                    _mark_dead_runs(session, record, owner_gone, lease, stale)
                    busy = session.scalar(select(AuditRun.id).where(_running(record)))
                    if busy is None:
                        record.started_at = datetime.now(UTC)
                        run = AuditRun(
                            **record.columns(),
                            status=RUNNING,
                            finished_at=record.started_at,
                            heartbeat_at=server_now(engine.dialect.name),
                        )
                        session.add(run)
                        session.flush()
                        run_id = run.id
            if busy is None:
                if lock is not None:  # bounded from now on: heartbeats keep it busy
                    _bound_lock_session(lock)
                with _LEASES_LOCK:
                    _LEASES[run_id] = RunLease(lease_engine, run_id, lock, lease / 6)
                return run_id
            if not announced:
                log.warning(
                    "run %s of audit %r is still running: waiting up to %s for it to finish",
                    busy,
                    record.audit_name,
                    wait,
                )
                announced = True
            if time.monotonic() >= deadline:
                raise RunInProgress(  # noqa: TRY301 - the handler below releases the lock
                    f"run {busy} of audit {record.audit_name!r} (model {record.model_id!r}) is "
                    f"still running after waiting {wait}"
                )
            time.sleep(poll)
    except BaseException:
        if lock is not None:
            lock.close()
        lease_engine.dispose()
        raise


def _bound_start(connection: Connection, lease: float) -> None:
    """The start's transaction: bounded like a run's (bound_session); on MariaDB it also waits
    long enough for the server to end a lost run's session holding that run's row (the row a dead
    run's persist locked is marked failed once that session has ended, within
    ``session_silence``)."""
    bound_session(connection)
    if connection.dialect.name in ("mysql", "mariadb"):
        wait = round(min(session_silence() + lease + 10, statement_timeout()))
        connection.exec_driver_sql(f"SET SESSION innodb_lock_wait_timeout = {max(1, wait)}")


def abandon_run(engine: Engine, run_id: int) -> bool:
    """Mark one ``running`` run failed as abandoned (an operator knows its process is gone);
    its ``finished_at`` is the database's time, as for any run another process ends."""
    with Session(engine) as session, session.begin():
        result = session.execute(
            update(AuditRun)
            .where(AuditRun.id == run_id, AuditRun.status == RUNNING)
            .values(
                status=FAILED,
                error=ABANDONED + " (marked by an operator)",
                finished_at=server_now(engine.dialect.name),
            )
        )
        return _rowcount(result) == 1


def abandon_stale_runs(engine: Engine, audit_name: str, older_than: timedelta) -> int:
    """Mark ``running`` runs of this audit with no sign of life for ``older_than`` as failed:
    no heartbeat (else, for rows without one, no start) for that long by the database's clock
    (db.store.clock; on SQLite the clock of the machine holding the file), never this process's.
    ``finished_at`` is the database's time too."""
    backend = engine.dialect.name
    with Session(engine) as session, session.begin():
        result = session.execute(
            update(AuditRun)
            .where(
                AuditRun.audit_name == audit_name,
                AuditRun.status == RUNNING,
                _silent(backend, older_than.total_seconds(), older_than),
            )
            .values(status=FAILED, error=ABANDONED, finished_at=server_now(backend))
        )
        return _rowcount(result)


def _rowcount(result: Any) -> int:
    """Rows matched by an UPDATE (typed: Session.execute returns a plain Result)."""
    return int(result.rowcount)


def find_identical_run(session: Session, run_id: int, record: RunRecord) -> AuditRun | None:
    """The latest succeeded run of the same audit and model with equal configuration and input,
    other than run ``run_id`` itself."""
    return session.scalars(
        select(AuditRun)
        .where(
            AuditRun.id != run_id,
            AuditRun.audit_name == record.audit_name,
            AuditRun.model_id == record.model_id,
            AuditRun.status == SUCCEEDED,
            AuditRun.config_hash == record.config_hash,
            AuditRun.input_fingerprint == record.input_fingerprint,
        )
        .order_by(AuditRun.version.desc())
        .limit(1)
    ).first()


def _replace_with_identical(session: Session, run_id: int, record: RunRecord) -> AuditRun | None:
    """The identical succeeded run (find_identical_run), run ``run_id``'s row then deleted if it
    is still ``running``: a run that has committed is never deleted."""
    existing = find_identical_run(session, run_id, record)
    if existing is not None:
        session.execute(delete(AuditRun).where(AuditRun.id == run_id, AuditRun.status == RUNNING))
    return existing


def _locked_status(session: Session, run_id: int) -> str | None:
    """Run ``run_id``'s status (None: no such row), its row locked for the transaction: a write
    to it still in progress (an earlier attempt whose fate the server has not settled) finishes
    first."""
    return session.scalar(select(AuditRun.status).where(AuditRun.id == run_id).with_for_update())


def run_status(engine: Engine, run_id: int) -> str | None:
    """Run ``run_id``'s status (None: no such run)."""
    with engine.connect() as connection:
        return connection.scalar(select(AuditRun.status).where(AuditRun.id == run_id))


def _saved(run: AuditRun | None, new: bool) -> SavedRun:
    """A succeeded run as saved: its id, whether this run wrote it, its version (a succeeded run
    has one)."""
    assert run is not None and run.version is not None
    return SavedRun(run.id, new, run.version)


def reuse_identical_run(
    engine: Engine, run_id: int, record: RunRecord
) -> tuple[SavedRun, dict[str, Any]] | None:
    """Before any statistics: a succeeded run with the same input and configuration and its
    summary, run ``run_id``'s ``running`` row removed in the same transaction; None (and nothing
    changed) when there is none. save_run checks again under the same lock."""
    with Session(engine) as session, session.begin():
        bound_session(session.connection(), run_id)
        _lock_versioning(session, record.audit_name, record.model_id)
        existing = _replace_with_identical(session, run_id, record)
        if existing is None:
            return None
        return _saved(existing, new=False), dict(existing.summary or {})


def save_run(
    engine: Engine,
    run_id: int,
    record: RunRecord,
    results: dict[type, pd.DataFrame],
    quarantine: pd.DataFrame,
    *,
    force: bool = False,
    attempts: int = 3,
) -> SavedRun:
    """Commit the results and promote run ``run_id`` to succeeded; returns the saved run.

    ``results`` maps each result model (e.g. GroupCount) to its frame, whose columns are the
    model's columns without ``run_id``. When an identical run exists (and not ``force``), the
    running row is removed in the same transaction and the existing run's id is returned.

    Idempotent: when the reply to the COMMIT was lost (the server committed, the client saw the
    connection drop) the retry finds run ``run_id``'s own row succeeded, which only this function's
    promotion of that row makes it, and returns it as saved; it never judges by equal input.
    """
    for attempt in range(attempts):
        try:
            with Session(engine) as session, session.begin():
                bound_session(session.connection(), run_id)
                _lock_versioning(session, record.audit_name, record.model_id)
                if _locked_status(session, run_id) == SUCCEEDED:
                    log.warning("run %s had already committed (its reply was lost): kept", run_id)
                    return _saved(session.get(AuditRun, run_id), new=True)
                if not force and (existing := _replace_with_identical(session, run_id, record)):
                    return _saved(existing, new=False)
                last = session.scalar(
                    select(func.coalesce(func.max(AuditRun.version), 0)).where(
                        AuditRun.audit_name == record.audit_name,
                        AuditRun.model_id == record.model_id,
                    )
                )
                version = (last or 0) + 1
                promoted = session.execute(
                    update(AuditRun)
                    .where(AuditRun.id == run_id, AuditRun.status == RUNNING)
                    .values(
                        **record.columns(),
                        status=SUCCEEDED,
                        version=version,
                        finished_at=datetime.now(UTC),
                    )
                )
                if _rowcount(promoted) != 1:
                    raise RunLost(
                        f"run {run_id} is no longer running (another run found its lease "
                        "lapsed and marked it failed): its results are not saved"
                    )
                connection = session.connection()  # Core or COPY: no ORM bulk layer
                for model, frame in results.items():
                    if not frame.empty:
                        table = cast(Any, model).__table__  # a mapped class: its Table
                        _insert_results(connection, table, frame, run_id)
                _add_quarantine(session, run_id, record, quarantine)
                return SavedRun(run_id, True, version)
        except IntegrityError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


ERROR_CHARACTERS = 4000  # of a failed run's stored error, at the most


def record_failed_run(
    engine: Engine,
    run_id: int | None,
    record: RunRecord,
    error: str,
    quarantine: pd.DataFrame | None = None,
) -> int:
    """Mark the run failed (no version, no results) with its error and any quarantined rows.

    Idempotent: the quarantined rows are stored once, however often it is retried. A run that
    has committed as succeeded (the failure came after its persist committed, e.g. the reply was
    lost and the retries ran out) keeps its status and results: a failed run never has results,
    so it is left alone, with a warning."""
    values = {**record.columns(), "status": FAILED, "error": error[:ERROR_CHARACTERS]}
    with Session(engine) as session, session.begin():
        bound_session(session.connection(), run_id)
        if run_id is None:
            run = AuditRun(**values, finished_at=datetime.now(UTC))
            session.add(run)
            session.flush()
            run_id = run.id
        elif (status := _locked_status(session, run_id)) == SUCCEEDED:
            log.warning("run %s committed as succeeded: not marked failed (%s)", run_id, error)
            return run_id
        elif status is None:  # removed as a duplicate of an identical run: nothing to mark
            log.warning("run %s no longer exists: not marked failed (%s)", run_id, error)
            return run_id
        else:
            session.execute(
                update(AuditRun)
                .where(AuditRun.id == run_id)
                .values(**values, finished_at=datetime.now(UTC))
            )
        stored = select(QuarantinedRow.id).where(QuarantinedRow.run_id == run_id).limit(1)
        # rows already stored for the run: an earlier attempt committed them (its reply was lost)
        if quarantine is not None and session.scalar(stored) is None:
            _add_quarantine(session, run_id, record, quarantine)
        return run_id


def _add_quarantine(
    session: Session, run_id: int, record: RunRecord, quarantine: pd.DataFrame
) -> None:
    if quarantine.empty:
        return
    rows = _records(quarantine, run_id)
    now = datetime.now(UTC)
    for row in rows:
        row.update(source=f"audit:{record.audit_name}", created_at=now)
    session.execute(insert(QuarantinedRow), rows)
