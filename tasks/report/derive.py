"""What the report says, derived from a stored run's result frames (no markup): settings,
groups with their base rates and label completeness, comparisons with rates, ratios and the
four-fifths rule, verdicts per attribute, ranked findings, what was not tested and why; for a
scored run, the reliability and ROC points and which definitions of fairness hold."""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from biasaudit.schemas.config import Thresholds
from biasaudit.schemas.frames import COUNT_COLUMNS
from biasaudit.schemas.metric_ids import (
    BASE_RATES,
    COMPLEMENT,
    rate_cells,
)
from biasaudit.schemas.report import ReportFrames
from biasaudit.schemas.results import COMPARISON_KEY, GROUP_METRIC_KEY, stated_decisions
from biasaudit.tasks.counts import LABEL_BIAS, label_completeness
from biasaudit.tasks.rates import reason_kind
from biasaudit.tasks.report.text import points
from biasaudit.tasks.scores import clopper_pearson

FOUR_FIFTHS = (0.8, 1.25)


# The base rates shown beside the groups; a complement of one shown (nprev = 1 − prev) adds nothing.
CONTEXT = [m for i, m in enumerate(BASE_RATES) if COMPLEMENT.get(m) not in BASE_RATES[:i]]


FIRST_SCREEN_ROWS = 10


VERDICTS = {
    "flagged": ("flagged", "#b00020"),
    "fair": ("fair within tolerance", "#1b5e20"),
    "undecided": ("undecided", "#8a6d00"),
    "little": ("too little data", "#555"),
}


def four_fifths(ratio) -> np.ndarray:
    """Aequitas' disparity rule: a ratio to the reference within [0.8, 1.25] passes."""
    ratio = np.asarray(ratio, dtype=float)
    return np.where(
        np.isnan(ratio),
        "–",
        np.where((ratio >= FOUR_FIFTHS[0]) & (ratio <= FOUR_FIFTHS[1]), "within", "outside"),
    )


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


def hdi_mass(frames: ReportFrames) -> float:
    """The mass of the run's HDIs: 1 − alpha/m over its m tested rows as stored, or 1 − alpha
    for runs stored before migration 0019 (no mass stored)."""
    det = frames.detection
    stored = det["hdi_mass"].dropna() if "hdi_mass" in det else pd.Series(dtype=float)
    return float(stored.iloc[0]) if len(stored) else 1 - thresholds(frames)["alpha"]


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
    """One row per (attribute, group): ``rows`` (valid predictions, labelled or not), ``labelled``,
    label completeness, small flag, and
    each CONTEXT base rate (column ``prev``, with ``prev_numerator`` and ``prev_denominator``)."""
    counts = frames.counts
    if counts.empty:
        return pd.DataFrame(columns=["attribute", "group_name", "rows", "labelled", "completeness"])
    own = counts[counts["subset"] == "group"].copy()
    own["labelled"] = own[COUNT_COLUMNS].sum(axis=1)
    unlabelled = own["n_unlabelled"]
    own["rows"] = own["labelled"] + unlabelled
    with np.errstate(invalid="ignore", divide="ignore"):
        own["completeness"] = np.where(own["rows"] > 0, own["labelled"] / own["rows"], np.nan)
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
    own["small"] = own["rows"] < thresholds(frames)["min_group_size"]
    return own.sort_values(["attribute", "rows"], ascending=[True, False]).reset_index(drop=True)


