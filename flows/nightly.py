"""The nightly flow: audit every configured model, and its deployment (a cron schedule).

Each audit runs as the audit flow itself (a subflow, ``flows.audit.audit_flow``), so its database
steps retry exactly as in ``biasaudit run``. The subflows fan out on the nightly flow's task
runner: by default a thread pool of ``BIASAUDIT_MAX_WORKERS`` (2) workers, since the heavy scan
runs in the database; on a cluster, ``with_task_runner("dask", address=...)`` (the ``dask`` extra,
prefect-dask) spreads the audits over Dask workers.

Each audit is validated on its own (``flows.config_files.load_audit``): a mistake in one audit's
configuration fails that audit only. The flow runs every audit, prints one line per audit, and
fails at the end with a summary naming each failed audit and its error.

``biasaudit serve`` starts the deployment; ``prefect deployment run 'nightly/nightly'`` (with
``-p audits='["credit-race"]'`` for one audit) triggers it on demand with parameters. The
deployment's ``db_url`` parameter is the URL only when it holds no password; otherwise it is the
reference ``env:BIASAUDIT_DATABASE_URL``, read by each flow run from its environment.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

from prefect import Flow, flow, task, unmapped
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

from biasaudit.db.engine import flow_url
from biasaudit.flows.audit import audit_flow
from biasaudit.flows.config_files import configured_names, default_config_path
from biasaudit.flows.heartbeats import without_heartbeats
from biasaudit.flows.logs import AuditsFailed, install_short_errors, one_line
from biasaudit.schemas.report import run_label

DEFAULT_CRON = "0 2 * * *"
MAX_WORKERS = int(os.environ.get("BIASAUDIT_MAX_WORKERS", "2"))
_THREADS: Any = ThreadPoolTaskRunner  # Prefect's generics reject a concrete runner (mypy)
install_short_errors()


@task(name="audit", cache_policy=NO_CACHE, task_run_name="audit-{audit_name}")
def audit_task(
    audit_name: str,
    config_path: str,
    db_url: str | None,
    as_of: datetime | None,
    force: bool,
    cron: str | None = None,
    timezone: str | None = None,
) -> dict:
    """One audit as a subflow (its database steps retry), on whichever worker the runner picks."""
    install_short_errors()  # a Dask worker process configures its own logging
    # The nightly flow validated the parameters already; re-validating them on a Dask worker
    # fails (pydantic cannot rebuild the unpickled flow's parameter model).
    subflow = audit_flow.with_options(validate_parameters=False)
    with without_heartbeats():  # the nightly run's own heartbeat covers its process
        return subflow(audit_name, config_path, db_url, as_of, force, cron, timezone)


def summary_line(failed: dict[str, str], total: int) -> str:
    """``'2 of 4 audits failed: a (ConfigError: ...); b (EmptyWindow: ...)'``."""
    named = "; ".join(f"{name} ({error})" for name, error in failed.items())
    return f"{len(failed)} of {total} audits failed: {named}"


@flow(name="nightly", log_prints=True, task_runner=_THREADS(max_workers=MAX_WORKERS))
def nightly_flow(
    config_path: str | None = None,
    db_url: str | None = None,
    as_of: datetime | None = None,
    audits: list[str] | None = None,
    force: bool = False,
    cron: str | None = None,
    timezone: str | None = None,
) -> list[dict]:
    """Run every configured audit (or the named ones) concurrently; one failure does not stop
    the others, and the flow fails at the end naming every failed audit.

    With a schedule, each audit's window ends at the schedule's nominal instant: the latest fire
    at or before ``as_of``, by default this flow run's scheduled start time (not the clock when it
    started), so a run that starts late audits the same window as one on time, and consecutive
    nightly windows tile time across daylight-saving changes (flows.schedule). Prefect shows the
    descriptions below beside the deployment's parameters.

    Args:
        config_path: The audit configuration (TOML) on the machine that runs the flow.
        db_url: The audit store: a SQLAlchemy URL without password, or env:VARIABLE naming one.
        as_of: Audit the window that ends at this moment (ISO 8601); empty: the scheduled start.
        audits: The audits to run, by name; empty: every audit of the configuration.
        force: Store a new version even where the input is unchanged since the last run.
        cron: The deployment's schedule; windows end at its fires.
        timezone: The time zone of the schedule and of the windows' calendar days.
    """
    config_path = config_path or default_config_path()
    names = list(audits or configured_names(config_path))
    if cron and as_of is None:
        as_of = scheduled_start()
    futures = audit_task.map(
        names,
        unmapped(config_path),
        unmapped(db_url),
        unmapped(as_of),
        unmapped(force),
        unmapped(cron),
        unmapped(timezone),
    )
    results: list[dict] = []
    failed: dict[str, str] = {}
    for name, future in zip(names, futures):
        outcome: Any = future.result(raise_on_failure=False)
        if isinstance(outcome, BaseException):
            failed[name] = one_line(outcome)
            print(f"audit {name}: FAILED {failed[name]}")
        elif isinstance(outcome, dict):
            results.append(outcome)
            label = run_label(outcome["run_id"], outcome["version"])
            print(f"audit {name}: {label}, report {outcome['report']}")
        else:  # a crashed or cancelled task: its state says why
            failed[name] = str(future.state.message or future.state.name)
            print(f"audit {name}: FAILED {failed[name]}")
    if failed:
        raise AuditsFailed(summary_line(failed, len(names)))
    print(f"all {len(names)} audits completed")
    return results


def scheduled_start() -> datetime:
    """This flow run's scheduled start time (its expected start time; the clock outside a run),
    in UTC."""
    from prefect import runtime

    moment = runtime.flow_run.scheduled_start_time
    return datetime.fromtimestamp(moment.timestamp(), UTC)


def with_task_runner(
    kind: str = "threads", address: str | None = None, workers: int = MAX_WORKERS
) -> Flow[..., list[dict]]:
    """The nightly flow on another task runner: 'threads', or 'dask' (a cluster at ``address``,
    or a local cluster of ``workers`` processes)."""
    if kind == "threads":
        return nightly_flow.with_options(task_runner=_THREADS(max_workers=workers))
    if kind == "dask":
        from prefect_dask import DaskTaskRunner

        runner: Any = (
            DaskTaskRunner(address=address)
            if address
            else DaskTaskRunner(
                # dashboard on any free port: 8787 may be taken by another cluster on the machine
                cluster_kwargs={
                    "n_workers": workers,
                    "threads_per_worker": 1,
                    "dashboard_address": ":0",
                }
            )
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
    name: str = "nightly",
) -> Any:
    """The nightly deployment: scheduled by ``cron`` in ``timezone``, triggerable on demand with
    parameters. Runs of one audit never overlap: the database serialises them
    (db.store.runs.start_run), which holds across processes and servers. ``db_url`` reaches Prefect
    only without a password (``db.engine.flow_url``)."""
    return with_task_runner(task_runner, dask_address).to_deployment(
        name=name, **deployment_options(config_path, db_url, cron, timezone)
    )


def deployment_options(config_path: str, db_url: str | None, cron: str, timezone: str) -> dict:
    """The schedule, default parameters and description of a nightly deployment, served or on a
    work pool."""
    from prefect.schedules import Cron

    return {
        "schedules": [Cron(cron, timezone=timezone)],
        "parameters": {
            "config_path": config_path,
            "db_url": flow_url(db_url),
            "cron": cron,
            "timezone": timezone,
        },
        "description": "Every configured bias audit, nightly.",
    }


def serve(
    config_path: str,
    db_url: str | None,
    cron: str = DEFAULT_CRON,
    timezone: str = "UTC",
    task_runner: str = "threads",
    dask_address: str | None = None,
    name: str = "nightly",
) -> None:
    """Serve the nightly deployment until stopped, quietly: SIGTERM (a service manager's stop)
    first cancels the flow runs in flight through Prefect; Ctrl-C stops serving at once."""
    import asyncio
    import contextlib

    from prefect.runner import Runner

    class Stoppable(Runner):
        """A runner that SIGTERM stops through Prefect's own ``astop``, awaited on the runner's
        loop: every in-flight flow run is cancelled (its process ended and its state Cancelled
        on the server, not left Running) and the serving loop ends. Prefect 3.8's SIGTERM
        handler calls the asynchronous stop without awaiting it and exits from inside the event
        loop, printing tracebacks."""

        serving: asyncio.Task | None = None
        stopping_task: asyncio.Task | None = None

        def handle_sigterm(self, *args: Any, **kwargs: Any) -> None:
            if self.serving is not None and self.stopping_task is None:
                loop = self.serving.get_loop()
                loop.call_soon_threadsafe(self._stop_soon, loop)

        def _stop_soon(self, loop: asyncio.AbstractEventLoop) -> None:
            self.stopping_task = loop.create_task(self.astop())

    runner = Stoppable(pause_on_shutdown=False)
    runner.add_deployment(
        nightly_deployment(config_path, db_url, cron, timezone, task_runner, dask_address, name)
    )

    async def serving() -> None:
        runner.serving = asyncio.current_task()
        await runner.start()
        if runner.stopping_task is not None:
            await runner.stopping_task

    _quiet_poll_failures()
    try:
        with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
            asyncio.run(serving())
    except Exception as exc:
        if not _poll_gave_up(exc):
            raise
        raise PrefectLost(
            f"serve stopped: the Prefect API at {_api_url()} did not answer {POLLS_IN_A_ROW} polls "
            f"for scheduled runs in a row (each up to PREFECT_API_REQUEST_TIMEOUT, "
            f"{_request_seconds():.0f} s, and its retries); restart serve once Prefect answers "
            f"(`biasaudit history` shows which runs are stored)"
        ) from None
    print(f"stopped serving nightly/{name}")


POLLS_IN_A_ROW = 3  # Prefect's runner stops polling after 3 failed polls in a row


class PrefectLost(RuntimeError):
    """``serve`` stopped: its Prefect API did not answer POLLS_IN_A_ROW polls in a row."""


def _poll_gave_up(error: BaseException) -> bool:
    """Whether ``error`` (possibly a group) is Prefect's runner giving up its poll loop."""
    if isinstance(error, BaseExceptionGroup):
        return any(_poll_gave_up(inner) for inner in error.exceptions)
    return isinstance(error, RuntimeError) and "exceeded error threshold" in str(error)


def _quiet_poll_failures() -> None:
    """Prefect's runner prints each failed poll's traceback to stdout; log them at debug
    instead (--debug shows them): serve's one line says why it stopped."""
    import functools
    import logging

    from prefect.runner import _scheduled_run_poller as poller
    from prefect.utilities.services import critical_service_loop

    log = logging.getLogger("biasaudit.serve")
    poller.critical_service_loop = functools.partial(
        critical_service_loop, printer=lambda *parts: log.debug(" ".join(map(str, parts)))
    )


def _api_url() -> str:
    from prefect.settings import get_current_settings

    return str(get_current_settings().api.url)


def _request_seconds() -> float:
    from prefect.settings import get_current_settings

    return float(get_current_settings().api.request_timeout)


if __name__ == "__main__":
    nightly_flow()
