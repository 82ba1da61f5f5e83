"""``biasaudit.monitor_frame``: replay a history of predictions as nightly monitored runs.

"What would the monitor have said last year?": the frame is cut into the increments nightly runs
would have consumed (tasks.increments: decisions in (previous, as_of], outcomes matured in it and
labelled by as_of), counted in one pass by the audit's count functions, and fed night by night
to the same core as the flow (tasks.monitor.monitor_update).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from biasaudit.schemas.results import COMPARISON_KEY
from biasaudit.tasks.increments import as_of_schedule
from biasaudit.tasks.monitor import (
    OUTPUT_FIELDS,
    RATE_COUNTS,
    UNLABELLED_FIELDS,
    Settings,
    advance,
    increment_counts,
    initial_state,
    mirrors,
)


def _naive_utc(values: pd.Series) -> np.ndarray:
    moments = pd.to_datetime(values, utc=True, format="mixed")
    return moments.dt.tz_localize(None).to_numpy(dtype="datetime64[ns]")


def replay_increments(
    frame: pd.DataFrame,
    schedule: pd.DatetimeIndex,
    *,
    time_column: str = "predicted_at",
    label_delay: str = "0D",
    label_time_column: str | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per prediction: the runs that consume its decision and its outcome, and its label.

    The index in ``schedule`` of the run that consumes its decision and of the run at which its
    outcome matures (len(schedule): never), and whether it was labelled by then. The same rule as tasks.increments.increment_masks, for all runs at once.
    """
    times = _naive_utc(frame[time_column])
    runs = schedule.tz_convert("UTC").tz_localize(None).to_numpy(dtype="datetime64[ns]")
    decision = np.searchsorted(runs, times, side="left")
    outcome = np.searchsorted(runs, times + pd.Timedelta(label_delay).to_timedelta64(), "left")
    labelled = frame["y_true"].notna().to_numpy()
    if label_time_column is not None:
        arrival = _naive_utc(frame[label_time_column])
        due = runs[np.minimum(outcome, len(runs) - 1)]
        labelled = labelled & (np.isnat(arrival) | (arrival <= due))
    return decision, outcome, labelled


def monitor_frame(
    frame: pd.DataFrame,
    *,
    time_column: str = "predicted_at",
    every: str = "1D",
    label_delay: str = "0D",
    attributes,
    intersections=(),
    reference_groups: dict[str, str] | None = None,
    metrics=None,
    label_time_column: str | None = None,
    start=None,
    end=None,
    **options,
) -> pd.DataFrame:
    """Replay ``frame`` as nightly increments through the monitor.

    Per night (``as_of``) and comparison (attribute, group_name, reference, metric): the
    increment's counts, e-values, e-process, confidence sequence and alarms.

    ``frame`` holds predictions (``y_pred``, ``y_true`` with NaN for unknown outcomes, the
    attributes and ``time_column``; optionally ``label_time_column``, when each label arrived).
    Runs fall every ``every`` from the first boundary after the earliest prediction (or
    ``start``) until every outcome has matured (or ``end``); outcomes count ``label_delay``
    after their prediction. ``options``: tolerance, alpha, half_life, v_max
    (tasks.monitor.Settings). Metrics default to ppr, tpr and fpr.
    """
    settings = Settings(**options)
    schedule = as_of_schedule(_naive_utc(frame[time_column]), every, label_delay, start, end)
    decision, outcome, labelled = replay_increments(
        frame,
        schedule,
        time_column=time_column,
        label_delay=label_delay,
        label_time_column=label_time_column,
    )
    decided, matured = decision < len(schedule), outcome < len(schedule)
    outcomes = frame[matured].assign(y_true=frame["y_true"].where(labelled)[matured])
    counts = increment_counts(
        frame[decided],
        outcomes,
        attributes=attributes,
        intersections=intersections,
        reference_groups=reference_groups,
        metrics=metrics,
        decision_increment=decision[decided],
        outcome_increment=outcome[matured],
    )
    return replay_counts(counts, schedule, settings)


def replay_counts(counts: pd.DataFrame, schedule, settings: Settings) -> pd.DataFrame:
    """Run the monitor over increments already counted.

    ``increment`` is the index in ``schedule``: the loop of tasks.monitor.advance that nightly monitor_update calls make,
    on arrays. A comparison joins the monitor (and the e-BH family) the first night it has rows.
    """
    fields_ = RATE_COUNTS + UNLABELLED_FIELDS
    keys = (
        counts[COMPARISON_KEY].drop_duplicates().sort_values(COMPARISON_KEY).reset_index(drop=True)
    )
    nights, size = len(schedule), len(keys)
    row = (
        counts[COMPARISON_KEY]
        .merge(keys.reset_index(), on=COMPARISON_KEY, how="left")["index"]
        .to_numpy()
    )
    night = counts["increment"].astype(int).to_numpy()
    table = np.zeros((nights, size, len(fields_)))
    present = np.zeros((nights, size), bool)
    table[night, row] = counts[fields_].to_numpy(dtype=float)
    present[night, row] = True
    active = np.logical_or.accumulate(present, axis=0)
    state = initial_state(size)
    outputs = {c: np.zeros((nights, size)) for c in OUTPUT_FIELDS}
    mirror = np.zeros(size, bool)
    members = np.zeros(size, bool)  # last night's e-BH family
    for t in range(nights):
        if t == 0 or (active[t] != active[t - 1]).any():  # the comparisons seen so far changed
            seen = keys[active[t]]
            mirror = np.zeros(size, bool)
            mirror[seen.index[mirrors(seen)]] = True
        state, out = advance(state, table[t], active[t], settings, mirror=mirror, members=members)
        members = active[t] & ~mirror
        for c in OUTPUT_FIELDS:
            outputs[c][t] = out[c]
    when, k = np.nonzero(active)
    result = (
        keys.iloc[k]
        .reset_index(drop=True)
        .assign(
            **{c: table[when, k, i] for i, c in enumerate(fields_)},
            **{c: outputs[c][when, k] for c in OUTPUT_FIELDS},
        )
    )
    result = result.astype({"crossed": bool, "alarm": bool})
    result.insert(0, "as_of", np.asarray(schedule)[when])
    return result