@per_frames
def comparisons(frames: ReportFrames, deduplicate: bool = True) -> pd.DataFrame:
    """Detection rows with both rates, difference, ratio, four-fifths rule and size marks.

    With ``deduplicate``, a two-valued attribute keeps one comparison per metric (A vs rest,
    B vs rest and A vs B are the same comparison): the one against the named reference, or else
    the smaller group against the rest; chosen from the rows without (computed once per run).
    """
    if deduplicate:
        out = comparisons(frames, deduplicate=False)
        if out.empty:
            return out
        size = groups(frames).set_index(["attribute", "group_name"])
        return _deduplicate(out, size, references(frames)).reset_index(drop=True)
    det = frames.detection
    if not det.empty:  # runs stored before base rates became context hold tests of them
        det = det[~det["metric"].isin(BASE_RATES)]
    if det.empty:
        return pd.DataFrame()
    out = det[COMPARISON_KEY].copy()
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
    out["decision"] = stated_decisions(det)
    out["flagged"] = det["flagged"].fillna(False).astype(bool)
    out["undefined_reason"] = det["reason"]  # why there is no test (drawn as on the metric rows)
    # tested: a p-value exists (not: a zero denominator, a group below min_group_size, the
    # repeat of a two-valued attribute's comparison)
    out["tested"] = out["p_adjusted"].notna()
    out["four_fifths"] = four_fifths(out["ratio"])
    size = groups(frames).set_index(["attribute", "group_name"])
    minimum = thresholds(frames)["min_group_size"]
    key = pd.MultiIndex.from_frame(out[["attribute", "group_name"]])
    out["size_group"] = size["rows"].reindex(key).to_numpy()
    ref_key = pd.MultiIndex.from_arrays([out["attribute"], out["reference"]])
    ref_size = size["rows"].reindex(ref_key).to_numpy()
    rest = size.groupby(level="attribute")["rows"].sum().reindex(out["attribute"]).to_numpy()
    out["size_reference"] = np.where(out["reference"] == "rest", rest - out["size_group"], ref_size)
    out["small"] = (out["size_group"] < minimum) | (out["size_reference"] < minimum)
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
                "smallest": int(part["rows"].min()),
                "flagged": flagged,
                "tested": len(tested),
                "completeness_p": uneven.get(attribute, (float("nan"), ""))[0],
                "completeness_groups": uneven.get(attribute, (float("nan"), ""))[1],
                "completeness_said": completeness_said(frames, str(attribute)),
            }
        )
    return pd.DataFrame(rows)


@per_frames
def completeness_by_attribute(frames: ReportFrames) -> dict[str, tuple[float, str]]:
    """The run's own label-completeness decision (tasks.counts.label_completeness): per attribute
    with groups whose labels depend on the decision beyond chance and by a gap that matters, the
    smallest Holm-adjusted p-value and those groups; other attributes are absent."""
    counts = frames.counts
    needed = {"tp", "fp", "fn", "tn", "unlabelled_pos", "unlabelled_neg"}
    if counts.empty or not needed <= set(counts.columns):
        return {}
    table = frames.completeness  # the audit's own table, when it renders its report
    if table.empty:
        table = label_completeness(counts, float(thresholds(frames)["alpha"]))
    return {
        str(attribute): (float(part["p_adjusted"].min()), ", ".join(part["group_name"]))
        for attribute, part in table[table["uneven"]].groupby("attribute", sort=False)
    }


def threshold_warning(frames: ReportFrames) -> str | None:
    """The run's stored warning that its decision's threshold lies outside every valid score
    (flows.pipeline.threshold_warning), where it has one."""
    warning = ((frames.run or {}).get("summary") or {}).get("threshold_warning")
    return warning if isinstance(warning, str) and warning else None


def completeness_said(frames: ReportFrames, attribute: str) -> str:
    """What the run's stored label-completeness warning for ``attribute`` says after its p-value
    (tasks.counts.completeness_warnings): what the labels' arrival times show, where the source
    had them (columns.labelled_at); else which metrics each mechanism biases (LABEL_BIAS)."""
    summary = (frames.run or {}).get("summary") or {}
    head = f"labelled shares differ by decision in {attribute} groups "
    marker = "Holm-adjusted Fisher p "
    for line in summary.get("label_completeness_warnings") or []:
        if isinstance(line, str) and line.startswith(head) and marker in line:
            rest = line[line.index(marker) :]
            if ": " in rest:
                return rest[rest.index(": ") + 2 :]
    return LABEL_BIAS


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
    confidence = 1 - thresholds(frames)["alpha"]
    low, high = clopper_pearson(raw["numerator"], raw["denominator"], confidence)
    table = raw[["attribute", "group_name", "metric", "value", "numerator", "denominator"]].assign(
        low=low, high=high, reason=raw["undefined_reason"]
    )
    size = groups(frames)
    keep = ["attribute", "group_name", "rows", "labelled", "completeness", "small", *COUNT_COLUMNS]
    table = table.merge(size[keep], on=["attribute", "group_name"], how="left")
    comp = comparisons(frames, deduplicate=False)
    named = references(frames)
    fields = ["difference", "low", "high", "ratio", "four_fifths", "decision", "p_adjusted"]
    fields += ["flagged", "undefined_reason", "tested"]
    for prefix, chosen in (
        ("ref", comp["reference"] != "rest"),
        ("rest", comp["reference"] == "rest"),
    ):
        if comp.empty:
            break
        part = comp[chosen][GROUP_METRIC_KEY + fields].rename(
            columns={f: f"{prefix}_{f}" for f in fields}
        )
        table = table.merge(part, on=GROUP_METRIC_KEY, how="left")
    table["is_reference"] = [
        named.get(a) == g for a, g in zip(table["attribute"], table["group_name"])
    ]
    return table.sort_values(["attribute", "metric", "rows"], ascending=[True, True, False])


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
    flagged = flagged.drop_duplicates(GROUP_METRIC_KEY)
    assured = np.where(
        np.sign(flagged["low"]) == np.sign(flagged["high"]),
        np.minimum(flagged["low"].abs(), flagged["high"].abs()),
        0.0,
    )
    order = np.lexsort((-flagged["difference"].abs().to_numpy(), -np.nan_to_num(assured)))
    return flagged.iloc[order]


