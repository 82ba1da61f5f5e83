"""Monitor stage: anytime-valid monitoring of nightly increments.

Every comparison (a group against its rest of population or a named reference) and rate metric
is monitored on disjoint increments: night t brings x_g,t successes among n_g,t predictions of the
group and x_r,t among n_r,t of the reference. U_t = p_g,t − p_r,t (group minus reference, the sign
of the detection stage's T = e_group − e_reference).

**Per-night e-value by betting on block differences.** Within a night, pair the k = min(n_g, n_r)
rows of the smaller side with disjoint blocks of a = n_g // k group rows and b = n_r // k
reference rows: the pair statistic Z = (mean of a group rows) − (mean of b reference rows) lies in
[−1, 1] and E[Z] = U_t (Chugg, Cortes-Gomez, Wilder and Ramdas 2023, "Auditing fairness by
betting", bet on such paired differences with the wealth Π(1 + λ_i(Z_i − u_tol)); block means keep
the efficiency of the larger side). For H0+: U_t ≤ u_tol, the wealth
of a constant bet λ (chosen from past nights only) is Π_i (1 + λ(Z_i − u_tol)), an e-value for every
fixed arrangement of rows into pairs. Its average over a uniformly random arrangement is an
e-value too, and depends on the night's counts only; exp of its expected logarithm is smaller
(Jensen), k·E log(1 + λ(Z − u_tol)) over one random pair. In that pair the smaller side's row is a
Bernoulli(p̂) draw, so the expectation is exact over its two values x, and only the other side's
block mean Ȳ (spread σ̂²_B, small unless the sides are close in size) is bounded, by the
Fan-Grama-Liu inequality log(1 + vy) ≥ vy − ψ_E(v)y² (y ≥ −1, ψ_E(v) = −log(1 − v) − v;
Waudby-Smith and Ramdas 2024, eq. for the predictable-mixture bound), given x (``log_e_value``):

    log E+_t = k·Σ_x P(x)·[log(1 + λc_x) − ψ_E(u_x·m)/m²·σ̂²_B],   u_x = λ/(1 + λc_x),

with c_x the pair's value of Z − u_tol at Ȳ = p̂_B and m how far Ȳ can fall below p̂_B. So
E[E+_t | past] ≤ 1 under H0+ whatever the night's base rates (no nuisance parameter, valid
under changing distributions; assumed, as by any test of rates: given the past and the night's
sample sizes, the night's outcomes are independent within each side). Bounding the whole
logarithm by the inequality gives up about a third of the growth on a small group's night (a
TPR 0.10 below the rest's 0.80); this bound keeps at least 95% of it (tests/test_monitor_power.py).
H0−: U_t ≥ −u_tol is the same with Z → −Z.

**Bets: open on a change.** Each side runs Page's (1954) CUSUM of Gaussian log-likelihood
ratios of a mean δ against 0 for Y = s·Z − u_tol (s = ±1), G_t = max(0, G_{t−1} + δ/m̂₂·(y_t −
k_t·δ/2)), with y_t the night's sum of Y over its k_t pairs and m̂₂ the exponentially weighted
(half-life h nights) second moment of Y per pair. The side's gate opens when G reaches g and closes
when G returns to 0; while it is open the bet is λ = (S + Pδ)/(Q + P·m̂₂) (capped at
v_max/(1 + u_tol)), the growth-optimal bet of the quadratic approximation (GRAPA's λ = μ/(σ² + μ²),
Waudby-Smith and Ramdas 2024, section 5.3) at the sums S of Y and Q of Y² over the pairs since G
was last 0, shrunk toward δ by P pseudo-pairs; otherwise λ = 0. Inside the null G drifts down and
the bets stay 0 (a bet on noise there only loses); after a change G climbs, and the bet learns the
new mean from the change on, not from a forgetting average still weighed down by the nights
before it. A new comparison's CUSUMs start at g/2, the fast initial response of Lucas and
Crosier (1982), so that a gap present from the first night is bet on sooner. δ = 0.05, g = 2,
P = 200 pairs (SHIFT, GATE, SHIFT_PAIRS; benchmarks/results/monitor_power.md).
Any predictable bet keeps validity, so a state stored by an earlier version of these bets simply
continues: its wealth is an e-process up to its night, and every later night multiplies it by an
e-value.

**e-process and alarm.** Under H0: |U_t| ≤ u_tol both E+_t and E−_t are e-values given the past,
so M_t = (M+_t + M−_t)/2, with M±_t = M±_{t−1}·E±_t and M±_0 = 1, is a test supermartingale for
H0 however the wealth is split between the sides before each night, as long as the split is
predictable: each night a share f = 0.1 (TRANSFER) of the idle side's wealth (bet 0) moves to the
side being bet on, M unchanged, so that a lasting change is bet on with nearly the whole wealth
rather than half of it, while noise that opens a gate for a few nights moves little. By Ville's
inequality P(sup_t M_t ≥ 1/α) ≤ α: ``crossed`` when M_t ≥ 1/α, at any number of looks.

**Alarms across comparisons: weighted e-BH.** Each night e-BH (Wang and Ramdas 2022, definition 2
and its weighted form, section 5) runs on the e-process values (each an e-value at any stopping
time) times weights: comparison k's weight v_k = 1/k_k of the pairs k_k of its first night with
pairs, fixed from then on (0 before: out of the family), so that each comparison's share of α
grows with the variance of its nightly difference. A small group gathers evidence slowly, and a
lone drift there needs e ≥ K/(α·w_k) with w_k = K·v_k/Σv above 1 (the TPR of a 5% group among
eight, with their FPR and PPR, at 300 predictions a night: w ≈ 3, a third of the evidence); a
large group, whose e-process grows several times faster, needs more (its PPR: w ≈ 0.1, log 10 =
2.3 nats more; benchmarks/results/monitor_power.md measures the nights it costs). Under the
global null an
alarm needs S_t = Σ_k (v_k/Σv)·M_k,t ≥ 1/α over the family's members. While the family stays the
same, S is a convex combination of test supermartingales with fixed weights (they use sample sizes
only, given which every e-value is valid). A comparison joins (its first night with pairs, labels
arriving late, a new group) at the wealth min(1, S_{t−1}) (family_entry), not 1, so that S
renormalised over the larger family does not rise; joining at 1 would refresh S toward 1 each time
(eight fair, always-betting e-processes joining 150 nights apart, each with ten times the weight of
the one before: any alarm in 0.28 of 4,000 years joining at 1, 0.10 with equal weights; 0.042 and
0.033 joining at min(1, S); tests/test_monitor.py checks the monitor's own bets). A mirror
(``mirrors``: B vs rest of a two-valued attribute, kept out of the family) that joins when its
attribute gains a third group has its wealth, its twin's, set to that entry too. So S is a
test supermartingale, and P(any alarm in the whole sequence) ≤ α (Ville). Each M_k is still an
e-process for its own null (its start is at most 1), and at each
night e-BH controls the FDR at α·Σ_null w_k/K ≤ α under arbitrary dependence.

**Confidence sequence for U** (constant U; Waudby-Smith and Ramdas 2024, hedged capital process,
with the predictable plug-in bet λ_t = min(λ_max, sqrt(2 log(2/α)/(σ̂²_{t−1} N_t log(1 + N_t))))
over N_t pairs): for each u, log K±_t(u) ≥ Σ_s k_s[±λ_s(D̂_s − u) − γ_s λ_s²(σ̂²_s + (D̂_s − u)²)]
with γ_s = ψ_E(2λ_s)/(2λ_s)² (Z − u ≥ −2), a quadratic in u with five running sums; the CS is
{u : (K+_t(u) + K−_t(u))/2 < 1/α} on a grid (bounds rounded outward), intersected over time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from biasaudit.schemas.results import COMPARISON_KEY, MONITOR_STATE

PRIOR_PAIRS = 4.0  # pseudo-pairs of second moment 1/4 that keep early bets small
V_MAX = 0.8  # largest bet fraction v = λ(1 + u_tol) of the test
SHIFT = 0.05  # δ: the mean of Y the CUSUM looks for, and the bet's prior mean
GATE = 2.0  # g: the CUSUM's log-likelihood ratio at which a side starts betting
SHIFT_PAIRS = 200.0  # P: pseudo-pairs of mean δ in the bet's estimate
TRANSFER = 0.1  # f: share of the idle side's wealth moved each night to the side being bet on
CS_LAMBDA_MAX = 0.25  # largest bet of the confidence sequence (so that λ(Z − u) ≥ −1/2)
GRID = np.linspace(-1.0, 1.0, 801)


def psi_e(v):
    """ψ_E(v) = −log(1 − v) − v (Fan, Grama and Liu 2015; Waudby-Smith and Ramdas 2024)."""
    v = np.asarray(v, dtype=float)
    return -np.log1p(-v) - v


def _fan_factor(v):
    """ψ_E(v)/v², continuous at v = 0 (limit 1/2)."""
    v = np.asarray(v, dtype=float)
    safe = np.where(v > 1e-6, v, 0.5)
    return np.where(v > 1e-6, psi_e(safe) / safe**2, 0.5 + v / 3.0)


def pair_moments(x_g, n_g, x_r, n_r):
    """Pairs k, observed difference D̂ and variance σ̂²_Z of one pair's block difference under a
    uniformly random arrangement of the night's rows (sampling without replacement)."""
    x_g, n_g, x_r, n_r = (np.asarray(v, dtype=float) for v in (x_g, n_g, x_r, n_r))
    k = np.minimum(n_g, n_r)
    safe_k = np.maximum(k, 1.0)
    a, b = np.floor(n_g / safe_k), np.floor(n_r / safe_k)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_g = np.where(n_g > 0, x_g / np.maximum(n_g, 1.0), 0.0)
        p_r = np.where(n_r > 0, x_r / np.maximum(n_r, 1.0), 0.0)
        fpc_g = np.where(n_g > 1, (n_g - a) / (np.maximum(a, 1.0) * (n_g - 1)), 0.0)
        fpc_r = np.where(n_r > 1, (n_r - b) / (np.maximum(b, 1.0) * (n_r - 1)), 0.0)
    var = p_g * (1 - p_g) * fpc_g + p_r * (1 - p_r) * fpc_r
    d = np.where(k > 0, p_g - p_r, 0.0)
    return k, d, np.where(k > 0, var, 0.0)


