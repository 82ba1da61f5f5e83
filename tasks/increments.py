"""Disjoint increments of a monitored audit: which predictions a run uses.

A monitored run at ``as_of`` whose previous run (in as-of order) was at ``previous`` consumes

- the **decisions** made in (previous, as_of]: selection rates (ppr, pnr) need no label;
- the **outcomes** that matured in (previous, as_of], i.e. predictions with
  previous < predicted_at + label_delay ≤ as_of, and labelled by ``as_of`` (a label with a
  ``labelled_at`` later than ``as_of`` counts as missing): error rates (tpr, fpr, ...);
- the matured predictions still **unlabelled** at as_of, reported per group and never used later.

The first run (previous = None) consumes everything up to its as_of. Every moment belongs to
exactly one interval (previous, as_of] of the schedule, so no prediction counts twice, a re-run
at the same as_of consumes the same rows (with ``labelled_at``, whenever it runs), and a
backfill that inserts an as_of before stored runs must replay those runs (``replay_plan``).

On a database the same rule is two windows of ``predicted_at`` (``increment_windows``), each read
by the audit's own scan: decisions in (previous, as_of] and outcomes in
(previous − label_delay, as_of − label_delay].
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Increment:
    """Boolean masks over the predictions: decisions, labelled outcomes, unlabelled outcomes."""

    decisions: np.ndarray
    outcomes: np.ndarray
    unlabelled: np.ndarray


def _ts(value) -> pd.Timestamp:
    """A moment in UTC (naive values are taken as UTC)."""
    moment = pd.Timestamp(value)
    return moment.tz_localize("UTC") if moment.tzinfo is None else moment.tz_convert("UTC")


def _times(values) -> np.ndarray:
    """Moments in UTC as naive datetime64 (naive values are taken as UTC; missing ones NaT)."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "M":
        return values.astype("datetime64[ns]")
    series = pd.to_datetime(pd.Series(np.asarray(values, dtype=object)), utc=True, format="mixed")
    return series.dt.tz_localize(None).to_numpy(dtype="datetime64[ns]")


def increment_masks(
    predicted_at,
    labelled,
    previous: datetime | pd.Timestamp | None,
    as_of: datetime | pd.Timestamp,
    label_delay: str | pd.Timedelta = "0D",
    labelled_at=None,
) -> Increment:
    """Masks of the predictions a run at ``as_of`` consumes, after a run at ``previous``."""
    times = _times(predicted_at)
    end = _ts(as_of).tz_localize(None).to_datetime64()
    delay = pd.Timedelta(label_delay).to_timedelta64()
    start = None if previous is None else _ts(previous).tz_localize(None).to_datetime64()
    after = (lambda t: np.ones(len(times), bool)) if start is None else (lambda t: t > start)
    decisions = after(times) & (times <= end)
    matured = after(times + delay) & (times + delay <= end)
    known = np.asarray(labelled, dtype=bool)
    if labelled_at is not None:
        arrival = _times(labelled_at)
        known = known & (np.isnat(arrival) | (arrival <= end))
    return Increment(decisions, matured & known, matured & ~known)


@dataclass(frozen=True)
class IncrementWindows:
    """(start, end] windows of predicted_at (start None: from the beginning) of a run's
    decisions and of its matured outcomes."""

    decisions: tuple[datetime | None, datetime]
    outcomes: tuple[datetime | None, datetime]


def increment_windows(
    previous: datetime | None, as_of: datetime, label_delay: timedelta = timedelta(0)
) -> IncrementWindows:
    """The windows whose predictions a run at ``as_of`` consumes after a run at ``previous``
    (UTC): the rule of ``increment_masks`` as windows a scan reads. A prediction's outcome
    matures in (previous, as_of] when predicted_at lies in (previous − delay, as_of − delay]."""
    end = _ts(as_of).to_pydatetime()
    start = None if previous is None else _ts(previous).to_pydatetime()
    shifted = None if start is None else start - label_delay
    return IncrementWindows((start, end), (shifted, end - label_delay))


def as_of_schedule(
    predicted_at,
    every: str = "1D",
    label_delay: str = "0D",
    start=None,
    end=None,
) -> pd.DatetimeIndex:
    """Nightly as-of times: from the first period boundary after the earliest prediction (or
    ``start``) every ``every`` until the last prediction's outcome has matured (or ``end``)."""
    times = pd.Series(_times(predicted_at)).dt.tz_localize("UTC")
    step = pd.Timedelta(every)
    first = _ts(start) if start is not None else times.min().floor(step) + step
    last = _ts(end) if end is not None else times.max() + pd.Timedelta(label_delay)
    count = int(np.ceil((last - first) / step)) + 1
    return pd.DatetimeIndex([first + i * step for i in range(max(count, 1))])


def previous_as_of(stored, as_of):
    """The stored as-of just before ``as_of`` (None if there is none): "previous" means the
    previous as-of, never the highest version."""
    earlier = [s for s in stored if _ts(s) < _ts(as_of)]
    return max(earlier, key=_ts) if earlier else None


def replay_plan(stored, as_of) -> list:
    """As-ofs to (re)compute, in order, when a run at ``as_of`` is requested: none when it is
    stored (idempotent), itself when it is the latest, else itself and every later stored as-of
    (a backfill replays in as-of order so that increments stay disjoint)."""
    target = _ts(as_of)
    if any(_ts(s) == target for s in stored):
        return []
    later = sorted((s for s in stored if _ts(s) > target), key=_ts)
    return [as_of, *later]
