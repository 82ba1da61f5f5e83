"""Report stage (pure): the HTML report, the markdown first screen and the table records of a run.

Rendered from the frames of one stored run (``schemas.report.ReportFrames``, gathered by
``db.report_data``); nothing here reads a database or imports Prefect. Order of the page:

1. first screen: per attribute a verdict (flagged / fair within tolerance / undecided / too little
   data), the flagged comparisons ranked by size with their interval and adjusted p, and each
   group's size and label completeness;
2. per attribute: each group's base rate (prevalence: context, never tested); per rate metric,
   every group's rate with its Clopper-Pearson interval and counts,
   the difference and ratio to the configured reference group and to the rest of the population,
   the four-fifths rule (ratio within 0.8-1.25, as Aequitas applies it) beside the statistical
   verdict, and forest plots against the reference and against the rest;
3. trends of each metric and group over the runs up to this one (by as-of), with dates and values;
4. every metric of the run in words with its formula (schemas.metric_ids.GLOSSARY);
5. details, collapsed: planning, MATCH, meta-metrics, smoothing, changes, other metrics, run facts.

Inline CSS and SVG only: no scripts, no external resources. Every value from the data is escaped,
its control and bidirectional formatting characters as visible escapes (``esc``), and in a table
wraps within a bounded box (``datum``) or is cut on one line, whole on hover (``clipped``).
"""

from __future__ import annotations

import copy
import functools
import html
import inspect
import itertools
import math
import re
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, TypeVar, cast

import numpy as np
import pandas as pd
from scipy import stats

from biasaudit.schemas.config import Thresholds
from biasaudit.schemas.metric_ids import (
    BASE_RATES,
    COMPLEMENT,
    GLOSSARY,
    METRIC_IDS,
    N_MEANS,
    rate_cells,
    role,
)
from biasaudit.schemas.names import printable
from biasaudit.schemas.report import ReportFrames, run_label
from biasaudit.tasks.counts import label_completeness
from biasaudit.tasks.rates import reason_kind

FOUR_FIFTHS = (0.8, 1.25)
# The base rates shown beside the groups; a complement of one shown (nprev = 1 − prev) adds nothing.
CONTEXT = [m for i, m in enumerate(BASE_RATES) if COMPLEMENT.get(m) not in BASE_RATES[:i]]
FIRST_SCREEN_ROWS = 10
CHIPS = 16  # groups shown per attribute on the first screen
CELLS = ["tp", "fp", "fn", "tn"]
VERDICTS = {
    "flagged": ("flagged", "#b00020"),
    "fair": ("fair within tolerance", "#1b5e20"),
    "undecided": ("undecided", "#8a6d00"),
    "little": ("too little data", "#555"),
}
STYLE = """
body{font:14px/1.35 system-ui,sans-serif;margin:12px 20px;color:#222;max-width:1360px}
h1{font-size:20px;margin:0 0 2px}h2{font-size:16px;margin:18px 0 6px;border-bottom:1px solid #ccc}
h3{font-size:14px;margin:12px 0 4px}p{margin:4px 0}.meta{color:#555;font-size:13px}
details{max-width:100%;overflow-x:auto}table{border-collapse:collapse;font-size:13px;margin:4px 0}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:right;vertical-align:top;
white-space:nowrap}td.l{white-space:normal}h1,h2,h3,p,summary{overflow-wrap:anywhere}
.datum{display:inline-block;max-width:32em;max-height:5.4em;overflow-y:auto;
overflow-wrap:anywhere;white-space:normal;vertical-align:top}
.clip{display:inline-block;max-width:32em;overflow:hidden;text-overflow:ellipsis;
vertical-align:top}
th{background:#f4f4f4;font-weight:600}td.l,th.l{text-align:left}
.flag{color:#b00020;font-weight:600}.fair{color:#1b5e20}.muted{color:#777}
.badge{display:inline-block;padding:1px 7px;border-radius:9px;color:#fff;font-size:12px;
font-weight:600;white-space:nowrap}
.chip{display:inline-block;margin:1px 3px 1px 0;padding:0 5px;border:1px solid #ddd;
border-radius:4px;font-size:12px;white-space:nowrap}.chip.small{background:#fff3e0;
border-color:#f0a040}.why{color:#8a4b00;font-style:italic}
details{margin:6px 0}summary{cursor:pointer;font-weight:600}
summary.metric{margin:8px 0 2px 12px}details details>table,details details>.plots{margin-left:12px}
.fold{border:0;border-top:3px solid #1f4e79;margin:10px 0}
figure{margin:6px 0}figcaption{font-size:12px;color:#555}.plots{display:flex;gap:12px;
flex-wrap:wrap}
"""


# ---------------------------------------------------------------------------------------------
# Numbers for people
# ---------------------------------------------------------------------------------------------


def _tuples(frame: pd.DataFrame, index: bool = True) -> Iterator[Any]:
    """The rows of ``frame.itertuples(index=index)``, the same values, read a column at a time:
    itertuples selects every column through ``iloc`` on each call, most of the report's time."""
    fields = (["Index"] if index else []) + list(frame.columns)
    columns = [list(frame.index)] if index else []
    for _, series in frame.items():  # noqa: PERF102 (DataFrame.values is not the columns)
        plain = isinstance(series.dtype, np.dtype) and series.dtype.kind not in "mM"
        columns.append(series.to_numpy().tolist() if plain else list(series))
    row = cast(Any, namedtuple)("Row", fields, rename=True)  # fields known at run time only
    return map(row._make, zip(*columns) if columns else itertools.repeat((), len(frame)))


def _missing(value) -> bool:
    return value is None or (isinstance(value, float | np.floating) and math.isnan(value))


def esc(value) -> str:
    """Any value as HTML text or attribute: control and bidirectional formatting characters as
    visible escapes (schemas.names.printable: no name turns itself round), then HTML-escaped;
    None and NaN become an empty string."""
    return "" if _missing(value) else html.escape(printable(str(value)), quote=True)


def datum(value) -> str:
    """A value from the data (a name, a reason) in a table cell: escaped (``esc``) in a box
    (STYLE's ``.datum``) that wraps anywhere, at most 32 em wide and 4 lines tall, scrolling
    beyond: no value widens or lengthens the page, whatever its length, and all of it stays
    readable."""
    return f"<span class=datum>{esc(value)}</span>"


def clipped(text: str) -> str:
    """Text with data in it for a cell that keeps to one line (a column header): at most 32 em
    wide, cut there by the browser with an ellipsis (STYLE's ``.clip``), whole in the tooltip."""
    return f'<span class=clip title="{esc(text)}">{esc(text)}</span>'


def sig3(value: float) -> str:
    """A number to 3 significant digits without exponent for everyday magnitudes."""
    if _missing(value):
        return "–"
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif abs(value) >= 1e-4:
        text = f"{value:.{max(0, 2 - math.floor(math.log10(abs(value))))}f}"
    else:
        text = f"{value:.2g}"
    return text.replace("-", "−")


def percent(value: float) -> str:
    """A proportion as a percentage with 3 significant digits: 0.448468 -> '44.8%'."""
    if _missing(value):
        return "–"
    if 0 < abs(value) < 1e-4:
        return "<0.01%"
    return f"{sig3(100 * value)}%"


def points(value: float) -> str:
    """A difference of proportions in signed percentage points: 0.2139 -> '+21.4 pp'."""
    if _missing(value):
        return "–"
    text = sig3(abs(100 * value))
    sign = "−" if value < 0 and text.strip("0.") else "+"
    return f"{sign}{text} pp"


