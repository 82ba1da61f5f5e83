"""A database that stops answering mid-scan fails the run within the configured timeout.

The audit's source database is reached through tests.faultproxy, frozen once the scan's main
statement has been sent: the server (or the network) goes silent while every socket stays open,
as a server stopped by SIGSTOP would, so TCP keepalives still get their answers. The run must
fail within BIASAUDIT_STATEMENT_TIMEOUT_SECONDS and a small margin, be marked failed with no
results, and say so in one line.
"""

import time

import pytest

from biasaudit.db.engine import make_engine
from biasaudit.db.store.history import list_runs
from biasaudit.db.store.migrate import upgrade
from biasaudit.flows import audit, pipeline
from biasaudit.flows.cli import runs as cli_runs

from .conftest import DEMO_CONFIG, on_databases
from .faultproxy import FaultProxy
from .test_cli import _one_line_error, app, runner
from .test_reliability import RESULT_TABLES, counts, load_small

TIMEOUT = 3.0
MARGIN = 3.0


def audit_over(tmp_path, source_db: str, mode: str) -> str:
    """The demo's credit-race audit, reading ``source_db`` in scan ``mode``; the config's path."""
    body = DEMO_CONFIG.read_text().split("\n[[audits]]")[1]
    config = tmp_path / "audits.toml"
    config.write_text(
        f"[[audits]]{body.rstrip()}\n"
        f'source_db = "{source_db}"\n'
        f'[audits.scan]\nmode = "{mode}"\nchunk_rows = 1000\n'
    )
    return str(config)


@on_databases("postgresql", "mariadb")
@pytest.mark.parametrize("mode", ["stream", "pushdown"])
def test_a_frozen_source_fails_the_run_within_the_timeout(db_url, mode, tmp_path, monkeypatch):
    """Frozen once the scan's main statement was sent (PostgreSQL's stream reads through ADBC's
    COPY, the other scans through the engine's connection), `biasaudit run` fails after about the
    statement timeout with one error line, the run marked failed with no results."""
    load_small(db_url)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(store)
    monkeypatch.setenv("BIASAUDIT_STATEMENT_TIMEOUT_SECONDS", str(TIMEOUT))
    monkeypatch.setenv("BIASAUDIT_CONNECT_TIMEOUT_SECONDS", "1")
    # One attempt, as plain calls and without a Prefect server: the retries' own waits are not
    # what is measured here.
    monkeypatch.setattr(audit, "audit_flow", pipeline.run_audit)
    monkeypatch.setattr(cli_runs, "_prefect_environment", lambda: None)
    # The source is frozen in the scan, not in the checks `run` makes before it (their own GROUP BY)
    monkeypatch.setattr(cli_runs, "_data_problems", lambda *args, **kwargs: [])
    postgres = "postgresql" in db_url
    marker = b"GROUP BY" if mode == "pushdown" else b"COPY" if postgres else b"y_pred"
    parsed = make_engine(db_url).url
    with FaultProxy(parsed.host or "127.0.0.1", parsed.port or 0, lifetime=20) as proxy:
        proxy.freeze(after=marker)
        config = audit_over(tmp_path, proxy.url(db_url), mode)
        started = time.monotonic()
        result = runner.invoke(app, ["run", "credit-race", "-c", config, "--db", store])
        elapsed = time.monotonic() - started
        assert proxy.frozen.is_set()
    line = _one_line_error(result, "reading the audit's source on", "check that the database is up")
    print(f"{mode}: failed after {elapsed:.1f} s: {line}")
    assert TIMEOUT <= elapsed < TIMEOUT + MARGIN
    assert list_runs(make_engine(store))["status"].tolist() == ["failed"]
    assert counts(store, *(m.__table__ for m in RESULT_TABLES)) == [0] * len(RESULT_TABLES)
