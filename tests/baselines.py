"""What users see, recorded to files so that two checkouts can be compared byte for byte: the proof
that a restructuring changed nothing for users.

``record OUT`` writes, for the checkout it runs from:

- ``store/TABLE.csv``: every table of a SQLite store after the demo's four audits (as of the
  demo's end; no Prefect run: ``flows.pipeline.run_audit``), rows sorted by every column, without
  what differs between two runs of the same code (times, durations, flow run ids);
- ``reports/*.html``: the demo's reports, the moments of the run's own clock masked;
- ``compas/FRAME.csv``: every result frame of ``audit_frame`` on ProPublica's COMPAS file (race,
  sex and race x sex, every metric, the decile score audited too), where the tests find the file
  (``tests.conftest.COMPAS``);
- ``help/COMMAND.txt``: ``biasaudit [COMMAND] --help`` for every command;
- ``cli/NAME.txt``: what the commands that read the store print on the demo's store (history in
  each mode and format, compare, quarantine, audits, plan, rank, metrics), with their exit codes;
- ``sql/ENGINE-MODE.sql``: every statement the scan of the demo's credit audit sends to a source in
  each scan mode, on SQLite and DuckDB (files), PostgreSQL and MariaDB (servers at
  ``BIASAUDIT_TEST_POSTGRES_URL`` / ``BIASAUDIT_TEST_MARIADB_URL``, or the test defaults;
  an unreachable server is written as such);
- ``compiled/DIALECT-TABLE.sql``: the window's query, its per-row rules and its delay compiled for
  every engine the sources know (ClickHouse and Spark SQL among them: no server needed), on a
  table of typed columns and, where the engine parses text, one of text columns.

``compare A B`` lists the files that differ or exist in one folder only, and exits 1 if any.

Usage, from the repository root (another checkout's through its own interpreter path)::

    .venv/bin/python -m tests.baselines record /tmp/before
    .venv/bin/python -m tests.baselines compare /tmp/before /tmp/after
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import uuid
from contextlib import contextmanager, redirect_stdout
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd

from tests.conftest import COMPAS

ROOT = Path(__file__).resolve().parents[1]
# Columns whose values differ between two runs of the same code on the same input.
VOLATILE = {
    "audit_runs": {"started_at", "finished_at", "heartbeat_at", "flow_run_id", "timings"},
    "quarantined_rows": {"created_at"},
}
MOMENT = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d(\.\d+)?)?( ?UTC|Z|[+-]\d\d:?\d\d)?")
TODAY = {f"{datetime.now(UTC) - timedelta(days=d):%Y-%m-%d}" for d in (0, 1)}


def masked(text: str) -> str:
    """``text`` with every moment of today or yesterday (UTC), the wall clock of the run that
    recorded it (when a run started, finished, was reported), as ``<now>``; the data's own
    moments (2026-09 and 2026-10 in the demo) stay."""
    return MOMENT.sub(lambda m: "<now>" if m.group(0)[:10] in TODAY else m.group(0), text)


SCAN_MODES = ("memory", "stream", "pushdown")


def _frame_csv(frame: pd.DataFrame, path: Path) -> None:
    """``frame`` as CSV with its rows in one order whatever order they came in."""
    frame = frame.reset_index(drop=True)
    order = frame.astype(str).sort_values(list(frame.columns)).index if len(frame.columns) else []
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.loc[order].to_csv(path, index=False, float_format="%.17g")


def _demo_store(folder: Path) -> str:
    from biasaudit.db.engine import make_engine
    from biasaudit.db.store.load import load_predictions
    from biasaudit.db.store.migrate import upgrade
    from biasaudit.flows.config_files import configured_names
    from biasaudit.flows.demo import END, GROUPS, synthetic_predictions
    from biasaudit.flows.pipeline import run_audit
    from biasaudit.flows.report import REPORTS_ENV

    url = f"sqlite:///{folder / 'store.db'}"
    upgrade(url)
    load_predictions(make_engine(url), synthetic_predictions(), list(GROUPS), "demo")
    config = str(ROOT / "flows" / "demo_audits.toml")
    os.environ[REPORTS_ENV] = str(folder / "reports")
    with redirect_stdout(io.StringIO()):
        for name in configured_names(config):
            run_audit(name, config, url, END)
        run_audit("credit-race", config, url, END - timedelta(days=5))  # what compare compares
    return url


def record_store(url: str, out: Path) -> None:
    from sqlalchemy import inspect, text

    from biasaudit.db.engine import make_engine

    engine = make_engine(url)
    with engine.connect() as connection:
        for name in sorted(inspect(connection).get_table_names()):
            frame = pd.read_sql_query(text(f'SELECT * FROM "{name}"'), connection)
            frame = frame.drop(columns=sorted(VOLATILE.get(name, set()) & set(frame.columns)))
            if "summary" in frame.columns:  # JSON: its durations and moments masked
                frame["summary"] = frame["summary"].map(_masked_json)
            _frame_csv(frame, out / "store" / f"{name}.csv")
    engine.dispose()


def _masked_json(value):
    if not isinstance(value, str):
        return value
    data = json.loads(value)
    if isinstance(data, dict):
        data.pop("timings", None)
    return masked(json.dumps(data, sort_keys=True))


def record_reports(folder: Path, out: Path) -> None:
    for page in sorted((folder / "reports").glob("*.html")):
        target = out / "reports" / page.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(masked(page.read_text()))


def record_compas(out: Path) -> None:
    if not COMPAS.exists():
        (out / "compas").mkdir(parents=True, exist_ok=True)
        (out / "compas" / "ABSENT").write_text(f"{COMPAS} not found\n")
        return
    import warnings

    import biasaudit

    raw = pd.read_csv(COMPAS)
    frame = pd.DataFrame(
        {
            "prediction_id": raw["id"].astype(str),
            "y_true": raw["two_year_recid"].astype(float),
            "y_pred": (raw["score_text"] != "Low").astype(int),
            "decile_score": raw["decile_score"].astype(float),
            "race": raw["race"],
            "sex": raw["sex"],
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = biasaudit.audit_frame(
            frame,
            attributes=["race", "sex"],
            intersections=[["race", "sex"]],
            reference_groups={"race": "Caucasian"},
            score="decile_score",
            bootstrap_replicates=200,
        )
    for field in fields(result):
        value = getattr(result, field.name)
        if isinstance(value, pd.DataFrame):
            _frame_csv(value, out / "compas" / f"{field.name}.csv")
    summary = json.dumps(dict(result.summary), sort_keys=True, default=str, indent=1)
    (out / "compas" / "summary.json").write_text(masked(summary))


def record_help(out: Path) -> None:
    from typer.main import get_command
    from typer.testing import CliRunner

    from biasaudit.flows.cli import app

    runner = CliRunner()
    group = get_command(app)
    paths: list[list[str]] = [[]]
    for name, command in sorted(group.commands.items()):  # type: ignore[attr-defined]
        paths.append([name])
        paths.extend([name, sub] for sub in sorted(getattr(command, "commands", {}) or {}))
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "100", "TERM": "dumb"})
        target = out / "help" / f"{'-'.join(path) or 'biasaudit'}.txt"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(result.output)


@contextmanager
def _statements(engine, sink: list[str]):
    from sqlalchemy import event

    def seen(conn, cursor, statement, parameters, context, executemany):
        sink.append(re.sub(r"\s+", " ", statement).strip())

    event.listen(engine, "before_cursor_execute", seen)
    try:
        yield
    finally:
        event.remove(engine, "before_cursor_execute", seen)


def _source_urls(folder: Path) -> dict[str, str | None]:
    from sqlalchemy import create_engine, text

    urls: dict[str, str | None] = {
        "sqlite": f"sqlite:///{folder / 'source.db'}",
        "duckdb": f"duckdb:///{folder / 'source.duckdb'}",
    }
    servers = {
        "postgresql": os.environ.get(
            "BIASAUDIT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
        "mariadb": os.environ.get(
            "BIASAUDIT_TEST_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306/test"
        ),
    }
    for kind, server in servers.items():
        name = f"biasaudit_baseline_{uuid.uuid4().hex[:8]}"
        try:
            admin = create_engine(server, isolation_level="AUTOCOMMIT")
            with admin.connect() as connection:
                quoted = f'"{name}"' if kind == "postgresql" else f"`{name}`"
                connection.execute(text(f"CREATE DATABASE {quoted}"))
            urls[kind] = admin.url.set(database=name).render_as_string(hide_password=False)
            admin.dispose()
        except Exception:  # noqa: BLE001 - an unreachable server is recorded as such
            urls[kind] = None
    return urls


def _drop(kind: str, url: str) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    name = parsed.database
    admin = create_engine(
        parsed.set(database="postgres" if kind == "postgresql" else "test"),
        isolation_level="AUTOCOMMIT",
    )
    with admin.connect() as connection:
        quoted = f'"{name}" WITH (FORCE)' if kind == "postgresql" else f"`{name}`"
        connection.execute(text(f"DROP DATABASE IF EXISTS {quoted}"))
    admin.dispose()


def record_sql(folder: Path, out: Path) -> None:
    """Every statement each scan mode sends to the source, the demo's credit audit reading the
    demo's predictions loaded into a database of each kind."""
    from biasaudit.db.engine import make_engine
    from biasaudit.db.sources.scan import scan_window
    from biasaudit.db.sources.window import window_bounds
    from biasaudit.flows.config_files import load_audit
    from biasaudit.flows.demo import END, synthetic_predictions

    demo = synthetic_predictions()
    demo = demo[demo["model_id"] == "credit-scorer"]
    base = load_audit(ROOT / "flows" / "demo_audits.toml", "credit-race")
    base = base.model_copy(update={"source": "flat"})
    start, end = window_bounds(base, END)
    now = datetime(2026, 11, 1, tzinfo=UTC)
    for kind, url in _source_urls(folder).items():
        target = out / "sql" / f"{kind}.sql"
        target.parent.mkdir(parents=True, exist_ok=True)
        if url is None:
            target.write_text(f"{kind}: no server reachable\n")
            continue
        try:
            engine = make_engine(url)
            demo.to_sql("flat", engine, index=False, chunksize=5000)
            for mode in SCAN_MODES:
                audit = base.model_copy(
                    update={"scan": base.scan.model_copy(update={"mode": mode})}
                )
                sink: list[str] = []
                with _statements(engine, sink):
                    scan_window(engine, audit, start, end, now)
                (out / "sql" / f"{kind}-{mode}.sql").write_text("\n".join(sink) + "\n")
            engine.dispose()
            target.unlink(missing_ok=True)
        finally:
            if kind in ("postgresql", "mariadb"):
                _drop(kind, url)


