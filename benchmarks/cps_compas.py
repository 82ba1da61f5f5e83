"""Does Cross-Prior Smoothing lower the error of small-group metrics? COMPAS, paper §6.2.

For every race group of ProPublica's COMPAS data (prediction = score_text != "Low", truth =
two_year_recid), draw subsamples of size 5..150 without replacement (multivariate hypergeometric on
the group's four counts), and compare the mean squared error against the whole group's value of:
raw metrics (undefined draws excluded, their share reported), the paper's "bashful" baseline
(+1e-10 per cell), additive smoothing (+1 per cell) and CPS (λ = 5, reference = all other races).

    python benchmarks/cps_compas.py [--draws 20000] [--lam 5]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from biasaudit.tasks.metrics import compute_metrics
from biasaudit.tasks.smoothing import additive_smoothing

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "compas-two-years.csv"
METRICS = ["tpr", "fpr", "ppv", "mcc", "ppr"]
CELLS = ["tp", "fp", "fn", "tn"]
SIZES = [5, 10, 15, 20, 30, 50, 75, 100, 150]


def confusion_by_race() -> pd.DataFrame:
    raw = pd.read_csv(DATA)
    pred, truth = raw["score_text"] != "Low", raw["two_year_recid"] == 1
    cells = pd.DataFrame(
        {"tp": pred & truth, "fp": pred & ~truth, "fn": ~pred & truth, "tn": ~pred & ~truth}
    )
    return cells.groupby(raw["race"]).sum().astype("int64")


def errors(race: str, cm: pd.DataFrame, draws: int, lam: float, rng) -> pd.DataFrame:
    group = cm.loc[race].to_numpy()
    reference = cm.drop(index=race).sum().to_numpy()
    q = reference / reference.sum()
    truth = compute_metrics(cm.loc[[race]], METRICS).set_index("metric")["value"]
    sizes = [s for s in SIZES if s < group.sum()]
    samples = np.vstack([rng.multivariate_hypergeometric(group, s, size=draws) for s in sizes])
    size = np.repeat(sizes, draws)
    frame = pd.DataFrame(samples, columns=CELLS).assign(size=size)
    n = samples.sum(axis=1, keepdims=True)
    estimators = {
        "raw": frame,
        "bashful": additive_smoothing(frame, 1e-10),
        "add-one": additive_smoothing(frame, 1.0),
        "cps": frame.assign(**dict(zip(CELLS, (n * (samples + lam * q) / (n + lam)).T))),
    }
    rows = []
    for name, counts in estimators.items():
        values = compute_metrics(counts, METRICS)
        values["sq_error"] = (values["value"] - values["metric"].map(truth)) ** 2
        summary = values.groupby(["metric", "size"]).agg(
            mse=("sq_error", "mean"), undefined=("value", lambda v: v.isna().mean())
        )
        rows.append(summary.assign(estimator=name, race=race).reset_index())
    return pd.concat(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=20_000)
    parser.add_argument("--lam", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    cm = confusion_by_race()
    print("group sizes:", cm.sum(axis=1).to_dict())
    start = time.perf_counter()
    result = pd.concat([errors(race, cm, args.draws, args.lam, rng) for race in cm.index])
    elapsed = time.perf_counter() - start
    mse = result.pivot_table(index=["metric", "size"], columns="estimator", values="mse")
    wins = (
        result.pivot_table(index=["metric", "size", "race"], columns="estimator", values="mse")
        .assign(cps_beats_raw=lambda t: t["cps"] < t["bashful"])
        .groupby(["metric", "size"])["cps_beats_raw"]
        .agg(lambda s: f"{s.sum()}/{s.size}")
    )
    undefined = result[result["estimator"] == "raw"].pivot_table(
        index=["metric", "size"], values="undefined"
    )
    table = mse[["raw", "bashful", "add-one", "cps"]].join(undefined).join(wins)
    table["cps / bashful"] = table["cps"] / table["bashful"]
    print(f"\n{args.draws} draws per race and size, λ = {args.lam}; {elapsed:.1f} s\n")
    print("MSE against the whole-group value, averaged over the race groups large enough;")
    print("raw excludes undefined draws (share in 'undefined'); cps_beats_raw counts races.\n")
    print(table.to_markdown(floatfmt=".5f"))


if __name__ == "__main__":
    main()
