"""Values as people read them: escaped data (control and bidirectional characters as visible
escapes, wrapped or clipped in tables), percentages, percentage points, p-values, counts, and
markdown escaping."""

from __future__ import annotations

import functools
import html
import itertools
import math
import re
from collections import namedtuple
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import numpy as np
import pandas as pd

from biasaudit.schemas.metric_ids import (
    GLOSSARY,
    METRIC_IDS,
)
from biasaudit.schemas.names import printable
from biasaudit.schemas.report import run_label


def _values(series: pd.Series) -> list[Any]:
    """A column's values as iterating it gives them, read at once: a numpy column's as Python
    scalars (but timestamps), a text column's as its strings and its missing value."""
    dtype = series.dtype
    plain = isinstance(dtype, np.dtype) and dtype.kind not in "mM"
    return (
        series.to_numpy().tolist() if plain or isinstance(dtype, pd.StringDtype) else list(series)
    )


@functools.lru_cache(maxsize=256)
def _row_type(fields: tuple[Any, ...]) -> Any:
    """The named tuple of rows with these fields (made once: building the class is most of what
    iterating a small frame costs)."""
    return cast(Any, namedtuple)("Row", fields, rename=True)  # fields known at run time only


def _tuples(frame: pd.DataFrame, index: bool = True) -> Iterator[Any]:
    """The rows of ``frame.itertuples(index=index)``, the same values, read a column at a time:
    itertuples selects every column through ``iloc`` on each call, most of the report's time."""
    fields = (["Index"] if index else []) + list(frame.columns)
    columns = [list(frame.index)] if index else []
    for _, series in frame.items():  # noqa: PERF102 (DataFrame.values is not the columns)
        columns.append(_values(series))
    row = _row_type(tuple(fields))
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


def credibility(mass: float) -> str:
    """An interval's mass as a percentage whose shortfall from 100% keeps 2 digits:
    0.95 -> '95%', 0.995 -> '99.5%', 0.99956 -> '99.956%'."""
    shortfall = 100 * (1 - mass)
    decimals = max(0, 1 - math.floor(math.log10(shortfall))) if shortfall > 0 else 0
    text = f"{100 * mass:.{decimals}f}"
    return (text.rstrip("0").rstrip(".") if "." in text else text) + "%"


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


# The same formats for a whole column at once (a report's detail tables hold tens of thousands of
# numbers): each value's case is decided by array comparisons, and each value is then written by
# one ``format`` call, as the function of one value above writes it, character for character.

_FIXED = [f".{d}f" for d in range(7)]  # sig3's decimals: 0 to 6 (values from 1e-4 to 1000)


def _exponents(magnitudes: np.ndarray) -> np.ndarray:
    """``math.floor(math.log10(m))`` of each magnitude: numpy's log10, and Python's own where a
    value lies so near a power of ten that the two might round to different sides of it."""
    logs = np.log10(magnitudes)
    exponents = np.floor(logs)
    near = np.abs(logs - np.round(logs)) < 1e-9
    exponents[near] = [math.floor(math.log10(m)) for m in magnitudes[near].tolist()]
    return exponents.astype(np.int64)


def sig3_cells(values: np.ndarray) -> np.ndarray:
    """``sig3`` of every value of a float array (an object array of strings)."""
    values = np.asarray(values, dtype=float)
    out = np.full(values.shape, "–", dtype=object)
    magnitude = np.abs(values)
    out[values == 0] = "0"
    large = magnitude >= 1000  # infinities too, as sig3 has them
    middle = (magnitude >= 1e-4) & ~large
    small = ~np.isnan(values) & (values != 0) & (magnitude < 1e-4)
    decimals = np.maximum(0, 2 - _exponents(magnitude[middle]))
    for mask, texts in (
        (large, [format(v, ",.0f") for v in values[large].tolist()]),
        (
            middle,
            [format(v, _FIXED[d]) for v, d in zip(values[middle].tolist(), decimals.tolist())],
        ),
        (small, [format(v, ".2g") for v in values[small].tolist()]),
    ):
        out[mask] = [t.replace("-", "−") for t in texts]
    return out


def percent_cells(values: np.ndarray) -> np.ndarray:
    """``percent`` of every value of a float array."""
    values = np.asarray(values, dtype=float)
    with np.errstate(over="ignore"):  # beyond 1.8e306 the percentage is infinite, as in percent
        hundred = 100 * values
    out = np.array([t + "%" for t in sig3_cells(hundred).tolist()], dtype=object)
    out[np.isnan(values)] = "–"
    out[(values != 0) & (np.abs(values) < 1e-4)] = "<0.01%"
    return out


def count_cells(values: np.ndarray) -> np.ndarray:
    """``count`` of every value of a float array."""
    values = np.asarray(values, dtype=float)
    out = np.full(values.shape, "–", dtype=object)
    magnitude = np.abs(values)
    billions, millions = magnitude >= 1e9, (magnitude >= 1e6) & (magnitude < 1e9)
    plain = ~np.isnan(values) & (magnitude < 1e6)
    out[plain] = [format(v, ",.0f") for v in values[plain].tolist()]
    for mask, size, word in ((billions, 1e9, " billion"), (millions, 1e6, " million")):
        out[mask] = [t + word for t in sig3_cells(values[mask] / size).tolist()]
    return out


