"""Loading predictions into the default ``predictions`` table, validated on the way in.

Files are read as the text they hold (``read_predictions_file``): identifiers, versions and
attributes stay strings (``007`` is not 7, ``2.10`` is not 2.1, ``NA`` is not missing; only an
empty field is), and only labels, decisions, scores and timestamps are parsed, by the schema.

Rows that fail the predictions schema, or that the table cannot store (a value longer than its
column, a NUL byte, a ragged CSV line), go to ``quarantined_rows`` with their original text and the
file they came from, row by row; the rest of the file loads. A row already present (same model and
prediction id) is not inserted again; if its label was unknown and is known now (late labels are
normal) the label is updated, and the report says how many were. A row already present whose
decision, score or known label differs from the stored one keeps the stored values: a prediction
is never overwritten, and the report counts those rows and names the columns that differed.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pandas as pd
from sqlalchemy import Engine, Table, bindparam, insert, select, update

from biasaudit.db.store.models import Prediction, QuarantinedRow
from biasaudit.schemas.frames import as_number, canonical_text
from biasaudit.schemas.quarantine import NO_NUL, QUARANTINE_COLUMNS, split_valid, storable

CHUNK_ROWS = 20_000
# Columns of a row already present compared with the stored prediction (the outcome and decision).
COMPARED = ("y_true", "y_pred", "score")
TEXT_COLUMNS = ("prediction_id", "model_id", "model_version")
# Attribute values longer than this are refused (the JSON column has no limit, reports do).
MAX_ATTRIBUTE_CHARS = 512


@dataclass(frozen=True)
class LoadReport:
    read: int
    inserted: int
    already_present: int
    quarantined: int
    labels_updated: int = 0
    # Rows already present whose values differ from the stored ones (kept), and in which columns.
    differing: int = 0
    differing_columns: tuple[str, ...] = ()


def read_predictions_file(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows of a CSV or Parquet file, quarantine records of its ragged lines).

    CSV fields are all read as text: nothing is guessed, only an empty field is missing. A line
    with more fields than the header is kept out with its original text; one with fewer is kept,
    its missing fields empty, for the schema to judge.
    """
    if path.suffix in {".parquet", ".pq"}:
        return pd.read_parquet(path), _records([])
    bad: list[tuple[int, str]] = []
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, [])
        rows: list[list[str]] = []
        for line in reader:
            if len(line) > len(header):
                buffer = io.StringIO()
                csv.writer(buffer).writerow(line)
                bad.append((len(rows) + len(bad), buffer.getvalue().rstrip("\r\n")))
                continue
            rows.append(line + [""] * (len(header) - len(line)))
    frame = pd.DataFrame(rows, columns=header, dtype=object)
    frame = frame.where(frame != "", None)
    return frame, _records(bad)


def _records(bad: list[tuple[int, str]]) -> pd.DataFrame:
    return storable(
        pd.DataFrame(
            {
                "row_number": [n for n, _ in bad],
                "row_ref": [f"<line {n + 2}>" for n, _ in bad],
                "column_name": None,
                "value": [line for _, line in bad],
                "rule": "ragged_line",
                "row": [{"line": line} for _, line in bad],
            },
            columns=QUARANTINE_COLUMNS,
        )
    )


def _storage_failures(frame: pd.DataFrame, attributes: list[str]) -> pd.DataFrame:
    """Quarantine records of values the predictions table cannot hold: text longer than its
    column, or holding a NUL byte (PostgreSQL text and JSON cannot)."""
    records: list[tuple[int, str, str, str]] = []
    limits = {c: getattr(Prediction.__table__.c[c].type, "length", None) for c in TEXT_COLUMNS}
    limits.update({a: MAX_ATTRIBUTE_CHARS for a in attributes})
    for column, limit in limits.items():
        if column not in frame:
            continue
        text = canonical_text(frame[column]).astype("string")
        too_long = text.str.len() > limit
        nul = text.str.contains("\x00", regex=False)
        for rule, mask in ((f"max_length_{limit}", too_long), (NO_NUL, nul)):
            records.extend(
                (position, column, text[position], rule)
                for position in mask[mask.fillna(False)].index
            )
    if not records:
        return pd.DataFrame(columns=QUARANTINE_COLUMNS)
    from biasaudit.schemas.quarantine import _rows_as_json

    positions = [r[0] for r in records]
    unique = pd.unique(pd.Index(positions))
    rows = dict(zip(unique, _rows_as_json(frame.loc[unique])))
    ids = frame["prediction_id"] if "prediction_id" in frame else pd.Series(None, index=frame.index)
    return storable(
        pd.DataFrame(
            {
                "row_number": positions,
                "row_ref": [str(ids[p]) if pd.notna(ids[p]) else f"<row {p}>" for p in positions],
                "column_name": [r[1] for r in records],
                "value": [r[2] for r in records],
                "rule": [r[3] for r in records],
                "row": [rows[p] for p in positions],
            },
            columns=QUARANTINE_COLUMNS,
        )
    )


