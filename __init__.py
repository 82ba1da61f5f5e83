"""biasaudit: nightly, versioned fairness audits of deployed binary classifiers.

The public API::

    import biasaudit
    result = biasaudit.audit_frame(frame, attributes=["race"], reference_groups={"race": "White"})

``monitor_frame`` replays a history of predictions as nightly increments and returns, per night
and comparison, the e-process, the confidence sequence and the alarm (the monitored flow's core).
``audit_frame`` validates a DataFrame with the flow's Pandera schema and runs the same audit core
(``biasaudit.tasks.core.audit_counts``) as the Prefect flow; the result's frames have the columns
of the result tables. The repository root is this package: ``biasaudit.flows`` (Prefect flows and
the CLI), ``biasaudit.tasks`` (the pure stages and the core), ``biasaudit.schemas`` (schemas,
configuration, metric ids) and ``biasaudit.db`` (tables, migrations, persistence, history).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from biasaudit.tasks.api import audit_frame
    from biasaudit.tasks.core import AuditResult, audit_counts
    from biasaudit.tasks.monitor_frame import monitor_frame

__all__ = ["AuditResult", "audit_counts", "audit_frame", "monitor_frame"]

# Imported on first use (PEP 562), so that ``import biasaudit.db.sources.scan`` or the CLI does not pay
# for scipy and the statistical stages.
_HOMES = {
    "AuditResult": "biasaudit.tasks.core",
    "audit_counts": "biasaudit.tasks.core",
    "audit_frame": "biasaudit.tasks.api",
    "monitor_frame": "biasaudit.tasks.monitor_frame",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'biasaudit' has no attribute {name!r}")
    value = getattr(import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
