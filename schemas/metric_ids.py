"""The metric identifiers (Briscoe et al., "Algorithmic Accountability in Small Data", appendix
B), and the synonyms configuration accepts."""

from __future__ import annotations

BINOMIAL = ("acc", "prev", "ppr", "err", "nprev", "pnr")
JOINT_RATIO = ("tpr", "fnr", "fpr", "tnr", "ppv", "fdr", "npv", "for")
OTHER = ("f1", "f1s", "mcc", "pt", "mb")
TWO_GROUP = ("ofi", "te")
METRIC_IDS = BINOMIAL + JOINT_RATIO + OTHER + TWO_GROUP
# Metrics that are a rate x/d of two counts (rate_cells); the compare stage tests each one's change
# between two runs of a group.
RATE_METRICS = BINOMIAL + JOINT_RATIO
# Rates of the labels alone (y_true; the decision y_pred plays no part): the population's base
# rates. They describe who is in a group, not how the model treats it, so they are shown beside
# the groups as context and never tested between groups.
BASE_RATES = ("prev", "nprev")
# The rates tested between groups: planning, detection, meta-metrics and monitoring; MATCH tests
# them and the marginal benefit.
TESTED_RATES = tuple(m for m in RATE_METRICS if m not in BASE_RATES)
MATCH_METRICS = (*(m for m in BINOMIAL if m not in BASE_RATES), "mb", *JOINT_RATIO)
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
# Rates that need no label (a decision is known at once, its outcome later or never): computed
# from every valid prediction, labelled or not.
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
    "simplified_f1_score": "f1s",
    "f1*": "f1s",
    "matthews": "mcc",
    "phi": "mcc",
    "matthews_correlation_coefficient": "mcc",
    "prevalence_threshold": "pt",
    "marginal_benefit": "mb",
    "objective_fairness_index": "ofi",
    "treatment_equality": "te",
}

# Every metric in words, with its formula in the cells of the confusion matrix: the one source the
# report and the command line name metrics from (each name is also accepted as a synonym).
N_MEANS = "n = TP + FP + FN + TN, the labelled predictions"
GLOSSARY = {
    "acc": ("accuracy", "(TP + TN) / n"),
    "prev": ("prevalence", "(TP + FN) / n"),
    "ppr": ("predicted positive rate", "(TP + FP + unlabelled positive) / (n + unlabelled)"),
    "err": ("error rate", "(FP + FN) / n"),
    "nprev": ("negative prevalence", "(FP + TN) / n"),
    "pnr": ("predicted negative rate", "(FN + TN + unlabelled negative) / (n + unlabelled)"),
    "tpr": ("true positive rate", "TP / (TP + FN)"),
    "fnr": ("false negative rate", "FN / (TP + FN)"),
    "fpr": ("false positive rate", "FP / (FP + TN)"),
    "tnr": ("true negative rate", "TN / (FP + TN)"),
    "ppv": ("positive predictive value", "TP / (TP + FP)"),
    "fdr": ("false discovery rate", "FP / (TP + FP)"),
    "npv": ("negative predictive value", "TN / (FN + TN)"),
    "for": ("false omission rate", "FN / (FN + TN)"),
    "f1": ("F1 score", "2 * PPV * TPR / (PPV + TPR)"),
    "f1s": ("simplified F1 score", "2 * TP / (2 * TP + FP + FN)"),
    "mcc": (
        "Matthews correlation coefficient",
        "(TP * TN - FP * FN) / sqrt((TP + FP) * (TP + FN) * (TN + FP) * (TN + FN))",
    ),
    "pt": ("prevalence threshold", "(sqrt(TPR * FPR) - FPR) / (TPR - FPR)"),
    "mb": ("marginal benefit", "(FP - FN) / n"),
    "ofi": ("objective fairness index", "MB of the group - MB of the reference"),
    "te": ("treatment equality", "FN / FP of the group - FN / FP of the reference"),
}


def describe(metric: str) -> str:
    """A metric's id, name and formula: 'fpr — false positive rate, FP / (FP + TN)'."""
    name, formula = GLOSSARY[metric]
    return f"{metric} — {name}, {formula}"


def role(metric: str) -> str:
    """What an audit does with a metric: test it between groups, or only show it."""
    if metric in BASE_RATES:
        return "context: the outcome's base rate in the group, never tested as bias"
    if metric in TESTED_RATES:
        return "tested between groups"
    if metric in MATCH_METRICS:
        return "tested between groups by MATCH"
    if metric in TWO_GROUP:
        return "a group against its reference, not tested"
    return "per group, not tested"


def canonical_metric(name: str) -> str:
    """The metric identifier for ``name`` or one of its synonyms; ValueError if unknown."""
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    key = SYNONYMS.get(key, key)
    if key not in METRIC_IDS:
        raise ValueError(f"unknown metric {name!r}; known: {', '.join(METRIC_IDS)} (and synonyms)")
    return key
