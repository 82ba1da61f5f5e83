"""Compare stage: what changed since the previous version of the same audit, and is it real?

For every attribute, group and metric of two runs: both estimates, the change, and, for rate
metrics, the two-sample test of the two runs' counts (tasks.detection.unfairness_test with
U_tol = 0: the Agresti-Caffo test that the rate moved), with Benjamini-Hochberg adjusted p-values
across all the tests of the comparison; groups that appeared or vanished are listed as such.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE

from biasaudit.db.engine import make_engine
from biasaudit.tasks.detection import RATE_METRICS, bh_adjust, unfairness_test
from biasaudit.tasks.persist import database_task

KEYS = ["attribute", "group_name", "metric"]


def compare_metrics(before: pd.DataFrame, after: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Outer comparison of two runs' per-group metrics (columns KEYS, value, numerator,
    denominator); ``status`` is 'both', 'appeared' or 'vanished'."""
    columns = KEYS + ["value", "numerator", "denominator"]
    merged = before[columns].merge(
        after[columns], on=KEYS, how="outer", suffixes=("_before", "_after"), indicator=True
    )
    status = merged.pop("_merge").map(
        {"both": "both", "left_only": "vanished", "right_only": "appeared"}
    )
    testable = (
        (status == "both")
        & merged["metric"].isin(RATE_METRICS)
        & (merged["denominator_before"] > 0)
        & (merged["denominator_after"] > 0)
    ).to_numpy()
    p = np.full(len(merged), np.nan)
    if testable.any():
        _, p[testable] = unfairness_test(
            merged.loc[testable, "numerator_before"],
            merged.loc[testable, "denominator_before"],
            merged.loc[testable, "numerator_after"],
            merged.loc[testable, "denominator_after"],
        )
    adjusted = bh_adjust(p)
    return pd.DataFrame(
        {
            **{k: merged[k] for k in KEYS},
            "status": status.astype(str),
            "value_before": merged["value_before"],
            "value_after": merged["value_after"],
            "change": merged["value_after"] - merged["value_before"],
            "p_value": p,
            "p_adjusted": adjusted,
            "significant": testable & (adjusted < alpha),
        }
    )


@database_task
def previous_metrics(
    db_url: str, audit_name: str, model_id: str
) -> tuple[int | None, pd.DataFrame]:
    """Prefect task: the latest succeeded run of the audit and its per-group raw metrics."""
    from biasaudit.db.history import latest_run_id, run_metrics

    engine = make_engine(db_url)
    try:
        run_id = latest_run_id(engine, audit_name, model_id)
        if run_id is None:
            return None, pd.DataFrame()
        return run_id, run_metrics(engine, run_id)
    finally:
        engine.dispose()


@task(name="compare", cache_policy=NO_CACHE)
def compare_stage(
    previous: tuple[int | None, pd.DataFrame], metrics: pd.DataFrame, alpha: float
) -> pd.DataFrame:
    """Prefect task: compare this run's group metrics with the previous version's."""
    previous_run_id, before = previous
    if previous_run_id is None:
        return pd.DataFrame()
    after = metrics[metrics["subset"] == "group"]
    return compare_metrics(before, after, alpha).assign(previous_run_id=previous_run_id)
