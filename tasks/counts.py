"""Counts stage: reduce valid predictions to confusion counts per group (../shared/DESIGN.md).

One row per (attribute, group, subset): ``subset='group'`` counts the group itself and
``subset='rest'`` its rest-of-population complement (the attribute's total minus the group). Each
configured intersection (e.g. race x sex) is one more attribute. Rows whose outcome is still unknown
(y_true NULL) count only in ``n_unlabelled``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from biasaudit.schemas.config import INTERSECTION_SEP
from biasaudit.schemas.frames import COUNT_COLUMNS, COUNTS

# Cell code 2*y_true + y_pred: tn=0, fp=1, fn=2, tp=3; 4 = outcome unknown.
_CELLS = ["tn", "fp", "fn", "tp", "n_unlabelled"]
CELL_COLUMNS = COUNT_COLUMNS + ["n_unlabelled"]


def cell_codes(y_true: pd.Series, y_pred: pd.Series) -> np.ndarray:
    """The confusion cell of each prediction (see _CELLS)."""
    truth = y_true.to_numpy(dtype="float64")
    code = 2 * np.nan_to_num(truth, nan=0.0).astype(np.int8) + y_pred.to_numpy(dtype=np.int8)
    return np.where(np.isnan(truth), 4, code).astype(np.int8)


def group_counts(valid: pd.DataFrame, attributes: list[str], intersections: list[list[str]]):
    """Counts frame (schemas.frames.COUNTS) of every attribute and intersection, with complements."""
    return with_complements(cell_counts(valid, attributes, intersections))


def cell_counts(valid: pd.DataFrame, attributes: list[str], intersections: list[list[str]]):
    """Group rows only (attribute, group_name and the cell counts): additive over chunks of rows,
    so streamed chunks fold by summing (fold_counts)."""
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
        grouped = grouped.unstack("cell", fill_value=0).reindex(columns=range(5), fill_value=0)
        grouped.columns = _CELLS
        grouped = grouped[CELL_COLUMNS].astype("int64")
        labels = grouped.index.to_frame(index=False).astype(str)
        names = labels.iloc[:, 0].str.cat(labels.iloc[:, 1:], sep=INTERSECTION_SEP)
        key = {"attribute": INTERSECTION_SEP.join(columns), "group_name": names.to_numpy()}
        parts.append(pd.DataFrame(key).join(grouped.reset_index(drop=True)))
    return pd.concat(parts, ignore_index=True)


def fold_counts(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Sum group rows of several chunks (cell_counts outputs) per attribute and group."""
    frame = pd.concat(parts, ignore_index=True)
    if frame.empty:
        return frame
    return frame.groupby(["attribute", "group_name"], sort=True, as_index=False)[CELL_COLUMNS].sum()


def with_complements(groups: pd.DataFrame) -> pd.DataFrame:
    """Add each group's rest of population (its attribute's total minus the group)."""
    if groups.empty:
        return COUNTS.validate(_empty_counts())
    cells = groups[CELL_COLUMNS].astype("int64")
    rest = cells.groupby(groups["attribute"]).transform("sum") - cells
    keys = groups[["attribute", "group_name"]]
    frame = pd.concat(
        [keys.assign(subset="group").join(cells), keys.assign(subset="rest").join(rest)],
        ignore_index=True,
    )
    return COUNTS.validate(frame)


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
    also compared with it (``reference=<that group>``). An unknown reference group is an error.
    """
    groups = counts[counts["subset"] == "group"].drop(columns="subset")
    rest = counts[counts["subset"] == "rest"].drop(columns="subset")
    keys = ["attribute", "group_name"]
    left = [groups.assign(reference="rest")]
    right = [groups[keys].merge(rest, on=keys, how="left")]
    for attribute, name in reference_groups.items():
        ref = groups[(groups["attribute"] == attribute) & (groups["group_name"] == name)]
        if ref.empty:
            raise LookupError(f"reference group {name!r} of {attribute!r} has no predictions")
        others = groups[(groups["attribute"] == attribute) & (groups["group_name"] != name)]
        left.append(others.assign(reference=name))
        right.append(others[keys].merge(ref.drop(columns="group_name"), on="attribute"))
    group = pd.concat(left, ignore_index=True)
    reference = pd.concat(right, ignore_index=True)
    return group, reference[CELL_COLUMNS]
