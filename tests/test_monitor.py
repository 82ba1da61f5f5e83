"""Anytime-valid monitor (tasks/monitor.py): enumeration and simulation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from biasaudit.tasks.detection import unfairness_test
from biasaudit.tasks.monitor import (
    GRID,
    Settings,
    advance,
    cs_log_capital,
    e_bh,
    family_entry,
    initial_state,
    log_e_value,
    pair_moments,
    psi_e,
    step,
)


def test_fan_inequality_holds_on_a_fine_grid():
    """It uses log(1 + vy) ≥ vy − ψ_E(v)y² for y ≥ −1, v ∈ [0, 1) (Fan, Grama and Liu 2015)."""
    v = np.linspace(0.0, 0.99, 100)[:, None]
    y = np.concatenate([np.linspace(-1, 3, 2001), [10.0, 100.0]])[None, :]
    assert (np.log1p(v * y) - (v * y - psi_e(v) * y**2) >= -1e-12).all()


def _arrangement_average(rows_g, rows_r, lam, tol, side):
    """Exact mean over all orderings of the rows of the wealth Π(1 + λ(s·Z_i − tol)) of the
    block pairs, and the mean and variance of one pair's Z (brute force)."""
    n_g, n_r = len(rows_g), len(rows_r)
    k = min(n_g, n_r)
    a, b = n_g // k, n_r // k
    wealth, zs = [], []
    for pg in itertools.permutations(rows_g):
        for pr in itertools.permutations(rows_r):
            z = np.array(
                [
                    np.mean(pg[i * a : (i + 1) * a]) - np.mean(pr[i * b : (i + 1) * b])
                    for i in range(k)
                ]
            )
            zs.append(z[0])
            wealth.append(np.prod(1 + lam * (side * z - tol)))
    return np.mean(wealth), np.mean(zs), np.var(zs)


@pytest.mark.parametrize(
    "rows_g, rows_r",
    [((1, 0), (1, 1, 0, 0, 0)), ((1, 1, 0, 0, 0), (1, 0)), ((1, 0, 1), (0, 0, 1)), ((1,), (0, 1))],
)
@pytest.mark.parametrize("lam, tol, side", [(0.3, 0.0, 1), (0.6, 0.05, 1), (0.5, 0.1, -1)])
def test_night_e_value_is_below_the_arrangement_average(rows_g, rows_r, lam, tol, side):
    """The closed-form e-value is at most the exact random-arrangement wealth (Jensen + Fan), and
    pair_moments' variance is the brute-force variance of a pair's block difference."""
    average, mean_z, var_z = _arrangement_average(rows_g, rows_r, lam, tol, side)
    counts = sum(rows_g), len(rows_g), sum(rows_r), len(rows_r)
    _, d, var = pair_moments(*counts)
    assert d == pytest.approx(mean_z)
    assert var == pytest.approx(var_z)
    assert np.exp(log_e_value(*counts, lam, tol, side)) <= average + 1e-12


@pytest.mark.parametrize("n_g, n_r", [(1, 1), (3, 7), (10, 40), (25, 25), (40, 6)])
@pytest.mark.parametrize("p_r", [0.02, 0.3, 0.6, 0.9])
@pytest.mark.parametrize("tol, v", [(0.0, 0.3), (0.0, 0.8), (0.05, 0.8), (0.2, 0.5)])
def test_night_e_value_has_mean_at_most_one_on_the_null_boundary(n_g, n_r, p_r, tol, v):
    """E[E+] ≤ 1 at U = tol and E[E−] ≤ 1 at U = −tol, by exact enumeration of both binomials."""
    lam = v / (1 + tol)
    x_g, x_r = np.meshgrid(np.arange(n_g + 1), np.arange(n_r + 1), indexing="ij")
    for side in (1, -1):
        p_g = p_r + side * tol
        if not 0 <= p_g <= 1:
            continue
        weight = stats.binom.pmf(x_g, n_g, p_g) * stats.binom.pmf(x_r, n_r, p_r)
        mean = (weight * np.exp(log_e_value(x_g, n_g, x_r, n_r, lam, tol, side))).sum()
        assert mean <= 1 + 1e-12


