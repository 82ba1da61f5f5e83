"""Real source tables: typed columns, timestamps, JSON keys and score thresholds, on SQLite,
PostgreSQL, MariaDB and DuckDB, in the three scan modes.

Expected cells are computed here from the generated Python values (what the rows mean), never by
the code under test.
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import (
    JSON,
    REAL,
    BigInteger,
    Boolean,
    Column,
    Date,
    DateTime,
    Float,
    Integer,
    MetaData,
    Numeric,
    String,
    Table,
    Uuid,
    event,
)
from sqlalchemy.exc import OperationalError

from biasaudit.db.engine import make_engine
from biasaudit.db.sources.catalogue import SourceError
from biasaudit.db.sources.scan import memory_cells, pushdown_cells, stream_cells
from biasaudit.db.sources.window import window_bounds
from biasaudit.schemas.config import parse_config
from tests.clusters import source_table

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def audit_of(**fields):
    base = {"name": "t", "model": "m", "source": "src", "attributes": ["grp"]}
    return parse_config({"audits": [{**base, **fields}]}).audits[0]


def all_modes(engine, audit, start=None, end=NOW):
    """The scans of the three modes; the stream mode reads the same input as memory (equal
    fingerprints)."""
    scans = {
        "memory": memory_cells(engine, audit, start, end, NOW),
        "stream": stream_cells(engine, audit, start, end, NOW, chunk_rows=1000),
        "pushdown": pushdown_cells(engine, audit, start, end, NOW),
    }
    assert scans["stream"].fingerprint == scans["memory"].fingerprint
    return scans


def expected_cells(frame: pd.DataFrame, attributes: list[str]) -> pd.DataFrame:
    keys = [*attributes, "y_true", "y_pred"]
    frame = frame.assign(
        y_true=frame["y_true"].astype("float64"), y_pred=frame["y_pred"].astype("int64")
    )
    return (
        frame.groupby(keys, dropna=False, sort=True, as_index=False)
        .size()
        .rename(columns={"size": "n"})
        .astype({"n": "int64"})
    )


def same_cells(actual: pd.DataFrame, expected: pd.DataFrame):
    keys = [c for c in expected.columns if c != "n"]
    a = actual.sort_values(keys).reset_index(drop=True)[expected.columns]
    e = expected.sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(a, e, check_dtype=False)


def create(engine, table: Table, rows: list[dict]):
    source_table(engine, table, rows)


# The distributed engines' tests: a table of ids, timestamps, labels, one more column and a group.
ENGINE_COLUMNS = {
    "prediction_id": "pid",
    "predicted_at": "made_at",
    "y_true": "label",
    "y_pred": "pred",
}


def engine_source(engine, pid_type, rows: list[dict], last: tuple[str, Any] = ("pred", Integer)):
    """Create ``src`` (pid, made_at, label, ``last``, grp) on ``engine`` with ``rows``."""
    table = Table(
        "src",
        MetaData(),
        Column("pid", pid_type),
        Column("made_at", DateTime),
        Column("label", Integer),
        Column(*last),
        Column("grp", String(10)),
    )
    create(engine, table, rows)


TIME_KINDS = ["timestamptz", "timestamp", "date", "text"]


@pytest.mark.parametrize("kind", TIME_KINDS)
def test_typed_columns_give_identical_results_in_every_mode(source_db_url, kind):
    """It audits a table of bigint ids, boolean labels, integer decisions, integer and text
    attributes and no score column, with any timestamp type, identically in the three modes and
    equal to the counts of the generated values."""
    typed_columns_audit(source_db_url, kind)


def test_typed_columns_give_identical_results_on_distributed_engines(engine_url):
    """The same on ClickHouse (two shards behind a Distributed table) and Spark SQL, with a
    timestamp column."""
    typed_columns_audit(engine_url, "timestamp")


def typed_columns_audit(url: str, kind: str):
    engine = make_engine(url)
    dialect = engine.dialect.name
    rng = np.random.default_rng(1)
    n = 300
    moments = [NOW - timedelta(days=float(d)) for d in rng.uniform(1, 300, n)]
    aware = kind == "timestamptz" and dialect in {"postgresql", "duckdb"}
    if kind in {"timestamptz", "timestamp"}:
        time_type = DateTime(timezone=aware)
        times = [m if aware else m.replace(tzinfo=None) for m in moments]
    elif kind == "date":
        time_type = Date()
        times = [m.date() for m in moments]
    else:
        time_type = String(40)
        offsets = rng.integers(-12, 13, n)
        times = [
            m.astimezone(timezone(timedelta(hours=int(o)))).isoformat(timespec="microseconds")
            for m, o in zip(moments, offsets)
        ]
    labels = [None if r < 0.1 else bool(r < 0.55) for r in rng.random(n)]
    preds = rng.integers(0, 2, n).tolist()
    groups = rng.choice([1, 2, 10, -3], n).tolist()
    sexes = rng.choice(["F", "M", "f", "F "], n).tolist()  # case and spaces are distinct groups
    table = Table(
        "src",
        MetaData(),
        Column("pid", BigInteger, primary_key=True, autoincrement=False),
        Column("model", String(10)),
        Column("made_at", time_type),
        Column("label", Boolean),
        Column("pred", Integer),
        Column("grp", Integer),
        Column("sex", String(10)),
    )
    rows = [
        {"pid": 10**12 + i, "model": "m", "made_at": t, "label": y, "pred": p, "grp": g, "sex": s}
        for i, (t, y, p, g, s) in enumerate(zip(times, labels, preds, groups, sexes))
    ]
    create(engine, table, rows)
    audit = audit_of(
        attributes=["grp", "sex"],
        columns={
            "prediction_id": "pid",
            "model_id": "model",
            "predicted_at": "made_at",
            "y_true": "label",
            "y_pred": "pred",
        },
    )
    truth = pd.DataFrame(
        {
            "grp": [str(g) for g in groups],
            "sex": sexes,
            "y_true": [np.nan if y is None else float(y) for y in labels],
            "y_pred": preds,
        }
    )
    expected = expected_cells(truth, ["grp", "sex"])
    for mode, scanned in all_modes(engine, audit).items():
        assert scanned.quarantine.empty, (mode, scanned.quarantine.head())
        assert scanned.rows_read == scanned.rows_valid == n, mode
        assert scanned.rows_unlabelled == sum(y is None for y in labels)
        same_cells(scanned.cells, expected)
    engine.dispose()


TEXT_TIMES = {
    "a": ("2026-05-31T23:30:00-01:00", "not_in_future"),  # 2026-06-01 00:30 UTC: future
    "b": ("2026-06-01T00:30:00+02:00", "valid"),  # 2026-05-31 22:30 UTC
    "c": ("2026-05-20 12:00", "valid"),
    "d": ("2026-04-01", "outside"),  # before the start
    "e": (None, "not_nullable"),
    "f": ("soon", "timestamp"),
    "g": ("1700000000", "timestamp"),  # an epoch is no timestamp
    "h": ("2026-02-30", "timestamp"),  # no such day
    "i": ("1850-01-01", "plausible_timestamp"),
    "j": ("2026-05-10T10:00:00.123456Z", "valid"),
    "k": ("2026-05-10t10:00:00", "timestamp"),  # outside the grammar
    "l": ("2024-02-29", "plausible_window"),  # a real leap day, before the start
    "m": ("2026-06-01T01:03:00+01:00", "outside"),  # after the end, within the clock skew
}


def _text_time_table(engine):
    table = Table(
        "src",
        MetaData(),
        Column("pid", String(10)),
        Column("model", String(10)),
        Column("made_at", String(40)),
        Column("label", Integer),
        Column("pred", Integer),
        Column("grp", String(10)),
    )
    rows = [
        {"pid": k, "model": "m", "made_at": t, "label": 1, "pred": 1, "grp": "A"}
        for k, (t, _) in TEXT_TIMES.items()
    ]
    create(engine, table, rows)


@pytest.mark.parametrize("window", ["last_30_days", "all"])
def test_text_timestamps_are_parsed_with_their_zone_and_the_window_balances(source_db_url, window):
    """It decides the window on parsed time with offsets honoured, and reads and quarantines
    (with the reason) every row without a plausible timestamp or in the future, in every mode:
    read = valid + quarantined; with window "all", read = the rows in the table but one after
    the end that is not in the future (within the clock skew)."""
    engine = make_engine(source_db_url)
    _text_time_table(engine)
    audit = audit_of(
        window=window,
        columns={
            "prediction_id": "pid",
            "model_id": "model",
            "predicted_at": "made_at",
            "y_true": "label",
            "y_pred": "pred",
        },
    )
    start, end = window_bounds(audit, NOW)
    outside = {"m", "d", "l"} if window != "all" else {"m"}  # "m" is after the end
    valid = {"b", "c", "j"} | ({"d", "l"} if window == "all" else set())
    reasons = {
        k: r
        for k, (_, r) in TEXT_TIMES.items()
        if r not in {"valid", "outside", "plausible_window"}
    }
    for mode, scanned in all_modes(engine, audit, start, end).items():
        got = dict(zip(scanned.quarantine["row_ref"], scanned.quarantine["rule"]))
        assert set(got) == set(reasons), (mode, got)
        for key, rule in reasons.items():
            assert rule in got[key], (mode, key, got[key])
        assert scanned.rows_valid == len(valid), mode
        assert scanned.rows_read == scanned.rows_valid + len(reasons), mode
        assert scanned.rows_read == len(TEXT_TIMES) - len(outside), mode
    engine.dispose()


def test_json_attribute_keys_are_keys_not_paths(source_db_url):
    """It reads the JSON attributes column's keys holding '.' and '"' as keys on every engine."""
    engine = make_engine(source_db_url)
    if engine.dialect.name == "duckdb":
        pytest.skip("duckdb-engine reflects no JSON type")
    table = Table(
        "src",
        MetaData(),
        Column("prediction_id", String(10)),
        Column("predicted_at", DateTime),
        Column("y_true", Integer),
        Column("y_pred", Integer),
        Column("attributes", JSON),
    )
    values = ["x", "y", "x", "z"]
    rows = [
        {
            "prediction_id": f"p{i}",
            "predicted_at": datetime(2026, 5, 1),
            "y_true": 1,
            "y_pred": i % 2,
            "attributes": {"a.b": v, 'q"k': v.upper(), "a": {"b": "WRONG"}},
        }
        for i, v in enumerate(values)
    ]
    create(engine, table, rows)
    audit = audit_of(attributes=["a.b", 'q"k'])
    truth = pd.DataFrame(
        {
            "a.b": values,
            'q"k': [v.upper() for v in values],
            "y_true": 1.0,
            "y_pred": [i % 2 for i in range(4)],
        }
    )
    expected = expected_cells(truth, ["a.b", 'q"k'])
    for mode, scanned in all_modes(engine, audit).items():
        assert scanned.quarantine.empty, mode
        same_cells(scanned.cells, expected)
    engine.dispose()


