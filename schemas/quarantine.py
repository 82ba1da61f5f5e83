"""Validation: split predictions into valid rows and quarantined failures with their reasons.

Every failure of the Pandera schema (``schemas.frames.predictions_schema``), and with a result
store every group name it cannot hold (``store_failures``), becomes one quarantine record (row,
column, value, rule) with the whole row kept; rows with any failure leave the audit.
Nothing is dropped silently: accepted + quarantined = read.
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

import numpy as np
import pandas as pd
import pandera.pandas as pa

from biasaudit.schemas.config import INTERSECTION_SEP
from biasaudit.schemas.frames import (
    NOT_NAN,
    as_binary,
    as_number,
    canonical_text,
    forget_columns,
    listed,
    parse_timestamps,
    predictions_schema,
    text_of,
)
from biasaudit.schemas.names import StoreLimits

QUARANTINE_COLUMNS = ["row_number", "row_ref", "column_name", "value", "rule", "row"]
FAILURE_COLUMNS = ["column", "check", "failure_case", "index"]
# Rules of group names the result store cannot hold (as db.store.load's for the predictions table).
NO_NUL = "no_nul_byte"
# Longest row reference and column name a quarantine record keeps (its table's columns).
MAX_REF_CHARS = 128
NUL = "\x00"


def _no_nul(value):
    """Text with NUL bytes written as ``\\x00`` (PostgreSQL text and JSON cannot hold NUL)."""
    if isinstance(value, str):
        return value.replace(NUL, "\\x00")
    if isinstance(value, dict):
        return {_no_nul(k): _no_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nul(v) for v in value]
    return value


def storable(quarantine: pd.DataFrame) -> pd.DataFrame:
    """Quarantine records any store can hold: NUL bytes escaped, references cut to their column
    (the whole original value stays in ``value`` and ``row``)."""
    def cut(value):
        if not isinstance(value, str) or len(value) <= MAX_REF_CHARS:
            return value
        return value[: MAX_REF_CHARS - 1] + "\u2026"

    return quarantine.assign(
        row_ref=quarantine["row_ref"].map(lambda v: cut(_no_nul(v))),
        column_name=quarantine["column_name"].map(lambda v: cut(_no_nul(v))),
        value=quarantine["value"].map(_no_nul),
        row=quarantine["row"].map(_no_nul),
    )


class TooManyInvalidRows(ValueError):
    """More of the window failed validation than the audit's ``max_invalid_fraction`` allows."""


class NoValidRows(TooManyInvalidRows):
    """Every row read was quarantined: nothing is left to audit, whatever the allowed fraction."""


class SchemaFailure(ValueError):
    """The frame as a whole does not fit the schema (e.g. a missing column): no row can be
    trusted."""


def _rows_as_json(frame: pd.DataFrame) -> list[dict]:
    """Rows as JSON records, every value kept (Decimal, UUID, bytes and dates as their text)."""
    def kept(v):
        if isinstance(v, (float, Decimal)) and pd.isna(v):  # NaN: no missing value, JSON has none
            return "NaN"
        return v if v is None or isinstance(v, (str, int, float, bool)) else str(v)

    text = frame.astype(object).map(kept)
    return json.loads(text.to_json(orient="records", date_format="iso", default_handler=str))


def store_failures(
    frame: pd.DataFrame, attributes: list[str], intersections: list[list[str]], store: StoreLimits
) -> pd.DataFrame:
    """Failure cases (as ``failures``) of the group names ``store`` cannot hold: an attribute's
    value (its canonical text) holding NUL where the store's text cannot (``no_nul_byte``) or
    longer than its group key (``max_length_N``), and an intersection's label (``race x sex``)
    longer than that though each of its values fits, under the intersection's name."""
    text = {a: text_of(frame[a]) for a in attributes}
    length = {a: text[a].str.len().fillna(-1).to_numpy(dtype="int64") for a in attributes}
    limit = store.group_chars
    cases = []

    def case(column: str, rule: str, failed: np.ndarray, values: pd.Series) -> None:
        rows = np.flatnonzero(failed)
        if len(rows):
            found = {"column": column, "check": rule, "failure_case": values.iloc[rows].to_numpy()}
            cases.append(pd.DataFrame({**found, "index": rows}))

    for attribute in attributes:
        if not store.nul:
            nul = text[attribute].str.contains(NUL, regex=False).fillna(False)
            case(attribute, NO_NUL, nul.to_numpy(dtype=bool), text[attribute])
        if limit is not None:
            case(attribute, f"max_length_{limit}", length[attribute] > limit, text[attribute])
    for combo in intersections if limit is not None else []:
        parts = np.stack([length[a] for a in combo])
        label = parts.sum(axis=0) + len(INTERSECTION_SEP) * (len(combo) - 1)
        failed = (label > limit) & (parts >= 0).all(axis=0) & (parts <= limit).all(axis=0)
        if failed.any():  # the labels joined only then: most windows have none
            labels = text[combo[0]].str.cat([text[a] for a in combo[1:]], sep=INTERSECTION_SEP)
            case(INTERSECTION_SEP.join(combo), f"max_length_{limit}", failed, labels)
    return pd.concat(cases, ignore_index=True) if cases else pd.DataFrame(columns=FAILURE_COLUMNS)


def failures(
    frame: pd.DataFrame,
    attributes: list[str],
    now: datetime | None = None,
    decision: bool = False,
    *,
    intersections: list[list[str]] | None = None,
    store: StoreLimits | None = None,
) -> pd.DataFrame:
    """The row-level failures of ``frame`` (index 0..n-1) under the predictions schema: Pandera's
    failure cases (columns ``column``, ``check``, ``failure_case``, ``index``), and with a
    ``store`` the group names it cannot hold (``store_failures``); a frame-level failure raises
    SchemaFailure."""
    found = _schema_failures(frame, attributes, now, decision)
    if store is None:
        return found
    unstorable = store_failures(frame, attributes, intersections or [], store)
    parts = [part for part in (found, unstorable) if len(part)]
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else (parts or [found])[0]