def p_text(value: float) -> str:
    if _missing(value):
        return "–"
    return "<0.001" if value < 0.001 else f"{value:.2g}"


def count(value) -> str:
    """A count with thousands separators; millions and billions in words."""
    if _missing(value):
        return "–"
    value = float(value)
    for size, word in ((1e9, "billion"), (1e6, "million")):
        if abs(value) >= size:
            return f"{sig3(value / size)} {word}"
    return f"{value:,.0f}"


def needs_more(needed: float, available: float) -> str:
    """'enough data' or 'needs 2,400 more predictions' (rounded up to 2 significant digits)."""
    if _missing(needed) or not math.isfinite(needed):
        return "no disparity to size for" if _missing(needed) else "cannot be detected"
    more = needed - available
    if more <= 0:
        return "enough data"
    scale = 10 ** max(0, math.floor(math.log10(more)) - 1)
    return f"needs {count(math.ceil(more / scale) * scale)} more predictions"


def rate_interval(x, n, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Clopper-Pearson (exact) interval of a binomial proportion x/n at ``level``.

    Beta quantiles: lower B(α/2; x, n − x + 1), upper B(1 − α/2; x + 1, n − x), with 0 at x = 0
    and 1 at x = n; its coverage is at least ``level`` at every n and p (unlike Wald's or,
    pointwise, Wilson's). NaN where n = 0.
    """
    x, n = np.asarray(x, dtype=float), np.asarray(n, dtype=float)
    tail = (1 - level) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(x > 0, stats.beta.ppf(tail, x, n - x + 1), 0.0)
        high = np.where(x < n, stats.beta.ppf(1 - tail, x + 1, n - x), 1.0)
    undefined = ~(n > 0)
    return np.where(undefined, np.nan, low), np.where(undefined, np.nan, high)


def four_fifths(ratio) -> np.ndarray:
    """Aequitas' disparity rule: a ratio to the reference within [0.8, 1.25] passes."""
    ratio = np.asarray(ratio, dtype=float)
    return np.where(
        np.isnan(ratio),
        "–",
        np.where((ratio >= FOUR_FIFTHS[0]) & (ratio <= FOUR_FIFTHS[1]), "within", "outside"),
    )


# ---------------------------------------------------------------------------------------------
# Tables derived from the stored frames
# ---------------------------------------------------------------------------------------------


def thresholds(frames: ReportFrames) -> dict:
    """The run's tolerance and alpha as its tested rows store them (the configuration's where no
    rate was tested), and its min_group_size; unset settings take schemas.config's defaults."""
    given = (frames.run.get("config") or {}).get("thresholds") or {}
    settings = {
        name: type(field.default)(given.get(name, field.default))
        for name, field in Thresholds.model_fields.items()
        if name in ("tolerance", "alpha", "min_group_size")
    }
    tested = frames.detection
    if len(tested) and {"tolerance", "alpha"} <= set(tested.columns):
        settings.update(
            tolerance=float(tested["tolerance"].iloc[0]), alpha=float(tested["alpha"].iloc[0])
        )
    return settings


def references(frames: ReportFrames) -> dict[str, str]:
    return dict((frames.run.get("config") or {}).get("reference_groups") or {})


T = TypeVar("T")


def per_frames(function: Callable[..., T]) -> Callable[..., T]:
    """Compute a table derived from the run's frames once per ReportFrames (several sections
    read the same groups, comparisons and verdicts); each caller gets its own copy."""

    signature = inspect.signature(function)

    @functools.wraps(function)
    def cached(frames: ReportFrames, *args: Any, **kwargs: Any) -> T:
        bound = signature.bind(frames, *args, **kwargs)
        bound.apply_defaults()  # f(frames) and f(frames, x=default) are one table
        key = (function.__name__, tuple(bound.arguments.items())[1:])
        if key not in frames.derived:
            frames.derived[key] = function(frames, *args, **kwargs)
        return copy.deepcopy(frames.derived[key])

    return cached


@per_frames
def groups(frames: ReportFrames) -> pd.DataFrame:
    """One row per (attribute, group): predictions, labelled, label completeness, small flag, and
    each CONTEXT base rate (column ``prev``, with ``prev_numerator`` and ``prev_denominator``)."""
    counts = frames.counts
    if counts.empty:
        return pd.DataFrame(columns=["attribute", "group_name", "n", "labelled", "completeness"])
    own = counts[counts["subset"] == "group"].copy()
    own["labelled"] = own[CELLS].sum(axis=1)
    unlabelled = own["n_unlabelled"]
    own["n"] = own["labelled"] + unlabelled
    with np.errstate(invalid="ignore", divide="ignore"):
        own["completeness"] = np.where(own["n"] > 0, own["labelled"] / own["n"], np.nan)
        if {"unlabelled_pos", "unlabelled_neg"} <= set(own.columns):  # split by decision
            selected, rejected = own["tp"] + own["fp"], own["fn"] + own["tn"]
            pos, neg = own["unlabelled_pos"].astype(float), own["unlabelled_neg"].astype(float)
            own["completeness_selected"] = selected / (selected + pos)
            own["completeness_rejected"] = rejected / (rejected + neg)
    for metric in CONTEXT:
        numerator, denominator = (own[list(c)].sum(axis=1) for c in rate_cells(metric))
        own[f"{metric}_numerator"], own[f"{metric}_denominator"] = numerator, denominator
        own[metric] = numerator.where(denominator > 0) / denominator.where(denominator > 0)
    # min_group_size counts valid predictions, labelled or not, as the comparison stages do
    own["small"] = own["n"] < thresholds(frames)["min_group_size"]
    return own.sort_values(["attribute", "n"], ascending=[True, False]).reset_index(drop=True)


@per_frames
def comparisons(frames: ReportFrames, deduplicate: bool = True) -> pd.DataFrame:
    """Detection rows with both rates, difference, ratio, four-fifths rule and size marks.

    With ``deduplicate``, a two-valued attribute keeps one comparison per metric (A vs rest,
    B vs rest and A vs B are the same comparison): the one against the named reference, or else
    the smaller group against the rest.
    """
    det = frames.detection
    if not det.empty:  # runs stored before base rates became context hold tests of them
        det = det[~det["metric"].isin(BASE_RATES)]
    if det.empty:
        return pd.DataFrame()
    out = det[["attribute", "group_name", "reference", "metric"]].copy()
    rate = ["numerator_group", "denominator_group", "numerator_reference", "denominator_reference"]
    out[rate] = det[rate]
    with np.errstate(invalid="ignore", divide="ignore"):
        out["rate_group"] = out["numerator_group"] / out["denominator_group"]
        out["rate_reference"] = out["numerator_reference"] / out["denominator_reference"]
        out["ratio"] = np.where(
            out["rate_reference"] > 0, out["rate_group"] / out["rate_reference"], np.nan
        )
    out["difference"] = det["difference"].astype(float)
    out["low"] = det["hdi_low"].astype(float)
    out["high"] = det["hdi_high"].astype(float)
    out["p_adjusted"] = det["p_adjusted"].astype(float)
    out["decision"] = det["decision"]
    out["flagged"] = det["flagged"].fillna(False).astype(bool)
    out["undefined_reason"] = det["reason"]  # why there is no test (drawn as on the metric rows)
    # tested: a p-value exists (not: a zero denominator, a group below min_group_size, the
    # repeat of a two-valued attribute's comparison)
    out["tested"] = out["p_adjusted"].notna()
    out["four_fifths"] = four_fifths(out["ratio"])
    size = groups(frames).set_index(["attribute", "group_name"])
    minimum = thresholds(frames)["min_group_size"]
    key = pd.MultiIndex.from_frame(out[["attribute", "group_name"]])
    out["size_group"] = size["n"].reindex(key).to_numpy()
    ref_key = pd.MultiIndex.from_arrays([out["attribute"], out["reference"]])
    ref_size = size["n"].reindex(ref_key).to_numpy()
    rest = size.groupby(level="attribute")["n"].sum().reindex(out["attribute"]).to_numpy()
    out["size_reference"] = np.where(out["reference"] == "rest", rest - out["size_group"], ref_size)
    out["small"] = (out["size_group"] < minimum) | (out["size_reference"] < minimum)
    if deduplicate:
        out = _deduplicate(out, size, references(frames))
    return out.reset_index(drop=True)


def _deduplicate(out: pd.DataFrame, size: pd.DataFrame, named: dict[str, str]) -> pd.DataFrame:
    """Keep one comparison per metric of each two-valued attribute: the one the detection stage
    tested if it tested one, else the one against the named reference, else the first group
    (alphabetically) against the rest."""
    k = size.groupby(level="attribute").size()
    two = out["attribute"].isin(k[k == 2].index)
    first = out.groupby("attribute")["group_name"].transform("min")
    preference = np.where(
        out["reference"] == out["attribute"].map(named),
        0,
        np.where(out["group_name"] == first, 1, 2),
    )
    ranked = out.assign(_untested=~out["tested"], _preference=preference)
    ranked = ranked.sort_values(["_untested", "_preference"], kind="stable")
    chosen = ranked[two.reindex(ranked.index)].drop_duplicates(["attribute", "metric"]).index
    return out[~two | out.index.isin(chosen)]


@per_frames
def verdicts(frames: ReportFrames) -> pd.DataFrame:
    """Per attribute: verdict key, groups, smallest group, flagged and tested comparisons.

    flagged: some comparison flagged (BH-adjusted p below α); fair: every tested comparison's HDI
    inside the tolerance; too little data: nothing could be tested (one group, undefined rates),
    or every open question involves a group below ``min_group_size``; else undecided.
    """
    sizes = groups(frames)
    comp = comparisons(frames)
    uneven = completeness_by_attribute(frames)
    rows = []
    for attribute, part in sizes.groupby("attribute", sort=False):
        mine = comp[comp["attribute"] == attribute] if not comp.empty else comp
        tested = mine[mine["tested"]] if not mine.empty else mine
        flagged = int(tested["flagged"].sum()) if not tested.empty else 0
        if len(part) < 2:
            key, why = "little", "one group only: nothing to compare"
        elif tested.empty:
            key, why = "little", "no comparison could be tested" + _why_untested(mine)
        elif flagged:
            key, why = "flagged", f"{flagged} of {len(tested)} comparisons flagged"
        elif (tested["decision"] == "fair").all():
            key, why = "fair", f"all {len(tested)} intervals inside ±{points_plain(frames)}"
        else:
            open_ = tested[tested["decision"] != "fair"]
            if open_["small"].all():
                key, why = "little", "open comparisons all involve small groups"
            else:
                key, why = "undecided", f"{len(open_)} of {len(tested)} intervals cross the band"
        rows.append(
            {
                "attribute": attribute,
                "verdict": key,
                "why": why,
                "k": len(part),
                "smallest": int(part["n"].min()),
                "flagged": flagged,
                "tested": len(tested),
                "completeness_p": uneven.get(attribute, float("nan")),
            }
        )
    return pd.DataFrame(rows)


@per_frames
def completeness_by_attribute(frames: ReportFrames) -> dict[str, float]:
    """The run's own label-completeness decision (tasks.counts.label_completeness; who
    receives a label biases error rates): per attribute whose completeness differs between groups
    beyond chance and by a gap that matters, its p-value; attributes without such a difference
    are absent."""
    counts = frames.counts
    needed = {"tp", "fp", "fn", "tn", "unlabelled_pos", "unlabelled_neg"}
    if counts.empty or not needed <= set(counts.columns):
        return {}
    alpha = float(thresholds(frames)["alpha"])
    table = label_completeness(counts, alpha)
    uneven = table[table["uneven"]]
    return uneven.groupby("attribute")["p_value"].first().astype(float).to_dict()


def untested(frames: ReportFrames) -> pd.Series:
    """Comparisons detection did not test, counted by the kind of their reason (tasks.rates
    .reason_kind), most frequent first."""
    comp = comparisons(frames, deduplicate=False)
    if comp.empty:
        return pd.Series(dtype="int64")
    reasons = comp.loc[~comp["tested"], "undefined_reason"]
    return reasons.fillna("no reason stored").astype(str).map(reason_kind).value_counts()


def undefined_metrics(frames: ReportFrames) -> pd.Series:
    """The run's undefined raw group metric values counted by reason, most frequent first."""
    metrics = frames.metrics
    if metrics.empty:
        return pd.Series(dtype="int64")
    raw = metrics[(metrics["subset"] == "group") & (metrics["estimator"] == "raw")]
    return raw["undefined_reason"].dropna().astype(str).value_counts()


def _why_untested(rows: pd.DataFrame) -> str:
    """': groups below min_group_size' or similar, from the stored reasons (or nothing)."""
    if rows.empty:
        return ""
    reasons = rows["undefined_reason"].dropna().astype(str)
    if reasons.str.contains("min_group_size").any():
        return ": groups below min_group_size"
    return ": rates undefined" if len(reasons) else ""


def points_plain(frames: ReportFrames) -> str:
    return points(thresholds(frames)["tolerance"]).lstrip("+")


def tested_metrics(frames: ReportFrames) -> set[str]:
    """The metrics the run tested between groups (a base rate never is)."""
    if frames.detection.empty:
        return set()
    return set(frames.detection["metric"]) - set(BASE_RATES)


def rate_table(frames: ReportFrames) -> pd.DataFrame:
    """Every group's raw rate with interval and counts, and its comparisons with the named
    reference (``ref_*``) and with the rest (``rest_*``), one row per attribute, metric, group."""
    metrics = frames.metrics
    if metrics.empty:
        return pd.DataFrame()
    raw = metrics[(metrics["subset"] == "group") & (metrics["estimator"] == "raw")]
    raw = raw[raw["metric"].isin(tested_metrics(frames))]
    level = 1 - thresholds(frames)["alpha"]
    low, high = rate_interval(raw["numerator"], raw["denominator"], level)
    table = raw[["attribute", "group_name", "metric", "value", "numerator", "denominator"]].assign(
        low=low, high=high, reason=raw["undefined_reason"]
    )
    size = groups(frames)
    keep = ["attribute", "group_name", "n", "labelled", "completeness", "small", *CELLS]
    table = table.merge(size[keep], on=["attribute", "group_name"], how="left")
    comp = comparisons(frames, deduplicate=False)
    named = references(frames)
    fields = ["difference", "low", "high", "ratio", "four_fifths", "decision", "p_adjusted"]
    fields += ["flagged", "undefined_reason", "tested"]
    keys = ["attribute", "group_name", "metric"]
    for prefix, chosen in (
        ("ref", comp["reference"] != "rest"),
        ("rest", comp["reference"] == "rest"),
    ):
        if comp.empty:
            break
        part = comp[chosen][keys + fields].rename(columns={f: f"{prefix}_{f}" for f in fields})
        table = table.merge(part, on=keys, how="left")
    table["is_reference"] = [
        named.get(a) == g for a, g in zip(table["attribute"], table["group_name"])
    ]
    return table.sort_values(["attribute", "metric", "n"], ascending=[True, True, False])


# ---------------------------------------------------------------------------------------------
# SVG
# ---------------------------------------------------------------------------------------------


def nice_ticks(low: float, high: float, most: int = 7) -> np.ndarray:
    """Round ticks (steps 1, 2, 2.5 or 5 times a power of 10) from at or below ``low`` to at or
    above ``high``, at most ``most`` of them: labels that never crowd each other."""
    span = max(high - low, 1e-9)
    magnitude = 10 ** math.floor(math.log10(span / most))
    for step in (m * magnitude for m in (1, 2, 2.5, 5, 10, 20, 25, 50, 100)):
        first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
        if last - first + 1 <= most:
            return (np.arange(first, last + 1) * step).round(12)
    return np.array([low, high])


def tick_label(tick: float, ticks: np.ndarray) -> str:
    """A tick in signed percentage points with the fewest decimals that show every tick exactly."""
    values = 100 * np.asarray(ticks, dtype=float)
    decimals = next(d for d in range(4) if np.allclose(values, values.round(d), atol=1e-9))
    value = 100 * tick
    text = f"{abs(value):.{decimals}f}"
    return "0" if float(text) == 0 else ("+" if value > 0 else "−") + text


def _shorten(text: str, size: int) -> str:
    """``text`` as shown (schemas.names.printable) in at most ``size`` characters."""
    shown = printable(text)
    return shown if len(shown) <= size else shown[: size - 1] + "…"


def forest_plot(rows: pd.DataFrame, tolerance: float, title: str, minimum: int) -> str:
    """SVG forest plot: one line per group: difference (dot) and HDI (bar) against a reference,
    the tolerance band shaded; flagged red; groups below ``minimum`` hollow and marked; undefined
    differences listed with their reason instead of vanishing. With ``cs_low``/``cs_high``
    columns (the monitoring stage's anytime-valid confidence sequence), a thin purple bar under
    each HDI (clipped to the axis, which the HDIs set)."""
    if rows.empty:
        return ""
    rows = rows.assign(_order=rows["difference"].fillna(np.inf)).sort_values("_order")
    label_w, plot_w, value_w, line, top = 230, 250, 175, 20, 24
    height = top + line * len(rows) + 34
    defined = rows[rows["difference"].notna()]
    low = min([-tolerance, *defined["low"].dropna(), *defined["difference"]])
    high = max([tolerance, *defined["high"].dropna(), *defined["difference"]])
    pad = 0.05 * (high - low)
    ticks = nice_ticks(low - pad, high + pad, 6)
    low, high = ticks[0], ticks[-1]

    def x(value: float) -> float:
        return label_w + (min(max(value, low), high) - low) / (high - low) * plot_w

    parts = [
        (
            f'<rect x="{x(-tolerance):.1f}" y="{top - 6}" '
            f'width="{x(tolerance) - x(-tolerance):.1f}" height="{line * len(rows) + 4}" '
            'fill="#e8f5e9"/>'
        )
    ]
    axis_y = top + line * len(rows)
    for tick in ticks:
        parts.append(
            f'<line x1="{x(tick):.1f}" y1="{top - 6}" x2="{x(tick):.1f}" y2="{axis_y + 3}" '
            f'stroke="{"#666" if tick == 0 else "#e0e0e0"}"/>'
            f'<text x="{x(tick):.1f}" y="{axis_y + 15}" text-anchor="middle" font-size="11">'
            f"{esc(tick_label(tick, ticks))}</text>"
        )
    parts.append(
        f'<text x="{label_w + plot_w / 2}" y="{axis_y + 29}" text-anchor="middle" '
        f'font-size="11" fill="#555">difference, percentage points</text>'
    )
    for i, row in enumerate(_tuples(rows)):
        y = top + i * line + 4
        small = bool(row.small)
        name = _shorten(str(row.group_name), 22)
        label = f"{name} · n={count(row.size_group)}" + (" ⚠" if small else "")
        fill = "#8a4b00" if small else "#222"
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 4}" text-anchor="end" font-size="12" '
            f'fill="{fill}"><title>{esc(row.group_name)}</title>{esc(label)}</text>'
        )
        if _missing(row.difference):
            parts.append(
                f'<text x="{label_w + 6}" y="{y + 4}" font-size="12" fill="#8a4b00" '
                f'font-style="italic">undefined: {esc(row.undefined_reason)}</text>'
            )
            continue
        colour = "#b00020" if row.flagged else "#1f4e79"
        dot = f'fill="{colour}"' if not small else f'fill="#fff" stroke="{colour}" stroke-width="2"'
        parts.append(
            f'<line x1="{x(row.low):.1f}" y1="{y}" x2="{x(row.high):.1f}" y2="{y}" '
            f'stroke="{colour}" stroke-width="2"/>'
            f'<circle cx="{x(row.difference):.1f}" cy="{y}" r="4" {dot}/>'
            + _sequence_bar(row, x, y + 6)
            + f'<text x="{label_w + plot_w + 8}" y="{y + 4}" font-size="12" fill="{colour}">'
            f"{esc(points(row.difference))} [{esc(sig3(100 * row.low))}, "
            f"{esc(sig3(100 * row.high))}]</text>"
        )
    width = label_w + plot_w + value_w
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">'
        f'<text x="0" y="12" font-size="12" font-weight="600">{esc(_shorten(title, 90))}</text>'
        f"{''.join(parts)}</svg>"
    )
    return f"<figure>{svg}</figure>"


