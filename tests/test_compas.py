"""Real data: ProPublica's COMPAS predictions audited by race, checked against independent counts."""

import pandas as pd
import pytest

from biasaudit.db.engine import make_engine
from biasaudit.db.store.history import run_metrics
from biasaudit.db.store.load import load_predictions
from biasaudit.db.store.migrate import upgrade
from biasaudit.flows.audit import audit_flow

from .conftest import COMPAS

pytestmark = [
    pytest.mark.usefixtures("prefect_harness"),
    pytest.mark.skipif(not COMPAS.exists(), reason=f"{COMPAS} is absent"),
]


def compas_predictions() -> pd.DataFrame:
    raw = pd.read_csv(COMPAS)
    return pd.DataFrame(
        {
            "prediction_id": raw["id"].astype(str),
            "model_id": "compas",
            "model_version": "propublica-2016",
            "predicted_at": pd.to_datetime(raw["compas_screening_date"], utc=True),
            "y_true": raw["two_year_recid"].astype(float),
            "y_pred": (raw["score_text"] != "Low").astype(int),
            "score": raw["decile_score"] / 10,
            "race": raw["race"],
            "sex": raw["sex"],
        }
    )


def test_compas_fpr_and_fnr_by_race(tmp_path):
    """It reproduces per-race FPR and FNR computed directly from the CSV."""
    url = f"sqlite:///{tmp_path / 'compas.db'}"
    upgrade(url)
    data = compas_predictions()
    report = load_predictions(make_engine(url), data, ["race", "sex"], "compas")
    assert report.inserted == len(data) == 7214
    config = tmp_path / "compas.toml"
    config.write_text(
        '[[audits]]\nname = "compas-race"\nmodel = "compas"\nattributes = ["race", "sex"]\n'
        'intersections = [["race", "sex"]]\nmetrics = ["fpr", "fnr"]\n'
    )
    result = audit_flow("compas-race", str(config), url, pd.Timestamp("2015-01-01", tz="UTC"))
    stored = run_metrics(make_engine(url), result["run_id"], attribute="race").pivot(
        index="group_name", columns="metric", values="value"
    )

    raw = pd.read_csv(COMPAS)
    predicted, truth = raw["score_text"] != "Low", raw["two_year_recid"] == 1
    expected = pd.DataFrame(
        {
            "fpr": (predicted & ~truth).groupby(raw["race"]).sum()
            / (~truth).groupby(raw["race"]).sum(),
            "fnr": (~predicted & truth).groupby(raw["race"]).sum()
            / truth.groupby(raw["race"]).sum(),
        }
    )
    pd.testing.assert_frame_equal(
        stored[["fpr", "fnr"]].sort_index(), expected.sort_index(), check_names=False, atol=1e-12
    )
    # ProPublica's headline: Black defendants' FPR about twice that of white defendants.
    assert stored.loc["African-American", "fpr"] / stored.loc["Caucasian", "fpr"] > 1.8