def test_decision_from_a_text_score_at_a_threshold(source_db_url):
    """It derives the decision from a text decile score (compared as a number, not as text: "10"
    reaches 8), in every mode, one audit per threshold, and quarantines rows whose score is no
    number."""
    engine = make_engine(source_db_url)
    rng = np.random.default_rng(3)
    n = 200
    deciles = rng.integers(1, 11, n).tolist()
    text = [str(d) for d in deciles]
    text[7] = "n/a"
    text[9] = None
    labels = rng.integers(0, 2, n).tolist()
    groups = rng.choice(["A", "B"], n).tolist()
    table = Table(
        "src",
        MetaData(),
        Column("prediction_id", Uuid if engine.dialect.name == "postgresql" else String(40)),
        Column("predicted_at", DateTime),
        Column("y_true", Integer),
        Column("decile_score", String(10)),
        Column("grp", String(4)),
    )
    ids = [uuid.UUID(int=i + 1) for i in range(n)]
    if engine.dialect.name != "postgresql":
        ids = [str(i) for i in ids]
    rows = [
        {
            "prediction_id": i,
            "predicted_at": datetime(2026, 5, 1),
            "y_true": y,
            "decile_score": s,
            "grp": g,
        }
        for i, y, s, g in zip(ids, labels, text, groups)
    ]
    create(engine, table, rows)
    keep = [i for i in range(n) if i not in (7, 9)]
    for threshold in [5.0, 8.0]:
        audit = audit_of(decision={"score": "decile_score", "threshold": threshold})
        for mode, scanned in all_modes(engine, audit).items():
            truth = pd.DataFrame(
                {
                    "grp": [groups[i] for i in keep],
                    "y_true": [float(labels[i]) for i in keep],
                    "y_pred": [int(deciles[i] >= threshold) for i in keep],
                }
            )
            same_cells(scanned.cells, expected_cells(truth, ["grp"]))
            assert scanned.rows_read == n and scanned.rows_valid == n - 2, mode
            rules = dict(zip(scanned.quarantine["row_ref"].str.lower(), scanned.quarantine["rule"]))
            assert set(rules.values()) == {"finite_number", "not_nullable"}, (mode, rules)
    engine.dispose()


