"""Which p-values, flags, powers, verdicts and Bayesian decisions (HDI, HDI + ROPE decision, simple
rule) a change of the statistics moves: the demo audits' stored results, or the COMPAS audit's,
under two versions of the code.

    python benchmarks/result_changes.py dump-store sqlite:///before.db before.csv
    python benchmarks/result_changes.py dump-compas compas.csv before.csv
    python benchmarks/result_changes.py compare before.csv after.csv

``dump-store`` writes the detection and planning rows of each audit's latest succeeded run in a
store (run ``biasaudit demo --db URL`` with each version first); ``dump-compas`` runs the COMPAS
audit of tests/test_api.py (race and sex, their intersection, Caucasian reference) through
``biasaudit.audit_frame`` with whatever code is imported (an older checkout first on PYTHONPATH
for "before"). ``compare`` prints every row whose value moved and checks that the rates and
counts did not.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from biasaudit.schemas.results import COMPARISON_KEY

ROW_KEY = ["audit", *COMPARISON_KEY]
FIXED = ["difference", "numerator_group", "denominator_group", "value_group", "value_reference"]
MOVED = ["p_value", "p_adjusted", "flagged", "test", "achieved_power", "power_method", "verdict"]
# The Bayesian decisions and the interval they read (dumps written before they were kept lack them)
BAYES = ["hdi_low", "hdi_high", "decision", "simple_rule"]


def store_rows(url: str) -> pd.DataFrame:
    """Detection and planning rows of each audit's latest succeeded run, side by side."""
    from sqlalchemy import create_engine

    engine = create_engine(url)
    runs = pd.read_sql(
        "SELECT audit_name, MAX(id) AS run_id FROM audit_runs WHERE status = 'succeeded' "
        "GROUP BY audit_name",
        engine,
    )
    frames = []
    for run in runs.itertuples():
        detection, planning = (
            pd.read_sql(f"SELECT * FROM {table} WHERE run_id = {int(run.run_id)}", engine)
            for table in ("detection_results", "planning_results")
        )
        frames.append(joined(detection, planning).assign(audit=run.audit_name))
    engine.dispose()
    return pd.concat(frames, ignore_index=True)[ROW_KEY + FIXED + MOVED + BAYES]


def compas_rows(path: str) -> pd.DataFrame:
    """The COMPAS audit of tests/test_api.py, run with the code imported."""
    import biasaudit

    raw = pd.read_csv(path)
    frame = pd.DataFrame(
        {
            "prediction_id": raw["id"].astype(str),
            "y_true": raw["two_year_recid"].astype(float),
            "y_pred": (raw["score_text"] != "Low").astype(int),
            "race": raw["race"],
            "sex": raw["sex"],
        }
    )
    result = biasaudit.audit_frame(
        frame,
        attributes=["race", "sex"],
        intersections=[["race", "sex"]],
        reference_groups={"race": "Caucasian"},
        bootstrap_replicates=200,
    )
    return joined(result.detection, result.planning).assign(audit="compas")[
        ROW_KEY + FIXED + MOVED + BAYES
    ]


def joined(detection: pd.DataFrame, planning: pd.DataFrame) -> pd.DataFrame:
    keys = COMPARISON_KEY
    planning = planning[
        keys + ["value_group", "value_reference", "achieved_power", "power_method", "verdict"]
    ]
    detection = detection[
        keys
        + [
            "difference",
            "numerator_group",
            "denominator_group",
            "p_value",
            "p_adjusted",
            "flagged",
            "test",
            *BAYES,
        ]
    ]
    return detection.merge(planning, on=keys, how="outer")


def compare(before: pd.DataFrame, after: pd.DataFrame) -> None:
    both = before.merge(
        after, on=ROW_KEY, how="outer", suffixes=("_before", "_after"), indicator=True
    )
    assert (both["_merge"] == "both").all(), "the two runs have different rows"
    for column in FIXED:
        old, new = both[f"{column}_before"], both[f"{column}_after"]
        same = np.isclose(old, new, rtol=1e-9, atol=1e-12, equal_nan=True)
        assert same.all(), f"{column} moved: the rates and counts must not change"
    print(f"{len(both)} rows; rates and counts identical")
    for column in MOVED + [c for c in BAYES if f"{c}_before" in both]:
        old, new = both[f"{column}_before"], both[f"{column}_after"]
        if column in ("p_value", "p_adjusted", "achieved_power", "hdi_low", "hdi_high"):
            moved = ~np.isclose(
                old.astype(float), new.astype(float), rtol=1e-6, atol=0, equal_nan=True
            )
        else:
            moved = (~((old == new) | (old.isna() & new.isna()))).to_numpy()
        print(f"\n{column}: {int(moved.sum())} of {len(both)} rows moved")
        if moved.any() and column not in ("test", "power_method"):
            shown = both.loc[
                moved, ROW_KEY + ["denominator_group_before", f"{column}_before", f"{column}_after"]
            ]
            print(
                shown.rename(columns={"denominator_group_before": "d_group"}).to_string(index=False)
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    store = commands.add_parser("dump-store")
    store.add_argument("url")
    store.add_argument("out")
    compas = commands.add_parser("dump-compas")
    compas.add_argument("csv")
    compas.add_argument("out")
    both = commands.add_parser("compare")
    both.add_argument("before")
    both.add_argument("after")
    args = parser.parse_args()
    if args.command == "dump-store":
        store_rows(args.url).to_csv(args.out, index=False)
    elif args.command == "dump-compas":
        compas_rows(args.csv).to_csv(args.out, index=False)
    else:
        compare(pd.read_csv(args.before), pd.read_csv(args.after))


if __name__ == "__main__":
    main()