def _schema_failures(
    frame: pd.DataFrame, attributes: list[str], now: datetime | None, decision: bool
) -> pd.DataFrame:
    """Pandera's row-level failure cases of ``frame`` under the predictions schema."""
    schema = predictions_schema(attributes, now, decision)
    try:
        forget_columns()
        schema.validate(frame, lazy=True)
    except pa.errors.SchemaErrors as exc:
        found = exc.failure_cases
        frame_level = found[found["index"].isna()]
        missing = frame_level.loc[frame_level["check"] == "column_in_dataframe", "failure_case"]
        if len(missing):
            raise SchemaFailure(
                f"predictions lack the column(s) {listed(missing)}; "
                f"the columns present are {listed(frame.columns)}"
            ) from None
        if not frame_level.empty:
            first = frame_level.iloc[0]
            raise SchemaFailure(
                f"predictions do not fit the schema: {first['check']} on column {first['column']} "
                f"({len(frame_level)} frame-level failure(s))"
            ) from None
        return found
    finally:
        forget_columns()
    return pd.DataFrame(columns=FAILURE_COLUMNS)


def split_valid(
    frame: pd.DataFrame,
    attributes: list[str],
    now: datetime | None = None,
    decision: bool = False,
    row_numbers: np.ndarray | None = None,
    *,
    intersections: list[list[str]] | None = None,
    store: StoreLimits | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(valid rows with y_true as float 0/1/NaN and y_pred as int8, quarantine records).

    Attributes of valid rows become their canonical text (schemas.frames.canonical_text),
    timestamps (where the frame has them) UTC datetimes. With ``decision`` the rows carry a
    ``decision_score`` (a float in the valid rows) instead of a ``y_pred`` (decided from the
    threshold in db.sources.cells.cells_of).

    Valid rows keep their position in ``frame`` as index; each quarantine record names its row by
    that position (``row_number``; ``row_numbers[position]`` when given, e.g. the rows' places in
    a streamed window) and by prediction id (``row_ref``).

    ``now`` is the moment after which a timestamp counts as in the future (default: the clock).
    With a result ``store``, rows with a group name it cannot hold (an attribute's value or a
    label of one of the audit's ``intersections``) are quarantined too (``store_failures``).
    """
    frame = frame.reset_index(drop=True)
    found = failures(frame, attributes, now, decision, intersections=intersections, store=store)
    positions = found["index"].astype("int64").to_numpy()
    numbers = positions if row_numbers is None else np.asarray(row_numbers)[positions]
    bad_index = pd.Index(pd.unique(positions))
    row_json = dict(zip(bad_index, _rows_as_json(frame.loc[bad_index])))
    ids = frame["prediction_id"]
    quarantine = pd.DataFrame(
        {
            "row_number": numbers,
            "row_ref": [
                str(ids[i]) if pd.notna(ids[i]) else f"<row {n}>"
                for i, n in zip(positions, numbers)
            ],
            "column_name": found["column"].to_numpy(),
            "value": [
                "NaN" if rule == NOT_NAN else None if pd.isna(v) else str(v)  # NaN however spelt
                for v, rule in zip(found["failure_case"], found["check"])
            ],
            "rule": found["check"].astype(str).to_numpy(),
            "row": [row_json[i] for i in positions],
        },
        columns=QUARANTINE_COLUMNS,
    )
    quarantine = storable(quarantine)
    valid = frame.drop(index=bad_index)
    valid = valid.assign(y_true=as_binary(valid["y_true"]))
    if "predicted_at" in valid:
        valid["predicted_at"] = parse_timestamps(valid["predicted_at"])
    if decision:
        valid["decision_score"] = as_number(valid["decision_score"])
    else:
        valid["y_pred"] = as_binary(valid["y_pred"]).astype("int8")
    for attribute in attributes:
        valid[attribute] = canonical_text(valid[attribute]).astype(str)
    return valid, quarantine


def unusable_columns(read: int, quarantine: pd.DataFrame) -> str:
    """The columns none of whose ``read`` values was accepted, each with its rule (which says
    what is accepted) and an example value, as one line; empty when no column failed every row."""
    rows = quarantine.groupby("column_name")["row_number"].nunique()
    first = [
        quarantine[quarantine["column_name"] == column].iloc[0]
        for column, count in rows.items()
        if count == read
    ]
    return "; ".join(
        f"no value of column {r['column_name']!r} is accepted "
        f"({r['rule']}; e.g. {'NULL' if r['value'] is None else repr(r['value'][:40])})"
        for r in first
    )


def check_invalid_fraction(
    read: int, quarantined: int, max_fraction: float, quarantine: pd.DataFrame | None = None
) -> None:
    """Raise TooManyInvalidRows when quarantined/read exceeds ``max_fraction``, or NoValidRows
    when no row is valid (nothing to audit, whatever the fraction allows), naming the columns of
    which no value was accepted (``unusable_columns`` of ``quarantine``)."""
    if read and quarantined == read:
        why = "" if quarantine is None else unusable_columns(read, quarantine)
        raise NoValidRows(
            f"all {read} rows failed validation: nothing to audit; "
            f"{why + '; ' if why else ''}see quarantined_rows"
        )
    if read and quarantined / read > max_fraction:
        raise TooManyInvalidRows(
            f"{quarantined} of {read} rows ({quarantined / read:.1%}) failed validation, "
            f"above max_invalid_fraction = {max_fraction:.1%}; see quarantined_rows"
        )