def _sequence_bar(row, x, y: float) -> str:
    low, high = getattr(row, "cs_low", None), getattr(row, "cs_high", None)
    if low is None or high is None or _missing(low) or _missing(high):
        return ""
    return (
        f"<g><title>anytime-valid confidence sequence [{sig3(100 * low)}, {sig3(100 * high)}] "
        f'pp</title><line x1="{x(low):.1f}" y1="{y}" x2="{x(high):.1f}" y2="{y}" '
        'stroke="#7b1fa2" stroke-width="1.5"/></g>'
    )


def sparkline(values: list[float], label: str) -> str:
    """A small SVG line of a series (oldest first) with its first and last points marked."""
    series = [v for v in values if not _missing(v)]
    if len(series) < 2:
        return ""
    # At least 5 percentage points tall: flat series stay flat instead of filling the box.
    middle = (max(series) + min(series)) / 2
    span = max(max(series) - min(series), 0.05)
    bottom = middle - span / 2
    xs = np.linspace(4, 116, len(values))
    pts = [(xs[i], 24 - (v - bottom) / span * 20) for i, v in enumerate(values) if not _missing(v)]
    line = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
    dots = "".join(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2" fill="#1f4e79"/>' for a, b in pts)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="120" height="28" role="img" '
        f'aria-label="{esc(label)}"><polyline fill="none" stroke="#1f4e79" stroke-width="1.5" '
        f'points="{line}"/>{dots}</svg>'
    )


