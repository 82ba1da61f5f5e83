"""Group names the result store cannot hold are quarantined before any statistic: a name longer
than the store's group key (PostgreSQL 512 characters, MariaDB 255, SQLite no limit), an
intersection label longer than that, a NUL character for a PostgreSQL store. Real runs on every
store (SQLite, PostgreSQL, MariaDB) and source (SQLite, PostgreSQL, MariaDB, DuckDB) in every scan
mode; the expectations are written out here from the rows, not computed by the code under test.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, Text, select, text
from sqlalchemy.orm import Session

from biasaudit.db.engine import make_engine
from biasaudit.db.store.models import AuditRun, GroupCount, MonitorResult, QuarantinedRow
from tests.conftest import fresh_mariadb

NOW = datetime(2026, 6, 1, tzinfo=UTC)
KINDS = ["sqlite", "postgresql", "mariadb", "duckdb"]
MODES = ["memory", "stream", "pushdown"]
NFC = unicodedata.normalize("NFC", "é")
NFD = unicodedata.normalize("NFD", "é")
# The hostile rows: prediction id -> (race, sex).
HOSTILE = {
    "kb10": ("k" * 10_240, "m"),
    "wide": ("r" * 400, "s" * 300),
    "c300": ("n" * 300, "f"),
    "nul": ("a\x00b", "f"),
}
GOOD = [(race, sex) for race in ("a", "b", NFC, NFD) for sex in ("f", "m")]
# What each store refuses of the hostile rows: id -> {(column, rule, value)}.
REFUSED = {
    "sqlite": {},
    "postgresql": {
        "kb10": {("race", "max_length_512", "k" * 10_240)},
        "wide": {("race x sex", "max_length_512", "r" * 400 + " x " + "s" * 300)},
        "nul": {("race", "no_nul_byte", "a\\x00b")},  # NUL escaped in the stored record
    },
    "mariadb": {
        "kb10": {("race", "max_length_255", "k" * 10_240)},
        "wide": {("race", "max_length_255", "r" * 400), ("sex", "max_length_255", "s" * 300)},
        "c300": {("race", "max_length_255", "n" * 300)},
    },
}


def source_url(kind: str, store_kind: str, store_url: str, request, folder) -> str | None:
    """A database of ``kind`` for the source table: the store itself when of the same kind
    (None: no source_db), else an empty one."""
    if kind == store_kind:
        return None
    if kind == "sqlite":
        return f"sqlite:///{folder / 'source.db'}"
    if kind == "duckdb":
        pytest.importorskip("duckdb_engine")
        return f"duckdb:///{folder / 'source.duckdb'}"
    if kind == "mariadb":
        return fresh_mariadb(request.getfixturevalue("mariadb_server_url"))
    url = request.getfixturevalue("postgres_server_url")
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    return url


def source_rows(kind: str) -> list[dict]:
    """Good rows and the hostile ones the source can hold (PostgreSQL text holds no NUL)."""
    pairs = [(f"g{i}", race, sex) for i, (race, sex) in enumerate(GOOD)]
    pairs += [
        (pid, *names) for pid, names in HOSTILE.items() if kind != "postgresql" or pid != "nul"
    ]
    return [
        {
            "pid": pid,
            "made_at": (NOW - timedelta(days=1 + i)).replace(tzinfo=None),
            "label": i % 2,
            "pred": (i // 2) % 2,
            "race": race,
            "sex": sex,
        }
        for i, (pid, race, sex) in enumerate(pairs)
    ]


def create_source(url: str, kind: str) -> list[dict]:
    """The table ``hostile_src`` at ``url`` with the rows of ``source_rows``; those rows."""
    engine = make_engine(url)
    table = Table(
        "hostile_src",
        MetaData(),
        Column("pid", String(16), primary_key=True),
        Column("model", String(8), default="m"),
        Column("made_at", DateTime),
        Column("label", Integer),
        Column("pred", Integer),
        Column("race", Text),
        Column("sex", Text),
    )
    rows = source_rows(kind)
    table.create(engine)
    with engine.begin() as connection:
        connection.execute(table.insert(), rows)
    engine.dispose()
    return rows


def store_kind(url: str) -> str:
    name = make_engine(url).dialect.name
    return "mariadb" if name == "mysql" else name


def config(source_db: str | None, mode: str, extra: str = "") -> str:
    lines = [
        "[[audits]]",
        f'name = "{mode}"',
        'model = "m"',
        'source = "hostile_src"',
        *([f'source_db = "{source_db}"'] if source_db else []),
        'attributes = ["race", "sex"]',
        'intersections = [["race", "sex"]]',
        'metrics = ["ppr"]',
        "[audits.columns]",
        'prediction_id = "pid"',
        'model_id = "model"',
        'predicted_at = "made_at"',
        'y_true = "label"',
        'y_pred = "pred"',
        "[audits.thresholds]",
        "max_invalid_fraction = 0.5",
        "[audits.scan]",
        f'mode = "{mode}"',
        *(["chunk_rows = 1000"] if mode == "stream" else []),
    ]
    return "\n".join(lines) + "\n" + extra


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("db_url", ["sqlite", "postgresql", "mariadb"], indirect=True)
def test_names_the_store_cannot_hold_are_quarantined_before_the_statistics(
    db_url, kind, request, tmp_path
):
    """Each run succeeds; every row is accepted or quarantined with its rule (the counts add
    up); the stored groups are exactly the accepted rows' names (NFC and NFD two groups, long
    names whole), so no count or statistic saw a refused row."""
    from biasaudit.flows.audit import run_audit

    store = store_kind(db_url)
    source = source_url(kind, store, db_url, request, tmp_path)
    rows = create_source(source or db_url, kind)
    ids = {r["pid"] for r in rows}
    refused = {pid: why for pid, why in REFUSED[store].items() if pid in ids}
    accepted = [r for r in rows if r["pid"] not in refused]
    for mode in MODES:
        path = tmp_path / f"{mode}.toml"
        path.write_text(config(source, mode))
        outcome = run_audit(mode, str(path), db_url, NOW)
        engine = make_engine(db_url)
        with Session(engine) as connection:
            run = connection.execute(
                select(AuditRun).where(AuditRun.id == outcome["run_id"])
            ).scalar_one()
            records = (
                connection.execute(select(QuarantinedRow).where(QuarantinedRow.run_id == run.id))
                .scalars()
                .all()
            )
            counts = (
                connection.execute(
                    select(GroupCount).where(
                        GroupCount.run_id == run.id, GroupCount.subset == "group"
                    )
                )
                .scalars()
                .all()
            )
        engine.dispose()
        assert (run.status, run.rows_read) == ("succeeded", len(rows)), mode
        assert (run.rows_valid, run.rows_quarantined) == (len(accepted), len(refused)), mode
        found: dict[str, set] = {}
        for r in records:
            found.setdefault(r.row_ref, set()).add((r.column_name, r.rule, r.value))
        assert found == refused, mode
        for attribute, names in (
            ("race", {r["race"] for r in accepted}),
            ("sex", {r["sex"] for r in accepted}),
            ("race x sex", {f"{r['race']} x {r['sex']}" for r in accepted}),
        ):
            groups = [c for c in counts if c.attribute == attribute]
            assert {c.group_name for c in groups} == names, (mode, attribute)
            total = sum(c.tp + c.fp + c.fn + c.tn + c.n_unlabelled for c in groups)
            assert total == len(accepted), (mode, attribute)


@pytest.mark.parametrize("db_url", ["postgresql", "mariadb"], indirect=True)
def test_a_monitored_run_counts_no_name_the_store_cannot_hold(db_url, tmp_path):
    """The monitor's increment is read with the same limits: the run and its monitor_results
    are stored, and no refused name is among them."""
    from biasaudit.flows.audit import run_audit

    source = f"sqlite:///{tmp_path / 'source.db'}"
    create_source(source, "sqlite")
    path = tmp_path / "monitored.toml"
    path.write_text(config(source, "memory", '[audits.monitor]\nmetrics = ["ppr"]\n'))
    outcome = run_audit("memory", str(path), db_url, NOW)
    engine = make_engine(db_url)
    with Session(engine) as session:
        monitored = (
            session.execute(select(MonitorResult).where(MonitorResult.run_id == outcome["run_id"]))
            .scalars()
            .all()
        )
    engine.dispose()
    refused = {HOSTILE[pid] for pid in REFUSED[store_kind(db_url)]}
    names = {m.group_name for m in monitored}
    assert names and names.isdisjoint({race for race, _ in refused})
    assert names.isdisjoint({f"{race} x {sex}" for race, sex in refused})


@pytest.mark.parametrize("db_url", ["mariadb"], indirect=True)
def test_an_intersection_name_longer_than_the_store_keeps_fails_before_the_statistics(
    db_url, tmp_path
):
    """Two attribute names of 63 characters make a 129-character intersection name, one more
    than MariaDB keeps: the run fails before reading a row, its error naming it, nothing counted."""
    from biasaudit.flows.audit import run_audit

    first, second = "a" * 63, "b" * 63
    source = f"sqlite:///{tmp_path / 'source.db'}"
    engine = make_engine(source)
    table = Table(
        "wide_names",
        MetaData(),
        Column("prediction_id", String(8), primary_key=True),
        Column("model_id", String(8)),
        Column("y_true", Integer),
        Column("y_pred", Integer),
        Column(first, String(8)),
        Column(second, String(8)),
    )
    table.create(engine)
    with engine.begin() as connection:
        connection.execute(
            table.insert(),
            [
                {
                    "prediction_id": f"p{i}",
                    "model_id": "m",
                    "y_true": i % 2,
                    "y_pred": 1,
                    first: "x",
                    second: "y",
                }
                for i in range(4)
            ],
        )
    engine.dispose()
    path = tmp_path / "wide.toml"
    path.write_text(
        f'[[audits]]\nname = "wide"\nmodel = "m"\nsource = "wide_names"\nsource_db = "{source}"\n'
        f'attributes = ["{first}", "{second}"]\nintersections = [["{first}", "{second}"]]\n'
        'metrics = ["ppr"]\n'
    )
    with pytest.raises(ValueError, match=f"longer than 128 characters.*'{first} x {second}'"):
        run_audit("wide", str(path), db_url, NOW)
    engine = make_engine(db_url)
    with Session(engine) as session:
        runs = session.execute(select(AuditRun)).scalars().all()
        counted = session.execute(select(GroupCount)).scalars().all()
    engine.dispose()
    assert [r.status for r in runs] == ["failed"] and counted == []
    assert "longer than 128 characters" in runs[0].error
