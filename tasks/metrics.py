"""Metrics stage: the confusion-matrix metric catalogue.

Definitions follow Briscoe et al., "Algorithmic Accountability in Small Data: Sample-Size-Induced
Bias Within Classification Metrics", appendix B. Every value carries its numerator and denominator;
a metric whose denominator is zero is undefined ("a hole", section 4): its value is NaN and
``undefined_reason`` names the zero denominator. Never 0, never an exception.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from biasaudit.schemas.frames import COUNT_COLUMNS, METRICS
from biasaudit.schemas.metric_ids import (
    BINOMIAL,
    BINOMIAL_CELLS,
    JOINT_RATIO,
    JOINT_RATIO_CELLS,
    LABEL_FREE_CELLS,
    MARGINS,
    OTHER,
    UNLABELLED_COLUMNS,
    canonical_metric,
)

Cells = dict[str, np.ndarray]
Result = tuple[
    np.ndarray, np.ndarray, np.ndarray, np.ndarray
]  # value, numerator, denominator, reason

EMPTY = "n = 0 (empty group)"
# Columns of a counts frame that are counts, not keys.
COUNT_FIELDS = [*COUNT_COLUMNS, *UNLABELLED_COLUMNS, "n_unlabelled"]


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


def _binomial(a: str, b: str, unlabelled: str | None = None) -> Callable[[Cells], Result]:
    """(a + b)/n; for PPR and PNR (``unlabelled`` given) over every valid prediction: the
    unlabelled ones with the same decision join the numerator, all unlabelled the denominator."""

    def metric(c: Cells) -> Result:
        n = c["tp"] + c["fp"] + c["fn"] + c["tn"]
        num = c[a] + c[b]
        if unlabelled is not None:
            n = n + c["unlabelled_pos"] + c["unlabelled_neg"]
            num = num + c[unlabelled]
        return _divide(num, n, _reasons([(n == 0, EMPTY)], n.size))

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

    Computed as the algebraically equal sqrt(FPR)/(sqrt(TPR) + sqrt(FPR)) (divide numerator and
    denominator by sqrt(TPR) − sqrt(FPR)), which has no cancellation: stable for counts near 1e9,
    where the textbook form loses every digit as TPR → FPR. TPR = FPR is tested exactly by
    cross-multiplication (TP·(FP+TN) = FP·(TP+FN)) in integers where the counts are integers.
    """
    pos, neg = _margin(c, "tp+fn"), _margin(c, "fp+tn")
    with np.errstate(divide="ignore", invalid="ignore"):
        tpr, fpr = c["tp"] / pos, c["fp"] / neg
    reason = _reasons(
        [
            (pos == 0, _margin_reason("tp+fn")),
            (neg == 0, _margin_reason("fp+tn")),
            ((pos > 0) & (neg > 0) & _equal_products(c["tp"], neg, c["fp"], pos), "tpr = fpr"),
        ],
        pos.size,
    )
    root_fpr = np.sqrt(fpr)
    return _divide(root_fpr, np.sqrt(tpr) + root_fpr, reason)


def _equal_products(a, b, c, d) -> np.ndarray:
    """a·b == c·d, exactly: in Python integers where all four are whole numbers, else in floats."""
    values = np.stack([a, b, c, d])
    if np.all(np.isfinite(values)) and np.all(values == np.round(values)):
        whole = [[int(v) for v in row] for row in values]
        return np.array([w * x == y * z for w, x, y, z in zip(*whole)], dtype=bool)
    return a * b == c * d


def mb(c: Cells) -> Result:
    """Marginal benefit (FP − FN)/n."""
    n = c["tp"] + c["fp"] + c["fn"] + c["tn"]
    return _divide(c["fp"] - c["fn"], n, _reasons([(n == 0, EMPTY)], n.size))


CATALOGUE: dict[str, Callable[[Cells], Result]] = {
    **{m: _binomial(*BINOMIAL_CELLS[m], LABEL_FREE_CELLS.get(m)) for m in BINOMIAL},
    **{m: _joint_ratio(*JOINT_RATIO_CELLS[m]) for m in JOINT_RATIO},
    **dict(zip(OTHER, (f1, f1s, mcc, pt, mb))),
}
GROUP_METRICS = tuple(CATALOGUE)


def compute_metrics(counts: pd.DataFrame, metrics: Iterable[str] | None = None) -> pd.DataFrame:
    """Long frame: one row per input row and metric (metric ids, synonyms accepted).

    Columns: the input's key columns (all but the counts), then ``metric``, ``value``,
    ``numerator``, ``denominator`` and ``undefined_reason`` (None where the value is defined).
    Counts may be floats (smoothed confusion matrices). PPR and PNR count the unlabelled
    predictions (columns ``unlabelled_pos``, ``unlabelled_neg``, 0 where absent) too.
    """
    names = GROUP_METRICS if metrics is None else [canonical_metric(m) for m in metrics]
    unknown = [m for m in names if m not in CATALOGUE]
    if unknown:
        raise ValueError(f"{unknown} are two-group metrics: use two_group_metrics")
    cells = {
        c: counts[c].to_numpy(dtype="float64") if c in counts else np.zeros(len(counts))
        for c in COUNT_COLUMNS + list(UNLABELLED_COLUMNS)
    }
    keys = counts.drop(columns=COUNT_FIELDS, errors="ignore")
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


