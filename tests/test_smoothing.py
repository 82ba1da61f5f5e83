"""Cross-Prior Smoothing and additive smoothing (Briscoe et al., section 6)."""

import numpy as np
import pandas as pd
import pytest

from biasaudit.tasks.smoothing import additive_smoothing, cross_prior_smoothing

CELLS = ["tp", "fp", "fn", "tn"]


def partition():
    return pd.DataFrame(
        {
            "group_name": ["a", "b", "c"],
            "tp": [3, 40, 0],
            "fp": [1, 10, 2],
            "fn": [0, 20, 1],
            "tn": [4, 30, 2],
        }
    )


def test_cps_matches_the_algorithm_written_out():
    """It blends each group with λ pseudo-counts from the rest of the partition and keeps n."""
    counts, lam = partition(), 5.0
    smoothed = cross_prior_smoothing(counts, lam)
    cells = counts[CELLS].to_numpy(float)
    for i in range(len(counts)):
        ref = cells.sum(axis=0) - cells[i]
        n = cells[i].sum()
        expected = n * (cells[i] + lam * ref / ref.sum()) / (n + lam)
        assert smoothed.loc[i, CELLS].to_numpy(float) == pytest.approx(expected)
    assert smoothed[CELLS].sum(axis=1).to_numpy() == pytest.approx(cells.sum(axis=1))
    assert list(smoothed["group_name"]) == ["a", "b", "c"]


def test_cps_per_attribute_and_edge_cases():
    """It smooths each attribute separately; λ = 0 and a lone group leave counts unchanged."""
    counts = pd.concat(
        [partition().assign(attribute="x"), partition().iloc[:1].assign(attribute="y")]
    )
    smoothed = cross_prior_smoothing(counts.reset_index(drop=True), 5.0)
    assert smoothed[CELLS].iloc[:3].to_numpy() == pytest.approx(
        cross_prior_smoothing(partition())[CELLS].to_numpy()
    )
    assert smoothed[CELLS].iloc[3].to_numpy() == pytest.approx(
        partition()[CELLS].iloc[0].to_numpy()
    )
    assert cross_prior_smoothing(partition(), 0.0)[CELLS].to_numpy() == pytest.approx(
        partition()[CELLS].to_numpy()
    )
    with pytest.raises(ValueError):
        cross_prior_smoothing(partition(), -1)


def test_cps_bias_and_variance_follow_theorem_6_1():
    """It has per-cell bias λ(q − p)/(n + λ) and variance n·p(1 − p)/(n + λ)², by simulation."""
    rng = np.random.default_rng(3)
    p, q, n, lam, draws = (
        np.array([0.2, 0.1, 0.3, 0.4]),
        np.array([0.1, 0.2, 0.2, 0.5]),
        12,
        5.0,
        200_000,
    )
    groups = rng.multinomial(n, p, size=draws)
    reference = np.round(q * 1_000_000).astype(int)
    # Each draw is a partition of two: the group and a large reference with proportions q.
    frame = pd.concat(
        [
            pd.DataFrame(groups, columns=CELLS).assign(attribute=np.arange(draws)),
            pd.DataFrame(np.tile(reference, (draws, 1)), columns=CELLS).assign(
                attribute=np.arange(draws)
            ),
        ],
        ignore_index=True,
    )
    smoothed = cross_prior_smoothing(frame, lam).iloc[:draws][CELLS].to_numpy() / n
    bias = smoothed.mean(axis=0) - p
    variance = smoothed.var(axis=0)
    assert bias == pytest.approx(lam * (q - p) / (n + lam), abs=5 * np.sqrt(variance / draws).max())
    assert variance == pytest.approx(n * p * (1 - p) / (n + lam) ** 2, rel=0.02)


def test_additive_smoothing():
    """It adds α to every cell."""
    smoothed = additive_smoothing(partition(), 1.0)
    assert (smoothed[CELLS].to_numpy() == partition()[CELLS].to_numpy() + 1).all()
    with pytest.raises(ValueError):
        additive_smoothing(partition(), -0.5)


def test_additive_smoothing_of_an_empty_group_is_undefined():
    """It leaves every additively smoothed metric of an empty group undefined, with the reason,
    instead of reporting the prior (add-one would give TPR 0.5 with no data)."""
    import numpy as np

    from biasaudit.tasks.core import smoothed_metrics
    from biasaudit.tasks.smoothing import EMPTY_GROUP

    groups = pd.DataFrame(
        {
            "attribute": "a",
            "group_name": ["x", "y"],
            "tp": [0, 5],
            "fp": [0, 3],
            "fn": [0, 2],
            "tn": [0, 10],
        }
    )
    out = smoothed_metrics(groups, ["tpr", "ppr", "acc"], cps_lambda=5.0, additive_pseudocount=1.0)
    empty = out[(out["estimator"] == "additive") & (out["group_name"] == "x")]
    assert len(empty) == 3 and empty["value"].isna().all()
    assert (empty["undefined_reason"] == EMPTY_GROUP).all()
    other = out[(out["estimator"] == "additive") & (out["group_name"] == "y")]
    assert np.allclose(other.set_index("metric")["value"]["tpr"], 6 / 9)
