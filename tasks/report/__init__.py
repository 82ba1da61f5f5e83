"""Report stage (pure): the HTML report, the markdown first screen and the table records of a run.

``derive`` computes what the report says from the result frames, ``page`` (HTML), ``markdown`` and
``svg`` render it, ``text`` formats values for people.

Rendered from the frames of one stored run (``schemas.report.ReportFrames``, gathered by
``db.store.report_data``); nothing here reads a database or imports Prefect. Order of the page:

1. first screen: per attribute a verdict (flagged / fair within tolerance / undecided / too little
   data), the flagged comparisons ranked by size with their interval and adjusted p, and each
   group's size and label completeness;
2. per attribute: each group's base rate (prevalence: context, never tested); per rate metric,
   every group's rate with its Clopper-Pearson interval and counts,
   the difference and ratio to the configured reference group and to the rest of the population,
   the four-fifths rule (ratio within 0.8-1.25, as Aequitas applies it) beside the statistical
   verdict, and forest plots against the reference and against the rest; where the run audited a
   score, which definitions of fairness hold (one sentence from its tests), reliability curves
   beside the error-rate forest plots, and ROC curves;
3. trends of each metric and group over the runs up to this one (by as-of), with dates and values;
4. every metric of the run in words with its formula (schemas.metric_ids.GLOSSARY);
5. details, collapsed: planning, MATCH, meta-metrics, smoothing, changes, other metrics, run facts.

Inline CSS and SVG only: no scripts, no external resources. Every value from the data is escaped,
its control and bidirectional formatting characters as visible escapes (``esc``), and in a table
wraps within a bounded box (``datum``) or is cut on one line, whole on hover (``clipped``).
"""

from biasaudit.tasks.report.derive import (
    FIRST_SCREEN_ROWS,
    VERDICTS,
    comparisons,
    groups,
    per_frames,
    ranked_findings,
    thresholds,
    undefined_metrics,
    untested,
    verdicts,
)
from biasaudit.tasks.report.markdown import render_markdown, table_records
from biasaudit.tasks.report.page import render_html

__all__ = [
    "FIRST_SCREEN_ROWS",
    "VERDICTS",
    "comparisons",
    "groups",
    "per_frames",
    "ranked_findings",
    "render_html",
    "render_markdown",
    "table_records",
    "thresholds",
    "undefined_metrics",
    "untested",
    "verdicts",
]
