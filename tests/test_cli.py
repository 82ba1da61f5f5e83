"""The command line: fast commands never import Prefect; errors are clear."""

import subprocess
import sys
from io import StringIO
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from biasaudit.flows.cli import app

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


# ---- one clear line per mistake (docs/cli.md: "Mistakes and their messages") ----------------

PASSWORD = "pa55-w0rd-xyz"


def _one_line_error(result, *fragments, code=1):
    """It exits with ``code`` and prints exactly one line, ``error: ...`` holding ``fragments``,
    with no traceback and no password."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == code, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert "Traceback" not in result.output and PASSWORD not in result.output
    return lines[0]


@pytest.fixture
def migrated(tmp_path):
    url = f"sqlite:///{tmp_path / 'ok.db'}"
    assert runner.invoke(app, ["db", "upgrade", "--db", url]).exit_code == 0
    return url


def _config(tmp_path, body: str | bytes) -> str:
    path = tmp_path / "audits.toml"
    if isinstance(body, bytes):
        path.write_bytes(body)
    else:
        path.write_text(body)
    return str(path)


GOOD = '[[audits]]\nname = "a"\nmodel = "m"\nattributes = ["race"]\n'


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["history", "--db", "not a url"], ["malformed database URL"]),
        (["history", "--db", f"nosuch://u:{PASSWORD}@h/x"], ["unknown database kind 'nosuch'"]),
        (
            ["history", "--db", f"postgresql://u:{PASSWORD}@127.0.0.1:1/x"],
            ["cannot connect to database postgresql://u:***@127.0.0.1:1/x", "refused"],
        ),
        (
            ["history", "--db", f"mysql+pymysql://root:{PASSWORD}@127.0.0.1:1/x"],
            ["database mysql+pymysql://root:***@127.0.0.1:1/x"],
        ),
        (["history", "--since", "yesterday"], ["--since: 'yesterday' is not a date"]),
        (["history", "--metric", "fairness"], ["unknown metric 'fairness'"]),
        (["history", "--format", "xml"], ["--format is table, csv or json"]),
        (["history", "--status", "done"], ["--status is succeeded, failed or running"]),
        (["history", "99"], ["no run with id 99"]),
        (["quarantine", "99"], ["no run with id 99"]),
        (["quarantine"], ["give a RUN id or --load"]),
        (["compare", "99"], ["no run with id 99"]),
        (
            ["plan", "--metric", "fairness", "--rate", "0.1", "--rate", "0.2"],
            ["unknown metric 'fairness'"],
        ),
        (
            ["rank", "1", "--metric", "prevalence", "--attribute", "race", "--group", "a"],
            ["--metric prev (prevalence) is the outcome's base rate", "rank by one of acc, ppr"],
        ),
        (
            ["backfill", "a", "--from", "2026-01-01", "--to", "2026-02-01", "--every", "1w"],
            ["--every takes Nd (days) or Nmo (calendar months)"],
        ),
        (
            ["backfill", "a", "--from", "2026-02-01", "--to", "2026-01-01"],
            ["ends (2026-01-01) before it starts (2026-02-01)"],
        ),
    ],
)
def test_everyday_mistakes_are_one_line(migrated, monkeypatch, args, fragments):
    """It answers each everyday mistake with one line and exit code 1."""
    monkeypatch.setenv("BIASAUDIT_DATABASE_URL", migrated)
    monkeypatch.setenv("BIASAUDIT_CONNECT_TIMEOUT_SECONDS", "3")
    _one_line_error(runner.invoke(app, args), *fragments)


def test_missing_sqlite_file_is_named_and_not_created(tmp_path):
    """It names a missing SQLite file and creates nothing."""
    path = tmp_path / "typo.db"
    for command in (["history"], ["quarantine", "--load"], ["report", "1"], ["abandon", "1"]):
        result = runner.invoke(app, [*command, "--db", f"sqlite:///{path}"])
        _one_line_error(result, f"database file {path} does not exist", "db upgrade")
    assert not path.exists()


def test_unmigrated_database_is_named(tmp_path):
    """It tells to run `db upgrade` on a database without the schema (or an old one)."""
    import sqlite3

    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    result = runner.invoke(app, ["history", "--db", f"sqlite:///{path}"])
    _one_line_error(result, "is not migrated", "biasaudit db upgrade")


def test_half_built_store_is_one_line(tmp_path):
    """It refuses to upgrade a database holding one of the store's tables without its migration
    record, in one line naming the table."""
    import sqlite3

    path = tmp_path / "half.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE audit_runs (id INTEGER PRIMARY KEY)")
    result = runner.invoke(app, ["db", "upgrade", "--db", f"sqlite:///{path}"])
    line = _one_line_error(
        result, "biasaudit's tables ['audit_runs'] but no migration record", "half-built"
    )
    assert line.startswith("error: the database holds")  # the message alone, no type or hint


@pytest.mark.parametrize(
    ("body", "fragments"),
    [
        (None, ["does not exist"]),
        (b"\xff\xfe[[audits]]", ["is not UTF-8 text"]),
        ("[[audits]\nname=", ["is not valid TOML"]),
        (GOOD.replace('"m"', '"m"\nwindow = "fortnight"'), ["window"]),
        (GOOD + "[audits.thresholds]\ntolerance = inf\n", ["tolerance", "finite"]),
        (GOOD + "[audits.thresholds]\nstale_run_hours = 1e300\n", ["stale_run_hours"]),
        (GOOD + "[audits.smoothing]\ncps_lambda = nan\n", ["cps_lambda"]),
        (GOOD + '[audits.thresholds]\nplanning_power = "fast"\n', ["planning_power", "'exact'"]),
        (GOOD + "[audits.scan]\nchunk_rows = 100000000000000\n", ["chunk_rows"]),
        (GOOD.replace('["race"]', '[""]'), ["attribute name '' is empty"]),
        (GOOD.replace('["race"]', '["y_true"]'), ["'y_true' is reserved"]),
        (GOOD.replace('["race"]', '["a x b"]'), ["intersection separator"]),
        (GOOD.replace('"race"', '"race"]\nmetrics = ["fairness"'), ["unknown metric"]),
        (
            GOOD + 'decision = { score = "s", threshold = [0.3, 0.5] }\n',
            ["(audit 'a')", "decision.threshold", "one threshold per audit; define one audit per"],
        ),
    ],
)
def test_configuration_mistakes_are_one_line(tmp_path, body, fragments):
    """It rejects configurations that are unreadable or that used to validate and then crash
    (infinite or huge numbers, empty or reserved attribute names) in one line, before any run."""
    path = str(tmp_path / "absent.toml") if body is None else _config(tmp_path, body)
    listed = runner.invoke(app, ["audits", "-c", path])
    assert listed.exit_code == 1 and "Traceback" not in listed.output
    run = runner.invoke(app, ["run", "a", "-c", path, "--db", "sqlite:///:memory:"])
    _one_line_error(run, *fragments)


def test_unknown_audit_is_named(tmp_path, migrated):
    """It names an unknown audit and lists the configured ones."""
    result = runner.invoke(app, ["run", "ghost", "-c", _config(tmp_path, GOOD), "--db", migrated])
    _one_line_error(result, "no audit named 'ghost'", "configured: ['a']")
    result = runner.invoke(
        app, ["run", "a", "-c", _config(tmp_path, GOOD), "--as-of", "2026-13-45"]
    )
    _one_line_error(result, "--as-of: '2026-13-45' is not a date")


def test_audits_lists_and_validates_each_audit(tmp_path, migrated):
    """It lists every audit with its model and marks the invalid one, exiting 1."""
    body = GOOD + '[[audits]]\nname = "b"\nmodel = "m"\nattributes = ["race"]\nwindow = "x"\n'
    result = runner.invoke(app, ["audits", "-c", _config(tmp_path, body), "--db", migrated])
    assert result.exit_code == 1
    assert "error: 1 of 2 audits" in result.output
    row_a = next(line for line in result.output.splitlines() if "│ a " in line)
    row_b = next(line for line in result.output.splitlines() if "│ b " in line)
    assert "ok" in row_a and "invalid" in row_b
    assert "audit 'b': audits[0].window: 'x' is not 'all'" in result.output
    ok = runner.invoke(app, ["audits", "-c", _config(tmp_path, GOOD), "--db", migrated])
    assert ok.exit_code == 0 and "ok" in ok.output


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("empty.csv", b"", "is empty"),
        ("header.csv", b"prediction_id,model_id\n", "has no rows"),
        # A ragged line is quarantined row by row; this file then lacks columns.
        ("ragged.csv", b"a,b\n1,2\n3,4,5,6\n", "missing columns"),
        ("latin1.csv", "id,race\n1,Fran\xe7ais\n".encode("latin-1"), "is not UTF-8 text"),
        ("bad.parquet", b"PAR1 not really parquet", "is not a readable Parquet file"),
        ("missing.csv", None, "does not exist"),
    ],
)
def test_unreadable_prediction_files_are_one_line(tmp_path, migrated, name, content, fragment):
    """It names an empty, ragged, undecodable or corrupt CSV or Parquet file in one line."""
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    result = runner.invoke(app, ["load", str(path), "-a", "race", "--db", migrated])
    _one_line_error(result, fragment)


def test_version_and_plain_help():
    """It prints its version, and help with plain metavars (no markup, no type names)."""
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"biasaudit {version('biasaudit')}"
    helps = runner.invoke(app, ["history", "--help"]).output
    assert "--db URL" in helps and "--format FORMAT" in helps and "[RUN]" in helps
    assert "INTEGER" not in helps and "TEXT" not in helps and "╭" not in helps


def _redacted(message: str) -> str:
    from biasaudit.schemas.urls import redact

    return redact(message)


def test_passwords_stay_out_of_output_and_flow_parameters(postgres_server_url, monkeypatch):
    """It hands Prefect a reference instead of a URL with a password, resolves the reference from
    the environment, and shows such URLs with the password hidden."""
    from biasaudit.db.engine import URL_ENV, database_url, flow_url, safe_url

    monkeypatch.delenv(URL_ENV, raising=False)
    secret = f"postgresql://audit:{PASSWORD}@db.internal:5432/audits"
    assert flow_url(secret) == f"env:{URL_ENV}" and database_url(f"env:{URL_ENV}") == secret
    assert flow_url("sqlite:///a.db") == "sqlite:///a.db" and flow_url(None) is None
    assert safe_url(secret) == "postgresql://audit:***@db.internal:5432/audits"
    monkeypatch.delenv(URL_ENV)
    # The password in the query string, or with characters a URL must percent-encode.
    for url, shown in [
        (
            f"postgresql://audit@db/audits?password={PASSWORD}&sslmode=require",
            "postgresql://audit@db/audits?password=***&sslmode=require",
        ),
        (
            f"postgresql://audit@db/audits?sslmode=require&PWD={PASSWORD}",
            "postgresql://audit@db/audits?PWD=***&sslmode=require",
        ),
        (f"postgresql://audit:p%40ss%3Aw%2Frd%25{PASSWORD}@db/a", "postgresql://audit:***@db/a"),
    ]:
        assert safe_url(url) == shown
        assert flow_url(url) == f"env:{URL_ENV}" and database_url(f"env:{URL_ENV}") == url
        monkeypatch.delenv(URL_ENV)
    for message in [
        f"cannot connect to postgresql://audit@db/a?sslmode=x&password={PASSWORD}: refused",
        f"cannot connect to postgresql://audit:pa/ss@w:rd{PASSWORD}@db/a: refused",
    ]:
        result = _redacted(message)
        assert PASSWORD not in result and "***" in result and "refused" in result
    _one_line_error(
        runner.invoke(app, ["history", "--db", f"env:{URL_ENV}"]), f"${URL_ENV} is not set"
    )
    # PostgreSQL here trusts any password: a real upgrade with one, whose output hides it.
    from sqlalchemy.engine import make_url

    url = make_url(postgres_server_url).set(password=PASSWORD)
    result = runner.invoke(app, ["db", "upgrade", "--db", url.render_as_string(False)])
    assert result.exit_code == 0, result.output
    assert "postgres:***@" in result.output and PASSWORD not in result.output


HOSTILE_NAMES = [
    "\x1b[31mred\x1b[0m",  # SGR: recolours the terminal
    "\x1b]0;owned\x07",  # OSC: sets the window title
    "\x9b2J",  # C1 CSI: clears the screen on some terminals
    "\u202eevil",  # right-to-left override: shows "live"
    "line\u2028break",  # a line separator: a new line on some terminals
    "Jos\u00e9",  # NFC ...
    "Jose\u0301",  # ... and NFD: two groups, one Python identifier
]
UNSHOWABLE = ["\x1b", "\x07", "\x9b", "\u202e", "\u2028"]


def test_names_are_shown_as_data_never_obeyed(tmp_path):
    """Group names holding terminal sequences and a bidi override, and NFC/NFD twins: `history RUN`,
    `history --metric` and `quarantine --load` print every such character as a visible escape, and
    the twins stay two groups (the metric's pivot once failed on them with a SyntaxError)."""
    import pandas as pd

    from biasaudit.db.engine import make_engine
    from biasaudit.db.store.load import load_predictions
    from biasaudit.flows.pipeline import run_audit

    url = f"sqlite:///{tmp_path / 'names.db'}"
    assert runner.invoke(app, ["db", "upgrade", "--db", url]).exit_code == 0
    rows = 40
    frame = pd.DataFrame(
        {
            "prediction_id": [f"p{i}" for i in range(rows * len(HOSTILE_NAMES))],
            "model_id": "m",
            "model_version": "1",
            "predicted_at": pd.Timestamp("2026-01-01", tz="UTC"),
            "race": [name for name in HOSTILE_NAMES for _ in range(rows)],
            "y_true": [float(i % 2) for i in range(rows * len(HOSTILE_NAMES))],
            "y_pred": [(i // 2) % 2 for i in range(rows * len(HOSTILE_NAMES))],
        }
    )
    bad = frame.head(1).assign(prediction_id="\x1b]0;owned\x07", y_pred=3)
    load_predictions(make_engine(url), pd.concat([frame, bad]), ["race"], "test")
    config = tmp_path / "names.toml"
    config.write_text(
        '[[audits]]\nname = "names"\nmodel_id = "m"\nwindow = "all"\nattributes = ["race"]\n'
    )
    run = run_audit("names", str(config), url, pd.Timestamp("2026-02-01", tz="UTC"))
    outputs = {
        "history RUN": runner.invoke(app, ["history", str(run["run_id"]), "--db", url]),
        "history --metric": runner.invoke(
            app, ["history", "--metric", "ppr", "--attribute", "race", "--db", url]
        ),
        "quarantine": runner.invoke(app, ["quarantine", "--load", "--db", url]),
    }
    for command, result in outputs.items():
        assert result.exit_code == 0, (command, result.output)
        for character in UNSHOWABLE:
            assert character not in result.output, (command, repr(character))
        assert "\\x1b" in result.output, command
    shown = outputs["history --metric"].output
    assert "\\u202eevil" in shown and "Jos\u00e9" in shown and "Jose\u0301" in shown


# Cells a spreadsheet would run as a formula (OWASP's leading characters).
FORMULA_NAMES = ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "@SUM(1+1)", "-2+3", "\tx"]


def test_csv_exports_hold_no_formula_and_no_control_character(tmp_path):
    """`quarantine`, `history RUN` and `compare` with `--format csv` write a text cell that starts
    as a formula (= + - @ tab) with a leading single quote and control and bidirectional
    characters as the terminal tables' visible escapes, while numbers (a negative difference,
    text spelling a plain number such as -0.12) stay as they are."""
    import csv
    import io

    import pandas as pd

    from biasaudit.db.engine import make_engine
    from biasaudit.db.store.load import load_predictions
    from biasaudit.flows.pipeline import run_audit

    url = f"sqlite:///{tmp_path / 'csv.db'}"
    assert runner.invoke(app, ["db", "upgrade", "--db", url]).exit_code == 0
    names = [*FORMULA_NAMES, *HOSTILE_NAMES[:5], "-0.12"]
    rows = 40

    def frame(day, shift):
        n = rows * len(names)
        return pd.DataFrame(
            {
                "prediction_id": [f"{day}-{i}" for i in range(n)],
                "model_id": "m",
                "model_version": "1",
                "predicted_at": pd.Timestamp(f"2026-01-{day:02d}", tz="UTC"),
                "race": [name for name in names for _ in range(rows)],
                "y_true": [float(i % 2) for i in range(n)],
                "y_pred": [int((i + shift * (i // rows)) % 3 == 0) for i in range(n)],
            }
        )

    bad = frame(1, 0).head(1).assign(prediction_id="=1+1\x1b", y_pred=3)
    engine = make_engine(url)
    load_predictions(engine, pd.concat([frame(1, 0), bad]), ["race"], "test")
    load_predictions(engine, frame(20, 1), ["race"], "test")
    config = tmp_path / "csv.toml"
    config.write_text(
        '[[audits]]\nname = "c"\nmodel_id = "m"\nwindow = "last_7_days"\nattributes = ["race"]\n'
        "[audits.thresholds]\nmax_invalid_fraction = 0.5\n"
    )
    first = run_audit("c", str(config), url, pd.Timestamp("2026-01-02", tz="UTC"))
    second = run_audit("c", str(config), url, pd.Timestamp("2026-01-21", tz="UTC"))
    outputs = {
        "quarantine": ["quarantine", "--load", "--db", url, "--format", "csv"],
        "history RUN": ["history", str(second["run_id"]), "--db", url, "--format", "csv"],
        "compare": ["compare", str(second["run_id"]), str(first["run_id"]), "--all", "--db", url]
        + ["--format", "csv"],
    }
    for command, arguments in outputs.items():
        result = runner.invoke(app, arguments)
        assert result.exit_code == 0, (command, result.output)
        for character in [*UNSHOWABLE, "\t", "\r"]:
            assert character not in result.output, (command, repr(character))
        cells = [c for line in csv.reader(io.StringIO(result.output)) for c in line]
        assert cells, command
        formulas = [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r")]
        formulas += [c for c in cells if c[:1] == "-" and not _plain_number(c)]
        assert not formulas, (command, formulas)
        if command != "quarantine":
            assert "'=HYPERLINK(\"http://x\",\"y\")" in cells and "-0.12" in cells, command
            assert "'-2+3" in cells and "'\\x09x" in cells and "\\u202eevil" in cells, command
        else:
            assert "'=1+1\\x1b" in cells, cells
    page = tmp_path / "ll144.html"
    result = runner.invoke(
        app, ["report", str(second["run_id"]), "--db", url, "--format", "ll144", "--out", str(page)]
    )
    assert result.exit_code == 0, result.output
    table = page.with_suffix(".csv").read_text(encoding="utf-8")
    assert "\x1b" not in table and "\n=HYPERLINK" not in table and "'=HYPERLINK" in table
    compared = runner.invoke(app, outputs["compare"]).output
    changes = pd.read_csv(io.StringIO(compared))
    numeric = changes.select_dtypes("number")
    assert (numeric < 0).any().any(), "a negative change stays a number"


def _plain_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_a_full_disk_leaves_no_partial_report_and_says_so(tmp_path, monkeypatch):
    """The disk fills while the report is written (the write stops halfway with ENOSPC): no
    report file is left, not even an empty or half one; `run` keeps the committed run, says in
    one error line that its report was not written and how to write it, and exits 1 (it printed
    "report: None" and exited 0, leaving a 0-byte page); `report --out` fails the same way."""
    import errno

    from biasaudit.db.engine import make_engine
    from biasaudit.db.store.history import list_runs
    from biasaudit.db.store.load import load_predictions
    from biasaudit.flows.demo import END, GROUPS, synthetic_predictions

    from .conftest import DEMO_CONFIG

    url = f"sqlite:///{tmp_path / 'full.db'}"
    assert runner.invoke(app, ["db", "upgrade", "--db", url]).exit_code == 0
    data = synthetic_predictions()
    load_predictions(make_engine(url), data[data["model_id"] == "credit-scorer"], list(GROUPS), "t")
    reports = tmp_path / "reports"
    monkeypatch.setenv("BIASAUDIT_REPORTS_DIR", str(reports))
    write_text = Path.write_text

    def disk_full(self, data, *args, **kwargs):
        if self.name.endswith((".html", ".tmp")):
            write_text(self, data[: len(data) // 2], *args, **kwargs)
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return write_text(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", disk_full)
    # The flow's body as plain calls (flows.pipeline), so that no Prefect logging is configured
    # onto this test runner's captured streams.
    from biasaudit.flows import audit, pipeline

    monkeypatch.setattr(audit, "audit_flow", pipeline.run_audit)
    args = ["-c", str(DEMO_CONFIG), "--db", url, "--as-of", END.isoformat()]
    result = runner.invoke(app, ["run", "credit-race", *args])
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "succeeded and is stored" in errors[0], result.output
    assert "biasaudit report 1" in errors[0] and "report: None" not in result.output
    assert "Traceback" not in result.output
    assert not reports.exists() or list(reports.iterdir()) == []
    assert list_runs(make_engine(url))["status"].tolist() == ["succeeded"]
    out = tmp_path / "again.html"
    again = runner.invoke(app, ["report", "1", "--out", str(out), "--db", url])
    assert again.exit_code != 0 and "No space left on device" in again.output
    assert list(tmp_path.glob("*.html")) == [] and list(tmp_path.glob(".*.tmp")) == []


# ---- output: a run's summary first, one name per run, what to do instead ----------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One SQLite store of the demo's credit-scorer and hiring-screen predictions: hiring audited
    once (run 1), credit twice with window "all" (runs 2 and 3, versions 1 and 2: their windows
    overlap). Yields the URL, the credit predictions and what the pipeline printed."""
    from contextlib import redirect_stdout
    from datetime import timedelta
    from io import StringIO

    from biasaudit.db.engine import make_engine
    from biasaudit.db.store.load import load_predictions
    from biasaudit.db.store.migrate import upgrade
    from biasaudit.flows.demo import END, GROUPS, synthetic_predictions
    from biasaudit.flows.pipeline import run_audit

    folder = tmp_path_factory.mktemp("store")
    url = f"sqlite:///{folder / 'store.db'}"
    upgrade(url)
    frame = synthetic_predictions()
    frame = frame[frame["model_id"].isin(["credit-scorer", "hiring-screen"])]
    load_predictions(make_engine(url), frame, list(GROUPS), "demo")
    config = folder / "audits.toml"
    config.write_text(
        '[[audits]]\nname = "credit"\nmodel = "credit-scorer"\nwindow = "all"\n'
        'attributes = ["race", "sex"]\nintersections = [["race", "sex"]]\n'
        'metrics = ["tpr", "fpr", "ppv", "ppr"]\nreference_groups = { race = "White" }\n'
        "[audits.thresholds]\nbootstrap_replicates = 100\n"
        '[[audits]]\nname = "hiring"\nmodel = "hiring-screen"\nattributes = ["sex"]\n'
        'metrics = ["tpr"]\n[audits.thresholds]\nbootstrap_replicates = 100\n'
    )
    printed = StringIO()
    with redirect_stdout(printed):
        results = [
            run_audit("hiring", str(config), url, END),
            run_audit("credit", str(config), url, END - timedelta(days=15)),
            run_audit("credit", str(config), url, END),
        ]
    assert [r["run_id"] for r in results] == [1, 2, 3]
    credit = frame[frame["model_id"] == "credit-scorer"]
    return {"url": url, "credit": credit, "printed": printed.getvalue(), "results": results}


def test_a_run_is_named_by_its_id_and_version_everywhere(store):
    """Run 3 is the second version of its audit: the pipeline's line, the history, compare and
    the report all call it `run 3 (v2)` (never `run 3 (new version)` beside a table's v2)."""
    from biasaudit.db.engine import make_engine
    from biasaudit.flows.report import build_report

    url = store["url"]
    assert [r["version"] for r in store["results"]] == [1, 1, 2]
    printed = store["printed"]
    assert "audit hiring: run 1 (v1), new:" in printed
    assert "audit credit: run 2 (v1), new:" in printed
    assert "audit credit: run 3 (v2), new:" in printed
    shown = runner.invoke(app, ["history", "3", "--db", url])
    assert shown.output.startswith("run 3 (v2): audit credit"), shown.output
    compared = runner.invoke(app, ["compare", "3", "--db", url])
    assert "run 3 (v2), as of" in compared.output and "against run 2 (v1)" in compared.output
    page, markdown, _ = build_report(make_engine(url), 3)
    assert "<title>Bias audit credit: run 3 (v2)</title>" in page
    assert markdown.startswith("# Bias audit credit: run 3 \\(v2\\)")


def test_history_of_a_run_is_a_summary_unless_asked_for_more(store):
    """`history RUN` prints the run, verdicts and group sizes per attribute, the flagged findings
    and what was not tested and why, in a screenful; --all, --attribute or --metric add every
    table; csv and json stay the complete export."""
    url, credit = store["url"], store["credit"]
    summary = runner.invoke(app, ["history", "3", "--db", url])
    assert summary.exit_code == 0, summary.output
    lines = summary.output.splitlines()
    assert len(lines) < 50, summary.output
    assert "verdict" in summary.output and "metrics per group (blank" not in summary.output
    flagged = [line for line in lines if "Black" in line and " fpr " in line]
    assert flagged, summary.output  # the demo's injected FPR disparity
    cells = credit.groupby(["race", "sex"]).size()
    small = cells[cells < 30]  # min_group_size's default
    assert len(small) > 0
    for (race, sex), n in small.items():
        assert f"{race} x {sex} ({n})" in summary.output, summary.output
    assert "groups below min_group_size 30 (metrics kept, not tested)" in summary.output
    assert "not tested: " in summary.output and "undefined metric values: " in summary.output
    full = runner.invoke(app, ["history", "3", "--db", url, "--all"])
    assert full.exit_code == 0 and len(full.output.splitlines()) > 3 * len(lines)
    assert full.output.startswith(summary.output.splitlines()[0])
    for title in ("metrics per group (blank", "planning:", "meta-metrics:"):
        assert title in full.output, title
    narrowed = runner.invoke(app, ["history", "3", "--db", url, "--attribute", "sex"])
    assert "metrics per group (blank" in narrowed.output
    exported = runner.invoke(app, ["history", "3", "--db", url, "--format", "csv"])
    groups = credit["race"].nunique() + credit["sex"].nunique() + len(cells)
    assert len(exported.output.splitlines()) == 1 + groups * 4  # header, 4 metrics per group
    # Each metric row carries its group's labelled predictions, named so (not n: the summary's
    # group sizes count every valid prediction, labelled or not).
    table = pd.read_csv(StringIO(exported.output))
    assert "labelled" in table.columns and "n" not in table.columns
    race = table[table["attribute"] == "race"].groupby("group_name")["labelled"].unique()
    labelled = credit[credit["y_true"].notna()].groupby("race").size()
    assert {g: list(v) for g, v in race.items()} == {g: [n] for g, n in labelled.items()}
    assert "groups: rows (* below 30)" in summary.output


def test_compare_of_overlapping_windows_says_what_to_do_instead(store):
    """Runs 2 and 3 read every prediction up to their as-of (window "all"): compare tests
    nothing, says so, points to monitoring or disjoint windows, and still shows the largest
    untested changes."""
    compared = runner.invoke(app, ["compare", "3", "--db", store["url"]])
    assert compared.exit_code == 0, compared.output
    lines = compared.output.splitlines()
    assert "no change is tested" in lines[0]
    advice = lines[1]
    assert advice.startswith("to test changes instead:")
    assert "[audits.monitor]" in advice and "biasaudit history --monitor" in advice
    assert 'window = "last_30_days"' in advice and "30 days apart" in advice
    assert "changes, untested: the 10 largest" in compared.output


def test_a_report_page_has_the_mode_open_gives_a_file(tmp_path):
    """A report is created as any file the user writes (0666 less the umask), not private to its
    owner as a temporary file would be, and replaces an older page whole."""
    import os

    from biasaudit.flows.report import write_page

    page = tmp_path / "reports" / "a-run-1.html"
    previous = os.umask(0o022)
    try:
        write_page(page, "<p>one</p>")
        write_page(page, "<p>two</p>")
    finally:
        os.umask(previous)
    assert page.stat().st_mode & 0o777 == 0o644
    assert page.read_text() == "<p>two</p>" and [p.name for p in page.parent.iterdir()] == [page.name]


def test_rank_orders_runs_by_difference_ratio_and_bias_n(store):
    """`rank` prints each run's rates of one comparison (group first), D, R and the bias measure
    N with their ranks: the rates equal the FPR of Black and of White computed from the rows."""
    url, credit = store["url"], store["credit"]
    out = runner.invoke(
        app,
        ["rank", "2", "3", "--metric", "fpr", "--attribute", "race", "--group", "Black",
         "--reference", "White", "--db", url],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "value_group" in out.output and "bias_n" in out.output
    row = next(line for line in out.output.splitlines() if line.startswith("│ 3 "))
    cells = [cell.strip() for cell in row.strip("│").split("│")]
    negatives = credit[credit["y_true"] == 0]  # window "all": every row of the model
    fpr = negatives.groupby("race")["y_pred"].mean()
    assert cells[4:6] == [f"{fpr['Black']:.4g}", f"{fpr['White']:.4g}"]  # group first