def log_e_value(x_g, n_g, x_r, n_r, lam, u_tol, side):
    """log of the night's e-value for H0+ (side=+1: U ≤ u_tol) or H0− (side=−1: U ≥ −u_tol).

    Each of the k pairs holds one row of the smaller side (a Bernoulli(p̂) draw under a random
    arrangement) and a block mean Ȳ of the other side (mean p̂_B, variance σ̂²_B): given the
    single row's value x, Y = s·Z − u_tol = c_x + e with c_x = s·o·(x − p̂_B) − u_tol (o = +1
    when the single row is the group's, −1 when it is the reference's) and e = −s·o·(Ȳ − p̂_B) ≥ −m
    of mean 0, so log(1 + λY) = log(1 + λc_x) + log(1 + u_x·e), u_x = λ/(1 + λc_x), and the
    Fan-Grama-Liu inequality bounds the second term's mean below by −ψ_E(u_x·m)/m²·σ̂²_B:
    exact in the single row, the inequality only for the block's small spread."""
    x_g, n_g, x_r, n_r = (np.asarray(v, dtype=float) for v in (x_g, n_g, x_r, n_r))
    k = np.minimum(n_g, n_r)
    group_single = n_g <= n_r
    x_1, n_1 = np.where(group_single, x_g, x_r), np.where(group_single, n_g, n_r)
    x_b, n_b = np.where(group_single, x_r, x_g), np.where(group_single, n_r, n_g)
    orient = side * np.where(group_single, 1.0, -1.0)
    size = np.floor(n_b / np.maximum(k, 1.0))  # the block's rows
    p_1 = x_1 / np.maximum(n_1, 1.0)
    p_b = x_b / np.maximum(n_b, 1.0)
    fpc = np.where(n_b > 1, (n_b - size) / (np.maximum(size, 1.0) * np.maximum(n_b - 1, 1.0)), 0.0)
    var_b = p_b * (1 - p_b) * fpc
    reach = np.where(orient > 0, 1 - p_b, p_b)  # m: e ≥ −m as Ȳ ∈ [0, 1]
    total = np.zeros(np.broadcast(k, lam).shape)
    for x, weight in ((1.0, p_1), (0.0, 1 - p_1)):
        c = orient * (x - p_b) - u_tol
        u = lam / (1 + lam * c)
        total = total + weight * (np.log1p(lam * c) - _fan_factor(u * reach) * u**2 * var_b)
    return np.where(k > 0, k * total, 0.0)


