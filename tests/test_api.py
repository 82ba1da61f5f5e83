"""The Python API: audit_frame runs the flow's schema and core on a DataFrame."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa
import pytest

import biasaudit
from biasaudit.schemas.config import ConfigError
from biasaudit.schemas.results import CONTRACTS

from .conftest import COMPAS

ROOT = Path(__file__).resolve().parents[1]
needs_compas = pytest.mark.skipif(not COMPAS.exists(), reason=f"{COMPAS} is absent")


def compas_frame() -> pd.DataFrame:
    """ProPublica's binary prediction: score_text != "Low" (Medium or High)."""
    raw = pd.read_csv(COMPAS)
    return pd.DataFrame(
        {
            "prediction_id": raw["id"].astype(str),
            "y_true": raw["two_year_recid"].astype(float),
            "y_pred": (raw["score_text"] != "Low").astype(int),
            "race": raw["race"],
            "sex": raw["sex"],
        }
    )


@pytest.fixture(scope="module")
def compas_result():
    return biasaudit.audit_frame(
        compas_frame(),
        attributes=["race", "sex"],
        intersections=[["race", "sex"]],
        reference_groups={"race": "Caucasian"},
        bootstrap_replicates=200,
    )


@needs_compas
def test_compas_reproduces_propublica(compas_result):
    """It gives ProPublica's FPR and FNR for Black and White defendants (44.85%/23.45%,
    27.99%/47.72%) and the same values as counts taken straight from the CSV."""
    raw = pd.read_csv(COMPAS)
    predicted, truth = raw["score_text"] != "Low", raw["two_year_recid"] == 1
    metrics = compas_result.metrics
    race = metrics[(metrics["attribute"] == "race") & (metrics["subset"] == "group")]
    value = race.pivot(index="group_name", columns="metric", values="value")
    for group, fpr, fnr in [("African-American", 0.4485, 0.2799), ("Caucasian", 0.2345, 0.4772)]:
        mine = raw["race"] == group
        assert value.loc[group, "fpr"] == pytest.approx(
            (predicted & ~truth & mine).sum() / (~truth & mine).sum(), abs=1e-12
        )
        assert value.loc[group, "fnr"] == pytest.approx(
            (~predicted & truth & mine).sum() / (truth & mine).sum(), abs=1e-12
        )
        assert round(value.loc[group, "fpr"], 4) == fpr and round(value.loc[group, "fnr"], 4) == fnr
    assert len(compas_result.quarantine) == 0


@needs_compas
def test_undefined_cells_carry_their_reason(compas_result):
    """It reports a metric whose denominator is zero as undefined with the reason, never as 0."""
    metrics = compas_result.metrics
    ppv = metrics[(metrics["metric"] == "ppv") & (metrics["subset"] == "group")]
    undefined = ppv[ppv["value"].isna()]
    assert len(undefined) >= 1
    assert undefined["undefined_reason"].str.contains("no predicted positives").all()
    counts = compas_result.counts.set_index(["attribute", "group_name", "subset"])
    for row in undefined.itertuples():
        cell = counts.loc[(row.attribute, row.group_name, "group")]
        assert cell["tp"] + cell["fp"] == 0


@needs_compas
def test_result_frames_fit_their_schemas(compas_result):
    """It returns every result frame in the shape of its table's contract."""
    for name, schema in CONTRACTS.items():
        schema.validate(getattr(compas_result, name))
    with pytest.raises(pa.errors.SchemaError):
        CONTRACTS["detection"].validate(compas_result.detection.assign(p_value=1.5))


def _compas_race_disparities() -> pd.DataFrame:
    """FPR and FNR counts of each race and their difference against Caucasian and against the
    rest of population, computed with pandas straight from ProPublica's CSV (prediction: score_text
    != "Low"), independently of the code under test."""
    raw = pd.read_csv(COMPAS)
    predicted, truth = raw["score_text"] != "Low", raw["two_year_recid"] == 1

    def counts(rows: pd.Series) -> dict[str, tuple[int, int]]:
        return {
            "fnr": (int((~predicted & truth & rows).sum()), int((truth & rows).sum())),
            "fpr": (int((predicted & ~truth & rows).sum()), int((~truth & rows).sum())),
        }

    expected = []
    for group in sorted(raw["race"].unique()):
        mine = raw["race"] == group
        references = {"Caucasian": raw["race"] == "Caucasian", "rest": ~mine}
        for reference, theirs in references.items():
            if reference == group:
                continue
            for metric, (x, n) in counts(mine).items():
                x_ref, n_ref = counts(theirs)[metric]
                expected.append((group, reference, metric, x, n, x / n - x_ref / n_ref))
    columns = ["group_name", "reference", "metric", "numerator_group", "denominator_group"]
    return pd.DataFrame(expected, columns=[*columns, "difference"])


