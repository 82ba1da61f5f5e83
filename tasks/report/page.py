"""The self-contained HTML report of one stored run (inline CSS and SVG, no scripts)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime

import numpy as np
import pandas as pd

from biasaudit.schemas.frames import COUNT_COLUMNS
from biasaudit.schemas.metric_ids import (
    GLOSSARY,
    METRIC_IDS,
    N_MEANS,
    role,
)
from biasaudit.schemas.report import ReportFrames
from biasaudit.tasks.counts import LABEL_BIAS
from biasaudit.tasks.report.derive import (
    CONTEXT,
    ERROR_RATES,
    FIRST_SCREEN_ROWS,
    VERDICTS,
    _with_sequences,
    comparisons,
    definitions,
    groups,
    hdi_mass,
    points_plain,
    probability_score,
    ranked_findings,
    rate_table,
    references,
    reliability,
    roc_points,
    score_attributes,
    score_groups,
    tested_metrics,
    threshold_warning,
    thresholds,
    verdicts,
)
from biasaudit.tasks.report.svg import (
    _shorten,
    forest_plot,
    reliability_plot,
    roc_plot,
    sparkline,
)
from biasaudit.tasks.report.text import (
    _metric_abbr,
    _missing,
    _model_version,
    _title,
    _tuples,
    _values,
    clipped,
    count,
    count_cells,
    credibility,
    datum,
    definitions_sentence,
    esc,
    legend,
    metric_label,
    needs_more,
    p_text,
    p_text_cells,
    percent,
    percent_cells,
    points,
    sig3,
    sig3_cells,
)
from biasaudit.tasks.scores import clopper_pearson

CHIPS = 16  # groups shown per attribute on the first screen


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


_COUNT = re.compile(r"^(predictions_.*|size_.*|needed.*|labelled|denominator_.*|numerator_.*|k.*)$")


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


# Each scalar number format and the same format for a whole column (tasks.report.text).
_CELLS: dict[Callable[[float], str], Callable[[np.ndarray], np.ndarray]] = {
    percent: percent_cells,
    count: count_cells,
    p_text: p_text_cells,
}


def _column_cells(values: pd.Series, number: Callable[[float], str]) -> list[str]:
    """``_format`` of every value of a column: a numeric column formatted as one array, a text
    column each distinct value once, anything else value by value."""
    dtype = values.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "iuf":
        return _CELLS.get(number, sig3_cells)(values.to_numpy(dtype=float)).tolist()
    if isinstance(
        dtype, pd.StringDtype
    ):  # its missing values are its na_value, as _tuples has them
        codes, distinct = pd.factorize(values)
        texts = np.array([datum(v) for v in distinct.tolist()] + [""], dtype=object)
        texts[-1] = _format(dtype.na_value, number)  # code -1: missing
        return texts[codes].tolist()
    known: dict[str, str] = {}  # each distinct text once
    cells = []
    for value in _values(values):  # as _tuples reads them
        if type(value) is str:
            if value not in known:
                known[value] = datum(value)
            cells.append(known[value])
        else:
            cells.append(_format(value, number))
    return cells


def _frame_table(frame: pd.DataFrame, columns: list[str] | None = None) -> str:
    """A frame as a table of escaped values formatted for people (``_number_format``), formatted
    column by column (``_column_cells``)."""
    if frame is None or frame.empty:
        return '<p class="muted">none</p>'
    columns = [c for c in (columns or list(frame.columns)) if c in frame.columns]
    shown = frame[columns]
    cells = [_column_cells(shown.iloc[:, i], _number_format(str(c))) for i, c in enumerate(columns)]
    return _table([esc(c) for c in columns], zip(*cells), left=2)


def _badge(key: str) -> str:
    text, colour = VERDICTS[key]
    return f'<span class="badge" style="background:{colour}">{esc(text)}</span>'


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
            f"<b>{count(row.rows)}</b>{esc(done)}{esc(mark)}</span>"
        )
    note = ""
    if len(part) > len(shown):
        hidden = part.drop(index=shown.index)
        note += (
            f' <span class="muted">and {len(hidden)} more groups of {count(hidden["rows"].min())} '
            f"to {count(hidden['rows'].max())} predictions ({int(hidden['small'].sum())} below "
            f"{minimum}; all in the details)</span>"
        )
    if uniform and len(part):
        note += f' <span class="muted">({percent(part["completeness"].iloc[0])} labelled)</span>'
    return "".join(chips) + note


def _completeness_warning(p: float, names: str, said: str = LABEL_BIAS) -> str:
    if not names:
        return ""
    return (
        f'<br><span class="why">⚠ labelled shares differ by decision in {datum(names)} '
        f"(Holm-adjusted Fisher p {p_text(p)}): {esc(said)}</span>"
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
                + _completeness_warning(
                    row.completeness_p, row.completeness_groups, row.completeness_said
                ),
            ]
        )
    findings = ranked_findings(frames)
    shown = findings.head(FIRST_SCREEN_ROWS)
    more = len(findings) - len(shown)
    mass = credibility(hdi_mass(frames))
    header = [esc(h).replace("95%", mass) for h in FINDING_HEADER]
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
        f"difference the interval allows (HDI: highest density interval, {mass} each so that "
        "all the run's intervals hold together with probability 1 − α). Rates are of the "
        "labelled predictions, except the predicted positive and negative rates (PPR, PNR), "
        "which count every valid prediction, labelled or not; counts in brackets.</p>"
        + flagged
        + '<hr class="fold"></section>'
    )


# What a group's line of a rate table reads: its own columns, and each comparison's.
RATE_COLUMNS = ["group_name", "is_reference", "small", "value", "reason", "low", "high"]
RATE_COLUMNS += ["labelled", *COUNT_COLUMNS]
COMPARISON_FIELDS = ["difference", "undefined_reason", "p_adjusted", "tested", "flagged"]
COMPARISON_FIELDS += ["decision", "four_fifths", "low", "high", "ratio"]


def _rate_rows(part: pd.DataFrame, has_ref: bool) -> list[list[str]]:
    rows = []
    read = RATE_COLUMNS + [f"{p}_{f}" for p in ("ref", "rest") for f in COMPARISON_FIELDS]
    for row in _tuples(part[[c for c in read if c in part.columns]]):
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
        cells = [name, count(row.labelled), *(count(getattr(row, c)) for c in COUNT_COLUMNS), rate]
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
        word = "not flagged" if _missing(get("decision")) else get("decision")  # runs before 0019
        verdict = f"{esc(word)}<br><span class=muted>p {p}</span>"
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
    percent_confident = round(100 * (1 - limits["alpha"]))
    out = [
        (
            "<h2>Group rates and disparities</h2><p class=meta>Each group's rate with its "
            f"{percent_confident}% Clopper-Pearson interval and counts; difference (percentage points, with "
            f"the {credibility(hdi_mass(frames))} HDI, simultaneous over the run's tested "
            "comparisons) and ratio to the reference group and to the rest of the population; "
            "the four-fifths rule (ratio within 0.8-1.25) beside the statistical verdict: "
            "flagged (Benjamini-Hochberg), else the HDI + ROPE decision (biased, fair or "
            "undecided at that HDI), or not tested. ⚠ marks "
            "groups below "
            f"min_group_size = {limits['min_group_size']}.</p>"
        )
    ]
    if verdict is None:
        return out[0] + '<p class="muted">no groups</p>'
    sizes = groups(frames)
    scored = score_attributes(frames)
    for attribute, row in verdict.iterrows():
        ref = named.get(attribute)
        body = [_context_table(sizes[sizes["attribute"] == attribute], 1 - limits["alpha"])]
        if attribute in scored:
            body.append(score_block(frames, str(attribute), kept))
        part = table[table["attribute"] == attribute] if not table.empty else table
        for metric, rows in part.groupby("metric", sort=True) if not part.empty else []:
            header = [
                "group",
                "labelled",
                "tp",
                "fp",
                "fn",
                "tn",
                f"rate<br>[{percent_confident}% interval]",
            ]
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


def score_block(frames: ReportFrames, attribute: str, kept: dict) -> str:
    """A scored run's attribute: which definitions of fairness hold (one sentence, from the
    run's tests), the reliability curves beside the error-rate forest plots (against the named
    reference, else the rest), the ROC curves, and each group's AUC and calibration test."""
    limits = thresholds(frames)
    ref = references(frames).get(attribute)
    stated = definitions(frames)
    sentence = definitions_sentence(
        next(_tuples(stated[stated["attribute"] == attribute])),
        limits["alpha"],
        points_plain(frames),
    )
    curves, roc = reliability(frames), roc_points(frames)
    mine, roc = curves[curves["attribute"] == attribute], roc[roc["attribute"] == attribute]
    sizes = groups(frames)
    small = frozenset(sizes.loc[(sizes["attribute"] == attribute) & sizes["small"], "group_name"])
    order = sorted({*mine["group_name"], *roc["group_name"]})  # a group's colour in both plots
    probability = probability_score(frames.calibration)
    figures = [reliability_plot(mine, f"{attribute}: reliability", probability, order, small)]
    for metric in ERROR_RATES:
        rows = kept.get((attribute, metric))
        if rows is None:
            continue
        named = rows[rows["reference"] == ref]
        against = named if len(named) else rows[rows["reference"] == "rest"]
        title = f"{metric.upper()}: group − {ref if len(named) else 'rest of population'}"
        figures.append(forest_plot(against, limits["tolerance"], title, limits["min_group_size"]))
    aucs = score_groups(frames)
    aucs = aucs[aucs["attribute"] == attribute]
    figures.append(roc_plot(roc, aucs, f"{attribute}: ROC", order, small))
    return (
        "<details open><summary class=metric>Score: calibration, error rates and ROC "
        "<span class=muted>· reliability: each score bin's observed outcome rate (exact "
        f"{round(100 * (1 - limits['alpha']))}% interval) against its mean score</span>"
        f"</summary><p>{esc(sentence)}</p><div class=plots>{''.join(figures)}</div>"
        + _score_table(frames, attribute)
        + "</details>"
    )


