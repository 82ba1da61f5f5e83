"""Inline SVG: forest plots of differences with their intervals and the tolerance band, trend
sparklines, and a score's reliability and ROC curves per group."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from biasaudit.schemas.names import printable
from biasaudit.tasks.report.text import _missing, _tuples, count, esc, percent, points, sig3


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


def tick_label(
    tick: float, ticks: np.ndarray, scale: float = 100, signed: bool = True, unit: str = ""
) -> str:
    """A tick times ``scale`` (signed percentage points by default; ``unit`` after it) with the
    fewest decimals that show every tick exactly."""
    values = scale * np.asarray(ticks, dtype=float)
    decimals = next(d for d in range(4) if np.allclose(values, values.round(d), atol=1e-9))
    value = scale * tick
    text = f"{abs(value):.{decimals}f}"
    if float(text) == 0:
        return "0" + unit
    return ("+" if value > 0 and signed else "−" if value < 0 else "") + text + unit


def _shorten(text: str, size: int) -> str:
    """``text`` as shown (schemas.names.printable) in at most ``size`` characters."""
    shown = printable(text)
    return shown if len(shown) <= size else shown[: size - 1] + "…"


# The columns of a forest plot's line (the sequence's only where the monitor stored one).
FOREST_COLUMNS = [
    "group_name",
    "small",
    "size_group",
    "difference",
    "undefined_reason",
    "flagged",
    "low",
    "high",
    "cs_low",
    "cs_high",
]


def forest_plot(rows: pd.DataFrame, tolerance: float, title: str, minimum: int) -> str:
    """SVG forest plot: one line per group: difference (dot) and HDI (bar) against a reference,
    the tolerance band shaded; flagged red; groups below ``minimum`` hollow and marked; undefined
    differences listed with their reason instead of vanishing. With ``cs_low``/``cs_high``
    columns (the monitoring stage's anytime-valid confidence sequence), a thin purple bar under
    each HDI (clipped to the axis, which the HDIs set)."""
    if rows.empty:
        return ""
    rows = rows[[c for c in FOREST_COLUMNS if c in rows.columns]]  # what a line reads
    rows = rows.assign(_order=rows["difference"].fillna(np.inf)).sort_values("_order")
    label_w, plot_w, value_w, line, top = 230, 250, 175, 20, 24
    height = top + line * len(rows) + 34
    defined = rows[rows["difference"].notna()]
    differences = defined["difference"].tolist()
    low = min([-tolerance, *defined["low"].dropna().tolist(), *differences])
    high = max([tolerance, *defined["high"].dropna().tolist(), *differences])
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
    parts.extend(
        f'<line x1="{x(tick):.1f}" y1="{top - 6}" x2="{x(tick):.1f}" y2="{axis_y + 3}" '
        f'stroke="{"#666" if tick == 0 else "#e0e0e0"}"/>'
        f'<text x="{x(tick):.1f}" y="{axis_y + 15}" text-anchor="middle" font-size="11">'
        f"{esc(tick_label(tick, ticks))}</text>"
        for tick in ticks
    )
    parts.append(
        f'<text x="{label_w + plot_w / 2}" y="{axis_y + 29}" text-anchor="middle" '
        f'font-size="11" fill="#555">difference, percentage points</text>'
    )
    for i, row in enumerate(_tuples(rows.drop(columns="_order"))):
        y = top + i * line + 4
        small = bool(row.small)
        name = _shorten(str(row.group_name), 22)
        label = f"{name} · {count(row.size_group)} rows" + (" ⚠" if small else "")
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


@functools.lru_cache(maxsize=64)
def _spark_xs(points: int) -> list[float]:
    """A sparkline's x positions for a series of ``points`` runs (one row of a trend table after
    another has the same number)."""
    return np.linspace(4, 116, points).tolist()


def sparkline(values: list[float], label: str) -> str:
    """A small SVG line of a series (oldest first) with its first and last points marked."""
    series = [v for v in values if not _missing(v)]
    if len(series) < 2:
        return ""
    # At least 5 percentage points tall: flat series stay flat instead of filling the box.
    middle = (max(series) + min(series)) / 2
    span = max(max(series) - min(series), 0.05)
    bottom = middle - span / 2
    xs = _spark_xs(len(values))
    pts = [(xs[i], 24 - (v - bottom) / span * 20) for i, v in enumerate(values) if not _missing(v)]
    line = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
    dots = "".join(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2" fill="#1f4e79"/>' for a, b in pts)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="120" height="28" role="img" '
        f'aria-label="{esc(label)}"><polyline fill="none" stroke="#1f4e79" stroke-width="1.5" '
        f'points="{line}"/>{dots}</svg>'
    )


# Okabe and Ito's colours, distinct for colour-blind readers; groups beyond them are dashed.
PALETTE = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442"]
SIDE, MARGIN, LEGEND_W = 210, 44, 215  # plot square, left margin for labels, legend width


def _xy_axes(
    x_range: tuple[float, float], x_title: str, y_title: str, x_percent: bool
) -> tuple[list[str], Callable[[float], float], Callable[[float], float]]:
    """The axes of a square plot: y a rate from 0 to 100%, x ``x_range`` (a rate too when
    ``x_percent``) with round ticks and grid lines; the SVG parts and the maps to pixels."""
    top = 22
    x_ticks = nice_ticks(*x_range, 6)
    y_ticks = nice_ticks(0.0, 1.0, 6)

    def x(value: float) -> float:
        low, high = x_ticks[0], x_ticks[-1]
        return MARGIN + (min(max(value, low), high) - low) / (high - low) * SIDE

    def y(value: float) -> float:
        return top + (1 - min(max(value, 0.0), 1.0)) * SIDE

    x_scale, x_unit = (100, "%") if x_percent else (1, "")
    parts = [
        f'<line x1="{x(tick):.1f}" y1="{top}" x2="{x(tick):.1f}" y2="{top + SIDE + 3}" '
        f'stroke="#e0e0e0"/><text x="{x(tick):.1f}" y="{top + SIDE + 15}" '
        f'text-anchor="middle" font-size="11">'
        f"{esc(tick_label(tick, x_ticks, x_scale, False, x_unit))}</text>"
        for tick in x_ticks
    ]
    parts.extend(
        f'<line x1="{MARGIN - 3}" y1="{y(tick):.1f}" x2="{MARGIN + SIDE}" y2="{y(tick):.1f}" '
        f'stroke="#e0e0e0"/><text x="{MARGIN - 5}" y="{y(tick) + 4:.1f}" text-anchor="end" '
        f'font-size="11">{esc(tick_label(tick, y_ticks, 100, False, "%"))}</text>'
        for tick in y_ticks
    )
    parts.append(
        f'<text x="{MARGIN + SIDE / 2}" y="{top + SIDE + 29}" text-anchor="middle" '
        f'font-size="11" fill="#555">{esc(x_title)}</text>'
        f'<text x="0" y="0" transform="translate(11 {top + SIDE / 2}) rotate(-90)" '
        f'text-anchor="middle" font-size="11" fill="#555">{esc(y_title)}</text>'
    )
    return parts, x, y


def _curve_svg(title: str, parts: list[str], legend: list[tuple[str, str, str]]) -> str:
    """A figure of the curves' ``parts`` with ``title`` and a legend of (text, tooltip, colour
    and dash) per group, one line each."""
    height = max(22 + SIDE + 36, 30 + 14 * len(legend))
    width = MARGIN + SIDE + 12 + LEGEND_W
    for i, (text, tooltip, style) in enumerate(legend):
        y = 30 + 14 * i
        left = MARGIN + SIDE + 12
        parts.append(
            f'<line x1="{left}" y1="{y - 4}" x2="{left + 14}" y2="{y - 4}" {style} '
            f'stroke-width="2"/><text x="{left + 18}" y="{y}" font-size="11">'
            f"<title>{esc(tooltip)}</title>{esc(text)}</text>"
        )
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">'
        f'<text x="0" y="12" font-size="12" font-weight="600">{esc(_shorten(title, 60))}</text>'
        f"{''.join(parts)}</svg>"
    )
    return f"<figure>{svg}</figure>"


def _style(i: int, small: bool) -> str:
    """The stroke of the i-th group's curve: its colour, dashed after the palette's first round,
    faint for a group below min_group_size (as the forest plots draw it hollow)."""
    dash = ' stroke-dasharray="4 2"' if i >= len(PALETTE) else ""
    faint = ' stroke-opacity="0.45"' if small else ""
    return f'stroke="{PALETTE[i % len(PALETTE)]}"{dash}{faint}'


def reliability_plot(
    curves: pd.DataFrame, title: str, probability: bool, order: list, small: frozenset
) -> str:
    """SVG reliability curves (tasks.report.derive.reliability): per group the observed outcome
    rate against the mean score of each score bin, with its exact interval as a vertical bar
    (the groups' bars side by side, 3 px apart); the diagonal (a calibrated probability) where
    the score is one. A group's colour is that of its place in ``order`` (the same in every
    plot of the attribute); groups in ``small`` are faint and marked ⚠."""
    if curves.empty:
        return ""
    x_range = (
        (0.0, 1.0)
        if probability
        else (float(curves["mean_score"].min()), float(curves["mean_score"].max()))
    )
    parts, x, y = _xy_axes(x_range, "mean score in the bin", "observed outcome rate", probability)
    if probability:
        parts.append(
            f'<line x1="{x(0):.1f}" y1="{y(0):.1f}" x2="{x(1):.1f}" y2="{y(1):.1f}" '
            'stroke="#999" stroke-dasharray="3 3"/>'
        )
    legend = []
    for name, part in curves.groupby("group_name", sort=False):
        i = order.index(name)
        style, dodge = _style(i, name in small), 3 * (i - (len(order) - 1) / 2)
        dot = f'fill="#fff" {style}' if name in small else f'fill="{PALETTE[i % len(PALETTE)]}"'
        line = " ".join(
            f"{x(s) + dodge:.1f},{y(r):.1f}"
            for s, r in zip(part["mean_score"], part["observed_rate"])
        )
        marks = []
        for row in _tuples(part):
            cx = x(row.mean_score) + dodge
            tip = (
                f"{name}, score bin {sig3(row.score_bin)} (mean score {sig3(row.mean_score)}): "
                f"{percent(row.observed_rate)} [{percent(row.rate_low)}, "
                f"{percent(row.rate_high)}] of {count(row.labelled)}"
            )
            marks.append(
                f'<g><title>{esc(tip)}</title><line x1="{cx:.1f}" y1="{y(row.rate_low):.1f}" '
                f'x2="{cx:.1f}" y2="{y(row.rate_high):.1f}" {style} stroke-width="0.8"/>'
                f'<circle cx="{cx:.1f}" cy="{y(row.observed_rate):.1f}" r="2.5" {dot}/></g>'
            )
        parts.append(
            f'<polyline fill="none" {style} stroke-width="1.5" points="{line}"/>{"".join(marks)}'
        )
        labelled = int(part["labelled"].sum())
        mark = " ⚠" if name in small else ""
        legend.append((f"{_shorten(str(name), 24)} · {count(labelled)}{mark}", str(name), style))
    return _curve_svg(title, parts, legend)


def roc_plot(
    points_: pd.DataFrame, aucs: pd.DataFrame, title: str, order: list, small: frozenset
) -> str:
    """SVG ROC curves (tasks.report.derive.roc_points): per group its TPR against its FPR at each
    threshold, joined by straight lines (the ties' expected ROC, whose area is the AUC with ties
    counted 1/2), the diagonal of chance; the legend gives each group's AUC and its interval.
    Colours and marks as in :func:`reliability_plot`."""
    if points_.empty:
        return ""
    parts, x, y = _xy_axes((0.0, 1.0), "false positive rate", "true positive rate", True)
    parts.append(
        f'<line x1="{x(0):.1f}" y1="{y(0):.1f}" x2="{x(1):.1f}" y2="{y(1):.1f}" stroke="#999" '
        'stroke-dasharray="3 3"/>'
    )
    auc = aucs.set_index("group_name") if len(aucs) else aucs
    legend = []
    for name, part in points_.groupby("group_name", sort=False):
        style = _style(order.index(name), name in small)
        line = " ".join(f"{x(f):.1f},{y(t):.1f}" for f, t in zip(part["fpr"], part["tpr"]))
        parts.append(f'<polyline fill="none" {style} stroke-width="1.5" points="{line}"/>')
        text = _shorten(str(name), 24)
        tooltip = str(name)
        if len(auc) and name in auc.index:
            mine = auc.loc[name]
            text += f" · {sig3(mine['auc'])}"
            tooltip += (
                f": AUC {sig3(mine['auc'])} [{sig3(mine['auc_low'])}, {sig3(mine['auc_high'])}]"
            )
        legend.append((text + (" ⚠" if name in small else ""), tooltip, style))
    return _curve_svg(title, parts, legend)
