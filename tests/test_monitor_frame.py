"""Increments (exactly once, late labels, re-runs, backfill); monitor_frame vs nightly runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from biasaudit.tasks.counts import comparison_pairs, group_counts
from biasaudit.tasks.increments import (
    as_of_schedule,
    increment_masks,
    increment_windows,
    previous_as_of,
    replay_plan,
)
from biasaudit.tasks.monitor import (
    Settings,
    _named_pairs,
    empty_state,
    increment_counts,
    monitor_update,
)
from biasaudit.tasks.monitor_frame import monitor_frame, replay_increments

DAY = pd.Timedelta("1D")
SETTINGS = Settings(tolerance=0.0)
T0 = pd.Timestamp("2025-01-01", tz="UTC")


def _predictions(seed: int, days: int = 40, per_day: int = 120) -> pd.DataFrame:
    """Predictions with late labels: some never labelled, others labelled 0-9 days later."""
    rng = np.random.default_rng(seed)
    n = days * per_day
    times = T0 + pd.to_timedelta(rng.uniform(0, days, n), unit="D")
    race = rng.choice(["a", "b", "c"], n, p=[0.6, 0.3, 0.1])
    sex = rng.choice(["f", "m"], n)
    y_pred = rng.binomial(1, np.where(race == "c", 0.5, 0.3))
    y_true = rng.binomial(1, 0.4, n).astype(float)
    lag = pd.to_timedelta(rng.integers(0, 10, n), unit="D")
    labelled_at = pd.Series(times + lag)
    never = rng.random(n) < 0.15
    y_true[never] = np.nan
    labelled_at[never] = pd.NaT
    return pd.DataFrame(
        {
            "predicted_at": times,
            "race": race,
            "sex": sex,
            "y_pred": y_pred,
            "y_true": y_true,
            "labelled_at": labelled_at,
        }
    )


moments = st.integers(0, 30 * 24).map(lambda h: T0 + pd.Timedelta(hours=h))


@settings(max_examples=60, deadline=None)
@given(
    times=st.lists(moments, min_size=1, max_size=40),
    lags=st.lists(st.one_of(st.none(), st.integers(0, 20 * 24)), min_size=40, max_size=40),
    delay_days=st.integers(0, 5),
    requests=st.lists(st.integers(1, 40), min_size=1, max_size=25),
)
def test_increments_count_each_prediction_exactly_once(times, lags, delay_days, requests):
    """Runs requested in any order, with repeats (re-runs) and backfills (replay_plan): over the
    stored runs, each decision is consumed exactly once, each matured outcome exactly once
    (labelled or reported unlabelled), and a re-run consumes the same rows."""
    delay = pd.Timedelta(days=delay_days)
    n = len(times)
    predicted = pd.Series(times)
    lag = [None if g is None else pd.Timedelta(hours=g) for g in lags[:n]]
    labelled = np.array([g is not None for g in lag])
    arrival = pd.Series([pd.NaT if g is None else t + g for t, g in zip(times, lag, strict=True)])
    stored: dict = {}
    for day in requests:
        for as_of in replay_plan(list(stored), T0 + day * DAY):
            previous = previous_as_of(list(stored), as_of)
            stored[as_of] = increment_masks(predicted, labelled, previous, as_of, delay, arrival)
    runs = sorted(stored)
    last = runs[-1]
    decisions = sum(stored[r].decisions.astype(int) for r in runs)
    outcomes = sum(stored[r].outcomes.astype(int) + stored[r].unlabelled.astype(int) for r in runs)
    assert (decisions == (predicted <= last).to_numpy()).all()
    assert (outcomes == (predicted + delay <= last).to_numpy()).all()
    for r in runs:  # re-run: same rows, whenever it runs (labels count by labelled_at <= as_of)
        again = increment_masks(predicted, labelled, previous_as_of(runs, r), r, delay, arrival)
        assert (again.outcomes == stored[r].outcomes).all()
        assert (again.decisions == stored[r].decisions).all()
        assert not (stored[r].outcomes & stored[r].unlabelled).any()
    assert replay_plan(runs, runs[0]) == []


@settings(max_examples=60, deadline=None)
@given(
    times=st.lists(moments, min_size=1, max_size=40),
    previous=st.one_of(st.none(), moments),
    hours=st.integers(1, 10 * 24),
    delay_hours=st.integers(0, 5 * 24),
)
def test_increment_windows_hold_the_rows_of_increment_masks(times, previous, hours, delay_hours):
    """A prediction lies in the (start, end] window of the decisions (of the outcomes) that
    increment_windows gives exactly when increment_masks counts its decision (its matured
    outcome), boundaries included: the windows a monitored run scans are the masks' rule."""
    as_of = (previous if previous is not None else T0) + pd.Timedelta(hours=hours)
    delay = pd.Timedelta(hours=delay_hours)
    predicted = pd.Series(times)
    masks = increment_masks(predicted, np.ones(len(times), bool), previous, as_of, delay)
    windows = increment_windows(
        None if previous is None else previous.to_pydatetime(),
        as_of.to_pydatetime(),
        delay.to_pytimedelta(),
    )

    def inside(window) -> np.ndarray:
        start, end = window
        after = np.ones(len(times), bool) if start is None else (predicted > start).to_numpy()
        return after & (predicted <= end).to_numpy()

    assert (inside(windows.decisions) == masks.decisions).all()
    assert (inside(windows.outcomes) == (masks.outcomes | masks.unlabelled)).all()