@needs_compas
def test_compas_race_disparities(compas_result):
    """It gives the COMPAS audit's FPR and FNR counts and disparities of each race against the
    Caucasian reference and against the rest of population as pandas computes them from the CSV
    (``_compas_race_disparities``; ProPublica's published rates are checked above)."""
    detection = compas_result.detection
    key = detection[(detection["attribute"] == "race") & detection["metric"].isin(["fpr", "fnr"])]
    current = key[["group_name", "reference", "metric", "numerator_group", "denominator_group", "difference"]]
    current = current.sort_values(["group_name", "reference", "metric"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(
        current, _compas_race_disparities(), check_dtype=False, atol=1e-12, rtol=0
    )


@needs_compas
def test_api_and_database_run_agree(compas_result, tmp_path):
    """It gives the same metrics as the flow's database run on the same predictions."""
    from biasaudit.db.engine import make_engine
    from biasaudit.db.store.history import run_metrics
    from biasaudit.db.store.load import load_predictions
    from biasaudit.db.store.migrate import upgrade
    from biasaudit.flows.audit import run_audit

    url = f"sqlite:///{tmp_path / 'compas.db'}"
    upgrade(url)
    frame = compas_frame().assign(
        model_id="compas",
        model_version="propublica-2016",
        predicted_at=pd.Timestamp("2014-01-01", tz="UTC"),
        score=np.nan,
    )
    load_predictions(make_engine(url), frame, ["race", "sex"], "compas")
    config = tmp_path / "compas.toml"
    config.write_text(
        '[[audits]]\nname = "compas"\nmodel = "compas"\nattributes = ["race", "sex"]\n'
        'intersections = [["race", "sex"]]\nreference_groups = { race = "Caucasian" }\n'
        "[audits.thresholds]\nbootstrap_replicates = 200\n"
    )
    run = run_audit("compas", str(config), url, pd.Timestamp("2015-01-01", tz="UTC"))
    stored = run_metrics(make_engine(url), run["run_id"]).drop(columns="labelled")
    mine = compas_result.metrics
    mine = mine[mine["subset"] == "group"][stored.columns]
    order = ["attribute", "group_name", "metric"]

    def normal(frame):
        frame = frame.sort_values(order).reset_index(drop=True)
        return frame.astype({"undefined_reason": object}).fillna({"undefined_reason": ""})

    pd.testing.assert_frame_equal(normal(stored), normal(mine), check_dtype=False)


def test_invalid_rows_are_reported_not_dropped():
    """It quarantines rows that break the schema, says so, and audits the rest."""
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(
        {
            "y_true": rng.integers(0, 2, 200).astype(float),
            "y_pred": rng.integers(0, 2, 200),
            "sex": rng.choice(["F", "M"], 200),
        }
    )
    frame.loc[3, "y_pred"] = 2
    frame.loc[7, "sex"] = " "
    with pytest.warns(UserWarning, match="2 of 200 rows failed validation"):
        result = biasaudit.audit_frame(frame, attributes=["sex"], bootstrap_replicates=100)
    assert sorted(result.quarantine["row_number"]) == [3, 7]
    groups = result.counts[result.counts["subset"] == "group"]
    assert groups[["tp", "fp", "fn", "tn", "n_unlabelled"]].to_numpy().sum() == 198


def _labelled_frame(n: int = 120, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "y_true": rng.integers(0, 2, n).astype(float),
            "y_pred": rng.integers(0, 2, n),
            "race": rng.choice(["White", "Black", "Asian"], n, p=[0.5, 0.3, 0.2]),
        }
    )


def test_reference_group_typo_names_the_groups_that_exist():
    """It answers a reference group absent from the data with one line naming the attribute and
    listing the groups there are, the largest first."""
    frame = _labelled_frame()
    by_size = frame["race"].value_counts()
    assert by_size.is_unique  # the expected order below is unambiguous
    expected = ", ".join(repr(g) for g in by_size.index)
    with pytest.raises(LookupError) as raised:
        biasaudit.audit_frame(frame, attributes=["race"], reference_groups={"race": "Whte"})
    message = str(raised.value)
    assert "\n" not in message
    assert message == (
        "reference group 'Whte' of attribute 'race' is not in the data (audit 'frame'); "
        f"groups: {expected}"
    )


def test_reference_group_typo_lists_at_most_twenty_groups():
    """It lists the 20 largest of thousands of groups and says how many more there are."""
    sizes = {f"g{i:04d}": 1 + i % 7 for i in range(1500)}
    groups = [name for name, size in sizes.items() for _ in range(size)]
    frame = pd.DataFrame({"y_true": 1.0, "y_pred": 1, "g": groups})
    largest = sorted(sizes, key=lambda name: (-sizes[name], name))[:20]
    with pytest.raises(ConfigError) as raised:
        biasaudit.audit_frame(frame, attributes=["g"], reference_groups={"g": "nope"})
    listing = str(raised.value).split("groups: ", 1)[1]
    assert listing == ", ".join(repr(g) for g in largest) + ", ... and 1480 more"


@pytest.mark.parametrize("dropped", ["y_pred", "y_true", "race"])
def test_missing_column_is_named_with_the_columns_present(dropped):
    """It names the needed column a frame lacks and the columns it has, in one line."""
    frame = _labelled_frame().drop(columns=dropped)
    with pytest.raises(ValueError) as raised:
        biasaudit.audit_frame(frame, attributes=["race"])
    message = str(raised.value)
    assert "\n" not in message and "column_in_dataframe" not in message
    assert f"lack the column(s) '{dropped}'" in message
    present = message.split("the columns present are ", 1)[1]
    for column in frame.columns:
        assert repr(column) in present


@pytest.mark.parametrize("column", ["y_true", "y_pred"])
def test_text_labels_are_quarantined_with_the_accepted_spellings(column):
    """It quarantines labels spelled yes/no, with a rule that says what is accepted, and audits
    the rest; a column of nothing but yes/no gives an empty audit and one warning line naming
    the column and the accepted values (never an internal AttributeError)."""
    frame = _labelled_frame()
    words = frame[column].map({0: "no", 1: "yes"}).astype(object)
    some = frame.astype({column: object})
    some.loc[:9, column] = words[:10]
    with pytest.warns(UserWarning, match="10 of 120 rows failed validation"):
        result = biasaudit.audit_frame(some, attributes=["race"], bootstrap_replicates=100)
    assert sorted(result.quarantine["row_number"]) == list(range(10))
    assert set(result.quarantine["column_name"]) == {column}
    assert set(result.quarantine["rule"]) == {"binary: 0/1 or true/false"}
    every = frame.assign(**{column: words})
    with pytest.warns(UserWarning) as warned:
        result = biasaudit.audit_frame(every, attributes=["race"], bootstrap_replicates=100)
    expected = (
        f"120 of 120 rows failed validation and were not audited: no value of column "
        f"'{column}' is accepted (binary: 0/1 or true/false; e.g. {words[0]!r}); "
        "see result.quarantine"
    )
    assert [str(w.message) for w in warned] == [expected]
    assert result.counts.empty and len(result.quarantine) == 120


def test_options_are_the_configuration_keys():
    """It takes the TOML file's own keys and rejects an unknown one by name."""
    frame = pd.DataFrame({"y_true": [0.0, 1.0] * 20, "y_pred": [0, 1] * 20, "g": ["a", "b"] * 20})
    result = biasaudit.audit_frame(frame, attributes=["g"], tolerance=0.1, bootstrap_replicates=100)
    assert set(result.detection["metric"]) <= {"acc", "prev", "ppr", "err", "nprev", "pnr", "tpr",
                                               "fnr", "fpr", "tnr", "ppv", "fdr", "npv", "for"}
    with pytest.raises(ConfigError, match="tolerence"):
        biasaudit.audit_frame(frame, attributes=["g"], tolerence=0.1)


def test_package_installs_under_one_name(tmp_path):
    """It installs only the package biasaudit (no top-level flows, tasks, schemas or db), and
    works from a directory that holds a user's own tasks/, db/, flows/ and schemas.py."""
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
         "--target", str(target), str(ROOT)],
        check=True,
        capture_output=True,
    )
    top = {p.name for p in target.iterdir() if not p.name.endswith((".dist-info", "__pycache__"))}
    assert top == {"biasaudit", "bin"} or top == {"biasaudit"}
    assert (target / "biasaudit" / "db" / "store" / "migrations" / "versions").is_dir()
    user = tmp_path / "user"
    for package in ("tasks", "db", "flows"):
        (user / package).mkdir(parents=True)
        (user / package / "__init__.py").write_text("raise ImportError('user code imported')\n")
    (user / "schemas.py").write_text("raise ImportError('user code imported')\n")
    probe = (
        "import biasaudit, biasaudit.flows.cli, biasaudit.db.store.migrate, biasaudit.schemas.config\n"
        "import importlib.util as u\n"
        f"assert u.find_spec('tasks').origin.startswith({str(user)!r})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        check=False,
        cwd=user,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    bare = subprocess.run(
        [sys.executable, "-c", "import tasks"],
        check=False,
        cwd=tmp_path,
        env={"PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
    )
    assert "No module named 'tasks'" in bare.stderr


def test_api_does_not_import_prefect():
    """It audits a frame without importing Prefect (the stages are plain functions)."""
    probe = (
        "import sys, biasaudit, biasaudit.db.store.history, biasaudit.tasks.report\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'prefect'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    )
    assert done.stdout.strip() == "[]"


def test_audit_frame_imports_no_database_library(tmp_path):
    """A notebook's first audit_frame imports neither Prefect nor SQLAlchemy, Alembic or a
    database driver: its cost is the statistics' libraries alone (SQLAlchemy was 0.2-0.4 s of
    it, for the type of a URL)."""
    probe = (
        "import sys\n"
        "import pandas as pd\n"
        "import biasaudit\n"
        "frame = pd.DataFrame({'y_true': [0.0, 1.0] * 20, 'y_pred': [0, 1, 1, 0] * 10,\n"
        "                      'sex': ['F', 'M'] * 20})\n"
        "biasaudit.audit_frame(frame, attributes=['sex'], metrics=['tpr'])\n"
        "heavy = {'prefect', 'sqlalchemy', 'alembic', 'psycopg', 'pymysql'}\n"
        "print('imported:', sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    assert last_line_of(probe, tmp_path) == "imported: []"


def test_plain_pipeline_runs_without_prefect(tmp_path):
    """It runs a whole audit as plain calls, and reuses it for unchanged input, without ever
    importing Prefect."""
    from .conftest import DEMO_CONFIG

    url = f"sqlite:///{tmp_path / 'plain.db'}"
    probe = (
        "import sys\n"
        "from biasaudit.db.engine import make_engine\n"
        "from biasaudit.db.store.load import load_predictions\n"
        "from biasaudit.db.store.migrate import upgrade\n"
        "from biasaudit.flows.demo import END, GROUPS, synthetic_predictions\n"
        "from biasaudit.flows.pipeline import run_audit\n"
        f"upgrade({url!r})\n"
        "data = synthetic_predictions()\n"
        "data = data[data['model_id'] == 'credit-scorer'].head(2000)\n"
        f"load_predictions(make_engine({url!r}), data, list(GROUPS), 'test')\n"
        f"first = run_audit('credit-race', {str(DEMO_CONFIG)!r}, {url!r}, END)\n"
        f"again = run_audit('credit-race', {str(DEMO_CONFIG)!r}, {url!r}, END)\n"
        "assert first['new'] and not again['new'] and again['run_id'] == first['run_id']\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'prefect'))\n"
    )
    assert last_line_of(probe, tmp_path, BIASAUDIT_REPORTS_DIR=str(tmp_path / "reports")) == "[]"


@pytest.mark.parametrize("command", [["audits"], ["history"], ["metrics"]])
def test_listing_commands_import_no_statistics_and_no_prefect(command, tmp_path):
    """Commands that list configuration, metrics or stored runs (of an empty store here) import
    neither Prefect nor scipy nor Pandera: a command imports only what it needs."""
    from biasaudit.db.store.migrate import upgrade

    from .conftest import DEMO_CONFIG

    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    probe = (
        "import sys\n"
        "from biasaudit.flows.cli import app\n"
        "try:\n"
        f"    app({command if command[0] in ('audits', 'metrics') else [*command, '--db', url]!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = {'prefect', 'scipy', 'pandera'}\n"
        "print('imported:', sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    assert last_line_of(probe, tmp_path, BIASAUDIT_CONFIG=str(DEMO_CONFIG)) == "imported: []"


def last_line_of(probe: str, cwd, **env: str) -> str:
    """The last line a fresh interpreter prints running ``probe`` in ``cwd``, ``env`` added."""
    done = subprocess.run(
        [sys.executable, "-c", probe],
        check=True,
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **env},
    )
    return done.stdout.strip().splitlines()[-1]
