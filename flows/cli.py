"""The ``biasaudit`` command line.

Commands that do not run a flow (history, load, db) never import Prefect, so they start fast.
"""

from __future__ import annotations

import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="Versioned fairness audits of deployed binary classifiers.", no_args_is_help=True
)
db_app = typer.Typer(help="Database administration.", no_args_is_help=True)
app.add_typer(db_app, name="db")
# Piped output (logs, CI) gets a wide table instead of rich's default 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db", help="Database URL (default: $BIASAUDIT_DATABASE_URL or sqlite:///biasaudit.db)"
    ),
]
ConfigOption = Annotated[
    str | None,
    typer.Option(
        "--config", "-c", help="Audit configuration (default: $BIASAUDIT_CONFIG or biasaudit.toml)"
    ),
]
DEMO_CONFIG = Path(__file__).parent / "demo_audits.toml"
FIRST_RUN_NOTE = "first flow run of a process starts a local Prefect server (10-20 s)"


def _engine(db: str | None):
    from biasaudit.db.engine import make_engine

    return make_engine(db)


def _prefect_environment() -> None:
    """Give the temporary local Prefect server time to start on small machines."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def _date(value: str | None) -> datetime | None:
    if value is None:
        return None
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _fail(message: str) -> None:
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code=1)


def _run_or_fail(engine, run_id: int):
    """The stored run, or a clear error if there is none."""
    from biasaudit.db.history import get_run

    run = get_run(engine, run_id)
    if run is None:
        _fail(f"no run with id {run_id}")
    return run


def _print_frame(frame, title: str | None = None) -> None:
    import pandas as pd

    table = Table(title=title, show_lines=False)
    for column in frame.columns:
        table.add_column(str(column), overflow="fold")
    for row in frame.itertuples(index=False):
        table.add_row(
            *["" if pd.isna(v) else f"{v:.4g}" if isinstance(v, float) else str(v) for v in row]
        )
    console.print(table)


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None) -> None:
    """Create or upgrade the database schema with the Alembic migrations."""
    from biasaudit.db.engine import database_url
    from biasaudit.db.migrate import upgrade

    upgrade(db)
    console.print(f"database at {database_url(db)} is up to date")


@app.command()
def load(
    path: Annotated[Path, typer.Argument(help="CSV or Parquet file of predictions")],
    attribute: Annotated[
        list[str], typer.Option("--attribute", "-a", help="Sensitive attribute column (repeat)")
    ],
    model: Annotated[
        str | None, typer.Option(help="Model id, if the file has no model_id column")
    ] = None,
    model_version: Annotated[
        str | None, typer.Option(help="Model version, if the file has none")
    ] = None,
    map_: Annotated[
        list[str] | None,
        typer.Option("--map", help="canonical=column, e.g. y_true=label (repeat)"),
    ] = None,
    db: DbOption = None,
) -> None:
    """Load predictions into the predictions table, validated: invalid rows are quarantined."""
    import pandas as pd
    from biasaudit.db.load import load_predictions
    from rich.progress import Progress

    if not path.exists():
        _fail(f"{path} does not exist")
    frame = pd.read_parquet(path) if path.suffix in {".parquet", ".pq"} else pd.read_csv(path)
    try:
        mapping = dict(item.split("=", 1) for item in map_ or [])
    except ValueError:
        _fail("--map takes canonical=column")
    frame = frame.rename(columns={column: canonical for canonical, column in mapping.items()})
    if model:
        frame["model_id"] = model
    if model_version:
        frame["model_version"] = model_version
    needed = [
        "prediction_id",
        "model_id",
        "model_version",
        "predicted_at",
        "y_true",
        "y_pred",
        *attribute,
    ]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        _fail(f"{path}: missing columns {missing} (use --map, --model, --model-version)")
    with Progress(console=console) as progress:
        bar = progress.add_task(f"loading {path.name}", total=len(frame))
        report = load_predictions(
            _engine(db), frame, attribute, str(path), lambda n: progress.advance(bar, n)
        )
    console.print(
        f"read {report.read}, inserted {report.inserted}, already present {report.already_present}, "
        f"quarantined {report.quarantined}"
    )


@app.command()
def run(
    audit: Annotated[str, typer.Argument(help="Name of the audit in the configuration")],
    config: ConfigOption = None,
    db: DbOption = None,
    as_of: Annotated[str | None, typer.Option(help="Audit as of this date/time (ISO, UTC)")] = None,
    force: Annotated[
        bool, typer.Option(help="Write a new version even if input is unchanged")
    ] = False,
) -> None:
    """Run one audit now (one Prefect flow run)."""
    _prefect_environment()
    from biasaudit.flows.audit import audit_flow
    from biasaudit.schemas.config import ConfigError

    with console.status(f"auditing {audit} ({FIRST_RUN_NOTE})"):
        try:
            result = audit_flow(audit, config, db, _date(as_of), force)
        except ConfigError as exc:
            _fail(str(exc))
    _print_runs(db, [result["run_id"]])


@app.command()
def demo(db: DbOption = None) -> None:
    """Create the database, load synthetic predictions, run every demo audit, print a summary."""
    _prefect_environment()
    from biasaudit.db.load import load_predictions
    from biasaudit.db.migrate import upgrade
    from biasaudit.flows.demo import END, GROUPS, synthetic_predictions

    upgrade(db)
    config = Path("biasaudit.toml")
    if not config.exists():
        shutil.copyfile(DEMO_CONFIG, config)
        console.print(f"wrote {config} (the demo audits; edit it to audit your own models)")
    with console.status("generating and loading synthetic predictions"):
        report = load_predictions(_engine(db), synthetic_predictions(), list(GROUPS), "demo")
    console.print(
        f"synthetic predictions: inserted {report.inserted}, already present {report.already_present}"
    )
    from biasaudit.flows.nightly import nightly_flow

    with console.status(f"running the demo audits ({FIRST_RUN_NOTE})"):
        results = nightly_flow(str(DEMO_CONFIG), db, END)
    _print_runs(db, [r["run_id"] for r in results])
    _print_flagged(db, [r["run_id"] for r in results])
    console.print("next: [bold]biasaudit history[/], [bold]biasaudit history RUN_ID[/]")


RUN_TABLE = {
    "id": "run",
    "audit_name": "audit",
    "model_id": "model",
    "version": "version",
    "status": "status",
    "as_of": "as of",
    "rows_read": "read",
    "rows_valid": "valid",
    "rows_quarantined": "quarantined",
}


def _print_runs(db: str | None, run_ids: list[int] | None = None, runs=None) -> None:
    from biasaudit.db.history import list_runs

    if runs is None:
        runs = list_runs(_engine(db))
        runs = runs[runs["id"].isin(run_ids)]
    runs = runs.assign(as_of=runs["as_of"].astype(str).str[:16])
    _print_frame(runs[list(RUN_TABLE)].rename(columns=RUN_TABLE), title="audit runs")


def _print_flagged(db: str | None, run_ids: list[int]) -> None:
    """Per run, the disparities detection flagged (BH-adjusted p below alpha)."""
    from biasaudit.db.history import FLAGGED_COLUMNS, get_run, run_results
    from biasaudit.db.models import DetectionResult

    engine = _engine(db)
    for run_id in run_ids:
        run = get_run(engine, run_id)
        detection = run_results(engine, DetectionResult, run_id)
        flagged = detection[detection["flagged"].astype(bool)]
        title = f"run {run_id}: {run.audit_name} v{run.version}, flagged disparities"
        if flagged.empty:
            console.print(f"{title}: none")
        else:
            _print_frame(flagged[FLAGGED_COLUMNS], title=title)


@app.command()
def history(
    run_id: Annotated[int | None, typer.Argument(help="Show this run's results")] = None,
    audit: Annotated[str | None, typer.Option(help="Filter by audit name")] = None,
    model: Annotated[str | None, typer.Option(help="Filter by model id")] = None,
    status: Annotated[str | None, typer.Option(help="succeeded, failed or running")] = None,
    since: Annotated[str | None, typer.Option(help="as_of on or after (ISO date)")] = None,
    until: Annotated[str | None, typer.Option(help="as_of on or before (ISO date)")] = None,
    attribute: Annotated[str | None, typer.Option(help="One attribute")] = None,
    group: Annotated[str | None, typer.Option(help="One group (with --metric)")] = None,
    metric: Annotated[
        str | None, typer.Option(help="With RUN_ID: one metric; alone: its time series")
    ] = None,
    format_: Annotated[str, typer.Option("--format", help="table, csv or json")] = "table",
    monitor: Annotated[
        bool, typer.Option("--monitor", help="Monitored runs: trajectory per comparison")
    ] = False,
    db: DbOption = None,
) -> None:
    """List stored runs, show one run's results, or print a metric's time series (one row per run)."""
    from biasaudit.db.history import list_runs, run_match, run_metrics

    if format_ not in ("table", "csv", "json"):
        _fail("--format is table, csv or json")
    engine = _engine(db)
    if monitor:
        from biasaudit.db.monitor import monitor_trajectory

        trajectory = monitor_trajectory(engine, audit, model, attribute, group, None, metric)
        if format_ != "table":
            _emit(trajectory, format_)
        elif trajectory.empty:
            console.print("no monitored runs match")
        else:
            _print_frame(trajectory, title="monitor: e-process and confidence sequence per run")
        return
    if run_id is None and metric is not None:
        _print_series(engine, metric, attribute, group, audit, model, since, until, format_)
        return
    if run_id is None:
        runs = list_runs(engine, audit, model, status, _date(since), _date(until))
        if format_ != "table":
            _emit(runs, format_)
            return
        if runs.empty:
            console.print("no runs match")
            return
        _print_runs(db, runs=runs)
        failed = runs[runs["error"].notna()]
        for row in failed.itertuples():
            console.print(f"[red]run {row.id} failed:[/] {row.error}")
        return
    run = _run_or_fail(engine, run_id)
    console.print(
        f"run {run.id}: audit {run.audit_name}, model {run.model_id}, version {run.version}, "
        f"{run.status}; window ({run.window_start or '-inf'}, {run.window_end}]; rows read "
        f"{run.rows_read}, valid {run.rows_valid}, quarantined {run.rows_quarantined}"
    )
    if run.error:
        console.print(f"[red]error:[/] {run.error}")
    metrics = run_metrics(engine, run_id, attribute, metric)
    if metrics.empty:
        return
    wide = metrics.pivot(
        index=["attribute", "group_name", "n"], columns="metric", values="value"
    ).reset_index()
    _print_frame(wide, title=f"run {run_id}: metrics per group (blank = undefined)")
    undefined = metrics[metrics["undefined_reason"].notna()]
    if not undefined.empty:
        _print_frame(
            undefined[["attribute", "group_name", "metric", "undefined_reason"]],
            title="undefined metrics",
        )
    alpha = run.config["thresholds"]["alpha"]
    match = run_match(engine, run_id, below=alpha)
    if not match.empty:
        title = f"MATCH tests with p < {alpha} (unadjusted): percentile of the group under its reference"
        _print_frame(match, title=title)
    _print_stage_tables(engine, run_id, attribute, metric)


def _emit(frame, format_: str) -> None:
    """Write a frame to standard output as CSV or JSON records (for other tools)."""
    if format_ == "csv":
        sys.stdout.write(frame.to_csv(index=False))
    else:
        sys.stdout.write(frame.to_json(orient="records", date_format="iso", indent=1) + "\n")


def _print_series(engine, metric, attribute, group, audit, model, since, until, format_) -> None:
    """One row per run: the metric's value for each group, and the spread between them."""
    from biasaudit.db.history import metric_series
    from biasaudit.schemas.metric_ids import canonical_metric

    series = metric_series(
        engine, canonical_metric(metric), attribute, group, audit, model, _date(since), _date(until)
    )
    if series.empty:
        _fail("no stored values match")
    if series["attribute"].nunique() > 1 and attribute is None:
        _fail(f"several attributes hold {metric}: choose one with --attribute")
    wide = series.pivot_table(
        index=["run_id", "audit_name", "model_id", "version", "as_of"],
        columns="group_name",
        values="value",
    ).reset_index()
    groups = [
        c for c in wide.columns if c not in ("run_id", "audit_name", "model_id", "version", "as_of")
    ]
    wide.columns.name = None
    if len(groups) > 1:
        wide["max - min"] = wide[groups].max(axis=1) - wide[groups].min(axis=1)
    if format_ != "table":
        _emit(wide, format_)
        return
    wide["as_of"] = wide["as_of"].astype(str).str[:10]
    _print_frame(
        wide, title=f"{metric} by {attribute or series['attribute'].iloc[0]}, one row per run"
    )