SCORE_TYPES = {
    "double": (Float(), float),
    "real": (REAL(), float),
    "decimal": (Numeric(6, 2), lambda s: Decimal(str(s))),
    "text": (String(10), str),
}


def _score_source(engine, column_type, scores, y_pred=lambda i: 1) -> None:
    """A source table "src" of one row per score (ids p0, p1, ...), labels 1, group A."""
    table = Table(
        "src",
        MetaData(),
        Column("prediction_id", String(10)),
        Column("predicted_at", DateTime),
        Column("y_true", Integer),
        Column("y_pred", Integer),
        Column("score", column_type),
        Column("grp", String(4)),
    )
    rows = [
        {
            "prediction_id": f"p{i}",
            "predicted_at": datetime(2026, 5, 1),
            "y_true": 1,
            "y_pred": y_pred(i),
            "score": s,
            "grp": "A",
        }
        for i, s in enumerate(scores)
    ]
    create(engine, table, rows)


@pytest.mark.parametrize("kind", list(SCORE_TYPES))
def test_score_column_of_mixed_types_is_judged_alike(source_db_url, kind):
    """It accepts a score column (float, real, decimal or number text) with missing values and
    quarantines scores outside [0, 1], such as 1.7, alike in every mode."""
    engine = make_engine(source_db_url)
    column_type, value = SCORE_TYPES[kind]
    scores = [0.1, None, 1.0, 1.5, -0.2, 0.0, 1.7]
    _score_source(engine, column_type, [None if s is None else value(s) for s in scores])
    audit = audit_of()
    for mode, scanned in all_modes(engine, audit).items():
        assert sorted(scanned.quarantine["row_ref"]) == ["p3", "p4", "p6"], mode
        assert set(scanned.quarantine["rule"]) == {"in_unit_interval"}, mode
        assert scanned.rows_valid == 4, mode
    engine.dispose()


