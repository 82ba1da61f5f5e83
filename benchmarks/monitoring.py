"""Anytime-valid nightly monitoring against today's fixed-window nightly test.

(a) A fair model watched for 365 nights: 1,000 predictions a night in five groups of shares
    55/25/10/5/5 %, selection rate 0.3 in every group; each group compared with the rest of the
    population, tolerance 0, α = 0.05. Probability of any false alarm in the year for the
    monitor (the 5% group's e-process crossing 1/α; e-BH alarms across the five comparisons) and
    for the fixed-window test (tasks.detection.unfairness_test on the last 30 nights, every
    night, at α; BH across the five comparisons, as the audit decides).
(b) The same with the 5% group's rate raised by 0.05, 0.10 or 0.20 from night 100: delay in
    nights from night 100 to the first alarm of that group at or after it (median and 90th
    percentile; a replay never alarmed counts as infinite).
(c) COMPAS replayed by compas_screening_date through biasaudit's monitor_frame (prediction =
    decile_score ≥ 5, outcome = two_year_recid known two years later): first alarm per comparison.
(d) Time of a year of replay of about 50 comparisons by monitor_frame.

    .venv/bin/python benchmarks/monitoring.py [--replays 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from biasaudit.schemas.results import COMPARISON_KEY
from biasaudit.tasks.detection import unfairness_test
from biasaudit.tasks.monitor import Settings, e_bh, family_entry, initial_state, step
from biasaudit.tasks.monitor_frame import monitor_frame

SHARES = np.array([0.55, 0.25, 0.10, 0.05, 0.05])
SMALL = 3  # index of the first 5% group
VOLUME, RATE, NIGHTS, SHIFT_NIGHT, WINDOW, ALPHA = 1000, 0.3, 365, 100, 30, 0.05
COMPAS = Path(__file__).resolve().parents[2] / "shared" / "data" / "compas-two-years.csv"


def simulate(shift: float, replays: int, rng: np.random.Generator, settings: Settings) -> dict:
    """First alarm night (−1: none) per replay of the 5% group, for each procedure."""
    groups = len(SHARES)
    n = rng.multinomial(VOLUME, SHARES, size=(NIGHTS, replays))  # night × replay × group
    rate = np.full((NIGHTS, 1, groups), RATE)
    rate[SHIFT_NIGHT:, 0, SMALL] += shift
    x = rng.binomial(n, rate)
    x_r, n_r = x.sum(-1, keepdims=True) - x, n.sum(-1, keepdims=True) - n
    state = initial_state(replays * groups)
    first = {k: np.full(replays, -1) for k in ("crossed", "e_bh", "window", "window_bh")}
    family_alarm = np.full(replays, -1)
    cum = [np.concatenate([np.zeros((1, replays, groups)), a.cumsum(0)]) for a in (x, n, x_r, n_r)]
    start = SHIFT_NIGHT if shift else 0

    def record(name, flags, t):
        first[name] = np.where((first[name] < 0) & flags & (t >= start), t, first[name])

    for t in range(NIGHTS):
        entry = family_entry(state, families=replays)
        state, out = step(
            state, x[t].ravel(), n[t].ravel(), x_r[t].ravel(), n_r[t].ravel(), settings, entry=entry
        )
        crossed = out["crossed"].reshape(replays, groups)
        weights = state["ebh_weight"].reshape(replays, groups)
        alarm = e_bh(out["e_process"].reshape(replays, groups), settings.alpha, weights)
        record("crossed", crossed[:, SMALL], t)
        record("e_bh", alarm[:, SMALL], t)
        family_alarm = np.where((family_alarm < 0) & alarm.any(1), t, family_alarm)
        lo = max(0, t + 1 - WINDOW)
        xg, ng, xr, nr = (c[t + 1] - c[lo] for c in cum)
        _, p = unfairness_test(xg, ng, xr, nr, settings.tolerance)
        record("window", p[:, SMALL] < ALPHA, t)
        record("window_bh", stats.false_discovery_control(p, axis=-1)[:, SMALL] < ALPHA, t)
    first["family_e_bh"] = family_alarm
    return first


def part_a_b(replays: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    settings = Settings(tolerance=0.0, alpha=ALPHA)
    begin = time.perf_counter()
    fair = simulate(0.0, replays, rng, settings)
    rows = []
    for name, first in fair.items():
        alarms = int((first >= 0).sum())
        ci = stats.binomtest(alarms, replays).proportion_ci(0.95)
        rows.append((name, alarms / replays, f"[{ci.low:.3f}, {ci.high:.3f}]"))
    print(f"(a) fair year, {replays} replays ({time.perf_counter() - begin:.0f} s)")
    print(
        pd.DataFrame(rows, columns=["procedure", "P(any alarm)", "95% CI"]).to_markdown(index=False)
    )
    rows = []
    for shift in (0.05, 0.10, 0.20):
        first = simulate(shift, replays, rng, settings)
        for name in ("crossed", "e_bh", "window", "window_bh"):
            delay = np.where(first[name] >= 0, first[name] - SHIFT_NIGHT, np.inf)
            rows.append(
                (shift, name, np.median(delay), np.quantile(delay, 0.9), np.isinf(delay).mean())
            )
    print(f"\n(b) shift in the 5% group from night {SHIFT_NIGHT}: delay in nights")
    table = pd.DataFrame(rows, columns=["shift", "procedure", "median", "p90", "never"])
    print(table.to_markdown(index=False))


def compas_frame() -> pd.DataFrame:
    data = pd.read_csv(COMPAS)
    return pd.DataFrame(
        {
            "predicted_at": pd.to_datetime(data["compas_screening_date"]),
            "race": data["race"],
            "sex": data["sex"],
            "y_pred": (data["decile_score"] >= 5).astype(int),
            "y_true": data["two_year_recid"].astype(float),
        }
    )


def part_c() -> None:
    frame = compas_frame()
    for tolerance in (0.0, 0.05):
        begin = time.perf_counter()
        result = monitor_frame(
            frame,
            attributes=["race", "sex"],
            reference_groups={"race": "Caucasian"},
            label_delay="730D",
            tolerance=tolerance,
        )
        seconds = time.perf_counter() - begin
        keys = COMPARISON_KEY
        last = result.sort_values("as_of").groupby(keys).tail(1).set_index(keys)
        first = result[result["alarm"]].groupby(keys)["as_of"].min().dt.date
        table = last[["nights", "denominator_group", "e_process", "cs_low", "cs_high"]].assign(
            first_alarm=first
        )
        table = table.drop(columns="denominator_group").sort_index()
        print(
            f"\n(c) COMPAS by screening date, nightly, label delay 730 days, tolerance {tolerance}:"
            f" {result['as_of'].nunique()} runs in {seconds:.1f} s"
        )
        print(table.reset_index().to_markdown(index=False, floatfmt=".3g"))


def part_d(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 365 * 1000
    frame = pd.DataFrame(
        {
            "predicted_at": pd.Timestamp("2025-01-01")
            + pd.to_timedelta(rng.uniform(0, 365, n), unit="D"),
            "race": rng.choice(list("abcdef"), n, p=[0.5, 0.2, 0.15, 0.1, 0.04, 0.01]),
            "sex": rng.choice(["f", "m"], n),
            "y_pred": rng.binomial(1, 0.3, n),
            "y_true": rng.binomial(1, 0.4, n).astype(float),
        }
    )
    begin = time.perf_counter()
    result = monitor_frame(
        frame, attributes=["race", "sex"], intersections=[["race", "sex"]], label_delay="7D"
    )
    seconds = time.perf_counter() - begin
    comparisons = result.groupby(["attribute", "group_name", "reference", "metric"]).ngroups
    print(
        f"\n(d) monitor_frame: {n:,} predictions, {result['as_of'].nunique()} nightly runs, "
        f"{comparisons} comparisons: {seconds:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replays", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    part_a_b(args.replays, args.seed)
    part_c()
    part_d(args.seed)


if __name__ == "__main__":
    main()
