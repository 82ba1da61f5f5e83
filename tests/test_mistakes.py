"""Mistakes caught early and named clearly: each one line `error: ...`
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


# ---- a store of the demo's predictions -------------------------------------------------------

BAD_AUDITS = """
[[audits]]
name = "typo"
model_id = "credit-scorer"
window = "all"
attributes = ["race"]
reference_groups = { race = "Whte" }

[[audits]]
name = "nomodel"
model_id = "credit-scorr"
window = "all"
attributes = ["race"]

[[audits]]
name = "nocol"
model_id = "credit-scorer"
window = "all"
attributes = ["race"]
columns = { y_true = "lable" }

[[audits]]
name = "yesno"
model_id = "yesno-model"
source = "yesno"
window = "all"
attributes = ["race"]

[[audits]]
name = "good"
model_id = "credit-scorer"
window = "all"
attributes = ["race"]
reference_groups = { race = "White" }
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A SQLite store of the demo's credit-scorer and hiring-screen predictions, both audited
    once (runs 1 and 2), and a model whose labels are spelt yes/no with some NULLs; the URL and
    a configuration of mistaken audits."""
    from contextlib import redirect_stdout
    from io import StringIO

    from biasaudit.db.engine import make_engine
    from biasaudit.db.store.load import load_predictions
    from biasaudit.db.store.migrate import upgrade
    from biasaudit.flows.demo import END, GROUPS, synthetic_predictions
    from biasaudit.flows.pipeline import run_audit

    folder = tmp_path_factory.mktemp("mistakes")
    url = f"sqlite:///{folder / 'store.db'}"
    upgrade(url)
    frame = synthetic_predictions()
    frame = frame[frame["model_id"].isin(["credit-scorer", "hiring-screen"])]
    load_predictions(make_engine(url), frame, list(GROUPS), "demo")
    config = folder / "audits.toml"
    config.write_text(
        '[[audits]]\nname = "credit"\nmodel = "credit-scorer"\nwindow = "all"\n'
        'attributes = ["race", "sex"]\nmetrics = ["tpr", "fpr", "ppv", "ppr"]\n'
        'reference_groups = { race = "White" }\n[audits.thresholds]\nbootstrap_replicates = 100\n'
        '[[audits]]\nname = "hiring"\nmodel = "hiring-screen"\nwindow = "all"\n'
        'attributes = ["sex", "race"]\nintersections = [["race", "sex"]]\n'
        'metrics = ["tpr", "fpr", "ppr", "ppv"]\n[audits.thresholds]\nbootstrap_replicates = 100\n'
    )
    with redirect_stdout(StringIO()):
        run_audit("credit", str(config), url, END)
        run_audit("hiring", str(config), url, END)
    from sqlalchemy import text

    with make_engine(url).begin() as connection:  # labels spelt yes/no, 15 of 100 unknown
        connection.execute(
            text(
                "CREATE TABLE yesno (prediction_id TEXT PRIMARY KEY, model_id TEXT, "
                "predicted_at TEXT, y_true TEXT, y_pred INTEGER, race TEXT)"
            )
        )
        connection.execute(
            text(
                "INSERT INTO yesno VALUES (:i, 'yesno-model', '2026-10-01T00:00:00Z', :y, :p, :r)"
            ),
            [
                {
                    "i": f"p{i}",
                    "y": None if i < 15 else ("yes" if i % 2 else "no"),
                    "p": i % 2,
                    "r": "A" if i % 3 else "B",
                }
                for i in range(100)
            ],
        )
    bad = folder / "bad.toml"
    bad.write_text(BAD_AUDITS)
    yield {"url": url, "config": config, "bad": bad, "folder": folder}


def _one_error(result) -> str:
    lines = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert result.exit_code != 0 and len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def _no_server(monkeypatch):
    """A Prefect server that must not start: a mistake the command can know is caught first."""
    from biasaudit.flows.cli import runs

    def started(*args, **kwargs):
        raise AssertionError("a Prefect server was started")

    monkeypatch.setattr(runs, "_prefect_environment", started)


@pytest.mark.parametrize(
    ("audit", "message"),
    [
        (
            "typo",
            (
                "error: reference group 'Whte' of attribute 'race' is not in the data (audit 'typo'); "
                "groups: 'White', 'Black', 'Hispanic', 'Asian', 'Pacific Islander', 'Native American'"
            ),
        ),
        (
            "nomodel",
            (
                "error: unknown model 'credit-scorr': 'predictions' holds predictions of "
                "['credit-scorer', 'hiring-screen']"
            ),
        ),
        ("nocol", "error: source 'predictions': no column 'lable' (y_true); it has: "),
        (
            "yesno",
            (
                "error: source 'yesno': column 'y_true' (y_true) holds values that are not accepted in "
                "85.0% of the window's 100 rows, above max_invalid_fraction = 5.0%: 'yes', 'no'; "
                "accepted: binary: 0/1 or true/false (NULL: an unknown outcome)"
            ),
        ),
    ],
)
def test_run_fails_before_any_prefect_server_starts(store, monkeypatch, audit, message):
    """`biasaudit run` of an audit whose reference group, model or column is wrong fails with
    one line before a Prefect server starts (it took 10-15 s on an idle machine, 52-80 s on a
    busy one, to start the server first; now 1.4-2.2 s)."""
    _no_server(monkeypatch)
    result = runner.invoke(app, ["run", audit, "-c", str(store["bad"]), "--db", store["url"]])
    assert _one_error(result).startswith(message), result.output


def test_audits_check_reads_the_source(store):
    """`biasaudit audits` said "ok" to a reference typo, an unknown model id and yes/no labels;
    `audits --check` reads the source and prints one line per problem naming what was wrong,
    where, and what is accepted, and exits 1."""
    args = ["audits", "-c", str(store["bad"]), "--db", store["url"]]
    plain = runner.invoke(app, args)
    assert "audit 'typo': reference group" not in plain.output  # the catalogue alone: no rows
    result = runner.invoke(app, [*args, "--check"])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    found = {line.split(":")[0] for line in lines if line.startswith("audit '")}
    assert found == {"audit 'typo'", "audit 'nomodel'", "audit 'nocol'", "audit 'yesno'"}, lines
    assert (
        "audit 'typo': reference group 'Whte' of attribute 'race' is not in the data; groups: "
        "'White', 'Black', 'Hispanic', 'Asian', 'Pacific Islander', 'Native American'" in lines
    ), lines
    assert (
        "audit 'nomodel': unknown model 'credit-scorr': 'predictions' holds predictions of "
        "['credit-scorer', 'hiring-screen']" in lines
    ), lines
    assert (
        "audit 'yesno': source 'yesno': column 'y_true' (y_true) holds values that are not "
        "accepted in 85.0% of the window's 100 rows, above max_invalid_fraction = 5.0%: "
        "'yes', 'no'; accepted: binary: 0/1 or true/false (NULL: an unknown outcome)" in lines
    ), lines
    assert lines[-1] == f"error: 4 of 5 audits in {store['bad']} are invalid", lines
    good = runner.invoke(
        app, ["audits", "-c", str(store["config"]), "--db", store["url"], "--check"]
    )
    assert good.exit_code == 0 and "invalid" not in good.output, good.output


def test_too_many_invalid_rows_names_the_column_values_and_run(store):
    """yes/no labels with some NULLs (85 of 100 rows quarantined) gave the generic "85.0% failed
    validation"; the line names the run, the source's column, what it accepts, the first bad value
    and where the quarantined rows are."""
    from contextlib import redirect_stdout
    from io import StringIO

    from biasaudit.db.engine import make_engine
    from biasaudit.db.store.history import list_runs
    from biasaudit.flows.pipeline import run_audit
    from biasaudit.schemas.quarantine import TooManyInvalidRows

    with redirect_stdout(StringIO()), pytest.raises(TooManyInvalidRows) as caught:
        run_audit("yesno", str(store["bad"]), store["url"])
    runs = list_runs(make_engine(store["url"]))
    run_id = int(runs[runs["audit_name"] == "yesno"]["id"].iloc[0])
    assert str(caught.value) == (
        f"run {run_id}: 85 of 100 rows (85.0%) failed validation, above max_invalid_fraction = "
        "5.0%; column 'y_true' of 'yesno': 85 rows, accepted binary: 0/1 or true/false (NULL: an "
        f"unknown outcome), first bad value 'yes' (prediction 'p15'); see `biasaudit quarantine "
        f"{run_id}`"
    )


def test_flagged_disparities_say_which_procedure_flagged_each(store, capsys, monkeypatch):
    """The terminal's "flagged disparities" listed rows whose HDI decision is "undecided" with no
    word on the two verdicts: each row says which of the two procedures flagged it."""
    from biasaudit.flows.cli import history

    frames = []
    monkeypatch.setattr(history, "_print_frame", lambda frame, title=None: frames.append(frame))
    history._print_flagged(store["url"], [2])
    out = capsys.readouterr().out
    (flagged,) = frames
    by = dict(zip(flagged["decision"], flagged["flagged_by"]))
    assert by == {
        "undecided": "test only; HDI+ROPE undecided",
        "biased": "both: test and HDI+ROPE",
    }, flagged
    assert "flagged_by: every row is flagged by the frequentist test" in out
    frames.clear()
    runner.invoke(app, ["history", "2", "--all", "--db", store["url"]])
    assert any("flagged_by" in frame for frame in frames)


def test_a_metric_series_is_of_one_audit(store):
    """`history --metric` without --audit mixed models in one series; with more than one audit
    holding the metric it asks for --audit (or --model), naming them."""
    result = runner.invoke(
        app, ["history", "--metric", "tpr", "--attribute", "sex", "--db", store["url"]]
    )
    assert _one_error(result) == (
        "error: --metric tpr: 2 audits hold it, a series each: 'credit' (model 'credit-scorer'), "
        "'hiring' (model 'hiring-screen'); choose one with --audit NAME (or --model ID)"
    )
    for narrowed in (["--audit", "hiring"], ["--model", "hiring-screen"]):
        one = runner.invoke(
            app,
            ["history", "--metric", "tpr", "--attribute", "sex", *narrowed, "--db", store["url"]],
        )
        assert one.exit_code == 0 and "credit" not in one.output, one.output


def test_load_says_the_model_version_is_required_and_how_to_give_it(tmp_path):
    """The docs called `load`'s model version optional while every stored prediction needs one:
    the docs say it is required (unless the file has the column) and a file without it fails
    naming --model-version."""
    from pathlib import Path

    url = f"sqlite:///{tmp_path / 'load.db'}"
    assert runner.invoke(app, ["db", "upgrade", "--db", url]).exit_code == 0
    csv = tmp_path / "p.csv"
    csv.write_text("prediction_id,model_id,predicted_at,y_true,y_pred,race\n1,m,2026-01-01,1,1,A\n")
    result = runner.invoke(app, ["load", str(csv), "-a", "race", "--db", url])
    assert _one_error(result) == (
        f"error: {csv}: missing columns ['model_version'] (every stored prediction has a "
        "model_id and a model_version); the file has: prediction_id, model_id, predicted_at, "
        "y_true, y_pred, race; give model_version with --model-version VERSION or --map "
        "model_version=COLUMN"
    )
    given = runner.invoke(
        app, ["load", str(csv), "-a", "race", "--model-version", "1", "--db", url]
    )
    assert given.exit_code == 0 and "inserted 1" in given.output, given.output
    docs = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    row = next(line for line in docs.splitlines() if line.startswith("| `biasaudit load"))
    assert "[--model M --model-version V]" not in row
    assert "--model-version V" in row and "required" in row, row


def test_the_first_screen_says_ppr_counts_every_prediction(store, tmp_path):
    """The report's first screen said rates are of labelled predictions, while PPR counts every
    prediction, labelled or not: the sentence says which rates count which predictions."""
    out = tmp_path / "run.html"
    result = runner.invoke(app, ["report", "2", "--out", str(out), "--db", store["url"]])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "Rates are of the labelled predictions, counts in brackets." not in page
    assert (
        "Rates are of the labelled predictions, except the predicted positive and negative rates "
        "(PPR, PNR), which count every valid prediction, labelled or not; counts in brackets."
    ) in page


def test_an_empty_window_names_the_span_of_the_models_predictions(store, monkeypatch):
    """A window that holds none of the model's rows (the wrong --as-of) fails before a server
    starts, naming the span the model's predictions cover."""
    _no_server(monkeypatch)
    config = store["folder"] / "recent.toml"
    config.write_text(
        '[[audits]]\nname = "recent"\nmodel = "credit-scorer"\nwindow = "last_30_days"\n'
        'attributes = ["race"]\n'
    )
    result = runner.invoke(
        app, ["run", "recent", "-c", str(config), "--db", store["url"], "--as-of", "2026-12-31"]
    )
    line = _one_error(result)
    assert line.startswith(
        "error: no predictions of model 'credit-scorer' in 'predictions' for window "
        "(2026-12-01 00:00:00+00:00, 2026-12-31 00:00:00+00:00]; the model's predictions span "
        "2026-09-01"
    ), line
    assert line.endswith(
        "choose an --as-of that window 'last_30_days' reaches them from, or a longer window"
    ), line


