"""Nightly windows tile time: under `serve --cron "0 2 * * *" --timezone Europe/London`, each
scheduled run's window ends at its nominal instant (the cron fire it was scheduled for), never at
the clock when it started, and starts at the previous fire; so across both 2026-27 daylight-saving
changes (2026-10-25, a 25-hour night; 2027-03-28, a 23-hour one) every instant, and every
prediction, is in exactly one nightly window, and a run that starts an hour late audits the
window of one on time. A manual run counts calendar days in its --timezone.

The fires are taken from Prefect's own scheduler (its server's CronSchedule), never from the code
under test; each window is (start, end], as the scan reads it.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pandas as pd
import pytest

from biasaudit.db.engine import make_engine
from biasaudit.db.store.load import load_predictions
from biasaudit.db.store.migrate import upgrade
from biasaudit.flows import pipeline
from biasaudit.flows.demo import GROUPS, synthetic_predictions
from tests.test_server import prefect_server  # noqa: F401 - the fixture
from tests.test_typed_sources import audit_of

CRON, ZONE = "0 2 * * *", "Europe/London"
LONDON = ZoneInfo(ZONE)
# Nights around each change: autumn (2026-10-25, clocks back) and spring (2027-03-28, forward).
AUTUMN = (datetime(2026, 10, 21, tzinfo=UTC), datetime(2026, 10, 29, tzinfo=UTC))
SPRING = (datetime(2027, 3, 24, tzinfo=UTC), datetime(2027, 4, 1, tzinfo=UTC))


def prefect_fires(start: datetime, end: datetime, cron: str = CRON) -> list[datetime]:
    """The instants Prefect's scheduler creates runs for, from ``start`` to ``end``."""
    from prefect.server.schemas.schedules import CronSchedule

    dates = asyncio.run(CronSchedule(cron=cron, timezone=ZONE).get_dates(start=start, end=end))
    return [datetime.fromtimestamp(d.timestamp(), UTC) for d in dates]


def window(audit, as_of: datetime, cron: str | None = CRON, zone: str | None = ZONE):
    record = pipeline.new_record(audit, as_of, None, cron, zone)
    return record.window_start, record.window_end


def minutes(start: datetime, end: datetime) -> list[datetime]:
    count = int((end - start) / timedelta(minutes=1))
    return [start + timedelta(minutes=i) for i in range(count + 1)]


@pytest.mark.parametrize("night", [AUTUMN, SPRING], ids=["2026-10-25", "2027-03-28"])
def test_consecutive_nightly_windows_cover_each_minute_exactly_once(night):
    """A prediction every minute from the first window's start to the last one's end, and at
    every boundary instant, is in exactly one nightly window (start, end]; the window of the night
    of the change is 25 hours in autumn and 23 in spring, all others 24."""
    audit = audit_of(window="last_day")
    fires = prefect_fires(*night)
    assert len(fires) == 8
    windows = [window(audit, fire) for fire in fires]
    assert [end for _, end in windows] == fires  # each ends at its nominal instant
    first, last = windows[0][0], windows[-1][1]
    assert first is not None
    for moment in minutes(first + timedelta(minutes=1), last):
        holding = [i for i, (start, end) in enumerate(windows) if start < moment <= end]
        assert len(holding) == 1, (moment, holding)
    hours = sorted({(end - start) / timedelta(hours=1) for start, end in windows})
    assert hours == ([24, 25] if night is AUTUMN else [23, 24])


@pytest.mark.parametrize("night", [AUTUMN, SPRING], ids=["2026-10-25", "2027-03-28"])
def test_a_run_that_starts_late_or_its_clock_ahead_audits_the_on_time_window(night):
    """A run whose start (or the clock it read) is 1 s, 1 hour or 22 hours (less than the shortest night) past its nominal
    instant audits the window of a run started on time, for last_day and last_7_days."""
    for length in ("last_day", "last_7_days"):
        audit = audit_of(window=length)
        for fire in prefect_fires(*night):
            on_time = window(audit, fire)
            for late in (timedelta(seconds=1), timedelta(hours=1), timedelta(hours=22)):
                assert window(audit, fire + late) == on_time, (length, fire, late)


