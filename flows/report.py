"""The report of a stored run: gathered from the database (db.store.report_data), rendered by the
pure tasks.report, written as an HTML file, and published as Prefect artifacts when inside a run."""

from __future__ import annotations

import os
import re
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pandas as pd
from sqlalchemy import Engine

from biasaudit.db.engine import engine_scope
from biasaudit.db.store.report_data import report_frames
from biasaudit.schemas.report import run_label
from biasaudit.tasks.report import render_html, render_markdown, table_records

REPORTS_ENV = "BIASAUDIT_REPORTS_DIR"


def reports_dir() -> Path:
    return Path(os.environ.get(REPORTS_ENV, "reports"))


def report_path(audit_name: str, run_id: int) -> Path:
    return reports_dir() / f"{audit_name}-run-{run_id}.html"


def write_page(path: Path, page: str) -> None:
    """Write ``page`` to ``path`` whole or not at all: into a temporary file beside it, renamed
    over ``path`` once written (a full disk or a killed process leaves no partial report)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    # Created as open() creates a file (0666 less the umask), not 0600 as mkstemp's are.
    os.close(os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    try:
        temporary.write_text(page, encoding="utf-8")
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def build_report(
    engine: Engine,
    run_id: int,
    report_file: str | None = None,
    completeness: pd.DataFrame | None = None,
) -> tuple[str, str, list[dict]]:
    """(HTML page, markdown first screen, table records) of one stored run; ``completeness``:
    the run's label-completeness table when the audit that computed it has it at hand
    (schemas.report.ReportFrames)."""
    frames = report_frames(engine, run_id)
    if completeness is not None:
        frames = replace(frames, completeness=completeness)
    return render_html(frames), render_markdown(frames, report_file), table_records(frames)


def artifact_key(audit_name: str) -> str:
    """Prefect artifact keys allow lower-case letters, digits and dashes only."""
    return "audit-" + re.sub(r"[^a-z0-9-]+", "-", audit_name.lower()).strip("-")


def publish_artifacts(markdown: str, records: list[dict], audit_name: str, run: str) -> bool:
    """Publish the first screen (markdown) and the comparisons (table) as Prefect artifacts;
    False, and nothing published, outside a Prefect flow or task run (a process that has not
    imported Prefect is in none: it is not imported to find out). ``run`` names the run
    (schemas.report.run_label)."""
    if "prefect.context" not in sys.modules:
        return False
    from prefect.artifacts import create_markdown_artifact, create_table_artifact
    from prefect.context import FlowRunContext, TaskRunContext

    if FlowRunContext.get() is None and TaskRunContext.get() is None:
        return False
    key = artifact_key(audit_name)
    create_markdown_artifact(
        markdown, key=key, description=f"Bias audit {audit_name}, {run}: first screen"
    )
    create_table_artifact(
        records,
        key=f"{key}-comparisons",
        description=f"Bias audit {audit_name}, {run}: every comparison",
    )
    return True


def write_report(
    db_url: str,
    run_id: int,
    audit_name: str,
    version: int | None = None,
    completeness: pd.DataFrame | None = None,
) -> str:
    """Write the run's HTML report (everything in it comes from the stored run; ``completeness``,
    the run's label completeness from the audit that just computed it, is what the report would
    compute from the stored counts) and publish its artifacts; returns the report's path."""
    path = report_path(audit_name, run_id)
    with engine_scope(db_url) as engine:
        page, markdown, records = build_report(engine, run_id, str(path), completeness)
    write_page(path, page)
    publish_artifacts(markdown, records, audit_name, run_label(run_id, version))
    return str(path)
