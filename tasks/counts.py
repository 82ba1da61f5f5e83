"""Counts stage: reduce valid predictions to confusion counts per group.

One row per (attribute, group, subset): ``subset='group'`` counts the group itself and
``subset='rest'`` its rest-of-population complement (the attribute's total minus the group). Each
configured intersection (e.g. race x sex) is one more attribute. Rows whose outcome is still unknown
(y_true NULL) are not in tp, fp, fn, tn: they count in ``unlabelled_pos`` or ``unlabelled_neg`` by
their decision (y_pred 1 or 0), and in ``n_unlabelled`` (their sum), so that the label-free rates
PPR and PNR use every valid prediction (a decision needs no outcome).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from biasaudit.schemas.config import INTERSECTION_SEP, UnknownReferenceGroup
from biasaudit.schemas.frames import COUNT_COLUMNS, listed
from biasaudit.schemas.metric_ids import UNLABELLED_COLUMNS
from biasaudit.schemas.results import GROUP_COUNTS

# Cell code 2*y_true + y_pred: tn=0, fp=1, fn=2, tp=3; outcome unknown: 4 + y_pred.
_CELLS = ["tn", "fp", "fn", "tp", "unlabelled_neg", "unlabelled_pos"]
CELL_COLUMNS = [*COUNT_COLUMNS, *UNLABELLED_COLUMNS, "n_unlabelled"]


def cell_codes(y_true: pd.Series, y_pred: pd.Series) -> np.ndarray:
    """The confusion cell of each prediction (see _CELLS)."""
    truth = y_true.to_numpy(dtype="float64")
    decision = y_pred.to_numpy(dtype=np.int8)
    code = 2 * np.nan_to_num(truth, nan=0.0).astype(np.int8) + decision
    return np.where(np.isnan(truth), 4 + decision, code).astype(np.int8)


def group_counts(valid: pd.DataFrame, attributes: list[str], intersections: list[list[str]]):
    """Counts frame (schemas.results.GROUP_COUNTS) of every attribute and intersection, with complements."""
    return with_complements(cell_counts(valid, attributes, intersections))


def cell_counts(valid: pd.DataFrame, attributes: list[str], intersections: list[list[str]]):
    """Group rows only (attribute, group_name and the cell counts): additive over chunks of rows,
    so the counts of chunks fold by summing."""
    if valid.empty:
        return _empty_counts().drop(columns="subset")
    weight = valid.get("n")  # pre-aggregated rows carry their count
    cells = pd.Series(cell_codes(valid["y_true"], valid["y_pred"]), index=valid.index, name="cell")
    parts = []
    for columns in [[a] for a in attributes] + intersections:
        frame = pd.concat([valid[columns], cells], axis=1)
        grouped = (
            frame.groupby(columns + ["cell"], observed=True, sort=True).size()
            if weight is None
            else frame.assign(n=weight)
            .groupby(columns + ["cell"], observed=True, sort=True)["n"]
            .sum()
        )
        grouped = grouped.unstack("cell", fill_value=0).reindex(columns=range(6), fill_value=0)
        grouped.columns = _CELLS
        grouped["n_unlabelled"] = grouped["unlabelled_pos"] + grouped["unlabelled_neg"]
        grouped = grouped[CELL_COLUMNS].astype("int64")
        labels = grouped.index.to_frame(index=False).astype(str)
        names = labels.iloc[:, 0].str.cat(labels.iloc[:, 1:], sep=INTERSECTION_SEP)
        key = {"attribute": INTERSECTION_SEP.join(columns), "group_name": names.to_numpy()}
        parts.append(pd.DataFrame(key).join(grouped.reset_index(drop=True)))
    return pd.concat(parts, ignore_index=True)


def with_complements(groups: pd.DataFrame) -> pd.DataFrame:
    """Add each group's rest of population (its attribute's total minus the group)."""
    if groups.empty:
        return GROUP_COUNTS.validate(_empty_counts())
    cells = groups[CELL_COLUMNS].astype("int64")
    rest = cells.groupby(groups["attribute"]).transform("sum") - cells
    keys = groups[["attribute", "group_name"]]
    frame = pd.concat(
        [keys.assign(subset="group").join(cells), keys.assign(subset="rest").join(rest)],
        ignore_index=True,
    )
    return GROUP_COUNTS.validate(frame)


def _empty_counts() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype=str) for c in ["attribute", "group_name", "subset"]})
    for c in CELL_COLUMNS:
        frame[c] = pd.Series(dtype="int64")
    return frame


def comparison_pairs(
    counts: pd.DataFrame, reference_groups: dict[str, str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Aligned (group, reference) count frames for every comparison an audit makes.

    Every group is compared with its rest of population (``reference='rest'``); where
    ``reference_groups`` names a group for the attribute, every other group of that attribute is
    also compared with it (``reference=<that group>``). An unknown reference group is an error
    (check_reference_groups).
    """
    check_reference_groups(counts, reference_groups)
    groups = counts[counts["subset"] == "group"].drop(columns="subset")
    rest = counts[counts["subset"] == "rest"].drop(columns="subset")
    keys = ["attribute", "group_name"]
    left = [groups.assign(reference="rest")]
    right = [groups[keys].merge(rest, on=keys, how="left")]
    for attribute, name in reference_groups.items():
        ref = groups[(groups["attribute"] == attribute) & (groups["group_name"] == name)]
        others = groups[(groups["attribute"] == attribute) & (groups["group_name"] != name)]
        left.append(others.assign(reference=name))
        right.append(others[keys].merge(ref.drop(columns="group_name"), on="attribute"))
    group = pd.concat(left, ignore_index=True)
    reference = pd.concat(right, ignore_index=True)
    return group, reference[CELL_COLUMNS]