def test_last_n_days_is_n_calendar_days_in_the_schedules_zone():
    """last_7_days ending at 2026-10-28 02:00 London starts at 2026-10-21 02:00 London: 7
    calendar days, 169 hours across the autumn change (a fixed 7 x 24 h would start an hour
    late, at 03:00 London)."""
    audit = audit_of(window="last_7_days")
    end = datetime(2026, 10, 28, 2, tzinfo=LONDON).astimezone(UTC)
    start, stored_end = window(audit, end)
    assert stored_end == end
    assert start == datetime(2026, 10, 21, 2, tzinfo=LONDON).astimezone(UTC)
    assert (end - start) == timedelta(hours=169)


def test_a_manual_run_counts_calendar_days_in_its_time_zone():
    """Without a schedule the window ends exactly at --as-of; its days are calendar days in
    --timezone (25 hours on 2026-10-25 in London), 24 hours each in UTC (the default)."""
    audit = audit_of(window="last_day")
    as_of = datetime(2026, 10, 26, 0, 0, tzinfo=LONDON).astimezone(UTC)
    assert window(audit, as_of, cron=None) == (
        datetime(2026, 10, 25, 0, 0, tzinfo=LONDON).astimezone(UTC),
        as_of,
    )
    assert window(audit, as_of + timedelta(minutes=7), cron=None)[1] == as_of + timedelta(minutes=7)
    assert window(audit, as_of, cron=None, zone=None) == (as_of - timedelta(days=1), as_of)


def _minute_predictions(start: datetime, count: int) -> pd.DataFrame:
    """``count`` of the demo credit-scorer predictions, one a minute from ``start``."""
    data = synthetic_predictions()
    data = data[data["model_id"] == "credit-scorer"].head(count).copy()
    assert len(data) == count
    moments = [start + timedelta(minutes=i) for i in range(count)]
    data["predicted_at"] = pd.to_datetime(moments, utc=True)
    return data


def _utc(value) -> datetime:
    moment = pd.Timestamp(value).to_pydatetime()
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


NIGHTLY = """
[[audits]]
name = "nightly-day"
model_id = "credit-scorer"
source = "predictions"
window = "last_day"
attributes = ["race"]
metrics = ["tpr", "fpr"]
reference_groups = { race = "White" }
"""


@pytest.mark.usefixtures("prefect_harness")
def test_the_nightly_flow_audits_its_scheduled_window_whenever_it_starts(tmp_path, monkeypatch):
    """The nightly flow with the deployment's schedule (cron and time zone parameters), its flow
    runs scheduled for 02:00 London on 2026-10-24, -25 and -26 but started 1 hour, 0 and 3 hours
    late: each stored run's window is the previous fire to its own, and the three runs read every
    prediction (one a minute from 2026-10-23 02:00 London) in their span exactly once."""
    from prefect.runtime import flow_run

    from biasaudit.flows.nightly import nightly_flow

    url = f"sqlite:///{tmp_path / 'nightly.db'}"
    engine = make_engine(url)
    upgrade(url)
    span_start = datetime(2026, 10, 23, 2, tzinfo=LONDON).astimezone(UTC)
    data = _minute_predictions(span_start - timedelta(hours=1), 4 * 24 * 60)
    load_predictions(engine, data, list(GROUPS), "windows")
    config = tmp_path / "nightly.toml"
    config.write_text(NIGHTLY)
    fires = prefect_fires(span_start + timedelta(hours=1), span_start + timedelta(days=3, hours=1))
    assert len(fires) == 3
    for fire, late in zip(fires, (timedelta(hours=1), timedelta(0), timedelta(hours=3))):
        # the flow run's scheduled start time (Prefect's expected_start_time), the clock late
        scheduled = fire + late
        monkeypatch.setitem(flow_run.FIELDS, "scheduled_start_time", lambda s=scheduled: s)
        nightly_flow(str(config), url, cron=CRON, timezone=ZONE)
    runs = pd.read_sql(
        "SELECT window_start, window_end, rows_read FROM audit_runs ORDER BY id", engine
    )
    ends = [_utc(t) for t in runs["window_end"]]
    starts = [_utc(t) for t in runs["window_start"]]
    assert ends == fires
    assert starts == [span_start, *fires[:2]]
    moments = data["predicted_at"]
    inside = ((moments > span_start) & (moments <= fires[-1])).sum()
    assert runs["rows_read"].sum() == inside == 3 * 24 * 60 + 60  # the 25-hour night


