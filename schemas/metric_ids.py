"""The metric identifiers of ../shared/SPEC.md section 1, and the synonyms configuration accepts."""

from __future__ import annotations

BINOMIAL = ("acc", "prev", "ppr", "err", "nprev", "pnr")
JOINT_RATIO = ("tpr", "fnr", "fpr", "tnr", "ppv", "fdr", "npv", "for")
OTHER = ("f1", "f1s", "mcc", "pt", "mb")
TWO_GROUP = ("ofi", "te")
METRIC_IDS = BINOMIAL + JOINT_RATIO + OTHER + TWO_GROUP
# Rates (a count over a count): the metrics that detection, planning and meta-metrics test.
RATE_METRICS = BINOMIAL + JOINT_RATIO

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
