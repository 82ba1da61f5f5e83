"""Audits of a score: discrimination, calibration within groups and the threshold sweep.

Every statistic here is computed from counts per (group, score value, label), never from rows, so
the scan can push the counting down into the database (schemas.score_bins): per distinct score
value in memory and stream modes, where the AUC is the score's own; pushed down, per cell of
1/SUBCELLS of a bin, where it is within half the share of (positive, negative) pairs that share a
cell. The calibration curves and the threshold sweep sum the counts into the window's bins: one
distinct score value where the score has few (COMPAS's deciles), else a decile bin of the window's
scores, identified by its lower edge ``score_bin``. The values of an attribute's groups are
counted alike, so a reference's counts are a sum of its groups' counts.

What the results can and cannot say together: when base rates differ between groups, a score
cannot be calibrated within groups and have equal false positive and false negative rates
across them (Kleinberg, Mullainathan & Raghavan 2016; Chouldechova 2017, eq. 2.6:
FPR = p/(1-p) * (1-PPV)/PPV * (1-FNR), with p the base rate). An audit shows which of these
properties hold; it cannot ask for all of them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import sparse, special

from biasaudit.schemas.results import validate_result
from biasaudit.schemas.score_bins import (  # noqa: F401 (the bins are the stages' too)
    SCORE_COUNT_COLUMNS,
    ScoreBins,
    bin_of,
    bins_of_scores,
    rebinned,
    score_counts,
    score_edges,
)
from biasaudit.tasks import distributions
from biasaudit.tasks.multiplicity import bh_adjust
from biasaudit.tasks.twosample import exact_interval_end

# Below this many positives or negatives the AUC's interval is Newcombe's score-type interval,
# not Wald's on DeLong's variance (from few placements, zero at perfect separation), and the test
# of equal AUC floors DeLong's variance by Hanley & McNeil's: benchmarks/results/score_coverage.md
# measures the coverage and size of both rules.
SMALL_SAMPLE = 50
# From this many positives and negatives on, the AUC's interval is Wald's on the logit scale with
# DeLong's variance; below, Newcombe's, where Wald's covers too little at high AUCs
# (benchmarks/results/score_coverage.md).
WALD_FROM = 1000


def auc_and_variance(positives: np.ndarray, negatives: np.ndarray):
    """AUC and DeLong's variance of each row of binned counts (bins ascending by score).

    AUC is the Mann-Whitney statistic with ties counted 1/2: the share of (positive, negative)
    pairs where the positive scores higher (Hanley & McNeil 1982, eq. 1). DeLong, DeLong &
    Clarke-Pearson (1988, eqs. 3-4): each positive's placement V10 (share of negatives below it,
    ties 1/2) and each negative's V01 (share of positives above it); var = S10/P + S01/Q with
    S10, S01 their sample variances. Rows in one bin share a placement, so both are exact sums
    over bins. NaN where a row has no positive or no negative."""
    pos = np.atleast_2d(np.asarray(positives, dtype="float64"))
    neg = np.atleast_2d(np.asarray(negatives, dtype="float64"))
    p, q = pos.sum(-1), neg.sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        v10 = (np.cumsum(neg, -1) - 0.5 * neg) / q[:, None]
        v01 = (p[:, None] - np.cumsum(pos, -1) + 0.5 * pos) / p[:, None]
        auc = (pos * v10).sum(-1) / p
        s10 = (pos * (v10 - auc[:, None]) ** 2).sum(-1) / (p - 1)
        s01 = (neg * (v01 - auc[:, None]) ** 2).sum(-1) / (q - 1)
        variance = np.where((p > 1) & (q > 1), s10 / p + s01 / q, np.nan)
    return auc, variance


def hanley_mcneil_variance(auc, positives, negatives, *, newcombe: bool = False):
    """Hanley & McNeil (1982, eq. 2): var = (A(1-A) + (P-1)(Q1-A^2) + (Q-1)(Q2-A^2)) / (P Q),
    Q1 = A/(2-A), Q2 = 2A^2/(1+A), here in the equal form A(1-A) (1 + (P-1)(1-A)/(2-A) +
    (Q-1)A/(1+A)) / (P Q); it depends on AUC and the sample sizes only. With ``newcombe``, P-1
    and Q-1 are both N*-1 = (P+Q)/2 - 1 (Newcombe 2006, Part 2, eq. for method 5)."""
    a, p, q = (np.asarray(v, dtype="float64") for v in (auc, positives, negatives))
    p_less, q_less = ((p + q) / 2 - 1,) * 2 if newcombe else (p - 1, q - 1)
    return a * (1 - a) * (1 + p_less * (1 - a) / (2 - a) + q_less * a / (1 + a)) / (p * q)


def newcombe_interval(auc, positives, negatives, confidence: float = 0.95):
    """Newcombe's (2006, Part 2, method 5) score-type interval: the θ in [0, 1] with
    (A - θ)^2 <= z^2 V(θ), V Newcombe's variance (:func:`hanley_mcneil_variance`) at θ itself, as
    Wilson's interval is for a proportion. Each end is found by bisection between A and 0 or 1,
    keeping the end inside the interval. It contains A by construction, and V(0) = V(1) = 0
    makes 1 its upper end when A = 1 and 0 its lower end when A = 0."""
    a, p, q = (np.asarray(v, dtype="float64") for v in (auc, positives, negatives))
    z = distributions.norm_ppf(0.5 + confidence / 2)

    def outside(theta, side):  # θ beyond the end on this side (-1 below A, +1 above)
        spread = z * np.sqrt(hanley_mcneil_variance(theta, p, q, newcombe=True))
        return side * (theta - a) > spread

    ends = []
    for side in (-1.0, 1.0):
        inside, beyond = a.copy(), np.full_like(a, (1 + side) / 2)
        for _ in range(60):  # halves a gap of at most 1 to below 1e-18
            middle = (inside + beyond) / 2
            out = outside(middle, side)
            inside, beyond = np.where(out, inside, middle), np.where(out, middle, beyond)
        ends.append(inside)
    return ends[0], ends[1]


def auc_interval(positives: np.ndarray, negatives: np.ndarray, confidence: float = 0.95):
    """AUC, DeLong's variance and a ``confidence`` interval of each row of binned counts.

    From WALD_FROM positives and negatives on, the interval is Wald's on the logit scale around
    the AUC with DeLong's variance (it stays in (0, 1) and is not symmetric near 1). Below, or
    where that interval does not exist (an AUC of 0 or 1, a variance of 0), it is Newcombe's
    score-type interval (:func:`newcombe_interval`), which exists at 0 and 1 and is not built on
    the few placements of a small group. Either contains the AUC."""
    pos = np.atleast_2d(np.asarray(positives, dtype="float64"))
    neg = np.atleast_2d(np.asarray(negatives, dtype="float64"))
    auc, variance = auc_and_variance(pos, neg)
    p, q = pos.sum(-1), neg.sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        half = distributions.norm_ppf(0.5 + confidence / 2) * np.sqrt(variance) / (auc * (1 - auc))
        centre = special.logit(auc)
        score_low, score_high = newcombe_interval(auc, p, q, confidence)
    wald = (np.minimum(p, q) >= WALD_FROM) & (half > 0) & np.isfinite(half)
    low = np.where(wald, special.expit(centre - half), score_low)
    high = np.where(wald, special.expit(centre + half), score_high)
    return auc, variance, low, high


def auc_difference_test(pos_a, neg_a, pos_b, neg_b) -> float:
    """Two-sided p-value of equal AUC in two disjoint samples (a group and its reference) of
    binned counts: :func:`independent_auc_test` on each side's AUC and DeLong variance."""
    sides = [np.asarray(v, dtype="float64") for v in (pos_a, neg_a, pos_b, neg_b)]
    (auc_a, auc_b), (var_a, var_b) = zip(
        *(auc_and_variance(p, q) for p, q in (sides[:2], sides[2:]))
    )
    p_value = independent_auc_test(
        (auc_a[0], var_a[0], sides[0].sum(), sides[1].sum()),
        (auc_b[0], var_b[0], sides[2].sum(), sides[3].sum()),
    )
    return float(p_value)


