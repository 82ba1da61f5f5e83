"""The audit's database steps as Prefect tasks with the retry policy; pure stages as plain calls.

Database steps (flows.pipeline.DATABASE_STEPS: begin, scan, previous run, identical run,
monitor, persist, failure, report) are Prefect tasks that retry on transient database errors with
exponential backoff (db.retry). The pure stages of tasks.core (counts, metrics, MATCH, planning,
detection, ...) run as plain calls inside the flow: deterministic, they have nothing to retry, and
their task runs cost the flow's process and the Prefect server CPU on every audit
(benchmarks/results/scale.md). Their times are the run's
stored ``timings``; a stage that raises fails the flow run with its error. ``in_flow`` is the
``run`` hook with which flows.audit runs the pipeline's one body (flows.pipeline.execute_audit)
as a Prefect flow.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from typing import Any, ParamSpec, TypeVar, cast

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from biasaudit.db.retry import RETRIES, is_transient, retry_base_seconds
from biasaudit.flows.pipeline import DATABASE_STEPS

P = ParamSpec("P")
R = TypeVar("R")


def _transient(task: Task, task_run: Any, state: Any) -> bool:
    """Prefect retry condition: retry only what db.retry calls transient."""
    return is_transient(state.result(raise_on_failure=False))


# The report step's deadline (seconds; each attempt): the run is stored before it, so a report
# that cannot be written in time fails alone (`biasaudit report RUN` writes it later).
REPORT_SECONDS = float(os.environ.get("BIASAUDIT_REPORT_SECONDS", "300"))


@cache
def database_task(name: str, function: Callable[..., Any]) -> Task:
    """A Prefect task named ``name`` that retries ``function`` on transient database errors."""
    return task(
        name=name,
        timeout_seconds=REPORT_SECONDS if name == "report" else None,
        retries=RETRIES,
        retry_delay_seconds=exponential_backoff(backoff_factor=retry_base_seconds()),
        retry_condition_fn=_transient,
        cache_policy=NO_CACHE,
    )(function)


def in_flow(name: str, function: Callable[P, R], /, *args: P.args, **options: P.kwargs) -> R:
    """The pipeline's ``run`` hook inside a flow: a database step as its own Prefect task run, a
    pure stage as a plain call."""
    if name not in DATABASE_STEPS:
        return function(*args, **options)
    return cast(R, database_task(name, function)(*args, **options))  # a sync task returns its value
