"""How often detection calls a fair model 'biased' or 'flagged', before and after its Bayesian
decisions were made jointly, and what the joint decisions cost in power.

    python benchmarks/bayes_words.py [--audits 400] [--flag-audits 150] [--groups 2 5 10 30]
        [--power-audits 150] [--seed 1] [--out results.json]

Fair audits: one attribute of K = 2, 5, 10 or 30 groups (5,000 predictions, shares ∝ 0.85^i, so
that the smallest groups of K = 30 fall below min_group_size 30), every group with prevalence
0.35, TPR 0.70 and FPR 0.20; the largest group is the named reference, every group is also
compared with the rest; all the tested rates (acc, ppr, tpr, fpr, ppv, npv and their
complements); tolerance 0.05 and 0 (the same audits for both); alpha 0.05. Each audit runs the audit's own stages:
tasks.counts.comparison_pairs, tasks.rates.comparison_rates (min_group_size 30) and

- after: tasks.detection.joint_decisions, the decisions detect stores (tested rows only, HDI mass
  1 − α/m over the m tested rows, simple rule at the same mass);
- before: the rules as detect made them until then, from the same primitives: HDI of mass 1 − α
  on every row with both rates defined, simple rule at z_{1−α/2}; and the same rules on the
  tested rows only, which separates the two changes;
- flagged: tasks.detection.detect itself (Berger-Boos test, Benjamini-Hochberg), on the first
  ``--flag-audits`` audits of each case (the exact test is the slow part), with the unions "any
  word" (flagged or a joint 'biased': the words the product prints) and "any word or simple rule"
  (the stored ±1 of the simple rule too).

Each share is printed with its binomial standard error. The power case: K = 10 where groups 2
and 5 have TPR 0.55 and FPR 0.30 instead of 0.70 and 0.20; a tested row of those two groups is
truly biased when its true difference (the rates of expected counts) exceeds the tolerance; the
share of those rows called 'biased' (and of the two groups with any such row called 'biased'),
by the old and the joint rule, and flagged.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pandas as pd
from scipy import stats

from biasaudit.schemas.metric_ids import TESTED_RATES
from biasaudit.tasks.counts import comparison_pairs
from biasaudit.tasks.detection import (
    beta_difference,
    detect,
    hdi_difference,
    joint_decisions,
    rope_decision,
)
from biasaudit.tasks.rates import comparison_rates

ALPHA = 0.05
MIN_GROUP_SIZE = 30
TOTAL = 5000
PREVALENCE, TPR, FPR = 0.35, 0.70, 0.20
GROUPS = [2, 5, 10, 30]
TOLERANCES = [0.05, 0.0]
POWER_GROUPS, BIASED, BIASED_TPR, BIASED_FPR = 10, (2, 5), 0.55, 0.30


def cell_probabilities(tpr: float, fpr: float) -> np.ndarray:
    """P(tp), P(fp), P(fn), P(tn) of one prediction."""
    return np.array(
        [
            PREVALENCE * tpr,
            (1 - PREVALENCE) * fpr,
            PREVALENCE * (1 - tpr),
            (1 - PREVALENCE) * (1 - fpr),
        ]
    )


def design(k: int, biased: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Group sizes and each group's cell probabilities (k, 4)."""
    shares = 0.85 ** np.arange(k)
    sizes = np.round(TOTAL * shares / shares.sum()).astype(int)
    probabilities = np.tile(cell_probabilities(TPR, FPR), (k, 1))
    for g in biased:
        probabilities[g] = cell_probabilities(BIASED_TPR, BIASED_FPR)
    return sizes, probabilities


def counts_frame(cells: np.ndarray) -> pd.DataFrame:
    """GROUP_COUNTS rows of one attribute: each group and its rest, from (k, 4) cell counts."""
    k = len(cells)
    names = [f"g{i:02d}" for i in range(k)]
    rest = cells.sum(axis=0) - cells
    frames = [
        pd.DataFrame(values, columns=["tp", "fp", "fn", "tn"]).assign(
            attribute="a", group_name=names, subset=subset
        )
        for values, subset in ((cells, "group"), (rest, "rest"))
    ]
    return pd.concat(frames, ignore_index=True).assign(
        n_unlabelled=0, unlabelled_pos=0, unlabelled_neg=0
    )


def audit_rates(cells: np.ndarray) -> pd.DataFrame:
    counts = counts_frame(cells)
    group, reference = comparison_pairs(counts, {"a": "g00"})
    return comparison_rates(group, reference, TESTED_RATES, min_group_size=MIN_GROUP_SIZE)


def words(rates: pd.DataFrame, tolerance: float) -> dict[str, np.ndarray]:
    """Per row: 'biased' and a non-zero simple rule, by the old rules (every defined row, and
    tested rows only) and by the joint decisions."""
    x2, n2 = rates["numerator_group"].to_numpy(), rates["denominator_group"].to_numpy()
    x1, n1 = rates["numerator_reference"].to_numpy(), rates["denominator_reference"].to_numpy()
    tested = rates["reason"].isna().to_numpy()
    defined = (n1 > 0) & (n2 > 0)
    x1, n1, x2, n2 = (np.where(defined, v, 1.0) for v in (x1, n1, x2, n2))
    low, high = hdi_difference(x1, n1, x2, n2, 1 - ALPHA)
    mean, var = beta_difference(x1, n1, x2, n2)
    old_biased = defined & (rope_decision(low, high, tolerance) == "biased")
    old_rule = defined & normal_rule(mean, np.sqrt(var), tolerance, stats.norm.ppf(1 - ALPHA / 2))
    joint = joint_decisions(x1, n1, x2, n2, tested, tolerance=tolerance, alpha=ALPHA)
    joint_z = stats.norm.ppf(1 - (1 - joint.mass) / 2)
    return {
        "old biased": old_biased,
        "old biased, tested rows": old_biased & tested,
        "old simple rule": old_rule,
        "old simple rule, tested rows": old_rule & tested,
        "joint biased": joint.decision == "biased",
        "joint simple rule, normal tails": tested
        & normal_rule(mean, np.sqrt(var), tolerance, joint_z),
        "joint simple rule": joint.simple_rule != 0,
    }