def second_moment(w_k, w_d, w_v, u_tol, side):
    """m̂₂: the exponentially weighted second moment of Y = s·Z − u_tol per pair (PRIOR_PAIRS of
    1/4)."""
    return (w_v - 2 * side * u_tol * w_d + u_tol**2 * w_k + PRIOR_PAIRS / 4.0) / (w_k + PRIOR_PAIRS)


def bet(run_y, run_q, gate, m2, u_tol, v_max=V_MAX):
    """λ = (S + Pδ)/(Q + P·m̂₂) while the side's gate is open, else 0 (module docstring)."""
    lam = np.maximum(run_y + SHIFT_PAIRS * SHIFT, 0.0) / (run_q + SHIFT_PAIRS * m2)
    return np.where(gate > 0, np.minimum(lam, v_max / (1.0 + u_tol)), 0.0)


def cusum(g, run_y, run_q, gate, k, y, q, m2):
    """One night of a side's CUSUM G = max(0, G + δ/m̂₂·(y − kδ/2)) (Page 1954), its sums since
    its last zero (y and q: the night's sums of Y and Y²) and its gate (open from GATE to 0)."""
    g = np.maximum(0.0, g + SHIFT / m2 * (y - k * SHIFT / 2))
    alive = g > 0
    open_ = (g >= GATE) | ((gate > 0) & alive)
    return g, np.where(alive, run_y + y, 0.0), np.where(alive, run_q + q, 0.0), open_.astype(float)


