"""Commands that read stored runs: `history`, `compare`, `report`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from biasaudit.flows.cli.common import (
    DbOption,
    FormatOption,
    Mistake,
    _check_format,
    _date,
    _emit,
    _engine,
    _fail,
    _metric,
    _print_frame,
    _print_glossary,
    _run_or_fail,
    _say,
    app,
    console,
)

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


def _print_runs(db: str | None, run_ids: list[int] | None = None, runs: Any = None) -> None:
    from biasaudit.db.store.history import list_runs

    if runs is None:
        runs = list_runs(_engine(db))
        runs = runs[runs["id"].isin(run_ids)]
    runs = runs.assign(as_of=runs["as_of"].astype(str).str[:16])
    _print_frame(runs[list(RUN_TABLE)].rename(columns=RUN_TABLE), title="audit runs")


def _print_flagged(db: str | None, run_ids: list[int]) -> None:
    """Per run, the disparities detection flagged (BH-adjusted p below alpha)."""
    from biasaudit.db.store.history import FLAGGED_COLUMNS, flagged_detections, run_results
    from biasaudit.db.store.models import DetectionResult
    from biasaudit.schemas.report import run_label

    engine = _engine(db)
    for run_id in run_ids:
        run = _run_or_fail(engine, run_id)
        flagged = flagged_detections(run_results(engine, DetectionResult, run_id))
        title = f"{run_label(run_id, run.version)} of {run.audit_name}: flagged disparities"
        if flagged.empty:
            _say(f"{title}: none")
        else:
            _print_verdicts(flagged[FLAGGED_COLUMNS], title)
            _print_glossary(flagged["metric"])


# Which of detection's two procedures flagged a row, by the Bayesian decision stored beside it:
# every listed row is flagged by the frequentist test (BH-adjusted p below alpha).
FLAGGED_BY = {
    "biased": "both: test and HDI+ROPE",
    "undecided": "test only; HDI+ROPE undecided",
    "fair": "test only; HDI+ROPE fair",
}
VERDICTS_LEGEND = (
    "flagged_by: every row is flagged by the frequentist test (BH-adjusted p_adjusted below "
    "alpha); the Bayesian HDI + ROPE decides on its own: biased where the interval (hdi_low, "
    "hdi_high) lies beyond the tolerance, undecided where it reaches into the tolerance band"
)


def _print_verdicts(flagged: Any, title: str) -> None:
    """The flagged rows with which of the two procedures flagged each (``flagged_by``), and
    what the two verdicts mean."""
    stated = flagged["decision"].map(FLAGGED_BY).fillna("test only; HDI+ROPE not stated")
    _print_frame(flagged.assign(flagged_by=stated.to_numpy()), title=title)
    _say(VERDICTS_LEGEND)


@app.command()
def history(
    run_id: Annotated[
        int | None, typer.Argument(metavar="[RUN]", help="Show (or export) this run's results")
    ] = None,
    audit: Annotated[str | None, typer.Option(metavar="NAME", help="Filter by audit name")] = None,
    model: Annotated[str | None, typer.Option(metavar="ID", help="Filter by model id")] = None,
    status: Annotated[
        str | None, typer.Option(metavar="STATUS", help="succeeded, failed or running")
    ] = None,
    since: Annotated[
        str | None, typer.Option(metavar="DATE", help="as_of on or after (ISO date)")
    ] = None,
    until: Annotated[
        str | None, typer.Option(metavar="DATE", help="as_of on or before (ISO date)")
    ] = None,
    attribute: Annotated[str | None, typer.Option(metavar="NAME", help="One attribute")] = None,
    group: Annotated[
        str | None, typer.Option(metavar="GROUP", help="One group (with --metric)")
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option(metavar="METRIC", help="With RUN: one metric; alone: its time series"),
    ] = None,
    format_: FormatOption = "table",
    monitor: Annotated[
        bool, typer.Option("--monitor", help="Monitored runs: trajectory per comparison")
    ] = False,
    show_all: Annotated[
        bool,
        typer.Option(
            "--all", help="With RUN: after its summary, every table (metrics, MATCH, planning, ...)"
        ),
    ] = False,
    db: DbOption = None,
) -> None:
    """List stored runs, show one run (its summary; every table with --all, --attribute or
    --metric) or export its metrics, or print a metric's time series."""
    _check_format(format_)
    if status is not None and status not in ("succeeded", "failed", "running"):
        raise Mistake(f"--status is succeeded, failed or running, not {status!r}")
    first, last = _date(since, "--since"), _date(until, "--until")
    metric = _metric(metric) if metric is not None else None
    engine = _engine(db)
    if monitor:
        _show_monitor(engine, audit, model, attribute, group, metric, format_)
    elif run_id is None and metric is not None:
        _print_series(engine, metric, attribute, group, audit, model, first, last, format_)
    elif run_id is None:
        _show_runs(engine, db, audit, model, status, first, last, format_)
    else:
        _show_run(engine, run_id, attribute, metric, format_, show_all)


