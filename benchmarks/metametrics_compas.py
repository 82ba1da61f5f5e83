"""Naive and double-corrected between-group variance of FPR, TPR and selection rate on COMPAS.

The real-data example of "De-biasing 'bias' measurement" (its section 6 used the Adult data), on
ProPublica's COMPAS predictions (prediction = score_text != "Low", truth = two_year_recid), across
race (6 groups, two of them tiny), age category (3) and race x sex (12), with the default
min_group_size judged on each metric's denominator, as an audit leaves groups out.

    python benchmarks/metametrics_compas.py [--boot 2000]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from biasaudit.db.store.history import META_COLUMNS
from biasaudit.schemas.config import Thresholds
from biasaudit.tasks.counts import group_counts
from biasaudit.tasks.metametrics import attribute_meta_metrics
from biasaudit.tasks.metrics import compute_metrics

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "compas-two-years.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boot", type=int, default=2000)
    args = parser.parse_args()
    raw = pd.read_csv(DATA)
    predictions = pd.DataFrame(
        {
            "y_true": raw["two_year_recid"].astype(float),
            "y_pred": (raw["score_text"] != "Low").astype("int8"),
            "race": raw["race"],
            "age_cat": raw["age_cat"],
            "sex": raw["sex"],
        }
    )
    counts = group_counts(predictions, ["race", "age_cat", "sex"], [["race", "sex"]])
    metrics = compute_metrics(counts, ["fpr", "tpr", "ppr"])
    table = attribute_meta_metrics(
        metrics,
        ["fpr", "tpr", "ppr"],
        n_boot=args.boot,
        confidence=0.95,
        seed=0,
        min_group_size=Thresholds().min_group_size,  # as an audit with the defaults
    )
    table = table[table["attribute"] != "sex"]
    columns = META_COLUMNS
    print(f"B = {args.boot}; var = naive variance; interval = double-corrected 95% bootstrap\n")
    print(
        table[columns].sort_values(["metric", "attribute"]).to_markdown(index=False, floatfmt=".5f")
    )


if __name__ == "__main__":
    main()