SERVED = """
[[audits]]
name = "credit-race"
model_id = "credit-scorer"
window = "last_day"
attributes = ["race", "sex"]
metrics = ["tpr", "fpr"]
"""


@pytest.mark.slow
def test_a_served_schedule_audits_the_window_ending_at_its_scheduled_instant(
    prefect_server,  # noqa: F811
    tmp_path,
):
    """`biasaudit serve --cron '* * * * *' --timezone Europe/London` on a real Prefect server:
    the run the scheduler creates by itself stores the window ending exactly at that flow run's
    scheduled start time (a whole minute, not the clock seconds later when it started), one
    calendar day in London long."""
    import subprocess
    import time

    from tests.test_server import BIN, _client_env, _completed_scheduled_runs, _get
    from tests.test_server import _stop as stop_serving

    url = f"sqlite:///{tmp_path / 'served.db'}"
    upgrade(url)
    # 3,000 predictions, one a second over the 50 minutes before now: in the window of any
    # nightly run of the next hours
    recent = _minute_predictions(datetime.now(UTC), 3000)
    recent["predicted_at"] = pd.to_datetime(
        [datetime.now(UTC) - timedelta(seconds=i + 1) for i in range(3000)], utc=True
    )
    load_predictions(make_engine(url), recent, list(GROUPS), "served")
    config = tmp_path / "served.toml"
    config.write_text(SERVED)
    name = "london-minute"
    serve = subprocess.Popen(
        [str(BIN / "biasaudit"), "serve", "-c", str(config), "--db", url]
        + ["--cron", "* * * * *", "--timezone", ZONE, "--name", name],
        env=_client_env(prefect_server),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=tmp_path,
    )
    try:
        deadline = time.time() + 120
        while (deployment := _get(f"{prefect_server}/deployments/name/nightly/{name}")) is None:
            assert serve.poll() is None and time.time() < deadline, "serve registered nothing"
            time.sleep(1)
        assert isinstance(deployment, dict)
        registered = time.time()
        while not (completed := _completed_scheduled_runs(prefect_server, deployment["id"])):
            assert serve.poll() is None, "serve stopped"
            assert time.time() < registered + 150, "no scheduled run completed within 150 s"
            time.sleep(2)
    finally:
        served = stop_serving(serve)
    runs = pd.read_sql(
        "SELECT window_start, window_end, started_at FROM audit_runs ORDER BY id", make_engine(url)
    )
    assert len(runs) >= 1, served[-3000:]
    scheduled = {_utc(pd.Timestamp(r["expected_start_time"])) for r in completed}
    end, start = _utc(runs["window_end"].iloc[0]), _utc(runs["window_start"].iloc[0])
    assert end in scheduled, (end, scheduled)
    assert end.second == 0 and end.microsecond == 0
    assert _utc(runs["started_at"].iloc[0]) > end  # it started after its nominal instant
    day_before = (end.astimezone(LONDON).replace(tzinfo=None) - timedelta(days=1)).replace(
        tzinfo=LONDON
    )
    assert start == day_before.astimezone(UTC)