def _show_monitor(
    engine: Any,
    audit: str | None,
    model: str | None,
    attribute: str | None,
    group: str | None,
    metric: str | None,
    format_: str,
) -> None:
    """``history --monitor``: the monitored runs' trajectory per comparison."""
    from biasaudit.db.store.monitor import monitor_trajectory

    trajectory = monitor_trajectory(engine, audit, model, attribute, group, None, metric)
    if format_ != "table":
        _emit(trajectory, format_)
    elif trajectory.empty:
        console.print("no monitored runs match")
    else:
        _print_frame(trajectory, title="monitor: e-process and confidence sequence per run")


def _show_runs(
    engine: Any,
    db: str | None,
    audit: str | None,
    model: str | None,
    status: str | None,
    first: datetime | None,
    last: datetime | None,
    format_: str,
) -> None:
    """``history``: the stored runs, filtered, and why each failed run failed."""
    from biasaudit.db.store.history import list_runs

    runs = list_runs(engine, audit, model, status, first, last)
    if format_ != "table":
        _emit(runs, format_)
        return
    if runs.empty:
        _say("no runs match")
        return
    _print_runs(db, runs=runs)
    failed = runs[runs["error"].notna()]
    for row in failed.itertuples():
        _say(f"run {row.id} failed: {row.error}", style="red")


def _show_run(
    engine: Any,
    run_id: int,
    attribute: str | None,
    metric: str | None,
    format_: str,
    show_all: bool,
) -> None:
    """``history RUN``: its summary, and with --all, --attribute or --metric every table (or,
    in csv or json, its metrics)."""
    from biasaudit.db.store.history import run_metrics

    run = _run_or_fail(engine, run_id)
    metrics = run_metrics(engine, run_id, attribute, metric)
    if format_ != "table":
        _emit(
            metrics.assign(run_id=run_id, audit_name=run.audit_name, version=run.version), format_
        )
        return
    _print_summary(engine, run)
    if not (show_all or attribute or metric):
        _say(
            "more: --all (base rates and metrics per group, undefined metrics, MATCH, planning, "
            "detection, meta-metrics, score AUC and calibration); --attribute A, --metric M "
            "(the same, narrowed); --format csv|json (every metric)"
        )
        return
    if metrics.empty:
        return
    _print_run_metrics(engine, run, metrics)
    _print_stage_tables(engine, run_id, attribute, metric)
    _print_glossary(metrics["metric"])


def _print_run_metrics(engine: Any, run: Any, metrics: Any) -> None:
    """A run's base rates and metrics per group, its undefined metrics and its MATCH tests below
    the run's alpha."""
    from biasaudit.db.store.history import run_match
    from biasaudit.schemas.metric_ids import BASE_RATES
    from biasaudit.schemas.report import run_label

    wide = metrics.pivot(
        index=["attribute", "group_name", "labelled"], columns="metric", values="value"
    ).reset_index()
    context = [m for m in BASE_RATES if m in wide.columns]
    if context:
        _print_frame(
            wide[["attribute", "group_name", "labelled", *context]],
            title=f"{run_label(run.id, run.version)}: base rates per group (context, not tested)",
        )
    _print_frame(
        wide.drop(columns=context),
        title=f"{run_label(run.id, run.version)}: metrics per group (blank = undefined)",
    )
    undefined = metrics[metrics["undefined_reason"].notna()]
    if not undefined.empty:
        _print_frame(
            undefined[["attribute", "group_name", "metric", "undefined_reason"]],
            title="undefined metrics",
        )
    alpha = run.config["thresholds"]["alpha"]
    match = run_match(engine, run.id, below=alpha)
    if not match.empty:
        title = f"MATCH tests with p < {alpha} (unadjusted): percentile of the group under its reference"
        _print_frame(match, title=title)


