"""The nightly flow: audit every configured model, and its deployment (a cron schedule).

``biasaudit serve`` starts the deployment; ``prefect deployment run 'nightly/nightly'`` (with
``-p audits='["credit-race"]'`` for one audit) triggers it on demand with parameters.
"""

from __future__ import annotations

from datetime import datetime

from prefect import flow

from flows.audit import audit_flow, default_config_path
from schemas.config import load_config

DEFAULT_CRON = "0 2 * * *"


@flow(name="nightly", log_prints=True)
def nightly_flow(
    config_path: str | None = None,
    db_url: str | None = None,
    as_of: datetime | None = None,
    audits: list[str] | None = None,
    force: bool = False,
) -> list[dict]:
    """Run every configured audit (or the named ones); one failure does not stop the others."""
    config_path = config_path or default_config_path()
    names = audits or [a.name for a in load_config(config_path).audits]
    states = {
        name: audit_flow(name, config_path, db_url, as_of, force, return_state=True)
        for name in names
    }
    failed = {name: state.message for name, state in states.items() if not state.is_completed()}
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(names)} audits failed: {failed}")
    return [state.result() for state in states.values()]


def nightly_deployment(
    config_path: str, db_url: str | None, cron: str = DEFAULT_CRON, timezone: str = "UTC"
):
    """The nightly deployment: scheduled by ``cron`` in ``timezone``, triggerable on demand with
    parameters. Runs of one audit never overlap: the database serialises them (db.runs.start_run),
    which holds across processes and servers (a deployment concurrency limit lives in the Prefect
    server's lease storage, which temporary local servers do not share)."""
    from prefect.schedules import Cron

    return nightly_flow.to_deployment(
        name="nightly",
        schedules=[Cron(cron, timezone=timezone)],
        parameters={"config_path": config_path, "db_url": db_url},
        description="Every configured bias audit, nightly.",
    )


def serve(config_path: str, db_url: str | None, cron: str = DEFAULT_CRON, timezone: str = "UTC"):
    """Serve the nightly deployment until stopped."""
    from prefect import serve as serve_deployments

    serve_deployments(
        nightly_deployment(config_path, db_url, cron, timezone), pause_on_shutdown=False
    )


if __name__ == "__main__":
    nightly_flow()
