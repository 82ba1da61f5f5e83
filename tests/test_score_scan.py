"""Score counts from the scan: every mode (memory, stream, push-down) gives the counts per
(group, score bin, label) that pandas gives on the rows the schema accepts, in the window's bins."""

import itertools

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import Column, DateTime, Double, Float, Integer, MetaData, String, Table
from sqlalchemy.dialects import mysql, postgresql

from biasaudit.db.engine import make_engine
from biasaudit.db.sources.read import read_predictions
from biasaudit.db.sources.scan import memory_cells, pushdown_cells, stream_cells
from biasaudit.schemas.config import parse_config
from biasaudit.schemas.quarantine import split_valid
from biasaudit.schemas.score_bins import rebinned, score_counts, score_edges

from .conftest import COMPAS
from .test_scan import NOW, write_source


def _audit(table: str, score: str):
    return parse_config(
        {
            "audits": [
                {
                    "name": "s",
                    "model": "m",
                    "source": table,
                    "attributes": ["race", "sex"],
                    "intersections": [["race", "sex"]],
                    "decision": {"score": score, "threshold": 0.5},
                    "columns": {
                        "prediction_id": "pid",
                        "model_id": "model",
                        "predicted_at": "at",
                        "y_true": "label",
                    },
                }
            ]
        }
    ).audits[0]


def _copy(engine, table: str):
    """The fixture's rows with the score as a double ("doubles") or as decile text "1".."10"
    with one non-number ("deciles")."""
    frame = pd.read_sql_table("scored", engine).drop(columns="pred")
    if table == "deciles":
        frame["score"] = (np.floor(frame["score"].clip(0, 0.999) * 10) + 1).astype(int)
        frame["score"] = frame["score"].astype(str)
        frame.loc[3, "score"] = "high"
    kind = {"score": Double()} if table == "doubles" else {}
    frame.to_sql(table, engine, if_exists="replace", index=False, dtype=kind)


@pytest.mark.parametrize("table", ["doubles", "deciles"])
def test_every_scan_mode_counts_the_score_as_pandas_does(db_url, table):
    engine = write_source(db_url, rows=3000)
    _copy(engine, table)
    audit = _audit(table, "score")
    frame = read_predictions(engine, audit, None, NOW, NOW)
    valid, _ = split_valid(frame, audit.attributes, NOW, decision=True)
    # the bins and the median are the window's: every row read with a numeric score, accepted
    # or not
    read = pd.to_numeric(frame["decision_score"], errors="coerce")
    edges = score_edges(read.to_numpy())
    assert len(edges) == 10  # deciles by value; a continuous score by its deciles
    median = read.median()
    rows = valid.assign(
        y_true=valid["y_true"].astype(float), s=valid["decision_score"].astype(float)
    )
    keys = ["attribute", "group_name", "score_bin"]
    columns = [["race"], ["sex"], ["race", "sex"]]
    expected = score_counts(rows, columns, edges, median, score="s")
    expected = expected.sort_values(keys, ignore_index=True)
    above = (rows["s"] > median).groupby(rows["race"]).sum()
    above_race = expected[expected["attribute"] == "race"].groupby("group_name")["above_median"]
    pd.testing.assert_series_equal(above_race.sum(), above, check_names=False)
    # per distinct value (memory, stream); per cell of 1/4096 of a decile bin (push-down)
    per_value = score_counts(rows, columns, np.unique(rows["s"]), median, score="s")
    upper = np.append(edges[1:], read.max())
    k = np.searchsorted(edges, rows["s"], side="right") - 1
    step = ((upper - edges) / 4096)[k]
    by_value = table == "deciles"
    cell = rows["s"] if by_value else edges[k] + np.floor((rows["s"] - edges[k]) / step) * step
    per_cell = score_counts(
        rows.assign(c=cell, score_sum=rows["s"].where(rows["y_true"].notna(), 0.0),
                    above_median=(rows["s"] > median).astype(int)),
        columns, np.unique(cell), median, score="c",
    )  # fmt: skip
    for mode, scanned, finest in (
        ("memory", memory_cells(engine, audit, None, NOW, NOW), per_value),
        ("stream", stream_cells(engine, audit, None, NOW, NOW, chunk_rows=700), per_value),
        ("pushdown", pushdown_cells(engine, audit, None, NOW, NOW), per_cell),
    ):
        assert np.array_equal(scanned.score_bins.edges, edges), mode
        assert (scanned.score_bins.bottom, scanned.score_bins.top) == (read.min(), read.max())
        binned = rebinned(scanned.score_counts, edges)
        for got, want in ((binned, expected), (scanned.score_counts, finest)):
            got = got.sort_values(keys, ignore_index=True)
            want = want.sort_values(keys, ignore_index=True)
            pd.testing.assert_frame_equal(
                got.drop(columns="score_sum"), want.drop(columns="score_sum"), check_dtype=False,
                obj=mode,
            )  # fmt: skip
            np.testing.assert_allclose(got["score_sum"], want["score_sum"], rtol=1e-9)
        assert scanned.score_median == median and scanned.scores_in_window == read.notna().sum()
    engine.dispose()


