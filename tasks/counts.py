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

from biasaudit.schemas.config import INTERSECTION_SEP, UnknownReferenceGroup
from biasaudit.schemas.frames import COUNT_COLUMNS, listed
from biasaudit.schemas.metric_ids import UNLABELLED_COLUMNS
from biasaudit.schemas.results import GROUP_COUNTS
from biasaudit.tasks import distributions
from biasaudit.tasks.multiplicity import holm_adjust

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
    """Counts frame (schemas.results.GROUP_COUNTS) of every attribute and intersection, with
    complements."""
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
    """Per group: labelled share of all valid predictions, overall and by decision, and whether
    the labelled shares of selections and rejections differ there.

    Which metrics missing labels bias, under the two mechanisms labelled rows cannot tell apart.
    *By decision*: a group's predictions with decision d keep their label with probability r_d,
    whatever their outcome. Its labelled counts are then r1·TP, r1·FP, r0·FN, r0·TN in
    expectation, so a metric within one decision column (PPV, FDR, NPV, FOR) is unbiased, while
    TPR, FPR and their complements are not: their odds from labelled rows are the true odds times
    r1/r0 (r1 > r0: TPR and FPR overstated, FNR and TNR understated). *By outcome*: rows with
    outcome y keep their label with probability s_y, whatever the decision. The labelled counts
    are s1·TP, s0·FP, s1·FN, s0·TN, so a metric within one outcome row (TPR, FNR, FPR, TNR, and
    the prevalence threshold made of TPR and FPR) is unbiased, while PPV, FDR, NPV and FOR are
    not: PPV's odds are the true odds times s1/s0. Under either, prevalence (its odds times r1/r0
    or s1/s0) and the metrics mixing both decisions and outcomes (accuracy, error rate, F1, MCC,
    ...) are biased; PPR and PNR count every prediction and are not. Both mechanisms show the same
    way in the counts: the labelled share of selections, (s1·TP + s0·FP)/(TP + FP) by outcome,
    differs from that of rejections whenever the decision carries information about the outcome;
    and any table of labelled counts with unlabelled counts by decision is produced exactly by a
    population under either mechanism (r_d the observed shares; or s_y solved from them), so no
    test on these counts can tell which one holds. The warning says so and names both lists
    (tests/test_counts.py simulates both). Only data beyond these counts can, such as when each
    label arrived (arrival_evidence). If the share is the same for both decisions (labels missing
    by group, or at random), no metric of the group is biased, however the share differs between
    groups.

    The test, per group: Fisher's exact test of labelled/unlabelled x decision (``p_value``), Holm-
    adjusted over every group of every attribute (``p_adjusted``), so that an audit whose labels
    do not depend on the decision is warned about with probability at most ``alpha``
    (benchmarks/label_missingness.py). ``uneven``: ``p_adjusted`` below ``alpha`` and the two
    shares more than ``min_gap`` apart (a gap that matters, not only one a large audit can see).
    """
    groups = counts[counts["subset"] == "group"] if "subset" in counts else counts
    pos_labelled = (groups["tp"] + groups["fp"]).to_numpy(np.int64)
    neg_labelled = (groups["fn"] + groups["tn"]).to_numpy(np.int64)
    pos_unlabelled = groups["unlabelled_pos"].to_numpy(np.int64)
    neg_unlabelled = groups["unlabelled_neg"].to_numpy(np.int64)
    pos_all, neg_all = pos_labelled + pos_unlabelled, neg_labelled + neg_unlabelled
    with np.errstate(divide="ignore", invalid="ignore"):
        frame = groups[["attribute", "group_name"]].assign(
            predictions=pos_all + neg_all,
            labelled=pos_labelled + neg_labelled,
            completeness=(pos_labelled + neg_labelled) / (pos_all + neg_all),
            completeness_predicted_pos=pos_labelled / pos_all,
            completeness_predicted_neg=neg_labelled / neg_all,
        )
    p = fisher_two_sided(pos_labelled, pos_unlabelled, neg_labelled, neg_unlabelled)
    adjusted = holm_adjust(p) if p.size else p
    gap = np.abs(frame["completeness_predicted_pos"] - frame["completeness_predicted_neg"])
    return frame.assign(
        p_value=p, p_adjusted=adjusted, uneven=(adjusted < alpha) & (gap.fillna(0) > min_gap)
    ).reset_index(drop=True)