def two_group_metrics(group: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """OFI and treatment equality of each group row against the reference row beside it.

    OFI = MB_a − MB_b (objective fairness index); TE = FN_a/FP_a − FN_b/FP_b, undefined when either
    group has FP = 0 (Briscoe et al., appendix B, table 5). ``group`` and ``reference`` are aligned
    count frames; the result keeps ``group``'s keys (whatever they are: tasks.core checks the
    two_group_results contract).
    """
    a = {c: group[c].to_numpy(dtype="float64") for c in COUNT_COLUMNS}
    b = {c: reference[c].to_numpy(dtype="float64") for c in COUNT_COLUMNS}
    mb_a, mb_b = mb(a), mb(b)
    ofi_reason = _reasons(
        [(mb_a[3] != None, "n = 0 in group"), (mb_b[3] != None, "n = 0 in reference")],
        len(group),
    )
    te_reason = _reasons(
        [(a["fp"] == 0, "fp = 0 in group"), (b["fp"] == 0, "fp = 0 in reference")], len(group)
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        te = a["fn"] / a["fp"] - b["fn"] / b["fp"]
    keys = group.drop(columns=COUNT_FIELDS, errors="ignore")
    keys = keys.reset_index(drop=True)
    blocks = [
        keys.assign(
            metric="ofi",
            value=np.where(ofi_reason == None, mb_a[0] - mb_b[0], np.nan),
            undefined_reason=ofi_reason,
        ),
        keys.assign(
            metric="te",
            value=np.where(te_reason == None, te, np.nan),
            undefined_reason=te_reason,
        ),
    ]
    out = pd.concat(blocks, ignore_index=True)
    reason = out["undefined_reason"].astype(object)
    out["undefined_reason"] = reason.where(reason.notna(), None)
    return out  # its keys are the caller's: tasks.core checks the two_group_results contract


def all_confusion_matrices(n: int) -> pd.DataFrame:
    """Every confusion matrix of size n, C(n+3, 3) of them (theorem A.1), as a counts frame."""
    tp, fp, fn = np.meshgrid(*(np.arange(n + 1),) * 3, indexing="ij")
    keep = tp + fp + fn <= n
    tp, fp, fn = tp[keep], fp[keep], fn[keep]
    return pd.DataFrame({"tp": tp, "fp": fp, "fn": fn, "tn": n - tp - fp - fn})


def count_holes(metric: str, n: int, n_other: int | None = None) -> int:
    """Number of size-n confusion matrices on which ``metric`` is undefined (section 4, table 1).

    Closed forms (appendix C), for n >= 1: binomial metrics and MB 0, each joint-ratio metric n+1,
    MCC 4n, original F1 C(n+2, 2), F1* 1. At n = 0 the one (empty) matrix is a hole of every metric.
    The paper's bounds for PT and its formula for TE are wrong (721 PT holes at n = 100, above its
    bound; 770 undefined TE pairs for sizes 3 and 5, not 30), so PT is counted by
    enumeration, and TE (a two-group metric, needing ``n_other``) counts the undefined pairs of
    matrices of sizes n and n_other by enumerating the matrices with FP = 0 in each group. OFI has
    no holes for n, n_other >= 1.
    """
    metric = canonical_metric(metric)
    if metric in ("ofi", "te"):
        if n_other is None:
            raise ValueError(f"{metric} is a two-group metric: give n_other")
        total = math.comb(n + 3, 3) * math.comb(n_other + 3, 3)
        if metric == "ofi":
            return total if 0 in (n, n_other) else 0

        def fp_positive(size: int) -> int:
            return int((all_confusion_matrices(size)["fp"] > 0).sum())

        return total - fp_positive(n) * fp_positive(n_other)
    if n == 0:
        return 1
    if metric in BINOMIAL or metric == "mb":
        return 0
    if metric in JOINT_RATIO:
        return n + 1
    closed = {"mcc": 4 * n, "f1": math.comb(n + 2, 2), "f1s": 1}
    if metric in closed:
        return closed[metric]
    cm = all_confusion_matrices(n)  # pt: undefined where TPR or FPR is, or TPR = FPR
    pos, neg = cm["tp"] + cm["fn"], cm["fp"] + cm["tn"]
    return int(((pos == 0) | (neg == 0) | (cm["tp"] * neg == cm["fp"] * pos)).sum())