def _print_summary(engine: Any, run: Any) -> None:
    """One run at a glance, as its report's first screen (tasks.report): the run, per attribute
    its verdict and group sizes, the flagged findings, and what was not tested and why."""
    import pandas as pd

    from biasaudit.db.store.report_data import report_frames
    from biasaudit.schemas.report import run_label
    from biasaudit.tasks import report as first_screen

    label = run_label(run.id, run.version)
    _say(
        f"{label}: audit {run.audit_name}, model {run.model_id}"
        + (f", model version {run.model_version}" if run.model_version else "")
        + f", {run.status}; as of {run.as_of:%Y-%m-%d %H:%M}, window "
        f"({run.window_start or '-inf'}, {run.window_end}]; rows read {run.rows_read}, valid "
        f"{run.rows_valid}, quarantined {run.rows_quarantined}, unlabelled {run.rows_unlabelled}"
    )
    if run.error:
        _say(f"error: {run.error}", style="red")
    frames = report_frames(engine, run.id, trend_limit=1)
    if frames.counts.empty:
        return
    minimum = first_screen.thresholds(frames)["min_group_size"]
    sizes = first_screen.groups(frames)
    verdicts = first_screen.verdicts(frames)
    rows = [
        {
            "attribute": row.attribute,
            "verdict": first_screen.VERDICTS[row.verdict][0],
            "why": row.why,
            f"groups: rows (* below {minimum})": ", ".join(
                f"{g} {int(n):,}{'*' if small else ''}"
                for g, n, small in sizes.loc[
                    sizes["attribute"] == row.attribute, ["group_name", "rows", "small"]
                ].itertuples(index=False)
            ),
        }
        for row in verdicts.itertuples()
    ]
    _print_frame(pd.DataFrame(rows), title=f"{label}: verdict and group sizes per attribute")
    findings = first_screen.ranked_findings(frames)
    if findings.empty:
        _say("flagged: none")
    else:
        shown = findings.head(first_screen.FIRST_SCREEN_ROWS)
        more = len(findings) - len(shown)
        _print_frame(
            shown[FINDING_COLUMNS.keys()].rename(columns=FINDING_COLUMNS),
            title="flagged (BH-adjusted p < alpha), largest first"
            + (f"; {more} more with --all" if more else ""),
        )
        _print_glossary(shown["metric"])
    skipped = first_screen.untested(frames)
    total = len(first_screen.comparisons(frames, deduplicate=False))
    _say(
        f"not tested: {int(skipped.sum())} of {total} comparisons"
        + "".join(f"; {n} {kind}" for kind, n in skipped.items())
    )
    small = sizes[sizes["small"]]
    if not small.empty:
        _say(
            f"groups below min_group_size {minimum} (metrics kept, not tested): "
            + "; ".join(
                f"{a}: {g} ({int(n)})"
                for a, g, n in small[["attribute", "group_name", "rows"]].itertuples(index=False)
            )
        )
    undefined = first_screen.undefined_metrics(frames)
    _say(
        f"undefined metric values: {int(undefined.sum())}"
        + "".join(f"; {n} {reason}" for reason, n in undefined.items())
    )


# The summary's flagged findings (tasks.report.ranked_findings) and their headers.
FINDING_COLUMNS = {
    "attribute": "attribute",
    "group_name": "group",
    "reference": "against",
    "metric": "metric",
    "rate_group": "group rate",
    "rate_reference": "reference rate",
    "difference": "difference",
    "low": "hdi_low",
    "high": "hdi_high",
    "p_adjusted": "p_adjusted",
}


def _print_series(
    engine: Any,
    metric: str,
    attribute: str | None,
    group: str | None,
    audit: str | None,
    model: str | None,
    since: datetime | None,
    until: datetime | None,
    format_: str,
) -> None:
    """One row per run: the metric's value for each group, and the spread between them."""
    from biasaudit.db.store.history import metric_series

    series = metric_series(engine, metric, attribute, group, audit, model, since, until)
    if series.empty:
        _fail("no stored values match")
    if series["attribute"].nunique() > 1 and attribute is None:
        _fail(f"several attributes hold {metric}: choose one with --attribute")
    pairs = series[["audit_name", "model_id"]].drop_duplicates().sort_values(["audit_name"])
    if len(pairs) > 1:  # one series is one audit of one model, never several mixed
        held = ", ".join(f"{a!r} (model {m!r})" for a, m in pairs.itertuples(index=False))
        _fail(
            f"--metric {metric}: {len(pairs)} audits hold it, a series each: {held}; choose one "
            "with --audit NAME (or --model ID)"
        )
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