def _with_sequences(comp: pd.DataFrame, monitor: pd.DataFrame) -> pd.DataFrame:
    """Comparisons with the monitoring stage's confidence sequence (cs_low, cs_high), if any."""
    if comp.empty or not {*COMPARISON_KEY, "cs_low", "cs_high"} <= set(monitor.columns):
        return comp
    return comp.merge(
        monitor[[*COMPARISON_KEY, "cs_low", "cs_high"]], on=COMPARISON_KEY, how="left"
    )


def points_plain(frames: ReportFrames) -> str:
    return points(thresholds(frames)["tolerance"]).lstrip("+")


# The definitions of fairness a score audit speaks to (Chouldechova 2017; Kleinberg, Mullainathan
# and Raghavan 2016): error-rate balance is equal FPR and FNR, statistical parity equal selection.
ERROR_RATES = ("fpr", "fnr")
SELECTION_RATES = ("ppr",)
ROC_COLUMNS = ["attribute", "group_name", "threshold", "fpr", "tpr"]


def score_attributes(frames: ReportFrames) -> list[str]:
    """The attributes (and intersections) the run audited a score for; none without a score."""
    stored = [f["attribute"] for f in (frames.calibration, frames.thresholds) if len(f)]
    return sorted(set(pd.concat(stored))) if stored else []


@per_frames
def reliability(frames: ReportFrames) -> pd.DataFrame:
    """Reliability curves: per (attribute, group, score bin) with labelled rows, the bin's mean
    score and observed outcome rate with its exact interval (the stored calibration rows,
    tasks.scores.calibration_curves), ascending by score."""
    curves = frames.calibration
    columns = ["attribute", "group_name", "score_bin", "labelled", "positives", "mean_score"]
    columns += ["observed_rate", "rate_low", "rate_high"]
    if curves.empty:
        return pd.DataFrame(columns=columns)
    curves = curves[curves["labelled"] > 0][columns]
    return curves.sort_values(["attribute", "group_name", "score_bin"]).reset_index(drop=True)


@per_frames
def roc_points(frames: ReportFrames) -> pd.DataFrame:
    """ROC curves from the stored threshold sweep (tasks.scores.threshold_sweep): per (attribute,
    group) the (FPR, TPR) of ``score >= threshold`` from the highest bin edge down, after (0, 0)
    at an infinite threshold (nobody selected), as Fawcett (2006, algorithm 1) traces it; a point
    equal to the one before it (an edge where the group has no labelled row) is left out. A group
    without positives or without negatives has no curve."""
    sweep = frames.thresholds
    if sweep.empty:
        return pd.DataFrame(columns=ROC_COLUMNS)
    keys = ["attribute", "group_name"]
    sweep = sweep[[*keys, "threshold", "fpr", "tpr"]].astype({"fpr": float, "tpr": float})
    sweep = sweep[sweep["fpr"].notna() & sweep["tpr"].notna()]
    start = sweep.drop_duplicates(keys).assign(threshold=np.inf, fpr=0.0, tpr=0.0)
    points = pd.concat([start, sweep], ignore_index=True)
    points = points.sort_values([*keys, "threshold"], ascending=[True, True, False])
    repeated = points[[*keys, "fpr", "tpr"]].eq(points[[*keys, "fpr", "tpr"]].shift()).all(axis=1)
    return points[~repeated].reset_index(drop=True)


@per_frames
def score_groups(frames: ReportFrames) -> pd.DataFrame:
    """Per (attribute, group) of the score audit: labelled positives and negatives and the AUC
    with its interval (the stored comparison with the rest, whose group side is the group's own;
    tasks.scores.auc_interval)."""
    scores = frames.scores
    columns = ["attribute", "group_name", "positives", "negatives", "auc", "auc_low", "auc_high"]
    if scores.empty:
        return pd.DataFrame(columns=columns)
    own = scores[scores["reference"] == "rest"]
    own = own.rename(columns=lambda c: c.removesuffix("_group"))
    return own[columns].sort_values(["attribute", "group_name"]).reset_index(drop=True)