def _score_table(frames: ReportFrames, attribute: str) -> str:
    """Each group's labelled positives and negatives, AUC [interval] and its calibration test
    (Benjamini-Hochberg adjusted p): its own calibration for a probability, else against the
    rest."""
    aucs = score_groups(frames)
    aucs = aucs[aucs["attribute"] == attribute]
    if aucs.empty:
        return ""
    scores = frames.scores
    p = scores[(scores["attribute"] == attribute) & (scores["reference"] == "rest")]
    p = p.set_index("group_name")["calibration_p_adjusted"]
    percent_confident = round(100 * frames.scores["confidence"].iloc[0])
    rows = [
        [
            datum(row.group_name),
            count(row.positives),
            count(row.negatives),
            (
                f"{esc(sig3(row.auc))} <span class=muted>[{esc(sig3(row.auc_low))}, "
                f"{esc(sig3(row.auc_high))}]</span>"
            ),
            esc(p_text(p.get(row.group_name))),
        ]
        for row in _tuples(aucs)
    ]
    header = ["group", "positives", "negatives", f"AUC [{percent_confident}% interval]"]
    own = probability_score(frames.calibration)
    tested = "calibration: adjusted p" if own else "calibration vs rest: adjusted p"
    return _table([*header, tested], rows)


def _context_table(part: pd.DataFrame, confidence: float) -> str:
    """Each group's base rates (CONTEXT) with their Clopper-Pearson interval and counts: who is in
    the group, not how the model treats it, so never tested and never flagged."""
    if part.empty:
        return ""
    header = ["group", "labelled"]
    columns = []
    for metric in CONTEXT:
        name, formula = GLOSSARY[metric]
        header.append(f"{esc(name)} [{round(100 * confidence)}% interval]<br>{esc(formula)}")
        x, n = part[f"{metric}_numerator"], part[f"{metric}_denominator"]
        columns.append((part[metric], x, n, *clopper_pearson(x, n, confidence)))
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
    (alarms first), when that stage has stored rows for the run (monitor_results' columns)."""
    monitor = frames.monitor
    if monitor.empty:
        return ""
    monitor = monitor.sort_values(["alarm", "e_process"], ascending=False)
    rows = []
    for record in monitor.to_dict(orient="records"):
        record["nights"] = int(record["nights"])  # stored as a real number
        cells = [
            datum(record[c]) if c != "difference" else points(record[c]) for c in MONITOR_COLUMNS
        ]
        cells.append(f"[{sig3(100 * record['cs_low'])}, {sig3(100 * record['cs_high'])}]")
        cells.append(esc(sig3(record["e_process"])))
        cells.append('<span class="flag">alarm</span>' if record["alarm"] else "–")
        rows.append(cells)
    extra = ["confidence sequence, pp", "e-process", "alarm (e-BH)"]
    return (
        "<h2>Anytime-valid monitoring</h2><p class=meta>Confidence sequences cover the "
        "difference at every run at once, and an alarm keeps its false-alarm guarantee however "
        "often the audit looks (purple bars in the forest plots).</p>"
        f"<details><summary>Every monitored comparison ({len(rows)})</summary>"
        + _table([*MONITOR_COLUMNS, *extra], rows, left=4)
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
    cols = ["attribute", "group_name", "rows", "labelled", "completeness", *CONTEXT]
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
        + (
            f'<p class="flag">⚠ {esc(warning)}</p>'
            if (warning := threshold_warning(frames))
            else ""
        )
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
