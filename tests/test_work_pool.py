"""The nightly deployment on a Prefect work pool: docker-compose's worker command (``biasaudit
deploy``, then ``prefect worker start``) against a real Prefect server, where the server's
scheduler creates the runs and the worker runs them; the parameters carry their descriptions."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from biasaudit.db.engine import make_engine
from biasaudit.db.store.history import list_runs
from biasaudit.flows.report import REPORTS_ENV
from biasaudit.flows.work_pool import worker_store_url

from .test_server import (
    BIN,
    PASSWORD,
    ROOT,
    SCHEDULED_AUDIT,
    _client_env,
    _completed_scheduled_runs,
    _get,
    _post,
    _stop,
    postgres_with_password,  # noqa: F401 - the fixture
    prefect_server,  # noqa: F401 - the fixture
)

CONTAINER_CONFIG = "/config/biasaudit.toml"  # where docker-compose mounts the configuration


def compose_worker_script(values: dict[str, str], config: Path) -> str:
    """docker-compose's worker command as its shell runs it: each ``${NAME:-default}`` replaced
    as compose does (``values`` first, else the default), the mounted configuration at
    ``config``."""
    worker = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["worker"]
    assert worker["entrypoint"] == ["sh", "-c"]
    (script,) = worker["command"]
    script = re.sub(
        r"\$\{([A-Z_]+):-([^}]*)\}", lambda m: values.get(m.group(1), m.group(2)), script
    )
    return script.replace(CONTAINER_CONFIG, str(config))


def test_the_worker_gets_an_absolute_store_url_and_never_a_password(tmp_path, monkeypatch):
    """A worker runs each flow run in a folder of its own: a SQLite store's relative path (the
    default too) is made absolute; a URL with a password from the environment is left to the
    worker's own environment; one on the command line is refused."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BIASAUDIT_DATABASE_URL", raising=False)
    assert worker_store_url(None) == f"sqlite:///{tmp_path / 'biasaudit.db'}"
    assert worker_store_url("sqlite:///s/x.db") == f"sqlite:///{tmp_path / 's' / 'x.db'}"
    assert worker_store_url("sqlite:////abs/x.db") == "sqlite:////abs/x.db"
    assert worker_store_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    secret = f"postgresql://u:{PASSWORD}@h/db"
    with pytest.raises(ValueError, match="leave out --db") as refused:
        worker_store_url(secret)
    assert PASSWORD not in str(refused.value)
    monkeypatch.setenv("BIASAUDIT_DATABASE_URL", secret)
    assert worker_store_url(None) is None


def test_the_compose_worker_deploys_then_runs_a_worker_on_the_same_pool(tmp_path):
    script = compose_worker_script({"BIASAUDIT_POOL": "p1"}, tmp_path / "a.toml")
    deploy, worker = script.split(" && ")
    assert deploy.startswith('biasaudit deploy --pool "p1"') and str(tmp_path / "a.toml") in deploy
    assert '--cron "0 2 * * *"' in deploy and '--timezone "UTC"' in deploy
    assert worker == 'exec prefect worker start --pool "p1"'


@pytest.mark.slow
def test_a_work_pool_deployment_runs_on_its_schedule(
    prefect_server,  # noqa: F811
    postgres_with_password,  # noqa: F811
    tmp_path,
):
    """docker-compose's worker command, every minute: ``biasaudit deploy`` puts the nightly flow
    on a process work pool and exits; the worker it then starts runs the run the server's
    scheduler creates, with nothing triggered; the audit is stored and its report lands in the
    deploying folder's reports. Prefect holds each parameter's description, no password."""
    url, pool = postgres_with_password, "biasaudit-test"
    config = tmp_path / "audits.toml"
    config.write_text(SCHEDULED_AUDIT)
    script = compose_worker_script({"BIASAUDIT_POOL": pool, "BIASAUDIT_CRON": "* * * * *"}, config)
    env = _client_env(
        prefect_server,
        BIASAUDIT_DATABASE_URL=url,
        PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
        PREFECT_WORKER_QUERY_SECONDS="2",
    )
    env.pop(REPORTS_ENV, None)
    worker = subprocess.Popen(
        ["sh", "-c", script],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while (deployment := _get(f"{prefect_server}/deployments/name/nightly/nightly")) is None:
            assert worker.poll() is None and time.time() < deadline, "nothing was deployed"
            time.sleep(1)
        assert isinstance(deployment, dict)
        deployed = time.time()
        while not (completed := _completed_scheduled_runs(prefect_server, deployment["id"])):
            assert worker.poll() is None, "the worker stopped"
            assert time.time() < deployed + 150, "no scheduled run completed within 150 s"
            time.sleep(2)
        waited = time.time() - deployed
    finally:
        output = _stop(worker)
    assert f"deployed nightly/nightly to work pool {pool!r}" in output, output[-3000:]
    assert deployment["work_pool_name"] == pool
    assert deployment["entrypoint"] == "biasaudit.flows.nightly.nightly_flow"
    assert deployment["parameters"]["db_url"] is None  # the worker's BIASAUDIT_DATABASE_URL
    assert deployment["schedules"][0]["schedule"]["cron"] == "* * * * *"
    pool_info = _get(f"{prefect_server}/work_pools/{pool}")
    assert isinstance(pool_info, dict) and pool_info["type"] == "process"
    schema = deployment["parameter_openapi_schema"]["properties"]
    for parameter in ("audits", "as_of", "force", "config_path", "db_url"):
        assert schema[parameter]["description"], parameter
    assert schema["as_of"]["anyOf"][0]["format"] == "date-time"
    runs = list_runs(make_engine(url))
    assert runs["status"].tolist()[:1] == ["succeeded"], output[-3000:]
    assert (tmp_path / "reports" / f"credit-race-run-{runs['id'].iloc[0]}.html").exists()
    flow_runs = _post(
        f"{prefect_server}/flow_runs/filter",
        {"flow_runs": {"id": {"any_": [r["id"] for r in completed]}}},
    )
    for where in (json.dumps([deployment, flow_runs]), output):
        assert PASSWORD not in where
    print(f"a scheduled run completed on the worker {waited:.0f} s after the deployment")
    _post(f"{prefect_server}/work_pools/", {"name": "elsewhere", "type": "kubernetes"})
    refused = subprocess.run(
        [str(BIN / "biasaudit"), "deploy", "--pool", "elsewhere", "-c", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    said = (refused.stdout + refused.stderr).strip().splitlines()
    expected = (
        "error: work pool 'elsewhere' is of type 'kubernetes'; biasaudit deploys to a 'process' "
        "pool (name another pool, or create one: prefect work-pool create NAME --type process)"
    )
    assert refused.returncode == 1 and said == [expected], said
