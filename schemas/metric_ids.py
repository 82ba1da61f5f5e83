"""The metric identifiers of ../shared/SPEC.md section 1, and the synonyms configuration accepts."""

from __future__ import annotations

BINOMIAL = ("acc", "prev", "ppr", "err", "nprev", "pnr")
JOINT_RATIO = ("tpr", "fnr", "fpr", "tnr", "ppv", "fdr", "npv", "for")
OTHER = ("f1", "f1s", "mcc", "pt", "mb")
TWO_GROUP = ("ofi", "te")
METRIC_IDS = BINOMIAL + JOINT_RATIO + OTHER + TWO_GROUP
# Metrics that are a rate x/d of two counts: the ones detection, planning and meta-metrics test.
RATE_METRICS = BINOMIAL + JOINT_RATIO
# Complementary rates (M and 1 − M of the same counts): a disparity in one is the same disparity
# in the other, so one hypothesis, one test.
_PAIRS = (
    ("acc", "err"),
    ("prev", "nprev"),
    ("ppr", "pnr"),
    ("tpr", "fnr"),
    ("fpr", "tnr"),
    ("ppv", "fdr"),
    ("npv", "for"),
)
COMPLEMENT = {**dict(_PAIRS), **{b: a for a, b in _PAIRS}}
# Rates that need no label (SPEC section 6): computed from every valid prediction, labelled or not.
LABEL_FREE = ("ppr", "pnr")

# The four margins of the labelled confusion matrix, named as the reasons print them.
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
# Unlabelled predictions, split by decision (count columns beside tp, fp, fn, tn): they enter the
# label-free rates only, PPR = (tp + fp + unlabelled_pos)/(n + unlabelled_pos + unlabelled_neg).
UNLABELLED_COLUMNS = ("unlabelled_pos", "unlabelled_neg")
LABEL_FREE_CELLS = {"ppr": "unlabelled_pos", "pnr": "unlabelled_neg"}


def rate_cells(metric: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(numerator columns, denominator columns) of a rate metric in a counts frame.

    Binomial metrics divide by n = tp+fp+fn+tn, joint-ratio metrics by their margin; PPR and PNR
    also count the unlabelled predictions with the same decision, over every valid prediction.
    """
    if metric in BINOMIAL_CELLS:
        numerator, denominator = BINOMIAL_CELLS[metric], ("tp", "fp", "fn", "tn")
        if metric in LABEL_FREE_CELLS:
            return (*numerator, LABEL_FREE_CELLS[metric]), (*denominator, *UNLABELLED_COLUMNS)
        return numerator, denominator
    if metric in JOINT_RATIO_CELLS:
        cell, margin = JOINT_RATIO_CELLS[metric]
        return (cell,), MARGINS[margin][:2]
    raise ValueError(f"{metric!r} is not a rate metric; rates: {', '.join(RATE_METRICS)}")


SYNONYMS = {
    "accuracy": "acc",
    "prevalence": "prev",
    "selection_rate": "ppr",
    "predicted_positive_rate": "ppr",
    "demographic_parity": "ppr",
    "error_rate": "err",
    "inaccuracy": "err",
    "misclassification_rate": "err",
    "negative_prevalence": "nprev",
    "predicted_negative_rate": "pnr",
    "recall": "tpr",
    "sensitivity": "tpr",
    "hit_rate": "tpr",
    "true_positive_rate": "tpr",
    "miss_rate": "fnr",
    "false_negative_rate": "fnr",
    "fall_out": "fpr",
    "false_positive_rate": "fpr",
    "specificity": "tnr",
    "true_negative_rate": "tnr",
    "precision": "ppv",
    "positive_predictive_value": "ppv",
    "false_discovery_rate": "fdr",
    "negative_predictive_value": "npv",
    "false_omission_rate": "for",
    "f1_score": "f1",
    "f1_simplified": "f1s",
    "f1*": "f1s",
    "matthews": "mcc",
    "phi": "mcc",
    "prevalence_threshold": "pt",
    "marginal_benefit": "mb",
    "objective_fairness_index": "ofi",
    "treatment_equality": "te",
}


def canonical_metric(name: str) -> str:
    """The SPEC identifier for ``name`` or one of its synonyms; ValueError if unknown."""
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    key = SYNONYMS.get(key, key)
    if key not in METRIC_IDS:
        raise ValueError(f"unknown metric {name!r}; known: {', '.join(METRIC_IDS)} (and synonyms)")
    return key