def rebalance(log_up, log_down, lam_up, lam_down):
    """log M+ and log M− after moving TRANSFER of the idle side's wealth to the side being bet
    on (a predictable split: M = (M+ + M−)/2 unchanged)."""
    to_up, to_down = (lam_up > 0) & (lam_down == 0), (lam_down > 0) & (lam_up == 0)
    give, keep = np.log(TRANSFER), np.log1p(-TRANSFER)
    up = np.where(to_up, np.logaddexp(log_up, give + log_down), log_up + np.where(to_down, keep, 0))
    down = np.where(
        to_down, np.logaddexp(log_down, give + log_up), log_down + np.where(to_up, keep, 0)
    )
    return up, down


def cs_bet(n_pairs, s_d, s_v, k, alpha):
    """The confidence sequence's predictable plug-in bet, constant over a night's k pairs."""
    total = n_pairs + k
    var = s_v - np.where(n_pairs > 0, s_d**2 / np.maximum(n_pairs, 1.0), 0.0) + PRIOR_PAIRS / 4
    var = var / (n_pairs + PRIOR_PAIRS)
    with np.errstate(divide="ignore"):
        lam = np.sqrt(2 * np.log(2 / alpha) / (var * total * np.log1p(total)))
    return np.where(total > 0, np.minimum(lam, CS_LAMBDA_MAX), 0.0)


def cs_log_capital(state: dict, grid=GRID):
    """log K+ and log K− of every comparison (rows) at every u of ``grid`` (columns)."""
    u = np.asarray(grid)[None, :]
    linear = state["cs_b"][:, None] - state["cs_a"][:, None] * u
    quad = state["cs_eq"][:, None] - 2 * u * state["cs_dq"][:, None] + u**2 * state["cs_c"][:, None]
    return linear - quad, -linear - quad


def cs_bounds(state: dict, alpha: float, grid=GRID):
    """Bounds of {u : (K+(u) + K−(u))/2 < 1/α}, rounded outward to the grid's spacing."""
    up, down = cs_log_capital(state, grid)
    accepted = np.logaddexp(up, down) - np.log(2) < np.log(1 / alpha)
    step = grid[1] - grid[0]
    any_ = accepted.any(axis=1)
    first = np.argmax(accepted, axis=1)
    last = len(grid) - 1 - np.argmax(accepted[:, ::-1], axis=1)
    low = np.where(any_, np.maximum(grid[first] - step, -1.0), np.nan)
    high = np.where(any_, np.minimum(grid[last] + step, 1.0), np.nan)
    return low, high


def initial_state(size: int) -> dict:
    """State of comparisons never seen: wealth 1, no history, CUSUMs at GATE/2, CS [−1, 1]."""
    state = {c: np.zeros(size) for c in MONITOR_STATE}
    state["cusum_up"] = state["cusum_down"] = np.full(size, GATE / 2)
    state["cs_low"] = np.full(size, -1.0)
    state["cs_high"] = np.full(size, 1.0)
    return state


@dataclass(frozen=True)
class Settings:
    """Options of the monitor: tolerance, level α, half-life (nights) of the bets' m̂₂."""

    tolerance: float = 0.05
    alpha: float = 0.05
    half_life: float = 30.0
    v_max: float = V_MAX

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def log_wealth(log_up, log_down):
    """log M = log((M⁺ + M⁻)/2), the e-process of a comparison from its two sides' log wealth."""
    return np.logaddexp(log_up, log_down) - np.log(2)