def _print_stage_tables(
    engine: Any, run_id: int, attribute: str | None, metric: str | None
) -> None:
    from biasaudit.db.store.history import (
        FLAGGED_COLUMNS,
        META_COLUMNS,
        PLANNING_COLUMNS,
        SCORE_COLUMNS,
        flagged_detections,
        run_results,
    )
    from biasaudit.db.store.models import (
        DetectionResult,
        MetaMetricResult,
        PlanningResult,
        ScoreResult,
    )

    planning = run_results(engine, PlanningResult, run_id, attribute, metric)
    if not planning.empty:
        _print_frame(planning[PLANNING_COLUMNS], title="planning: predictions needed vs available")
    flagged = flagged_detections(run_results(engine, DetectionResult, run_id, attribute, metric))
    if not flagged.empty:
        _print_verdicts(flagged[FLAGGED_COLUMNS], "detection: flagged (BH-adjusted p < alpha)")
    meta = run_results(engine, MetaMetricResult, run_id, attribute, metric)
    if not meta.empty:
        _print_frame(
            meta[META_COLUMNS], title="meta-metrics: naive and corrected between-group variance"
        )
    scores = run_results(engine, ScoreResult, run_id, attribute)  # no metric: a score's own
    if not scores.empty:
        _print_frame(
            scores[list(SCORE_COLUMNS)].rename(columns=SCORE_COLUMNS),
            title="score: AUC [interval] and calibration slope per group against its reference "
            "(BH-adjusted p of equal AUC, of the calibration test)",
        )


SHOWN_CHANGES = 10


def _instead_of_overlap(start: datetime | None, end: datetime) -> str:
    """One line: how to test changes when two runs' windows overlap (``start``, ``end``: the
    later run's window)."""
    days = (end - start).days if start is not None else 0
    disjoint = (
        f"compare runs whose --as-of are at least {days} days apart (the window's length)"
        if days >= 1
        else 'give the audit a bounded window (e.g. window = "last_30_days") and compare runs '
        "whose --as-of are 30 days apart"
    )
    return (
        "to test changes instead: monitor the audit ([audits.monitor] in its configuration, then "
        f"`biasaudit history --monitor`), or {disjoint}"
    )


@app.command()
def compare(
    run_id: Annotated[int, typer.Argument(help="The later run")],
    other: Annotated[
        int | None, typer.Argument(help="The earlier run (default: the previous as-of)")
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="Every change, not only significant")
    ] = False,
    scores: Annotated[
        bool,
        typer.Option("--scores", help="csv, json: the score audit's AUC changes, not the metrics'"),
    ] = False,
    format_: FormatOption = "table",
    db: DbOption = None,
) -> None:
    """What changed between two runs, and which changes are statistically significant (runs
    whose windows overlap share data: their changes are shown untested); where both audited a
    score, each group's AUC and calibration too."""
    import pandas as pd

    from biasaudit.db.store.history import previous_as_of_run, run_metrics, run_results
    from biasaudit.db.store.models import ScoreResult
    from biasaudit.schemas.report import run_label
    from biasaudit.tasks.compare import compare_metrics, compare_scores, windows_overlap

    _check_format(format_)
    if scores and format_ == "table":
        _fail(
            "--scores is for csv and json: the table shows the score's changes after the metrics'"
        )
    engine = _engine(db)
    after = _run_or_fail(engine, run_id)
    if other is None:
        previous = previous_as_of_run(engine, after.audit_name, after.model_id, after.as_of)
        if previous is None:
            _fail(
                f"{run_label(run_id, after.version)} is the first as-of of {after.audit_name}: "
                "nothing to compare with"
            )
        other = previous.id
    before = _run_or_fail(engine, other)
    if (before.audit_name, before.model_id) != (after.audit_name, after.model_id):
        _fail(
            f"{run_label(other, before.version)} audits {before.audit_name} of model "
            f"{before.model_id}, {run_label(run_id, after.version)} {after.audit_name} of "
            f"{after.model_id}: compare runs of the same audit and model"
        )
    alpha = after.config["thresholds"]["alpha"]
    overlapping = windows_overlap(
        (before.window_start, before.window_end), (after.window_start, after.window_end)
    )
    changes = compare_metrics(
        run_metrics(engine, other), run_metrics(engine, run_id), alpha, overlapping
    )
    scored = run_results(engine, ScoreResult, other), run_results(engine, ScoreResult, run_id)
    score_changes = (
        None
        if scored[0].empty or scored[1].empty
        else compare_scores(scored[0], scored[1], alpha, overlapping)
    )
    if scores:
        if score_changes is None:
            _fail("--scores: both runs must have audited a score (a decision from a score)")
        changes = score_changes
    shown = changes if show_all else changes[changes["significant"] | (changes["status"] != "both")]
    if format_ != "table":
        _emit(shown, format_)
        return
    tested = (
        "the two windows overlap (they share predictions): no change is tested"
        if overlapping
        else f"{int(changes['significant'].sum())} significant changes (BH-adjusted p < {alpha}) "
        f"of {int(changes['p_value'].notna().sum())} tested"
    )
    _say(
        f"{after.audit_name}: {run_label(run_id, after.version)}, as of {after.as_of:%Y-%m-%d}, "
        f"against {run_label(other, before.version)}, as of {before.as_of:%Y-%m-%d}: {tested}; "
        f"{int((changes['status'] == 'appeared').sum())} appeared, "
        f"{int((changes['status'] == 'vanished').sum())} vanished"
    )
    if not overlapping:
        if not shown.empty:
            title = "changes" if show_all else "significant changes, appeared, vanished"
            _print_frame(shown, title=title)
        if score_changes is not None:
            _print_score_changes(score_changes, show_all, alpha)
        return
    _say(_instead_of_overlap(after.window_start, after.window_end))
    both = changes[changes["status"] == "both"]
    if not show_all:  # the largest moves, untested, and what appeared or vanished
        largest = both["change"].abs().sort_values(ascending=False).index[:SHOWN_CHANGES]
        shown = pd.concat([changes.loc[largest], changes[changes["status"] != "both"]])
    shown = shown.drop(columns=["p_value", "p_adjusted", "significant", "overlapping"])
    if not shown.empty:
        title = "changes, untested" + (
            ""
            if show_all
            else f": the {min(SHOWN_CHANGES, len(both))} largest of {len(both)} "
            "(--all shows every one), appeared, vanished"
        )
        _print_frame(shown, title=title)
    if score_changes is not None:
        _print_score_changes(score_changes, show_all, alpha)


