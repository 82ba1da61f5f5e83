"""Calibration of every test and interval the product runs.

Sections (each prints a markdown table; benchmarks/results/calibration.md keeps the results and their meaning):

1. exact size of detection's two-sample test (tasks.twosample), by enumeration of every table, for
   every n from 1 to 200 (two groups of n) and groups of n vs 10n, over a grid of rates, at
   tolerance 0 and 0.05; beside it the size of the asymptotic Agresti-Caffo test it replaces;
2. fair and biased simulated audits with skewed groups (six groups from 55% to 0.5% of 5,000
   predictions, two sexes, their intersections; metrics tpr, fpr, ppr; every group tested,
   min_group_size 0): P(any flag), FDR and power of detection after Benjamini-Hochberg, at
   tolerance 0 and 0.05; and a fair model whose rejections are labelled 60% in one group and 30%
   in the others (PPR over every prediction);
3. planning's reported power against the Monte Carlo power of detection's test;
4. MATCH's size against an estimated reference, by the reference/group size ratio (the ratio
   MIN_REFERENCE_RATIO is chosen here), and with BH across a fair audit's MATCH tests;
5. run-to-run comparison (tasks.compare uses the same test at tolerance 0): size on two
   independent windows of a fair model;
6. coverage of the intervals: detection's HDI (frequentist coverage at fixed true rates) and the
   meta-metrics' double-corrected bootstrap interval with a tiny group at an extreme rate.

    python benchmarks/calibration.py [--audits 2000] [--seed 0] [--sections 1,2,3,4,5,6]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
from scipy import stats

from biasaudit.schemas.results import COMPARISON_KEY
from biasaudit.tasks.counts import cell_counts, comparison_pairs, with_complements
from biasaudit.tasks.detection import detect, hdi_difference, unfairness_test
from biasaudit.tasks.match import match_test
from biasaudit.tasks.metametrics import bootstrap_variance_interval
from biasaudit.tasks.multiplicity import bh_adjust
from biasaudit.tasks.planning import detection_power
from biasaudit.tasks.rates import comparison_rates
from biasaudit.tasks.twosample import statistic, two_sample_test
from biasaudit.tasks.twosample_power import exact_power, rejection_probability

ALPHA = 0.05
RATES = np.concatenate([[0.001, 0.005], np.linspace(0.01, 0.99, 99), [0.995, 0.999]])
RACE_SHARES = np.array([0.55, 0.20, 0.12, 0.08, 0.045, 0.005])
RACES = [f"r{i}" for i in range(len(RACE_SHARES))]


def worst_size(region: np.ndarray, u_tol: float) -> float:
    """max over the rate grid of P(reject) on H0's boundary (and at equal rates)."""
    worst = 0.0
    for p in RATES[1 - u_tol >= RATES]:
        pairs = [(p + u_tol, p), (p, p + u_tol)] if u_tol > 0 else [(p, p)]
        for p_a, p_b in pairs:
            worst = max(worst, float(rejection_probability(region, p_a, p_b)[0]))
    return worst


def worst_exact_size(n_a: int, n_b: int, u_tol: float) -> float:
    """worst_size of detection's test, by its exact power on H0's boundary (tasks.twosample_power
    .exact_power equals the sum over the region of its p-values: tests/test_twosample.py)."""
    worst = 0.0
    for p in RATES[1 - u_tol >= RATES]:
        pairs = [(p + u_tol, p), (p, p + u_tol)] if u_tol > 0 else [(p, p)]
        for p_a, p_b in pairs:
            worst = max(worst, exact_power(n_a, n_b, p_a, p_b, u_tol, ALPHA))
    return worst


def asymptotic_region(n_a: int, n_b: int, u_tol: float) -> np.ndarray:
    x_a = np.arange(n_a + 1.0)[:, None]
    x_b = np.arange(n_b + 1.0)[None, :]
    z = stats.norm.ppf(1 - ALPHA / 2)
    return (statistic(x_a, n_a, x_b, n_b, u_tol) >= z) | (statistic(x_b, n_b, x_a, n_a, u_tol) >= z)