def test_audits_check_on_every_store_database(db_url, tmp_path):
    """`audits --check` reads the source with the same queries on SQLite, PostgreSQL and MariaDB:
    the model's rows (attributes from the JSON column), the reference groups and the labels."""
    import pandas as pd

    from biasaudit.db.engine import make_engine
    from biasaudit.db.store.load import load_predictions
    from biasaudit.flows.demo import GROUPS, synthetic_predictions

    engine = make_engine(db_url)
    frame = synthetic_predictions()
    load_predictions(
        engine, frame[frame["model_id"] == "credit-scorer"].head(600), list(GROUPS), "t"
    )
    pd.DataFrame(
        {
            "prediction_id": [f"p{i}" for i in range(40)],
            "model_id": "yesno-model",
            "predicted_at": "2026-10-01T00:00:00Z",
            "y_true": [None if i < 5 else ("yes" if i % 2 else "no") for i in range(40)],
            "y_pred": [i % 2 for i in range(40)],
            "race": ["A" if i % 3 else "B" for i in range(40)],
        }
    ).to_sql("yesno", engine, index=False)
    engine.dispose()
    config = BAD_AUDITS.replace('columns = { y_true = "lable" }\n', "")
    path = tmp_path / "bad.toml"
    path.write_text(config)
    result = runner.invoke(app, ["audits", "-c", str(path), "--db", db_url, "--check"])
    lines = result.output.splitlines()
    found = sorted(line.split(":")[0] for line in lines if line.startswith("audit '"))
    assert found == ["audit 'nomodel'", "audit 'typo'", "audit 'yesno'"], result.output
    assert any(line.startswith("audit 'typo': reference group 'Whte'") for line in lines)
    assert any("'Whte'" in line and "'White'" in line for line in lines), result.output
    assert lines[-1].startswith("error: 3 of 5 audits in"), result.output