# ---------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------


def _table(header: Iterable[str], rows: Iterable[Iterable[str]], left: int = 1) -> str:
    """A table from already-escaped cells; the first ``left`` columns are left-aligned."""
    head = "".join(f"<th{' class=l' if i < left else ''}>{h}</th>" for i, h in enumerate(header))
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=l' if i < left else ''}>{c}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


_PERCENT = re.compile(
    r"^(value|tau|difference|disparity|hdi_|cs_|completeness|rate|achieved_power)"
)
_COUNT = re.compile(r"^(n|n_.*|size_.*|needed.*|labelled|denominator_.*|numerator_.*|x_.*|k.*)$")
_P = re.compile(r"^(p_value|p_adjusted|percentile.*)$")


def _number_format(column: str) -> Callable[[float], str]:
    """How a column's numbers read: rates and differences as percentages, counts with
    separators, p-values to 2 digits, other numbers to 3 digits."""
    if _PERCENT.match(column) or column in CONTEXT:
        return percent
    if _COUNT.match(column):
        return count
    if _P.match(column):
        return p_text
    return lambda value: esc(sig3(value))


def _format(value, number: Callable[[float], str]) -> str:
    """A stored value for people: a number as its column's ``_number_format`` writes it,
    anything else as it is (``datum``)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, float | int | np.number):
        return datum(value)
    return number(float(value))


def _frame_table(frame: pd.DataFrame, columns: list[str] | None = None) -> str:
    """A frame as a table of escaped values formatted for people (``_number_format``)."""
    if frame is None or frame.empty:
        return '<p class="muted">none</p>'
    columns = [c for c in (columns or list(frame.columns)) if c in frame.columns]
    numbers = [_number_format(str(c)) for c in columns]
    rows = [
        [_format(v, f) for v, f in zip(record, numbers)]
        for record in _tuples(frame[columns], index=False)
    ]
    return _table([esc(c) for c in columns], rows, left=2)


def _badge(key: str) -> str:
    text, colour = VERDICTS[key]
    return f'<span class="badge" style="background:{colour}">{esc(text)}</span>'


def legend(metrics: Iterable[str]) -> list[str]:
    """'FPR: false positive rate, FP / (FP + TN)' for each metric, in catalogue order (plain
    text: callers escape it)."""
    chosen = set(metrics)
    return [f"{m.upper()}: {GLOSSARY[m][0]}, {GLOSSARY[m][1]}" for m in METRIC_IDS if m in chosen]


def metric_label(metric: str) -> str:
    """A metric's id in capitals with its name and formula beside it, muted (HTML)."""
    name, formula = GLOSSARY[metric]
    return f"{esc(metric.upper())} <span class=muted>— {esc(name)}, {esc(formula)}</span>"