def step(state: dict, x_g, n_g, x_r, n_r, settings: Settings, grid=GRID, entry=0.0, rejoining=None):
    """One increment for every comparison (arrays aligned with the state's rows).

    ``entry``: the log wealth a comparison joining the e-BH family tonight starts from
    (family_entry; 0 keeps 1): one with its first pairs, and the ``rejoining`` rows (a mirror
    whose attribute gained a third group: ``advance``), whose wealth is set to it. Returns the new
    state and the night's outputs: pairs, difference, per-side and combined e-values, the
    e-process M_t and whether it crossed 1/α. Pure: the state is not modified.
    """
    u_tol, alpha = settings.tolerance, settings.alpha  # U_tol, as in tasks.twosample
    k, d, var = pair_moments(x_g, n_g, x_r, n_r)
    joining = (state["ebh_weight"] <= 0) & (k > 0)  # e-BH's weight: fixed at the first pairs
    entering = joining if rejoining is None else joining | rejoining
    shift = np.where(entering, entry - log_wealth(state["log_m_up"], state["log_m_down"]), 0.0)
    start_up, start_down = (state[f"log_m_{side}"] + shift for side in ("up", "down"))
    new = {name: np.array(value, dtype=float) for name, value in state.items()}
    lams = {}
    for side, name in ((+1, "up"), (-1, "down")):
        m2 = second_moment(state["w_k"], state["w_d"], state["w_v"], u_tol, side)
        run_y, run_q, gate = (state[f"{c}_{name}"] for c in ("run_y", "run_q", "gate"))
        lams[name] = bet(run_y, run_q, gate, m2, u_tol, settings.v_max)
        y, q = k * (side * d - u_tol), k * (var + (side * d - u_tol) ** 2)
        night = cusum(state[f"cusum_{name}"], run_y, run_q, gate, k, y, q, m2)
        for c, value in zip(("cusum", "run_y", "run_q", "gate"), night, strict=True):
            new[f"{c}_{name}"] = value
    log_e_up = log_e_value(x_g, n_g, x_r, n_r, lams["up"], u_tol, +1)
    log_e_down = log_e_value(x_g, n_g, x_r, n_r, lams["down"], u_tol, -1)
    log_m_before = log_wealth(start_up, start_down)
    log_up, log_down = rebalance(start_up, start_down, lams["up"], lams["down"])
    new["log_m_up"] = log_up + log_e_up
    new["log_m_down"] = log_down + log_e_down
    log_m = log_wealth(new["log_m_up"], new["log_m_down"])
    rho = 2.0 ** (-1.0 / settings.half_life)
    new["w_k"] = rho * state["w_k"] + k
    new["w_d"] = rho * state["w_d"] + k * d
    new["w_v"] = rho * state["w_v"] + k * (var + d**2)
    lam = cs_bet(state["n_pairs"], state["s_d"], state["s_v"], k, alpha)
    gamma = _fan_factor(2 * lam)
    new["n_pairs"] = state["n_pairs"] + k
    new["s_d"] = state["s_d"] + k * d
    new["s_v"] = state["s_v"] + k * (var + d**2)
    new["cs_a"] = state["cs_a"] + k * lam
    new["cs_b"] = state["cs_b"] + k * lam * d
    new["cs_c"] = state["cs_c"] + k * lam**2 * gamma
    new["cs_dq"] = state["cs_dq"] + k * lam**2 * gamma * d
    new["cs_eq"] = state["cs_eq"] + k * lam**2 * gamma * (var + d**2)
    low, high = cs_bounds(new, alpha, grid)
    new["cs_low"] = np.fmax(state["cs_low"], low)
    new["cs_high"] = np.fmin(state["cs_high"], high)
    new["nights"] = state["nights"] + 1
    new["ebh_weight"] = np.where(joining, 1.0 / np.maximum(k, 1.0), state["ebh_weight"])
    out = {
        "pairs": k,
        "difference": np.where(k > 0, d, np.nan),
        "e_value_up": np.exp(log_e_up),
        "e_value_down": np.exp(log_e_down),
        "e_value": np.exp(log_m - log_m_before),
        "e_process": np.exp(np.minimum(log_m, 700.0)),
        "crossed": log_m >= np.log(1 / alpha),
    }
    return new, out


