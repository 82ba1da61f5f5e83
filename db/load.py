"""Loading predictions into the default ``predictions`` table, validated on the way in.

Rows that fail the predictions schema go to ``quarantined_rows`` (with the file they came from) and are
not loaded; rows already present (same model and prediction id) are skipped, so loading a file twice
adds nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import pandas as pd
from biasaudit.db.models import Prediction, QuarantinedRow
from biasaudit.schemas.quarantine import split_valid
from sqlalchemy import Engine, insert
from sqlalchemy.dialects import postgresql, sqlite

CHUNK_ROWS = 20_000


@dataclass(frozen=True)
class LoadReport:
    read: int
    inserted: int
    already_present: int
    quarantined: int


def _insert_ignoring_duplicates(engine: Engine):
    dialect = {"postgresql": postgresql, "sqlite": sqlite}.get(engine.dialect.name)
    if dialect is None:
        raise NotImplementedError(f"loading into {engine.dialect.name} is not supported")
    statement = dialect.insert(Prediction).on_conflict_do_nothing(
        index_elements=["model_id", "prediction_id"]
    )
    # RETURNING counts the rows actually inserted, on every driver (executemany rowcount does not).
    return statement.returning(Prediction.id)


def _prediction_rows(valid: pd.DataFrame, attributes: list[str]) -> list[dict]:
    times = valid["predicted_at"].dt.tz_convert("UTC").dt.to_pydatetime()
    truth = valid["y_true"].to_numpy()
    attrs = valid[attributes].astype(str).to_dict(orient="records")
    scores = valid["score"].astype("float64").to_numpy()
    return [
        {
            "prediction_id": str(pid),
            "model_id": str(model),
            "model_version": str(version),
            "predicted_at": when,
            "y_true": None if pd.isna(y) else int(y),
            "y_pred": int(p),
            "score": None if pd.isna(s) else float(s),
            "attributes": a,
        }
        for pid, model, version, when, y, p, s, a in zip(
            valid["prediction_id"],
            valid["model_id"],
            valid["model_version"],
            times,
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
) -> LoadReport:
    """Validate ``frame`` (canonical columns plus ``attributes``) and insert it into predictions."""
    if "score" not in frame:
        frame = frame.assign(score=float("nan"))
    valid, quarantine = split_valid(frame, attributes)
    statement = _insert_ignoring_duplicates(engine)
    inserted = 0
    with engine.begin() as connection:
        if not quarantine.empty:
            now = datetime.now(UTC)
            rows = quarantine.astype(object).where(quarantine.notna(), None)
            connection.execute(
                insert(QuarantinedRow),
                [
                    {**row, "run_id": None, "source": f"load:{source}", "created_at": now}
                    for row in rows.to_dict(orient="records")
                ],
            )
        for start in range(0, len(valid), CHUNK_ROWS):
            chunk = valid.iloc[start : start + CHUNK_ROWS]
            result = connection.execute(statement, _prediction_rows(chunk, attributes))
            inserted += len(result.all())
            if progress:
                progress(len(chunk))
    return LoadReport(
        read=len(frame),
        inserted=inserted,
        already_present=len(valid) - inserted,
        quarantined=len(frame) - len(valid),
    )
