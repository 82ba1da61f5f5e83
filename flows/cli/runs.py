"""Commands that run audits: `run`, `demo`, `backfill`, `backtest`, `serve`, `deploy`, `abandon`,
`audits`."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import typer

from biasaudit.flows.cli.common import (
    AuditArgument,
    ConfigOption,
    DbOption,
    FromOption,
    Mistake,
    ToOption,
    _check_format,
    _date,
    _emit,
    _engine,
    _fail,
    _print_frame,
    _say,
    app,
    console,
)
from biasaudit.flows.cli.history import _print_flagged, _print_runs
from biasaudit.flows.cli.server import FIRST_RUN_NOTE, _prefect_environment, bounded_flow

DEMO_CONFIG = Path(__file__).parents[1] / "demo_audits.toml"
# The nightly deployment's options, served or deployed to a work pool.
CronOption = Annotated[str, typer.Option(metavar="CRON", help="Schedule (cron syntax)")]
ScheduleZoneOption = Annotated[
    str, typer.Option("--timezone", metavar="ZONE", help="Time zone of the schedule")
]
DeploymentOption = Annotated[str, typer.Option(metavar="NAME", help="Deployment name")]


@app.command()
def run(
    audit: AuditArgument,
    config: ConfigOption = None,
    db: DbOption = None,
    as_of: Annotated[
        str | None,
        typer.Option(
            metavar="DATE", help="Audit as of this date/time (ISO; without a zone, in --timezone)"
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Write a new version even if input is unchanged")
    ] = False,
    timezone_: Annotated[
        str | None,
        typer.Option(
            "--timezone",
            metavar="ZONE",
            envvar="BIASAUDIT_TIMEZONE",
            help="Time zone of the window's calendar days and of --as-of (default UTC)",
        ),
    ] = None,
) -> None:
    """Run one audit now (one Prefect flow run); prints the run, its flagged findings and the
    report's path. The window ends at --as-of exactly (default now); "last_N_days" is N calendar
    days in --timezone before it."""
    from biasaudit.db.engine import flow_url
    from biasaudit.flows.config_files import default_config_path, load_audit

    zone = _zone(timezone_)
    moment = _date(as_of)
    if (
        moment is not None
        and zone is not None
        and datetime.fromisoformat(str(as_of)).tzinfo is None
    ):
        moment = moment.replace(tzinfo=zone)  # a wall-clock time in --timezone
    configured = load_audit(Path(config or default_config_path()), audit)
    _engine(db).dispose()
    # configuration, source, model, window, reference groups, labels: a mistake fails before Prefect
    problems = _data_problems(configured, db, moment)
    if problems:
        raise Mistake("; ".join(problems))
    _prefect_environment()
    from biasaudit.flows.audit import audit_flow

    with console.status(f"auditing {audit} ({FIRST_RUN_NOTE})"):
        result = bounded_flow(
            lambda: audit_flow(audit, config, flow_url(db), moment, force, timezone=timezone_)
        )
    _print_runs(db, [result["run_id"]])
    _print_flagged(db, [result["run_id"]])
    _check_reports([result])
    _say(f"report: {result['report']}")


def _zone(name: str | None) -> ZoneInfo | None:
    """The IANA time zone ``name`` (None: UTC), or a Mistake naming --timezone."""
    if name is None:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise Mistake(
            f"--timezone: {name!r} is not an IANA time zone (e.g. Europe/London)"
        ) from None


def _check_reports(results: list[dict]) -> None:
    """One error line when a run's report was not written (its reason was a Prefect log line,
    hidden without --verbose): the runs are stored, the pages are not."""
    missing = [r for r in results if r["report"] is None]
    if len(missing) == 1:
        (run,) = missing
        raise Mistake(
            f"run {run['run_id']} succeeded and is stored, but its report was not written "
            f"({run['report_error']}); write it with `biasaudit report {run['run_id']}`"
        )
    if missing:
        runs = ", ".join(str(r["run_id"]) for r in missing)
        raise Mistake(
            f"runs {runs} succeeded and are stored, but their reports were not written (first: "
            f"{missing[0]['report_error']}); write each with `biasaudit report RUN`"
        )


@app.command()
def demo(db: DbOption = None) -> None:
    """Create the database, load synthetic predictions, run every demo audit, print a summary."""
    from biasaudit.db.engine import flow_url, make_engine
    from biasaudit.db.store.load import load_predictions
    from biasaudit.db.store.migrate import upgrade
    from biasaudit.flows.config_files import configured_names
    from biasaudit.flows.demo import END, GROUPS, synthetic_predictions

    make_engine(db).dispose()
    upgrade(db)
    config = Path("biasaudit.toml")
    if not config.exists():
        shutil.copyfile(DEMO_CONFIG, config)
        _say(f"wrote {config} (the demo audits; edit it to audit your own models)")
    with console.status("generating and loading synthetic predictions"):
        report = load_predictions(_engine(db), synthetic_predictions(), list(GROUPS), "demo")
    _say(
        f"synthetic predictions: inserted {report.inserted}, already present {report.already_present}"
    )
    _prefect_environment()
    from biasaudit.flows.nightly import nightly_flow

    with console.status(f"running the demo audits ({FIRST_RUN_NOTE})"):
        results = bounded_flow(
            lambda: nightly_flow(str(DEMO_CONFIG), flow_url(db), END),
            runs=len(configured_names(DEMO_CONFIG)),
        )
    _print_runs(db, [r["run_id"] for r in results])
    _print_flagged(db, [r["run_id"] for r in results])
    _check_reports(results)
    _say("next: biasaudit history, biasaudit history RUN_ID")


@app.command()
def abandon(
    run_id: Annotated[int, typer.Argument(help="A run left 'running' by a process that is gone")],
    db: DbOption = None,
) -> None:
    """Mark a running run failed as abandoned, so later runs of its audit stop waiting for it."""
    from biasaudit.db.store.runs import abandon_run

    if not abandon_run(_engine(db), run_id):
        _fail(f"run {run_id} is not running")
    _say(f"run {run_id} marked failed (abandoned)")


@app.command()
def backfill(
    audit: AuditArgument,
    from_: FromOption,
    to: ToOption,
    every: Annotated[
        str, typer.Option(metavar="PERIOD", help="Calendar period: Nd (days) or Nmo (months)")
    ] = "1d",
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Run the audit as of the end of each calendar period from --from to --to (the last period
    ends at --to); exits 1 when any period failed."""
    import pandas as pd

    from biasaudit.db.engine import flow_url
    from biasaudit.flows.backfill import parse_period, periods
    from biasaudit.flows.config_files import default_config_path, load_audit

    start, end = _date(from_, "--from"), _date(to, "--to")
    assert start is not None and end is not None
    try:
        moments = periods(start, end, parse_period(every))
    except ValueError as exc:
        raise Mistake(str(exc)) from None
    configured = load_audit(Path(config or default_config_path()), audit)
    _engine(db).dispose()
    problems = _source_problems(configured, db)  # the source's catalogue, before Prefect
    if problems:
        raise Mistake("; ".join(problems))
    _prefect_environment()
    from biasaudit.flows.backfill import backfill_flow

    with console.status(f"backfilling {audit}, {len(moments)} periods ({FIRST_RUN_NOTE})"):
        outcomes = backfill_flow(audit, start, end, every, config, flow_url(db))
    _print_frame(pd.DataFrame(outcomes), title=f"backfill of {audit}")
    failed = [o for o in outcomes if "error" in o]
    if failed:
        _fail(
            f"{len(failed)} of {len(outcomes)} periods failed (first: {failed[0]['as_of']}: "
            f"{failed[0]['error']})"
        )