def independent_auc_test(side_a: tuple, side_b: tuple):
    """Two-sided p-value of equal AUC in two independent samples, each side given as (AUC, DeLong
    variance, positives, negatives), elementwise over arrays, from DeLong's variances without the
    covariance term (DeLong et al. 1988, eq. 5; the samples are independent).

    Where both sides have SMALL_SAMPLE positives and negatives, z compares the AUCs on the logit
    scale (delta method: var(logit A) = var(A) / (A(1 - A))^2), the scale of the AUC's interval:
    on the AUC's own scale the test rejected 0.053-0.056 at alpha = 0.05 (200 rows against 600-6,000,
    40,000 samples), on the logit scale 0.048-0.050. Otherwise z = (A_a - A_b) / sqrt(var_a +
    var_b) with each small side's variance at least Hanley & McNeil's at the AUC both share under
    the null (their pair-weighted mean): at its own AUC, a small group that happens to separate
    perfectly would have a variance near zero and reject too often. NaN where z is not finite."""
    (auc_a, var_a, p_a, q_a), (auc_b, var_b, p_b, q_b) = (
        [np.asarray(v, dtype="float64") for v in side] for side in (side_a, side_b)
    )
    pairs_a, pairs_b = p_a * q_a, p_b * q_b
    large = np.minimum(np.minimum(p_a, q_a), np.minimum(p_b, q_b)) >= SMALL_SAMPLE
    with np.errstate(divide="ignore", invalid="ignore"):
        logit_z = (special.logit(auc_a) - special.logit(auc_b)) / np.sqrt(
            var_a / (auc_a * (1 - auc_a)) ** 2 + var_b / (auc_b * (1 - auc_b)) ** 2
        )
        shared = (auc_a * pairs_a + auc_b * pairs_b) / (pairs_a + pairs_b)
        variances = [
            np.where(
                np.minimum(p, q) < SMALL_SAMPLE,
                np.fmax(variance, hanley_mcneil_variance(shared, p, q)),
                variance,
            )
            for variance, p, q in ((var_a, p_a, q_a), (var_b, p_b, q_b))
        ]
        z = (auc_a - auc_b) / np.sqrt(variances[0] + variances[1])
    z = np.where(large & np.isfinite(logit_z), logit_z, z)
    return np.where(np.isfinite(z), 2 * distributions.norm_sf(np.abs(z)), np.nan)