# Dialects the compiled statements are recorded for, by file name, and whether each parses text.
DIALECTS = {
    "sqlite": ("sqlite://", True),
    "postgresql": ("postgresql+psycopg://", True),
    "mysql": ("mysql+pymysql://", True),
    "mariadb": ("mariadb+pymysql://", True),
    "duckdb": ("duckdb://", True),
    "clickhouse": ("clickhouse+http://", False),
    "hive": ("hive://", False),
}


def _compiled(statement, dialect) -> str:
    compiled = statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    values = ", ".join(f"{k}={v!r}" for k, v in sorted(compiled.params.items()))
    return re.sub(r"\s+", " ", str(compiled)).strip() + f"\n  -- {values}"


def record_compiled(out: Path) -> None:
    """The window's statements compiled for each dialect: its query (a window of days and one of
    all time), its per-row rules, its delay and its grouping keys; where the engine parses no
    text, what it says of a table of text columns."""
    from sqlalchemy import Column, DateTime, Float, Integer, MetaData, String, Table, select
    from sqlalchemy.engine import make_url

    from biasaudit.db.sources.catalogue import table_problems
    from biasaudit.db.sources.engines import engine_for
    from biasaudit.db.sources.window import Window
    from biasaudit.flows.config_files import load_audit

    audit = load_audit(ROOT / "flows" / "demo_audits.toml", "credit-race")
    audit = audit.model_copy(
        update={"source": "flat", "columns": {**audit.columns, "labelled_at": "labelled_at"}}
    )
    kinds = {
        "typed": (String, DateTime(timezone=True), Integer, Float),
        "text": (String, String, String, String),
    }
    end, now = datetime(2026, 10, 31, tzinfo=UTC), datetime(2026, 11, 1, tzinfo=UTC)
    start = end - timedelta(days=30)
    for name, (url, parses_text) in DIALECTS.items():
        dialect = make_url(url).get_dialect()()
        for kind, (ident, moment, label, score) in kinds.items():
            table = Table(
                "flat",
                MetaData(),
                Column("prediction_id", ident, nullable=False),
                Column("predicted_at", moment),
                Column("labelled_at", moment),
                Column("model_id", String),
                Column("model_version", String),
                Column("y_true", label),
                Column("y_pred", label),
                Column("score", score),
                *[Column(a, String) for a in audit.attributes],
            )
            target = out / "compiled" / f"{name}-{kind}.sql"
            target.parent.mkdir(parents=True, exist_ok=True)
            if not parses_text and kind == "text":  # refused, each column in one line
                target.write_text("\n".join(table_problems(table, audit, engine_for(dialect.name))) + "\n")
                continue
            window = Window(table, audit, engine_for(dialect.name))
            keys = [window.key(a).label(a) for a in audit.attributes]
            statements = {
                "query": window.query(start, end, now),
                "query-all": window.query(None, end, now),
                "row_ok": select(window.row_ok(now).label("ok")),
                "delay": select(window.delay().label("delay")),
                "keys": select(*keys),
            }
            target.write_text(
                "".join(f"-- {k}\n{_compiled(s, dialect)}\n" for k, s in statements.items())
            )