@app.command()
def backtest(
    audit: AuditArgument,
    from_: FromOption,
    to: ToOption,
    format_: Annotated[
        str,
        typer.Option(
            "--format", metavar="FORMAT", help="table (summary), csv or json (every night)"
        ),
    ] = "table",
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """What nightly monitored runs would have said from --from to --to (nothing is written)."""
    from biasaudit.db.engine import database_url
    from biasaudit.flows.config_files import default_config_path, load_audit
    from biasaudit.flows.monitoring import backtest as replay
    from biasaudit.schemas.results import COMPARISON_KEY

    _check_format(format_)
    configured = load_audit(Path(config or default_config_path()), audit)
    nights = replay(database_url(db), configured, _date(from_, "--from"), _date(to, "--to"))
    if format_ != "table":
        _emit(nights, format_)
        return
    last = nights.sort_values("as_of").groupby(COMPARISON_KEY).tail(1).set_index(COMPARISON_KEY)
    first = nights[nights["alarm"]].groupby(COMPARISON_KEY)["as_of"].min()
    summary = last[["nights", "e_process", "cs_low", "cs_high", "crossed"]].assign(
        first_alarm=first
    )
    _say(
        f"backtest of {audit}: {nights['as_of'].nunique()} nightly runs, "
        f"{int(first.size)} of {len(last)} comparisons alarmed (e-BH, alpha "
        f"{configured.thresholds.alpha})"
    )
    _print_frame(summary.reset_index(), title="monitor at the last night; first e-BH alarm")


@app.command()
def serve(
    config: ConfigOption = None,
    db: DbOption = None,
    cron: CronOption = "0 2 * * *",
    timezone_: ScheduleZoneOption = "UTC",
    task_runner: Annotated[
        str, typer.Option(metavar="RUNNER", help="threads, or dask (the dask extra)")
    ] = "threads",
    dask_address: Annotated[
        str | None, typer.Option(metavar="ADDRESS", help="Dask scheduler, e.g. tcp://host:8786")
    ] = None,
    name: DeploymentOption = "nightly",
) -> None:
    """Serve the nightly deployment (runs until stopped; trigger with
    `prefect deployment run 'nightly/NAME' -p audits='["AUDIT"]'`)."""
    from biasaudit.db.engine import database_url, make_engine, safe_url
    from biasaudit.db.store.migrate import upgrade
    from biasaudit.flows.config_files import configured_names, default_config_path

    if task_runner not in ("threads", "dask"):
        raise Mistake(f"--task-runner is threads or dask, not {task_runner!r}")
    path = str(Path(config or default_config_path()).resolve())
    names = configured_names(path)  # an unreadable file fails now; a bad audit fails its runs
    make_engine(db).dispose()
    upgrade(db)
    _prefect_environment(logs=True)
    from biasaudit.flows.nightly import PrefectLost
    from biasaudit.flows.nightly import serve as serve_nightly

    _say(
        f"serving nightly/{name}: {len(names)} audits of {path} on "
        f"{safe_url(database_url(db))}, cron {cron!r} ({timezone_}); Ctrl-C stops"
    )
    try:
        serve_nightly(path, db, cron, timezone_, task_runner, dask_address, name)
    except PrefectLost as exc:
        raise Mistake(str(exc)) from None


@app.command()
def deploy(
    pool: Annotated[
        str,
        typer.Option(metavar="POOL", help="Prefect work pool (a process pool; created if absent)"),
    ],
    config: ConfigOption = None,
    db: DbOption = None,
    cron: CronOption = "0 2 * * *",
    timezone_: ScheduleZoneOption = "UTC",
    name: DeploymentOption = "nightly",
) -> None:
    """Deploy the nightly flow to a work pool on the configured Prefect server, and exit; a
    worker runs it: `prefect worker start --pool POOL`, where biasaudit is installed and the
    configuration file is at the same path."""
    import httpx
    from prefect.settings import get_current_settings

    from biasaudit.db.engine import URL_ENV, database_url, make_engine, safe_url
    from biasaudit.db.store.migrate import upgrade
    from biasaudit.flows.config_files import configured_names, default_config_path

    path = str(Path(config or default_config_path()).resolve())
    names = configured_names(path)
    if not get_current_settings().api.url:
        raise Mistake(
            "deploy needs a Prefect server that outlives this command: set PREFECT_API_URL "
            "(or a Prefect profile's), e.g. http://127.0.0.1:4200/api"
        )
    from biasaudit.flows.work_pool import deploy as deploy_nightly
    from biasaudit.flows.work_pool import worker_store_url

    try:
        store = worker_store_url(db)
    except ValueError as exc:
        raise Mistake(str(exc)) from None
    make_engine(db).dispose()
    upgrade(db)
    _prefect_environment(logs=False)
    api = get_current_settings().api.url
    try:
        deploy_nightly(path, store, pool, cron, timezone_, name)
    except ValueError as exc:
        raise Mistake(str(exc)) from None
    except httpx.HTTPStatusError as exc:
        raise Mistake(
            f"deploy: the Prefect API at {api} refused the deployment "
            f"(HTTP {exc.response.status_code}: {exc.response.text[:200]})"
        ) from None
    except httpx.HTTPError as exc:
        raise Mistake(
            f"deploy: the Prefect API at {api} did not answer ({type(exc).__name__}: {exc}); "
            "start the server or correct PREFECT_API_URL"
        ) from None
    here = safe_url(database_url(db))
    where = safe_url(store) if store else f"the worker's ${URL_ENV} ({here} here)"
    _say(
        f"deployed nightly/{name} to work pool {pool!r}: {len(names)} audits of {path} on "
        f"{where}, cron {cron!r} ({timezone_}); run it with: prefect worker start --pool {pool}"
    )


def _source_problems(
    audit: Any, db: str | None, content: bool = False, as_of: Any = None, labels: bool = False
) -> list[str]:
    """Why the audit's source cannot be read (db.sources.catalogue.source_problems), from the
    catalogue of its database (``source_db``, else the store); with ``content``, also why a run as
    of ``as_of`` (default now) would fail on what it holds (db.sources.checks.data_problems: the
    model's rows in the window, the reference groups, with ``labels`` the labels' values); or why it
    could not be looked at."""
    from datetime import UTC, datetime

    from sqlalchemy.exc import SQLAlchemyError

    from biasaudit.db.engine import DatabaseMissing, DatabaseUrlError, database_url, make_engine
    from biasaudit.db.sources.catalogue import source_problems, source_url
    from biasaudit.flows.logs import one_line

    try:
        engine = make_engine(source_url(audit, database_url(db)), create=False)
        try:
            if not content:
                return source_problems(engine, audit)
            from biasaudit.db.sources.checks import data_problems

            now = datetime.now(UTC)
            return data_problems(engine, audit, as_of or now, now, labels=labels)
        finally:
            engine.dispose()
    except (DatabaseMissing, DatabaseUrlError, SQLAlchemyError) as exc:
        return [f"source {audit.source!r} not checked: {one_line(exc, with_type=False)}"]


def _data_problems(audit: Any, db: str | None, as_of: Any) -> list[str]:
    """The problems a run of ``audit`` as of ``as_of`` would meet in its source, found before
    any Prefect server starts (``_source_problems`` with its content)."""
    return _source_problems(audit, db, content=True, as_of=as_of, labels=True)


@app.command()
def audits(
    config: ConfigOption = None,
    db: DbOption = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Also read the source: the model's rows in the window, the reference groups "
            "among the attribute's values, 0/1-like labels and decisions",
        ),
    ] = False,
    as_of: Annotated[
        str | None,
        typer.Option(metavar="DATE", help="With --check: the window as of this date (ISO, UTC)"),
    ] = None,
) -> None:
    """List the configured audits and validate each one: its configuration, and its source's
    table and columns in the database (source_db, else --db), reading no rows; with --check,
    what the source holds too. Prints one line per problem; exit 1 if any audit is invalid."""
    import pandas as pd

    from biasaudit.flows.config_files import configured_names, default_config_path, load_audit
    from biasaudit.schemas.config import ConfigError

    path = Path(config or default_config_path())
    moment = _date(as_of)
    rows, problems = [], []
    for name in configured_names(path):
        try:
            audit = load_audit(path, name)
        except ConfigError as exc:
            found = [line.strip() for line in str(exc).splitlines()[1:]] or [str(exc)]
            rows.append({"audit": name, "model": "", "window": "", "source": "", "attributes": ""})
        else:
            found = _source_problems(audit, db, content=check, as_of=moment, labels=check)
            found = [problem.replace(f" (audit {name!r})", "") for problem in found]
            rows.append(
                {
                    "audit": audit.name,
                    "model": audit.model_id,
                    "window": audit.window,
                    "source": audit.source,
                    "attributes": ", ".join(audit.attributes),
                }
            )
        rows[-1]["status"] = "invalid" if found else "ok"
        problems += [f"audit {name!r}: {problem}" for problem in found]
    _print_frame(pd.DataFrame(rows), title=f"audits in {path}")
    for problem in problems:
        _say(problem)
    bad = sum(row["status"] != "ok" for row in rows)
    if bad:
        _fail(f"{bad} of {len(rows)} audits in {path} are invalid")
