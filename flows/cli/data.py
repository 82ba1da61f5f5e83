"""Commands on the store and its inputs: `db upgrade`, `load`, `quarantine`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from biasaudit.flows.cli.common import (
    DbOption,
    FormatOption,
    Mistake,
    _check_format,
    _emit,
    _engine,
    _fail,
    _print_frame,
    _run_or_fail,
    _say,
    app,
    console,
    db_app,
)


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None) -> None:
    """Create or upgrade the database schema with the Alembic migrations."""
    from sqlalchemy.exc import OperationalError

    from biasaudit.db.engine import database_url, make_engine, safe_url
    from biasaudit.db.store.migrate import upgrade

    make_engine(db).dispose()  # a malformed URL or unknown dialect: one clear line
    try:
        upgrade(db)
    except OperationalError as exc:
        from biasaudit.flows.logs import one_line

        raise Mistake(
            f"cannot upgrade database {safe_url(database_url(db))}: "
            f"{one_line(exc, with_type=False)}"
        ) from None
    _say(f"database at {safe_url(database_url(db))} is up to date")


def _read_table(path: Path) -> Any:
    """A CSV or Parquet file as a frame; empty, ragged or undecodable files are one clear line."""
    import pandas as pd
    import pyarrow as pa

    if not path.exists():
        raise Mistake(f"{path} does not exist")
    if path.is_dir():
        raise Mistake(f"{path} is a directory, not a CSV or Parquet file")
    parquet = path.suffix.lower() in {".parquet", ".pq"}
    try:
        frame = pd.read_parquet(path) if parquet else pd.read_csv(path, encoding="utf-8")
    except pd.errors.EmptyDataError:
        raise Mistake(f"{path} is empty") from None
    except pd.errors.ParserError as exc:
        detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else "malformed"
        raise Mistake(f"{path} is not a well-formed CSV (ragged rows?): {detail}") from None
    except UnicodeDecodeError as exc:
        raise Mistake(f"{path} is not UTF-8 text (byte {exc.start})") from None
    except (pa.ArrowException, OSError, ValueError) as exc:
        kind = "Parquet" if parquet else "CSV"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Mistake(f"{path} is not a readable {kind} file: {first}") from None
    if frame.empty:
        raise Mistake(f"{path} has no rows")
    return frame


@app.command()
def load(
    path: Annotated[
        Path, typer.Argument(metavar="FILE", help="CSV or Parquet file of predictions")
    ],
    attribute: Annotated[
        list[str],
        typer.Option(
            "--attribute", "-a", metavar="COLUMN", help="Sensitive attribute column (repeat)"
        ),
    ],
    model: Annotated[
        str | None,
        typer.Option(metavar="ID", help="Model id (required if the file has no model_id column)"),
    ] = None,
    model_version: Annotated[
        str | None,
        typer.Option(
            metavar="VERSION",
            help="Model version (required if the file has no model_version column)",
        ),
    ] = None,
    map_: Annotated[
        list[str] | None,
        typer.Option("--map", metavar="CANONICAL=COLUMN", help="e.g. y_true=label (repeat)"),
    ] = None,
    max_invalid_fraction: Annotated[
        float,
        typer.Option(
            metavar="SHARE",
            help="Exit with code 2 when more than this share of rows is quarantined",
        ),
    ] = 0.05,
    db: DbOption = None,
) -> None:
    """Load predictions into the predictions table, validated: invalid rows are quarantined."""
    from rich.progress import Progress

    from biasaudit.db.store.load import load_predictions, read_predictions_file

    if not 0.0 <= max_invalid_fraction <= 1.0:
        raise Mistake(f"--max-invalid-fraction must be between 0 and 1, not {max_invalid_fraction}")
    engine = _engine(db)
    if path.suffix.lower() in {".parquet", ".pq"}:
        frame, ragged = _read_table(path), None
    else:  # every CSV field as the text it is; ragged lines quarantined, not fatal
        if not path.exists():
            raise Mistake(f"{path} does not exist")
        if path.is_dir():
            raise Mistake(f"{path} is a directory, not a CSV or Parquet file")
        if path.stat().st_size == 0:
            raise Mistake(f"{path} is empty")
        try:
            frame, ragged = read_predictions_file(path)
        except UnicodeDecodeError as exc:
            raise Mistake(f"{path} is not UTF-8 text (byte {exc.start})") from None
        if frame.empty and ragged.empty:
            raise Mistake(f"{path} has no rows")
    try:
        mapping = dict(item.split("=", 1) for item in map_ or [])
    except ValueError:
        _fail("--map takes canonical=column")
    frame = frame.rename(columns={column: canonical for canonical, column in mapping.items()})
    if model:
        frame["model_id"] = model
    if model_version:
        frame["model_version"] = model_version
    from biasaudit.schemas.config import CANONICAL_COLUMNS

    needed = [*(c for c in CANONICAL_COLUMNS if c not in ("score", "labelled_at")), *attribute]
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        options = {"model_id": "--model ID", "model_version": "--model-version VERSION"}
        how = [
            f"{c} with {options[c]} or --map {c}=COLUMN" if c in options else f"--map {c}=COLUMN"
            for c in missing
        ]
        _fail(
            f"{path}: missing columns {missing} (every stored prediction has a model_id and a "
            f"model_version); the file has: {', '.join(map(str, frame.columns))}; give "
            + "; ".join(how)
        )
    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task(f"loading {path.name}", total=len(frame))
        report = load_predictions(
            engine, frame, attribute, str(path), lambda n: progress.advance(bar, n), ragged
        )
    differing = ""
    if report.differing:
        *others, last = report.differing_columns
        columns = f"{', '.join(others)} or {last}" if others else last
        differing = f" ({report.differing} with a different {columns}: the stored values kept)"
    _say(
        f"read {report.read}, inserted {report.inserted}, already present {report.already_present}"
        f"{differing}, quarantined {report.quarantined}, labels updated {report.labels_updated}"
    )
    share = report.quarantined / report.read if report.read else 0.0
    if share > max_invalid_fraction:
        _fail(
            f"{report.quarantined} of {report.read} rows ({share:.1%}) were quarantined, more than "
            f"--max-invalid-fraction {max_invalid_fraction:.1%}: see `biasaudit quarantine --load`",
            code=2,
        )


@app.command()
def quarantine(
    run_id: Annotated[
        int | None, typer.Argument(metavar="[RUN]", help="Rows quarantined by this run")
    ] = None,
    from_load: Annotated[
        bool, typer.Option("--load", help="Rows quarantined by `biasaudit load`")
    ] = False,
    limit: Annotated[int, typer.Option(metavar="N", help="At most N rows (0: all)")] = 50,
    format_: FormatOption = "table",
    db: DbOption = None,
) -> None:
    """Quarantined rows with the rule each broke: of one run, or of loads (--load)."""
    import pandas as pd
    from sqlalchemy import select

    from biasaudit.db.store.models import QuarantinedRow

    _check_format(format_)
    if (run_id is None) == (not from_load):
        raise Mistake("give a RUN id or --load (not both)")
    engine = _engine(db)
    if run_id is not None:
        _run_or_fail(engine, run_id)
    query = select(
        QuarantinedRow.run_id,
        QuarantinedRow.source,
        QuarantinedRow.row_number,
        QuarantinedRow.row_ref,
        QuarantinedRow.column_name,
        QuarantinedRow.value,
        QuarantinedRow.rule,
        QuarantinedRow.created_at,
    ).order_by(QuarantinedRow.id)
    query = query.where(
        QuarantinedRow.run_id == run_id if run_id is not None else QuarantinedRow.run_id.is_(None)
    )
    if limit > 0:
        query = query.limit(limit)
    with engine.connect() as connection:
        rows = pd.DataFrame(
            connection.execute(query).mappings().all(), columns=list(query.selected_columns.keys())
        )
    if format_ != "table":
        _emit(rows, format_)
        return
    if rows.empty:
        _say("no quarantined rows")
        return
    _print_frame(rows.drop(columns=["created_at"]), title="quarantined rows and their reasons")