def clopper_pearson(successes, trials, confidence: float = 0.95):
    """Exact binomial interval (Clopper & Pearson 1934) at ``confidence``: beta quantiles, 0 and 1
    at the ends, NaN where there are no trials."""
    x, n = np.asarray(successes, dtype="float64"), np.asarray(trials, dtype="float64")
    tail = (1 - confidence) / 2
    low = exact_interval_end(x, n, tail, upper=False)
    high = exact_interval_end(x, n, tail, upper=True)
    empty = n == 0
    return np.where(empty, np.nan, low), np.where(empty, np.nan, high)


def logistic_fit(design, successes, trials, offset=None):
    """Binomial GLM with logit link on grouped counts, design ``(values, k)``: (coefficients,
    log-likelihood) of one fit (:func:`logistic_fits` with one row)."""
    off = None if offset is None else np.asarray(offset, dtype="float64")[None]
    beta, loglik = logistic_fits(
        np.asarray(design, dtype="float64").T[:, None],
        np.asarray(successes)[None],
        np.asarray(trials)[None],
        off,
    )
    return beta[0], float(loglik[0])


def logistic_fits(design, successes, trials, offset=None, start=None, iterations: int = 100):
    """Binomial GLMs with logit link, one per row of grouped counts (design ``(k, rows, values)``,
    successes and trials ``(rows, values)``), by Newton-Raphson (IRLS) from ``start`` (zero where
    not given): (coefficients, log-likelihoods). A row's last step is the one whose Newton
    decrement, the log-likelihood it gains to second order (g' H^-1 g / 2, Boyd & Vandenberghe
    2004, 9.5.1), is below 1e-10 of the log-likelihood; a step after which the log-likelihood
    fell by more than that is halved (up to 27 times). Where the data separate, the
    log-likelihood reached is a lower bound of its supremum."""
    x = np.asarray(design, dtype="float64")
    y, m = np.asarray(successes, dtype="float64"), np.asarray(trials, dtype="float64")
    off = np.zeros(y.shape) if offset is None else np.asarray(offset, dtype="float64")
    beta = np.zeros((len(y), len(x))) if start is None else np.array(start, dtype="float64")
    loglik = np.full(len(y), -np.inf)
    step, size = np.zeros_like(beta), np.ones(len(y))
    active = np.arange(len(y))
    for _ in range(iterations + 27):
        every = len(active) == len(y)
        part = (x, y, m, off) if every else (x[:, active], y[active], m[active], off[active])
        reached, gradient, hessian = _newton_terms(*part, beta[active])
        tolerance = 1e-10 * (1 + np.abs(reached))
        fell = (reached < loglik[active] - tolerance) & (size[active] > 1e-8)
        back = active[fell]  # half of the last step back, and evaluated there again
        size[back] /= 2
        beta[back] -= size[back, None] * step[back]
        keep = ~fell
        rows = active[keep]
        loglik[rows], size[rows] = reached[keep], 1.0
        step[rows] = (np.linalg.pinv(hessian[keep]) @ gradient[keep][..., None])[..., 0]
        beta[rows] += step[rows]
        decrement = np.einsum("rk,rk->r", gradient[keep], step[rows]) / 2
        # in row order: with every row active, the rows are read whole (``every``)
        active = np.sort(np.concatenate([back, rows[decrement >= tolerance[keep]]]))
        if not len(active):
            break
    return beta, loglik