def test_decision_on_the_score_column_takes_it_on_the_thresholds_scale(source_db_url):
    """It reads a column named by the decision as a decision score, not as a probability: a
    decile 1..10 in the column ``score`` with threshold 5 is accepted in every mode, while the
    canonical score keeps its [0, 1] rule when the decision reads another column."""
    engine = make_engine(source_db_url)
    n = 40
    deciles = [1 + i % 10 for i in range(n)]
    labels = [i % 3 % 2 for i in range(n)]
    table = Table(
        "src",
        MetaData(),
        Column("prediction_id", String(10)),
        Column("predicted_at", DateTime),
        Column("y_true", Integer),
        Column("score", Float),
        Column("risk", Float),
        Column("grp", String(4)),
    )
    rows = [
        {
            "prediction_id": f"p{i}",
            "predicted_at": datetime(2026, 5, 1),
            "y_true": y,
            "score": float(d),
            "risk": float(d),
            "grp": "A",
        }
        for i, (d, y) in enumerate(zip(deciles, labels))
    ]
    create(engine, table, rows)
    truth = pd.DataFrame(
        {"grp": "A", "y_true": [float(y) for y in labels], "y_pred": [int(d >= 5) for d in deciles]}
    )
    decided = audit_of(decision={"score": "score", "threshold": 5})
    for mode, scanned in all_modes(engine, decided).items():
        assert scanned.quarantine.empty and scanned.rows_valid == n, mode
        same_cells(scanned.cells, expected_cells(truth, ["grp"]))
    other = audit_of(decision={"score": "risk", "threshold": 5})
    above_one = sorted(f"p{i}" for i, d in enumerate(deciles) if d > 1)
    for mode, scanned in all_modes(engine, other).items():
        assert sorted(scanned.quarantine["row_ref"]) == above_one, mode
        assert set(scanned.quarantine["rule"]) == {"in_unit_interval"}, mode
    engine.dispose()


def test_date_column_counts_as_midnight_utc(source_db_url):
    """It takes a DATE as midnight UTC: the day of the window's end is inside, the next is not
    (in the future at the window's end: read and quarantined as such)."""
    engine = make_engine(source_db_url)
    table = Table(
        "src",
        MetaData(),
        Column("prediction_id", String(10)),
        Column("predicted_at", Date),
        Column("y_true", Integer),
        Column("y_pred", Integer),
        Column("grp", String(4)),
    )
    days = [date(2026, 5, 31), date(2026, 6, 1), date(2026, 6, 2), date(2026, 5, 1)]
    rows = [
        {"prediction_id": f"p{i}", "predicted_at": d, "y_true": 1, "y_pred": 1, "grp": "A"}
        for i, d in enumerate(days)
    ]
    create(engine, table, rows)
    audit = audit_of(window="last_30_days")
    start, end = window_bounds(audit, NOW)
    for mode, scanned in all_modes(engine, audit, start, end).items():
        # 2026-06-01 00:00 UTC is the end itself (inside); 2026-05-01 00:00 is before 05-02.
        assert scanned.rows_read == 3 and scanned.rows_valid == 2, mode
        quarantined = scanned.quarantine[["row_ref", "rule"]].to_numpy().tolist()
        assert quarantined == [["p2", "not_in_future"]], mode
    engine.dispose()


