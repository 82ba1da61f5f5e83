"""tasks.multiplicity against scipy.stats and statsmodels."""

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from biasaudit.tasks.multiplicity import bh_adjust


@pytest.mark.parametrize("size", [1, 2, 7, 500, 20_000])
def test_bh_equals_scipy_and_statsmodels(size):
    rng = np.random.default_rng(size)
    p = np.concatenate([rng.random(size) ** 3, rng.choice([0.0, 1.0, 0.04], size // 3)])
    p[rng.random(p.size) < 0.3] = 0.01  # ties
    np.testing.assert_array_equal(bh_adjust(p), stats.false_discovery_control(p, method="bh"))
    np.testing.assert_allclose(bh_adjust(p), multipletests(p, method="fdr_bh")[1], rtol=1e-14)


def test_bh_keeps_the_tests_not_made():
    p = np.array([0.01, np.nan, 0.04, np.nan, 0.03])
    adjusted = bh_adjust(p)
    assert np.isnan(adjusted[[1, 3]]).all()
    np.testing.assert_array_equal(adjusted[[0, 2, 4]], stats.false_discovery_control(p[[0, 2, 4]]))
    assert np.isnan(bh_adjust(np.array([np.nan]))).all()
