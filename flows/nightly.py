"""The nightly flow: audit every configured model, and its deployment (a cron schedule).

The flow fans out over audits on its Prefect task runner: by default a thread pool of
``BIASAUDIT_MAX_WORKERS`` (2) workers, since the heavy scan runs in the database; on a cluster,
``with_task_runner("dask", address=...)`` (the ``dask`` extra, prefect-dask) spreads the audits over
Dask workers. Each audit is one task running its stages as plain calls (``biasaudit run`` shows each
stage as its own task).

``biasaudit serve`` starts the deployment; ``prefect deployment run 'nightly/nightly'`` (with
``-p audits='["credit-race"]'`` for one audit) triggers it on demand with parameters.
"""

from __future__ import annotations

import os
from datetime import datetime

from biasaudit.flows.audit import default_config_path, run_audit
from biasaudit.schemas.config import load_config
from prefect import flow, task, unmapped
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

DEFAULT_CRON = "0 2 * * *"
MAX_WORKERS = int(os.environ.get("BIASAUDIT_MAX_WORKERS", "2"))


@task(name="audit", cache_policy=NO_CACHE, task_run_name="audit-{audit_name}")
def audit_task(
    audit_name: str, config_path: str, db_url: str | None, as_of: datetime | None, force: bool
) -> dict:
    """One audit, all its stages, on whichever worker the task runner picks."""
    return run_audit(audit_name, config_path, db_url, as_of, force)


@flow(name="nightly", log_prints=True, task_runner=ThreadPoolTaskRunner(max_workers=MAX_WORKERS))
def nightly_flow(
    config_path: str | None = None,
    db_url: str | None = None,
    as_of: datetime | None = None,
    audits: list[str] | None = None,
    force: bool = False,
) -> list[dict]:
    """Run every configured audit (or the named ones) concurrently; one failure does not stop
    the others, and the flow fails at the end naming every failed audit."""
    config_path = config_path or default_config_path()
    names = audits or [a.name for a in load_config(config_path).audits]
    futures = audit_task.map(
        names, unmapped(config_path), unmapped(db_url), unmapped(as_of), unmapped(force)
    )
    for future in futures:
        future.wait()
    states = {name: future.state for name, future in zip(names, futures)}
    failed = {name: state.message for name, state in states.items() if not state.is_completed()}
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(names)} audits failed: {failed}")
    return [future.result() for future in futures]


def with_task_runner(kind: str = "threads", address: str | None = None, workers: int = MAX_WORKERS):
    """The nightly flow on another task runner: 'threads', or 'dask' (a cluster at ``address``,
    or a local cluster of ``workers`` processes)."""
    if kind == "threads":
        return nightly_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=workers))
    if kind == "dask":
        from prefect_dask import DaskTaskRunner

        runner = (
            DaskTaskRunner(address=address)
            if address
            else DaskTaskRunner(cluster_kwargs={"n_workers": workers, "threads_per_worker": 1})
        )
        return nightly_flow.with_options(task_runner=runner)
    raise ValueError(f"task runner must be 'threads' or 'dask', not {kind!r}")


def nightly_deployment(
    config_path: str,
    db_url: str | None,
    cron: str = DEFAULT_CRON,
    timezone: str = "UTC",
    task_runner: str = "threads",
    dask_address: str | None = None,
):
    """The nightly deployment: scheduled by ``cron`` in ``timezone``, triggerable on demand with
    parameters. Runs of one audit never overlap: the database serialises them (db.runs.start_run),
    which holds across processes and servers (a deployment concurrency limit lives in the Prefect
    server's lease storage, which temporary local servers do not share)."""
    from prefect.schedules import Cron

    return with_task_runner(task_runner, dask_address).to_deployment(
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
