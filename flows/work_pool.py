"""The nightly deployment on a Prefect work pool, as platform teams run flows: deployed once
(``biasaudit deploy``), run by a worker (``prefect worker start --pool POOL``) wherever biasaudit
is installed. The deployment names the flow by its module path
(``biasaudit.flows.nightly.nightly_flow``), so the worker needs no copy of any source tree, only the
installed package; the configuration file's path is the worker's."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

from biasaudit.flows.nightly import deployment_options, nightly_flow
from biasaudit.flows.report import REPORTS_ENV, reports_dir

POOL_TYPE = "process"  # a worker runs each flow run as a process of its own environment


def worker_store_url(given: str | None) -> str | None:
    """The store URL a work-pool deployment hands its flow runs, which a worker runs in folders
    of its own: ``given`` (``--db``), else ``BIASAUDIT_DATABASE_URL``, else the embedded default,
    a SQLite file's relative path made absolute. None where the URL holds a password and came
    from the environment: the flow run reads the worker's own ``BIASAUDIT_DATABASE_URL``. A
    password given on the command line is refused (ValueError): Prefect would need it."""
    from biasaudit.db.engine import URL_ENV, database_url, parse_url
    from biasaudit.schemas.urls import holds_secret

    url = parse_url(database_url(given))
    if holds_secret(url):
        if given:
            raise ValueError(
                f"deploy hands the store's URL to Prefect, which must never hold its password: "
                f"put the URL in {URL_ENV} in the worker's environment and leave out --db"
            )
        return None
    database = url.database or ""
    if url.get_backend_name() == "sqlite" and database not in ("", ":memory:"):
        url = url.set(database=str(Path(database).resolve()))
    return url.render_as_string(hide_password=False)


def ensure_pool(pool: str) -> None:
    """Create the process work pool ``pool`` unless it exists. A pool of another type is refused
    (ValueError): the deployment names no image or storage for it to pull."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            found = client.read_work_pool(pool)
        except ObjectNotFound:
            client.create_work_pool(WorkPoolCreate(name=pool, type=POOL_TYPE))
            return
    if found.type != POOL_TYPE:
        raise ValueError(
            f"work pool {pool!r} is of type {found.type!r}; biasaudit deploys to a "
            f"{POOL_TYPE!r} pool (name another pool, or create one: "
            f"prefect work-pool create NAME --type {POOL_TYPE})"
        )


def deploy(
    config_path: str,
    store_url: str | None,
    pool: str,
    cron: str,
    timezone: str,
    name: str = "nightly",
) -> UUID:
    """Create or update the deployment ``nightly/NAME`` on the process work pool ``pool``
    (created if absent): the schedule and parameters of ``biasaudit serve``, the store's URL as
    ``worker_store_url`` gives it (no password)."""
    import contextlib
    import io

    from prefect.deployments.runner import EntrypointType

    ensure_pool(pool)
    # A worker runs each flow run in a temporary folder of its own: the reports go where this
    # command would write them, as an absolute path (the worker's machine must have it).
    reports = {REPORTS_ENV: str(reports_dir().resolve())}
    with contextlib.redirect_stdout(io.StringIO()):  # Prefect's table; the command says it
        deployed = nightly_flow.deploy(
            name=name,
            work_pool_name=pool,
            entrypoint_type=EntrypointType.MODULE_PATH,
            job_variables={"env": reports},
            print_next_steps=False,
            ignore_warnings=True,
            **deployment_options(config_path, store_url, cron, timezone),
        )
    assert isinstance(deployed, UUID)  # called from synchronous code: not a coroutine
    return deployed