# The read-only commands a user runs on the demo's store (runs 1 to 4 as of the demo's end, run 5
# credit-race's five days earlier), by the file they are recorded in.
READS = {
    "history": ["history"],
    "history-json": ["history", "--format", "json"],
    "history-run": ["history", "1", "--all"],
    "history-run-csv": ["history", "2", "--format", "csv"],
    "history-metric": ["history", "--metric", "fpr", "--attribute", "race"]
    + ["--audit", "credit-race"],
    "history-monitor": ["history", "--monitor"],
    "compare": ["compare", "1", "--all"],
    "compare-csv": ["compare", "1", "5", "--format", "csv"],
    "quarantine": ["quarantine", "4"],
    "audits": ["audits", "-c", str(ROOT / "flows" / "demo_audits.toml")],
    "plan": ["plan", "--metric", "tpr", "--rate", "0.6", "--rate", "0.7"]
    + ["--prev", "0.3", "--prev", "0.4"],
    "rank": ["rank", "1", "--metric", "fpr", "--attribute", "race", "--group", "Black"],
    "metrics": ["metrics"],
}


def record_reads(url: str, folder: Path, out: Path) -> None:
    from typer.testing import CliRunner

    from biasaudit.flows.cli import app

    runner = CliRunner()
    for name, args in READS.items():
        store = [] if args[0] in ("plan", "metrics") else ["--db", url]
        result = runner.invoke(app, [*args, *store], env={"COLUMNS": "160", "TERM": "dumb"})
        target = out / "cli" / f"{name}.txt"
        target.parent.mkdir(parents=True, exist_ok=True)
        shown = masked(result.output).replace(str(folder), "<work>").replace(str(ROOT), "<root>")
        lines = (line.strip() for line in shown.splitlines())  # a centred title's margins
        target.write_text(f"exit {result.exit_code}\n" + "\n".join(lines) + "\n")


def record(out: Path) -> None:
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        url = _demo_store(folder)
        record_store(url, out)
        record_reads(url, folder, out)
        record_reports(folder, out)
        record_sql(folder, out)
    record_compas(out)
    record_help(out)
    record_compiled(out)


def compare(before: Path, after: Path) -> list[str]:
    """The files that differ, or exist under one of the two folders only."""
    names = {p.relative_to(before) for p in before.rglob("*") if p.is_file()}
    names |= {p.relative_to(after) for p in after.rglob("*") if p.is_file()}
    differ = []
    for name in sorted(names):
        a, b = before / name, after / name
        if not (a.exists() and b.exists()) or a.read_bytes() != b.read_bytes():
            differ.append(str(name))
    return differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("record").add_argument("out", type=Path)
    both = commands.add_parser("compare")
    both.add_argument("before", type=Path)
    both.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "record":
        record(args.out)
        print(f"recorded {sum(1 for p in args.out.rglob('*') if p.is_file())} files in {args.out}")
        return 0
    differ = compare(args.before, args.after)
    for name in differ:
        print(f"differs: {name}")
    print(f"{len(differ)} of the recorded files differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
