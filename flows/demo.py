"""Deterministic synthetic predictions for the demo and the tests.

Four models over 60 days (2026-09-01 .. 2026-10-30 UTC), about 300 predictions per model and day,
with skewed group sizes (two race groups under 3%, so some race x sex cells hold fewer than 20
people) and outcomes still unknown for part of the last days. The disparities below are injected on
purpose; every other group of every model is truly fair.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd

START = datetime(2026, 9, 1, tzinfo=UTC)
DAYS = 60
END = START + pd.Timedelta(days=DAYS)
PER_DAY = 300
SEED = 20261121

GROUPS = {
    "race": {
        "White": 0.573,
        "Black": 0.20,
        "Hispanic": 0.13,
        "Asian": 0.07,
        "Pacific Islander": 0.025,
        "Native American": 0.002,
    },
    "sex": {"Female": 0.47, "Male": 0.53},
    "age_band": {"18-25": 0.15, "26-40": 0.38, "41-64": 0.37, "65+": 0.10},
}
# model id -> (model version, prevalence, TPR, FPR) shared by every group unless injected below.
MODELS = {
    "credit-scorer": ("2.3", 0.30, 0.75, 0.15),
    "hiring-screen": ("1.0", 0.40, 0.70, 0.20),
    "fraud-detector": ("5.1", 0.20, 0.80, 0.10),
    "claims-triage": ("0.9", 0.35, 0.72, 0.18),
}
# The true disparities: (model, attribute, group, rate, change of the rate). Nothing else differs.
INJECTED = [
    ("credit-scorer", "race", "Black", "fpr", +0.12),
    ("hiring-screen", "sex", "Female", "tpr", -0.20),
    ("claims-triage", "age_band", "65+", "tpr", -0.25),
]


def synthetic_predictions(seed: int = SEED) -> pd.DataFrame:
    """All models' predictions in canonical columns plus race, sex and age_band."""
    rng = np.random.default_rng(seed)
    frames = []
    for model, (version, prevalence, tpr, fpr) in MODELS.items():
        n = int(rng.poisson(PER_DAY, DAYS).sum())
        offsets = np.sort(rng.uniform(0, DAYS * 86_400, n))
        frame = pd.DataFrame(
            {
                "prediction_id": [f"{model}-{i:06d}" for i in range(n)],
                "model_id": model,
                "model_version": version,
                "predicted_at": START + pd.to_timedelta(offsets, unit="s"),
            }
        )
        for attribute, shares in GROUPS.items():
            names, p = list(shares), np.array(list(shares.values()))
            frame[attribute] = rng.choice(names, size=n, p=p / p.sum())
        rates = {"tpr": np.full(n, tpr), "fpr": np.full(n, fpr)}
        for m, attribute, group, rate, delta in INJECTED:
            if m == model:
                rates[rate] = np.where(frame[attribute] == group, rates[rate] + delta, rates[rate])
        y_true = rng.random(n) < prevalence
        y_pred = rng.random(n) < np.where(y_true, rates["tpr"], rates["fpr"])
        # Outcomes arrive late: up to half of the last three days are still unknown.
        age_days = DAYS - offsets / 86_400
        unknown = rng.random(n) < np.clip((3 - age_days) / 6, 0, 0.5)
        frame["y_true"] = np.where(unknown, np.nan, y_true.astype(float))
        frame["y_pred"] = y_pred.astype(int)
        frame["score"] = np.round(np.where(y_pred, 0.5, 0.0) + rng.uniform(0, 0.5, n), 4)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)
