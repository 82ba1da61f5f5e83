"""Screenshots of the COMPAS report in headless Chromium, to look at.

Loads ProPublica's COMPAS predictions into a throw-away SQLite database, audits race (reference
Caucasian), sex and race x sex for FPR, FNR, PPV and PPR as of three dates (so the trend has three
runs), renders the latest run's report and saves, with Debian's ``chromium``:

- ``compas-report.html``: the report itself;
- ``first-screen.png``: 1,400 x 1,000 px, what an analyst sees on opening it;
- ``full-page.png``: 1,400 px wide, the whole page (collapsed sections stay collapsed);
- ``hostile-first-screen.png``: a synthetic audit whose group names are hostile (a script tag, a
  markdown link, a newline and a pipe) and with an attribute that has a single group.

It prints the first screen's measured bottom edge and the page's height and width.

    .venv/bin/python benchmarks/screenshots.py [--out reports/screenshots]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
import time
from html import unescape
from pathlib import Path

import numpy as np
import pandas as pd

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "compas-two-years.csv"
AS_OF = ["2014-01-01", "2014-07-01", "2015-01-01"]
CONFIG = """[[audits]]
name = "compas-race"
model = "compas"
attributes = ["race", "sex"]
intersections = [["race", "sex"]]
metrics = ["fpr", "fnr", "ppv", "ppr"]
reference_groups = { race = "Caucasian" }

[[audits]]
name = "hostile"
model = "hostile"
attributes = ["team", "region", "sex"]
metrics = ["fpr", "tpr"]
reference_groups = { team = "plain" }
"""
MEASURE = """<script>
const box = document.getElementById("first-screen").getBoundingClientRect();
const out = document.createElement("pre");
out.id = "measure";
out.textContent = JSON.stringify({first_screen_bottom: box.bottom + window.scrollY,
  height: document.documentElement.scrollHeight, width: document.documentElement.scrollWidth});
document.body.appendChild(out);
</script>"""


def compas_predictions() -> pd.DataFrame:
    raw = pd.read_csv(DATA)
    return pd.DataFrame(
        {
            "prediction_id": raw["id"].astype(str),
            "model_id": "compas",
            "model_version": "propublica-2016",
            "predicted_at": pd.to_datetime(raw["compas_screening_date"], utc=True),
            "y_true": raw["two_year_recid"].astype(float),
            "y_pred": (raw["score_text"] != "Low").astype(int),
            "score": raw["decile_score"] / 10,
            "race": raw["race"],
            "sex": raw["sex"],
        }
    )


def hostile_predictions(n: int = 2000, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    names = np.array(
        ["<script>alert(1)</script>", "[click](http://evil.example)", "a|b\nc", "plain"]
    )
    team = names[rng.choice(4, n, p=[0.45, 0.3, 0.2, 0.05])]
    truth = rng.random(n) < 0.4
    predicted = np.where(
        truth, rng.random(n) < 0.8, rng.random(n) < np.where(team == names[0], 0.45, 0.15)
    )
    return pd.DataFrame(
        {
            "prediction_id": [f"h{i}" for i in range(n)],
            "model_id": "hostile",
            "model_version": "1",
            "predicted_at": pd.Timestamp("2014-06-01", tz="UTC")
            + pd.to_timedelta(rng.uniform(0, 30, n), unit="D"),
            "y_true": truth.astype(float),
            "y_pred": predicted.astype(int),
            "score": 0.5,
            "team": team,
            "region": "north",
            "sex": np.where(rng.random(n) < 0.5, "F", "M"),
        }
    )


def chromium(binary: str, profile: Path, size: str, *args: str) -> str:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--window-size={size}",
        f"--user-data-dir={profile}",
    ]
    done = subprocess.run(
        [binary, *flags, *args], capture_output=True, text=True, timeout=180, check=True
    )
    return done.stdout


def measure(binary: str, profile: Path, page: Path) -> dict:
    """Layout of the page at 1,400 x 1,000 px, measured by a script in a copy of it."""
    probe = page.with_suffix(".probe.html")
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = chromium(binary, profile, "1400,1000", "--dump-dom", probe.as_uri())
    probe.unlink()
    return json.loads(unescape(re.search(r'<pre id="measure">(.*?)</pre>', dom).group(1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("reports/screenshots"))
    args = parser.parse_args()
    binary = shutil.which("chromium")
    if binary is None:
        raise SystemExit("chromium is not installed: apt-get update && apt-get install -y chromium")
    if not DATA.exists():
        raise SystemExit(f"{DATA} is absent")
    from biasaudit.db.engine import make_engine
    from biasaudit.db.store.load import load_predictions
    from biasaudit.db.store.migrate import upgrade
    from biasaudit.flows.audit import run_audit
    from biasaudit.flows.report import build_report

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        url = f"sqlite:///{tmp / 'screenshots.db'}"
        upgrade(url)
        engine = make_engine(url)
        load_predictions(engine, compas_predictions(), ["race", "sex"], "compas")
        load_predictions(engine, hostile_predictions(), ["team", "region", "sex"], "hostile")
        config = tmp / "audits.toml"
        config.write_text(CONFIG)
        runs = [
            run_audit("compas-race", str(config), url, pd.Timestamp(d, tz="UTC"))["run_id"]
            for d in AS_OF
        ]
        hostile = run_audit("hostile", str(config), url, pd.Timestamp(AS_OF[-1], tz="UTC"))
        started = time.perf_counter()
        page = build_report(engine, runs[-1])[0]
        render_seconds = time.perf_counter() - started
        html_path = args.out / "compas-report.html"
        html_path.write_text(page)
        hostile_path = args.out / "hostile-report.html"
        hostile_path.write_text(build_report(engine, hostile["run_id"])[0])
        profile = tmp / "profile"
        layout = measure(binary, profile, html_path.resolve())
        shots = {
            "first-screen.png": (html_path, "1400,1000"),
            "full-page.png": (html_path, f"1400,{layout['height']}"),
            "hostile-first-screen.png": (hostile_path, "1400,1000"),
        }
        for name, (source, size) in shots.items():
            target = (args.out / name).resolve()
            chromium(binary, profile, size, f"--screenshot={target}", source.resolve().as_uri())
            print(f"wrote {target} ({size} px)")
        engine.dispose()
    print(
        f"report of run {runs[-1]}: {len(page):,} bytes, rendered in {render_seconds:.2f} s; "
        f"first screen ends at {layout['first_screen_bottom']:.0f} px; page "
        f"{layout['width']} x {layout['height']} px at a 1,400 x 1,000 window"
    )


if __name__ == "__main__":
    main()