def test_an_intersections_reference_typo_fails_before_the_server(store, monkeypatch):
    """A reference group of an intersection whose part is not among its attribute's values
    fails before a Prefect server starts, naming the part and the attribute's groups."""
    _no_server(monkeypatch)
    config = store["folder"] / "inter.toml"
    config.write_text(
        '[[audits]]\nname = "inter"\nmodel = "credit-scorer"\nwindow = "all"\n'
        'attributes = ["race", "sex"]\nintersections = [["race", "sex"]]\n'
        'reference_groups = { "race x sex" = "Whte x Male" }\n'
    )
    result = runner.invoke(app, ["run", "inter", "-c", str(config), "--db", store["url"]])
    assert _one_error(result) == (
        "error: reference group 'Whte x Male' of intersection 'race x sex' is not in the data "
        "(audit 'inter'): 'Whte' is not a value of 'race'; groups of 'race': 'White', 'Black', "
        "'Hispanic', 'Asian', 'Pacific Islander', 'Native American'"
    )


@pytest.mark.parametrize(
    ("api", "db", "message"),
    [
        (
            None,
            None,
            "error: deploy needs a Prefect server that outlives this command: set PREFECT_API_URL",
        ),
        (
            "http://127.0.0.1:1/api",
            None,
            "error: deploy: the Prefect API at http://127.0.0.1:1/api did not answer (ConnectError",
        ),
        (
            "http://127.0.0.1:1/api",
            f"postgresql://u:{PASSWORD}@127.0.0.1:1/x",
            (
                "error: deploy hands the store's URL to Prefect, which must never hold its "
                "password: put the URL in BIASAUDIT_DATABASE_URL in the worker's environment and "
                "leave out --db"
            ),
        ),
    ],
)
def test_deploy_without_a_reachable_prefect_server_is_one_line(store, tmp_path, api, db, message):
    """`biasaudit deploy` needs a server that outlives it (no temporary one), and says so; an
    unreachable one is named with what to do, not a traceback; a password on the command line is
    refused before anything is contacted. Run as a process: Prefect reads its settings once per
    interpreter."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env["PREFECT_HOME"] = str(tmp_path)  # no profile of the machine's
    if api:
        env["PREFECT_API_URL"] = api
    done = subprocess.run(
        [str(Path(sys.executable).parent / "biasaudit"), "deploy", "--pool", "p"]
        + ["-c", str(store["config"]), "--db", db or store["url"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = done.stdout + done.stderr
    lines = [line for line in output.splitlines() if line.startswith("error: ")]
    assert done.returncode == 1 and len(lines) == 1, output
    assert lines[0].startswith(message) and "Traceback" not in output, output
    assert PASSWORD not in output