def test_an_audit_without_a_decision_has_no_score_counts(db_url):
    from .test_scan import AUDIT

    engine = write_source(db_url, rows=500)
    assert memory_cells(engine, AUDIT, None, NOW, NOW).score_counts is None
    assert pushdown_cells(engine, AUDIT, None, NOW, NOW).score_counts is None
    engine.dispose()


@pytest.mark.skipif(not COMPAS.exists(), reason=f"{COMPAS} is absent")
@pytest.mark.parametrize("mode", ["memory", "stream", "pushdown"])
def test_compas_score_results_stored_by_the_flow_equal_the_rows(tmp_path, mode):
    """COMPAS through the flow, its decision from the score (decile / 10 >= 0.5): the stored
    recidivism per decile and race, AUC per race and FPR/FNR at every decile equal pandas and
    scikit-learn on the CSV, in every scan mode."""
    from sklearn.metrics import roc_auc_score

    from biasaudit.db.store.load import load_predictions
    from biasaudit.db.store.migrate import upgrade
    from biasaudit.flows.pipeline import run_audit

    from .test_compas import compas_predictions

    url = f"sqlite:///{tmp_path / 'compas.db'}"
    upgrade(url)
    load_predictions(make_engine(url), compas_predictions(), ["race", "sex"], "compas")
    (tmp_path / "a.toml").write_text(
        '[[audits]]\nname = "c"\nmodel = "compas"\nattributes = ["race"]\n'
        'metrics = ["fpr", "fnr"]\ndecision = { score = "score", threshold = 0.5 }\n'
        f'[audits.scan]\nmode = "{mode}"\nchunk_rows = 2000\n'
    )
    run = run_audit("c", str(tmp_path / "a.toml"), url, pd.Timestamp("2015-01-01", tz="UTC"))
    engine = make_engine(url)
    stored = {
        t: pd.read_sql(f"SELECT * FROM {t} WHERE run_id = {run['run_id']}", engine)
        for t in ("score_results", "calibration_results", "threshold_results")
    }
    raw = pd.read_csv(COMPAS)
    decile = raw["decile_score"] / 10
    rates = stored["calibration_results"].set_index(["group_name", "score_bin"])["observed_rate"]
    expected = raw.groupby([raw["race"], decile])["two_year_recid"].mean()
    np.testing.assert_allclose(rates.loc[expected.index], expected, atol=1e-12)
    scores = stored["score_results"]
    auc = scores[scores["reference"] == "rest"].set_index("group_name")["auc_group"]
    sweep = stored["threshold_results"].set_index(["group_name", "threshold"])
    for race, part in raw.groupby("race"):
        truth = part["two_year_recid"] == 1
        assert auc[race] == pytest.approx(roc_auc_score(truth, part["decile_score"]), abs=1e-9)
        for d in range(1, 11):
            chosen = part["decile_score"] >= d
            got = sweep.loc[(race, d / 10)]
            assert got["fpr"] == pytest.approx((chosen & ~truth).sum() / (~truth).sum())
            assert got["fnr"] == pytest.approx((~chosen & truth).sum() / truth.sum())
    engine.dispose()


# Single-precision scores: each decile edge e (a float32 whose double differs from its shortest
# decimal) is met by rows at e, one float32 ulp above e and one ulp below the next edge.
SINGLE_EDGES = [0.05, 0.1, 0.123456789, 0.2, 0.3, 1 / 3, 0.45, 0.6, 0.7, 0.9]
SINGLE_THRESHOLD = 0.7  # float32(0.7) = 0.69999998807...: below the threshold, its next float above


def _single_scores() -> np.ndarray:
    """101 float32 scores, ascending: rows 10k and 10k+1 at the k-th edge, 10k+2 one ulp above,
    10k+9 one ulp below the next edge (so the deciles, at rows 10k, are the edges)."""
    edges = np.array(SINGLE_EDGES + [1.0], dtype=np.float32)
    values = []
    for low, high in itertools.pairwise(edges):
        inner = np.linspace(low, high, 9, dtype=np.float32)[2:8]
        up, down = np.nextafter(low, np.float32(2)), np.nextafter(high, np.float32(0))
        values += [low, low, up, *inner, down]
    return np.array([*values, edges[-1]], dtype=np.float32)