def normal_rule(mean, sd, tolerance, z) -> np.ndarray:
    """The blog's simple rule as detect made it until 2026-11-27: μ − zσ > t or μ + zσ < −t."""
    return (mean - z * sd > tolerance) | (mean + z * sd < -tolerance)


def share(hits: list[bool]) -> dict[str, float]:
    p = float(np.mean(hits))
    return {"share": p, "se": float(np.sqrt(p * (1 - p) / len(hits))), "audits": len(hits)}


def fair_case(k: int, audits: int, flag_audits: int, rng) -> list[dict]:
    """The shares of one group count at each tolerance (the same simulated audits for both)."""
    sizes, probabilities = design(k)
    hits: dict[float, dict[str, list[bool]]] = {t: {} for t in TOLERANCES}
    for i in range(audits):
        cells = np.array([rng.multinomial(n, p) for n, p in zip(sizes, probabilities)])
        rates = audit_rates(cells)
        for tolerance, mine in hits.items():
            found = words(rates, tolerance)
            for name, rows in found.items():
                mine.setdefault(name, []).append(bool(rows.any()))
            if i < flag_audits:
                flagged = detect(rates, tolerance=tolerance, alpha=ALPHA)["flagged"].to_numpy(bool)
                biased = found["joint biased"]
                mine.setdefault("flagged", []).append(bool(flagged.any()))
                mine.setdefault("any word (flagged or biased)", []).append(
                    bool((flagged | biased).any())
                )
                mine.setdefault("any word or simple rule", []).append(
                    bool((flagged | biased | found["joint simple rule"]).any())
                )
    expected = np.round(sizes[:, None] * probabilities).astype(int)
    tested = int(audit_rates(expected)["reason"].isna().sum())
    return [
        {
            "groups": k,
            "tolerance": tolerance,
            "tested_rows": tested,
            **{n: share(h) for n, h in mine.items()},
        }
        for tolerance, mine in hits.items()
    ]


def power_case(tolerance: float, audits: int, rng) -> dict:
    sizes, probabilities = design(POWER_GROUPS, BIASED)
    truth = audit_rates(sizes[:, None] * probabilities)
    with np.errstate(divide="ignore", invalid="ignore"):
        true_difference = (
            truth["numerator_group"] / truth["denominator_group"]
            - truth["numerator_reference"] / truth["denominator_reference"]
        ).to_numpy()
    called: dict[str, list[np.ndarray]] = {}
    for _ in range(audits):
        cells = np.array([rng.multinomial(n, p) for n, p in zip(sizes, probabilities)])
        rates = audit_rates(cells)
        real = (
            rates["reason"].isna().to_numpy()
            & rates["group_name"].isin([f"g{g:02d}" for g in BIASED]).to_numpy()
            & (np.abs(true_difference) > tolerance + 1e-12)
        )
        found = words(rates, tolerance)
        flagged = detect(rates, tolerance=tolerance, alpha=ALPHA)["flagged"].to_numpy(bool)
        for name, rows in (
            ("old biased", found["old biased"]),
            ("joint biased", found["joint biased"]),
            ("flagged", flagged),
        ):
            called.setdefault(name, []).append(rows[real])
            groups = rates.loc[real, "group_name"]
            hit = pd.Series(rows[real]).groupby(groups.to_numpy()).any()
            called.setdefault(f"{name} (groups)", []).append(hit.to_numpy())
    out = {"groups": POWER_GROUPS, "tolerance": tolerance, "audits": audits}
    for name, parts in called.items():
        values = np.concatenate(parts)
        out[name] = {
            "share": float(values.mean()),
            "se": float(values.std() / np.sqrt(len(values))),
            "n": len(values),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audits", type=int, default=400)
    parser.add_argument("--flag-audits", type=int, default=150)
    parser.add_argument("--groups", type=int, nargs="*", default=GROUPS)
    parser.add_argument("--power-audits", type=int, default=150, help="0: no power case")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    results: dict[str, list[dict]] = {"fair": [], "power": []}
    for k in args.groups:
        start = time.perf_counter()
        cases = fair_case(k, args.audits, args.flag_audits, rng)
        results["fair"] += cases
        for case in cases:
            print(
                f"\nfair, {k} groups, tolerance {case['tolerance']} ({case['tested_rows']} tested "
                f"rows, {time.perf_counter() - start:.0f} s for both): share of audits with any"
            )
            for name, value in case.items():
                if isinstance(value, dict):
                    print(
                        f"  {name:32s} {value['share']:.4f} ± {value['se']:.4f} "
                        f"({value['audits']} audits)"
                    )
    for tolerance in TOLERANCES if args.power_audits else []:
        case = power_case(tolerance, args.power_audits, rng)
        results["power"].append(case)
        print(
            f"\nbiased groups 2 and 5 of {POWER_GROUPS}, tolerance {tolerance}: share of truly "
            "biased rows (groups) called"
        )
        for name, value in case.items():
            if isinstance(value, dict):
                print(f"  {name:32s} {value['share']:.4f} ± {value['se']:.4f} (of {value['n']})")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
