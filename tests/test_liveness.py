"""Liveness the server can see: partitions during persist and machines whose clocks disagree.

A run proves it is alive to the database, and every "is it still alive" decision is made by the
database's clock (db.store.clock); a session whose client is gone is ended by the server within a bound
(docs/operations.md, "Nothing stuck"). Tested here with real faults:

- a partition: the audit's process reaches the store through tests.faultproxy, which stops
  forwarding during persist without closing a socket (packets dropped, not refused: the server's
  sessions stay open, TCP keeps acknowledging), while the next run of the same audit reaches the
  store directly, as from a machine on a healthy network;
- two clocks: one process runs under libfaketime five minutes behind the other (Debian's
  ``faketime`` package, which .ci/run installs), both auditing one store.

SQLite is left out of both: its clock is the clock of the machine that holds the file, and a
process of another machine never opens that file (SQLite over a network file system is
unsupported), so neither case exists there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, text, update
from sqlalchemy.exc import SQLAlchemyError

import biasaudit.db.store.runs
from biasaudit.db.engine import make_engine
from biasaudit.db.store.history import list_runs
from biasaudit.db.store.models import AuditRun, GroupCount, MetricResult
from biasaudit.db.store.runs import (
    ABANDONED,
    RunInProgress,
    abandon_stale_runs,
    bound_session,
    release_run,
    start_run,
)
from biasaudit.flows import pipeline
from biasaudit.flows.audit import run_audit
from biasaudit.flows.config_files import load_audit
from biasaudit.flows.demo import END
from biasaudit.flows.pipeline import new_record

from .conftest import DEMO_CONFIG, on_databases
from .faultproxy import FaultProxy
from .test_reliability import load_small

AUDIT = "credit-race"
LEASE = 6.0  # seconds: the lease of every process in these tests
FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")

# A small audit of the demo's load; a run waits at most stale_run_hours (3 minutes) for a run it
# takes for alive: before liveness was the server's, the run after a partition waited that long.
CONFIG = """\
[[audits]]
name = "credit-race"
model_id = "credit-scorer"
source = "predictions"
window = "all"
attributes = ["race", "sex"]
metrics = ["tpr", "fpr"]
reference_groups = { race = "White" }
thresholds = { stale_run_hours = 0.05 }
"""

# One forced run of the audit in a process of its own; with a marker path, it pauses 15 s (or the
# seconds of a fourth argument) after its scan (its run is then `running`, its heartbeats going),
# the marker written when it pauses.
RUN_SCRIPT = textwrap.dedent(
    """
    import pathlib, sys, threading
    import biasaudit.flows.pipeline as pipeline
    from biasaudit.flows.demo import END

    url, config, marker = sys.argv[1], sys.argv[2], sys.argv[3]
    pause = float(sys.argv[4]) if len(sys.argv) > 4 else 15.0
    if marker:
        scan = pipeline.scan

        def scan_then_pause(*args, **kwargs):
            scanned = scan(*args, **kwargs)
            pathlib.Path(marker).write_text("paused")
            threading.Event().wait(pause)  # libfaketime breaks time.sleep (EINVAL)
            return scanned

        pipeline.scan = scan_then_pause
    result = pipeline.run_audit("credit-race", config, url, END, force=True)
    print("run", result["run_id"], "version", result["version"])
    """
)


def _environment(**changes: str) -> dict[str, str]:
    return {**os.environ, "BIASAUDIT_LEASE_SECONDS": str(LEASE), **changes}


def _result_rows(url: str, run_id: int) -> list[int]:
    with make_engine(url).connect() as connection:
        return [
            connection.scalar(select(func.count()).select_from(t).where(t.c.run_id == run_id))
            for t in (GroupCount.__table__, MetricResult.__table__)
        ]


def _timed(function, times: list[float]):
    """``function``, appending to ``times`` the monotonic time at which each call returns."""

    def timed(*args, **kwargs):
        result = function(*args, **kwargs)
        times.append(time.monotonic())
        return result

    return timed


def _wait_for(condition, child: subprocess.Popen, what: str, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if child.poll() is not None:
            raise AssertionError(f"{what}: the run ended first: {child.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, f"{what}: not within {limit:g} s"
        time.sleep(0.1)


# Where the network goes silent: before persist's first result statement reaches the server (its
# session then idles in its transaction), or, on PostgreSQL, inside COPY's data (the session then
# waits for the rest of the data, where no idle timeout of the server reaches it; a COPY row of
# group_counts holds its attribute between tabs).
@pytest.mark.slow
@pytest.mark.parametrize(
    ("db_url", "marker"),
    [
        ("postgresql", b"group_counts"),
        ("postgresql", b"\tsex\t"),
        ("mariadb", b"group_counts"),
    ],
    indirect=["db_url"],
    ids=["postgresql-statement", "postgresql-copy-data", "mariadb-statement"],
)
def test_a_partition_during_persist_never_blocks_the_next_run(
    db_url, marker, tmp_path, monkeypatch
):
    """Packets between an audit and its store are dropped (not refused) while persist writes the
    results: the server ends the lost sessions and their locks (or the next run ends them, once
    it holds the run lock; on MariaDB, once their run's lease lapsed and they idled a lease),
    so the next run of the same audit, from a healthy network, starts within two leases (on
    MariaDB one lease and its poll) and succeeds; the partitioned run's row says failed, with the reason, and
    none of its results is ever stored."""
    load_small(db_url)
    config = tmp_path / "audits.toml"
    config.write_text(CONFIG)
    monkeypatch.setenv("BIASAUDIT_LEASE_SECONDS", str(LEASE))
    # the next run's waits on a lock are bounded by the statement timeout: 90 s here, so that a
    # lock held by a lost session fails the test within minutes instead of the default 10
    monkeypatch.setenv("BIASAUDIT_STATEMENT_TIMEOUT_SECONDS", "90")
    began: list[float] = []  # when the next run's row is committed and its lease taken
    monkeypatch.setattr(pipeline, "start_run", _timed(pipeline.start_run, began))
    parsed = make_engine(db_url).url
    with FaultProxy(parsed.host or "127.0.0.1", parsed.port or 0, lifetime=300) as proxy:
        proxy.freeze(after=marker)
        child = subprocess.Popen(
            [sys.executable, "-c", RUN_SCRIPT, proxy.url(db_url), str(config), ""],
            env=_environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _wait_for(proxy.frozen.is_set, child, "the partition during persist")
            (partitioned,) = list_runs(make_engine(db_url))["id"].tolist()
            started = time.monotonic()
            result = run_audit(AUDIT, str(config), db_url, END, force=True)
            waited = time.monotonic() - started
            runs = list_runs(make_engine(db_url)).set_index("id")
            print(
                f"the next run started {began[0] - started:.1f} s and completed {waited:.1f} s "
                "after the partition"
            )
            assert child.poll() is None  # the partitioned process is still alive, still cut off
            proxy.thaw()  # the network heals: the lost run hears that its sessions ended
            child.wait(timeout=120)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
    assert result["new"] and result["version"] == 1
    assert waited < 2 * LEASE + 30  # the bound of docs/operations.md, and the run's own time
    if db_url.startswith("mysql"):  # the next run ends the lost sessions: a lease and its poll
        assert began[0] - started < LEASE + 4  # (the server's wait_timeout alone: two leases)
    assert runs.loc[result["run_id"], "status"] == "succeeded"
    lost = runs.loc[partitioned]
    assert lost["status"] == "failed" and lost["error"].startswith(ABANDONED)
    assert child.returncode != 0  # its persist never committed, healed or not
    after = list_runs(make_engine(db_url)).set_index("id").loc[partitioned]
    assert after["status"] == "failed"  # (with its own error now, if it could record it)
    assert _result_rows(db_url, partitioned) == [0, 0]
    assert all(_result_rows(db_url, result["run_id"]))


@pytest.mark.slow
@pytest.mark.skipif(not FAKETIME.exists(), reason=f"no {FAKETIME} (apt-get install faketime)")
@on_databases("postgresql", "mariadb")
def test_two_machines_clocks_five_minutes_apart_both_store_their_runs(db_url, tmp_path):
    """One process runs with its clock five minutes behind (libfaketime) while a process on the
    right time starts the same audit on the same store: the second waits for the first, which is
    alive by the database's clock whatever its own says, and both runs succeed and are stored."""
    load_small(db_url)
    config, marker = tmp_path / "audits.toml", tmp_path / "paused"
    config.write_text(CONFIG)
    behind = _environment(
        LD_PRELOAD=str(FAKETIME), FAKETIME="-5m", FAKETIME_DONT_FAKE_MONOTONIC="1"
    )
    slow = subprocess.Popen(
        [sys.executable, "-c", RUN_SCRIPT, db_url, str(config), str(marker)],
        env=behind,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(marker.exists, slow, "the run five minutes behind")
        time.sleep(2 * LEASE)  # its heartbeats, by its clock, are now more than a lease "old"
        other = subprocess.run(
            [sys.executable, "-c", RUN_SCRIPT, db_url, str(config), ""],
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        _, err = slow.communicate(timeout=120)
    finally:
        if slow.poll() is None:
            slow.kill()
            slow.wait()
    assert slow.returncode == 0, err[-3000:]
    assert other.returncode == 0, other.stderr[-3000:]
    runs = list_runs(make_engine(db_url))
    assert sorted(runs["status"]) == ["succeeded", "succeeded"], runs[["id", "status", "error"]]
    assert sorted(runs["version"]) == [1, 2]
    assert all(all(_result_rows(db_url, run_id)) for run_id in runs["id"])


def _skew(monkeypatch, offset: timedelta) -> None:
    """This process's clock, as db.store.runs reads it, ``offset`` away from the true time."""

    class Skewed(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[override]
            return datetime.now(tz) + offset

    monkeypatch.setattr(biasaudit.db.store.runs, "datetime", Skewed)


def _record():
    return new_record(load_audit(DEMO_CONFIG, AUDIT), END)


def test_a_clock_ahead_never_takes_a_live_run_for_dead(db_url, monkeypatch):
    """A process whose clock is five minutes ahead waits for a live run (its heartbeats fresh by
    the database's clock) instead of marking it failed as lapsed."""
    monkeypatch.setenv("BIASAUDIT_LEASE_SECONDS", "3")
    engine = make_engine(db_url)
    first = start_run(engine, _record())
    try:
        _skew(monkeypatch, timedelta(minutes=5))
        with pytest.raises(RunInProgress):
            start_run(engine, _record(), wait=timedelta(seconds=2), poll=0.5)
        assert list_runs(engine)["status"].tolist() == ["running"]
    finally:
        release_run(first)


@on_databases("sqlite", "mariadb")  # PostgreSQL: the free session lock proves it at once
def test_a_clock_behind_still_sees_a_dead_runs_lease_lapse(db_url, monkeypatch):
    """A process whose clock is five minutes behind marks a run whose heartbeats stopped failed
    once its lease has lapsed by the database's clock, and goes on."""
    monkeypatch.setenv("BIASAUDIT_LEASE_SECONDS", "3")
    engine = make_engine(db_url)
    first = start_run(engine, _record())
    release_run(first)  # its heartbeats stop; its row stays `running`, as after a partition
    _skew(monkeypatch, timedelta(minutes=-5))
    started = time.monotonic()
    second = start_run(engine, _record(), wait=timedelta(seconds=20), poll=0.2)
    release_run(second)
    assert time.monotonic() - started < 15
    runs = list_runs(engine).set_index("id")
    assert runs.loc[first, "status"] == "failed" and runs.loc[first, "error"].startswith(ABANDONED)


@on_databases("mariadb")
def test_a_lapsed_runs_busy_session_is_not_ended(db_url, monkeypatch):
    """The next run ends only the idle sessions of a run whose lease lapsed: a session of that
    run still at work (a statement running, its row locked) finishes and commits, and the next
    run waits for it, then goes on."""
    monkeypatch.setenv("BIASAUDIT_LEASE_SECONDS", "2")
    engine = make_engine(db_url)
    first = start_run(engine, _record())
    release_run(first)  # its heartbeats stop: its lease lapses in 2 s
    outcome: list[object] = []

    def busy() -> None:  # the run's persist, still at work for 6 s
        try:
            with engine.begin() as connection:
                bound_session(connection, first)
                connection.execute(update(AuditRun).where(AuditRun.id == first).values(rows_read=1))
                connection.execute(text("SELECT SLEEP(6)"))
            outcome.append("committed")
        except SQLAlchemyError as exc:  # ended by the next run: what this test rules out
            outcome.append(exc)

    worker = threading.Thread(target=busy)
    worker.start()
    time.sleep(3)
    second = start_run(engine, _record(), wait=timedelta(seconds=30), poll=0.2)
    release_run(second)
    worker.join(30)
    assert outcome == ["committed"]
    runs = list_runs(engine).set_index("id")
    assert runs.loc[first, "status"] == "failed" and runs.loc[first, "rows_read"] == 1


def _finished_at(engine, run_id: int) -> datetime:
    return list_runs(engine).set_index("id").loc[run_id, "finished_at"].to_pydatetime()


def test_abandoning_stale_runs_with_a_clock_ahead_spares_a_live_run(db_url, monkeypatch):
    """``abandon_stale_runs`` from a process whose clock is five minutes ahead leaves a run whose
    heartbeats are fresh by the database's clock alone (the process's clock would take it for
    four minutes stale)."""
    engine = make_engine(db_url)
    first = start_run(engine, _record())
    try:
        _skew(monkeypatch, timedelta(minutes=5))
        assert abandon_stale_runs(engine, AUDIT, timedelta(minutes=1)) == 0
        assert list_runs(engine)["status"].tolist() == ["running"]
    finally:
        release_run(first)


def test_abandoning_stale_runs_with_a_clock_behind_ends_a_dead_run_at_the_database_time(
    db_url, monkeypatch
):
    """``abandon_stale_runs`` from a process whose clock is five minutes behind marks a run with
    no heartbeat for the given time (by the database's clock) failed, and its ``finished_at`` is
    the database's time, not the process's."""
    engine = make_engine(db_url)
    first = start_run(engine, _record())
    release_run(first)  # its heartbeats stop
    time.sleep(1.5)
    _skew(monkeypatch, timedelta(minutes=-5))
    assert abandon_stale_runs(engine, AUDIT, timedelta(seconds=1)) == 1
    runs = list_runs(engine).set_index("id")
    assert (runs.loc[first, "status"], runs.loc[first, "error"]) == ("failed", ABANDONED)
    finished = _finished_at(engine, first).replace(tzinfo=UTC)
    assert abs(finished - datetime.now(UTC)) < timedelta(minutes=1), finished


@on_databases("sqlite", "mariadb")  # PostgreSQL: the free session lock proves it at once
def test_a_run_marked_abandoned_by_a_clock_ahead_finishes_at_the_database_time(db_url, monkeypatch):
    """The next run, from a process whose clock is five minutes ahead, marks a dead run failed
    with the database's time as its ``finished_at``."""
    monkeypatch.setenv("BIASAUDIT_LEASE_SECONDS", "1")
    engine = make_engine(db_url)
    first = start_run(engine, _record())
    release_run(first)
    time.sleep(1.5)
    _skew(monkeypatch, timedelta(minutes=5))
    release_run(start_run(engine, _record(), wait=timedelta(seconds=20), poll=0.2))
    assert list_runs(engine).set_index("id").loc[first, "status"] == "failed"
    finished = _finished_at(engine, first).replace(tzinfo=UTC)
    assert abs(finished - datetime.now(UTC)) < timedelta(minutes=1), finished


@pytest.mark.slow
@pytest.mark.skipif(not FAKETIME.exists(), reason=f"no {FAKETIME} (apt-get install faketime)")
@on_databases("postgresql", "mariadb")
def test_a_clock_jumping_back_and_forward_mid_run_loses_no_run(db_url, tmp_path):
    """A running audit's clock jumps an hour back, then an hour forward (libfaketime re-reading
    its offset), while another process on the true time starts the same audit: the second waits
    for the first, and both runs succeed and are stored."""
    load_small(db_url)
    config, marker, offset = tmp_path / "audits.toml", tmp_path / "paused", tmp_path / "offset"
    config.write_text(CONFIG)
    offset.write_text("+0\n")
    jumping = _environment(
        LD_PRELOAD=str(FAKETIME),
        FAKETIME_TIMESTAMP_FILE=str(offset),
        FAKETIME_NO_CACHE="1",
        FAKETIME_DONT_FAKE_MONOTONIC="1",
    )
    first = subprocess.Popen(
        [sys.executable, "-c", RUN_SCRIPT, db_url, str(config), str(marker), "30"],
        env=jumping,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    second = None
    try:
        _wait_for(marker.exists, first, "the run whose clock jumps")
        offset.write_text("-1h\n")  # back an hour: its heartbeats, by its clock, an hour old
        time.sleep(2 * LEASE)
        second = subprocess.Popen(
            [sys.executable, "-c", RUN_SCRIPT, db_url, str(config), ""],
            env=_environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(10)  # the second has started and judged the first (alive), and waits
        offset.write_text("+1h\n")  # then forward, past the true time, before the first goes on
        _, first_err = first.communicate(timeout=120)
        _, second_err = second.communicate(timeout=240)
    finally:
        for child in (first, second):
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()
    assert first.returncode == 0, first_err[-3000:]
    assert second.returncode == 0, second_err[-3000:]
    runs = list_runs(make_engine(db_url))
    assert sorted(runs["status"]) == ["succeeded", "succeeded"], runs[["id", "status", "error"]]
    assert sorted(runs["version"]) == [1, 2]