def test_bigint_boolean_integer_table_audits_in_pushdown_through_the_flow(db_url, tmp_path):
    """It runs a whole push-down audit (stored results) on a table with a bigint primary key, a
    boolean label, an integer attribute and no score column, with the memory mode's results."""
    from biasaudit.db.store.history import run_metrics
    from biasaudit.flows.audit import run_audit

    engine = make_engine(db_url)
    rng = np.random.default_rng(5)
    n = 600
    table = Table(
        "typed_src",
        MetaData(),
        Column("id", BigInteger, primary_key=True, autoincrement=False),
        Column("made_at", DateTime(timezone=True)),
        Column("outcome", Boolean),
        Column("decision", Integer),
        Column("age_band", Integer),
    )
    rows = [
        {
            "id": 2**40 + i,
            "made_at": datetime(2026, 5, 1, tzinfo=UTC) + timedelta(hours=i),
            "outcome": bool(rng.random() < 0.4),
            "decision": int(rng.random() < 0.5),
            "age_band": int(rng.integers(1, 4)),
        }
        for i in range(n)
    ]
    create(engine, table, rows)
    engine.dispose()
    body = (
        '[[audits]]\nname = "typed"\nmodel = "m"\nsource = "typed_src"\nattributes = ["age_band"]\n'
        'metrics = ["tpr", "fpr"]\n[audits.columns]\nprediction_id = "id"\n'
        'predicted_at = "made_at"\ny_true = "outcome"\ny_pred = "decision"\n'
    )
    (tmp_path / "memory.toml").write_text(body)
    (tmp_path / "push.toml").write_text(body + '[audits.scan]\nmode = "pushdown"\n')
    first = run_audit("typed", str(tmp_path / "memory.toml"), db_url, NOW)
    second = run_audit("typed", str(tmp_path / "push.toml"), db_url, NOW)
    engine = make_engine(db_url)
    a, b = run_metrics(engine, first["run_id"]), run_metrics(engine, second["run_id"])
    engine.dispose()
    assert len(a) > 0
    pd.testing.assert_frame_equal(a, b)
    tpr = b[(b["metric"] == "tpr") & (b["group_name"] == "2")]["value"].iloc[0]
    group = [r for r in rows if r["age_band"] == 2 and r["outcome"]]
    assert tpr == pytest.approx(sum(r["decision"] for r in group) / len(group))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"decision": {"score": "s", "threshold": [0.5, 0.7]}}, "one threshold per audit"),
        ({"decision": {"score": "s", "threshold": float("nan")}}, "finite"),
        ({"source_db": "postgresql://u:secret@host/db"}, "must not hold a password"),
        ({"source_db": "postgresql://u:p%40ss%3Aw%2Frd%25@host/db"}, "must not hold a password"),
        ({"source_db": "postgresql://u:pa/ss@host/db"}, "must not hold a password"),
        ({"source_db": "postgresql://u@host/db?password=secret"}, "must not hold a password"),
        ({"source_db": "postgresql://u@host/db?sslpassword=secret"}, "must not hold a password"),
        ({"source_db": "mysql+pymysql://u@host/db?PASSWD=secret"}, "must not hold a password"),
        ({"source_db": "not a url"}, "not a database URL"),
        ({"window": "last_999999_days"}, "N from 1 to 365,000"),
        ({"monitor": {"metrics": ["prev"]}}, r"\['prev'\]: the monitor watches rates"),
        ({"monitor": {"metrics": ["tpr", "f1"]}}, r"\['f1'\]: the monitor watches rates"),
        ({"monitor": {"metrics": []}}, "no metric: the monitor watches rates"),
        ({"window": "last_0_days"}, "N from 1 to 365,000"),
        ({"source": "pg_catalog.pg_shadow"}, "system catalogue"),
        ({"source": "pg_shadow"}, "system catalogue"),
        ({"source": "PG_CATALOG.pg_authid"}, "system catalogue"),
        ({"source": "information_schema.columns"}, "system catalogue"),
        ({"source": "mysql.user"}, "system catalogue"),
        ({"source": "sys.x"}, "system catalogue"),
        ({"source": "sqlite_master"}, "system catalogue"),
        ({"source": "system.users"}, "system catalogue"),  # ClickHouse
        ({"source": "SYSTEM.tables"}, "system catalogue"),
        ({"source": "INFORMATION_SCHEMA.COLUMNS"}, "system catalogue"),
        ({"source": "system.information_schema.tables"}, "system catalogue"),  # Databricks
        ({"source": "spark_catalog.information_schema.columns"}, "system catalogue"),  # Spark
        ({"source": "hive.sys.tbls"}, "system catalogue"),  # Hive's metastore database
        ({"source": "pg_toast.pg_toast_1255"}, "system catalogue"),
        ({"attributes": ["x" * 64]}, "longer than 63 bytes"),
        (
            {"decision": {"score": "s", "threshold": 0.5}, "columns": {"y_pred": "p"}},
            "exclude each other",
        ),
    ],
)
def test_configuration_limits_are_stated(fields, message):
    """It refuses, naming the problem, several or infinite thresholds, a password in
    source_db, identifiers over the databases' limit, and a decision next to a y_pred column."""
    from biasaudit.schemas.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        audit_of(**fields)


def test_an_empty_password_is_no_secret():
    """ClickHouse's default user has no password: its URL ``default:@host`` is accepted as a
    source, and handed to Prefect as it is; a password of one character is refused."""
    from biasaudit.db.engine import flow_url

    url = "clickhouse+http://default:@127.0.0.1:8123/default"
    assert audit_of(source_db=url).source_db == url
    assert flow_url(url) == url
    with pytest.raises(ValueError, match="must not hold a password"):
        audit_of(source_db="clickhouse+http://default:x@127.0.0.1:8123/default")


def test_source_db_takes_its_password_from_the_environment(monkeypatch):
    """It reads the source from source_db with the password of the named variable."""
    from biasaudit.db.sources.catalogue import source_url

    audit = audit_of(source_db="postgresql://reader@warehouse/db", source_db_password_env="PW")
    monkeypatch.setenv("PW", "s3cret")
    assert source_url(audit, "sqlite:///store.db") == "postgresql://reader:s3cret@warehouse/db"
    assert source_url(audit_of(), "sqlite:///store.db") == "sqlite:///store.db"