def exact_sizes() -> pd.DataFrame:
    rows = []
    for u_tol in (0.0, 0.05):
        for n in range(1, 201):
            for ratio in (1, 10):
                if ratio == 10 and (n > 100 or n % 5 and n > 10):
                    continue
                n_b = ratio * n
                rows.append(
                    {
                        "tolerance": u_tol,
                        "n": n,
                        "reference": n_b,
                        "exact": worst_exact_size(n, n_b, u_tol),
                        "agresti-caffo": worst_size(asymptotic_region(n, n_b, u_tol), u_tol),
                    }
                )
    return pd.DataFrame(rows)


def cell_probabilities(fpr_shift: dict[str, float] | None = None) -> pd.DataFrame:
    """Finest cells (race, sex, y_true, y_pred) with their probabilities: prevalence 0.3, TPR 0.7,
    FPR 0.2 in every group (a fair model), FPR raised by ``fpr_shift`` in the named races."""
    rows = []
    for race, share in zip(RACES, RACE_SHARES):
        fpr = 0.2 + (fpr_shift or {}).get(race, 0.0)
        for sex in ("F", "M"):
            for y_true, p_y in ((1, 0.3), (0, 0.7)):
                positive = 0.7 if y_true else fpr
                for y_pred, p_pred in ((1, positive), (0, 1 - positive)):
                    rows.append((race, sex, y_true, y_pred, share * 0.5 * p_y * p_pred))
    return pd.DataFrame(rows, columns=["race", "sex", "y_true", "y_pred", "p"])


def simulated_counts(cells: pd.DataFrame, n: int, rng) -> pd.DataFrame:
    frame = cells.assign(n=rng.multinomial(n, cells["p"].to_numpy()))
    frame = frame[frame["n"] > 0].astype({"race": str, "sex": str})
    groups = cell_counts(frame, ["race", "sex"], [["race", "sex"]])
    count_columns = [c for c in groups.columns if c not in ("attribute", "group_name")]
    rest = (
        groups[count_columns].groupby(groups["attribute"]).transform("sum") - groups[count_columns]
    )
    keys = groups[["attribute", "group_name"]]
    return pd.concat(  # with_complements without the schema check (validated in tests)
        [
            keys.assign(subset="group").join(groups[count_columns]),
            keys.assign(subset="rest").join(rest),
        ],
        ignore_index=True,
    )


def flags(counts: pd.DataFrame, metrics, u_tol: float) -> pd.DataFrame:
    """Detection's decisions without its Bayesian summaries: the same rates (tasks.rates), the
    same test (tasks.twosample) and BH (tasks.multiplicity) as tasks.detection.detect."""
    rates = comparison_rates(*comparison_pairs(counts, {}), list(metrics))
    tested = rates["reason"].isna().to_numpy()
    p = np.full(len(rates), np.nan)
    _, p[tested], _ = two_sample_test(
        rates.loc[tested, "numerator_group"],
        rates.loc[tested, "denominator_group"],
        rates.loc[tested, "numerator_reference"],
        rates.loc[tested, "denominator_reference"],
        u_tol,
    )
    adjusted = bh_adjust(p)
    return rates.assign(p_value=p, flagged=tested & (adjusted < ALPHA))


def true_disparities(cells: pd.DataFrame, metrics, u_tol: float) -> pd.DataFrame:
    """Which (comparison, metric) hypotheses are false nulls (|true U| > tolerance)."""
    expected = simulated_counts_expected(cells)
    group, reference = comparison_pairs(expected, {})
    rates = comparison_rates(group, reference, metrics)
    u = (
        rates["numerator_group"] / rates["denominator_group"]
        - rates["numerator_reference"] / rates["denominator_reference"]
    )
    return rates[COMPARISON_KEY].assign(
        biased=(u.abs() > u_tol + 1e-12).to_numpy()
    )