@pytest.mark.parametrize("gate_up", [0.0, 1.0])
@pytest.mark.parametrize("u", [-0.05, 0.0, 0.05])
def test_e_process_has_mean_at_most_its_last_value_within_the_null(gate_up, u):
    """E[M_t | past] ≤ M_{t−1} for |U| ≤ tol, whatever the split of the wealth between the sides
    and its move to the side being bet on: exact enumeration of both binomials of a night of
    step() from a state with the down side's gate open (and the up side's open or closed)."""
    n_g, n_r, p_r, tol = 12, 40, 0.6, 0.05
    x_g, x_r = (
        a.ravel() for a in np.meshgrid(np.arange(n_g + 1), np.arange(n_r + 1), indexing="ij")
    )
    weight = stats.binom.pmf(x_g, n_g, p_r + u) * stats.binom.pmf(x_r, n_r, p_r)
    state = initial_state(len(x_g))
    state.update(
        log_m_up=np.full(len(x_g), np.log(0.3)),
        log_m_down=np.full(len(x_g), np.log(1.7)),
        w_k=np.full(len(x_g), 100.0),
        w_d=np.full(len(x_g), -5.0),
        w_v=np.full(len(x_g), 30.0),
        gate_up=np.full(len(x_g), gate_up),
        run_y_up=np.full(len(x_g), 40.0),
        run_q_up=np.full(len(x_g), 60.0),
        gate_down=np.ones(len(x_g)),
        run_y_down=np.full(len(x_g), 30.0),
        run_q_down=np.full(len(x_g), 50.0),
    )
    settings = Settings(tolerance=tol, alpha=0.05)
    _, out = step(state, x_g, np.full(len(x_g), n_g), x_r, np.full(len(x_r), n_r), settings)
    assert (out["e_value_down"] != 1).any()  # the down side bets
    assert (weight * out["e_process"]).sum() <= (0.3 + 1.7) / 2 * (1 + 1e-12)


def _simulate(
    shift,
    replays,
    nights,
    seed,
    tol=0.0,
    share=0.05,
    volume=1000,
    p=0.3,
    at=100,
    drift=False,
    settings=None,
    window_replays=None,
):
    """First night each replay's e-process crosses 1/α (−1: never) and the fixed-window
    (30 nights, tasks.detection.unfairness_test) test's first rejection, from night ``at``
    on when a shift is injected (for the first ``window_replays`` replays only, when given: its
    exact p-values cost milliseconds per replay and night)."""
    rng = np.random.default_rng(seed)
    settings = settings or Settings(tolerance=tol, alpha=0.05)
    n_g = rng.binomial(volume, share, size=(nights, replays))
    n_r = volume - n_g
    base = p + (0.2 * np.sin(np.arange(nights) / 20.0)[:, None] if drift else 0.0)
    p_g = np.clip(base + tol + np.where(np.arange(nights)[:, None] >= at, shift, 0.0), 0, 1)
    x_g, x_r = rng.binomial(n_g, p_g), rng.binomial(n_r, np.broadcast_to(base, (nights, replays)))
    state, first = initial_state(replays), np.full(replays, -1)
    from_night = at if shift else 0
    for t in range(nights):
        state, out = step(state, x_g[t], n_g[t], x_r[t], n_r[t], settings)
        first = np.where((first < 0) & out["crossed"] & (t >= from_night), t, first)
    total = [
        np.cumsum(np.vstack([np.zeros((1, replays)), a]), axis=0) for a in (x_g, n_g, x_r, n_r)
    ]
    # Only the first rejection counts: each night tests the replays not yet rejected, from
    # ``from_night`` on (the exact test costs milliseconds per replay; the result is the same as
    # testing every replay every night).
    window = np.full(window_replays or replays, -1)
    for t in range(from_night, nights):
        pending = np.flatnonzero(window < 0)
        if not len(pending):
            break
        lo = max(0, t - 29)
        x_group, n_group, x_reference, n_reference = (
            c[t + 1, pending] - c[lo, pending] for c in total
        )
        _, p_value = unfairness_test(x_group, n_group, x_reference, n_reference, tol)
        window[pending[p_value < 0.05]] = t
    return first, window, state


def _upper(count, n, level=0.999):
    return stats.binomtest(int(count), n).proportion_ci(level).high


