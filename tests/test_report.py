"""The HTML report: self-contained, complete, and rendered by a real headless Chromium."""

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from biasaudit.db.engine import make_engine
from biasaudit.db.load import load_predictions
from biasaudit.flows.audit import audit_flow, run_audit
from biasaudit.flows.demo import END, GROUPS, synthetic_predictions
from biasaudit.tasks.report import render_report

from .conftest import DEMO_CONFIG

CHROMIUM = shutil.which("chromium")


class Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.links, self.stack = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.links += [v for k, v in attrs if k in ("src", "href") and v]
        if tag not in ("meta", "circle", "line", "rect", "polyline", "br"):
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"unbalanced </{tag}>"
        self.stack.pop()


@pytest.fixture
def audited(tmp_path):
    url = f"sqlite:///{tmp_path / 'report.db'}"
    from biasaudit.db.migrate import upgrade

    upgrade(url)
    data = synthetic_predictions()
    load_predictions(
        make_engine(url), data[data["model_id"] == "credit-scorer"], list(GROUPS), "demo"
    )
    result = run_audit("credit-race", str(DEMO_CONFIG), url, END)
    return url, result


def test_report_is_self_contained_and_complete(audited):
    """It is well-formed HTML with no scripts or external resources, and has every section."""
    url, result = audited
    page = render_report(make_engine(url), result["run_id"])
    parser = Collector()
    parser.feed(page)
    assert not parser.stack and "script" not in parser.tags and parser.links == []
    for section in ("Flagged groups", "Disparities", "Planning", "Meta-metrics", "Trend"):
        assert section in page
    # one forest plot per attribute and rate metric (4 attributes x 6 rate metrics)
    assert page.count('<svg xmlns="http://www.w3.org/2000/svg" width="760"') == 24
    assert "#b00020" in page  # the injected Black FPR disparity is drawn as flagged
    assert Path(result["report"]).read_text() == page


@pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)"
)
def test_report_renders_in_headless_chromium(audited, tmp_path):
    """It renders in headless Chromium: the DOM has the plots and a screenshot is written."""
    _, result = audited
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    page = Path(result["report"]).resolve().as_uri()
    dom = subprocess.run(
        [CHROMIUM, *flags, "--dump-dom", page],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0 and dom.stdout.count("<circle") > 50
    assert "Uncaught" not in dom.stderr
    shot = tmp_path / "report.png"
    subprocess.run(
        [CHROMIUM, *flags, "--window-size=1200,2400", f"--screenshot={shot}", page],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.stat().st_size > 50_000


@pytest.mark.usefixtures("prefect_harness")
def test_flow_publishes_a_markdown_artifact(audited):
    """It publishes the headline numbers as a Prefect markdown artifact keyed by audit."""
    from prefect.artifacts import Artifact

    url, _ = audited
    result = audit_flow("credit-race", str(DEMO_CONFIG), url, END, True)
    artifact = Artifact.get("audit-credit-race")
    assert artifact is not None and artifact.type == "markdown"
    assert f"run {result['run_id']}" in artifact.data and "race=Black fpr" in artifact.data
