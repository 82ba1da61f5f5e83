"""Power and false alarms of the nightly monitor: a fast version of benchmarks/monitor_power.py
(365 nights, 24 comparisons, tolerance 0.05, α = 0.05; 100 simulated years per case)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from biasaudit.tasks.monitor import log_e_value

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "monitor_power.py"
_SPEC = importlib.util.spec_from_file_location("monitor_power", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)
REPLAYS = 100


@pytest.mark.slow
@pytest.mark.parametrize("case", ["stationary", "drifting", "delayed"])
def test_fair_years_alarm_at_most_alpha(case):
    """At 300 a night (the noisiest bets): alarms in at most 12 of 100 fair years, a count
    Binomial(100, 0.05) exceeds with probability 0.002."""
    first = bench.simulate(case, 300, REPLAYS, seed=11)["any"]
    assert (first >= 0).sum() <= stats.binom.isf(0.002, REPLAYS, bench.ALPHA)


@pytest.mark.slow
def test_a_tpr_drop_in_a_small_group_is_found_sooner():
    """The 5% group's TPR drops by 0.10 at night 180 (1,500 a night): median delay to its alarm
    at most 66 nights (the monitor whose bets followed a 7-night forgetting average and kept
    half of the wealth on each side took 74 on these years)."""
    first = bench.simulate("change", 1500, REPLAYS, seed=12)["alarm"]
    delay = np.where(first >= bench.CHANGE, first - bench.CHANGE, np.inf)
    assert ((first >= 0) & (first < bench.CHANGE)).sum() == 0
    assert np.quantile(delay, 0.5, method="inverted_cdf") <= 66


@pytest.mark.slow
def test_a_tpr_drop_is_found_within_the_year_at_300_a_night():
    """The same drop at 300 predictions a night (about 4 positives of the group a night): an
    alarm within the remaining 185 nights in at least 10 of 100 years (that monitor: 3)."""
    first = bench.simulate("change", 300, REPLAYS, seed=12)["alarm"]
    assert ((first >= 0) & (first < bench.CHANGE)).sum() == 0
    assert (first >= bench.CHANGE).sum() >= 10


def test_night_e_value_grows_at_nearly_the_exact_rate():
    """On a night of 20 group positives at TPR 0.7 against 380 reference ones at 0.8, the
    expected log e-value of H0−: U ≥ −0.05 at bet λ = 0.25 is at least 95% of k·E log(1 + λY),
    Y = p_r − X − tol, X ~ Bernoulli(0.7): the exact growth with the reference's rate known."""
    lam, tol, n_g, n_r, p_g, p_r = 0.25, 0.05, 20, 380, 0.7, 0.8
    x_g, x_r = np.meshgrid(np.arange(n_g + 1), np.arange(n_r + 1), indexing="ij")
    weight = stats.binom.pmf(x_g, n_g, p_g) * stats.binom.pmf(x_r, n_r, p_r)
    growth = (weight * log_e_value(x_g, n_g, x_r, n_r, lam, tol, -1)).sum()
    exact = n_g * (p_g * np.log1p(lam * (p_r - 1 - tol)) + (1 - p_g) * np.log1p(lam * (p_r - tol)))
    assert growth >= 0.95 * exact