@pytest.mark.slow
@pytest.mark.parametrize("tol, drift", [(0.0, False), (0.05, False), (0.0, True)])
def test_fair_year_false_alarm_is_at_most_alpha(tol, drift):
    """A fair model (on the null boundary U = tol, with drifting base rates too) watched every
    night for a year: P(any alarm) ≤ α within Monte Carlo error; the fixed-window nightly test
    at the same α alarms far more often."""
    replays = 300
    first, window, _ = _simulate(
        0.0, replays, 365, seed=11, tol=tol, drift=drift, window_replays=100
    )
    alarms = (first >= 0).sum()
    assert stats.binomtest(int(alarms), replays, 0.05, alternative="greater").pvalue > 0.001
    assert (window >= 0).mean() > 0.5


def test_injected_shift_is_detected_within_weeks():
    """A 0.10 shift in a 5% group on night 100: detected in every replay, median delay within
    three times the (invalid) fixed-window test's."""
    first, window, _ = _simulate(0.10, 100, 160, seed=5)
    assert (first >= 100).all()
    delay, window_delay = first - 100, np.where(window >= 0, window - 100, 60)
    assert np.median(delay) <= 3 * max(np.median(window_delay), 1)
    assert np.median(delay) < 25


@pytest.mark.parametrize("u, share", [(0.0, 0.05), (0.1, 0.3), (-0.25, 0.5)])
def test_confidence_sequence_covers_at_all_nights(u, share):
    """Time-uniform coverage: P(U outside the CS at some night) ≤ α (simulation), and the CS
    narrows as increments accumulate."""
    rng = np.random.default_rng(3)
    replays, nights, p_r = 300, 200, 0.4
    settings = Settings(alpha=0.1)
    state = initial_state(replays)
    missed = np.zeros(replays, bool)
    for _ in range(nights):
        n_g = rng.binomial(200, share, replays)
        n_r = 200 - n_g
        state, _ = step(
            state, rng.binomial(n_g, p_r + u), n_g, rng.binomial(n_r, p_r), n_r, settings
        )
        missed |= (state["cs_low"] > u) | (state["cs_high"] < u)
    assert stats.binomtest(int(missed.sum()), replays, 0.1, alternative="greater").pvalue > 0.001
    assert np.median(state["cs_high"] - state["cs_low"]) < 0.1


def test_cs_capital_is_the_product_of_nightly_bounds():
    """The CS's running sums reproduce Σ_s k_s[λ_s(D̂_s − u) − γ_s λ_s²(σ̂²_s + (D̂_s − u)²)]."""
    from biasaudit.tasks.monitor import _fan_factor, cs_bet

    rng = np.random.default_rng(0)
    state, settings, direct = initial_state(1), Settings(), np.zeros(len(GRID))
    for _ in range(30):
        n_g, n_r = rng.integers(0, 40), rng.integers(1, 90)
        x_g, x_r = rng.binomial(n_g, 0.3), rng.binomial(n_r, 0.5)
        k, d, var = pair_moments(x_g, n_g, x_r, n_r)
        lam = cs_bet(state["n_pairs"], state["s_d"], state["s_v"], k, 0.05)[0]
        gamma = _fan_factor(2 * lam)
        direct += k * (lam * (d - GRID) - gamma * lam**2 * (var + (d - GRID) ** 2))
        state, _ = step(state, [x_g], [n_g], [x_r], [n_r], settings)
    up, _ = cs_log_capital(state)
    assert np.allclose(up[0], direct)


COARSE = np.array([-1.0, 0.0, 1.0])  # the confidence sequence plays no part in alarms


def _e_bh_brute(e, alpha):
    k = len(e)
    ranked = sorted(e, reverse=True)
    k_star = max([j for j in range(1, k + 1) if ranked[j - 1] >= k / (alpha * j)], default=0)
    threshold = ranked[k_star - 1] if k_star else np.inf
    chosen = np.argsort(-np.asarray(e), kind="stable")[:k_star]
    out = np.zeros(k, bool)
    out[chosen] = True
    assert all(e[i] >= threshold for i in chosen)
    return out