def test_single_precision_scores_fall_in_the_same_bins_in_every_mode(db_url):
    """A single-precision score column (SQLite REAL, PostgreSQL real, MariaDB FLOAT) is binned,
    and compared with the threshold, by its stored value in every mode: rows at an edge in the
    edge's bin, one ulp below in the bin below, as numpy on the float32 values."""
    scores = _single_scores()
    n = len(scores)
    single = Float().with_variant(postgresql.REAL(), "postgresql")
    single = single.with_variant(mysql.FLOAT(), "mysql", "mariadb")
    table = Table(
        "single",
        MetaData(),
        Column("pid", String(20)),
        Column("model", String(10)),
        Column("at", DateTime),
        Column("label", Integer),
        Column("score", single),
        Column("race", String(10)),
        Column("sex", String(10)),
    )
    rows = pd.DataFrame(
        {
            "pid": [f"p{i}" for i in range(n)],
            "model": "m",
            "at": pd.Timestamp("2026-05-01"),
            "label": [i * 7 % 3 % 2 for i in range(n)],
            "score": scores.astype(np.float64),  # the float32's value, exactly
            "race": ["A", "B", "C"] * (n // 3) + ["A"] * (n % 3),
            "sex": ["F", "M"] * (n // 2) + ["F"] * (n % 2),
        }
    )
    engine = make_engine(db_url)
    table.create(engine)
    with engine.begin() as connection:
        connection.execute(table.insert(), rows.to_dict("records"))
    audit = _audit("single", "score")
    audit = audit.model_copy(
        update={"decision": audit.decision.model_copy(update={"threshold": SINGLE_THRESHOLD})}
    )
    stored = scores.astype(np.float64)
    quantiles = np.linspace(0, 1, 11)[:-1]
    edges = np.unique(np.quantile(stored, quantiles, method="lower"))
    np.testing.assert_array_equal(edges, np.array(SINGLE_EDGES, dtype=np.float32))
    bins = [max([e for e in edges if v >= e], default=edges[0]) for v in stored]
    frame = rows.assign(score_bin=bins, y_true=rows["label"].astype(float))
    keys = ["attribute", "group_name", "score_bin"]
    parts = []
    for names in (["race"], ["sex"], ["race", "sex"]):
        group = frame[names].astype(str).agg(" x ".join, axis=1).rename("group_name")
        counted = frame.groupby([group, "score_bin"])["y_true"].agg(
            positives="sum", negatives=lambda y: int((y == 0).sum())
        )
        parts.append(counted.reset_index().assign(attribute=" x ".join(names)))
    expected = pd.concat(parts).sort_values(keys, ignore_index=True)
    chosen = stored >= SINGLE_THRESHOLD
    assert chosen.sum() == n - 82  # the two rows at 0.7 (a float32) are below it
    for mode, scanned in (
        ("memory", memory_cells(engine, audit, None, NOW, NOW)),
        ("stream", stream_cells(engine, audit, None, NOW, NOW, chunk_rows=40)),
        ("pushdown", pushdown_cells(engine, audit, None, NOW, NOW)),
    ):
        got = rebinned(scanned.score_counts, scanned.score_bins.edges)
        got = got.sort_values(keys, ignore_index=True)
        pd.testing.assert_frame_equal(
            got[expected.columns], expected, check_dtype=False, obj=mode
        )
        np.testing.assert_array_equal(got["unlabelled"], 0)
        selected = scanned.cells.loc[scanned.cells["y_pred"] == 1, "n"].sum()
        assert selected == chosen.sum(), mode
    engine.dispose()


def test_a_continuous_scores_auc_in_every_scan_mode(db_url):
    """A continuous score's AUC per group from the scan's counts: equal to roc_auc_score on the
    valid rows to 1e-9 in memory and stream modes (counts per distinct value), within 1e-4 pushed
    down (counts per cell of 1/4096 of a decile bin), the error within its bound (half the share
    of positive-negative pairs that share a cell)."""
    from sklearn.metrics import roc_auc_score

    from biasaudit.tasks.scores import score_audit

    engine = write_source(db_url, rows=3000)
    _copy(engine, "doubles")
    audit = _audit("doubles", "score")
    frame = read_predictions(engine, audit, None, NOW, NOW)
    valid, _ = split_valid(frame, audit.attributes, NOW, decision=True)
    rows = valid[valid["y_true"].notna()].astype({"decision_score": float, "y_true": float})
    for mode, scanned, tolerance in (
        ("memory", memory_cells(engine, audit, None, NOW, NOW), 1e-9),
        ("stream", stream_cells(engine, audit, None, NOW, NOW, chunk_rows=700), 1e-9),
        ("pushdown", pushdown_cells(engine, audit, None, NOW, NOW), 1e-4),
    ):
        scores = score_audit(scanned.score_counts, scanned.score_bins, {})["scores"]
        rest = scores[(scores["attribute"] == "race") & (scores["reference"] == "rest")]
        counts = scanned.score_counts[scanned.score_counts["attribute"] == "race"]
        for name, part in rows.groupby("race"):
            got = rest.set_index("group_name").loc[name, "auc_group"]
            truth = roc_auc_score(part["y_true"], part["decision_score"])
            mine = counts[counts["group_name"] == name]
            shared = (mine["positives"] * mine["negatives"]).sum() / (
                mine["positives"].sum() * mine["negatives"].sum()
            )
            assert abs(got - truth) <= tolerance, (mode, name)
            if mode == "pushdown":
                assert abs(got - truth) <= shared / 2 + 1e-12, name
    engine.dispose()
