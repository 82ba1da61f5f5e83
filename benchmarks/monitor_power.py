"""False alarms and power of the nightly monitor (tasks/monitor.py) on the configurations users run.

A model scored every night for 365 nights; groups of shares 30/20/15/10/10/5/5/5 % (24
comparisons: each group against the rest of the population for TPR, FPR and PPR), prevalence
0.27, TPR 0.80, FPR 0.10, tolerance 0.05, α = 0.05; alarms by e-BH across the comparisons each
night, as tasks.monitor.advance raises them.

(a) Fair years, P(any alarm in the year) with its standard error: stationary rates; drifting
    rates (prevalence, TPR and FPR drift over the year while one group's TPR and another's FPR
    swing within ±0.045 of the rest, inside the tolerance); delayed labels (TPR and FPR counted
    30 nights after the prediction, 20% of the labels never arriving).
(b) Power: the TPR of a 5% group drops by 0.10 from night 180, at 1,500 and at 300 predictions a
    night: delay to that comparison's first alarm (median, p10, p90; never alarmed = infinite),
    share of years alarmed within the remaining 185 nights, share whose own e-process reached
    1/α; beside it the oracle: one fixed-sample test that knows the change night, at level
    α/m two-sided with the true rates (post-change nights for power 1/2; power in 185 nights),
    and the betting oracle: the same e-process that knows the change night and bets the
    growth-optimal λ for the true rates from it (alarm at m/α, a lone comparison's e-BH level).
    Also with 12 and 30 comparisons (4 and 10 groups, a 5% group changing).

    .venv/bin/python benchmarks/monitor_power.py [--replays 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from collections import deque

import numpy as np
import pandas as pd
from scipy import stats

from biasaudit.tasks.monitor import (
    Settings,
    e_bh,
    family_entry,
    initial_state,
    log_e_value,
    step,
)

FAMILIES = {  # comparisons: group shares (the first 5% group is the one that changes)
    12: np.array([0.55, 0.25, 0.15, 0.05]),
    24: np.array([0.30, 0.20, 0.15, 0.10, 0.10, 0.05, 0.05, 0.05]),
    30: np.array([0.25, 0.20, 0.15, 0.10, 0.08, 0.07, 0.05, 0.05, 0.03, 0.02]),
}
PREVALENCE, TPR, FPR = 0.27, 0.80, 0.10
NIGHTS, CHANGE, DROP, TOLERANCE, ALPHA = 365, 180, 0.10, 0.05, 0.05
DELAY, LABELLED = 30, 0.8
GRID = np.array([-1.0, 0.0, 1.0])  # the confidence sequence plays no part in alarms


def rates(case: str, shares: np.ndarray, t: int):
    """Prevalence, TPR and FPR of every group on night ``t``."""
    groups = len(shares)
    prevalence, tpr, fpr = np.full(groups, PREVALENCE), np.full(groups, TPR), np.full(groups, FPR)
    if case == "drifting":
        prevalence += 0.08 * np.sin(2 * np.pi * t / 365)
        tpr += 0.08 * np.sin(2 * np.pi * t / 91)
        fpr += 0.05 * np.sin(2 * np.pi * t / 182)
        tpr[changed(shares)] += 0.045 * np.sin(2 * np.pi * t / 60)
        fpr[1] += 0.045 * np.cos(2 * np.pi * t / 45)
    if case == "change" and t >= CHANGE:
        tpr[changed(shares)] -= DROP
    return prevalence, tpr, fpr


def changed(shares: np.ndarray) -> int:
    return int(np.flatnonzero(shares == 0.05)[0])


def _against_rest(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """(replays × groups × 4) x_g, n_g, x_r, n_r of each group against the rest."""
    rest_x, rest_n = x.sum(-1, keepdims=True) - x, n.sum(-1, keepdims=True) - n
    return np.stack([x, n, rest_x, rest_n], -1)


def simulate(case: str, volume: int, replays: int, seed: int, comparisons: int = 24) -> dict:
    """First night (−1: none) of: any alarm; the changed group's TPR alarm; its e-process ≥ 1/α."""
    rng = np.random.default_rng(seed)
    shares = FAMILIES[comparisons]
    groups = len(shares)
    settings = Settings(tolerance=TOLERANCE, alpha=ALPHA)
    state = initial_state(replays * comparisons)
    pending: deque = deque()
    active = np.zeros(comparisons, bool)
    first = {name: np.full(replays, -1) for name in ("any", "alarm", "crossed")}
    target = changed(shares)  # TPR comparisons come first
    for t in range(NIGHTS):
        prevalence, tpr, fpr = rates(case, shares, t)
        n = rng.multinomial(volume, shares, size=replays)
        positive = rng.binomial(n, prevalence)
        tp, fp = rng.binomial(positive, tpr), rng.binomial(n - positive, fpr)
        selection = _against_rest(tp + fp, n)
        outcomes = (tp, positive, fp, n - positive)
        if case == "delayed":
            labelled_tp = rng.binomial(tp, LABELLED)
            labelled_pos = labelled_tp + rng.binomial(positive - tp, LABELLED)
            labelled_fp = rng.binomial(fp, LABELLED)
            labelled_neg = labelled_fp + rng.binomial(n - positive - fp, LABELLED)
            pending.append((labelled_tp, labelled_pos, labelled_fp, labelled_neg))
            outcomes = pending.popleft() if t >= DELAY else None
        if outcomes is None:
            errors = np.zeros((replays, 2 * groups, 4))
        else:
            tp_, pos_, fp_, neg_ = outcomes
            errors = np.concatenate([_against_rest(tp_, pos_), _against_rest(fp_, neg_)], 1)
            active[: 2 * groups] = True
        active[2 * groups :] = True
        night = np.concatenate([errors, selection], 1).reshape(-1, 4)
        entry = family_entry(state, families=replays)
        state, out = step(state, *night.T, settings, grid=GRID, entry=entry)
        e_process = np.where(active, out["e_process"].reshape(replays, comparisons), np.nan)
        alarm = e_bh(e_process, ALPHA, state["ebh_weight"].reshape(replays, comparisons))
        for name, flags in (
            ("any", alarm.any(1)),
            ("alarm", alarm[:, target]),
            ("crossed", e_process[:, target] >= 1 / ALPHA),
        ):
            first[name] = np.where((first[name] < 0) & flags, t, first[name])
    return first