def probability_score(calibration: pd.DataFrame) -> bool:
    """Whether the audited score is a probability, as the stored curves show it (every bin's
    lower edge and mean score in [0, 1]; the scan decided it from every score,
    schemas.score_bins.ScoreBins.probability)."""
    return bool(
        calibration["score_bin"].between(0, 1).all()
        and calibration["mean_score"].dropna().between(0, 1).all()
    )


def _calibration_p(scores: pd.DataFrame, probability: bool, attribute: str) -> pd.Series:
    """The adjusted p-values of an attribute's calibration tests, one per test: for a
    probability one per group (its own calibration, on its row against the rest); else one per
    comparison, and one for a two-valued attribute (each group against the rest, and against the
    other, is one test)."""
    if scores.empty:
        return pd.Series(dtype=float)
    mine = scores[scores["attribute"] == attribute]
    if probability:
        mine = mine[mine["reference"] == "rest"]
    elif mine["group_name"].nunique() == 2:
        mine = mine.head(1)
    return mine["calibration_p_adjusted"].dropna()


def _state(tested: int, failed: int, settled: int) -> str:
    """'fails' (some test rejects), 'holds' (every test settles it), 'open' or 'untested'."""
    if not tested:
        return "untested"
    return "fails" if failed else ("holds" if settled == tested else "open")


@per_frames
def definitions(frames: ReportFrames) -> pd.DataFrame:
    """Per attribute the run audited a score for: which definitions of fairness hold, each from
    the run's own tests. Calibration (tasks.scores.score_comparisons, Benjamini-Hochberg
    adjusted): for a probability, calibration within groups (each group's outcomes against its
    own scores), else equal calibration across groups; fails where a test's adjusted p is below
    α, holds (no departure found) where none is, untested where no test was valid. Equal error rates (FPR, FNR) and equal selection rates
    (PPR), from detection: fail where a comparison is flagged, hold where every tested
    comparison's HDI lies inside the tolerance, open otherwise; untested where the audit did not
    test them. With the lowest and highest base rate (prevalence) among the groups of at least
    min_group_size (all groups where none is that large): calibration within groups and equal
    error rates cannot both hold when base rates differ (Chouldechova 2017, eq. 2.6; Kleinberg,
    Mullainathan and Raghavan 2016, theorem 1.1), unless the score predicts perfectly."""
    alpha = thresholds(frames)["alpha"]
    comp = comparisons(frames)
    tested = comp[comp["tested"]] if not comp.empty else comp
    sizes = groups(frames)
    rows = []
    for attribute in score_attributes(frames):
        row: dict[str, Any] = {"attribute": attribute}
        probability = probability_score(frames.calibration)
        p = _calibration_p(frames.scores, probability, attribute)
        rejected = int((p < alpha).sum())
        row |= {
            "calibration": _state(len(p), rejected, len(p) - rejected),
            "calibration_tested": len(p),
            "calibration_own": probability,
            "calibration_rejected": rejected,
        }
        for name, metrics in (("error", ERROR_RATES), ("selection", SELECTION_RATES)):
            mine = (
                tested[(tested["attribute"] == attribute) & tested["metric"].isin(metrics)]
                if not tested.empty
                else tested
            )
            flagged = int(mine["flagged"].sum()) if len(mine) else 0
            fair = int((mine["decision"] == "fair").sum()) if len(mine) else 0
            row |= {
                name: _state(len(mine), flagged, fair),
                f"{name}_metrics": [m for m in metrics if len(mine) and m in set(mine["metric"])],
                f"{name}_tested": len(mine),
                f"{name}_flagged": flagged,
                f"{name}_open": len(mine) - flagged - fair,
            }
        part = (
            sizes[(sizes["attribute"] == attribute) & sizes["prev"].notna()]
            if len(sizes)
            else sizes
        )
        if len(part) and (~part["small"]).any():
            part = part[~part["small"]]
        if len(part) > 1:  # a range of base rates needs two groups
            low, high = part.loc[part["prev"].idxmin()], part.loc[part["prev"].idxmax()]
            row |= {
                "base_low": float(low["prev"]),
                "base_low_group": low["group_name"],
                "base_high": float(high["prev"]),
                "base_high_group": high["group_name"],
            }
        rows.append(row)
    return pd.DataFrame(rows)