def test_compas_as_is_with_a_decile_threshold(tmp_path):
    """It audits the COMPAS file loaded as-is (every column text) with the decision
    decile_score >= 5 (ProPublica's "not Low"), with the counts of the CSV itself."""
    from biasaudit.db.sources.scan import scan_window
    from biasaudit.tasks.counts import group_counts
    from tests.conftest import COMPAS

    if not COMPAS.exists():
        pytest.skip("COMPAS data absent")
    raw = pd.read_csv(COMPAS, dtype=str, keep_default_na=False)
    engine = make_engine(f"sqlite:///{tmp_path / 'compas.db'}")
    raw.to_sql("compas", engine, index=False)
    audit = audit_of(
        source="compas",
        attributes=["race"],
        decision={"score": "decile_score", "threshold": 5},
        columns={
            "prediction_id": "id",
            "predicted_at": "compas_screening_date",
            "y_true": "two_year_recid",
        },
        scan={"mode": "pushdown"},
    )
    scanned = scan_window(engine, audit, None, NOW, NOW)
    engine.dispose()
    assert scanned.quarantine.empty and scanned.rows_valid == len(raw)
    counts = group_counts(scanned.cells, ["race"], [])
    black = counts[(counts["group_name"] == "African-American") & (counts["subset"] == "group")]
    rows = raw[raw["race"] == "African-American"]
    high = rows["decile_score"].astype(int) >= 5
    recid = rows["two_year_recid"] == "1"
    assert int(black["tp"].iloc[0]) == int((high & recid).sum())
    assert int(black["fp"].iloc[0]) == int((high & ~recid).sum())
    assert (rows["score_text"] != "Low").equals(high)  # the threshold is ProPublica's split


def test_decision_from_a_typed_score_on_distributed_engines(engine_url):
    """On ClickHouse and Spark SQL a decision from an integer score at a threshold (decided in the
    push-down's GROUP BY) gives the counts of the generated values in every mode; a row without
    a score is quarantined."""
    engine = make_engine(engine_url)
    made = datetime(2026, 5, 1)
    rows = [
        {"pid": i, "made_at": made, "label": i % 2, "decile": i % 11, "grp": "AB"[i % 3 % 2]}
        for i in range(60)
    ]
    unscored = {"pid": 99, "made_at": made, "label": 1, "decile": None, "grp": "A"}
    engine_source(engine, BigInteger, [*rows, unscored], ("decile", Integer))
    audit = audit_of(
        decision={"score": "decile", "threshold": 5},
        columns={"prediction_id": "pid", "predicted_at": "made_at", "y_true": "label"},
    )
    truth = pd.DataFrame(
        {
            "grp": [r["grp"] for r in rows],
            "y_true": [r["label"] for r in rows],
            "y_pred": [int(r["decile"] >= 5) for r in rows],
        }
    )
    expected = expected_cells(truth, ["grp"])
    for mode, scanned in all_modes(engine, audit).items():
        assert list(scanned.quarantine["rule"]) == ["not_nullable"], mode
        assert scanned.rows_read == 61 and scanned.rows_valid == 60, mode
        same_cells(scanned.cells, expected)
    engine.dispose()


# On ClickHouse (18.16: DateTime and Date from 1970) a moment the column cannot hold, 1850, is
# stored as the zero date, shown as 0000-00-00; so is 1970-01-01 itself. Neither is a real moment.
ZERO_DATES = {
    "a": (datetime(2026, 5, 10), "valid"),
    "b": (datetime(1850, 1, 1), "timestamp"),  # stored as the zero date
    "c": (datetime(1970, 1, 1), "timestamp"),  # the zero date itself
    "d": (datetime(1970, 1, 2), "old"),  # a real moment: before a last_30_days window
    "e": (None, "not_nullable"),
    "f": (datetime(2030, 1, 1), "not_in_future"),
}


@pytest.mark.parametrize("window", ["last_30_days", "all"])
@pytest.mark.parametrize("kind", ["timestamp", "date"])
def test_zero_dates_on_clickhouse_are_quarantined_alike_in_every_mode(clickhouse_url, kind, window):
    """A ClickHouse zero date is no real moment: it is in every window and quarantined as no
    timestamp (its value as ClickHouse shows it), in memory, stream and push-down alike."""
    engine = make_engine(clickhouse_url)
    table = Table(
        "src",
        MetaData(),
        Column("pid", String(10)),
        Column("made_at", DateTime if kind == "timestamp" else Date),
        Column("label", Integer),
        Column("pred", Integer),
        Column("grp", String(10)),
    )
    rows = [
        {
            "pid": k,
            "made_at": t if t is None or kind == "timestamp" else t.date(),
            "label": 1,
            "pred": 1,
            "grp": "A",
        }
        for k, (t, _) in ZERO_DATES.items()
    ]
    create(engine, table, rows)
    audit = audit_of(
        window=window,
        columns={
            "prediction_id": "pid",
            "predicted_at": "made_at",
            "y_true": "label",
            "y_pred": "pred",
        },
    )
    start, end = window_bounds(audit, NOW)
    valid = {"a"} | ({"d"} if window == "all" else set())
    reasons = {k: r for k, (_, r) in ZERO_DATES.items() if r not in {"valid", "old"}}
    zero = "0000-00-00 00:00:00" if kind == "timestamp" else "0000-00-00"
    for mode, scanned in all_modes(engine, audit, start, end).items():
        q = scanned.quarantine
        assert dict(zip(q["row_ref"], q["rule"])) == reasons, mode
        assert set(q.loc[q["rule"] == "timestamp", "value"]) == {zero}, mode
        assert scanned.rows_valid == len(valid), mode
        assert scanned.rows_read == len(valid) + len(reasons), mode
    engine.dispose()


