"""Report stage: a self-contained HTML page per run, and a Prefect artifact with the headline.

Built from the stored run only (so ``biasaudit report RUN`` renders any past run the same way):
run facts, flagged groups, a forest plot per rate metric (each group's difference from its rest of
population with its HDI, against the tolerance band), planning verdicts, meta-metrics, and the
trend of the between-group spread over the audit's last runs. Inline CSS and SVG, no scripts, no
external resources.
"""

from __future__ import annotations

import html
import math
import os
from pathlib import Path

import pandas as pd

REPORTS_ENV = "BIASAUDIT_REPORTS_DIR"
STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:.25em .5em;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left}.flag{color:#b00020;font-weight:600}
.muted{color:#777}figure{margin:1em 0}figcaption{font-size:.85em;color:#555}
"""


def reports_dir() -> Path:
    return Path(os.environ.get(REPORTS_ENV, "reports"))


def _esc(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.4g}"
    return html.escape(str(value))


def _table(frame: pd.DataFrame, flag_column: str | None = None) -> str:
    if frame.empty:
        return '<p class="muted">none</p>'
    head = "".join(f"<th>{_esc(c)}</th>" for c in frame.columns if c != flag_column)
    rows = []
    for row in frame.to_dict(orient="records"):
        css = ' class="flag"' if flag_column and row.get(flag_column) else ""
        cells = "".join(f"<td>{_esc(v)}</td>" for k, v in row.items() if k != flag_column)
        rows.append(f"<tr{css}>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def forest_plot(rows: pd.DataFrame, tolerance: float, title: str) -> str:
    """SVG forest plot: one line per group, point = observed difference, bar = HDI."""
    rows = rows.dropna(subset=["difference"]).sort_values("difference")
    if rows.empty:
        return ""
    left, width, line = 260, 480, 18
    height = 40 + line * len(rows)
    low = min(rows["hdi_low"].min(), -tolerance) - 0.02
    high = max(rows["hdi_high"].max(), tolerance) + 0.02

    def x(value: float) -> float:
        return left + (value - low) / (high - low) * width

    parts = [
        (
            f'<rect x="{x(-tolerance):.1f}" y="20" width="{x(tolerance) - x(-tolerance):.1f}" '
            f'height="{height - 40}" fill="#e8f5e9"/>'
        ),
        f'<line x1="{x(0):.1f}" y1="20" x2="{x(0):.1f}" y2="{height - 20}" stroke="#888"/>',
    ]
    for i, row in enumerate(rows.itertuples()):
        y = 30 + i * line
        colour = "#b00020" if row.flagged else "#1f4e79"
        parts.append(
            f'<text x="{left - 8}" y="{y + 4}" text-anchor="end" font-size="11">'
            f"{_esc(row.group_name)} (n={int(row.n_group)})</text>"
            f'<line x1="{x(row.hdi_low):.1f}" y1="{y}" x2="{x(row.hdi_high):.1f}" y2="{y}" '
            f'stroke="{colour}" stroke-width="2"/>'
            f'<circle cx="{x(row.difference):.1f}" cy="{y}" r="4" fill="{colour}"/>'
        )
    for tick in (low, -tolerance, 0.0, tolerance, high):
        parts.append(
            f'<text x="{x(tick):.1f}" y="{height - 5}" text-anchor="middle" font-size="10">'
            f"{tick:+.2f}</text>"
        )
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 20}" height="{height}" '
        f'role="img" aria-label="{_esc(title)}">{"".join(parts)}</svg>'
    )
    return f"<figure>{svg}<figcaption>{_esc(title)}</figcaption></figure>"


def sparkline(values: list[float], label: str) -> str:
    """A small SVG line of a series (oldest first)."""
    values = [v for v in values if not math.isnan(v)]
    if len(values) < 2:
        return ""
    top, bottom = max(values), min(values)
    span = (top - bottom) or 1.0
    points = " ".join(
        f"{10 + i * 200 / (len(values) - 1):.1f},{50 - (v - bottom) / span * 40:.1f}"
        for i, v in enumerate(values)
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="220" height="60" role="img" '
        f'aria-label="{_esc(label)}"><polyline fill="none" stroke="#1f4e79" stroke-width="2" '
        f'points="{points}"/></svg>'
    )


def render_report(engine, run_id: int, trend_runs: int = 10) -> str:
    """The HTML report of one stored run."""
    from biasaudit.db.history import (
        FLAGGED_COLUMNS,
        META_COLUMNS,
        PLANNING_COLUMNS,
        get_run,
        list_runs,
        run_results,
    )
    from biasaudit.db.models import DetectionResult, MetaMetricResult, PlanningResult

    run = get_run(engine, run_id)
    if run is None:
        raise LookupError(f"no run with id {run_id}")
    tolerance = run.config["thresholds"]["tolerance"]
    detection = run_results(engine, DetectionResult, run_id)
    planning = run_results(engine, PlanningResult, run_id)
    meta = run_results(engine, MetaMetricResult, run_id)
    facts = pd.DataFrame(
        [
            ("audit", run.audit_name),
            ("model", run.model_id),
            ("version", run.version),
            ("status", run.status),
            ("as of", f"{run.as_of:%Y-%m-%d %H:%M}"),
            ("window", f"({run.window_start or '-inf'}, {run.window_end}]"),
            (
                "rows read / valid / quarantined / unlabelled",
                f"{run.rows_read} / {run.rows_valid} / {run.rows_quarantined} / {run.rows_unlabelled}",
            ),
            ("error", run.error or ""),
        ],
        columns=["", "value"],
    )
    sections = [f"<h1>Bias audit: {_esc(run.audit_name)} (run {run.id})</h1>", _table(facts)]
    flagged = detection[detection["flagged"].astype(bool)] if not detection.empty else detection
    sections.append(
        "<h2>Flagged groups</h2><p>Benjamini-Hochberg adjusted p below α of the test that "
        f"the disparity exceeds the tolerance ({tolerance}).</p>"
    )
    sections.append(_table(flagged[FLAGGED_COLUMNS] if not flagged.empty else flagged))
    sections.append(
        "<h2>Disparities with 95% intervals</h2><p>Each group against the rest of the "
        "population: observed difference (dot) and HDI of the difference (bar); the "
        "green band is the tolerance; red rows are flagged.</p>"
    )
    if not detection.empty:
        vs_rest = detection[detection["reference"] == "rest"]
        for (attribute, metric), rows in vs_rest.groupby(["attribute", "metric"]):
            sections.append(forest_plot(rows, tolerance, f"{metric} by {attribute}: group − rest"))
    sections.append(
        "<h2>Planning</h2><p>Predictions needed to detect the observed disparity at the "
        "audit's α and power, against those available.</p>"
    )
    if not planning.empty:
        sections.append(_table(planning[planning["reference"] == "rest"][PLANNING_COLUMNS]))
    sections.append(
        "<h2>Meta-metrics</h2><p>Naive spread across groups, and the corrected between-"
        "group variance with its double-corrected bootstrap interval.</p>"
    )
    sections.append(_table(meta[META_COLUMNS] if not meta.empty else meta))
    history = list_runs(engine, audit=run.audit_name, model=run.model_id, status="succeeded")
    history = history[history["as_of"] <= pd.Timestamp(run.as_of)].head(trend_runs).iloc[::-1]
    sections.append(f"<h2>Trend over the last {len(history)} runs</h2>")
    trend = [
        run_results(engine, MetaMetricResult, int(i)).assign(version=v)
        for i, v in zip(history["id"], history["version"])
    ]
    if trend:
        trend = pd.concat(trend)
        rows = []
        for (attribute, metric), part in trend.groupby(["attribute", "metric"]):
            series = part.sort_values("version")["corrected_var"].tolist()
            rows.append(
                f"<tr><td>{_esc(attribute)}</td><td>{_esc(metric)}</td>"
                f"<td>{_esc(series[-1])}</td><td>{sparkline(series, f'{metric} {attribute}')}</td></tr>"
            )
        sections.append(
            "<table><tr><th>attribute</th><th>metric</th><th>corrected variance (latest)</th>"
            f"<th>trend</th></tr>{''.join(rows)}</table>"
        )
    body = "\n".join(sections)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Bias audit '
        f"{_esc(run.audit_name)} run {run.id}</title><style>{STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def headline_markdown(summary: dict, run_id: int, audit: str, path: Path) -> str:
    """The headline numbers of a run, for a Prefect markdown artifact."""
    flagged = summary.get("flagged", [])
    lines = [
        f"# Bias audit {audit}: run {run_id}",
        "",
        "| | |",
        "|---|---|",
        f"| groups | {summary.get('groups')} |",
        f"| undefined metric values | {summary.get('undefined_metrics')} |",
        f"| detection tests flagged | {len(flagged)} of {summary.get('detection_tests')} |",
        f"| comparisons underpowered | {summary.get('underpowered')} |",
        f"| significant changes since last version | {summary.get('significant_changes')} |",
        "",
        *(f"- {line}" for line in flagged),
        "",
        f"Report: `{path}`",
    ]
    return "\n".join(lines)
