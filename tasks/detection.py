"""Detection stage: is a group's disparity real, in which direction, and how sure are we?

Bayesian rate difference ("How to detect algorithmic bias in production"): with x_i outcomes among
n_i in group i and a uniform prior, e_i ~ Beta(x_i + 1, n_i − x_i + 1), independent, and
T = e2 − e1 (group 2 minus group 1). Three decision rules from the blog:

- simple rule: bias toward group 2 when μ − zσ > t, toward group 1 when μ + zσ < −t; here with
  T's exact posterior tails in place of their normal approximation: toward group 2 when
  P(T ≤ t) < (1 − c)/2, the equal-tailed interval of mass c above t (the normal tails at
  z_{1−α/(2m)} fired in 0.11 of fair audits of 30 groups at t = 0; the exact ones: see
  docs/statistics.md);
- probability of deviation p = P(T > t) + P(T < −t), flagged when p > c (algorithm 2), computed
  by numerical integration of the density (the blog's closed-form CDF has a sign slip: it gives
  P(e1 − e2 ≤ t), not P(T > t));
- HDI + ROPE: the narrowest interval holding mass c of T's density against ROPE = [−t, t],
  decided as Kruschke does (entirely outside: biased; entirely inside: fair; else undecided). The
  blog's step 3 states the overlap test loosely; this three-way decision is the one implemented.

An audit makes m such decisions at once (every tested comparison and metric), so each is made at
the Bonferroni credibility c = 1 − α/m (and the simple rule at the same mass): the m intervals hold
their differences jointly with posterior probability at least 1 − α, and a fair model draws a
'biased' anywhere in the audit in at most about α of audits (0.040 ± 0.010 at most over 2-30
groups), where c = 1 − α on every row gave up to 0.81 at t = 0.05 and 0.17-1.00 at t = 0
(benchmarks/bayes_words.py). Only tested comparisons are decided: a group below
``min_group_size``, a zero denominator or a repeated hypothesis gets no word. At t = 0 the ROPE is the point 0: 'biased' when
the HDI excludes 0, never 'fair' (P(|T| > 0) is 1 there and decides nothing).

The frequentist test is the audit tutorial's ("A Brief Tutorial on Sample Size Calculations for
Fairness Audits", eqs. 1-3):
z = (Û − U_tol)/σ̂_U with σ̂²_U = M̂_1(1 − M̂_1)/d_1 + M̂_2(1 − M̂_2)/d_2 for rate metrics with
denominator counts d_g, with the Agresti-Caffo adjustment, tested in both directions at α/2 each:
Berger-Boos exact at every size (tasks.twosample: the supremum over a confidence set for the
nuisance rate, plus its error γ), so its size is at most α at every n. Benjamini-Hochberg across
all tested rows (tasks.multiplicity).

T's moments, density, CDF and P(|T| > t) are tasks.posterior's, its HDI tasks.hdi's: each computed
once per distinct table (a metric and its complement, e.g. tpr and fnr, have mirrored tables, whose
T is −T).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from biasaudit.schemas.results import COMPARISON_KEY
from biasaudit.tasks.hdi import hdi_difference
from biasaudit.tasks.multiplicity import bh_adjust
from biasaudit.tasks.posterior import beta_difference, deviation_tails
from biasaudit.tasks.twosample import two_sample_test


def simple_rule(above, below, mass: float) -> np.ndarray:
    """The blog's simple algorithm at credibility ``mass`` from T's exact tails above = P(T > t)
    and below = P(T < −t): +1 (bias toward group 2) where the equal-tailed interval lies above t,
    P(T > t) > 1 − (1 − mass)/2; −1 where it lies below −t; 0 otherwise. The blog's μ ± zσ is the
    normal approximation of that interval's ends."""
    edge = 1 - (1 - mass) / 2
    return np.where(above > edge, 1, np.where(below > edge, -1, 0))


def rope_decision(low, high, t) -> np.ndarray:
    """Kruschke's HDI + ROPE decision with ROPE = [−t, t]: 'biased', 'fair' or 'undecided'."""
    outside = (low > t) | (high < -t)
    inside = (low >= -t) & (high <= t)
    return np.where(outside, "biased", np.where(inside, "fair", "undecided"))


def decision_mass(alpha: float, decisions: int) -> float:
    """HDI mass of each of ``decisions`` simultaneous decisions: 1 − α/m (Bonferroni), so that all
    m intervals hold together with posterior probability at least 1 − α (1 − α when m <= 1)."""
    return 1 - alpha / max(decisions, 1)


class Decisions(NamedTuple):
    """One audit's Bayesian decisions (joint_decisions): every row's HDI, their common mass, the
    HDI + ROPE decision and the simple rule (None and 0 on rows not tested), and P(|T| > t) from
    the same tails as the simple rule."""

    low: np.ndarray
    high: np.ndarray
    mass: float
    decision: np.ndarray
    simple_rule: np.ndarray
    prob_deviation: np.ndarray