def _newton_terms(x, y, m, offset, beta):
    """Each row's log-likelihood, gradient and information at ``beta`` in one pass (the
    design's covariates ``x[i]`` each a contiguous ``(rows, values)`` array)."""
    eta = offset + sum(beta[:, i, None] * x[i] for i in range(len(x)))
    small = np.exp(-np.abs(eta))  # e^-|eta|: log(1 + e^eta) and expit without overflow
    prob = np.where(eta >= 0, 1, small) / (1 + small)
    loglik = np.sum(y * eta - m * (np.maximum(eta, 0) + np.log1p(small)), -1)
    residual, weight = y - m * prob, m * prob * (1 - prob)
    gradient = np.stack([np.einsum("rv,rv->r", x[i], residual) for i in range(len(x))], -1)
    information = np.empty((len(y), len(x), len(x)))
    for i in range(len(x)):
        weighted = weight * x[i]
        for j in range(i, len(x)):
            information[:, i, j] = information[:, j, i] = np.einsum("rv,rv->r", weighted, x[j])
    return loglik, gradient, information


def _score_scale(mean_scores: np.ndarray, probability: bool) -> np.ndarray:
    """The recalibration's covariate: the score's logit for a probability, else the score."""
    if probability:
        return special.logit(np.clip(mean_scores, 1e-12, 1 - 1e-12))
    return mean_scores


def recalibration_fits(mean_scores, positives, negatives, probability: bool, start=None):
    """Cox (1958) logistic recalibration of each row's bins, logit P(y=1) = a + b x with x =
    logit(score): the fits ``(a, b)`` and, for a probability, ``a`` with ``b`` fixed at 1 (x as
    offset; NaN otherwise), each ``(rows, k)``, NaN where a row has no positive, no negative or
    fewer than two values with a label. ``start`` (one row's two fits, as returned) starts every
    row's Newton iterations there: a reference that is the rest of an attribute is fitted from
    the whole attribute's fit, a step or two away."""
    s, pos, neg = (
        np.atleast_2d(np.asarray(v, dtype="float64")) for v in (mean_scores, positives, negatives)
    )
    m = pos + neg
    x = np.where(m > 0, _score_scale(s, probability), 0.0)  # a value without labels adds nothing
    defined = (pos.sum(-1) > 0) & (neg.sum(-1) > 0) & ((m > 0).sum(-1) >= 2)
    both, large = np.full((len(m), 2), np.nan), np.full((len(m), 1), np.nan)
    rows = np.flatnonzero(defined)
    if len(rows):
        design = np.stack([np.ones_like(x[rows]), x[rows]])
        begin = (None, None) if start is None else [np.repeat(b, len(rows), 0) for b in start]
        both[rows] = logistic_fits(design, pos[rows], m[rows], start=begin[0])[0]
        if probability:
            large[rows] = logistic_fits(
                design[:1], pos[rows], m[rows], offset=x[rows], start=begin[1]
            )[0]
    return both, large


def recalibration(mean_scores, positives, negatives, probability: bool):
    """(calibration-in-the-large, calibration slope) of each row's bins (:func:`recalibration_fits`).

    The slope b is 1 for a calibrated probability (below 1: too extreme), and with b fixed at 1
    the intercept a, calibration-in-the-large, is 0. For a score that is not a probability
    (COMPAS's deciles) x is the score itself: b is its log-odds per unit of score and
    in-the-large is not defined (NaN)."""
    both, large = recalibration_fits(mean_scores, positives, negatives, probability)
    return large[:, 0], both[:, 1]


def equal_calibration_test(
    bins: np.ndarray, group: tuple, reference: tuple, probability: bool
) -> tuple[float, int, float]:
    """Test of equal calibration of a group and its reference: (statistic, df, p-value), for a
    score binned by value (each bin one score: within a bin a group and its reference share it,
    so equal rates there is equal calibration; in a wider bin, two calibrated groups whose scores
    lie differently inside it differ in rate, and the test would reject them).

    The model is the binomial GLM logit P(y=1) = bin_k + c g + d g x (x as in
    :func:`recalibration`, at the bin's pooled mean score): each bin has its own rate, so the
    curve's shape is free, and the null c = d = 0 says both share it. The test is the score
    (Rao) test of c and d conditional on each bin's totals, i.e. the generalised
    Cochran-Mantel-Haenszel statistic (Mantel 1963) with scores (1, x): U = sum_k z_k (y_gk -
    m_gk S_k / M_k), V = sum_k z_k z_k' m_gk m_rk S_k (M_k - S_k) / (M_k^2 (M_k - 1)), U' V^-1 U
    on rank(V) degrees of freedom. It needs no fit, and keeps its size where the likelihood ratio
    does not with small groups (benchmarks/results/score_coverage.md)."""
    g_pos, g_neg, g_sum = (np.asarray(v, dtype="float64") for v in group)
    r_pos, r_neg, r_sum = (np.asarray(v, dtype="float64") for v in reference)
    m_g, m_r = g_pos + g_neg, r_pos + r_neg
    total, successes = m_g + m_r, g_pos + r_pos
    informative = total > 1
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(total > 0, (g_sum + r_sum) / total, bins)
        x = _score_scale(mean, probability)
        x = x - np.average(x, weights=total) if total.sum() else x
        expected = np.where(total > 0, m_g * successes / total, 0.0)
        variance = np.where(
            informative,
            m_g * m_r * successes * (total - successes) / (total**2 * (total - 1)),
            0.0,
        )
    scores = np.column_stack([np.ones_like(x), x])
    u = scores.T @ (g_pos - expected)
    v = (scores * variance[:, None]).T @ scores
    df = int(np.linalg.matrix_rank(v))
    if df == 0:
        return np.nan, 0, np.nan
    statistic = float(u @ np.linalg.pinv(v) @ u)
    return statistic, df, float(distributions.chi2_sf(statistic, df))


