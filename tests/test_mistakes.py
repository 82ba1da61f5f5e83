"""Mistakes caught early and named clearly (issue 40, deliver 6): each one line `error: ...`
naming what was wrong, where, and what is accepted, with a non-zero exit and no traceback."""

import pytest
from typer.testing import CliRunner

from biasaudit.flows.cli import app

runner = CliRunner()
PASSWORD = "s3cret-pw"


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        (f"postgres://u:{PASSWORD}@127.0.0.1/x", "use postgresql://u:***@127.0.0.1/x"),
        (f"postgresql+psycopg2://u:{PASSWORD}@127.0.0.1/x", "use postgresql://u:***@127.0.0.1/x"),
        (f"mysql://u:{PASSWORD}@127.0.0.1/x", "use mysql+pymysql://u:***@127.0.0.1/x"),
        (f"mariadb://u:{PASSWORD}@127.0.0.1/x", "use mysql+pymysql://u:***@127.0.0.1/x"),
    ],
)
def test_a_url_of_an_uninstalled_spelling_names_the_url_that_works(url, hint):
    """`postgres://` (SQLAlchemy knows no such dialect) and `mysql://` (its default driver,
    MySQLdb, is not installed) fail naming the spelling that works, without the password."""
    result = runner.invoke(app, ["history", "--db", url])
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert hint in lines[0], lines[0]
    assert PASSWORD not in result.output and "Traceback" not in result.output
