"""Cost of the statistics against the number of count rows: time and peak memory of audit_frame.

Each case runs ``biasaudit.audit_frame`` (full metric catalogue, every stage) in a fresh
interpreter and reports its wall time (the audit call; "cold" adds the imports and a first
audit), each stage's time and the process's peak RSS:

- rows: 400,000 predictions audited by race and sex (18 count rows), then by race, sex, age and
  region with the intersections race x sex, race x age, race x region and race x age x region
  (642 count rows: many small groups against complements of hundreds of thousands);
- groups: one attribute of 10 ... 20,000 groups (Zipf-like shares, 20 predictions per group or
  400,000 in all, whichever is more);
- compas: ProPublica's COMPAS (7,214 rows; race, sex, race x sex), cold (imports and the first
  audit) and warm (a second audit in the same process), against Fairlearn's MetricFrame with six
  metrics on race x sex (warm).

    python benchmarks/audit_cost.py [--groups 10,100,1000,5000,20000] [--timeout 600]
        [--out benchmarks/audit_cost.json] [--plot benchmarks/audit_cost.png]

A case that runs past ``--timeout`` seconds is reported as such. ``--plot`` draws time and
peak memory against groups from the JSON of one or more runs (``--label`` names each run).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

COMPAS = Path(__file__).resolve().parents[2] / "shared" / "data" / "compas-two-years.csv"
RATES = ["acc", "ppr", "err", "pnr", "tpr", "fnr", "fpr", "tnr", "ppv", "fdr", "npv", "for"]
ROWS = 400_000
NARROW = {"attributes": ["race", "sex"]}  # 18 count rows of predictions()
BY_RACE_SEX = {"attributes": ["race", "sex"], "intersections": [["race", "sex"]]}  # COMPAS
WIDE = {  # 642 count rows of predictions()
    "attributes": ["race", "sex", "age", "region"],
    "intersections": [
        ["race", "sex"],
        ["race", "age"],
        ["race", "region"],
        ["race", "age", "region"],
    ],
}


def predictions(rows: int = ROWS, seed: int = 3) -> pd.DataFrame:
    """Predictions with skewed race (7 values, 1% to 45%), sex, age (6) and region (5) shares;
    5% of outcomes unknown; positives predicted more often."""
    rng = np.random.default_rng(seed)
    race = rng.choice(list("ABCDEFG"), rows, p=np.array([45, 25, 14, 8, 4, 3, 1]) / 100)
    age = rng.choice([f"a{i}" for i in range(6)], rows, p=[0.3, 0.25, 0.2, 0.15, 0.07, 0.03])
    region = rng.choice([f"r{i}" for i in range(5)], rows, p=[0.35, 0.3, 0.2, 0.1, 0.05])
    truth = (rng.random(rows) < 0.3).astype(float)
    truth[rng.random(rows) < 0.05] = np.nan
    pred = (rng.random(rows) < 0.3 + 0.2 * (truth == 1)).astype(int)
    sex = rng.choice(["F", "M"], rows)
    return pd.DataFrame(
        {"y_true": truth, "y_pred": pred, "race": race, "sex": sex, "age": age, "region": region}
    )


def many_groups(groups: int, seed: int = 5) -> pd.DataFrame:
    """One attribute ``g`` of ``groups`` values with shares ∝ 1/√rank, every value present."""
    rng = np.random.default_rng(seed)
    rows = max(ROWS, 20 * groups)
    shares = 1 / np.sqrt(np.arange(1, groups + 1))
    codes = np.concatenate(
        [np.arange(groups), rng.choice(groups, rows - groups, p=shares / shares.sum())]
    )
    truth = (rng.random(rows) < 0.3).astype(float)
    pred = (rng.random(rows) < 0.3 + 0.2 * truth).astype(int)
    return pd.DataFrame({"y_true": truth, "y_pred": pred, "g": pd.Series(codes).map("g{}".format)})


def compas() -> pd.DataFrame:
    raw = pd.read_csv(COMPAS)
    return pd.DataFrame(
        {
            "y_true": raw["two_year_recid"].astype(float),
            "y_pred": (raw["score_text"] != "Low").astype("int8"),
            "race": raw["race"],
            "sex": raw["sex"],
        }
    )


def timed_audit(frame: pd.DataFrame, **options) -> tuple[float, dict[str, float], int]:
    """Wall time of one audit_frame call, each stage's time (with "cpu": the call's CPU time, less
    sensitive than wall time to other work on a shared machine), and the counts frame's rows."""
    from biasaudit.tasks import api
    from biasaudit.tasks.core import audit_counts

    stages: dict[str, float] = {}
    rows = []

    def counted(counts, audit, **kwargs):
        rows.append(len(counts))
        return audit_counts(counts, audit, timings=stages, **kwargs)

    api.audit_counts = counted  # each stage timed, as the flow times it
    start, cpu = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api.audit_frame(frame, **options)
    stages["cpu"] = time.process_time() - cpu
    return time.perf_counter() - start, stages, rows[0]


