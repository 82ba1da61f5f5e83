"""The retry policy of every database step: which errors are worth retrying, how often, how long.

A database that is unreachable, restarting or dropping connections raises SQLAlchemy's
OperationalError or InterfaceError: those are retried with exponential backoff (base
``BIASAUDIT_RETRY_BASE_SECONDS``, default 2 s: waits of 2, 4 and 8 s) before the run fails with the
cause. Bad data and bad configuration are never retried.
"""

from __future__ import annotations

import os

from sqlalchemy.exc import InterfaceError, OperationalError

RETRIES = 3


def retry_base_seconds() -> float:
    """First backoff wait in seconds (doubles at each retry)."""
    return float(os.environ.get("BIASAUDIT_RETRY_BASE_SECONDS", "2"))


def is_transient(error: BaseException | None) -> bool:
    """Whether ``error`` says the database could not be reached or answered operationally."""
    return isinstance(error, (OperationalError, InterfaceError))