def _metric_abbr(metric: str) -> str:
    """A metric's id in capitals, its name and formula on hover (HTML)."""
    name, formula = GLOSSARY[metric]
    return f'<abbr title="{esc(f"{name}, {formula}")}">{esc(metric.upper())}</abbr>'


def _run_line(frames: ReportFrames) -> str:
    run = frames.run
    as_of = run.get("as_of")
    as_of = as_of.strftime("%Y-%m-%d %H:%M") if isinstance(as_of, datetime) else esc(as_of)
    start = run.get("window_start")
    window = "all predictions" if start is None else f"from {start:%Y-%m-%d}"
    return (
        f'<p class="meta">model <b>{esc(run.get("model_id"))}</b>{esc(_model_version(run))} · '
        f"status {esc(run.get('status'))} · as of {esc(as_of)} "
        f"({esc(window)}) · {count(run.get('rows_valid'))} valid predictions, "
        f"{count(run.get('rows_quarantined'))} quarantined, {count(run.get('rows_unlabelled'))} "
        f"without label yet</p>"
    )


def _model_version(run: dict) -> str:
    """', model version 2.3' (the model's own version, not the run's), or nothing."""
    given = run.get("model_version")
    return "" if _missing(given) else f", model version {given}"


def _title(run: dict, escape: Callable[[Any], str] = str) -> str:
    """'Bias audit credit-race: run 2 (v1)', the data's parts through ``escape``."""
    label = run_label(run.get("id"), run.get("version"))
    return f"Bias audit {escape(run.get('audit_name'))}: {escape(label)}"