def simulated_counts_expected(cells: pd.DataFrame) -> pd.DataFrame:
    """Counts of expected cell frequencies (×1e6, rounded): the true rates of every comparison."""
    frame = cells.assign(n=np.round(cells["p"] * 1e9).astype("int64"))
    return with_complements(cell_counts(frame, ["race", "sex"], [["race", "sex"]]))


def audits(cells, audits_n: int, u_tol: float, rng, metrics=("tpr", "fpr", "ppr")) -> dict:
    truth = true_disparities(cells, list(metrics), u_tol)
    keys = COMPARISON_KEY
    any_false, fdp, power, tests = 0, [], [], 0
    for _ in range(audits_n):
        counts = simulated_counts(cells, 5000, rng)
        result = flags(counts, metrics, u_tol).merge(truth, on=keys, how="left")
        tested = result["p_value"].notna()
        tests += int(tested.sum())
        flagged = result["flagged"].astype(bool)
        false = flagged & ~result["biased"].astype(bool)
        any_false += bool(false.any())
        fdp.append(false.sum() / max(flagged.sum(), 1))
        real = tested & result["biased"].astype(bool)
        if real.any():
            power.append(flagged[real].mean())
    return {
        "audits": audits_n,
        "tests per audit": tests / audits_n,
        "P(any false flag)": any_false / audits_n,
        "FDR": float(np.mean(fdp)),
        "mean power on real disparities": float(np.mean(power)) if power else float("nan"),
    }


def late_label_audits(audits_n: int, rng) -> dict:
    """A fair model (selection 0.28 everywhere) whose rejections are labelled 60% in r0, 30% in
    the other groups: flags of PPR, and of the PPR of labelled rows only (the old definition)."""
    flagged = flagged_labelled_only = 0
    for _ in range(audits_n):
        group = rng.choice(RACES[:3], 5000, p=[0.5, 0.3, 0.2])
        y_pred = (rng.random(5000) < 0.28).astype("int8")
        y_true = (rng.random(5000) < 0.4).astype(float)
        share = np.where(group == "r0", 0.6, 0.3)
        y_true[(y_pred == 0) & (rng.random(5000) >= share)] = np.nan
        frame = pd.DataFrame({"race": group, "y_true": y_true, "y_pred": y_pred})
        counts = with_complements(cell_counts(frame, ["race"], []))
        flagged += bool(detect(comparison_rates(*comparison_pairs(counts, {}), ["ppr"]), tolerance=0.0, alpha=ALPHA)["flagged"].any())
        labelled = with_complements(cell_counts(frame.dropna(), ["race"], []))
        flagged_labelled_only += bool(
            detect(comparison_rates(*comparison_pairs(labelled, {}), ["ppr"]), tolerance=0.0, alpha=ALPHA)["flagged"].any()
        )
    return {
        "audits": audits_n,
        "flagged (PPR over every prediction)": flagged / audits_n,
        "flagged (PPR of labelled rows only)": flagged_labelled_only / audits_n,
    }


def planning_check(rng, sims: int = 2000) -> pd.DataFrame:
    rows = []
    for d_g, d_r in ((5, 500), (20, 400), (50, 1000), (150, 1500), (400, 4000), (1500, 3500)):
        for gap in (0.05, 0.1, 0.2, 0.3):
            for u_tol in (0.0, 0.05):
                p_r, level = 0.3, 0.005
                p_g = min(p_r + gap + u_tol, 1.0)
                reported, method = detection_power(p_g, d_g, p_r, d_r, u_tol, level)
                x_g, x_r = rng.binomial(d_g, p_g, sims), rng.binomial(d_r, p_r, sims)
                tables, counts = np.unique(np.stack([x_g, x_r]), axis=1, return_counts=True)
                _, p = unfairness_test(tables[0], d_g, tables[1], d_r, u_tol)
                simulated = float(((p <= level) * counts).sum() / sims)
                rows.append(
                    {
                        "d_group": d_g,
                        "d_reference": d_r,
                        "gap beyond tolerance": gap,
                        "tolerance": u_tol,
                        "reported": float(reported),
                        "method": str(method),
                        "simulated": simulated,
                        "difference": float(reported) - simulated,
                    }
                )
    return pd.DataFrame(rows)