def check_reference_groups(
    counts: pd.DataFrame, reference_groups: dict[str, str], audit_name: str | None = None
) -> None:
    """Raise UnknownReferenceGroup when a reference group has no valid predictions, naming the
    attribute's groups that have, the largest first (schemas.frames.listed)."""
    groups = counts[counts["subset"] == "group"]
    for attribute, name in reference_groups.items():
        present = groups[groups["attribute"] == attribute]
        if (present["group_name"] == name).any():
            continue
        sizes = present[[*COUNT_COLUMNS, "n_unlabelled"]].sum(axis=1)
        ranked = present.assign(size=sizes.to_numpy()).sort_values(
            ["size", "group_name"], ascending=[False, True]
        )["group_name"]
        where = f" (audit {audit_name!r})" if audit_name else ""
        raise UnknownReferenceGroup(
            f"reference group {name!r} of attribute {attribute!r} is not in the data{where}; "
            f"groups: {listed(ranked) or 'none'}"
        )


def label_completeness(
    counts: pd.DataFrame, alpha: float = 0.05, min_gap: float = 0.05
) -> pd.DataFrame:
    """Per group: labelled share of all valid predictions, overall and by decision.

    Per attribute, three chi-square tests of homogeneity (scipy.stats.chi2_contingency) of
    labelled/unlabelled x group: over all predictions, among predicted positives and among
    predicted negatives; ``p_value`` is the smallest, Bonferroni-adjusted for the three, and
    ``uneven`` says it is below ``alpha`` and the shares of that attribute's groups differ by more
    than ``min_gap`` in one of the three (a gap that matters, not only one a large audit can
    see): error-rate metrics (which use labelled rows only) are then biased by who receives a
    label, while PPR and PNR (every prediction) are not.
    """
    groups = counts[counts["subset"] == "group"] if "subset" in counts else counts
    pos_labelled = (groups["tp"] + groups["fp"]).to_numpy(float)
    neg_labelled = (groups["fn"] + groups["tn"]).to_numpy(float)
    pos_all = pos_labelled + groups["unlabelled_pos"].to_numpy(float)
    neg_all = neg_labelled + groups["unlabelled_neg"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        frame = groups[["attribute", "group_name"]].assign(
            predictions=pos_all + neg_all,
            labelled=pos_labelled + neg_labelled,
            completeness=(pos_labelled + neg_labelled) / (pos_all + neg_all),
            completeness_predicted_pos=pos_labelled / pos_all,
            completeness_predicted_neg=neg_labelled / neg_all,
        )
    p_values, gaps = {}, {}
    for attribute, part in frame.groupby("attribute", sort=False):
        shares = part[["completeness", "completeness_predicted_pos", "completeness_predicted_neg"]]
        gaps[attribute] = float(np.nan_to_num((shares.max() - shares.min()).max()))
        index = part.index
        tables = [
            (part["labelled"], part["predictions"]),
            (pd.Series(pos_labelled, groups.index)[index], pd.Series(pos_all, groups.index)[index]),
            (pd.Series(neg_labelled, groups.index)[index], pd.Series(neg_all, groups.index)[index]),
        ]
        p_values[attribute] = min(3 * _homogeneity(*t) for t in tables)
    p = frame["attribute"].map(p_values).clip(upper=1.0)
    gap = frame["attribute"].map(gaps)
    return frame.assign(p_value=p, uneven=(p < alpha) & (gap > min_gap)).reset_index(drop=True)


def _homogeneity(labelled: pd.Series, total: pd.Series) -> float:
    """p-value of the chi-square test that the labelled share is the same in every group."""
    keep = total.to_numpy() > 0
    table = np.stack([labelled.to_numpy()[keep], (total - labelled).to_numpy()[keep]], axis=1)
    if len(table) < 2 or (table.sum(axis=0) == 0).any():
        return 1.0  # one group, or nobody (or everybody) labelled: nothing can differ
    return float(stats.chi2_contingency(table, correction=False).pvalue)


def completeness_warnings(completeness: pd.DataFrame) -> list[str]:
    """One line per attribute whose label completeness differs between groups beyond chance."""
    lines = []
    for attribute, part in completeness[completeness["uneven"]].groupby("attribute", sort=True):
        shares = ", ".join(
            f"{r.group_name} {r.completeness:.0%}" for r in part.itertuples() if r.predictions > 0
        )
        lines.append(
            f"label completeness differs between {attribute} groups (chi-square p "
            f"{part['p_value'].iloc[0]:.2g}): {shares}; error-rate metrics are biased by who "
            "gets a label"
        )
    return lines