def _group_chips(part: pd.DataFrame, minimum: int) -> str:
    """Each group's size (and label completeness where groups differ), small groups marked; at
    most CHIPS of them (the largest, and up to half of them small ones), so that an attribute
    with many groups does not push the findings off the first screen."""
    uniform = part["completeness"].nunique(dropna=False) <= 1
    chips = []
    shown = part
    if len(part) > CHIPS:
        small = part[part["small"]].head(CHIPS // 2)
        shown = pd.concat([part[~part["small"]].head(CHIPS - len(small)), small])
    for row in _tuples(shown):
        done = "" if uniform else f" · {percent(row.completeness)} labelled"
        selected = getattr(row, "completeness_selected", np.nan)
        rejected = getattr(row, "completeness_rejected", np.nan)
        if not uniform and not _missing(selected):
            done += f" ({percent(selected)} of selected, {percent(rejected)} of rejected)"
        mark = f" ⚠ below {minimum}" if row.small else ""
        css = "chip small" if row.small else "chip"
        chips.append(
            f'<span class="{css}" title="{esc(row.group_name)}">'
            f"{esc(_shorten(str(row.group_name), 40))} "
            f"<b>{count(row.n)}</b>{esc(done)}{esc(mark)}</span>"
        )
    note = ""
    if len(part) > len(shown):
        hidden = part.drop(index=shown.index)
        note += (
            f' <span class="muted">and {len(hidden)} more groups of {count(hidden["n"].min())} '
            f"to {count(hidden['n'].max())} predictions ({int(hidden['small'].sum())} below "
            f"{minimum}; all in the details)</span>"
        )
    if uniform and len(part):
        note += f' <span class="muted">({percent(part["completeness"].iloc[0])} labelled)</span>'
    return "".join(chips) + note


def _completeness_warning(p: float, alpha: float) -> str:
    if _missing(p) or p >= alpha:
        return ""
    return (
        f'<br><span class="why">⚠ label completeness differs between groups (χ² p '
        f"{p_text(p)}): error rates may be biased by who receives a label</span>"
    )


def _finding_rows(comp: pd.DataFrame) -> list[list[str]]:
    rows = []
    for row in _tuples(comp):
        vs = "rest" if row.reference == "rest" else f"{row.reference}"
        rows.append(
            [
                datum(row.attribute),
                datum(row.group_name) + (' <span class="why">⚠ small</span>' if row.small else ""),
                datum(vs),
                _metric_abbr(row.metric),
                (
                    f"{percent(row.rate_group)} <span class=muted>({count(row.numerator_group)}/"
                    f"{count(row.denominator_group)})</span>"
                ),
                (
                    f"{percent(row.rate_reference)} <span class=muted>({count(row.numerator_reference)}/"
                    f"{count(row.denominator_reference)})</span>"
                ),
                (
                    f"<b>{esc(points(row.difference))}</b> [{esc(sig3(100 * row.low))}, "
                    f"{esc(sig3(100 * row.high))}]"
                ),
                esc(sig3(row.ratio)),
                esc(p_text(row.p_adjusted)),
            ]
        )
    return rows


FINDING_HEADER = [
    "attribute",
    "group",
    "compared with",
    "metric",
    "group rate",
    "reference rate",
    "difference [95% HDI, pp]",
    "ratio",
    "adjusted p",
]


def ranked_findings(frames: ReportFrames) -> pd.DataFrame:
    """Flagged comparisons, one per group and metric (against the named reference group when
    that comparison is flagged, else against the rest), ranked by the smallest size their
    interval allows (the HDI's end nearest 0; 0 when it spans 0), then by the observed
    difference: a large gap measured on 12 people ranks below a slightly smaller one measured
    on thousands."""
    comp = comparisons(frames)
    if comp.empty:
        return comp
    flagged = comp[comp["flagged"]]
    flagged = flagged.sort_values("reference", key=lambda r: r == "rest", kind="stable")
    flagged = flagged.drop_duplicates(["attribute", "group_name", "metric"])
    assured = np.where(
        np.sign(flagged["low"]) == np.sign(flagged["high"]),
        np.minimum(flagged["low"].abs(), flagged["high"].abs()),
        0.0,
    )
    order = np.lexsort((-flagged["difference"].abs().to_numpy(), -np.nan_to_num(assured)))
    return flagged.iloc[order]


def first_screen(frames: ReportFrames) -> str:
    """Verdict per attribute, ranked flagged comparisons, group sizes and label completeness."""
    limits = thresholds(frames)
    verdict = verdicts(frames)
    sizes = groups(frames)
    named = references(frames)
    rows = []
    for row in _tuples(verdict):
        part = sizes[sizes["attribute"] == row.attribute]
        ref = (
            f"<br><span class=muted>reference: {datum(named[row.attribute])}</span>"
            if (row.attribute in named)
            else ""
        )
        rows.append(
            [
                f"<b>{datum(row.attribute)}</b>{ref}",
                f"{_badge(row.verdict)} <span class=muted>{esc(row.why)}</span>",
                _group_chips(part, limits["min_group_size"])
                + _completeness_warning(row.completeness_p, limits["alpha"]),
            ]
        )
    findings = ranked_findings(frames)
    shown = findings.head(FIRST_SCREEN_ROWS)
    more = len(findings) - len(shown)
    level = round(100 * (1 - limits["alpha"]))
    header = [esc(h).replace("95%", f"{level}%") for h in FINDING_HEADER]
    flagged = (
        _table(header, _finding_rows(shown), left=4)
        if len(shown)
        else '<p class="fair">No comparison is flagged.</p>'
    )
    if more > 0:
        flagged += (
            f'<p class="muted">and {more} more flagged comparisons in the sections below.</p>'
        )
    if len(shown):
        flagged += f"<p class=meta>{esc(' · '.join(legend(shown['metric'])))}</p>"
    return (
        "<section id=first-screen>"
        + _table(["attribute", "verdict", "groups: predictions (labelled share)"], rows, left=3)
        + "<h2>Flagged comparisons, largest first</h2><p class=meta>"
        + f"Flagged: Benjamini-Hochberg adjusted p below α = {limits['alpha']:g} for a difference "
        f"beyond the tolerance ±{esc(points_plain(frames))}. One row per group and metric "
        "(against the reference group when that comparison is flagged), ranked by the smallest "
        "difference the interval allows (HDI: highest density interval). Rates are of the "
        "labelled predictions, counts in brackets.</p>" + flagged + '<hr class="fold"></section>'
    )


def _rate_rows(part: pd.DataFrame, has_ref: bool) -> list[list[str]]:
    rows = []
    for row in _tuples(part):
        name = datum(row.group_name)
        if row.is_reference:
            name += " <span class=muted>(reference)</span>"
        if row.small:
            name += ' <span class="why">⚠ small</span>'
        if _missing(row.value):
            rate = f'<span class="why">undefined: {datum(row.reason)}</span>'
        else:
            rate = (
                f"<b>{percent(row.value)}</b><br><span class=muted>[{percent(row.low)}, "
                f"{percent(row.high)}]</span>"
            )
        cells = [name, count(row.labelled), *(count(getattr(row, c)) for c in CELLS), rate]
        prefixes = ["ref", "rest"] if has_ref else ["rest"]
        for prefix in prefixes:
            cells += _comparison_cells(row, prefix)
        rows.append(cells)
    return rows


def _comparison_cells(row, prefix: str) -> list[str]:
    """Difference [HDI], ratio with the four-fifths rule, and the statistical verdict."""

    def get(name):
        return getattr(row, f"{prefix}_{name}", None)

    if prefix == "ref" and row.is_reference:
        return ["—", "1", '<span class="muted">(reference)</span>']
    difference = get("difference")
    if _missing(difference):
        why = get("undefined_reason")
        return ["–", "–", f'<span class="why">{datum(why or "not compared")}</span>']
    p = p_text(get("p_adjusted"))
    if not bool(get("tested")):
        why = get("undefined_reason")
        verdict = (
            f'<span class="why" title="{esc(why)}">not tested</span><br>'
            f"<span class=muted>{esc(_shorten(str(why or ''), 28))}</span>"
        )
    elif bool(get("flagged")):
        verdict = f'<span class="flag">flagged</span><br><span class=muted>p {p}</span>'
    else:
        verdict = f"{esc(get('decision'))}<br><span class=muted>p {p}</span>"
    rule = get("four_fifths")
    rule_css = "flag" if rule == "outside" else "muted"
    return [
        (
            f"{esc(points(difference))}<br><span class=muted>[{esc(sig3(100 * get('low')))}, "
            f"{esc(sig3(100 * get('high')))}]</span>"
        ),
        f'{esc(sig3(get("ratio")))}<br><span class="{rule_css}">{esc(rule)}</span>',
        verdict,
    ]


def attribute_sections(frames: ReportFrames) -> str:
    """Per attribute and rate metric (each open when it has a flagged comparison): the group
    table and the forest plots."""
    table = rate_table(frames)
    comp_all = _with_sequences(comparisons(frames, deduplicate=False), frames.monitor)
    comp = comparisons(frames)
    verdict = verdicts(frames).set_index("attribute") if not frames.counts.empty else None
    by_key = dict(list(comp_all.groupby(["attribute", "metric"]))) if not comp_all.empty else {}
    kept = dict(list(comp.groupby(["attribute", "metric"]))) if not comp.empty else {}
    named = references(frames)
    limits = thresholds(frames)
    level = round(100 * (1 - limits["alpha"]))
    out = [
        (
            "<h2>Group rates and disparities</h2><p class=meta>Each group's rate with its "
            f"{level}% Clopper-Pearson interval and counts; difference (percentage points, with "
            "the HDI) and ratio to the reference group and to the rest of the population; the "
            "four-fifths rule (ratio within 0.8-1.25) beside the statistical verdict. ⚠ marks "
            "groups below "
            f"min_group_size = {limits['min_group_size']}.</p>"
        )
    ]
    if verdict is None:
        return out[0] + '<p class="muted">no groups</p>'
    sizes = groups(frames)
    for attribute, row in verdict.iterrows():
        ref = named.get(attribute)
        body = [_context_table(sizes[sizes["attribute"] == attribute], 1 - limits["alpha"])]
        part = table[table["attribute"] == attribute] if not table.empty else table
        for metric, rows in part.groupby("metric", sort=True) if not part.empty else []:
            header = ["group", "labelled", "tp", "fp", "fn", "tn", f"rate<br>[{level}% interval]"]
            for name in ([ref] if ref else []) + ["rest"]:
                label = "vs rest:" if name == "rest" else clipped(f"vs ref. {name}:")
                header += [f"{label}<br>difference [HDI]", "ratio,<br>4/5 rule", "verdict"]
            mine = kept.get((attribute, metric))
            flagged = 0 if mine is None else int(mine["flagged"].sum())
            note = f'<span class="flag">{flagged} flagged</span>' if flagged else "none flagged"
            body.append(
                f"<details{' open' if flagged else ''}><summary class=metric>"
                f"{metric_label(metric)} <span class=muted>· </span>{note}</summary>"
                + _table(header, _rate_rows(rows, bool(ref)))
                + _plots(limits, by_key.get((attribute, metric)), mine, metric, ref, row["k"])
                + "</details>"
            )
        if row["k"] < 2:
            body.append('<p class="muted">One group only: nothing to compare.</p>')
        opened = " open" if row["verdict"] == "flagged" else ""
        out.append(
            f"<details{opened}><summary>{esc(attribute)} {_badge(row['verdict'])} "
            f"<span class=muted>{esc(row['why'])}</span></summary>{''.join(body)}</details>"
        )
    return "".join(out)


def _context_table(part: pd.DataFrame, level: float) -> str:
    """Each group's base rates (CONTEXT) with their Clopper-Pearson interval and counts: who is in
    the group, not how the model treats it, so never tested and never flagged."""
    if part.empty:
        return ""
    header = ["group", "labelled"]
    columns = []
    for metric in CONTEXT:
        name, formula = GLOSSARY[metric]
        header.append(f"{esc(name)} [{round(100 * level)}% interval]<br>{esc(formula)}")
        x, n = part[f"{metric}_numerator"], part[f"{metric}_denominator"]
        columns.append((part[metric], x, n, *rate_interval(x, n, level)))
    rows = []
    for i, (group, labelled) in enumerate(zip(part["group_name"], part["labelled"])):
        cells = [datum(group), count(labelled)]
        for value, x, n, low, high in columns:
            cells.append(
                f"<b>{percent(value.iloc[i])}</b> [{percent(low[i])}, {percent(high[i])}]"
                f"<br><span class=muted>{count(x.iloc[i])}/{count(n.iloc[i])}</span>"
            )
        rows.append(cells)
    return (
        "<details open><summary class=metric>Base rates <span class=muted>· context, not a "
        "model metric: who is in each group (a property of the population, whatever the model "
        "does), never tested, never flagged</span></summary>" + _table(header, rows) + "</details>"
    )


def _with_sequences(comp: pd.DataFrame, monitor: pd.DataFrame) -> pd.DataFrame:
    """Comparisons with the monitoring stage's confidence sequence (cs_low, cs_high), if any."""
    keys = ["attribute", "group_name", "reference", "metric"]
    if comp.empty or not {*keys, "cs_low", "cs_high"} <= set(monitor.columns):
        return comp
    return comp.merge(monitor[[*keys, "cs_low", "cs_high"]], on=keys, how="left")


def _plots(limits: dict, mine, kept, metric: str, ref: str | None, k: int) -> str:
    """Forest plots of one attribute and metric: against the named reference and the rest (a
    two-valued attribute: its one comparison)."""
    if mine is None or k < 2:
        return ""
    panels = []
    if ref:
        panels.append((mine[mine["reference"] == ref], f"{metric.upper()}: group − {ref}"))
    if not (ref and k == 2):
        rest = mine[mine["reference"] == "rest"]
        if k == 2 and kept is not None:  # one comparison, not two mirror images
            rest = rest[rest["group_name"].isin(kept["group_name"])]
        panels.append((rest, f"{metric.upper()}: group − rest of population"))
    figures = [
        forest_plot(rows, limits["tolerance"], title, limits["min_group_size"])
        for rows, title in panels
    ]
    return f"<div class=plots>{''.join(figures)}</div>"


def trend_section(frames: ReportFrames) -> str:
    """Per attribute (collapsed) and rate metric: each group's value at every run up to this
    one, ordered by as-of, with the dates, the values and a sparkline."""
    trend = frames.trend
    if trend.empty or trend["run_id"].nunique() < 2:
        return (
            "<h2>Trends</h2><p class=muted>Only this run so far (runs are ordered by as-of, up to "
            "the run shown): no trend yet.</p>"
        )
    runs = trend[["run_id", "as_of", "version"]].drop_duplicates().sort_values(["as_of", "run_id"])
    dates = [
        f"{pd.Timestamp(t):%Y-%m-%d}<br>v{esc(v)}" for t, v in zip(runs["as_of"], runs["version"])
    ]
    rated = tested_metrics(frames) if not frames.detection.empty else set(trend["metric"])
    # every (attribute, metric, group) row with its value at each run, in one reshape
    wide_all = (
        trend[trend["metric"].isin(rated)]
        .groupby(["attribute", "metric", "group_name", "run_id"], sort=True)["value"]
        .first()
        .unstack("run_id")
        .reindex(columns=runs["run_id"])
    )
    sections = []
    for attribute, mine in wide_all.groupby(level="attribute", sort=True):
        blocks = []
        for metric, wide in mine.groupby(level="metric", sort=True):
            rows = [
                [
                    datum(group),
                    *(percent(v) for v in values),
                    sparkline(values, f"{metric} {group}"),
                ]
                for group, values in zip(
                    wide.index.get_level_values("group_name"), wide.to_numpy().tolist()
                )
            ]
            blocks.append(
                f"<div><h3>{esc(attribute)} · {esc(metric.upper())}</h3>"
                + _table(["group", *dates, "trend"], rows)
                + "</div>"
            )
        sections.append(
            f"<details><summary>{esc(attribute)}</summary>"
            f"<div class=plots>{''.join(blocks)}</div></details>"
        )
    first, last = (pd.Timestamp(runs["as_of"].iloc[i]) for i in (0, -1))
    return (
        f"<h2>Trends over the last {len(runs)} runs</h2><p class=meta>Runs of this audit and "
        f"model ordered by as-of, {first:%Y-%m-%d} to {last:%Y-%m-%d}, up to the run shown; each "
        f"group's raw rate at each run.</p>{''.join(sections)}"
    )


MONITOR_COLUMNS = ["attribute", "group_name", "reference", "metric", "nights", "difference"]


def monitor_section(frames: ReportFrames) -> str:
    """The monitoring stage's anytime-valid confidence sequence and e-process per comparison
    (alarms first), when that stage has stored rows for the run."""
    monitor = frames.monitor
    if monitor.empty or not {"attribute", "group_name", "metric"} <= set(monitor.columns):
        return ""
    order = [c for c in ("alarm", "e_process") if c in monitor.columns]
    monitor = monitor.sort_values(order, ascending=False) if order else monitor
    header = [c for c in MONITOR_COLUMNS if c in monitor.columns]
    rows = []
    for record in monitor.to_dict(orient="records"):
        record["nights"] = int(record["nights"])  # stored as a real number
        cells = [datum(record[c]) if c != "difference" else points(record[c]) for c in header]
        if "cs_low" in record:
            cells.append(f"[{sig3(100 * record['cs_low'])}, {sig3(100 * record['cs_high'])}]")
        if "e_process" in record:
            cells.append(esc(sig3(record["e_process"])))
        if "alarm" in record:
            cells.append('<span class="flag">alarm</span>' if record["alarm"] else "–")
        rows.append(cells)
    extra = [
        name
        for name, column in (
            ("confidence sequence, pp", "cs_low"),
            ("e-process", "e_process"),
            ("alarm (e-BH)", "alarm"),
        )
        if column in monitor.columns
    ]
    return (
        "<h2>Anytime-valid monitoring</h2><p class=meta>Confidence sequences cover the "
        "difference at every run at once, and an alarm keeps its false-alarm guarantee however "
        "often the audit looks (purple bars in the forest plots).</p>"
        f"<details><summary>Every monitored comparison ({len(rows)})</summary>"
        + _table([*header, *extra], rows, left=4)
        + "</details>"
    )


def glossary_section(frames: ReportFrames) -> str:
    """Every metric of the run (and the base rates beside the groups) in words, with its formula
    and what the audit does with it."""
    used = {m for f in (frames.metrics, frames.two_group) if "metric" in f for m in f["metric"]}
    used |= set(CONTEXT) if not frames.counts.empty else set()
    rows = [
        [esc(m), esc(GLOSSARY[m][0]), esc(GLOSSARY[m][1]), esc(role(m))]
        for m in METRIC_IDS
        if m in used
    ]
    if not rows:
        return ""
    return (
        f"<h2>Metrics: names and formulas</h2><p class=meta>{esc(N_MEANS)}.</p>"
        f"<details open><summary>Every metric of this run ({len(rows)})</summary>"
        + _table(["metric", "name", "formula", "in this audit"], rows, left=4)
        + "</details>"
    )


def details_sections(frames: ReportFrames) -> str:
    """Planning, MATCH, meta-metrics, smoothing, changes, other metrics, run facts: collapsed."""
    parts = ["<h2>Details</h2>"]
    planning = frames.planning
    if not planning.empty:
        plan = planning.copy()
        have = plan["size_group"].fillna(0) + plan["size_reference"].fillna(0)
        plan["data"] = [needs_more(n, a) for n, a in zip(plan["needed"], have)]
        cols = ["attribute", "group_name", "reference", "metric", "value_group"]
        cols += ["value_reference", "tau", "size_group"]
        cols += ["size_reference", "level", "achieved_power", "data", "reason"]
        parts.append(
            _details("Planning: predictions needed for the disparity to detect", plan, cols)
        )
    if not frames.match.empty:
        match = frames.match.sort_values("p_value")
        parts.append(_details("MATCH test", match))
    parts.append(_details("Meta-metrics across groups", frames.meta))
    metrics = frames.metrics
    if not metrics.empty:
        grouped = metrics[metrics["subset"] == "group"]
        smooth = grouped.pivot_table(
            index=["attribute", "group_name", "metric"],
            columns="estimator",
            values="value",
            aggfunc="first",
        ).reset_index()
        parts.append(_details("Smoothing: raw and smoothed estimates", smooth))
        rated = tested_metrics(frames)
        other = grouped[(grouped["estimator"] == "raw") & ~grouped["metric"].isin(rated)]
        cols = ["attribute", "group_name", "metric", "value", "undefined_reason"]
        parts.append(_details("Other metrics (no interval)", other, cols))
    sizes = groups(frames)
    cols = ["attribute", "group_name", "n", "labelled", "completeness", *CONTEXT]
    cols += ["completeness_selected", "completeness_rejected", "small"]
    parts.append(_details("Groups: predictions, label completeness, base rates", sizes, cols))
    parts.append(_details("Changes since the previous run", frames.comparison))
    parts.append(_details("Two-group metrics", frames.two_group))
    run = {k: v for k, v in frames.run.items() if k not in ("config", "summary")}
    facts = pd.DataFrame({"field": list(run), "value": [str(v) for v in run.values()]})
    parts.append(_details("Run facts", facts))
    return "".join(parts)


def _details(title: str, frame: pd.DataFrame, columns: list[str] | None = None) -> str:
    size = 0 if frame is None else len(frame)
    return (
        f"<details><summary>{esc(title)} <span class=muted>({size} rows)</span></summary>"
        f"{_frame_table(frame, columns)}</details>"
    )


def _lines(text: str) -> str:
    """Text of several lines (an error message) escaped line by line, the lines kept."""
    return "<br>".join(esc(line) for line in str(text).split("\n"))


def render_html(frames: ReportFrames) -> str:
    """The self-contained HTML report of one stored run."""
    run = frames.run
    title = _title(run)
    body = (
        f"<h1>{esc(title)}</h1>{_run_line(frames)}"
        + (f'<p class="flag">error: {_lines(run["error"])}</p>' if run.get("error") else "")
        + first_screen(frames)
        + attribute_sections(frames)
        + trend_section(frames)
        + monitor_section(frames)
        + glossary_section(frames)
        + details_sections(frames)
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f"<style>{STYLE}</style></head><body>{body}</body></html>\n"
    )


# ---------------------------------------------------------------------------------------------
# Markdown and table artifact
# ---------------------------------------------------------------------------------------------

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>:@])")


