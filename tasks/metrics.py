"""Metrics stage: the confusion-matrix metric catalogue of ../shared/SPEC.md section 1.

Definitions follow Briscoe et al., "Algorithmic Accountability in Small Data"
(small-data-metrics-match-cps.txt), appendix B. Every value carries its numerator and denominator;
a metric whose denominator is zero is undefined ("a hole", section 4): its value is NaN and
``undefined_reason`` names the zero denominator. Never 0, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE

from schemas.frames import COUNT_COLUMNS, METRICS
from schemas.metric_ids import BINOMIAL, JOINT_RATIO, OTHER, canonical_metric

Cells = dict[str, np.ndarray]
Result = tuple[
    np.ndarray, np.ndarray, np.ndarray, np.ndarray
]  # value, numerator, denominator, reason

# The four margins, named as the reasons print them.
MARGINS = {
    "tp+fn": ("tp", "fn", "no actual positives"),
    "fp+tn": ("fp", "tn", "no actual negatives"),
    "tp+fp": ("tp", "fp", "no predicted positives"),
    "fn+tn": ("fn", "tn", "no predicted negatives"),
}
# Binomial metrics (cell_a + cell_b) / n (appendix B, table 3).
BINOMIAL_CELLS = {
    "acc": ("tp", "tn"),
    "prev": ("tp", "fn"),
    "ppr": ("tp", "fp"),
    "err": ("fp", "fn"),
    "nprev": ("fp", "tn"),
    "pnr": ("fn", "tn"),
}
# Joint-ratio metrics a / (a + b) (appendix B, table 4): numerator cell and margin.
JOINT_RATIO_CELLS = {
    "tpr": ("tp", "tp+fn"),
    "fnr": ("fn", "tp+fn"),
    "fpr": ("fp", "fp+tn"),
    "tnr": ("tn", "fp+tn"),
    "ppv": ("tp", "tp+fp"),
    "fdr": ("fp", "tp+fp"),
    "npv": ("tn", "fn+tn"),
    "for": ("fn", "fn+tn"),
}
EMPTY = "n = 0 (empty group)"


def _margin(c: Cells, name: str) -> np.ndarray:
    a, b, _ = MARGINS[name]
    return c[a] + c[b]


def _margin_reason(name: str) -> str:
    return f"{name} = 0 ({MARGINS[name][2]})"


def _divide(num: np.ndarray, den: np.ndarray, reason: np.ndarray) -> Result:
    """num/den, NaN exactly where ``reason`` is set."""
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(reason == None, num / den, np.nan)
    return value, num, den, reason


def _reasons(conditions: Iterable[tuple[np.ndarray, str]], size: int) -> np.ndarray:
    """Object array: '; '-joined labels of the conditions that hold, None where none does."""
    out = np.full(size, "", dtype=object)
    for mask, label in conditions:
        out = np.where(mask, np.where(out == "", label, out + "; " + label), out)
    out[out == ""] = None
    return out


def _binomial(a: str, b: str) -> Callable[[Cells], Result]:
    def metric(c: Cells) -> Result:
        n = c["tp"] + c["fp"] + c["fn"] + c["tn"]
        return _divide(c[a] + c[b], n, _reasons([(n == 0, EMPTY)], n.size))

    return metric


def _joint_ratio(a: str, margin: str) -> Callable[[Cells], Result]:
    def metric(c: Cells) -> Result:
        den = _margin(c, margin)
        return _divide(c[a], den, _reasons([(den == 0, _margin_reason(margin))], den.size))

    return metric


def f1(c: Cells) -> Result:
    """Original F1, the harmonic mean of PPV and TPR: undefined whenever TP = 0 (theorem C.2)."""
    num, den = 2 * c["tp"], 2 * c["tp"] + c["fp"] + c["fn"]
    reason = _reasons([(c["tp"] == 0, "tp = 0 (precision or recall zero or undefined)")], num.size)
    return _divide(num, den, reason)


def f1s(c: Cells) -> Result:
    """Simplified F1* = 2TP/(2TP+FP+FN): one hole, the all-negative-and-correct matrix (C.3)."""
    num, den = 2 * c["tp"], 2 * c["tp"] + c["fp"] + c["fn"]
    return _divide(num, den, _reasons([(den == 0, "2tp+fp+fn = 0")], num.size))


def mcc(c: Cells) -> Result:
    """Matthews correlation (TP·TN − FP·FN)/sqrt(product of the four margins); holes: C.4."""
    margins = {name: _margin(c, name) for name in MARGINS}
    num = c["tp"] * c["tn"] - c["fp"] * c["fn"]
    den = np.sqrt(np.prod(np.stack(list(margins.values())), axis=0))
    reason = _reasons([(m == 0, _margin_reason(k)) for k, m in margins.items()], num.size)
    return _divide(num, den, reason)


def pt(c: Cells) -> Result:
    """Prevalence threshold (sqrt(TPR·FPR) − FPR)/(TPR − FPR); undefined also where TPR = FPR.

    TPR = FPR is tested exactly by cross-multiplication (TP·(FP+TN) = FP·(TP+FN)).
    """
    pos, neg = _margin(c, "tp+fn"), _margin(c, "fp+tn")
    with np.errstate(divide="ignore", invalid="ignore"):
        tpr, fpr = c["tp"] / pos, c["fp"] / neg
    reason = _reasons(
        [
            (pos == 0, _margin_reason("tp+fn")),
            (neg == 0, _margin_reason("fp+tn")),
            ((pos > 0) & (neg > 0) & (c["tp"] * neg == c["fp"] * pos), "tpr = fpr"),
        ],
        pos.size,
    )
    return _divide(np.sqrt(tpr * fpr) - fpr, tpr - fpr, reason)


def mb(c: Cells) -> Result:
    """Marginal benefit (FP − FN)/n."""
    n = c["tp"] + c["fp"] + c["fn"] + c["tn"]
    return _divide(c["fp"] - c["fn"], n, _reasons([(n == 0, EMPTY)], n.size))


CATALOGUE: dict[str, Callable[[Cells], Result]] = {
    **{m: _binomial(*BINOMIAL_CELLS[m]) for m in BINOMIAL},
    **{m: _joint_ratio(*JOINT_RATIO_CELLS[m]) for m in JOINT_RATIO},
    **dict(zip(OTHER, (f1, f1s, mcc, pt, mb))),
}
GROUP_METRICS = tuple(CATALOGUE)


def compute_metrics(counts: pd.DataFrame, metrics: Iterable[str] | None = None) -> pd.DataFrame:
    """Long frame: one row per input row and metric (SPEC ids, synonyms accepted).

    Columns: the input's key columns (all but the counts), then ``metric``, ``value``,
    ``numerator``, ``denominator`` and ``undefined_reason`` (None where the value is defined).
    Counts may be floats (smoothed confusion matrices).
    """
    names = GROUP_METRICS if metrics is None else [canonical_metric(m) for m in metrics]
    unknown = [m for m in names if m not in CATALOGUE]
    if unknown:
        raise ValueError(f"{unknown} are two-group metrics: use two_group_metrics")
    cells = {c: counts[c].to_numpy(dtype="float64") for c in COUNT_COLUMNS}
    keys = counts.drop(columns=COUNT_COLUMNS + ["n_unlabelled"], errors="ignore")
    keys = keys.reset_index(drop=True)
    blocks = []
    for name in dict.fromkeys(names):
        value, num, den, reason = CATALOGUE[name](cells)
        block = keys.assign(
            metric=name, value=value, numerator=num, denominator=den, undefined_reason=reason
        )
        blocks.append(block)
    out = pd.concat(blocks, ignore_index=True)
    reason = out["undefined_reason"].astype(object)
    out["undefined_reason"] = reason.where(reason.notna(), None)
    return METRICS.validate(out)


@task(name="metrics", cache_policy=NO_CACHE)
def metrics_stage(counts: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Prefect task: the configured per-group metrics of every group and complement."""
    return compute_metrics(counts, [m for m in metrics if m in CATALOGUE])
