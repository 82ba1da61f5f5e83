"""tasks.distributions against scipy.stats: the same values to the last bit, at the support's
edges too, and no import of scipy.stats on the audit's path."""

import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from biasaudit.tasks import distributions as d

RNG = np.random.default_rng(20261127)
N = np.concatenate([[0, 1, 2, 5, 10, 100], RNG.integers(1, 500_000, 3_000)]).astype("float64")
P = np.concatenate([[0.0, 1.0, 0.5, 1e-9, 1 - 1e-9, 0.3], RNG.random(3_000)])
Q = np.concatenate([[0.0, 1.0, 1e-13, 1 - 1e-13, 2.5e-10, 0.5], 10 ** (-RNG.random(3_000) * 14)])


def same(ours, theirs) -> None:
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


@pytest.mark.parametrize("shift", [-2.0, -1.0, -0.5, 0.0, 0.5, 1.0])
def test_binomial_equals_scipy_stats(shift):
    """pmf, CDF and survival at counts inside, at the ends of and outside 0..n, and at halves."""
    fraction = np.concatenate([[0.0, 1.0, 0.0, 1.0, 0.5, 0.2], RNG.random(3_000)])
    k = np.floor(fraction * N) + shift * np.where(fraction > 0.5, -1, 1) * (shift != 0)
    k = np.concatenate([k, N, N + 1, -np.ones(3)])
    n, p = np.concatenate([N, N, N, [4.0, 0, 7]]), np.concatenate([P, P, P, [0.2, 0.5, 1.0]])
    same(d.binom_pmf(k, n, p), stats.binom.pmf(k, n, p))
    same(d.binom_cdf(k, n, p), stats.binom.cdf(k, n, p))
    same(d.binom_sf(k, n, p), stats.binom.sf(k, n, p))


def test_binomial_quantile_equals_scipy_stats():
    for q in (Q, 1 - Q):
        same(d.binom_ppf(q, N, P), stats.binom.ppf(q, N, P))
    same(d.binom_ppf(0.5, 10, 0.3), stats.binom.ppf(0.5, 10, 0.3))


def test_hypergeometric_equals_scipy_stats():
    total = RNG.integers(1, 5_000, 3_000)
    successes = (RNG.random(3_000) * (total + 1)).astype(int)
    draws = (RNG.random(3_000) * (total + 1)).astype(int)
    for k in (
        (RNG.random(3_000) * (draws + 1)).astype(int),
        np.maximum(draws - (total - successes), 0) - 1,
        np.minimum(successes, draws) + 1,
        np.minimum(successes, draws),
    ):
        law = stats.hypergeom(total, successes, draws)
        same(d.hypergeom_pmf(k, total, successes, draws), law.pmf(k))
        same(d.hypergeom_cdf(k, total, successes, draws), law.cdf(k))
        same(d.hypergeom_sf(k, total, successes, draws), law.sf(k))


def test_normal_and_beta_equal_scipy_stats():
    x = np.concatenate([[-np.inf, np.inf, 0.0, 40.0, -40.0], RNG.normal(size=3_000) * 6])
    same(d.norm_cdf(x), stats.norm.cdf(x))
    same(d.norm_sf(x), stats.norm.sf(x))
    same(d.norm_ppf(Q), stats.norm.ppf(Q))
    same(d.norm_isf(Q), stats.norm.isf(Q))
    a, b = RNG.random(Q.size) * 1_000 + 0.5, RNG.random(Q.size) * 1_000 + 0.5
    same(d.beta_ppf(Q, a, b), stats.beta.ppf(Q, a, b))
    same(d.beta_isf(Q, a, b), stats.beta.isf(Q, a, b))
    u = np.concatenate([[0.0, 1.0], RNG.random(Q.size - 2)])
    same(d.beta_cdf(u, a, b), stats.beta.cdf(u, a, b))


def test_an_audit_does_not_import_scipy_stats():
    """The reason for the module: scipy.stats adds about 0.4 s to every process's start."""
    code = (
        "import sys, numpy as np, pandas as pd\n"
        "from biasaudit import audit_frame\n"
        "rng = np.random.default_rng(0)\n"
        "frame = pd.DataFrame({'y_true': rng.integers(0, 2, 2000).astype(float),\n"
        "    'y_pred': rng.integers(0, 2, 2000), 'g': rng.choice(list('abc'), 2000)})\n"
        "audit_frame(frame, attributes=['g'])\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "False"
