"""The rates that the comparison stages (planning, detection, MATCH) test, and which comparisons
they may test at all. Pure functions on the aligned (group, reference) count frames of
tasks.counts.comparison_pairs; shared by those stages so that they test the same family.

- A rate metric is x/d with x and d sums of count columns (schemas.metric_ids.rate_cells): PPR and
  PNR over every valid prediction, labelled or not (a decision needs no outcome), the others over
  labelled ones.
- Only the rates of the model's decisions are tested (schemas.metric_ids.TESTED_RATES): a base
  rate of the labels alone (prevalence) differs between groups whatever the model does, so it is
  context, never a disparity.
- One hypothesis, one test: for a two-valued attribute, "A vs rest", "B vs rest"
  and "A vs B" are the same comparison; it is tested once (against the named reference if there is
  one, else the first group against the rest) and the others carry the reason.
- ``min_group_size``: a comparison whose group (or named reference) has fewer valid predictions
  keeps its metrics but is not tested, with the reason (a handful of predictions says nothing).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from biasaudit.schemas.frames import COUNT_COLUMNS
from biasaudit.schemas.metric_ids import COMPLEMENT, TESTED_RATES, UNLABELLED_COLUMNS, rate_cells
from biasaudit.schemas.results import PAIR_KEY

# The reasons below without one row's numbers and names: the kinds a summary counts by.
_REASON_KINDS = [
    (re.compile(r"^(group|reference) size \d+ < (min_group_size \d+)$"), r"\1 below \2"),
    (re.compile(r"^same comparison as .*"), "same comparison as another (two-valued attribute)"),
    (re.compile(r"^same test as .*"), "complement of a rate already tested (e.g. fnr = 1 − tpr)"),
]


def _size(frame: pd.DataFrame) -> np.ndarray:
    columns = [c for c in (*COUNT_COLUMNS, *UNLABELLED_COLUMNS) if c in frame]
    return frame[columns].sum(axis=1).to_numpy(dtype="float64")


def _sum(frame: pd.DataFrame, columns: tuple[str, ...]) -> np.ndarray:
    present = [c for c in columns if c in frame]
    return frame[present].sum(axis=1).to_numpy(dtype="float64")


def comparison_reasons(
    group: pd.DataFrame, reference: pd.DataFrame, min_group_size: int = 0
) -> np.ndarray:
    """Per comparison row: why it is not tested (object array, None where it is tested)."""
    reason = np.full(len(group), None, dtype=object)
    size_group = _size(group)
    size_reference = np.broadcast_to(_size(reference), size_group.shape)  # one row: for all
    if "reference" in group:
        names = group["reference"].to_numpy()
    else:
        names = np.full(len(group), "rest", dtype=object)
    small = size_group < min_group_size
    reason[small] = [
        f"group size {int(n)} < min_group_size {min_group_size}" for n in size_group[small]
    ]
    small_ref = (reason == None) & (size_reference < min_group_size)
    reason[small_ref] = [
        f"reference size {int(n)} < min_group_size {min_group_size}"
        for n in size_reference[small_ref]
    ]
    if "attribute" not in group or "group_name" not in group:
        return reason
    vs_rest = group[names == "rest"]
    for attribute, part in vs_rest.groupby("attribute", sort=False):
        if part["group_name"].nunique() != 2:
            continue
        first = min(part["group_name"])
        here = (group["attribute"] == attribute).to_numpy()
        named = here & (names != "rest")
        if named.any():
            keep = np.flatnonzero(named)[0]
        else:
            keep = np.flatnonzero(
                here & (group["group_name"] == first).to_numpy() & (names == "rest")
            )[0]
        kept = f"{group['group_name'].iloc[keep]} vs {names[keep]}"
        duplicate = here & (np.arange(len(group)) != keep) & (reason == None)
        reason[duplicate] = f"same comparison as {kept} (two-valued attribute: tested once)"
    return reason


def reason_kind(reason: str) -> str:
    """The kind of a comparison's reason (comparison_reasons, comparison_rates): e.g. every
    ``group size 11 < min_group_size 30`` is ``group below min_group_size 30``."""
    for pattern, kind in _REASON_KINDS:
        if pattern.match(reason):
            return pattern.sub(kind, reason)
    return reason


def comparison_rates(
    group: pd.DataFrame, reference: pd.DataFrame, metrics, *, min_group_size: int = 0
) -> pd.DataFrame:
    """Long frame, one row per comparison and rate metric (in ``metrics`` order): the keys,
    ``numerator_group``, ``denominator_group``, ``numerator_reference``,
    ``denominator_reference``, ``size_group``, ``size_reference`` (valid predictions) and
    ``reason`` (comparison_reasons; a zero denominator; or the complement of a rate listed
    before it, e.g. fnr = 1 − tpr: the same hypothesis, tested once), None where the rate can be
    tested."""
    rates = [m for m in dict.fromkeys(metrics) if m in TESTED_RATES]
    base = group[PAIR_KEY].reset_index(drop=True)
    why = comparison_reasons(group, reference, min_group_size)
    size_group, size_reference = _size(group), _size(reference)
    blocks = []
    for metric in rates:
        numerator, denominator = rate_cells(metric)
        x2, d2 = _sum(group, numerator), _sum(group, denominator)
        x1, d1 = _sum(reference, numerator), _sum(reference, denominator)
        reason = np.where(d2 == 0, "no denominator in group", None)
        reason = np.where((d2 > 0) & (d1 == 0), "no denominator in reference", reason)
        reason = np.where(why != None, why, reason)
        twin = COMPLEMENT.get(metric)
        if twin in rates[: rates.index(metric)]:  # its complement is tested already
            reason = np.where(reason == None, f"same test as {twin} (= 1 − {twin})", reason)
        blocks.append(
            base.assign(
                metric=metric,
                numerator_group=x2,
                denominator_group=d2,
                numerator_reference=x1,
                denominator_reference=d1,
                size_group=size_group,
                size_reference=size_reference,
                reason=reason,
            )
        )
    if not blocks:
        return base.iloc[:0].assign(metric=pd.Series(dtype=str))
    out = pd.concat(blocks, ignore_index=True)
    reason = out["reason"].astype(object)
    out["reason"] = reason.where(reason.notna(), None)
    return out