def test_e_bh_matches_its_definition():
    """e-BH rejects the k* largest e-values, k* = max{k : e_(k) ≥ K/(αk)} (brute force)."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        e = np.exp(rng.normal(1.0, 2.0, size=rng.integers(1, 15)))
        assert (e_bh(e, 0.1) == _e_bh_brute(list(e), 0.1)).all()
    assert e_bh(np.array([np.nan, 100.0, 1.0]), 0.05).tolist() == [False, True, False]


def test_weighted_e_bh_is_e_bh_of_the_weighted_e_values():
    """Weighted e-BH: e-BH of K·v_k·e_k/Σv (brute force); equal weights are e-BH itself, and a
    weight of 0 keeps a comparison out of the family (never alarmed, not counted in K)."""
    rng = np.random.default_rng(2)
    for _ in range(300):
        size = int(rng.integers(1, 15))
        e, v = np.exp(rng.normal(1.0, 2.0, size)), rng.random(size) + 0.01
        v[rng.random(size) < 0.2] = 0.0
        kept = v > 0
        expected = np.zeros(size, bool)
        if kept.any():
            scaled = e[kept] * v[kept] * kept.sum() / v[kept].sum()
            expected[kept] = _e_bh_brute(list(scaled), 0.1)
        assert (e_bh(e, 0.1, v) == expected).all()
        assert (e_bh(e, 0.1, np.full(size, 3.0)) == e_bh(e, 0.1)).all()
    # a lone e-value among two needs 2/0.05 = 40; with weights 3 and 1 the first needs 40/1.5
    assert e_bh(np.array([30.0, 1.0]), 0.05).tolist() == [False, False]
    assert e_bh(np.array([30.0, 1.0]), 0.05, np.array([3.0, 1.0])).tolist() == [True, False]


def test_e_bh_weight_is_fixed_at_the_first_night_with_pairs():
    """v = 1/k of the first night with pairs (k = min(n_g, n_r)), 0 before, then kept."""
    settings = Settings(tolerance=0.05, alpha=0.05)
    state = initial_state(2)
    nights = [([0, 3], [0, 9], [0, 40], [0, 100]), ([2, 5], [4, 25], [30, 40], [90, 100])]
    weights = []
    for x_g, n_g, x_r, n_r in nights + [([5, 50], [30, 400], [30, 40], [90, 100])]:
        state, _ = step(state, x_g, n_g, x_r, n_r, settings)
        weights.append(state["ebh_weight"].tolist())
    assert weights == [[0.0, 1 / 9], [0.25, 1 / 9], [0.25, 1 / 9]]


@pytest.mark.slow
def test_weighted_alarms_stay_at_most_alpha_on_the_null_boundary():
    """Six groups against the rest at equal rates and tolerance 0 (every comparison on the null's
    boundary, where e-processes are closest to martingales), two of them 5% groups whose weights
    are the largest: P(any alarm in a year) ≤ α within Monte Carlo error."""
    rng = np.random.default_rng(21)
    replays, nights, alpha = 400, 365, 0.05
    shares = np.array([0.4, 0.25, 0.15, 0.1, 0.05, 0.05])
    settings = Settings(tolerance=0.0, alpha=alpha)
    state = initial_state(replays * 6)
    alarmed = np.zeros(replays, bool)
    for _ in range(nights):
        n = rng.multinomial(600, shares, size=replays)
        x = rng.binomial(n, 0.3)
        x_r, n_r = x.sum(1, keepdims=True) - x, n.sum(1, keepdims=True) - n
        entry = family_entry(state, families=replays)
        state, out = step(
            state, x.ravel(), n.ravel(), x_r.ravel(), n_r.ravel(), settings, entry=entry
        )
        weights = state["ebh_weight"].reshape(replays, 6)
        alarmed |= e_bh(out["e_process"].reshape(replays, 6), alpha, weights).any(1)
    assert weights[:, 4:].mean() > 2 * weights[:, 0].mean()
    assert stats.binomtest(int(alarmed.sum()), replays, alpha, "greater").pvalue > 0.001


@pytest.mark.slow
def test_comparisons_joining_late_keep_any_alarm_at_most_alpha():
    """Six fair comparisons joining the family 100 nights apart, each with a quarter of the pairs
    of the one before (its weight four times larger), on the null's boundary with the product's
    bets: P(any alarm) ≤ α. Joining at wealth 1 instead of min(1, S) (family_entry) is checked
    too: it refreshes S toward 1 at every join."""
    rng = np.random.default_rng(9)
    replays, joins, apart, alpha = 300, 6, 100, 0.05
    settings = Settings(tolerance=0.0, alpha=alpha)
    pairs = np.floor(1000.0 / 4.0 ** np.arange(joins)) * np.ones((replays, 1))
    alarmed = {True: np.zeros(replays, bool), False: np.zeros(replays, bool)}
    for entering in (True, False):
        state = initial_state(replays * joins)
        for t in range(joins * apart):
            joined = t >= np.arange(joins) * apart
            n = np.where(joined, np.maximum(pairs, 1.0), 0.0) * np.ones((replays, 1))
            n_r = np.where(joined, 5 * n, 0.0)
            x, x_r = rng.binomial(n.astype(int), 0.5), rng.binomial(n_r.astype(int), 0.5)
            entry = family_entry(state, families=replays) if entering else 0.0
            state, out = step(
                state, x.ravel(), n.ravel(), x_r.ravel(), n_r.ravel(), settings, COARSE, entry
            )
            weights = state["ebh_weight"].reshape(replays, joins)
            e = np.where(joined, out["e_process"].reshape(replays, joins), np.nan)
            alarmed[entering] |= e_bh(e, alpha, weights).any(1)
    print({k: int(v.sum()) for k, v in alarmed.items()})
    assert stats.binomtest(int(alarmed[True].sum()), replays, alpha, "greater").pvalue > 0.001


def test_e_bh_controls_fdr_of_monitor_alarms_under_dependence():
    """Five groups compared with one named reference share its data (dependent e-processes):
    the FDR of the nightly e-BH alarms stays ≤ α at every night (simulation: 3 null groups,
    2 shifted)."""
    rng = np.random.default_rng(8)
    replays, nights, alpha = 200, 120, 0.1
    shares = np.array([0.3, 0.25, 0.2, 0.1, 0.1, 0.05])  # group 0 is the reference
    rates = np.array([0.3, 0.3, 0.3, 0.3, 0.4, 0.45])
    null = np.array([True, True, True, False, False])
    settings = Settings(tolerance=0.0, alpha=alpha)
    state = initial_state(replays * 5)
    fdp = np.zeros((nights, replays))
    for t in range(nights):
        n = rng.multinomial(600, shares, size=replays)
        x = rng.binomial(n, rates)
        x_r, n_r = np.repeat(x[:, :1], 5, axis=1), np.repeat(n[:, :1], 5, axis=1)
        entry = family_entry(state, families=replays)
        state, out = step(
            state,
            x[:, 1:].ravel(),
            n[:, 1:].ravel(),
            x_r.ravel(),
            n_r.ravel(),
            settings,
            entry=entry,
        )
        weights = state["ebh_weight"].reshape(replays, 5)
        alarm = e_bh(out["e_process"].reshape(replays, 5), alpha, weights)
        fdp[t] = (alarm & null).sum(1) / np.maximum(alarm.sum(1), 1)
    fdr = fdp.mean(axis=1)
    assert fdr.max() <= alpha + 3 * np.sqrt(alpha / replays)
    assert alarm[:, 4].mean() > 0.8  # the 0.15 shift is found


def test_a_rejoining_mirror_enters_at_last_nights_family_mean():
    """advance: a row kept out of the family last night (a mirror) that is in it tonight starts
    from min(1, S), S the weighted mean of last night's members' wealth, whatever its own wealth
    (here e³): with members of wealth e⁻¹ and e⁻², weights 0.5 and 0.25, S = 0.290."""
    state = initial_state(3)
    state["ebh_weight"] = np.array([0.5, 0.25, 0.25])
    for side in ("up", "down"):
        state[f"log_m_{side}"] = np.array([-1.0, -2.0, 3.0])
    counts = np.zeros((3, 4))  # no pairs tonight: every e-value is 1
    everyone = np.ones(3, bool)
    _, out = advance(
        state,
        counts,
        everyone,
        Settings(),
        mirror=np.zeros(3, bool),
        members=np.array([True, True, False]),
    )
    mean = (0.5 * np.exp(-1) + 0.25 * np.exp(-2)) / 0.75
    np.testing.assert_allclose(out["e_process"], [np.exp(-1), np.exp(-2), mean], rtol=1e-12)
    # still a mirror tonight: out of the family (no alarm), its wealth its own
    _, out = advance(
        state,
        counts,
        everyone,
        Settings(),
        mirror=np.array([False, False, True]),
        members=np.array([True, True, False]),
    )
    assert out["e_process"][2] == pytest.approx(np.exp(3.0)) and not out["alarm"][2]