def case(name: str) -> dict:
    """Run one case in this process (the driver starts a fresh interpreter per case)."""
    start = time.perf_counter()
    import biasaudit  # noqa: F401  (cold: imports count)

    if name.startswith("compas"):
        frame = compas()
        cold, stages, rows = timed_audit(frame, **BY_RACE_SEX)
        cold = time.perf_counter() - start
        warm, stages, rows = timed_audit(frame, **BY_RACE_SEX)
        out = {"cold": cold, "seconds": warm, "stages": stages, "count_rows": rows}
        out["fairlearn"] = fairlearn_seconds(frame)
    elif name.startswith("groups"):
        frame = many_groups(int(name.removeprefix("groups")))
        seconds, stages, rows = timed_audit(frame, attributes=["g"])
        out = {"seconds": seconds, "stages": stages, "count_rows": rows}
    else:
        frame = predictions()
        seconds, stages, rows = timed_audit(frame, **(NARROW if name == "rows18" else WIDE))
        out = {"seconds": seconds, "stages": stages, "count_rows": rows}
    out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def fairlearn_seconds(frame: pd.DataFrame) -> float:
    """Warm time of Fairlearn's MetricFrame: six metrics by race x sex (second of two calls)."""
    from fairlearn.metrics import (
        MetricFrame,
        false_negative_rate,
        false_positive_rate,
        selection_rate,
        true_negative_rate,
        true_positive_rate,
    )
    from sklearn.metrics import accuracy_score

    metrics = {
        "acc": accuracy_score,
        "ppr": selection_rate,
        "tpr": true_positive_rate,
        "fpr": false_positive_rate,
        "tnr": true_negative_rate,
        "fnr": false_negative_rate,
    }
    labelled = frame.dropna(subset=["y_true"])
    seconds = 0.0
    for _ in range(2):
        start = time.perf_counter()
        result = MetricFrame(
            metrics=metrics,
            y_true=labelled["y_true"].astype(int),
            y_pred=labelled["y_pred"],
            sensitive_features=labelled[["race", "sex"]],
        )
        result.by_group, result.difference()
        seconds = time.perf_counter() - start
    return seconds


def fresh(name: str, timeout: float) -> dict:
    """``case(name)`` in a fresh interpreter; its peak RSS; {"timeout": ...} past ``timeout``."""
    command = [sys.executable, __file__, "--case", name]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    return json.loads(done.stdout.splitlines()[-1])


def plot(runs: list[tuple[str, dict]], path: Path) -> None:
    """Time and peak memory against groups, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for label, result in runs:
        points = sorted(
            (int(k.removeprefix("groups")), v)
            for k, v in result.items()
            if k.startswith("groups") and "seconds" in v
        )
        if points:
            groups = [g for g, _ in points]
            left.plot(groups, [v["seconds"] for _, v in points], "o-", label=label)
            right.plot(groups, [v["peak_mb"] for _, v in points], "o-", label=label)
    for axis, title in ((left, "audit_frame time (s)"), (right, "peak memory (MB)")):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("groups (one attribute, full metric catalogue)")
        axis.set_title(title)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--groups", default="10,100,1000,5000,20000")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/audit_cost.json"))
    parser.add_argument("--plot", type=Path, nargs="*", default=[], help="JSONs to plot")
    parser.add_argument("--label", nargs="*", default=[])
    parser.add_argument("--png", type=Path, default=Path("benchmarks/audit_cost.png"))
    args = parser.parse_args()
    if args.case:
        print(json.dumps(case(args.case)))
        return
    if args.plot:
        labels = args.label or [p.stem for p in args.plot]
        plot([(lb, json.loads(p.read_text())) for lb, p in zip(labels, args.plot)], args.png)
        return
    names = ["rows18", "rows642", "compas"] + [f"groups{g}" for g in args.groups.split(",")]
    results = {}
    for name in names:
        results[name] = fresh(name, args.timeout)
        print(name, json.dumps(results[name]), flush=True)
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