def p_text_cells(values: np.ndarray) -> np.ndarray:
    """``p_text`` of every value of a float array."""
    values = np.asarray(values, dtype=float)
    out = np.full(values.shape, "–", dtype=object)
    low = values < 0.001
    out[low] = "<0.001"
    shown = ~np.isnan(values) & ~low
    out[shown] = [format(v, ".2g") for v in values[shown].tolist()]
    return out


def needs_more(needed: float, available: float) -> str:
    """'enough data' or 'needs 2,400 more predictions' (rounded up to 2 significant digits)."""
    if _missing(needed) or not math.isfinite(needed):
        return "no disparity to size for" if _missing(needed) else "cannot be detected"
    more = needed - available
    if more <= 0:
        return "enough data"
    scale = 10 ** max(0, math.floor(math.log10(more)) - 1)
    return f"needs {count(math.ceil(more / scale) * scale)} more predictions"


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


def _model_version(run: dict) -> str:
    """', model version 2.3' (the model's own version, not the run's), or nothing."""
    given = run.get("model_version")
    return "" if _missing(given) else f", model version {given}"


def _title(run: dict, escape: Callable[[Any], str] = str) -> str:
    """'Bias audit credit-race: run 2 (v1)', the data's parts through ``escape``."""
    label = run_label(run.get("id"), run.get("version"))
    return f"Bias audit {escape(run.get('audit_name'))}: {escape(label)}"


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>:@])")


def md(value) -> str:
    """A data value safe in a markdown table cell: control and bidirectional formatting
    characters, line breaks among them, as visible escapes (schemas.names.printable), HTML
    escaped (no tags, no entities), markdown punctuation backslash-escaped (no links, emphasis or
    column breaks; ``:``, ``.`` and ``@`` too, so no bare URL, www. or e-mail autolink forms)."""
    text = "" if _missing(value) else printable(str(value))
    text = html.escape(text, quote=True)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


IMPOSSIBILITY = (
    "these definitions cannot all hold when base rates differ (Chouldechova 2017; Kleinberg, "
    "Mullainathan and Raghavan 2016)"
)


def _rates_clause(kind: str, row: Any, tolerance: str) -> str:
    """'equal error rates (FPR, FNR) do not hold (2 of 6 comparisons flagged)' and the like, from
    one attribute's row of tasks.report.derive.definitions (``kind``: 'error' or 'selection')."""
    name = "equal error rates" if kind == "error" else "equal selection rates"
    state, tested = getattr(row, kind), getattr(row, f"{kind}_tested")
    if state == "untested":
        return f"{name} were not tested"
    name += f" ({', '.join(m.upper() for m in getattr(row, f'{kind}_metrics'))})"
    if state == "fails":
        flagged = getattr(row, f"{kind}_flagged")
        return f"{name} do not hold ({flagged} of {tested} comparisons flagged)"
    if state == "holds":
        return f"{name} hold within ±{tolerance} (all {tested} intervals inside)"
    crossing = getattr(row, f"{kind}_open")
    return f"{name} are undecided ({crossing} of {tested} intervals cross ±{tolerance})"


def definitions_sentence(row: Any, alpha: float, tolerance: str) -> str:
    """One plain sentence (no markup: callers escape it) saying which definitions of fairness
    hold for one attribute, worded from its row of tasks.report.derive.definitions: calibration
    within groups (a probability) or equal calibration across groups (another score), equal
    error rates, equal selection rates, the impossibility of all three where base rates differ,
    and the base rates' range."""
    tested, rejected = row.calibration_tested, row.calibration_rejected
    if row.calibration_own:  # each group's outcomes against its own scores
        if row.calibration == "untested":
            calibration = "calibration within groups was not tested"
        elif row.calibration == "fails":
            calibration = (
                f"calibration within groups does not hold ({rejected} of {tested} groups' "
                f"outcomes depart from their scores at α = {alpha:g})"
            )
        else:
            calibration = (
                f"calibration within groups holds as far as the data tell (no group's outcomes "
                f"depart from its scores at α = {alpha:g}, {tested} tested)"
            )
    elif row.calibration == "untested":
        calibration = "equal calibration across groups was not tested"
    elif row.calibration == "fails":
        calibration = (
            f"equal calibration across groups does not hold ({rejected} of {tested} calibration "
            f"tests reject it at α = {alpha:g})"
        )
    else:
        calibration = (
            f"equal calibration across groups holds as far as the data tell (none of {tested} "
            f"calibration tests rejects it at α = {alpha:g})"
        )
    rates = [_rates_clause(kind, row, tolerance) for kind in ("error", "selection")]
    sentence = f"By {row.attribute}: {calibration}, {rates[0]} and {rates[1]}; {IMPOSSIBILITY}"
    low: float = getattr(row, "base_low", math.nan)  # absent where no two groups have one
    if _missing(low):
        return sentence + "."
    if low == row.base_high:
        return f"{sentence}, and here every group's is {percent(low)}."
    return (
        f"{sentence}, and here they run from {percent(low)} ({row.base_low_group}) to "
        f"{percent(row.base_high)} ({row.base_high_group})."
    )