def _prediction_rows(valid: pd.DataFrame, attributes: list[str], naive: bool) -> list[dict]:
    # Python datetimes in UTC (microseconds), through numpy: one conversion of the whole column.
    utc = valid["predicted_at"].dt.tz_convert("UTC").dt.tz_localize(None)
    moments = utc.to_numpy(dtype="datetime64[us]").astype(object)
    if not naive:
        moments = [moment.replace(tzinfo=UTC) for moment in moments]
    truth = valid["y_true"].to_numpy()
    attrs = valid[attributes].astype(str).to_dict(orient="records")
    scores = as_number(valid["score"]).to_numpy()
    versions = canonical_text(valid["model_version"])
    return [
        {
            "prediction_id": str(pid),
            "model_id": str(model),
            "model_version": None if version is None else str(version),
            "predicted_at": when,
            "y_true": None if pd.isna(y) else int(y),
            "y_pred": int(p),
            "score": None if pd.isna(s) else float(s),
            "attributes": a,
        }
        for pid, model, version, when, y, p, s, a in zip(
            canonical_text(valid["prediction_id"]),
            canonical_text(valid["model_id"]),
            versions,
            moments,
            truth,
            valid["y_pred"],
            scores,
            attrs,
        )
    ]


def load_predictions(
    engine: Engine,
    frame: pd.DataFrame,
    attributes: list[str],
    source: str,
    progress: Callable[[int], None] | None = None,
    rejected: pd.DataFrame | None = None,
) -> LoadReport:
    """Validate ``frame`` (canonical columns plus ``attributes``) and store it in predictions.

    ``rejected``: quarantine records of lines that never made it into ``frame`` (ragged lines).
    """
    frame = frame.reset_index(drop=True)
    if "score" not in frame:
        frame = frame.assign(score=None)
    unstorable = _storage_failures(frame, attributes)
    keep = ~frame.index.isin(unstorable["row_number"])
    valid, quarantine = split_valid(frame[keep].reset_index(drop=True), attributes)
    original = frame.index[keep].to_numpy()
    quarantine["row_number"] = original[quarantine["row_number"].astype(int).to_numpy()]
    parts = [q for q in (unstorable, quarantine, rejected) if q is not None and len(q)]
    quarantine = pd.concat(parts, ignore_index=True) if parts else quarantine
    naive = engine.dialect.name in {"mysql", "mariadb"}
    inserted = updated = present = 0
    differing = 0  # rows already present whose values differ from the stored ones
    differing_columns: set[str] = set()
    table = cast(Table, Prediction.__table__)
    with engine.begin() as connection:
        if not quarantine.empty:
            now = datetime.now(UTC)
            rows = quarantine.astype(object).where(quarantine.notna(), None)
            connection.execute(
                insert(QuarantinedRow),
                [
                    {**row, "run_id": None, "source": f"load:{source}"[:512], "created_at": now}
                    for row in rows.to_dict(orient="records")
                ],
            )
        for start in range(0, len(valid), CHUNK_ROWS):
            chunk = _prediction_rows(valid.iloc[start : start + CHUNK_ROWS], attributes, naive)
            existing: dict[tuple[str, str], dict] = {}
            for model in {r["model_id"] for r in chunk}:
                ids = [r["prediction_id"] for r in chunk if r["model_id"] == model]
                query = select(
                    table.c.id, table.c.prediction_id, *(table.c[c] for c in COMPARED)
                ).where(table.c.model_id == model, table.c.prediction_id.in_(ids))
                for row in connection.execute(query):
                    existing[(model, row.prediction_id)] = row._asdict()
            new = [r for r in chunk if (r["model_id"], r["prediction_id"]) not in existing]
            labels = []
            for r in chunk:
                stored = existing.get((r["model_id"], r["prediction_id"]))
                if stored is None:
                    continue
                if stored["y_true"] is None and r["y_true"] is not None:
                    labels.append({"key": stored["id"], "label": r["y_true"]})
                changed = _differing(stored, r)
                differing += bool(changed)
                differing_columns.update(changed)
            if new:
                connection.execute(insert(Prediction), new)
            if labels:
                connection.execute(
                    update(table)
                    .where(table.c.id == bindparam("key"))
                    .values(y_true=bindparam("label")),
                    labels,
                )
            inserted += len(new)
            updated += len(labels)
            present += len(chunk) - len(new)
            if progress:
                progress(len(chunk))
    read = len(frame) + (0 if rejected is None else len(rejected))
    return LoadReport(
        read=read,
        inserted=inserted,
        already_present=present,
        quarantined=read - len(valid),
        labels_updated=updated,
        differing=differing,
        differing_columns=tuple(c for c in COMPARED if c in differing_columns),
    )


def _differing(stored: dict, row: dict) -> list[str]:
    """The columns of COMPARED in which a loaded row differs from the stored prediction of the
    same model and id (a label unknown in either is no difference: a late label updates it)."""
    return [
        c
        for c in COMPARED
        if stored[c] != row[c] and not (c == "y_true" and None in (stored[c], row[c]))
    ]
