"""The audit core passes the configured MATCH reference ratio and min_group_size to MATCH."""

import numpy as np
import pandas as pd

from biasaudit.schemas.config import audit_from_options
from biasaudit.tasks.core import audit_counts
from biasaudit.tasks.counts import group_counts


def test_core_applies_match_reference_ratio_and_min_group_size():
    """It runs MATCH only where the reference is match_reference_ratio times the group, and
    leaves groups below min_group_size untested, with the reasons."""
    rng = np.random.default_rng(3)
    n = 3000
    frame = pd.DataFrame(
        {
            "g": rng.choice(["big", "mid", "tiny"], n, p=[0.9, 0.095, 0.005]),
            "y_true": rng.integers(0, 2, n).astype(float),
            "y_pred": rng.integers(0, 2, n),
        }
    )
    audit = audit_from_options(
        attributes=["g"],
        metrics=["ppr"],
        min_group_size=20,
        match_reference_ratio=5.0,
        bootstrap_replicates=100,
    )
    result = audit_counts(group_counts(frame, ["g"], []), audit)
    match = result.match.set_index("group_name")
    assert np.isfinite(match.loc["mid", "p_value"])  # ~285 vs ~2715: ratio > 5
    assert "not known well enough" in match.loc["big", "reason"]
    assert "min_group_size 20" in match.loc["tiny", "reason"]
    detection = result.detection.set_index("group_name")
    assert "min_group_size 20" in detection.loc["tiny", "reason"]
