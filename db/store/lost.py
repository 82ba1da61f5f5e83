"""A lost run's sessions on MariaDB/MySQL: named after their run, found and ended by the next run.

PostgreSQL names a run's writing transactions by ``application_name``; MariaDB has no such name,
so each of a run's writing sessions holds a user-level lock named after the store and the run
(``GET_LOCK('biasaudit STORE run ID SLOT', 0)``, STORE a hash of the store's database name), one
of ``SLOTS`` names so that several sessions of one run (a persist, its retry, a heartbeat) each
hold one. A user-level lock lives as long as its
session (or until released), and ``IS_USED_LOCK`` gives its holder's ``CONNECTION_ID()``.

The next run ends the sessions of a run it has proven lost (its lease lapsed by the database's
clock, db.store.runs) with ``KILL CONNECTION``, if they have been idle (``Sleep``) for half a lease:
the run is marked failed whatever its sessions do, and a session whose client is gone stays idle
until ``wait_timeout``. Killing rolls back its transaction, releasing its row locks at
once. Only sessions of this user are seen and ended (information_schema.PROCESSLIST shows a user's
own without the PROCESS privilege); others are left to the server's limits.
"""

from __future__ import annotations

import hashlib
import logging

from sqlalchemy import Connection, bindparam, text
from sqlalchemy.exc import DBAPIError

SLOTS = 8  # names per run: sessions of one run that may hold one at once
_HELD = "biasaudit_run_tag"  # the run whose name this DBAPI connection holds (its info dict)
log = logging.getLogger(__name__)


def _name(connection: Connection, run_id: int, slot: int) -> str:
    """The lock name of a run's slot in this store. User-level locks are the server's, not a
    database's: the store's database name (hashed, a name holds 64 characters at most) keeps
    run 5 of one store apart from run 5 of another on the same server."""
    store = hashlib.sha256(str(connection.engine.url.database or "").encode()).hexdigest()[:16]
    return f"biasaudit {store} run {run_id} {slot}"


def tag_session(connection: Connection, run_id: int) -> None:
    """Have this MariaDB session hold a name of run ``run_id`` (the first free slot), giving up
    the name of another run it held; nothing when every slot is taken."""
    info = connection.info
    held = info.get(_HELD)
    if held is not None and held[0] == run_id:
        return
    if held is not None:
        connection.execute(text("SELECT RELEASE_LOCK(:name)"), {"name": _name(connection, *held)})
        info.pop(_HELD)
    cases = " ".join(f"WHEN GET_LOCK(:n{slot}, 0) = 1 THEN {slot}" for slot in range(SLOTS))
    names = {f"n{slot}": _name(connection, run_id, slot) for slot in range(SLOTS)}
    slot = connection.scalar(text(f"SELECT CASE {cases} END"), names)  # the first free, in order
    if slot is not None:
        info[_HELD] = (run_id, int(slot))


def end_sessions(connection: Connection, run_ids: list[int], idle: float) -> list[int]:
    """End (``KILL CONNECTION``) the sessions of this user holding a name of one of ``run_ids``
    and idle for ``idle`` seconds at least; returns their connection ids."""
    names = [_name(connection, run_id, slot) for run_id in run_ids for slot in range(SLOTS)]
    if not names:
        return []
    columns = ", ".join(f"IS_USED_LOCK(:n{i})" for i in range(len(names)))
    holders = connection.execute(
        text(f"SELECT {columns}"), {f"n{i}": name for i, name in enumerate(names)}
    ).one()
    found = sorted({int(holder) for holder in holders if holder is not None})
    if not found:
        return []
    idle_ones = connection.scalars(
        text(
            "SELECT ID FROM information_schema.PROCESSLIST WHERE ID IN :ids "
            "AND ID <> CONNECTION_ID() AND COMMAND = 'Sleep' AND TIME >= :idle"
        ).bindparams(bindparam("ids", expanding=True)),
        {"ids": found, "idle": idle},
    ).all()
    ended = []
    for session in idle_ones:
        try:
            connection.exec_driver_sql(f"KILL CONNECTION {int(session)}")
            ended.append(int(session))
        except DBAPIError as exc:  # gone meanwhile, or not ours to end: the server's limits will
            log.warning("could not end session %s of a lost run: %s", session, type(exc).__name__)
    return ended