def match_sizes(rng, sims: int = 4000) -> pd.DataFrame:
    """Size of MATCH (ppr, binomial form) when the reference rate is estimated: a group of n and
    a reference of ratio·n from the same rate 0.3, the reference's estimate plugged in."""
    rows = []
    cells = ["tp", "fp", "fn", "tn"]
    for n in (20, 100, 400):
        for ratio in (0.8, 1, 5, 10, 20, 50, 100, 200):
            n_ref = int(ratio * n)
            draws = rng.multinomial(n, [0.15, 0.15, 0.2, 0.5], sims)
            ref = rng.multinomial(n_ref, [0.15, 0.15, 0.2, 0.5], sims)
            group = pd.DataFrame(draws, columns=cells)
            result = match_test(
                group, pd.DataFrame(ref, columns=cells), ["ppr"], min_reference_ratio=0
            )
            rows.append(
                {"n": n, "ratio": ratio, "size": float((result["p_value"] <= ALPHA).mean())}
            )
    return pd.DataFrame(rows)


def match_fair_audits(rng, audits_n: int) -> dict:
    cells = cell_probabilities()
    any_flag = tests = 0
    for _ in range(audits_n):
        counts = simulated_counts(cells, 5000, rng)
        result = match_test(*comparison_pairs(counts, {}), ["ppr", "acc", "tpr", "fpr"])
        tests += int(result["p_value"].notna().sum())
        any_flag += bool((result["p_adjusted"] <= ALPHA).any())
    return {
        "audits": audits_n,
        "MATCH tests per audit": tests / audits_n,
        "P(any MATCH flag after BH)": any_flag / audits_n,
    }


def comparison_size(rng, sims: int = 2000) -> dict:
    """Two disjoint windows of a fair model (same rates): how often compare's test says a rate
    moved (unfairness_test at tolerance 0, as tasks.compare calls it)."""
    rejected = 0
    for n in (5, 30, 200, 2000):
        before, after = rng.binomial(n, 0.3, sims), rng.binomial(n, 0.3, sims)
        tables, counts = np.unique(np.stack([after, before]), axis=1, return_counts=True)
        _, p = unfairness_test(tables[0], n, tables[1], n)
        rejected += ((p <= ALPHA) * counts).sum()
    return {"windows compared": 4 * sims, "size": rejected / (4 * sims)}


def hdi_coverage(rng, sims: int = 4000) -> pd.DataFrame:
    rows = []
    for n1, n2, p1, p2 in (
        (10, 10, 0.3, 0.3),
        (50, 500, 0.1, 0.2),
        (5, 2000, 0.02, 0.05),
        (300, 300, 0.5, 0.6),
        (3, 3, 0.9, 0.9),
    ):
        x1, x2 = rng.binomial(n1, p1, sims), rng.binomial(n2, p2, sims)
        low, high = hdi_difference(x2, n2, x1, n1, 0.95)
        truth = p2 - p1
        rows.append(
            {
                "n1": n1,
                "n2": n2,
                "p1": p1,
                "p2": p2,
                "coverage of the 95% HDI": float(((low <= truth) & (truth <= high)).mean()),
            }
        )
    return pd.DataFrame(rows)