def test_replay_increments_match_increment_masks():
    """The one-pass replay assigns each row to the run increment_masks gives it."""
    frame = _predictions(1, days=20)
    schedule = as_of_schedule(frame["predicted_at"], "1D", "3D")
    decision, outcome, labelled = replay_increments(
        frame, schedule, label_delay="3D", label_time_column="labelled_at"
    )
    previous = None
    for j, as_of in enumerate(schedule):
        masks = increment_masks(
            frame["predicted_at"],
            frame["y_true"].notna(),
            previous,
            as_of,
            "3D",
            frame["labelled_at"],
        )
        assert (masks.decisions == (decision == j)).all()
        assert (masks.outcomes == ((outcome == j) & labelled)).all()
        assert (masks.unlabelled == ((outcome == j) & ~labelled)).all()
        previous = as_of


def test_named_pairs_follow_comparison_pairs():
    """Named-reference comparisons of the one-pass counts equal tasks.counts.comparison_pairs."""
    frame = _predictions(2, days=3).dropna(subset=["y_true"])
    counts = increment_counts(
        frame, frame, attributes=["race", "sex"], reference_groups={"race": "b"}, metrics=["tpr"]
    )
    mine = counts[counts["reference"] == "b"].sort_values("group_name")
    group, reference = comparison_pairs(group_counts(frame, ["race", "sex"], []), {"race": "b"})
    named = group["reference"] == "b"
    expected_n = (group["tp"] + group["fn"])[named].to_numpy()
    assert mine["denominator_group"].tolist() == expected_n.tolist()
    assert mine["numerator_reference"].tolist() == reference["tp"][named].tolist()
    assert callable(_named_pairs)


def test_selection_rates_use_every_decision_and_error_rates_labelled_rows():
    """ppr counts every prediction of the period (labelled or not); tpr only labelled outcomes;
    checked against a direct pandas computation."""
    frame = _predictions(3, days=2)
    counts = increment_counts(frame, frame, attributes=["race"], metrics=["ppr", "tpr"]).set_index(
        ["group_name", "metric"]
    )
    for name, rows in frame.groupby("race"):
        rest = frame[frame["race"] != name]
        assert counts.loc[(name, "ppr"), "denominator_group"] == len(rows)
        assert counts.loc[(name, "ppr"), "numerator_reference"] == rest["y_pred"].sum()
        positives = rows[rows["y_true"] == 1]
        assert counts.loc[(name, "tpr"), "denominator_group"] == len(positives)
        assert counts.loc[(name, "tpr"), "numerator_group"] == positives["y_pred"].sum()
        assert counts.loc[(name, "tpr"), "unlabelled_group"] == rows["y_true"].isna().sum()


@pytest.mark.parametrize("label_delay", ["0D", "4D"])
@pytest.mark.parametrize("third_sex", [False, True])
def test_monitor_frame_equals_nightly_runs(label_delay, third_sex):
    """monitor_frame gives the same e-values, CS and alarms as nightly runs, each consuming its
    increment (increment_masks) and updating the previous run's state (monitor_update); also
    when a third sex appears on day 20 and m vs rest, a mirror until then, joins the family."""
    frame = _predictions(4)
    if third_sex:
        late = (frame["predicted_at"] >= T0 + 20 * DAY) & (np.arange(len(frame)) % 10 == 0)
        frame.loc[late, "sex"] = "x"
    options = {
        "attributes": ["race", "sex"],
        "intersections": [["race", "sex"]],
        "reference_groups": {"race": "a"},
        "metrics": ["ppr", "tpr", "fpr"],
    }
    replay = monitor_frame(
        frame,
        label_delay=label_delay,
        label_time_column="labelled_at",
        tolerance=0.0,
        **options,
    )
    schedule = as_of_schedule(frame["predicted_at"], "1D", label_delay)
    state, previous, nightly = empty_state(), None, []
    for as_of in schedule:
        masks = increment_masks(
            frame["predicted_at"],
            frame["y_true"].notna(),
            previous,
            as_of,
            label_delay,
            frame["labelled_at"],
        )
        matured = masks.outcomes | masks.unlabelled
        outcomes = frame[matured].assign(y_true=frame["y_true"].where(masks.outcomes)[matured])
        increment = increment_counts(frame[masks.decisions], outcomes, **options)
        state, rows = monitor_update(state, increment, Settings(tolerance=0.0))
        nightly.append(rows.assign(as_of=as_of))
        previous = as_of
    nightly = pd.concat(nightly, ignore_index=True)
    keys = ["as_of", "attribute", "group_name", "reference", "metric"]
    a = replay.sort_values(keys).reset_index(drop=True)
    b = nightly[a.columns].sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b, check_dtype=False)
    assert a["alarm"].any()  # group c's selection rate differs: the monitor finds it