def family_entry(state: dict, members=None, families: int = 1) -> np.ndarray:
    """Per row, log min(1, S): S = Σ v_k·M_k / Σ v_k, the weighted mean of the e-processes of the
    e-BH family's members (weight v > 0 and ``members``, default all rows) before tonight; the rows
    laid out as ``families`` families of equal size one after the other (1 where a family has no
    member yet). A comparison joining the family starts from this wealth instead of 1, so that S,
    renormalised over the larger family, does not rise by its joining (module docstring)."""
    weight = np.asarray(state["ebh_weight"], dtype=float)
    inside = weight > 0 if members is None else (weight > 0) & np.asarray(members, bool)
    log_m = log_wealth(state["log_m_up"], state["log_m_down"])
    with np.errstate(divide="ignore"):
        log_v = np.where(inside, np.log(np.where(inside, weight, 1.0)), -np.inf).reshape(
            families, -1
        )
    log_total = np.logaddexp.reduce(log_v, axis=1, keepdims=True)
    log_mean = np.logaddexp.reduce(log_v + log_m.reshape(families, -1), axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        log_s = np.where(np.isfinite(log_total), log_mean - log_total, 0.0)
    return np.broadcast_to(np.minimum(log_s, 0.0), log_v.shape).ravel()


def e_bh(e_values, alpha: float, weights=None) -> np.ndarray:
    """e-BH rejections along the last axis (Wang and Ramdas 2022): with K e-values sorted
    e_(1) ≥ e_(2) ≥ ..., reject the k* largest, k* = max{k : e_(k) ≥ K/(α k)}. NaN: no test.
    ``weights`` (>= 0, broadcast with the e-values; 0: out of the family): e-BH of w_k·e_k with
    w_k = K·v_k/Σv, the weights scaled to sum to the family's size K (weighted e-BH)."""
    e = np.asarray(e_values, dtype=float)
    valid = ~np.isnan(e)
    if weights is not None:
        v = np.broadcast_to(np.asarray(weights, dtype=float), e.shape)
        valid &= v > 0  # NaN or a weight <= 0: out of the family
        v = np.where(valid, v, 0.0)
        total = v.sum(axis=-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            e = e * v * valid.sum(axis=-1, keepdims=True) / total
    size = valid.sum(axis=-1, keepdims=True)
    filled = np.where(valid, e, -np.inf)
    order = np.argsort(-filled, axis=-1, kind="stable")
    ranked = np.take_along_axis(filled, order, axis=-1)
    ks = np.arange(1, e.shape[-1] + 1)
    passes = ranked * ks * alpha >= size
    k_star = np.where(passes.any(axis=-1), e.shape[-1] - np.argmax(passes[..., ::-1], axis=-1), 0)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(ks - 1, order.shape).copy(), axis=-1)
    return valid & (rank < k_star[..., None])


# --- frames: the core the flow and monitor_frame share --------------------------------------

LABEL_FREE = ("ppr", "pnr")  # decisions only: counted from every prediction of the period
DEFAULT_METRICS = ("ppr", "tpr", "fpr")
RATE_COUNTS = [
    "numerator_group",
    "denominator_group",
    "numerator_reference",
    "denominator_reference",
]
UNLABELLED_FIELDS = ["unlabelled_group", "unlabelled_reference"]


def monitored_metrics(metrics) -> list[str]:
    """Rate metrics to monitor (metric ids; default ppr, tpr and fpr); base rates are left out."""
    from biasaudit.schemas.metric_ids import BASE_RATES, GLOSSARY, TESTED_RATES, canonical_metric

    names = [canonical_metric(m) for m in (metrics or DEFAULT_METRICS)]
    rates = [m for m in dict.fromkeys(names) if m in TESTED_RATES]
    if not rates:
        context = [f"{m} ({GLOSSARY[m][0]})" for m in dict.fromkeys(names) if m in BASE_RATES]
        why = f"; {', '.join(context)}: the outcome's base rate, never tested" if context else ""
        raise ValueError(
            f"no rate of the model's decisions among {list(names)}: monitoring needs one of "
            f"{', '.join(TESTED_RATES)}{why}"
        )
    return rates


_NIGHT = "__increment__"  # replay key folded into the attribute name, split off afterwards
_FOLD = "\x1f"


def _pair_rates(
    valid, increment, attributes, intersections, reference_groups, metrics
) -> pd.DataFrame:
    """x and n of group and reference for every comparison and metric, from the audit's own
    count functions (tasks.counts.cell_counts, with_complements, comparison_pairs and
    tasks.metrics.CATALOGUE), for every increment label of ``increment`` (one per row) at once:
    the label is folded into the attribute, so complements and references stay per increment."""
    from biasaudit.schemas.config import INTERSECTION_SEP
    from biasaudit.schemas.frames import COUNT_COLUMNS
    from biasaudit.schemas.metric_ids import UNLABELLED_COLUMNS
    from biasaudit.tasks.counts import cell_counts, comparison_pairs, with_complements
    from biasaudit.tasks.metrics import CATALOGUE

    columns = ["increment", *COMPARISON_KEY, *RATE_COUNTS, *UNLABELLED_FIELDS]
    if valid.empty or not metrics:
        return pd.DataFrame(columns=columns)
    tagged = valid.assign(**{_NIGHT: np.asarray(increment)})
    combos = [[_NIGHT, a] for a in attributes] + [[_NIGHT, *c] for c in intersections]
    cells = cell_counts(tagged, [], combos)
    parts = cells["group_name"].str.split(INTERSECTION_SEP, n=1, regex=False)
    label, name = parts.str[0], parts.str[1]
    attribute = cells["attribute"].str.slice(len(_NIGHT + INTERSECTION_SEP))
    cells = cells.assign(attribute=label + _FOLD + attribute, group_name=name)
    counts = with_complements(cells)
    group, reference = comparison_pairs(counts, {})
    # A group alone in its attribute (in this increment) has no rest to be compared with.
    size = group.groupby("attribute")["group_name"].transform("size")
    keep = (size > 1).to_numpy()
    group, reference = group[keep].reset_index(drop=True), reference[keep].reset_index(drop=True)
    if reference_groups:
        named = _named_pairs(counts, reference_groups)
        group = pd.concat([group, named[0]], ignore_index=True)
        reference = pd.concat([reference, named[1]], ignore_index=True)
    cells_read = [*COUNT_COLUMNS, *UNLABELLED_COLUMNS]  # the metric catalogue's inputs
    mine = {c: group[c].to_numpy(dtype=float) for c in cells_read}
    theirs = {c: reference[c].to_numpy(dtype=float) for c in cells_read}
    parts = group["attribute"].str.split(_FOLD, n=1, regex=False)
    label, attribute = parts.str[0], parts.str[1]
    keys = pd.DataFrame(
        {
            "increment": label.to_numpy(),
            "attribute": attribute.to_numpy(),
            "group_name": group["group_name"].to_numpy(),
            "reference": group["reference"].to_numpy(),
        }
    )
    blocks = []
    for metric in metrics:
        _, x_g, n_g, _ = CATALOGUE[metric](mine)
        _, x_r, n_r, _ = CATALOGUE[metric](theirs)
        blocks.append(
            keys.assign(
                metric=metric,
                numerator_group=x_g,
                denominator_group=n_g,
                numerator_reference=x_r,
                denominator_reference=n_r,
                unlabelled_group=group["n_unlabelled"].to_numpy(),
                unlabelled_reference=reference["n_unlabelled"].to_numpy(),
            )
        )
    return pd.concat(blocks, ignore_index=True)[columns]


def _named_pairs(counts: pd.DataFrame, reference_groups: dict[str, str]):
    """Comparisons with named reference groups, for all folded increments at once: the rule of
    tasks.counts.comparison_pairs (every other group of the attribute against the named one),
    skipping increments in which the named group has no predictions."""
    from biasaudit.tasks.counts import CELL_COLUMNS

    groups = counts[counts["subset"] == "group"].drop(columns="subset")
    original = groups["attribute"].str.split(_FOLD, n=1, regex=False).str[1]
    wanted = original.map(reference_groups)
    is_ref = groups["group_name"] == wanted
    refs = groups[is_ref].drop(columns="group_name")
    others = groups[wanted.notna() & ~is_ref]
    pairs = others.merge(refs, on="attribute", suffixes=("", "_ref"))
    name = pairs["attribute"].str.split(_FOLD, n=1, regex=False).str[1].map(reference_groups)
    group = pairs[list(others.columns)].assign(reference=name)
    reference = pairs[[f"{c}_ref" for c in CELL_COLUMNS]].set_axis(CELL_COLUMNS, axis=1)
    return group, reference


def increment_counts(
    decisions: pd.DataFrame,
    outcomes: pd.DataFrame,
    *,
    attributes,
    intersections=(),
    reference_groups=None,
    metrics=None,
    decision_increment=None,
    outcome_increment=None,
) -> pd.DataFrame:
    """Counts of increments per comparison and metric (columns ``increment``, COMPARISON_KEY,
    RATE_COUNTS and UNLABELLED_FIELDS): label-free metrics from ``decisions`` (every prediction
    of the period, outcome ignored), the others from ``outcomes`` (matured predictions; y_true
    missing where the label had not arrived, counted as unlabelled). Rows are predictions, or
    cells of predictions with their number in a column ``n`` (a scan's cells, db.sources.scan): the
    counts are the same. ``*_increment`` label each row's increment (a replay counts all its
    nights in one pass); by default one increment "0".
    """
    names = monitored_metrics(metrics)
    free = [m for m in names if m in LABEL_FREE]
    labelled = [m for m in names if m not in LABEL_FREE]
    if decision_increment is None:
        decision_increment = np.zeros(len(decisions), dtype=int)
    if outcome_increment is None:
        outcome_increment = np.zeros(len(outcomes), dtype=int)
    # Outcome set to 0 for every decision row: tn/fp cells hold the decisions, so ppr and pnr
    # are the shares of predicted positives and negatives among all predictions.
    options = {
        "attributes": attributes,
        "intersections": intersections,
        "reference_groups": reference_groups,
    }
    parts = [
        _pair_rates(
            decisions.assign(y_true=0.0), decision_increment, metrics=free, **options
        ).assign(unlabelled_group=0, unlabelled_reference=0),
        _pair_rates(outcomes, outcome_increment, metrics=labelled, **options),
    ]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(
            columns=["increment", *COMPARISON_KEY, *RATE_COUNTS, *UNLABELLED_FIELDS]
        )
    frame = pd.concat(parts, ignore_index=True)
    fields_ = RATE_COUNTS + UNLABELLED_FIELDS
    frame[fields_] = frame[fields_].fillna(0).astype(float)
    return frame


def empty_state() -> pd.DataFrame:
    """Monitor state of an audit with no run yet."""
    return pd.DataFrame(
        {
            **{k: pd.Series(dtype=str) for k in COMPARISON_KEY},
            **{c: pd.Series(dtype=float) for c in MONITOR_STATE},
        }
    )


OUTPUT_FIELDS = [
    "pairs",
    "difference",
    "e_value_up",
    "e_value_down",
    "e_value",
    "e_process",
    "crossed",
    "cs_low",
    "cs_high",
    "nights",
    "alarm",
]


def mirrors(keys: pd.DataFrame) -> np.ndarray:
    """One hypothesis, one test: of an attribute with exactly two groups seen
    so far, A vs rest and B vs rest are the same comparison (B's e-process mirrors A's); B's is
    kept out of the e-BH family and never alarms. ``keys``: the comparisons monitored so far."""
    rest = keys["reference"] == "rest"
    groups = keys[rest].groupby(["attribute", "metric"])["group_name"]
    size = groups.transform("nunique").reindex(keys.index)
    first = groups.transform("min").reindex(keys.index)
    return (rest & (size == 2) & (keys["group_name"] != first)).to_numpy()


def advance(
    arrays: dict,
    counts: np.ndarray,
    active: np.ndarray,
    settings: Settings,
    *,
    mirror: np.ndarray,
    members: np.ndarray,
):
    """One increment on arrays: ``counts`` (rows × x_g, n_g, x_r, n_r), ``active`` the rows
    monitored so far (others stay in their initial state and out of the e-BH family),
    ``mirror`` the rows kept out of the family tonight (``mirrors``), ``members`` the rows in it
    last night. Joiners start at min(1, S) of last night's members (family_entry): new
    comparisons, and a mirror that enters the family when its attribute gains a third group,
    whose wealth (its twin's) is set to that entry: its e-process drops there, and a ``crossed``
    it showed as a mirror may end."""
    x_g, n_g, x_r, n_r = counts[:, :4].T
    family = active & ~np.asarray(mirror, bool)
    members = np.asarray(members, bool)
    entry = family_entry(arrays, members)
    rejoining = family & ~members & (np.asarray(arrays["ebh_weight"], dtype=float) > 0)
    new, out = step(arrays, x_g, n_g, x_r, n_r, settings, entry=entry, rejoining=rejoining)
    start = initial_state(len(active))
    new = {c: np.where(active, new[c], start[c]) for c in MONITOR_STATE}
    e_process = np.where(family, out["e_process"], np.nan)
    out = {**out, "cs_low": new["cs_low"], "cs_high": new["cs_high"], "nights": new["nights"]}
    weights = new["ebh_weight"]
    out["alarm"] = e_bh(e_process, settings.alpha, weights) if len(active) else np.zeros(0, bool)
    return new, out


def monitor_update(
    state: pd.DataFrame, increment: pd.DataFrame, settings: Settings
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The monitor's core, shared by the flow, ``monitor_frame`` and ``backtest``: one increment.

    ``state``: the previous run's state (COMPARISON_KEY + MONITOR_STATE, ``empty_state()`` at
    first); ``increment``: ``increment_counts`` of this run. Comparisons absent from the increment keep
    their e-process (e-value 1); new ones start at wealth 1. Returns the new state and the run's
    rows: counts, difference, e-values, e-process, confidence sequence, ``crossed`` (M ≥ 1/α)
    and ``alarm`` (e-BH across all the run's comparisons and metrics at level α).
    """
    increment = increment[COMPARISON_KEY + RATE_COUNTS + UNLABELLED_FIELDS]
    before = state[COMPARISON_KEY + MONITOR_STATE].reset_index(drop=True)
    before["_mirror"] = mirrors(before[COMPARISON_KEY])  # last night's family left these out
    merged = before.merge(increment, on=COMPARISON_KEY, how="outer", sort=True)
    fresh = merged["nights"].isna().to_numpy()
    members = ~fresh & merged["_mirror"].eq(False).to_numpy(dtype=bool)  # NaN: not last night's
    start = initial_state(len(merged))
    arrays = {c: np.where(fresh, start[c], merged[c].to_numpy(dtype=float)) for c in MONITOR_STATE}
    counts = merged[RATE_COUNTS + UNLABELLED_FIELDS].fillna(0).to_numpy(dtype=float)
    keys = merged[COMPARISON_KEY].reset_index(drop=True)
    everyone = np.ones(len(merged), bool)
    new, out = advance(arrays, counts, everyone, settings, mirror=mirrors(keys), members=members)
    fields_ = RATE_COUNTS + UNLABELLED_FIELDS
    rows = keys.assign(**{c: counts[:, i] for i, c in enumerate(fields_)}, **out)
    return keys.assign(**new), rows
