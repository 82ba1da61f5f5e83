"""One contract per result table (schemas.results): it and the table's model name the same columns,
of the same kind and nullability, and the store writes exactly what the contract holds."""

import json

import pandas as pd
import pandera.errors
import pytest
from alembic import command
from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    Integer,
    SmallInteger,
    String,
    inspect,
    select,
    text,
)

from biasaudit.db.engine import make_engine
from biasaudit.db.store.history import flagged_detections, run_results
from biasaudit.db.store.migrate import alembic_config, upgrade, views
from biasaudit.db.store.models import DetectionResult, PlanningResult
from biasaudit.db.store.results import TABLES, result_tables
from biasaudit.schemas.results import CONTRACTS
from biasaudit.tasks.api import audit_frame

BROKEN = (pandera.errors.SchemaError, pandera.errors.SchemaErrors)
SETTINGS = ("tolerance", "alpha")
# monitor_results' non-null numbers at 0013, and the names 0015 gives some of them.
MONITOR_COLUMNS_0013 = [
    "x_group", "n_group", "x_reference", "n_reference", "unlabelled_group",
    "unlabelled_reference", "pairs", "e_value_up", "e_value_down", "e_value", "e_process",
    "cs_low", "cs_high", "nights", "log_m_up", "log_m_down", "w_k", "w_d", "w_v", "n_pairs",
    "s_d", "s_v", "cs_a", "cs_b", "cs_c", "cs_dq", "cs_eq",
]  # fmt: skip
RENAMED = {
    "x_group": "numerator_group",
    "n_group": "denominator_group",
    "x_reference": "numerator_reference",
    "n_reference": "denominator_reference",
}
# The columns 0014 added and 0015 renamed, single-precision FLOAT on MariaDB as first written.
FLOATS_AFTER_0015 = [
    *((table, name) for table in ("detection_results", "planning_results") for name in SETTINGS),
    *(("monitor_results", name) for name in RENAMED.values()),
    ("metametric_results", "confidence"),
]
# Nullable in the table only for rows stored before the column was filled (migrations 0009 and
# 0019); every run since writes them, so the contract requires them.
LEGACY_NULLABLE = {
    ("group_counts", "unlabelled_pos"),
    ("group_counts", "unlabelled_neg"),
    ("detection_results", "hdi_mass"),
}
# The pandas dtype a contract gives each kind of SQL column.
KINDS = {Float: "float64", BigInteger: "int64", Integer: "int64", SmallInteger: "int64"}


def _kind(column) -> str:
    sql = column.type
    sql = getattr(sql, "impl", sql)  # Real and Moment are TypeDecorators
    if isinstance(sql, Boolean):
        return "bool"
    if isinstance(sql, String):
        return "str"
    return next(kind for base, kind in KINDS.items() if isinstance(sql, base))


def _contract_kind(column) -> str:
    if column.dtype is None:  # reasons: text checked value by value
        return "str"
    dtype = str(column.dtype)
    return "str" if dtype in {"object", "str"} or dtype.startswith("string") else dtype


@pytest.mark.parametrize("frame_name", sorted(TABLES))
def test_each_contract_names_its_tables_columns(frame_name):
    """Same column names, kinds and nullability (run_id is the store's own)."""
    contract = CONTRACTS[frame_name]
    table = TABLES[frame_name].__table__
    model = {c.name: c for c in table.columns if c.name != "run_id"}
    assert set(contract.columns) == set(model), (
        f"{table.name}: only in the model {sorted(set(model) - set(contract.columns))}, "
        f"only in the contract {sorted(set(contract.columns) - set(model))}"
    )
    for name, column in contract.columns.items():
        assert _contract_kind(column) == _kind(model[name]), (table.name, name)
        if not model[name].primary_key and (table.name, name) not in LEGACY_NULLABLE:
            assert column.nullable == model[name].nullable, (table.name, name)
    keys = [c.name for c in table.primary_key.columns if c.name != "run_id"]
    assert sorted(contract.unique) == sorted(keys), table.name
    assert contract.strict is True


def test_every_result_frame_has_a_contract_and_a_table():
    """The smoothed metrics share metric_results with the raw ones; nothing else is unmapped."""
    assert set(CONTRACTS) == set(TABLES) | {"smoothed"}
    assert CONTRACTS["smoothed"] is CONTRACTS["metrics"]