def metametric_coverage(rng, replicates: int = 1000) -> pd.DataFrame:
    rows = []
    k = 100
    paper = (0.1 + 0.8 * np.arange(k) / (k - 1), np.round(10 + 80 * np.arange(k) / (k - 1)))
    scenarios = {"paper table 3 (unequal size, unequal perf)": paper}
    for tiny in (2, 3, 5):
        scenarios[f"tiny group of {tiny} at rate 0.05 among six"] = (
            np.array([0.05, 0.3, 0.3, 0.35, 0.4, 0.45]),
            np.array([tiny, 50, 100, 200, 400, 800]),
        )
        scenarios[f"tiny group of {tiny} at rate 0.95 among six"] = (
            np.array([0.95, 0.1, 0.2, 0.3, 0.4, 0.5]),
            np.array([tiny, 50, 100, 200, 400, 800]),
        )
    for name, (mu, sizes) in scenarios.items():
        sizes = sizes.astype(int)
        truth = mu.var(ddof=1)
        hits, widths = 0, []
        for _ in range(replicates):
            x = rng.binomial(sizes, mu)
            _, low, high = bootstrap_variance_interval(x, sizes, n_boot=500, seed=rng)
            hits += low <= truth <= high
            widths.append(high - low)
        rows.append(
            {
                "scenario": name,
                "true variance": truth,
                "coverage": hits / replicates,
                "median width": float(np.median(widths)),
            }
        )
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audits", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sections", default="1,2,3,4,5,6")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    sections = {int(s) for s in args.sections.split(",")}

    def show(title, table, started):
        print(f"\n### {title} ({time.perf_counter() - started:.0f} s)\n")
        frame = table if isinstance(table, pd.DataFrame) else pd.DataFrame([table])
        print(frame.to_markdown(index=False, floatfmt=".4g"))

    if 1 in sections:
        start = time.perf_counter()
        sizes = exact_sizes()
        summary = sizes.groupby(["tolerance", sizes["reference"] > sizes["n"]]).agg(
            n_values=("n", "size"), max_exact=("exact", "max"), max_ac=("agresti-caffo", "max")
        )
        show("1. exact size, max over rates, by tolerance and design", summary.reset_index(), start)
        pick = sizes[sizes["n"].isin([1, 2, 3, 5, 8, 10, 20, 50, 100, 200])]
        show("1b. exact size at chosen n", pick, start)
    if 2 in sections:
        for u_tol in (0.0, 0.05):
            start = time.perf_counter()
            show(
                f"2a. fair audits, tolerance {u_tol}",
                audits(cell_probabilities(), args.audits, u_tol, rng),
                start,
            )
            start = time.perf_counter()
            biased = cell_probabilities({"r1": 0.15, "r4": 0.15})
            show(
                f"2b. biased audits (FPR +0.15 in r1 and r4), tolerance {u_tol}",
                audits(biased, args.audits // 4, u_tol, rng),
                start,
            )
        start = time.perf_counter()
        show("2c. fair model, late labels", late_label_audits(args.audits // 4, rng), start)
    if 3 in sections:
        start = time.perf_counter()
        table = planning_check(rng)
        show(
            "3. planning power vs Monte Carlo of detection's test (2,000 audits each)", table, start
        )
        print(f"\nmax |reported − simulated| = {table['difference'].abs().max():.3f}")
    if 4 in sections:
        start = time.perf_counter()
        show(
            "4a. MATCH size by reference/group ratio",
            match_sizes(rng).pivot(index="ratio", columns="n", values="size").reset_index(),
            start,
        )
        start = time.perf_counter()
        show(
            "4b. MATCH in fair audits (ratio >= 50, BH)",
            match_fair_audits(rng, args.audits // 4),
            start,
        )
    if 5 in sections:
        start = time.perf_counter()
        show("5. run-to-run comparison size", comparison_size(rng), start)
    if 6 in sections:
        start = time.perf_counter()
        show("6a. HDI coverage at fixed true rates", hdi_coverage(rng), start)
        start = time.perf_counter()
        show(
            "6b. double-corrected meta-metric interval coverage",
            metametric_coverage(rng, max(200, args.audits // 4)),
            start,
        )


if __name__ == "__main__":
    main()