# Below this many labelled rows the test of a group's own calibration takes its p-value from
# MONTE_CARLO draws of the outcomes its scores predict, not from the chi-squared limit.
MONTE_CARLO = 9999
_SEED = 20261201


def own_calibration_test(mean_scores, positives, negatives) -> tuple[float, int, float]:
    """Test that a group's outcomes follow its own scores: (statistic, df, p-value).

    Cox (1958) recalibration, logit P(y=1) = a + b logit(p), tested at a = 0, b = 1 (the score
    is the outcome's probability) by the score (Rao) test: U = sum (y - p) (1, l), with l =
    logit(p), information I = sum p (1 - p) (1, l)(1, l)', U' I^-1 U on rank(I) degrees of
    freedom (1 where the group has one score). Under the null each outcome is Bernoulli(p) given
    its score, whatever the scores' distribution, so the test keeps its size where the group's
    scores differ from its reference's. A count per value (or cell) of m rows with mean score p
    and y positives adds (y - m p)(1, l) to U and m p (1 - p)(1, l)(1, l)' to I; p is clipped to
    [1e-12, 1 - 1e-12], so an outcome at a score of 0 or 1 rejects. With fewer than
    SMALL_SAMPLE labelled rows the p-value is (1 + #{T* >= T}) / (B + 1) over B = MONTE_CARLO
    draws of y ~ Binomial(m, p) per value (exact in distribution for rows at one score), where
    the chi-squared limit is not yet reached (benchmarks/results/score_calibration.md)."""
    s, pos, neg = (np.asarray(v, dtype="float64") for v in (mean_scores, positives, negatives))
    m = pos + neg
    keep = m > 0
    s, pos, m = s[keep], pos[keep], m[keep]
    if not len(m):
        return np.nan, 0, np.nan
    p = np.clip(s, 1e-12, 1 - 1e-12)
    z = np.column_stack([np.ones_like(p), special.logit(p)])
    information = (z * (m * p * (1 - p))[:, None]).T @ z
    scale = np.sqrt(np.diag(information))
    normed = information / np.outer(scale, scale)
    df = int(np.linalg.matrix_rank(normed, tol=1e-9))
    inverse = np.linalg.pinv(normed, rcond=1e-9) / np.outer(scale, scale)

    def statistic(outcomes: np.ndarray) -> np.ndarray:
        u = (outcomes - m * p) @ z
        return np.einsum("...i,ij,...j->...", u, inverse, u)

    observed = float(statistic(pos))
    if m.sum() >= SMALL_SAMPLE:
        return observed, df, float(distributions.chi2_sf(observed, df))
    draws = np.random.default_rng(_SEED).binomial(m.astype("int64"), p, (MONTE_CARLO, len(m)))
    beyond = int((statistic(draws.astype("float64")) >= observed * (1 - 1e-12)).sum())
    return observed, df, (1 + beyond) / (MONTE_CARLO + 1)


_COUNTED = ["positives", "negatives", "unlabelled", "score_sum"]
# Sides are computed in blocks of rows of at most this many (side, value) cells (16 MB a count).
_BLOCK_CELLS = 2_000_000


def _matrices(counts: pd.DataFrame):
    """Per attribute: its groups, its score values (ascending) and each count as a groups x
    values matrix (scipy.sparse CSR: a continuous score has as many values as rows)."""
    for attribute, part in counts.groupby("attribute", sort=True):
        groups, g = np.unique(part["group_name"].astype(str).to_numpy(), return_inverse=True)
        values, v = np.unique(part["score_bin"].to_numpy(dtype="float64"), return_inverse=True)
        shape = (len(groups), len(values))
        yield (
            attribute,
            groups,
            values,
            {
                c: sparse.csr_matrix((part[c].to_numpy(dtype="float64"), (g, v)), shape=shape)
                for c in _COUNTED
            },
        )


