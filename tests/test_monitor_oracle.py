"""The likelihood-ratio oracle of benchmarks/monitor_oracle.py: its null point is the closest in
Kullback-Leibler divergence, and its ratio is an e-value for every null |p_g − p_r| ≤ tol."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, stats

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "monitor_oracle.py"
_SPEC = importlib.util.spec_from_file_location("monitor_oracle", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
oracle = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(oracle)
TOL = 0.05


def _divergence(b, n_g, n_r, p_g, p_r):
    a = b - TOL
    return n_g * stats.entropy([p_g, 1 - p_g], [a, 1 - a]) + n_r * stats.entropy(
        [p_r, 1 - p_r], [b, 1 - b]
    )


@pytest.mark.parametrize(("n_g", "n_r"), [(4, 77), (1, 3), (20, 380), (50, 50)])
def test_closest_null_point_minimises_the_divergence(n_g, n_r):
    found = oracle.closest_null(np.array(float(n_g)), np.array(float(n_r)), 0.7, 0.8)
    best = optimize.minimize_scalar(
        _divergence,
        bounds=(TOL + 1e-9, 1 - 1e-9),
        args=(n_g, n_r, 0.7, 0.8),
        method="bounded",
        options={"xatol": 1e-10},
    )
    assert found == pytest.approx(best.x, abs=1e-6)


@pytest.mark.parametrize(("n_g", "n_r"), [(4, 77), (2, 10), (20, 380)])
def test_ratio_has_mean_at_most_one_under_the_null(n_g, n_r):
    """Exact expectation over both binomials, on the boundary p_r − p_g = tol and inside it."""
    b = oracle.closest_null(np.array(float(n_g)), np.array(float(n_r)), 0.7, 0.8)
    x_g, x_r = np.meshgrid(np.arange(n_g + 1), np.arange(n_r + 1), indexing="ij")
    ratio = np.exp(oracle.log_ratio(x_g, n_g, x_r, n_r, (0.7, 0.8), (b - TOL, b)))
    for p_r in np.linspace(0.06, 0.99, 32):
        for gap in (TOL, 0.0, -0.2):
            p_g = p_r - gap
            if not 0 < p_g < 1:
                continue
            weight = stats.binom.pmf(x_g, n_g, p_g) * stats.binom.pmf(x_r, n_r, p_r)
            assert (weight * ratio).sum() <= 1 + 1e-9