def test_clickhouse_memory_scan_reads_its_rows_whole_not_one_by_one(clickhouse_url, monkeypatch):
    """clickhouse-sqlalchemy's HTTP cursor pops each row from the front of its prefetched list:
    read row by row, a scan's time grows with the square of its rows (147 s for 1M). The memory
    scan reads every row of a 3,000-row table without one fetchone per row, and counts them all."""
    from clickhouse_sqlalchemy.drivers.http.connector import Cursor

    engine = make_engine(clickhouse_url)
    made = datetime(2026, 5, 1)
    rows = [
        {"pid": i, "made_at": made, "label": i % 2, "pred": i % 3 % 2, "grp": "AB"[i % 2]}
        for i in range(3000)
    ]
    engine_source(engine, Integer, rows)
    calls = []
    fetchone = Cursor.fetchone
    monkeypatch.setattr(Cursor, "fetchone", lambda self: calls.append(1) or fetchone(self))
    audit = audit_of(columns=ENGINE_COLUMNS)
    scanned = memory_cells(engine, audit, None, NOW, NOW)
    assert scanned.rows_valid == 3000
    assert len(calls) < 20, len(calls)  # the catalogue's few rows (two reflections), not 3,000
    engine.dispose()


def test_text_timestamps_on_distributed_engines_are_refused_in_one_line(engine_url):
    """ClickHouse and Spark SQL read timestamps from typed columns only: a text one is refused
    before any row is read, in every mode, in one line naming the column, its type and what is
    accepted there."""
    engine = make_engine(engine_url)
    _text_time_table(engine)
    audit = audit_of(columns=ENGINE_COLUMNS)
    engine_name = {"clickhouse": "ClickHouse", "hive": "Spark SQL / Hive"}[engine.dialect.name]
    for scan in (memory_cells, pushdown_cells):
        with pytest.raises(SourceError) as refused:
            scan(engine, audit, None, NOW, NOW)
        assert str(refused.value) == (
            "source 'src': column 'made_at' (predicted_at) is of type String; "
            f"predicted_at is read from a timestamp column on {engine_name}"
        )
    with pytest.raises(SourceError):
        stream_cells(engine, audit, None, NOW, NOW, chunk_rows=1000)
    engine.dispose()


def test_pushdown_on_distributed_engines_sends_one_connection_its_reflection_and_one_group_by(
    engine_url,
):
    """Each statement to Spark's Thrift server costs a round trip (30-90 ms) against a bare
    GROUP BY of 0.7 s at 10M rows. The push-down of a clean table with ``ids_unique`` checks
    out one connection (one test of it), reflects the source through it (one ``DESCRIBE``) and
    sends one GROUP BY: no second connection, reflection or pass."""
    engine = make_engine(engine_url)
    made = datetime(2026, 5, 1)
    rows = [
        {"pid": i, "made_at": made, "label": i % 2, "pred": 1, "grp": "AB"[i % 2]} for i in range(20)
    ]
    engine_source(engine, Integer, rows)
    audit = audit_of(columns=ENGINE_COLUMNS, scan={"mode": "pushdown", "ids_unique": True})
    checkouts, statements = [], []
    event.listen(engine, "checkout", lambda *_: checkouts.append(1))
    event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    scanned = pushdown_cells(engine, audit, None, NOW, NOW)
    assert scanned.rows_valid == 20
    assert len(checkouts) == 1
    grouped = [s for s in statements if "GROUP BY" in s]
    assert len(grouped) == 1, statements
    describe = {"hive": "DESCRIBE src", "clickhouse": 'DESCRIBE TABLE "src"'}[engine.dialect.name]
    assert statements == [describe, grouped[0]]
    engine.dispose()


def test_uuid_ids_on_distributed_engines_give_identical_results_in_every_mode(engine_url):
    """A UUID prediction id (ClickHouse's UUID, which clickhouse-sqlalchemy reflects as a kind
    of String; text on Spark) is scanned alike in the three modes, a repeated one quarantined:
    the push-down compares no UUID with text."""
    engine = make_engine(engine_url)
    made = datetime(2026, 5, 1)
    ids = [uuid.UUID(int=i + 1) for i in range(40)] + [uuid.UUID(int=1)]
    rows = [
        {"pid": u, "made_at": made, "label": i % 2, "pred": i % 3 % 2, "grp": "AB"[i % 2]}
        for i, u in enumerate(ids)
    ]
    engine_source(engine, Uuid, rows)
    scans = all_modes(engine, audit_of(columns=ENGINE_COLUMNS))
    memory = scans["memory"]
    assert memory.rows_read == 41 and memory.rows_valid < 41  # the repeated id is quarantined
    for mode, scanned in scans.items():
        assert (scanned.rows_read, scanned.rows_valid) == (memory.rows_read, memory.rows_valid)
        assert sorted(scanned.quarantine["rule"]) == sorted(memory.quarantine["rule"]), mode
        same_cells(scanned.cells, memory.cells)
    engine.dispose()


