"""The command line: fast commands never import Prefect; errors are clear."""

import subprocess
import sys

from biasaudit.flows.cli import app
from typer.testing import CliRunner

runner = CliRunner()


def test_history_does_not_import_prefect(tmp_path):
    """It answers `history` without importing Prefect (so it starts fast)."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom biasaudit.flows.cli import app\n"
        f"r = CliRunner().invoke(app, ['db', 'upgrade', '--db', '{url}'])\n"
        "assert r.exit_code == 0, r.output\n"
        f"r = CliRunner().invoke(app, ['history', '--db', '{url}'])\n"
        "assert r.exit_code == 0 and 'no runs match' in r.output, r.output\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith('prefect')}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_load_reports_and_quarantines(tmp_path):
    """It loads a CSV through --map, quarantines bad rows and skips rows already present."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert runner.invoke(app, ["db", "upgrade", "--db", url]).exit_code == 0
    csv = tmp_path / "p.csv"
    csv.write_text(
        "id,when,label,pred,race\n1,2026-01-01,1,1,A\n2,2026-01-02,0,3,B\n3,2026-01-03,,0,B\n"
    )
    args = [
        "load",
        str(csv),
        "--db",
        url,
        "--model",
        "m",
        "--model-version",
        "1",
        "-a",
        "race",
        "--map",
        "prediction_id=id",
        "--map",
        "predicted_at=when",
        "--map",
        "y_true=label",
        "--map",
        "y_pred=pred",
    ]
    first = runner.invoke(app, args)
    assert first.exit_code == 2, first.output  # 1 of 3 quarantined: over the 5% default
    assert "inserted 2, already present 0, quarantined 1" in first.output
    assert "1 of 3 rows (33.3%) were quarantined" in first.output
    again = runner.invoke(app, [*args, "--max-invalid-fraction", "0.5"])
    assert again.exit_code == 0, again.output
    assert "inserted 0, already present 2, quarantined 1" in again.output


def test_missing_columns_and_unknown_run(tmp_path):
    """It names missing columns and unknown runs instead of a traceback."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    runner.invoke(app, ["db", "upgrade", "--db", url])
    csv = tmp_path / "p.csv"
    csv.write_text("id,race\n1,A\n")
    result = runner.invoke(app, ["load", str(csv), "--db", url, "-a", "race"])
    assert result.exit_code == 1 and "missing columns" in result.output
    result = runner.invoke(app, ["history", "42", "--db", url])
    assert result.exit_code == 1 and "no run with id 42" in result.output