@pytest.fixture(scope="module")
def result():
    frame = pd.DataFrame(
        {
            "prediction_id": [str(i) for i in range(600)],
            "sex": ["f", "m", "x"] * 200,
            "y_true": [(i // 3) % 2 for i in range(600)],
            "y_pred": [(i // 7) % 2 for i in range(600)],
        }
    )
    return audit_frame(frame, attributes=["sex"], tolerance=0.02, alpha=0.1)


def test_the_tested_rows_carry_their_tolerance_and_alpha(result):
    for frame in (result.detection, result.planning):
        assert len(frame) > 0
        assert set(frame["tolerance"]) == {0.02}
        assert set(frame["alpha"]) == {0.1}


def test_the_store_refuses_a_frame_that_breaks_its_contract(result):
    """A missing column is an error at persist, never a column of NULLs; an extra one too."""
    assert result_tables(result.frames())[DetectionResult].columns.tolist() == list(
        CONTRACTS["detection"].columns
    )
    missing = result.__class__(**{**vars(result), "detection": result.detection.drop(columns="z")})
    with pytest.raises(BROKEN, match="z"):
        result_tables(missing.frames())
    extra = result.__class__(**{**vars(result), "planning": result.planning.assign(spare=1.0)})
    with pytest.raises(BROKEN, match="spare"):
        result_tables(extra.frames())


def _insert_run(connection, run_id: int, config: dict) -> None:
    connection.execute(
        text(
            "INSERT INTO audit_runs (id, audit_name, model_id, version, status, as_of, "
            "window_start, window_end, config, config_hash, code_version, started_at, finished_at, "
            "rows_read, rows_valid, rows_quarantined, rows_unlabelled, timings, summary) "
            "VALUES (:id, 'a', 'm', :id, 'succeeded', '2026-01-01', '2025-12-01', "
            "'2026-01-01', :config, 'h', 'v', '2026-01-01', '2026-01-01', 0, 0, 0, 0, '{}', '{}')"
        ),
        {"id": run_id, "config": json.dumps(config)},
    )


def _store_at(db_url: str, revision: str):
    """The store at ``db_url`` (built at head) rebuilt empty at ``revision``, and its engine.
    MariaDB builds a fresh store at head only (db.store.migrate): there it is migrated down instead."""
    engine = make_engine(db_url)
    if engine.dialect.name in {"mysql", "mariadb"}:
        command.downgrade(alembic_config(db_url), revision)
        return engine
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE IF EXISTS alembic_version"))
        for name in reversed(DetectionResult.metadata.sorted_tables):
            connection.execute(
                text(
                    f"DROP TABLE IF EXISTS {name.name} CASCADE"
                    if engine.dialect.name == "postgresql"
                    else f"DROP TABLE IF EXISTS {name.name}"
                )
            )
        for view, _ in views():
            connection.execute(text(f"DROP VIEW IF EXISTS {view}"))
    upgrade(db_url, revision)
    return engine


def test_rows_stored_under_0013_keep_their_values_at_head(db_url):
    """0014: detection and planning rows get their run's configured tolerance and alpha, or the
    defaults of the time where the configuration left them unset. 0015: monitor and meta-metric
    values move to their renamed columns unchanged (on MariaDB, doubles: 0.1 exactly). 0019:
    detection rows keep their decision with no hdi_mass, and the CLI states none of it."""
    engine = _store_at(db_url, "0013")
    configs = {1: {"thresholds": {"tolerance": 0.1, "alpha": 0.01}}, 2: {"thresholds": {}}}
    with engine.begin() as connection:
        for run_id, config in configs.items():
            _insert_run(connection, run_id, config)
            for table in ("detection_results", "planning_results"):
                extra = (
                    ("simple_rule, flagged, decision", "1, true, 'biased'")
                    if table == "detection_results"
                    else ("size_group, size_reference, verdict", "1, 1, 'v'")
                )
                connection.execute(
                    text(
                        f"INSERT INTO {table} (run_id, attribute, group_name, reference, metric, "
                        f"{extra[0]}) VALUES (:id, 'sex', 'f', 'rest', 'tpr', {extra[1]})"
                    ),
                    {"id": run_id},
                )
        connection.execute(
            text(
                "INSERT INTO metametric_results (run_id, attribute, metric, k, k_undefined, level) "
                "VALUES (1, 'sex', 'tpr', 3, 0, 0.99)"
            )
        )
        names = ", ".join(MONITOR_COLUMNS_0013)
        connection.execute(
            text(
                f"INSERT INTO monitor_results (run_id, attribute, group_name, reference, metric, "
                f"crossed, alarm, {names}) VALUES (1, 'sex', 'f', 'rest', 'tpr', false, false, "
                + ", ".join(str(i) for i in range(len(MONITOR_COLUMNS_0013)))
                + ")"
            )
        )
    upgrade(db_url)
    with engine.connect() as connection:
        meta = connection.execute(text("SELECT confidence FROM metametric_results")).scalar()
        assert meta == 0.99
        renamed = [RENAMED.get(c, c) for c in MONITOR_COLUMNS_0013]
        row = connection.execute(text(f"SELECT {', '.join(renamed)} FROM monitor_results")).one()
        assert list(row) == list(range(len(MONITOR_COLUMNS_0013)))
        for model in (DetectionResult, PlanningResult):
            rows = connection.execute(
                select(model.run_id, model.tolerance, model.alpha).order_by(model.run_id)
            ).all()
            assert [tuple(r) for r in rows] == [(1, 0.1, 0.01), (2, 0.05, 0.05)]
    # 0019: the unadjusted decision stays stored, with no mass, and is not stated
    stored = run_results(engine, DetectionResult, 1)
    assert stored["decision"].tolist() == ["biased"] and stored["hdi_mass"].isna().all()
    assert flagged_detections(stored)["decision"].isna().all()
    engine.dispose()


def test_rows_stored_under_0017_keep_their_values_at_head(db_url):
    """0018: MATCH's and calibration's counts and the meta-metrics' denominators move to their
    new names unchanged, at full precision (MariaDB restates a renamed column's type: still a
    double and a bigint); comparison and monitor rows get their run's configured alpha (and the
    monitor's tolerance; a change's is 0), or the defaults of the time; on MariaDB the columns
    0014 and 0015 left single-precision are doubles again."""
    engine = _store_at(db_url, "0017")
    mariadb = engine.dialect.name in {"mysql", "mariadb"}
    if mariadb:  # as 0015 as first written left them
        with engine.begin() as connection:
            for table, column in FLOATS_AFTER_0015:
                connection.execute(text(f"ALTER TABLE {table} MODIFY {column} FLOAT NOT NULL"))
    # neither fits a 4-byte float nor a 4-byte integer exactly
    big, fine = 2**53 - 1, [123456789.5, 234567891.25, 345678912.125]
    configs = {1: {"thresholds": {"tolerance": 0.1, "alpha": 0.01}}, 2: {"thresholds": {}}}
    monitor_columns = [RENAMED.get(c, c) for c in MONITOR_COLUMNS_0013]
    with engine.begin() as connection:
        for run_id, config in configs.items():
            _insert_run(connection, run_id, config)
            connection.execute(
                text(
                    "INSERT INTO comparison_results (run_id, attribute, group_name, metric, "
                    "previous_run_id, status, significant) "
                    "VALUES (:id, 'sex', 'f', 'tpr', 0, 'both', false)"
                ),
                {"id": run_id},
            )
            connection.execute(
                text(
                    "INSERT INTO monitor_results (run_id, attribute, group_name, reference, "
                    f"metric, crossed, alarm, {', '.join(monitor_columns)}) VALUES "
                    f"(:id, 'sex', 'f', 'rest', 'tpr', false, false, "
                    + ", ".join("0" for _ in monitor_columns)
                    + ")"
                ),
                {"id": run_id},
            )
        connection.execute(
            text(
                "INSERT INTO match_results (run_id, attribute, group_name, reference, metric, n) "
                "VALUES (1, 'sex', 'f', 'rest', 'tpr', :n)"
            ),
            {"n": big},
        )
        connection.execute(
            text(
                "INSERT INTO calibration_results (run_id, attribute, group_name, score_bin, n, "
                "positives, confidence) VALUES (1, 'sex', 'f', 0.5, :n, 0, 0.95)"
            ),
            {"n": big - 1},
        )
        connection.execute(
            text(
                "INSERT INTO metametric_results (run_id, attribute, metric, k, k_undefined, "
                "n_min, n_median, n_max, confidence) VALUES (1, 'sex', 'tpr', 3, 0, :a, :b, :c, 0.95)"
            ),
            dict(zip("abc", fine)),
        )
    upgrade(db_url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT predictions_group FROM match_results")).scalar() == big
        assert connection.execute(text("SELECT labelled FROM calibration_results")).scalar() == (
            big - 1
        )
        row = connection.execute(
            text(
                "SELECT denominator_min, denominator_median, denominator_max FROM metametric_results"
            )
        ).one()
        assert list(row) == fine
        for table, tolerance in (("comparison_results", 0.0), ("monitor_results", 0.1)):
            rows = connection.execute(
                text(f"SELECT run_id, tolerance, alpha FROM {table} ORDER BY run_id")
            ).all()
            default = 0.0 if table == "comparison_results" else 0.05
            assert [tuple(r) for r in rows] == [(1, tolerance, 0.01), (2, default, 0.05)], table
        columns = {
            (c["name"], type(c["type"]).__name__.lower())
            for table in ("match_results", "metametric_results", "calibration_results")
            for c in inspect(connection).get_columns(table)
        }
    assert {name for name, _ in columns} >= {"predictions_group", "denominator_median", "labelled"}
    assert not {"n", "n_min", "n_median", "n_max"} & {name for name, _ in columns}
    if mariadb:
        assert {("predictions_group", "bigint"), ("labelled", "bigint")} <= columns
        assert {("denominator_min", "double"), ("denominator_max", "double")} <= columns
        with engine.connect() as connection:
            kinds = {
                (table, c["name"]): type(c["type"]).__name__.lower()
                for table in {table for table, _ in FLOATS_AFTER_0015}
                for c in inspect(connection).get_columns(table)
            }
        assert {kinds[column] for column in FLOATS_AFTER_0015} == {"double"}
    engine.dispose()