def _print_stage_tables(engine, run_id: int, attribute: str | None, metric: str | None) -> None:
    from biasaudit.db.history import FLAGGED_COLUMNS, META_COLUMNS, PLANNING_COLUMNS, run_results
    from biasaudit.db.models import DetectionResult, MetaMetricResult, PlanningResult

    planning = run_results(engine, PlanningResult, run_id, attribute, metric)
    if not planning.empty:
        _print_frame(planning[PLANNING_COLUMNS], title="planning: predictions needed vs available")
    detection = run_results(engine, DetectionResult, run_id, attribute, metric)
    flagged = detection[detection["flagged"].astype(bool)]
    if not flagged.empty:
        _print_frame(flagged[FLAGGED_COLUMNS], title="detection: flagged (BH-adjusted p < alpha)")
    meta = run_results(engine, MetaMetricResult, run_id, attribute, metric)
    if not meta.empty:
        _print_frame(
            meta[META_COLUMNS], title="meta-metrics: naive and corrected between-group variance"
        )


@app.command()
def abandon(
    run_id: Annotated[int, typer.Argument(help="A run left 'running' by a process that is gone")],
    db: DbOption = None,
) -> None:
    """Mark a running run failed as abandoned, so later runs of its audit stop waiting for it."""
    from biasaudit.db.runs import abandon_run

    if not abandon_run(_engine(db), run_id):
        _fail(f"run {run_id} is not running")
    console.print(f"run {run_id} marked failed (abandoned)")


