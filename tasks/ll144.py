"""New York City Local Law 144 bias-audit tables (6 RCNY 5-300, 5-301): selection or scoring rates
and impact ratios per category of sex, race/ethnicity and their intersections.

- selection rate: the share of a category selected (a binary decision: y_pred = 1);
- scoring rate (a score): the share of a category scoring strictly above the median score of the
  whole sample (every finite score read in the audit window, labelled or not, the individuals in
  an unknown category included: the individuals the score assessed), exact: the scan counts the
  rows above it (db.sources.cells.window_score_median);
- impact ratio: a category's rate over the highest rate of its attribute;
- a category with less than 2% of the rows audited (every row of the tables and every row of an
  unknown category: the data the audit used) may be left out of the impact ratios; it is still
  shown with its count and rate, and the report says it was left out and of how many rows;
- with a decision's threshold configured, the selection rate at that threshold (score at or
  above it) and its impact ratios are shown beside the scoring rate's median split;
- the number of individuals whose category is unknown is reported.

The four-fifths rule (an impact ratio below 0.8 suggests adverse impact) is the EEOC's rule of
thumb (Uniform Guidelines, 29 CFR 1607.4(D)); the law sets no threshold.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

import numpy as np
import pandas as pd

from biasaudit.schemas.results import empty_result, validate_result

MINIMUM_SHARE = 0.02
SCORING_COLUMNS = ["attribute", "group_name", "n", "above_median", "median_score", "sample_size"]
TABLE_COLUMNS = [
    "attribute", "group_name", "n", "selected", "rate", "share", "in_ratios", "impact_ratio",
]  # fmt: skip
FOUR_FIFTHS = (
    "An impact ratio below 0.8 is the EEOC's four-fifths rule of thumb (Uniform Guidelines on "
    "Employee Selection Procedures, 29 CFR 1607.4(D)); Local Law 144 sets no threshold: it "
    "requires the ratios to be published."
)


def weighted_median(values: np.ndarray, counts: np.ndarray) -> float:
    """The median of ``values`` repeated ``counts`` times (the mean of the two middle values
    where the number of rows is even)."""
    order = np.argsort(values)
    values, counts = np.asarray(values, float)[order], np.asarray(counts, float)[order]
    n = counts.sum()
    if n == 0:
        return np.nan
    ends = np.cumsum(counts)
    middle = [int((n - 1) // 2), int(n // 2)]  # 0-based positions of the middle rows
    return float(np.mean([values[np.searchsorted(ends, m, side="right")] for m in middle]))


def scoring_rates(counts: pd.DataFrame, median: float, sample_size: int) -> pd.DataFrame:
    """Per (attribute, group) of the score counts (schemas.score_bins): its rows and those
    scoring strictly above ``median``, the median of the ``sample_size`` scores of the sample;
    checked by its contract (schemas.results)."""
    if not len(counts):
        return empty_result("scoring")
    columns = ["n", "above_median"]
    frame = counts.assign(n=counts["positives"] + counts["negatives"] + counts["unlabelled"])
    frame = frame.groupby(["attribute", "group_name"], sort=True, as_index=False)[columns].sum()
    frame = frame.astype({c: "int64" for c in columns}).assign(
        median_score=float(median), sample_size=int(sample_size)
    )
    return validate_result("scoring", frame[SCORING_COLUMNS])


def binned_scoring_counts(thresholds: pd.DataFrame) -> pd.DataFrame:
    """Per (attribute, group): rows and rows scoring above the attribute's median score, from the
    threshold sweep alone (tasks.scores.threshold_sweep: rows at or above each bin's lower edge),
    for a run stored without its scoring counts. The median is that of the bins' lower edges and
    "above the median" is "at or above ``threshold``, the first bin edge above it": exact where
    each bin is one score value, not with decile bins of a continuous score."""
    parts = []
    for attribute, part in thresholds.groupby("attribute", sort=True):
        wide = part.pivot_table(
            index="group_name", columns="threshold", values="selected", aggfunc="sum"
        ).sort_index(axis=1)
        edges = wide.columns.to_numpy(dtype=float)
        at_or_above = wide.to_numpy(dtype=float)
        in_bin = at_or_above - np.concatenate(
            [at_or_above[:, 1:], np.zeros((len(wide), 1))], axis=1
        )
        median = weighted_median(edges, in_bin.sum(0))
        above = np.flatnonzero(edges > median)
        selected = at_or_above[:, above[0]] if len(above) else np.zeros(len(wide))
        parts.append(
            pd.DataFrame(
                {
                    "attribute": attribute,
                    "group_name": wide.index.astype(str),
                    "n": at_or_above[:, 0].astype("int64"),
                    "selected": selected.astype("int64"),
                    "median": median,
                    "threshold": edges[above[0]] if len(above) else np.nan,
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def exact_scoring_note(median: float, sample_size: int, in_tables: int) -> str:
    """The scoring rate's definition, naming the median it counts above and its sample, of which
    ``in_tables`` rows are in the tables."""
    left = sample_size - in_tables
    return (
        f"Scoring rate: the share of a category scoring strictly above {float(median)!r}, the "
        f"median of the sample's {sample_size:,} scores (every finite score read in the audit "
        "window"
        + (
            f"; {left:,} of them in rows not in the tables: an unknown category or another "
            "invalid value"
            if left
            else ""
        )
        + "). "
    )


def binned_scoring_note(median: float, threshold: float) -> str:
    """The scoring rate's definition for a run stored without its scoring counts: the bin edge
    it counts from, and why."""
    counted = (
        f"scoring at or above {float(threshold)!r}, the first score bin edge above"
        if np.isfinite(threshold)
        else "scoring in a score bin above (none is)"
    )
    return (
        f"Scoring rate: the share of a category {counted} {float(median)!r}, the median of the "
        "rows' bins' lower edges. This run stored its score counts per bin only, not the rows "
        "above the sample's median: the rate is the share above the median only where each bin "
        "is one score value (a score with at most 20 values). "
    )


def impact_table(
    groups: pd.DataFrame,
    minimum_share: float = MINIMUM_SHARE,
    audited: Mapping[str, int] | None = None,
) -> pd.DataFrame:
    """Rates, each category's share of the rows audited, and impact ratios (rate over the highest
    rate among the categories with at least ``minimum_share`` of the rows audited; NaN for the
    others, which are shown but left out). ``audited``: per attribute, every row audited (the
    rows of its tables and those of an unknown category); an attribute not in it, the rows of
    its tables."""
    frame = groups[["attribute", "group_name", "n", "selected"]].copy()
    frame["rate"] = frame["selected"] / frame["n"]
    in_tables = frame.groupby("attribute")["n"].transform("sum")
    total = frame["attribute"].map(dict(audited or {})).fillna(in_tables)
    frame["share"] = frame["n"] / np.maximum(total, in_tables)
    frame["in_ratios"] = frame["share"] >= minimum_share
    highest = frame["rate"].where(frame["in_ratios"]).groupby(frame["attribute"]).transform("max")
    frame["impact_ratio"] = (frame["rate"] / highest).where(frame["in_ratios"])
    return frame.sort_values(["attribute", "group_name"], ignore_index=True)[TABLE_COLUMNS]


def ll144_csv(table: pd.DataFrame) -> str:
    """The tables as one CSV (an excluded category's impact ratio empty)."""
    return table.to_csv(index=False)


def ll144_html(
    table: pd.DataFrame,
    *,
    title: str,
    scoring: str | None,
    audit_date: str,
    period: str,
    unknown: dict[str, int],
    minimum_share: float = MINIMUM_SHARE,
    threshold: float | None = None,
    audited: Mapping[str, int] | None = None,
) -> str:
    """A self-contained page: one table per attribute and intersection, the unknown categories,
    the excluded categories' disclosure, the audit date and the data's period. ``scoring`` is
    the scoring rate's definition (its median: exact_scoring_note, binned_scoring_note), None
    for selection rates. With ``threshold`` (a decision's, configured), each table gives beside
    the scoring rate the selection rate at that threshold (columns ``selected_at_threshold``,
    ``rate_at_threshold``, ``impact_ratio_at_threshold`` of ``table``). ``audited``: the rows
    audited per attribute, the base of each category's share (impact_table)."""
    rate = "Scoring rate" if scoring else "Selection rate"
    counted = "Scored above the median" if scoring else "Selected"
    beside = threshold is not None and "rate_at_threshold" in table.columns
    e = html.escape
    at = f"score ≥ {threshold!r}" if beside else ""
    parts = [
        f"<!doctype html><meta charset='utf-8'><title>{e(title)}</title>",
        (
            "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
            "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #999;"
            "padding:.3em .6em;text-align:right}td:first-child,th:first-child{text-align:left}"
            "</style>"
        ),
        f"<h1>{e(title)}</h1>",
        f"<p>Date of the audit: {e(audit_date)}. Period of the data: {e(period)}.</p>",
        "<p>"
        + e(scoring or "Selection rate: the share of a category selected. ")
        + (
            e(
                "Selection rate at the configured threshold: the share of a category with a "
                f"score at or above {threshold!r} (the audit's decision), with its own impact "
                "ratios. "
            )
            if beside
            else ""
        )
        + "Impact ratio: a category's rate divided by the highest rate of its attribute.</p>",
    ]
    left = "left out (under 2% of the rows audited)"
    for attribute, part in table.groupby("attribute", sort=True):
        rows = "".join(
            f"<tr><td>{e(str(r.group_name))}</td><td>{r.n:,}</td><td>{r.selected:,}</td>"
            f"<td>{r.rate:.3f}</td><td>{r.share:.1%}</td><td>"
            + (f"{r.impact_ratio:.3f}" if r.in_ratios else left)
            + "</td>"
            + (
                f"<td>{int(r.selected_at_threshold):,}</td><td>{r.rate_at_threshold:.3f}</td><td>"
                + (f"{r.impact_ratio_at_threshold:.3f}" if r.in_ratios else left)
                + "</td>"
                if beside
                else ""
            )
            + "</tr>"
            for r in part.itertuples()
        )
        extra = (
            f"<th>Selected at {e(at)}</th><th>Selection rate at {e(at)}</th>"
            f"<th>Impact ratio at {e(at)}</th>"
            if beside
            else ""
        )
        parts.append(
            f"<h2>{e(str(attribute))}</h2><table><tr><th>Category</th><th>Individuals</th>"
            f"<th>{counted}</th><th>{rate}</th><th>Share of the rows audited</th>"
            f"<th>Impact ratio</th>{extra}</tr>{rows}</table>"
        )
    left_out = table[~table["in_ratios"]]
    base = (
        " (" + "; ".join(f"{e(str(a))}: {n:,}" for a, n in sorted(audited.items())) + ", the "
        "individuals in an unknown category included)"
        if audited
        else ""
    )
    parts.append(
        f"<p>Categories with less than {minimum_share:.0%} of the rows audited{base} are left out "
        "of the impact ratios (the highest rate is taken among the others); their counts and "
        "rates are shown "
        + (
            "above: "
            + ", ".join(
                f"{e(str(r.attribute))} {e(str(r.group_name))}" for r in left_out.itertuples()
            )
            + "."
            if len(left_out)
            else "above; none was left out in this audit."
        )
        + "</p>"
    )
    parts.append(
        "<p>Individuals in unknown categories (not in any table above): "
        + "; ".join(f"{e(a)}: {n:,}" for a, n in unknown.items())
        + ".</p>"
    )
    parts.append(f"<p>{e(FOUR_FIFTHS)}</p>")
    return "\n".join(parts)
