"""The suite runs in parallel (pytest-xdist): what one worker writes never reaches another."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import os

import pytest


@pytest.mark.parametrize("i", range(2))
def test_probe(i):
    worker = os.environ["PYTEST_XDIST_WORKER"]
    line = f"{os.environ['PREFECT_HOME']} {os.environ['BIASAUDIT_REPORTS_DIR']}"
    with open(os.path.join(os.environ["PROBE_OUT"], worker), "w") as out:
        out.write(line)
"""


def test_every_worker_has_its_own_prefect_home_and_reports_folder(tmp_path):
    """Two workers running tests with this suite's conftest see two Prefect homes (each
    temporary Prefect server's SQLite database) and two reports folders (reports are named by
    audit and run id, alike in every worker). The controller imports the conftest too and the
    workers inherit its environment, so folders it only defaulted were one for all."""
    out = tmp_path / "out"
    out.mkdir()
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest"]
        + ["-n", "2", "--dist", "each", str(probe)],
        cwd=ROOT,
        env={**os.environ, "PROBE_OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = {path.name: path.read_text().split() for path in out.iterdir()}
    assert sorted(seen) == ["gw0", "gw1"]
    (home_0, reports_0), (home_1, reports_1) = seen.values()
    assert home_0 != home_1 and reports_0 != reports_1
