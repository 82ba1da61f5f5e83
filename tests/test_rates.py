"""What gets tested: one hypothesis, one test."""

import numpy as np
import pandas as pd

from biasaudit.tasks.counts import comparison_pairs, group_counts
from biasaudit.tasks.detection import detect
from biasaudit.tasks.rates import comparison_rates


def three_groups(seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = 3000
    return pd.DataFrame(
        {
            "y_true": rng.integers(0, 2, n).astype(float),
            "y_pred": rng.integers(0, 2, n),
            "g": rng.choice(["a", "b", "c"], n),
        }
    )


def test_a_complementary_rate_is_not_tested_twice():
    """It tests fnr (= 1 − tpr) and tnr (= 1 − fpr) only through tpr and fpr, keeps their rates,
    and so BH counts each disparity once."""
    counts = group_counts(three_groups(), ["g"], [])
    pairs = comparison_pairs(counts, {})
    both = comparison_rates(*pairs, ["tpr", "fnr", "tnr", "fpr"])
    reasons = both.set_index(["group_name", "metric"])["reason"]
    assert reasons.xs("fnr", level="metric").eq("same test as tpr (= 1 − tpr)").all()
    assert reasons.xs("tnr", level="metric").isna().all()  # listed before fpr: tnr is tested
    assert reasons.xs("fpr", level="metric").eq("same test as tnr (= 1 − tnr)").all()
    result = detect(both, tolerance=0.0, alpha=0.05)
    tested = result[result["p_value"].notna()]
    assert set(tested["metric"]) == {"tpr", "tnr"} and len(tested) == 6
    alone = detect(comparison_rates(*pairs, ["tpr", "tnr"]), tolerance=0.0, alpha=0.05)
    np.testing.assert_allclose(tested["p_adjusted"].to_numpy(), alone["p_adjusted"].to_numpy())
    fnr = result[result["metric"] == "fnr"]
    assert fnr["difference"].notna().all()  # the rate and its interval are still reported
