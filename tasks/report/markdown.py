"""The markdown first screen (the Prefect artifact) and the table records of a run."""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from biasaudit.schemas.names import printable
from biasaudit.schemas.report import ReportFrames
from biasaudit.tasks.counts import LABEL_BIAS
from biasaudit.tasks.report.derive import (
    FIRST_SCREEN_ROWS,
    VERDICTS,
    comparisons,
    definitions,
    groups,
    hdi_mass,
    points_plain,
    ranked_findings,
    threshold_warning,
    thresholds,
    verdicts,
)
from biasaudit.tasks.report.text import (
    _model_version,
    _title,
    _tuples,
    count,
    credibility,
    definitions_sentence,
    legend,
    md,
    p_text,
    percent,
    points,
    sig3,
)


def _md_groups(part: pd.DataFrame) -> str:
    """Each group's size, its label completeness when groups differ in it, small ones marked."""
    uniform = part["completeness"].nunique(dropna=False) <= 1
    cells = zip(part["group_name"], part["rows"], part["completeness"], part["small"])
    text = "; ".join(
        f"{md(g)} {count(n)}"
        + ("" if uniform else f" ({percent(c)} labelled)")
        + (" (small)" if small else "")
        for g, n, c, small in cells
    )
    if uniform and len(part):
        text += f"; {percent(part['completeness'].iloc[0])} labelled"
    return text


def _md_completeness(p: float, names: str, said: str = LABEL_BIAS) -> str:
    if not names:
        return ""
    return (
        f"; labelled shares differ by decision in {md(names)} (Holm-adjusted Fisher p "
        f"{md(p_text(p))}): {said if said == LABEL_BIAS else md(said)}"
    )


def render_markdown(frames: ReportFrames, report_path: str | None = None) -> str:
    """The first screen as markdown (Prefect artifact): verdicts, groups, which definitions of
    fairness hold (a scored run's sentence per attribute, as the HTML report states it) and
    ranked flagged comparisons. Values from the data go through ``md``; numbers are formatted
    here."""
    run = frames.run
    verdict = verdicts(frames)
    sizes = groups(frames)
    as_of = run.get("as_of")
    as_of = f"{as_of:%Y-%m-%d %H:%M}" if isinstance(as_of, datetime) else md(as_of)
    lines = [
        f"# {_title(run, md)}",
        "",
        (
            f"model {md(run.get('model_id'))}{md(_model_version(run))}, as of {as_of}, "
            f"{count(run.get('rows_valid'))} valid predictions"
        ),
        *([] if (warning := threshold_warning(frames)) is None else ["", f"> ⚠ {md(warning)}"]),
        "",
        "| attribute | verdict | why | groups (predictions) |",
        "|---|---|---|---|",
    ]
    for row in _tuples(verdict):
        part = sizes[sizes["attribute"] == row.attribute]
        lines.append(
            f"| {md(row.attribute)} | **{VERDICTS[row.verdict][0]}** | {md(row.why)} | "
            f"{_md_groups(part)}"
            f"{_md_completeness(row.completeness_p, row.completeness_groups, row.completeness_said)} |"
        )
    stated = definitions(frames)
    if len(stated):
        alpha, tolerance = thresholds(frames)["alpha"], points_plain(frames)
        lines += ["", "## Which definitions of fairness hold", ""]
        lines += [f"- {md(definitions_sentence(row, alpha, tolerance))}" for row in _tuples(stated)]
    findings = ranked_findings(frames)
    lines += ["", f"## Flagged comparisons ({len(findings)}), largest first", ""]
    if findings.empty:
        lines.append("No comparison is flagged.")
    else:
        lines += [
            (
                "| attribute | group | compared with | metric | group rate | reference rate "
                f"| difference \\[{credibility(hdi_mass(frames))} HDI\\] | ratio | adjusted p |"
            ),
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in _tuples(findings.head(FIRST_SCREEN_ROWS)):
            small = " (small)" if row.small else ""
            lines.append(
                f"| {md(row.attribute)} | {md(row.group_name)}{small} | {md(row.reference)} | "
                f"{md(row.metric.upper())} | {percent(row.rate_group)} | "
                f"{percent(row.rate_reference)} | {points(row.difference)} "
                f"\\[{sig3(100 * row.low)}, {sig3(100 * row.high)}\\] | "
                f"{sig3(row.ratio)} | {md(p_text(row.p_adjusted))} |"
            )
        if len(findings) > FIRST_SCREEN_ROWS:
            lines.append(f"\nand {len(findings) - FIRST_SCREEN_ROWS} more in the HTML report.")
        shown = findings.head(FIRST_SCREEN_ROWS)["metric"]
        lines += ["", *(f"- {md(line)}" for line in legend(shown))]
    if report_path:
        lines += ["", f"Report: {md(report_path)}"]
    return "\n".join(lines) + "\n"


def table_records(frames: ReportFrames) -> list[dict]:
    """Every comparison (one per hypothesis) as plain records for a Prefect table artifact, its
    text as shown (schemas.names.printable): Prefect's UI shows the cells to people."""
    comp = comparisons(frames)
    if comp.empty:
        return []
    columns = {
        "attribute": "attribute",
        "group_name": "group",
        "reference": "reference",
        "metric": "metric",
        "rate_group": "rate_group",
        "rate_reference": "rate_reference",
        "difference": "difference",
        "low": "hdi_low",
        "high": "hdi_high",
        "ratio": "ratio",
        "four_fifths": "four_fifths",
        "p_adjusted": "p_adjusted",
        "flagged": "flagged",
        "small": "small_group",
        "undefined_reason": "undefined_reason",
    }
    frame = comp[list(columns)].rename(columns=columns)
    frame = frame.astype(object).where(frame.notna(), None)
    return [
        {k: printable(v) if isinstance(v, str) else v for k, v in record.items()}
        for record in frame.to_dict(orient="records")
    ]