def fisher_two_sided(a, b, c, d) -> np.ndarray:
    """Two-sided p-values of Fisher's exact test of the 2x2 tables [[a, b], [c, d]], all at once:
    under the hypergeometric law of ``a`` given the margins, the probability of the tables no more
    likely than the observed one (within a relative 1e-14, as scipy.stats.fisher_exact decides
    each), 1 where a row or a column is empty. The tables beyond the mode that count form a tail,
    found by a bisection of the pmf, which is monotone on each side of the mode."""
    a, b, c, d = (np.asarray(v, dtype=np.int64) for v in (a, b, c, d))
    empty = (a + b == 0) | (c + d == 0) | (a + c == 0) | (b + d == 0)
    a, b, c, d = (np.where(empty, 1, v) for v in (a, b, c, d))  # a table of p = 1 in their place
    n1, n, total = a + b, a + c, a + b + c + d
    law = (total, n1, n)  # the hypergeometric law of a: n of total drawn, n1 of them marked
    mode = (n + 1) * (n1 + 1) // (total + 2)
    exact, most = distributions.hypergeom_pmf(a, *law), distributions.hypergeom_pmf(mode, *law)

    def on(rows: np.ndarray, function, x: np.ndarray) -> np.ndarray:
        """``function`` (the hypergeometric pmf, cdf or sf) at ``x`` of the selected tables only
        (each value is that table's own: the functions work table by table); 0 elsewhere."""
        out = np.zeros(x.shape)
        out[rows] = function(x[rows], total[rows], n1[rows], n[rows])
        return out

    level = exact * (1 + _TIES)  # a table this likely or less is as extreme as the observed one
    at_mode = np.abs(exact - most) <= _TIES * np.maximum(exact, most)
    below = a < mode  # then the other tail is above the mode, beyond the last x >= the level
    lo = np.where(below, mode, np.maximum(0, n - (c + d)))
    hi = np.where(below, np.minimum(n, n1), mode)
    while np.any(open_ := lo < hi):
        middle = np.where(below, (lo + hi + 1) // 2, (lo + hi) // 2)
        # a pmf exactly at the level: as scipy's bisections decide; tables already bisected are
        # not evaluated again (their bounds no longer move)
        likelier = on(open_, distributions.hypergeom_pmf, middle)
        reached = np.where(below, likelier >= level, likelier > level)
        low_moves = open_ & (reached == below)  # below: up to a reached x; above: past a missed one
        high_moves = open_ & ~low_moves
        lo = np.where(low_moves, np.where(below, middle, middle + 1), lo)
        hi = np.where(high_moves, np.where(below, middle - 1, middle), hi)
    above = ~below  # each table's two tails: below the mode a's lower one, above it its upper one
    cdf, sf = distributions.hypergeom_cdf, distributions.hypergeom_sf
    p = np.where(
        below,
        on(below, cdf, a) + on(below, sf, lo),
        on(above, sf, a - 1) + on(above, cdf, lo - 1),
    )
    return np.where(empty | at_mode, 1.0, np.minimum(p, 1.0))


_TIES = 1e-14  # relative difference within which two tables are as likely (scipy's epsilon)


def arrival_evidence(
    rows: pd.DataFrame,
    attributes: list[str],
    intersections: list[list[str]],
    label_time: str,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Per group: whether its labels' arrival times show labels missing by outcome.

    A label still missing is one that has not arrived (yet). If labels go missing by decision
    only, how long a label takes does not depend on the outcome among predictions with the same
    decision; if it does (labels of one outcome arrive later), the labels still missing are
    mostly of that outcome: missingness by outcome. The test, per group and decision, of the
    labelled rows: Fisher's exact test of outcome x a delay above the cell's median delay (the
    delay from ``predicted_at`` where the rows have it, else the arrival time itself), the two
    decisions' p-values Bonferroni-combined (twice the smaller), Holm-adjusted over every group
    of every attribute (``p_adjusted``); ``by_outcome``: ``p_adjusted`` below ``alpha``. Also the
    share of late labels among labelled positives and negatives (``late_positive``,
    ``late_negative``: above their cell's median delay). With arrival that follows the decision
    only it says by outcome in at most ``alpha`` of audits (tests/test_counts.py)."""
    arrival = pd.to_datetime(rows[label_time], utc=True)
    if "predicted_at" in rows:
        delay = (arrival - pd.to_datetime(rows["predicted_at"], utc=True)).dt.total_seconds()
    else:
        delay = (arrival - arrival.min()).dt.total_seconds()
    known = rows["y_true"].notna().to_numpy() & delay.notna().to_numpy()
    frame = rows.loc[known].assign(_delay=delay[known].to_numpy())
    parts = []
    for columns in [[a] for a in attributes] + intersections:
        key = _group_key(frame, columns)
        cell = [key, frame["y_pred"].to_numpy()]
        late = frame["_delay"] > frame.groupby(cell)["_delay"].transform("median")
        parts.append(_arrival_tests(columns, key, frame, late, pd.Series(1, index=frame.index)))
    return _arrival_adjusted(parts, alpha)


def arrival_evidence_of_counts(
    counts: pd.DataFrame, attributes: list[str], intersections: list[list[str]], alpha: float
) -> pd.DataFrame:
    """arrival_evidence from labelled rows counted per (attributes, y_true, y_pred, late, n), as
    an audit run's scan counts them (db.sources.cells.arrival_counts: ``late`` above the median
    delay of the labelled rows with the same decision, one threshold per decision for every
    group)."""
    parts = [
        _arrival_tests(columns, _group_key(counts, columns), counts, counts["late"], counts["n"])
        for columns in [[a] for a in attributes] + intersections
    ]
    return _arrival_adjusted(parts, alpha)


def _group_key(frame: pd.DataFrame, columns: list[str]) -> pd.Series:
    """Each row's group of the attribute or intersection ``columns``."""
    key = frame[columns[0]].astype(str)
    for column in columns[1:]:
        key = key.str.cat(frame[column].astype(str), sep=INTERSECTION_SEP)
    return key


def _arrival_tests(
    columns: list[str], key: pd.Series, frame: pd.DataFrame, late: pd.Series, n: pd.Series
) -> pd.DataFrame:
    """Per group of ``columns``: the Bonferroni-combined Fisher p-value of outcome x ``late``
    over its two decisions, and the late shares of positives and negatives, from ``n`` rows per
    row of ``frame`` (y_true, y_pred)."""
    table = (
        pd.DataFrame(
            {
                "g": key.to_numpy(),
                "d": frame["y_pred"].to_numpy(),
                "y": frame["y_true"].to_numpy() == 1,
                "late": late.to_numpy(dtype=bool),
                "n": n.to_numpy(dtype="int64"),
            }
        )
        .groupby(["g", "d", "y", "late"])["n"]
        .sum()
        .unstack(["y", "late"], fill_value=0)
        .reindex(columns=pd.MultiIndex.from_product([[True, False], [True, False]]), fill_value=0)
    )
    p = fisher_two_sided(
        table[(True, True)], table[(True, False)], table[(False, True)], table[(False, False)]
    )
    per_cell = pd.DataFrame({"p": p}, index=table.index).reset_index()
    combined = per_cell.groupby("g")["p"].min().mul(2).clip(upper=1.0)
    counts = table.groupby(level="g").sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        positive = counts[(True, True)] / (counts[(True, True)] + counts[(True, False)])
        negative = counts[(False, True)] / (counts[(False, True)] + counts[(False, False)])
    return pd.DataFrame(
        {
            "attribute": INTERSECTION_SEP.join(columns),
            "group_name": combined.index.astype(str),
            "p_value": combined.to_numpy(),
            "late_positive": positive.reindex(combined.index).to_numpy(),
            "late_negative": negative.reindex(combined.index).to_numpy(),
        }
    )


def _arrival_adjusted(parts: list[pd.DataFrame], alpha: float) -> pd.DataFrame:
    """The groups' arrival tests Holm-adjusted over every group of every attribute."""
    parts = [p for p in parts if len(p)]
    evidence = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["attribute", "group_name", "p_value", "late_positive", "late_negative"]
    )
    p = evidence["p_value"].to_numpy(dtype=float)
    adjusted = holm_adjust(p) if p.size else p
    return evidence.assign(p_adjusted=adjusted, by_outcome=adjusted < alpha)


def completeness_warnings(
    completeness: pd.DataFrame, arrival: pd.DataFrame | None = None
) -> list[str]:
    """One line per attribute with groups whose labelled shares differ by decision, naming the
    groups, their labelled shares by decision and the metrics biased under each mechanism that
    could have made them (label_completeness); with ``arrival`` (arrival_evidence, from the
    labels' arrival times), what those times say of each such group instead."""
    lines = []
    for attribute, part in completeness[completeness["uneven"]].groupby("attribute", sort=True):
        shares = ", ".join(
            f"{r.group_name} ({r.completeness_predicted_pos:.0%} of selected, "
            f"{r.completeness_predicted_neg:.0%} of rejected)"
            for r in part.itertuples()
        )
        line = (
            f"labelled shares differ by decision in {attribute} groups {shares}, Holm-adjusted "
            f"Fisher p {part['p_adjusted'].min():.2g}: "
        )
        told = None if arrival is None else arrival[arrival["attribute"] == attribute]
        if told is None or told.empty:
            lines.append(line + LABEL_BIAS)
            continue
        told = told.set_index("group_name").reindex(part["group_name"].astype(str))
        said = []
        for name, r in told.iterrows():
            if bool(r["by_outcome"]):
                later = "positives" if r["late_positive"] > r["late_negative"] else "negatives"
                other = "negatives" if later == "positives" else "positives"
                said.append(
                    f"in {name} labels of {later} arrive later than those of {other} with the "
                    f"same decision ({r['late_positive']:.0%} of positives' and "
                    f"{r['late_negative']:.0%} of negatives' labels late, Holm-adjusted Fisher p "
                    f"{r['p_adjusted']:.2g}): labels are likely missing by the outcome: "
                    f"{OUTCOME_BIAS}"
                )
            elif np.isfinite(r["p_adjusted"]):
                said.append(
                    f"in {name} the arrival times are consistent with labels missing by the "
                    f"decision (no outcome arrives later within a decision, Holm-adjusted Fisher "
                    f"p {r['p_adjusted']:.2g}; this does not prove it): {DECISION_BIAS}"
                )
            else:
                said.append(f"in {name} no arrival times: {LABEL_BIAS}")
        lines.append(line + "; ".join(said))
    return lines


DECISION_BIAS = (
    "TPR, FPR, FNR and TNR are biased, PPV, FDR, NPV and FOR are not; prevalence and the metrics "
    "mixing both (accuracy, F1, MCC, ...) are biased, the selection rate (every prediction) is not"
)
"""What labels missing by decision do to a group's metrics (label_completeness)."""
OUTCOME_BIAS = (
    "PPV, FDR, NPV and FOR are biased, TPR, FPR, FNR and TNR are not; prevalence and the metrics "
    "mixing both (accuracy, F1, MCC, ...) are biased, the selection rate (every prediction) is not"
)
"""What labels missing by outcome do to a group's metrics (label_completeness)."""
LABEL_BIAS = (
    "labelled rows alone cannot tell whether labels go missing by the decision or by the outcome; "
    "by the decision: TPR, FPR, FNR and TNR are biased, PPV, FDR, NPV and FOR are not; "
    "by the outcome: PPV, FDR, NPV and FOR are biased, TPR, FPR, FNR and TNR are not; "
    "under either, prevalence and the metrics mixing both (accuracy, F1, MCC, ...) are biased, "
    "the selection rate (every prediction) is not"
)
"""What labels missing by decision or by outcome do to a group's metrics, when the data cannot
tell which (label_completeness)."""