def joint_decisions(
    x_group, n_group, x_reference, n_reference, tested, *, tolerance: float, alpha: float
) -> Decisions:
    """The HDI + ROPE decision and the simple rule of one audit's rows, made jointly: every HDI
    at decision_mass(alpha, m) over the m ``tested`` rows, the simple rule at the same mass, and a
    decision on tested rows only."""
    mass = decision_mass(alpha, int(np.sum(tested)))
    counts = (x_group, n_group, x_reference, n_reference)
    low, high = hdi_difference(*counts, mass)
    above, below = deviation_tails(*counts, tolerance)
    return Decisions(
        low,
        high,
        mass,
        np.where(tested, rope_decision(low, high, tolerance), None),
        np.where(tested, simple_rule(above, below, mass), 0),
        np.clip(above + below, 0.0, 1.0),
    )


def unfairness_test(
    x_group, n_group, x_reference, n_reference, u_tol=0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Test of |U| > U_tol for U = M_group − M_reference of rates x/n: (z of the larger side,
    two-sided p).

    tasks.twosample.two_sample_test: the audit tutorial's statistic with the Agresti-Caffo
    adjustment, Berger-Boos exact at every size; size at most α at every n
    (tests/test_twosample.py, benchmarks/calibration.py).
    """
    z, p, _ = two_sample_test(x_group, n_group, x_reference, n_reference, u_tol)
    return z, p


def detect(
    rates: pd.DataFrame,
    *,
    tolerance: float,
    alpha: float,
) -> pd.DataFrame:
    """Every rate metric of every comparison (group 2) against its reference (group 1).

    ``rates`` are the comparisons' rate counts (tasks.rates.comparison_rates), computed once per
    audit and shared with planning.

    One row per comparison and metric: the rate's counts (``numerator_*``, ``denominator_*``;
    PPR and PNR over every valid prediction), the observed ``difference``, the posterior mean and
    sd of T = e_group − e_reference, direction, P(|T| > tolerance), the HDI of mass
    ``hdi_mass`` = 1 − alpha/m over the m tested rows (decision_mass) and its ROPE decision, the
    simple rule at the same mass, the z and p of the test of |U| > tolerance (``test``: 'exact'),
    and the Benjamini-Hochberg adjusted p across all tested rows (``flagged`` when it is below
    alpha). Rows not tested (a zero denominator, a group below ``min_group_size``, the repeat of a
    two-valued attribute's comparison or of a complement's) carry ``reason``, an HDI where both
    rates are defined, and no decision (``decision`` None, ``simple_rule`` 0).
    """
    x2, n2 = rates["numerator_group"].to_numpy(), rates["denominator_group"].to_numpy()
    x1, n1 = rates["numerator_reference"].to_numpy(), rates["denominator_reference"].to_numpy()
    reason = rates["reason"].to_numpy(dtype=object)
    ok = pd.isna(reason)
    defined = (n1 > 0) & (n2 > 0)  # the Bayesian summaries need both denominators
    x1, n1, x2, n2 = (np.where(defined, v, 1.0) for v in (x1, n1, x2, n2))  # placeholders
    mean, var = beta_difference(x2, n2, x1, n1)
    sd = np.sqrt(var)
    decided = joint_decisions(x2, n2, x1, n1, ok, tolerance=tolerance, alpha=alpha)
    z = np.full(len(rates), np.nan)
    p = np.full(len(rates), np.nan)
    exact = np.zeros(len(rates), dtype=bool)
    if ok.any():
        z[ok], p[ok], exact[ok] = two_sample_test(x2[ok], n2[ok], x1[ok], n1[ok], tolerance)

    def shown(values):
        return np.where(defined, values, np.nan)

    adjusted = bh_adjust(p)
    with np.errstate(divide="ignore", invalid="ignore"):
        difference = shown(x2 / n2 - x1 / n1)
    return rates[COMPARISON_KEY].assign(
        numerator_group=shown(x2),
        denominator_group=shown(n2),
        numerator_reference=shown(x1),
        denominator_reference=shown(n1),
        difference=difference,
        mean=shown(mean),
        sd=shown(sd),
        direction=np.where(
            defined,
            np.where(difference > 0, "higher", np.where(difference < 0, "lower", "equal")),
            None,
        ),
        prob_deviation=shown(decided.prob_deviation),
        hdi_low=shown(decided.low),
        hdi_high=shown(decided.high),
        hdi_mass=decided.mass,
        decision=decided.decision,
        simple_rule=decided.simple_rule,
        z=z,
        p_value=p,
        p_adjusted=adjusted,
        test=np.where(ok & exact, "exact", None),
        flagged=np.where(ok, adjusted < alpha, False),
        tolerance=tolerance,
        alpha=alpha,
        reason=reason,
    )