@app.command()
def compare(
    run_id: Annotated[int, typer.Argument(help="The later run")],
    other: Annotated[
        int | None, typer.Argument(help="The earlier run (default: the previous as-of)")
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="Every change, not only significant")
    ] = False,
    format_: Annotated[str, typer.Option("--format", help="table, csv or json")] = "table",
    db: DbOption = None,
) -> None:
    """What changed between two runs, and which changes are statistically significant (runs
    whose windows overlap share data: their changes are shown untested)."""
    from biasaudit.db.history import previous_as_of_run, run_metrics
    from biasaudit.tasks.compare import compare_metrics, windows_overlap

    engine = _engine(db)
    after = _run_or_fail(engine, run_id)
    if other is None:
        previous = previous_as_of_run(engine, after.audit_name, after.model_id, after.as_of)
        if previous is None:
            _fail(f"run {run_id} is the first as-of of {after.audit_name}: nothing to compare with")
        other = previous.id
    before = _run_or_fail(engine, other)
    alpha = after.config["thresholds"]["alpha"]
    overlapping = windows_overlap(
        (before.window_start, before.window_end), (after.window_start, after.window_end)
    )
    changes = compare_metrics(
        run_metrics(engine, other), run_metrics(engine, run_id), alpha, overlapping
    )
    shown = changes if show_all else changes[changes["significant"] | (changes["status"] != "both")]
    if format_ != "table":
        _emit(shown, format_)
        return
    console.print(
        f"run {run_id} ({after.audit_name} v{after.version}, as of {after.as_of:%Y-%m-%d}) against "
        f"run {other} (v{before.version}, as of {before.as_of:%Y-%m-%d}): "
        f"{int(changes['significant'].sum())} significant changes (BH-adjusted p < {alpha}) of "
        f"{int(changes['p_value'].notna().sum())} tested; "
        f"{int((changes['status'] == 'appeared').sum())} appeared, "
        f"{int((changes['status'] == 'vanished').sum())} vanished"
        + ("; the two windows overlap: nothing tested" if overlapping else "")
    )
    if not shown.empty:
        _print_frame(
            shown, title="changes" if show_all else "significant changes, appeared, vanished"
        )