def test_two_valued_attribute_is_one_comparison():
    """Of a two-valued attribute, f vs rest and m vs rest are one hypothesis: m's mirrors f's
    e-process and stays out of the e-BH family (it never alarms)."""
    frame = _predictions(5, days=2)
    frame.loc[frame["sex"] == "f", "y_pred"] = 1  # a huge disparity: f's comparison alarms
    state = empty_state()
    for _ in range(3):  # the first bet is 0 (no past): three nights of the same counts
        counts = increment_counts(frame, frame, attributes=["race", "sex"], metrics=["ppr"])
        state, rows = monitor_update(state, counts, Settings(tolerance=0.0))
    sexes = rows[rows["attribute"] == "sex"].set_index("group_name")
    assert sexes.loc["f", "e_process"] == pytest.approx(sexes.loc["m", "e_process"])
    assert sexes.loc["f", "alarm"] and not sexes.loc["m", "alarm"]
    race = rows[rows["attribute"] == "race"]
    assert len(race) == 3  # three groups: three different hypotheses


def test_a_mirror_enters_the_family_at_its_entry_wealth():
    """When a two-valued attribute gains a third group, m vs rest stops mirroring f vs rest and
    joins the e-BH family: at min(1, S) of last night's family (tasks.monitor.family_entry), not
    at its twin's wealth, which would raise S by the joining alone."""
    frame = _predictions(5, days=2)
    frame.loc[frame["sex"] == "f", "y_pred"] = 1  # f's e-process (and m's, its mirror) grows
    state = empty_state()
    options = {"attributes": ["race", "sex"], "metrics": ["ppr"]}
    for _ in range(3):
        state, rows = monitor_update(state, increment_counts(frame, frame, **options), SETTINGS)
    before = rows.set_index(["attribute", "group_name"])
    twin = before.loc[("sex", "m"), "e_process"]
    family = rows[~((rows["attribute"] == "sex") & (rows["group_name"] == "m"))]
    weights = state.set_index(["attribute", "group_name"]).loc[
        list(zip(family["attribute"], family["group_name"], strict=True)), "ebh_weight"
    ]
    mean = float(np.sum(weights.to_numpy() * family["e_process"].to_numpy()) / weights.sum())
    assert twin > 1e3 and mean < twin  # the mirror's wealth is far above the family's mean
    third = frame.head(300).assign(sex="x")
    night = pd.concat([frame, third], ignore_index=True)
    state, rows = monitor_update(state, increment_counts(night, night, **options), SETTINGS)
    after = rows.set_index(["attribute", "group_name"])
    m = after.loc[("sex", "m")]
    assert m["e_process"] / m["e_value"] == pytest.approx(min(1.0, mean), rel=1e-9)
    f = after.loc[("sex", "f")]
    assert f["e_process"] / f["e_value"] == pytest.approx(before.loc[("sex", "f"), "e_process"])


def test_lone_group_has_no_comparison():
    """An increment in which an attribute has one group only adds no comparison against an
    empty rest (it would only enlarge the e-BH family)."""
    frame = _predictions(6, days=1)
    males = frame[frame["sex"] == "m"]
    counts = increment_counts(males, males, attributes=["sex"], metrics=["ppr"])
    assert counts.empty


def test_selection_rates_count_every_decision_with_the_audits_catalogue():
    """It monitors PPR with the metric catalogue the audit uses (unlabelled decisions included)."""
    import biasaudit

    rng = np.random.default_rng(5)
    n = 4000
    frame = pd.DataFrame(
        {
            "predicted_at": pd.Timestamp("2026-01-01", tz="UTC")
            + pd.to_timedelta(rng.integers(0, 20, n), unit="D"),
            "y_true": np.where(rng.random(n) < 0.5, np.nan, rng.integers(0, 2, n)),
            "y_pred": rng.integers(0, 2, n),
            "g": rng.choice(["a", "b"], n),
        }
    )
    nights = biasaudit.monitor_frame(frame, attributes=["g"], metrics=["ppr"])
    ppr = nights[(nights["metric"] == "ppr") & (nights["group_name"] == "a")]
    assert ppr["denominator_group"].sum() == (frame["g"] == "a").sum()  # every decision, labelled or not
