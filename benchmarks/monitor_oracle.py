"""What any e-process could reach on monitor_power.py's hardest goal: the likelihood-ratio oracle.

The scenario of benchmarks/monitor_power.py (24 comparisons; the TPR of a 5% group drops from
0.80 to 0.70 on night 180, tolerance 0.05, α = 0.05) at a given volume. e-BH across m = 24
comparisons alarms a lone comparison when its e-process reaches m/α = 480, so the question is
P(sup over nights 180..364 of the e-process ≥ 480). Each night brings, for the changed group and
the rest, x successes among n positives (the night's counts, x_g, n_g, x_r, n_r, as
monitor_power.simulate draws them).

*Oracle*: the likelihood ratio of the true rates q = (p_g, p_r) = (0.70, 0.80) against the point
p* = (b* − tol, b*) of the null boundary closest to q in Kullback-Leibler divergence given the
night's sizes, n_g·KL(p_g‖b − tol) + n_r·KL(p_r‖b) minimal at b* (the reverse information
projection; Grünwald, de Heide and Koolen 2024, "Safe testing"), multiplied over the nights from
the change on. The reference rate is a nuisance: b* lies a little below p_r, where the group's
side of the ratio grows less. Under any null (a, b) with b − a ≤ tol,
log E[q/p*] = n_g·log(1 + (a − a*)c_g) + n_r·log(1 + (b − b*)c_r), c = (p − p*)/(p*(1 − p*)),
is concave along the boundary with zero slope at p* (the minimum's condition) and falls inside
it, so each night's ratio is an e-value given the past and the night's sizes, and the product an
e-process; and as q/p* for a null p*, it has the largest expected logarithm under q of all
e-values (Gibbs' inequality): the growth-optimal e-process, knowing the change night and rates.
Beside it: the same ratio against p = (p_r − tol, p_r), the reference's rate known (not an
e-value for the composite null: what the nuisance costs); ratios designed for a larger or smaller
drop g (q_g = (p_r − g, p_r), its own p*; valid for every g, scored on the true rates); and the
ceiling of P(sup ≥ 480 within the horizon) over all e-processes that know the change night,
rates and horizon: {sup M ≥ 480} is a test of level 1/480 = α/m (Ville), so no e-process beats
the Neyman-Pearson test of q against the product of the nights' p* at that level (its critical
value by importance sampling, level = E_q[1{L ≥ c}/L]).

*Product*: tasks.monitor's nightly e-value (log_e_value) from the change night with the constant
bet of largest expected logarithm at the expected counts, all the wealth on that side or half of
it as in M = (M+ + M−)/2 (monitor_power.betting_oracle); the changed comparison's e-process of
tasks.monitor.step alone (its defaults, from night 0, on the same draws); and its e-BH alarm in
the 24-comparison family (monitor_power.simulate, other draws; with --family).

    .venv/bin/python benchmarks/monitor_oracle.py [--replays 8000] [--seed 0] [--volume 300] [--family]
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from biasaudit.tasks.monitor import Settings, initial_state, log_e_value, log_wealth, step

_PATH = Path(__file__).resolve().parent / "monitor_power.py"
_SPEC = importlib.util.spec_from_file_location("monitor_power", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
power = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(power)

SHARES = power.FAMILIES[24]
M = 24
THRESHOLD = np.log(M / power.ALPHA)  # log 480
DESIGNS = (0.075, 0.11, 0.12, 0.13, 0.14, 0.15, 0.20)  # drops g the ratio is designed for
P_R = power.TPR
P_G = power.TPR - power.DROP
TOL = power.TOLERANCE
GRID = np.array([-1.0, 0.0, 1.0])


def kl(p, q):
    """KL(Bernoulli(p)‖Bernoulli(q))."""
    return p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))


def closest_null(n_g, n_r, p_g, p_r, tol=TOL, steps=60):
    """b* minimising n_g·KL(p_g‖b − tol) + n_r·KL(p_r‖b) over b ∈ (tol, 1) (bisection on the
    derivative, increasing in b); the null point is (b* − tol, b*)."""
    low, high = np.full(np.shape(n_g), tol + 1e-12), np.full(np.shape(n_g), 1 - 1e-12)
    for _ in range(steps):
        b = (low + high) / 2
        a = b - tol
        slope = n_g * (a - p_g) / (a * (1 - a)) + n_r * (b - p_r) / (b * (1 - b))
        low, high = np.where(slope < 0, b, low), np.where(slope < 0, high, b)
    return (low + high) / 2


def log_ratio(x_g, n_g, x_r, n_r, q, p):
    """log of the likelihood ratio of rates q = (q_g, q_r) against p = (p_g, p_r)."""
    (q_g, q_r), (p_g, p_r) = q, p
    return (
        x_g * np.log(q_g / p_g)
        + (n_g - x_g) * np.log((1 - q_g) / (1 - p_g))
        + x_r * np.log(q_r / p_r)
        + (n_r - x_r) * np.log((1 - q_r) / (1 - p_r))
    )


def simulate(volume: int, replays: int, seed: int) -> dict:
    """Per replay: sup over nights 180..364 of every log e-process, and the log ratios at 364."""
    rng = np.random.default_rng(seed)
    target = power.changed(SHARES)
    settings = Settings(tolerance=TOL, alpha=power.ALPHA)
    state = initial_state(replays)
    positives = volume * SHARES * power.PREVALENCE
    rest = positives.sum() - positives[target]
    expected = np.array([P_G * positives[target], positives[target], P_R * rest, rest])[:, None]
    lams = np.linspace(0.01, 0.75, 75)[None, :]
    best = lams[0, np.argmax(log_e_value(*expected, lams, TOL, -1))]
    names = [
        "oracle",
        "known reference",
        *(f"design {g}" for g in DESIGNS),
        "product's e-value, best bet",
        "the same, half the wealth",
        "product",
    ]
    log_e = {name: np.zeros(replays) for name in names[:-2]}
    sup = {name: np.full(replays, -np.inf) for name in names}
    crossed_20 = np.zeros(replays, bool)
    for t in range(power.NIGHTS):
        _, tpr, _ = power.rates("change", SHARES, t)
        n = rng.multinomial(volume, SHARES, size=replays)
        positive = rng.binomial(n, power.PREVALENCE)
        tp = rng.binomial(positive, tpr)
        x_g, n_g = tp[:, target], positive[:, target]
        x_r, n_r = tp.sum(1) - x_g, positive.sum(1) - n_g
        state, _ = step(state, x_g, n_g, x_r, n_r, settings, grid=GRID)
        if t < power.CHANGE:
            continue
        log_m = log_wealth(state["log_m_up"], state["log_m_down"])
        sup["product"] = np.maximum(sup["product"], log_m)
        crossed_20 |= log_m >= np.log(1 / power.ALPHA)
        b = closest_null(n_g, n_r, P_G, P_R)
        log_e["oracle"] += log_ratio(x_g, n_g, x_r, n_r, (P_G, P_R), (b - TOL, b))
        log_e["known reference"] += log_ratio(x_g, n_g, x_r, n_r, (P_G, P_R), (P_R - TOL, P_R))
        for g in DESIGNS:
            b = closest_null(n_g, n_r, P_R - g, P_R)
            log_e[f"design {g}"] += log_ratio(x_g, n_g, x_r, n_r, (P_R - g, P_R), (b - TOL, b))
        log_e["product's e-value, best bet"] += log_e_value(x_g, n_g, x_r, n_r, best, TOL, -1)
        for name, value in log_e.items():
            sup[name] = np.maximum(sup[name], value)
        half = np.logaddexp(0.0, log_e["product's e-value, best bet"]) - np.log(2)
        sup["the same, half the wealth"] = np.maximum(sup["the same, half the wealth"], half)
    return {"sup": sup, "final": log_e, "crossed_20": crossed_20, "best bet": float(best)}


def neyman_pearson(final_log_ratio: np.ndarray, level: float) -> float:
    """Power of {L ≥ c} with P_{p*}(L ≥ c) = level, from draws of log L under q: the null
    probability of the top draws is the mean of 1{L ≥ c}/L (importance sampling)."""
    order = np.sort(final_log_ratio)[::-1]
    null_mass = np.cumsum(np.exp(-order)) / len(order)
    return float(np.searchsorted(null_mass, level, side="right") / len(order))


def normal_theory(volume: int) -> dict:
    """Expected log ratio of the oracle at the expected counts, and the crossing probability of a
    Brownian motion of drift μ and variance 2μ a night (log ratio's moments near the null) over
    the horizon: P(sup ≥ a) = Φ((μt − a)/σ√t) + e^{2μa/σ²}Φ((−a − μt)/σ√t)."""
    share = SHARES[power.changed(SHARES)]
    n_g, n_r = volume * share * power.PREVALENCE, volume * (1 - share) * power.PREVALENCE
    b = closest_null(np.array(n_g), np.array(n_r), P_G, P_R)
    drift = n_g * kl(P_G, b - TOL) + n_r * kl(P_R, b)
    nights = power.NIGHTS - power.CHANGE
    mean, sd = drift * nights, np.sqrt(2 * drift * nights)
    crossing = stats.norm.cdf((mean - THRESHOLD) / sd) + np.exp(THRESHOLD) * stats.norm.cdf(
        (-THRESHOLD - mean) / sd
    )
    var = P_G * (1 - P_G) / n_g + P_R * (1 - P_R) / n_r
    z = stats.norm.isf(power.ALPHA / M)
    return {
        "b*": float(b),
        "drift": float(drift),
        "known-reference drift": float(n_g * kl(P_G, P_R - TOL)),
        "mean": float(mean),
        "crossing": float(crossing),
        "np one-sided": float(stats.norm.sf(z - (P_R - P_G - TOL) / np.sqrt(var / nights))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replays", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--volume", type=int, default=300)
    parser.add_argument("--family", action="store_true", help="also the 24-comparison e-BH alarm")
    args = parser.parse_args()
    begin = time.perf_counter()
    result = simulate(args.volume, args.replays, args.seed)
    rows = []
    for name, value in result["sup"].items():
        hit = float((value >= THRESHOLD).mean())
        final = result["final"].get(name)
        rows.append(
            (
                name,
                hit,
                np.sqrt(hit * (1 - hit) / args.replays),
                np.nan if final is None else float(np.mean(final)),
                np.nan if final is None else float(np.median(final)),
            )
        )
    columns = ["e-process", "P(sup ≥ 480)", "s.e.", "mean log e at 364", "median"]
    print(
        f"{args.volume} a night, {args.replays} years, seed {args.seed}, best bet {result['best bet']}"
    )
    print(pd.DataFrame(rows, columns=columns).to_string(index=False, float_format="{:.4f}".format))
    ceiling = neyman_pearson(result["final"]["oracle"], power.ALPHA / M)
    print(f"Neyman-Pearson ceiling at level α/m, horizon 185: {ceiling:.4f}")
    both = (result["sup"]["oracle"] >= THRESHOLD) & (result["sup"]["product"] >= THRESHOLD)
    print(
        f"product ≥ 1/α: {result['crossed_20'].mean():.4f}; years both oracle and product reach "
        f"480: {both.mean():.4f}; log 480 = {THRESHOLD:.3f}"
    )
    theory = normal_theory(args.volume)
    print("normal theory:", {k: round(v, 4) for k, v in theory.items()})
    if args.family:
        first = power.simulate("change", args.volume, args.replays, args.seed + 1)
        alarmed = float((first["alarm"] >= power.CHANGE).mean())
        print(
            f"product, e-BH over 24: alarmed in 185 {alarmed:.4f} "
            f"(s.e. {np.sqrt(alarmed * (1 - alarmed) / args.replays):.4f})"
        )
    print(f"{time.perf_counter() - begin:.0f} s")


if __name__ == "__main__":
    main()