def _print_score_changes(changes: Any, show_all: bool, alpha: float) -> None:
    """The score audit's part of `compare`: a line of counts, then each group's AUC with its
    interval and calibration before and after (tasks.compare.compare_scores), the significant
    changes, appeared and vanished (``show_all``: every group)."""
    overlapping = bool(changes["overlapping"].any())
    tested = (
        "untested (the windows overlap)"
        if overlapping
        else f"{int(changes['significant'].sum())} significant changes (BH-adjusted p < {alpha}) "
        f"of {int(changes['p_value'].notna().sum())} tested"
    )
    _say(
        f"score: AUC {tested}; {int((changes['status'] == 'appeared').sum())} appeared, "
        f"{int((changes['status'] == 'vanished').sum())} vanished"
    )
    keep = changes["status"] != "both"
    keep |= changes["status"] == "both" if show_all or overlapping else changes["significant"]
    shown = changes[keep].drop(columns=["p_value", "significant", "overlapping"])
    if overlapping:
        shown = shown.drop(columns="p_adjusted")
    if shown.empty:
        return
    _print_frame(
        shown,
        title="score: AUC [low, high] and calibration (in the large, slope) per group, "
        + ("every group" if show_all or overlapping else "significant changes, appeared, vanished"),
    )


@app.command()
def report(
    run_id: Annotated[int, typer.Argument(help="The run to render")],
    out: Annotated[
        Path | None, typer.Option(help="Output file (default: reports/AUDIT-run-N.html)")
    ] = None,
    db: DbOption = None,
    format: Annotated[
        str,
        typer.Option(
            "--format",
            help="html: the audit report; ll144: New York City Local Law 144 tables (HTML and CSV)",
        ),
    ] = "html",
) -> None:
    """Render any stored run as a self-contained HTML report (or its Local Law 144 tables)."""
    from biasaudit.flows.report import build_report, report_path, write_page

    if format not in ("html", "ll144"):
        _fail(f"--format {format!r}: accepted are html and ll144")
    engine = _engine(db)
    run = _run_or_fail(engine, run_id)
    if format == "ll144":
        from biasaudit.flows.ll144 import ll144_report

        default = report_path(run.audit_name, run_id)
        path = out or default.with_name(default.stem + "-ll144.html")
        page, table = ll144_report(engine, run_id)
        write_page(path, page)
        write_page(path.with_suffix(".csv"), table)
        _say(f"wrote {path} and {path.with_suffix('.csv')}")
        return
    path = out or report_path(run.audit_name, run_id)
    write_page(path, build_report(engine, run_id, str(path))[0])
    _say(f"wrote {path}")