def md(value) -> str:
    """A data value safe in a markdown table cell: control and bidirectional formatting
    characters, line breaks among them, as visible escapes (schemas.names.printable), HTML
    escaped (no tags, no entities), markdown punctuation backslash-escaped (no links, emphasis or
    column breaks; ``:``, ``.`` and ``@`` too, so no bare URL, www. or e-mail autolink forms)."""
    text = "" if _missing(value) else printable(str(value))
    text = html.escape(text, quote=True)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def _md_groups(part: pd.DataFrame) -> str:
    """Each group's size, its label completeness when groups differ in it, small ones marked."""
    uniform = part["completeness"].nunique(dropna=False) <= 1
    cells = zip(part["group_name"], part["n"], part["completeness"], part["small"])
    text = "; ".join(
        f"{md(g)} {count(n)}"
        + ("" if uniform else f" ({percent(c)} labelled)")
        + (" (small)" if small else "")
        for g, n, c, small in cells
    )
    if uniform and len(part):
        text += f"; {percent(part['completeness'].iloc[0])} labelled"
    return text


def _md_completeness(p: float, alpha: float) -> str:
    if _missing(p) or p >= alpha:
        return ""
    return f"; label completeness differs between groups (χ² p {md(p_text(p))})"


def render_markdown(frames: ReportFrames, report_path: str | None = None) -> str:
    """The first screen as markdown (Prefect artifact): verdicts, groups and ranked flagged
    comparisons. Values from the data go through ``md``; numbers are formatted here."""
    run = frames.run
    verdict = verdicts(frames)
    sizes = groups(frames)
    alpha = thresholds(frames)["alpha"]
    as_of = run.get("as_of")
    as_of = f"{as_of:%Y-%m-%d %H:%M}" if isinstance(as_of, datetime) else md(as_of)
    lines = [
        f"# {_title(run, md)}",
        "",
        (
            f"model {md(run.get('model_id'))}{md(_model_version(run))}, as of {as_of}, "
            f"{count(run.get('rows_valid'))} valid predictions"
        ),
        "",
        "| attribute | verdict | why | groups (predictions) |",
        "|---|---|---|---|",
    ]
    for row in _tuples(verdict):
        part = sizes[sizes["attribute"] == row.attribute]
        lines.append(
            f"| {md(row.attribute)} | **{VERDICTS[row.verdict][0]}** | {md(row.why)} | "
            f"{_md_groups(part)}{_md_completeness(row.completeness_p, alpha)} |"
        )
    findings = ranked_findings(frames)
    lines += ["", f"## Flagged comparisons ({len(findings)}), largest first", ""]
    if findings.empty:
        lines.append("No comparison is flagged.")
    else:
        lines += [
            (
                "| attribute | group | compared with | metric | group rate | reference rate "
                "| difference \\[HDI\\] | ratio | adjusted p |"
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
        "rate_group": "group_rate",
        "rate_reference": "reference_rate",
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
