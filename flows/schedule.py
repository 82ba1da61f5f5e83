"""A cron schedule's nominal instants in its time zone, as Prefect's scheduler computes them.

A scheduled nightly run audits the window that ends at its schedule's nominal instant (the cron
fire the run was scheduled for, in the schedule's time zone), never at the clock when it started:
a run that starts late, or on a machine whose clock is off, audits the same window as one on
time. Its window of N days starts at the latest nominal fire at or before N calendar days (in the
schedule's zone) before its end: with a daily cron and ``last_day`` that is the previous fire, so
consecutive nightly windows tile time across daylight-saving changes (a 25-hour night in October,
a 23-hour one in March), each instant in exactly one window (docs/guarantees.md).

The fires are Prefect's own (its server's ``CronSchedule``, which creates the scheduled runs):
the window's end is then exactly a run's scheduled start time. Prefect is imported only when a
schedule is given (the nightly flow), never by ``run_audit``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any
from zoneinfo import ZoneInfo

# How far back to look for the latest fire: a cron fires at least once in this span.
_LONGEST_GAP = timedelta(days=5 * 366)


@dataclass(frozen=True)
class Schedule:
    """A cron expression in an IANA time zone (``biasaudit serve --cron --timezone``)."""

    cron: str
    timezone: str = "UTC"

    @cached_property
    def _prefect(self) -> Any:
        from prefect.server.schemas.schedules import CronSchedule

        return CronSchedule(cron=self.cron, timezone=self.timezone)

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def floor(self, moment: datetime) -> datetime:
        """The latest nominal fire at or before ``moment`` (UTC)."""
        moment = _utc(moment)
        lookback = timedelta(minutes=2)
        while lookback <= _LONGEST_GAP * 2:
            # few candidates each time: Prefect checks at most 1,000 after ``start``
            fires = list(self._prefect._get_dates_generator(start=moment - lookback, end=moment))
            if fires:
                return datetime.fromtimestamp(max(fires).timestamp(), UTC)  # not pendulum's
            lookback *= 4
        raise ValueError(f"cron {self.cron!r} does not fire within 5 years before {moment}")


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
