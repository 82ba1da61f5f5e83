"""The audit configuration is validated on load; errors name the key and the problem."""

import pytest

from biasaudit.flows.config_files import load_config
from biasaudit.schemas.config import ConfigError, parse_config

from .conftest import DEMO_CONFIG

BASE = {"name": "a", "model_id": "m", "attributes": ["race", "sex"]}


def parse(**changes):
    return parse_config({"audits": [{**BASE, **changes}]})


def test_demo_configuration_loads():
    """It loads the shipped demo configuration."""
    config = load_config(DEMO_CONFIG)
    assert [a.name for a in config.audits][:2] == ["credit-race", "hiring-sex"]
    assert config.get("claims-recent").metrics == ["tpr", "fpr", "ppv", "ppr"]


def test_synonyms_map_to_spec_ids():
    """It maps metric synonyms onto the metric identifiers and removes repeats."""
    assert parse(metrics=["Recall", "precision", "selection-rate", "tpr"]).audits[0].metrics == [
        "tpr",
        "ppv",
        "ppr",
    ]


@pytest.mark.parametrize(
    ("changes", "key", "problem"),
    [
        ({"metrics": ["tpr", "fairness"]}, "audits[0].metrics", "unknown metric 'fairness'"),
        ({"window": "yesterday"}, "audits[0].window", "last_N_days"),
        ({"window": "last_0_days"}, "audits[0].window", "N from 1 to"),
        ({"intersections": [["race", "age"]]}, "intersections[0]", "['age'] not in attributes"),
        ({"intersections": [["race"]]}, "intersections[0]", "two or more"),
        ({"flavour": "red"}, "audits[0].flavour", "unknown key; keys accepted here: attributes,"),
        (
            {"refernce_groups": {"race": "A"}},
            "audits[0].refernce_groups",
            "unknown key; did you mean 'reference_groups'? keys accepted here:",
        ),
        (
            {"monitor": {"source_db": "sqlite:///x.db"}},
            "audits[0].monitor.source_db",
            "unknown key; keys accepted here: half_life, label_delay_days, metrics",
        ),
        (
            {"thresholds": {"tolerence": 0.1}},
            "audits[0].thresholds.tolerence",
            "did you mean 'tolerance'?",
        ),
        ({"attributes": []}, "audits[0].attributes", "at least 1 item"),
        ({"thresholds": {"alpha": 1.5}}, "audits[0].thresholds.alpha", "less than 1"),
        (
            {"thresholds": {"planning_power": "normal"}},
            "audits[0].thresholds.planning_power",
            "'auto' or 'exact'",
        ),
        ({"columns": {"label": "y"}}, "columns", "neither"),
        ({"reference_groups": {"age": "young"}}, "reference_groups", "not attributes"),
        ({"name": "bad name!"}, "audits[0].name", "pattern"),
        (
            {"decision": {"score": "s", "threshold": [0.3, 0.5]}},
            "audits[0].decision.threshold",
            "one threshold per audit; define one audit per threshold",
        ),
        ({"decision": {"score": "s", "threshold": "inf"}}, "decision.threshold", "finite"),
    ],
)
def test_bad_configuration_names_key_and_problem(changes, key, problem):
    """It rejects a bad configuration with the key and the problem in the message."""
    with pytest.raises(ConfigError) as error:
        parse(**changes)
    assert key in str(error.value)
    assert problem in str(error.value)


def test_missing_required_key_and_duplicate_names():
    """It names a missing key and repeated audit names."""
    with pytest.raises(ConfigError, match=r"audits\[0\]\.model_id: Field required"):
        parse_config({"audits": [{"name": "a", "attributes": ["x"]}]})
    with pytest.raises(ConfigError, match="repeated: \\['a'\\]"):
        parse_config({"audits": [BASE, BASE]})


def test_unreadable_files(tmp_path):
    """It says when the file is missing or not TOML."""
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "none.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[audits]\nname=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_window_and_hash():
    """It reads window lengths, and equal configurations hash equally."""
    assert parse(window="last_7_days").audits[0].window_days == 7
    assert parse(window="last_day").audits[0].window_days == 1
    assert parse().audits[0].window_days is None
    assert parse().audits[0].config_hash() == parse().audits[0].config_hash()
    assert parse().audits[0].config_hash() != parse(window="last_day").audits[0].config_hash()


def test_model_is_accepted_for_model_id():
    """It reads the model's id from ``model_id`` and, for older files, from ``model``."""
    old = {**BASE, "model": "legacy"}
    del old["model_id"]
    assert parse_config({"audits": [old]}).audits[0].model_id == "legacy"
    assert parse_config({"audits": [BASE]}).audits[0].model_id == "m"