def _mean_scores(score_sum: np.ndarray, labelled: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """Each bin's mean score (its lower edge where it holds no labelled row)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(labelled > 0, score_sum / labelled, bins)


def _own_values(block: dict[str, np.ndarray], values: np.ndarray):
    """Each row of a block on the values it holds only, in order, padded with zero counts at
    the end (every statistic of a side is unchanged by values without its rows): (counts, each
    row's values)."""
    present = block["positives"] + block["negatives"] + block["unlabelled"] > 0
    length = present.sum(1)
    rows, columns = np.nonzero(present)  # row by row, values ascending
    slot = np.arange(len(rows)) - np.repeat(np.cumsum(length) - length, length)
    shape = (len(length), max(1, int(length.max(initial=0))))
    packed = {c: np.zeros(shape) for c in block}
    for c, counted in block.items():
        packed[c][rows, slot] = counted[rows, columns]
    own = np.zeros(shape)
    own[rows, slot] = values[columns]
    return packed, own


def _sides(c: dict[str, np.ndarray], values, probability: bool, confidence: float, start=None):
    """Each row's side of a comparison (counts per value, a side a row; ``values`` the values'
    scores, shared or per row): its sizes, AUC with DeLong's variance and interval and its
    recalibration (from ``start``, as :func:`recalibration_fits`)."""
    labelled = c["positives"] + c["negatives"]
    auc, variance, low, high = auc_interval(c["positives"], c["negatives"], confidence)
    mean = _mean_scores(c["score_sum"], labelled, values)
    both, large = recalibration_fits(mean, c["positives"], c["negatives"], probability, start)
    return {
        "n": labelled.sum(-1) + c["unlabelled"].sum(-1),
        "positives": c["positives"].sum(-1),
        "negatives": c["negatives"].sum(-1),
        "auc": auc,
        "auc_variance": variance,
        "auc_low": low,
        "auc_high": high,
        "in_the_large": large[:, 0],
        "slope": both[:, 1],
    }


def _calibration_tests(c, other, values, probability: bool, by_value: bool):
    """(statistic, p-value) per row of a group's counts ``c`` against its reference's ``other``:
    the group's own calibration for a probability, equal calibration binned by value, else NaN."""
    tests = []
    for i in range(len(c["positives"])):
        mine = (c["positives"][i], c["negatives"][i])
        if probability:
            mean = _mean_scores(c["score_sum"][i], mine[0] + mine[1], values)
            statistic, _, p_value = own_calibration_test(mean, *mine)
        elif by_value:
            theirs = (other["positives"][i], other["negatives"][i], other["score_sum"][i])
            statistic, _, p_value = equal_calibration_test(
                values, (*mine, c["score_sum"][i]), theirs, probability
            )
        else:
            statistic, p_value = np.nan, np.nan
        tests.append((statistic, p_value))
    return np.array(tests, dtype="float64").reshape(-1, 2)


def _comparison_rows(attribute, groups, values, m, named, probability, by_value, confidence):
    """The comparisons of one attribute: each group against the rest of the attribute (all its
    other groups), then against the named reference group where there is one. The rest is the
    attribute's total less the group, its recalibration started at the total's fit; groups are
    taken in blocks of rows, dense over the attribute's values."""
    total = {c: np.asarray(v.sum(0), dtype="float64") for c, v in m.items()}
    labelled = total["positives"] + total["negatives"]
    mean = _mean_scores(total["score_sum"], labelled, values)
    start = recalibration_fits(mean, total["positives"], total["negatives"], probability)
    j = int(np.flatnonzero(groups == named)[0]) if named is not None and named in groups else None
    the_named = {c: v[[j]].toarray() for c, v in m.items()} if j is not None else None
    step = max(1, _BLOCK_CELLS // max(1, len(values)))
    parts: dict[str, list] = {"group": [], "rest": [], "rest_tests": [], "named_tests": []}
    for first in range(0, len(groups), step):
        block = {c: v[first : first + step].toarray() for c, v in m.items()}
        rest = {c: total[c] - block[c] for c in block}
        packed, own = _own_values(block, values)
        parts["group"].append(_sides(packed, own, probability, confidence))
        parts["rest"].append(_sides(rest, values, probability, confidence, start))
        parts["rest_tests"].append(_calibration_tests(block, rest, values, probability, by_value))
        if the_named is not None and not probability:  # a group's own test is the same twice
            against = {c: np.repeat(v, len(block[c]), 0) for c, v in the_named.items()}
            tests = _calibration_tests(block, against, values, probability, by_value)
            parts["named_tests"].append(tests)
    group, rest = (
        {k: np.concatenate([p[k] for p in parts[side]]) for k in parts[side][0]}
        for side in ("group", "rest")
    )
    rest_tests = np.concatenate(parts["rest_tests"])
    frames = [_pairs(attribute, groups, "rest", group, rest, rest_tests)]
    if j is not None:
        reference = {k: np.repeat(v[[j]], len(groups), 0) for k, v in group.items()}
        tests = rest_tests if probability else np.concatenate(parts["named_tests"])
        pairs = _pairs(attribute, groups, str(named), group, reference, tests)
        frames.append(pairs.loc[np.arange(len(groups)) != j])
    return frames


def _pairs(attribute, groups, reference_name, group, reference, tests) -> pd.DataFrame:
    """One comparison row per group: its side, its reference's side and the tests."""
    columns = {"attribute": attribute, "group_name": groups, "reference": reference_name}
    for side, stats in (("group", group), ("reference", reference)):
        columns |= {f"{k}_{side}": v for k, v in stats.items()}
    columns["auc_p_value"] = independent_auc_test(
        *(
            (stats["auc"], stats["auc_variance"], stats["positives"], stats["negatives"])
            for stats in (group, reference)
        )
    )
    columns["calibration_statistic"], columns["calibration_p_value"] = tests[:, 0], tests[:, 1]
    return pd.DataFrame(columns)


def score_comparisons(
    counts: pd.DataFrame,
    bins: ScoreBins,
    reference_groups: dict[str, str],
    *,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """One row per (attribute, group, reference): AUC with intervals (:func:`auc_interval`) and
    the test of equal AUC (:func:`independent_auc_test`), calibration-in-the-large and slope
    (:func:`recalibration`) of the group and of its reference (the rest of the attribute, and
    the named reference group where there is one), and the calibration test: for a probability,
    the group's own (:func:`own_calibration_test`, the same on each of its rows); for another
    score binned by value, equal calibration with its reference (:func:`equal_calibration_test`);
    none (NaN) for another score binned by quantiles, where no test from counts keeps its size.
    Each kind of p-value is adjusted by Benjamini-Hochberg across the audit's distinct tests."""
    probability, by_value = bins.probability, not bins.steps.any()
    frames = [
        frame
        for attribute, groups, values, m in _matrices(counts)
        for frame in _comparison_rows(
            attribute,
            groups,
            values,
            m,
            reference_groups.get(attribute),
            probability,
            by_value,
            confidence,
        )
    ]
    adjusted = ["auc_p_adjusted", "calibration_p_adjusted", "confidence"]
    columns = [c for c in SCORE_RESULT_COLUMNS if c not in adjusted]
    frame = (
        pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)
    )
    names = ["attribute", "group_name", "reference"]
    sizes = [c for c in columns if c.startswith(("n_", "positives_", "negatives_"))]
    floats = [c for c in columns if c not in names + sizes]
    frame = frame.astype(dict.fromkeys(sizes, "int64") | dict.fromkeys(floats, "float64"))
    calibration = frame["calibration_p_value"].to_numpy(dtype=float)
    if probability and len(frame):  # one test per group, however many rows show it
        first = ~frame.duplicated(["attribute", "group_name"]).to_numpy()
        once = np.where(first, calibration, np.nan)
        by_group = pd.Series(bh_adjust(once), index=frame.index)[first]
        keys = pd.MultiIndex.from_frame(frame[["attribute", "group_name"]])
        table = pd.Series(by_group.to_numpy(), index=keys[first])
        calibration_adjusted = table.reindex(keys).to_numpy(dtype=float)
    else:
        calibration_adjusted = bh_adjust(calibration)
    return frame.assign(
        auc_p_adjusted=bh_adjust(frame["auc_p_value"].to_numpy(dtype=float)),
        calibration_p_adjusted=calibration_adjusted,
        confidence=confidence,
    )[SCORE_RESULT_COLUMNS]


def calibration_curves(counts: pd.DataFrame, *, confidence: float = 0.95) -> pd.DataFrame:
    """Calibration within groups: per (attribute, group, bin) the labelled rows, their mean score
    and observed outcome rate with its exact (Clopper-Pearson) interval."""
    labelled = counts["positives"] + counts["negatives"]
    low, high = clopper_pearson(counts["positives"], labelled, confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        frame = counts.assign(
            labelled=labelled.astype("int64"),
            mean_score=np.where(labelled > 0, counts["score_sum"] / labelled, np.nan),
            observed_rate=np.where(labelled > 0, counts["positives"] / labelled, np.nan),
            rate_low=low,
            rate_high=high,
            confidence=confidence,
        )
    return frame[CALIBRATION_COLUMNS].sort_values(["attribute", "group_name", "score_bin"])


def threshold_sweep(counts: pd.DataFrame) -> pd.DataFrame:
    """Error and selection rates of the decision ``score >= threshold`` at every bin edge of each
    group: selected rows (labelled or not), tp, fp, fn, tn and their rates."""
    parts = []
    for attribute, groups, bins, sparse_counts in _matrices(counts):
        m = {c: v.toarray() for c, v in sparse_counts.items()}  # a few bins per group
        above = {c: np.cumsum(v[:, ::-1], 1)[:, ::-1] for c, v in m.items()}  # bins >= edge
        p, q = m["positives"].sum(1, keepdims=True), m["negatives"].sum(1, keepdims=True)
        n = p + q + m["unlabelled"].sum(1, keepdims=True)
        tp, fp = above["positives"], above["negatives"]
        selected = tp + fp + above["unlabelled"]
        shape = tp.shape
        with np.errstate(divide="ignore", invalid="ignore"):
            columns = {
                "attribute": attribute,
                "group_name": np.repeat(groups, shape[1]),
                "threshold": np.tile(bins, shape[0]),
                "n": np.broadcast_to(n, shape).ravel(),
                "selected": selected.ravel(),
                "tp": tp.ravel(),
                "fp": fp.ravel(),
                "fn": (p - tp).ravel(),
                "tn": (q - fp).ravel(),
                "selection_rate": (selected / n).ravel(),
                "tpr": (tp / p).ravel(),
                "fpr": (fp / q).ravel(),
                "fnr": ((p - tp) / p).ravel(),
            }
        parts.append(pd.DataFrame(columns))
    if not parts:
        return pd.DataFrame(columns=THRESHOLD_COLUMNS)
    frame = pd.concat(parts, ignore_index=True)
    counted = ["n", "selected", "tp", "fp", "fn", "tn"]
    return frame.astype({c: "int64" for c in counted})[THRESHOLD_COLUMNS]


def score_audit(
    counts: pd.DataFrame,
    bins: ScoreBins,
    reference_groups: dict[str, str],
    *,
    confidence: float = 0.95,
) -> dict[str, pd.DataFrame]:
    """The score results of ``counts`` (SCORE_COUNT_COLUMNS per value or cell) in the window's
    ``bins``, each checked by its contract (schemas.results): comparisons (``scores``, from the
    counts as they are), calibration curves and the threshold sweep (summed into the bins)."""
    binned = rebinned(counts, bins.edges)
    comparisons = score_comparisons(counts, bins, reference_groups, confidence=confidence)
    return {
        "scores": validate_result("scores", comparisons),
        "calibration": validate_result(
            "calibration", calibration_curves(binned, confidence=confidence)
        ),
        "thresholds": validate_result("thresholds", threshold_sweep(binned)),
    }


def numeric_scores(values: pd.Series, column: str) -> pd.Series:
    """The score column as numbers; a missing or non-numeric score is an error naming the
    column, the first row and what is accepted."""
    numbers = pd.to_numeric(values, errors="coerce").astype("float64")
    bad = ~np.isfinite(numbers.to_numpy())
    if bad.any():
        first = values.index[bad][0]
        raise ValueError(
            f"score column {column!r}: {int(bad.sum())} rows without a finite number "
            f"(first at row {first!r}: {values.loc[first]!r}); every row needs a number"
        )
    return numbers


SCORE_RESULT_COLUMNS = [
    "attribute", "group_name", "reference",
    "n_group", "positives_group", "negatives_group",
    "auc_group", "auc_variance_group", "auc_low_group", "auc_high_group",
    "in_the_large_group", "slope_group",
    "n_reference", "positives_reference", "negatives_reference",
    "auc_reference", "auc_variance_reference", "auc_low_reference", "auc_high_reference",
    "in_the_large_reference", "slope_reference",
    "auc_p_value", "calibration_statistic", "calibration_p_value",
    "auc_p_adjusted", "calibration_p_adjusted", "confidence",
]  # fmt: skip
CALIBRATION_COLUMNS = [
    "attribute", "group_name", "score_bin", "labelled", "positives", "mean_score", "observed_rate",
    "rate_low", "rate_high", "confidence",
]  # fmt: skip
THRESHOLD_COLUMNS = [
    "attribute", "group_name", "threshold", "n", "selected", "tp", "fp", "fn", "tn",
    "selection_rate", "tpr", "fpr", "fnr",
]  # fmt: skip