@app.command()
def backfill(
    audit: Annotated[str, typer.Argument(help="Name of the audit in the configuration")],
    from_: Annotated[str, typer.Option("--from", help="First as-of date (ISO)")],
    to: Annotated[str, typer.Option("--to", help="Last as-of date (ISO)")],
    every: Annotated[int, typer.Option(help="Days between as-of dates")] = 1,
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """Run the audit as of each past period (one Prefect flow, one subflow per period)."""
    _prefect_environment()
    from biasaudit.flows.backfill import backfill_flow

    with console.status(f"backfilling {audit} ({FIRST_RUN_NOTE})"):
        outcomes = backfill_flow(audit, _date(from_), _date(to), every, config, db)
    import pandas as pd

    _print_frame(pd.DataFrame(outcomes), title=f"backfill of {audit}")


@app.command()
def backtest(
    audit: Annotated[str, typer.Argument(help="Name of the audit in the configuration")],
    from_: Annotated[str, typer.Option("--from", help="First as-of date (ISO)")],
    to: Annotated[str, typer.Option("--to", help="Last as-of date (ISO)")],
    format_: Annotated[
        str, typer.Option("--format", help="table (summary), csv or json (every night)")
    ] = "table",
    config: ConfigOption = None,
    db: DbOption = None,
) -> None:
    """What nightly monitored runs would have said from --from to --to (nothing is written)."""
    from biasaudit.db.engine import database_url
    from biasaudit.flows.monitoring import backtest as replay
    from biasaudit.schemas.config import load_config

    path = config or os.environ.get("BIASAUDIT_CONFIG", "biasaudit.toml")
    configured = load_config(Path(path)).get(audit)
    nights = replay(database_url(db), configured, _date(from_), _date(to))
    if format_ != "table":
        _emit(nights, format_)
        return
    keys = ["attribute", "group_name", "reference", "metric"]
    last = nights.sort_values("as_of").groupby(keys).tail(1).set_index(keys)
    first = nights[nights["alarm"]].groupby(keys)["as_of"].min()
    summary = last[["nights", "e_process", "cs_low", "cs_high", "crossed"]].assign(
        first_alarm=first
    )
    console.print(
        f"backtest of {audit}: {nights['as_of'].nunique()} nightly runs, "
        f"{int(first.size)} of {len(last)} comparisons alarmed (e-BH, alpha "
        f"{configured.thresholds.alpha})"
    )
    _print_frame(summary.reset_index(), title="monitor at the last night; first e-BH alarm")


@app.command()
def report(
    run_id: Annotated[int, typer.Argument(help="The run to render")],
    out: Annotated[
        Path | None, typer.Option(help="Output file (default: reports/AUDIT-run-N.html)")
    ] = None,
    db: DbOption = None,
) -> None:
    """Render any stored run as a self-contained HTML report."""
    from biasaudit.flows.report import build_report, report_path

    engine = _engine(db)
    run = _run_or_fail(engine, run_id)
    path = out or report_path(run.audit_name, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(build_report(engine, run_id, str(path))[0])
    console.print(f"wrote {path}")


@app.command()
def plan(
    metric: Annotated[str, typer.Option(help="ppr, tpr, fnr, tnr, fpr, ppv, npv or acc")],
    rate: Annotated[
        list[float], typer.Option(help="Expected rate of the metric in a group (repeat)")
    ],
    prev: Annotated[
        list[float] | None, typer.Option(help="Prevalence per group (for tpr/fnr/tnr/fpr)")
    ] = None,
    ppr: Annotated[
        list[float] | None, typer.Option(help="Selection rate per group (for ppv/npv)")
    ] = None,
    tau: Annotated[
        float | None, typer.Option(help="Disparity to detect (default: the gap)")
    ] = None,
    alpha: Annotated[float, typer.Option(help="Significance level")] = 0.05,
    power: Annotated[float, typer.Option(help="Power")] = 0.80,
) -> None:
    """How many predictions per group an audit needs, before any data exists."""
    import numpy as np
    from biasaudit.schemas.metric_ids import canonical_metric
    from biasaudit.tasks.planning import plan_from_rates

    try:
        result = plan_from_rates(canonical_metric(metric), rate, prev, ppr, tau, alpha, power)
    except ValueError as exc:
        _fail(str(exc))
    g1, g2 = result["groups compared"]
    console.print(
        f"{metric}: group {g1 + 1} at {rate[g1]:.3f} vs group {g2 + 1} at {rate[g2]:.3f}; "
        f"detect a disparity of {result['tau']:.3f} at α = {alpha}, power {power}"
    )
    table = Table(title="predictions to collect (labelled, per group)")
    for column in ("allocation", f"group {g1 + 1}", f"group {g2 + 1}", "total"):
        table.add_column(column, justify="right")
    for name in ("equal allocation", "neyman allocation"):
        n1, n2 = (int(np.ceil(v)) for v in result[name])
        table.add_row(name.split()[0], f"{n1:,}", f"{n2:,}", f"{n1 + n2:,}")
    console.print(table)
    console.print(
        f"bias measure N (sample-size-bias-measure eq. 1, per group, one-sided): "
        f"{int(np.ceil(result['bias measure N per group'])):,}; difference "
        f"{result['difference']:+.3f}; ratio {result['ratio']:.3f}"
    )
    if "chi-square per group" in result:
        console.print(
            f"chi-square test of all {len(rate)} groups: "
            f"{int(np.ceil(result['chi-square per group'])):,} per group"
        )


@app.command()
def rank(
    run_ids: Annotated[list[int], typer.Argument(help="Runs of the models to rank")],
    metric: Annotated[str, typer.Option(help="Error rate to compare, e.g. fnr or fpr")],
    attribute: Annotated[str, typer.Option(help="Sensitive attribute")],
    group: Annotated[str, typer.Option(help="Group")],
    reference: Annotated[str, typer.Option(help="Reference group, or 'rest'")] = "rest",
    db: DbOption = None,
) -> None:
    """Rank models for bias by N, difference and ratio, and show where the rankings disagree."""
    from biasaudit.db.history import comparison_rates
    from biasaudit.schemas.metric_ids import canonical_metric
    from biasaudit.tasks.planning import rank_bias

    rates = comparison_rates(
        _engine(db), run_ids, attribute, group, reference, canonical_metric(metric)
    )
    missing = sorted(set(run_ids) - set(rates["run_id"]))
    if missing:
        _fail(f"runs {missing} have no {metric} of {attribute}={group} against {reference}")
    ranked = rank_bias(rates)
    columns = [
        "run_id",
        "audit_name",
        "model_id",
        "version",
        "e1",
        "e2",
        "difference",
        "ratio",
        "n",
        "rank_difference",
        "rank_ratio",
        "rank_n",
        "disagree",
    ]
    _print_frame(
        ranked[columns],
        title=f"{metric} of {attribute}={group} vs {reference}: "
        "rank 1 = least biased (smallest D and R, largest N)",
    )


@app.command()
def serve(
    config: ConfigOption = None,
    db: DbOption = None,
    cron: Annotated[str, typer.Option(help="Schedule (cron syntax)")] = "0 2 * * *",
    timezone_: Annotated[str, typer.Option("--timezone", help="Time zone of the schedule")] = "UTC",
    task_runner: Annotated[str, typer.Option(help="threads, or dask (the dask extra)")] = "threads",
    dask_address: Annotated[
        str | None, typer.Option(help="Dask scheduler, e.g. tcp://host:8786")
    ] = None,
) -> None:
    """Serve the nightly deployment (runs until stopped; trigger with `prefect deployment run`)."""
    _prefect_environment()
    from biasaudit.db.migrate import upgrade
    from biasaudit.flows.audit import default_config_path
    from biasaudit.flows.nightly import serve as serve_nightly

    upgrade(db)
    path = str(Path(config or default_config_path()).resolve())
    serve_nightly(path, db, cron, timezone_, task_runner, dask_address)


if __name__ == "__main__":
    app()
