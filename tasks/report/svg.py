"""Inline SVG: forest plots of differences with their intervals and the tolerance band, and trend
sparklines."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from biasaudit.schemas.names import printable
from biasaudit.tasks.report.text import _missing, _tuples, count, esc, points, sig3


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
