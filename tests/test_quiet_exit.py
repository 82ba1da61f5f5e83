"""A run whose source is a DuckDB file exits quietly: nothing of DuckDB's (or Arrow's) objects is
left alive at interpreter exit, which DuckDB's bindings report on stderr as 'nanobind: leaked'."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

DUCKDB_SOURCE = """
import duckdb
con = duckdb.connect({path!r})
con.execute(
    "create table preds as select 'p' || i::varchar as prediction_id, 'm' as model_id, "
    "'v1' as model_version, timestamp '2026-11-20 00:00:00' as predicted_at, (i % 2) as y_true, "
    "((i // 3) % 2) as y_pred, case when i % 3 = 0 then 'a' else 'b' end as sex "
    "from range(3000) t(i)"
)
con.close()
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["memory", "stream", "pushdown"])
def test_a_run_from_a_duckdb_source_leaves_nothing_on_stderr(tmp_path, mode):
    pytest.importorskip("duckdb_engine")
    source = tmp_path / "source.duckdb"
    subprocess.run([sys.executable, "-c", DUCKDB_SOURCE.format(path=str(source))], check=True)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    config = tmp_path / "audits.toml"
    config.write_text(
        '[[audits]]\nname = "dd"\nmodel = "m"\nattributes = ["sex"]\nmetrics = ["tpr", "fpr"]\n'
        f'source = "preds"\nsource_db = "duckdb:///{source}"\nwindow = "all"\n'
        f'[audits.scan]\nmode = "{mode}"\nchunk_rows = 1000\n'
    )
    cli = [str(Path(sys.executable).parent / "biasaudit")]
    env = {**os.environ, "BIASAUDIT_REPORTS_DIR": str(tmp_path / "reports")}
    subprocess.run([*cli, "db", "upgrade", "--db", store], check=True, env=env)
    done = subprocess.run(
        [*cli, "run", "dd", "--config", str(config), "--db", store, "--as-of", "2026-11-25"],
        check=False, capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "nanobind" not in done.stderr and "leaked" not in done.stderr, done.stderr