def oracle(volume: int, comparisons: int = 24) -> tuple[int, float]:
    """Post-change nights the oracle needs for power 1/2, and its power in NIGHTS − CHANGE."""
    shares = FAMILIES[comparisons]
    share = shares[changed(shares)]
    positives_g, positives_r = volume * share * PREVALENCE, volume * (1 - share) * PREVALENCE
    night_var = (TPR - DROP) * (1 - TPR + DROP) / positives_g + TPR * (1 - TPR) / positives_r
    z = stats.norm.isf(ALPHA / comparisons / 2)

    def power(nights):
        se = np.sqrt(night_var / nights)
        return stats.norm.sf(z - (DROP - TOLERANCE) / se) + stats.norm.cdf(
            -z - (DROP + TOLERANCE) / se
        )

    nights = np.arange(1, 2000)
    return int(nights[np.argmax(power(nights) >= 0.5)]), float(power(NIGHTS - CHANGE))


def betting_oracle(volume: int, replays: int, seed: int, comparisons: int = 24) -> np.ndarray:
    """Nights from the change to the betting oracle's alarm (inf: none within the year)."""
    rng = np.random.default_rng(seed)
    shares = FAMILIES[comparisons]
    target = changed(shares)
    _, tpr, _ = rates("change", shares, CHANGE)
    positives = volume * shares * PREVALENCE
    mean_g, rest = tpr[target] * positives[target], positives.sum() - positives[target]
    expected = np.array([mean_g, positives[target], TPR * rest, rest])[:, None]
    lams = np.linspace(0.01, 0.75, 75)[None, :]
    lam = lams[0, np.argmax(log_e_value(*expected, lams, TOLERANCE, -1))]
    log_wealth, delay = np.zeros(replays), np.full(replays, np.inf)
    for t in range(NIGHTS - CHANGE):
        n = rng.multinomial(volume, shares, size=replays)
        positive = rng.binomial(n, PREVALENCE)
        tp = rng.binomial(positive, tpr)
        x, m = tp[:, target], positive[:, target]
        log_wealth += log_e_value(x, m, tp.sum(1) - x, positive.sum(1) - m, lam, TOLERANCE, -1)
        e_process = (1 + np.exp(log_wealth)) / 2
        delay = np.where(np.isinf(delay) & (e_process >= comparisons / ALPHA), t, delay)
    return delay


def false_alarms(replays: int, seed: int) -> pd.DataFrame:
    rows = []
    for case in ("stationary", "drifting", "delayed"):
        for volume in (300, 1500):
            alarms = int((simulate(case, volume, replays, seed)["any"] >= 0).sum())
            rate = alarms / replays
            upper = stats.binomtest(alarms, replays).proportion_ci(0.95).high
            rows.append((case, volume, rate, np.sqrt(rate * (1 - rate) / replays), upper))
    columns = ["fair year", "a night", "P(any alarm)", "s.e.", "95% upper"]
    return pd.DataFrame(rows, columns=columns)


def power(replays: int, seed: int, comparisons: int) -> pd.DataFrame:
    rows = []
    for volume in (1500, 300):
        first = simulate("change", volume, replays, seed, comparisons)
        delay = np.where(first["alarm"] >= CHANGE, first["alarm"] - CHANGE, np.inf)
        early = ((first["alarm"] >= 0) & (first["alarm"] < CHANGE)).mean()
        need, oracle_power = oracle(volume, comparisons)
        ideal = betting_oracle(volume, replays, seed, comparisons)
        rows.append(
            (
                comparisons,
                volume,
                np.quantile(delay, 0.5, method="inverted_cdf"),
                np.quantile(delay, 0.1, method="inverted_cdf"),
                np.quantile(delay, 0.9, method="inverted_cdf"),
                np.isfinite(delay).mean(),
                (first["crossed"] >= CHANGE).mean(),
                early,
                need,
                oracle_power,
                np.quantile(ideal, 0.5, method="inverted_cdf"),
                np.isfinite(ideal).mean(),
            )
        )
    columns = [
        "comparisons",
        "a night",
        "median delay",
        "p10",
        "p90",
        "alarmed in 185",
        "own e ≥ 1/α",
        "before change",
        "oracle nights",
        "oracle power 185",
        "betting oracle median",
        "betting oracle in 185",
    ]
    return pd.DataFrame(rows, columns=columns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replays", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    begin = time.perf_counter()
    print(f"(a) fair years, {args.replays} replays each")
    print(
        false_alarms(args.replays, args.seed).to_string(index=False, float_format="{:.4f}".format)
    )
    table = pd.concat(
        [power(args.replays, args.seed + 1, m) for m in (24, 12, 30)], ignore_index=True
    )
    print(f"\n(b) TPR drop of {DROP} in a 5% group from night {CHANGE}")
    print(table.to_string(index=False, float_format="{:.3g}".format))
    print(f"\n{time.perf_counter() - begin:.0f} s")


if __name__ == "__main__":
    main()