def test_a_missing_source_on_distributed_engines_is_one_line(engine_url, monkeypatch):
    """A source that is not there is named with the tables there are, as on every other
    database (both dialects pass the server's own error on); a source that is there but whose
    description fails keeps that error (a transient one is retried), never "no such table"."""
    engine = make_engine(engine_url)
    _text_time_table(engine)
    with pytest.raises(SourceError) as missing:
        pushdown_cells(engine, audit_of(source="ghost"), None, NOW, NOW)
    prefix = "source 'ghost': no such table or view in the database; it has: "
    assert str(missing.value).startswith(prefix)
    listed = str(missing.value).removeprefix(prefix).split(", ")
    assert "src" in listed and "default" not in listed  # tables, not the database's name

    def lost(*_args, **_kwargs):
        raise OperationalError("DESCRIBE src", {}, ConnectionError("connection reset"))

    monkeypatch.setattr(type(engine.dialect), "get_columns", lost)
    with pytest.raises(OperationalError):
        pushdown_cells(engine, audit_of(source="src"), None, NOW, NOW)
    engine.dispose()


# Scores as SQL and CSV writers write them, each with its expected fate: None accepted, else the
# rule the value broke (missing is accepted: the score is optional).
SCORE_NOTATIONS = {
    "5e-05": None,
    "1E-3": None,
    "+.5": None,
    "1.": None,
    " 0.5 ": None,
    "0.25  ": None,
    ".5e-3": None,
    "1e-269": None,
    "0e+00": None,
    None: None,
    "abc": "is_number",
    "0x1": "is_number",
    "1e-400": "is_number",
    "inf": "is_number",
    "NaN": "not_nan",
    " nan": "not_nan",
    "1.5e0": "in_unit_interval",
    "2": "in_unit_interval",
    "-1E-3": "in_unit_interval",
}


def test_scores_in_every_notation_are_read_alike_in_every_mode(source_db_url):
    """Scores in text are read in every notation SQL and CSV writers use (exponents, a lone sign
    or point, spaces around), alike in every mode (the push-down's SQL lets through exactly the
    rows the schema accepts); a score that is no number is quarantined as ``is_number``, NaN as
    ``not_nan`` and a number outside [0, 1] as ``in_unit_interval``."""
    engine = make_engine(source_db_url)
    notations = list(SCORE_NOTATIONS)
    _score_source(engine, String(20), notations)
    expected = {f"p{i}": rule for i, rule in enumerate(SCORE_NOTATIONS.values()) if rule}
    for mode, scanned in all_modes(engine, audit_of()).items():
        rules = dict(zip(scanned.quarantine["row_ref"], scanned.quarantine["rule"]))
        assert rules == expected, mode
        assert scanned.rows_valid == len(notations) - len(expected), mode
    engine.dispose()


@pytest.mark.parametrize("kind", ["double", "real", "numeric", "text"])
def test_a_nan_score_is_quarantined_apart_from_null_in_every_mode(source_db_url, kind):
    """A NaN score (a float or numeric NaN where the store holds one, the text 'NaN' anywhere) is
    no missing score: it is quarantined as ``not_nan`` in every mode, as the decision's score
    too, while a NULL score is accepted (a NULL decision score stays ``not_nullable``)."""
    engine = make_engine(source_db_url)
    dialect = engine.dialect.name
    holds_nan = {"double": {"postgresql", "duckdb"}, "real": {"postgresql", "duckdb"}}
    holds_nan["numeric"] = {"postgresql"}
    if kind != "text" and dialect not in holds_nan[kind]:
        engine.dispose()
        pytest.skip(f"{dialect} stores no {kind} NaN")
    column_type = {"double": Float(), "real": REAL(), "numeric": Numeric(6, 2)}.get(
        kind, String(10)
    )
    nan = {"double": float("nan"), "real": float("nan"), "numeric": Decimal("NaN")}.get(
        kind, "NaN"
    )
    scores = [0.25, nan, None, 0.75]
    as_stored = {"double": float, "real": float, "numeric": lambda s: Decimal(str(s))}
    stored = [s if s is None or s is nan else as_stored.get(kind, str)(s) for s in scores]
    _score_source(engine, column_type, stored, y_pred=lambda i: i % 2)
    for mode, scanned in all_modes(engine, audit_of()).items():
        records = scanned.quarantine[["row_ref", "rule", "value"]].to_dict("records")
        assert records == [{"row_ref": "p1", "rule": "not_nan", "value": "NaN"}], mode
        assert scanned.rows_valid == 3, mode
    decided = audit_of(decision={"score": "score", "threshold": 0.5})
    for mode, scanned in all_modes(engine, decided).items():
        rules = dict(zip(scanned.quarantine["row_ref"], scanned.quarantine["rule"]))
        assert rules == {"p1": "not_nan", "p2": "not_nullable"}, mode
        assert scanned.rows_valid == 2, mode
    engine.dispose()
