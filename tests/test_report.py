"""The report a risk analyst reads: COMPAS rates, counts and reference comparisons checked against
the CSV and independent computations; hostile group names; single-group attributes, failed and
older runs; the first screen measured in a real headless Chromium; the Prefect artifacts."""

from __future__ import annotations

import contextlib
import dataclasses
import html
import io
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from biasaudit.db.engine import make_engine
from biasaudit.db.store.history import get_run, list_runs
from biasaudit.db.store.load import load_predictions
from biasaudit.db.store.migrate import upgrade
from biasaudit.db.store.report_data import report_frames
from biasaudit.flows.audit import audit_flow, run_audit
from biasaudit.flows.report import build_report
from biasaudit.schemas.report import ReportFrames
from biasaudit.tasks.counts import label_completeness
from biasaudit.tasks.report import (
    comparisons,
    render_html,
    render_markdown,
    table_records,
)
from biasaudit.tasks.report.svg import forest_plot, nice_ticks, tick_label
from biasaudit.tasks.report.text import _tuples, needs_more, percent, points
from biasaudit.tasks.scores import clopper_pearson

from .conftest import COMPAS

CHROMIUM = shutil.which("chromium")
REQUIRE_CHROMIUM = os.environ.get("BIASAUDIT_REQUIRE_CHROMIUM") == "1"
NEWER, OLDER = pd.Timestamp("2015-01-01", tz="UTC"), pd.Timestamp("2014-01-01", tz="UTC")
HOSTILE = ["<script>alert(1)</script>", "[click](http://evil.example)", "a|b\nc", "plain"]
needs_compas = pytest.mark.skipif(not COMPAS.exists(), reason=f"{COMPAS} is absent")


class Page(HTMLParser):
    """Table rows of a page as cell texts, each with the attribute (summary) and metric (h3)
    it sits under; plus every tag, link and the open-tag stack (well-formedness)."""

    VOID = frozenset({"meta", "circle", "line", "rect", "polyline", "br", "hr"})

    def __init__(self, page: str):
        super().__init__()
        self.tags, self.links, self.stack, self.rows = [], [], [], []
        self.summary = self.h3 = None
        self._capture = self._row = self._cell = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.links += [v for k, v in attrs if k in ("src", "href") and v]
        if tag not in self.VOID:
            self.stack.append(tag)
        if tag in ("summary", "h3") and self._capture is None:
            metric = tag == "h3" or ("class", "metric") in attrs
            self._capture = [tag, "", "h3" if metric else "summary"]
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = ""
        elif tag == "br" and self._cell is not None:
            self._cell += " "

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)
        self.links += [v for k, v in attrs if k in ("src", "href") and v]

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"unbalanced </{tag}>"
        self.stack.pop()
        if self._capture and tag == self._capture[0]:
            if self._capture[2] == "summary":
                self.summary = self._first
            else:
                self.h3 = self._first
            self._capture = None
        elif tag in ("td", "th") and self._row is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "tr":
            self.rows.append((self.summary, self.h3, self._row))
            self._row = None

    def handle_data(self, data):
        if self._capture:
            if not self._capture[1]:
                self._first = data.strip()  # a summary's first text: the attribute
            self._capture[1] += data
        if self._cell is not None:
            self._cell += data

    def row(self, attribute: str, metric: str, group: str) -> list[str]:
        found = [
            cells
            for a, m, cells in self.rows
            if a == attribute
            and m == metric
            and cells
            and cells[0].split(" (")[0].removesuffix(" ⚠ small") == group
        ]
        assert len(found) == 1, (attribute, metric, group, found)
        return found[0]


def assert_self_contained(page: str) -> Page:
    parsed = Page(page)
    assert not parsed.stack, parsed.stack
    assert "script" not in parsed.tags and "iframe" not in parsed.tags and parsed.links == []
    assert "url(" not in page and "@import" not in page
    return parsed


# -- COMPAS ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compas(tmp_path_factory):
    """COMPAS audited by race (reference Caucasian), sex and race x sex, as of two dates: the
    later as-of first, so the older run has the higher id."""
    if not COMPAS.exists():
        pytest.skip(f"{COMPAS} is absent")
    from .test_compas import compas_predictions

    folder = tmp_path_factory.mktemp("compas-report")
    url = f"sqlite:///{folder / 'compas.db'}"
    upgrade(url)
    load_predictions(make_engine(url), compas_predictions(), ["race", "sex"], "compas")
    config = folder / "compas.toml"
    config.write_text(
        '[[audits]]\nname = "compas-race"\nmodel = "compas"\nattributes = ["race", "sex"]\n'
        'intersections = [["race", "sex"]]\nmetrics = ["fpr", "fnr", "ppv", "ppr"]\n'
        'reference_groups = { race = "Caucasian" }\n'
    )
    newer = run_audit("compas-race", str(config), url, NEWER)["run_id"]
    older = run_audit("compas-race", str(config), url, OLDER)["run_id"]
    assert older > newer
    engine = make_engine(url)
    return {
        "url": url,
        "engine": engine,
        "newer": newer,
        "older": older,
        "page": build_report(engine, newer)[0],
        "folder": folder,
    }


def compas_cells(until: pd.Timestamp = NEWER) -> pd.DataFrame:
    """Independent confusion counts per race straight from the CSV (predictions up to ``until``)."""
    raw = pd.read_csv(COMPAS)
    raw = raw[pd.to_datetime(raw["compas_screening_date"], utc=True) <= until]
    predicted, truth = raw["score_text"] != "Low", raw["two_year_recid"] == 1
    cells = pd.DataFrame(
        {
            "tp": predicted & truth,
            "fp": predicted & ~truth,
            "fn": ~predicted & truth,
            "tn": ~predicted & ~truth,
        }
    )
    return cells.groupby(raw["race"]).sum()


def hdi_monte_carlo(x1, n1, x2, n2, mass=0.95, draws=400_000, seed=1):
    """Narrowest interval holding ``mass`` of e2 − e1 under uniform priors, from samples."""
    rng = np.random.default_rng(seed)
    t = np.sort(rng.beta(x2 + 1, n2 - x2 + 1, draws) - rng.beta(x1 + 1, n1 - x1 + 1, draws))
    k = int(np.ceil(mass * draws))
    i = int(np.argmin(t[k - 1 :] - t[: draws - k + 1]))
    return t[i], t[i + k - 1]


@needs_compas
def test_compas_fpr_rates_counts_and_reference_comparison(compas):
    """FPR 44.8% (African-American) and 23.5% (Caucasian) with their counts, Clopper-Pearson
    intervals, ratio 1.91 to the Caucasian reference, flagged, with the HDI of the difference."""
    page = Page(compas["page"])
    cells = compas_cells()
    black, white = cells.loc["African-American"], cells.loc["Caucasian"]
    fpr_b, fpr_w = black.fp / (black.fp + black.tn), white.fp / (white.fp + white.tn)
    # ProPublica's published figures: 44.8%, 23.5%, ratio 1.91.
    assert (f"{100 * fpr_b:.1f}%", f"{100 * fpr_w:.1f}%", f"{fpr_b / fpr_w:.2f}") == (
        "44.8%",
        "23.5%",
        "1.91",
    )
    row = page.row("race", "FPR", "African-American")
    header = next(c for a, m, c in page.rows if a == "race" and m == "FPR" and c[0] == "group")
    assert header[7].startswith("vs ref. Caucasian") and header[10].startswith("vs rest")
    assert row[1] == f"{black.sum():,}"
    assert row[2:6] == [f"{black[c]:,}" for c in ("tp", "fp", "fn", "tn")]
    low, high = proportion_confint(black.fp, black.fp + black.tn, alpha=0.05, method="beta")
    assert row[6] == f"44.8% [{100 * low:.1f}%, {100 * high:.1f}%]"
    difference, ratio, verdict = row[7], row[8], row[9]
    # the run's HDIs hold 1 − α/m each over its m tested comparisons
    tested = report_frames(compas["engine"], compas["newer"]).detection["p_value"].notna().sum()
    mass = 1 - 0.05 / tested
    hdi = hdi_monte_carlo(
        white.fp, white.fp + white.tn, black.fp, black.fp + black.tn, mass, draws=2_000_000
    )
    numbers = [float(v) for v in re.findall(r"\d+\.\d+", difference)]
    assert difference.startswith(f"+{100 * (fpr_b - fpr_w):.1f} pp")
    assert np.allclose(numbers[1:], 100 * np.array(hdi), atol=0.2)
    assert ratio == "1.91 outside" and verdict.startswith("flagged")
    reference = page.row("race", "FPR", "Caucasian")
    assert reference[6].startswith("23.5%") and reference[2:6] == [
        f"{white[c]:,}" for c in ("tp", "fp", "fn", "tn")
    ]


@needs_compas
def test_compas_undefined_cell_shows_its_reason(compas):
    """Asian women: no positive prediction in the CSV, so their PPV is undefined: the table and
    the forest plot both say so, with the reason, instead of dropping the group."""
    raw = pd.read_csv(COMPAS)
    women = raw[(raw["race"] == "Asian") & (raw["sex"] == "Female")]
    assert (women["score_text"] != "Low").sum() == 0 and len(women) == 2
    row = Page(compas["page"]).row("race x sex", "PPV", "Asian x Female")
    assert row[6].startswith("undefined:") and len(row[6]) > len("undefined: ")
    assert "⚠ small" in row[0]  # two people, below min_group_size
    assert re.search(r"Asian x Female · 2 rows ⚠</text>.{0,200}undefined: ", compas["page"])


@needs_compas
def test_compas_first_screen_verdicts_and_groups(compas):
    """Every attribute has a verdict; group sizes are the CSV's; tiny groups are marked."""
    frames = report_frames(compas["engine"], compas["newer"])
    first = compas["page"].split('<hr class="fold">')[0]
    raw = pd.read_csv(COMPAS)
    for race, n in raw["race"].value_counts().items():
        assert f"{race} <b>{n:,}</b>" in first
    assert "Asian x Female <b>2</b> ⚠ below 30" in first
    rows = Page(first).rows
    verdicts = {c[0].split(" reference")[0]: c[1] for _, _, c in rows[1:4]}
    assert set(verdicts) == {"race", "race x sex", "sex"}
    kinds = ("flagged", "fair within tolerance", "undecided", "too little data")
    assert all(v.startswith(kinds) for v in verdicts.values())
    assert verdicts["race"].startswith("flagged")  # the FPR comparison above is flagged
    # ProPublica's finding is on the first screen, against the configured reference group
    cells = compas_cells()
    b, w = cells.loc["African-American"], cells.loc["Caucasian"]
    finding = [c for _, _, c in rows if c[:4] == ["race", "African-American", "Caucasian", "FPR"]]
    assert len(finding) == 1 and finding[0][4:6] == [
        f"{100 * b.fp / (b.fp + b.tn):.1f}% ({b.fp:,}/{b.fp + b.tn:,})",
        f"{100 * w.fp / (w.fp + w.tn):.1f}% ({w.fp:,}/{w.fp + w.tn:,})",
    ]
    assert finding[0][7] == f"{(b.fp / (b.fp + b.tn)) / (w.fp / (w.fp + w.tn)):.2f}" == "1.91"
    # one test per hypothesis: sex has two groups, so one comparison per metric, not three
    sex = comparisons(frames)
    sex = sex[sex["attribute"] == "sex"]
    assert len(sex) == sex["metric"].nunique() == 4
    assert "Flagged comparisons" in first and first.count("<tr>") <= 3 + 1 + 10 + 1


@needs_compas
def test_compas_trend_is_ordered_by_as_of_and_never_shows_a_later_run(compas):
    """The newer run's trend shows both as-of dates with each group's value at that date; the
    older run (higher id) shows no later value."""
    page = Page(compas["page"])
    rows = [c for a, m, c in page.rows if m == "race · FPR" and c[0] == "African-American"]
    assert len(rows) == 1
    values = []
    for until in (OLDER, NEWER):
        b = compas_cells(until).loc["African-American"]
        values.append(f"{100 * b.fp / (b.fp + b.tn):.1f}%")
    assert rows[0][1:3] == values and values[0] != values[1]
    older = build_report(compas["engine"], compas["older"])[0]
    assert "2015-01-01" not in older and "no trend yet" in older


@needs_compas
def test_compas_plots_have_readable_axes(compas):
    """Forest plots: tick labels at least 40 px apart, distinct, and none outside the svg."""
    svgs = re.findall(r"<svg [^>]*width=\"(\d+)\".*?</svg>", compas["page"], flags=re.DOTALL)
    plots = re.findall(r"(<svg .*?</svg>)", compas["page"], flags=re.DOTALL)
    forests = [p for p in plots if "percentage points" in p]
    assert len(forests) >= 6 and svgs
    for svg in forests:
        width = float(re.search(r'width="(\d+)"', svg).group(1))
        ticks = re.findall(
            r'<text x="([\d.]+)" y="[\d.]+" text-anchor="middle" font-size="11">([^<]+)</text>',
            svg,
        )
        xs = np.array([float(x) for x, _ in ticks])
        assert len(xs) >= 3 and np.all(np.diff(xs) >= 40) and xs.max() <= width
        assert len({label for _, label in ticks}) == len(ticks)


@needs_compas
def test_compas_report_is_self_contained(compas):
    assert_self_contained(compas["page"])
    # findings first; the details after them, collapsed
    page = compas["page"]
    assert page.index("Flagged comparisons") < page.index("Group rates") < page.index("Planning")
    for title in ("Planning", "MATCH", "Meta-metrics", "Smoothing", "Run facts"):
        assert f"<details><summary>{title}" in page


# -- hostile names, a single-group attribute, a failed run -------------------------------------


def hostile_frame(n: int = 2000, seed: int = 7) -> pd.DataFrame:
    """Predictions over January 2026: team (hostile names; the script-named team has FPR 0.45,
    the others 0.15), region (one value) and sex."""
    rng = np.random.default_rng(seed)
    team = np.array(HOSTILE)[rng.choice(4, n, p=[0.45, 0.3, 0.2, 0.05])]
    truth = rng.random(n) < 0.4
    fpr = np.where(team == HOSTILE[0], 0.45, 0.15)
    predicted = np.where(truth, rng.random(n) < 0.8, rng.random(n) < fpr)
    return pd.DataFrame(
        {
            "prediction_id": [f"p{i}" for i in range(n)],
            "model_id": "m",
            "model_version": "1",
            "predicted_at": pd.Timestamp("2026-01-01", tz="UTC")
            + pd.to_timedelta(rng.uniform(0, 30, n), unit="D"),
            "y_true": truth.astype(float),
            "y_pred": predicted.astype(int),
            "score": 0.5,
            "team": team,
            "region": "north",
            "sex": np.where(rng.random(n) < 0.5, "F", "M"),
        }
    )


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """Synthetic predictions whose group names are hostile, an attribute with a single group, a
    two-valued attribute without reference; two runs, and one failed run."""
    folder = tmp_path_factory.mktemp("hostile-report")
    url = f"sqlite:///{folder / 'hostile.db'}"
    upgrade(url)
    frame = hostile_frame()
    load_predictions(make_engine(url), frame, ["team", "region", "sex"], "hostile")
    config = folder / "hostile.toml"
    config.write_text(
        '[[audits]]\nname = "hostile"\nmodel = "m"\nattributes = ["team", "region", "sex"]\n'
        'metrics = ["fpr", "tpr", "mcc"]\nreference_groups = { team = "plain" }\n'
        '[[audits]]\nname = "broken"\nmodel = "m"\nattributes = ["team"]\n'
        'reference_groups = { team = "nobody" }\n'
        '[[audits]]\nname = "solo"\nmodel = "m"\nattributes = ["region"]\n'
        'metrics = ["fpr", "tpr"]\n'
    )
    first = run_audit("hostile", str(config), url, pd.Timestamp("2026-01-15", tz="UTC"))
    second = run_audit("hostile", str(config), url, pd.Timestamp("2026-02-01", tz="UTC"))
    with pytest.raises(LookupError):
        run_audit("broken", str(config), url, pd.Timestamp("2026-02-01", tz="UTC"))
    solo = run_audit("solo", str(config), url, pd.Timestamp("2026-02-01", tz="UTC"))
    engine = make_engine(url)
    failed = int(list_runs(engine, audit="broken", status="failed")["id"].iloc[0])
    return {
        "url": url,
        "config": config,
        "engine": engine,
        "runs": (first["run_id"], second["run_id"]),
        "failed": failed,
        "solo": solo["run_id"],
    }


def test_hostile_group_names_are_escaped_in_html(hostile):
    """No tag, link or line break from the data reaches the page's markup."""
    page, _, _ = build_report(hostile["engine"], hostile["runs"][1])
    parsed = assert_self_contained(page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    texts = [cell for _, _, cells in parsed.rows for cell in cells]
    assert "<script>alert(1)</script>" in texts[texts.index("<script>alert(1)</script>")]
    assert "[click](http://evil.example)" in page  # shown as text, never as a link


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def test_hostile_group_names_are_escaped_in_markdown(hostile):
    """Markdown: no HTML, no link or autolink, no extra table column, no broken row."""
    _, markdown, records = build_report(hostile["engine"], hostile["runs"][1])
    assert "<" not in markdown.replace("&lt;", "")
    assert not re.search(r"(?<!\\)\]\s*\(", markdown)
    assert "http://" not in markdown and "www." not in markdown
    for table in re.findall(r"((?:^\|.*\|$\n?)+)", markdown, flags=re.MULTILINE):
        lines = table.strip().split("\n")
        assert len({_unescaped_pipes(line) for line in lines}) == 1, lines
    assert markdown.count("alert\\(1\\)") >= 2  # the flagged group is listed, escaped
    # the table artifact: names as text (Prefect's UI shows its cells as text), only control
    # and bidi characters as their escapes
    assert {r["group"] for r in records} >= {HOSTILE[0], HOSTILE[1]}
    json.dumps(records)


def test_single_group_attribute_and_failed_run_render(hostile):
    """An attribute with one group renders with the verdict 'too little data' (also when it is
    the audit's only attribute, where the former report crashed); a failed run (no results)
    renders with its error."""
    page, markdown, _ = build_report(hostile["engine"], hostile["runs"][1])
    row = next(c for _, _, c in Page(page).rows if c and c[0] == "region")
    assert row[1].startswith("too little data") and "one group only" in row[1]
    assert "| region | **too little data** |" in markdown
    page, markdown, records = build_report(hostile["engine"], hostile["solo"])
    assert_self_contained(page)
    assert "one group only" in page and "No comparison is flagged." in markdown
    page, markdown, records = build_report(hostile["engine"], hostile["failed"])
    assert_self_contained(page)
    assert "nobody" in page and "status failed" in page and records == []


def test_two_valued_attribute_is_tested_once(hostile):
    """sex (F, M) without a reference: one comparison per metric, drawn once."""
    frames = report_frames(hostile["engine"], hostile["runs"][1])
    sex = comparisons(frames)
    sex = sex[sex["attribute"] == "sex"]
    assert len(sex) == 2 and set(sex["metric"]) == {"fpr", "tpr"}
    page = render_html(frames)
    titles = re.findall(r'font-weight="600">(FPR: group − [^<]+)</text>', page)
    # team: against its reference and the rest; sex: once; region (one group): no plot
    assert sorted(titles) == ["FPR: group − plain", *["FPR: group − rest of population"] * 2]


# -- names that try to disguise themselves or break the layout ---------------------------------

LONG = "0123456789" * 1000  # a 10 KB group name without a space
STORED = ["\u202eevil", "\u2066isolate", "\x1b[31mred", "line\u2028break", "a|b\nc", "long"]
# each name as a reader must see it: every control and bidi character a visible escape
SHOWN = ["\\u202eevil", "\\u2066isolate", "nul\\x00\\x1b[31mred", "line\\u2028break", "a|b\\x0ac"]
UNSHOWABLE = ["\x00", "\x1b", "\u202e", "\u2066", "\u2028"]


@pytest.fixture(scope="module")
def spoofed(tmp_path_factory) -> dict:
    """The frames (and the printed outcome) of one run whose team names hold a bidi override and isolate, an escape
    sequence, a line separator, a pipe and a newline; the override's team is flagged against the
    reference team. Loading quarantines names with a NUL byte or over 512 characters, but the
    report renders whatever frames it is given: in the frames the escape sequence's team also
    gets a NUL byte, and the reference team is 10 KB without a space."""
    folder = tmp_path_factory.mktemp("spoofed-report")
    url = f"sqlite:///{folder / 'spoofed.db'}"
    upgrade(url)
    rng = np.random.default_rng(11)
    team = np.repeat(STORED, 200)
    truth = rng.random(len(team)) < 0.5
    fpr = np.where(team == STORED[0], 0.6, 0.15)
    predicted = np.where(truth, rng.random(len(team)) < 0.8, rng.random(len(team)) < fpr)
    frame = pd.DataFrame(
        {
            "prediction_id": [f"p{i}" for i in range(len(team))],
            "model_id": "m",
            "model_version": "1",
            "predicted_at": pd.Timestamp("2026-01-01", tz="UTC"),
            "y_true": truth.astype(float),
            "y_pred": predicted.astype(int),
            "team": team,
        }
    )
    load_predictions(make_engine(url), frame, ["team"], "spoofed")
    config = folder / "spoofed.toml"
    config.write_text(
        '[[audits]]\nname = "spoofed"\nmodel = "m"\nattributes = ["team"]\n'
        'metrics = ["fpr", "tpr"]\nreference_groups = { team = "long" }\n'
    )
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        run = run_audit("spoofed", str(config), url, pd.Timestamp("2026-02-01", tz="UTC"))
    engine = make_engine(url)
    frames = report_frames(engine, run["run_id"])
    engine.dispose()
    swap = {"\x1b[31mred": "nul\x00\x1b[31mred", "long": LONG}
    fields = [f.name for f in dataclasses.fields(frames) if f.init and f.name != "run"]
    tables = {f: getattr(frames, f).replace(swap) for f in fields}
    config = {**frames.run["config"], "reference_groups": {"team": LONG}}
    frames = dataclasses.replace(frames, run={**frames.run, "config": config}, **tables)
    return {"frames": frames, "printed": printed.getvalue()}


def test_control_and_bidi_characters_in_names_are_visible_escapes_in_html(spoofed):
    """No control or bidi formatting character of a name reaches the page, in text, attributes
    (tooltips) or SVG: each reads as its escape, so an override cannot show 'evil' as 'live'."""
    frames = spoofed["frames"]
    error = "ValueError: team \u202eevil\nsecond line"  # a failed run's error keeps its lines
    page = render_html(dataclasses.replace(frames, run={**frames.run, "error": error}))
    parsed = assert_self_contained(page)
    assert "error: ValueError: team \\u202eevil<br>second line</p>" in page
    for character in UNSHOWABLE:
        assert character not in page, repr(character)
    assert "a|b\nc" not in page
    groups = [c[0] for a, m, c in parsed.rows if a == "team" and m and m.startswith("FPR") and c]
    for shown in SHOWN:
        assert shown in groups, shown
    assert 'title="\\u202eevil"' in page  # the tooltip of the override's chip
    # its forest-plot label, with the name in full on hover
    assert "<title>\\u202eevil</title>\\u202eevil · 200 rows</text>" in page
    finding = [c for _, _, c in parsed.rows if c[:2] == ["team", "\\u202eevil"]]
    assert finding and finding[0][2] == LONG  # flagged against the 10 KB reference, in full
    assert f'title="vs ref. {LONG}:"' in page  # a column header cut on one line, whole on hover


def test_flagged_comparisons_printed_by_a_run_show_names_as_escapes(spoofed):
    """The run's lines on the terminal: the flagged team's override as its escape."""
    printed = spoofed["printed"]
    assert "flagged: team=\\u202eevil fpr" in printed
    assert not any(character in printed for character in UNSHOWABLE)


def _markdown_tables(markdown: str) -> list[list[list[str]]]:
    """The tables of ``markdown`` as CommonMark with GFM tables renders them: rows of cell
    texts (header row first)."""
    from markdown_it import MarkdownIt

    rendered = MarkdownIt("commonmark").enable("table").render(markdown)
    tables = []
    for table in re.findall(r"<table>.*?</table>", rendered, flags=re.DOTALL):
        rows = re.findall(r"<tr>(.*?)</tr>", table, flags=re.DOTALL)
        tables.append(
            [
                [
                    html.unescape(re.sub(r"<[^>]+>", "", cell))
                    for cell in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, flags=re.DOTALL)
                ]
                for row in rows
            ]
        )
    return tables


def test_control_and_bidi_characters_in_names_are_visible_escapes_in_markdown(spoofed):
    """Markdown (rendered by markdown-it, CommonMark with GFM tables): no control or bidi
    character; a pipe and a newline in a name keep every row of both tables at its header's
    width; each name reads as its escape; the table artifact's names are shown the same way."""
    markdown = render_markdown(spoofed["frames"])
    for character in UNSHOWABLE:
        assert character not in markdown, repr(character)
    verdicts, findings = _markdown_tables(markdown)
    for table in (verdicts, findings):
        assert len({len(row) for row in table}) == 1, table
    team = next(row for row in verdicts if row[0] == "team")
    for shown in SHOWN:
        assert f"{shown} 200" in team[3], shown
    assert findings[1][:3] == ["team", "\\u202eevil", LONG]
    records = table_records(spoofed["frames"])
    assert {r["group"] for r in records} >= {*SHOWN, LONG}
    assert not any(c in str(records) for c in UNSHOWABLE)


def test_table_records_name_the_rates_as_the_store_does(spoofed):
    """The Prefect table's rates are ``rate_group`` and ``rate_reference``, quantity first."""
    records = table_records(spoofed["frames"])
    assert {"rate_group", "rate_reference"} <= set(records[0])
    assert not {"group_rate", "reference_rate"} & set(records[0])


# -- pure functions ----------------------------------------------------------------------------


def test_clopper_pearson_matches_statsmodels_and_covers():
    """The rate interval equals statsmodels' 'beta' (Clopper-Pearson) interval, and its exact
    coverage, by enumeration of the binomial, is at least the level at every n and p."""
    for n in range(1, 41):
        x = np.arange(n + 1)
        low, high = clopper_pearson(x, np.full_like(x, n), 0.95)
        ref_low, ref_high = proportion_confint(x, n, alpha=0.05, method="beta")
        assert np.allclose(low, np.nan_to_num(ref_low), atol=1e-10)
        assert np.allclose(high, np.where(x == n, 1.0, ref_high), atol=1e-10)
    for n in (1, 2, 5, 13, 30, 100, 400):
        x = np.arange(n + 1)
        low, high = clopper_pearson(x, np.full_like(x, n), 0.95)
        p = np.linspace(0.0005, 0.9995, 999)[:, None]
        covered = (low <= p) & (p <= high)
        coverage = (stats.binom.pmf(x, n, p) * covered).sum(axis=1)
        assert coverage.min() >= 0.95 - 1e-9, (n, coverage.min())
    low, high = clopper_pearson([0, 3], [0, 0])
    assert np.isnan(low).all() and np.isnan(high).all()


def test_numbers_for_people():
    assert [percent(v) for v in (0.448468, 0.0452, 1.0, 0.0, np.nan)] == [
        "44.8%",
        "4.52%",
        "100%",
        "0%",
        "–",
    ]
    assert [points(v) for v in (0.21392, -0.0197, 0.0)] == ["+21.4 pp", "−1.97 pp", "+0 pp"]
    assert needs_more(3100.0, 700.0) == "needs 2,400 more predictions"
    assert needs_more(859105.2 * 10 + 50, 50) == "needs 8.60 million more predictions"
    assert needs_more(500.0, 700.0) == "enough data"


def test_ticks_are_round_and_cover_the_range():
    rng = np.random.default_rng(3)
    for _ in range(500):
        low, high = np.sort(rng.uniform(-1, 1, 2))
        ticks = nice_ticks(low, high, 6)
        step = np.diff(ticks)
        assert ticks[0] <= low + 1e-12 and ticks[-1] >= high - 1e-12 and len(ticks) <= 7
        assert np.allclose(step, step[0])
        mantissa = step[0] / 10 ** np.floor(np.log10(step[0]))
        assert np.isclose(mantissa, [1, 2, 2.5, 5, 10]).any()
        labels = [tick_label(t, ticks) for t in ticks]
        assert len(set(labels)) == len(labels)


def test_forest_plot_keeps_undefined_and_small_groups():
    rows = pd.DataFrame(
        {
            "group_name": ["big", "tiny", "empty"],
            "difference": [0.2, -0.3, np.nan],
            "low": [0.15, -0.6, np.nan],
            "high": [0.25, 0.1, np.nan],
            "flagged": [True, False, False],
            "small": [False, True, True],
            "size_group": [5000, 3, 0],
            "undefined_reason": [None, None, "fp+tn = 0"],
        }
    )
    svg = forest_plot(rows, 0.05, "FPR", 30)
    assert "empty · 0 rows ⚠" in svg and "undefined: fp+tn = 0" in svg
    assert "tiny · 3 rows ⚠" in svg and 'fill="#fff"' in svg  # hollow dot for a small group
    assert svg.count("<circle") == 2


# -- headless Chromium and the Prefect artifacts -----------------------------------------------

MEASURE = """<script>
const box = document.getElementById("first-screen").getBoundingClientRect();
const out = document.createElement("pre");
out.id = "measure";
out.textContent = JSON.stringify({bottom: box.bottom + window.scrollY,
  width: document.documentElement.scrollWidth, text: document.body.innerText});
document.body.appendChild(out);
</script>"""


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ]
    return subprocess.run(
        [CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120, check=False
    )


@needs_compas
@pytest.mark.skipif(
    CHROMIUM is None and not REQUIRE_CHROMIUM,
    reason="Debian's chromium is not installed (apt-get install -y chromium)",
)
def test_compas_report_in_headless_chromium(compas, tmp_path):
    """Chromium lays the page out at 1,400 px: the first screen ends within 1,000 px, nothing
    overflows sideways, and the rendered text has the rates and the reference comparison."""
    assert CHROMIUM is not None, "BIASAUDIT_REQUIRE_CHROMIUM=1 but chromium is not installed"
    page = tmp_path / "report.html"
    page.write_text(compas["page"])
    probe = tmp_path / "probe.html"  # a copy with a measuring script; the report has none
    probe.write_text(compas["page"].replace("</body>", MEASURE + "</body>"))
    dom = chromium("--dump-dom", probe.as_uri(), profile=tmp_path / "profile")
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="measure">(.*?)</pre>', dom.stdout, flags=re.DOTALL)
    assert found, dom.stdout[-2000:]
    measure = json.loads(html.unescape(found.group(1)))
    assert 300 < measure["bottom"] <= 1000 and measure["width"] <= 1400
    text = measure["text"]
    assert "44.8%" in text and "23.5%" in text and "vs ref. Caucasian" in text
    # the FPR row: counts, rate, then the comparison with Caucasian: ratio 1.91, flagged
    row = re.search(
        r"African-American\t3,696\t1,369\t805\t532\t990\t44\.8%.{0,80}", text, re.DOTALL
    )
    assert row and re.search(r"\t1\.91\s+outside\s+flagged", row.group(0)), row
    shot = tmp_path / "first-screen.png"
    result = chromium(f"--screenshot={shot}", page.as_uri(), profile=tmp_path / "profile")
    assert result.returncode == 0 and shot.stat().st_size > 50_000
    assert shot.read_bytes()[16:24] == (1400).to_bytes(4, "big") + (1000).to_bytes(4, "big")


WIDTH = """<script>
const out = document.createElement("pre");
out.id = "measure";
out.textContent = JSON.stringify({width: document.documentElement.scrollWidth,
  text: document.body.innerText});
document.body.appendChild(out);
</script>"""
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not REQUIRE_CHROMIUM,
    reason="Debian's chromium is not installed (apt-get install -y chromium)",
)


def laid_out_open(page: str, folder: Path) -> dict:
    """Chromium's layout of ``page`` at 1,400 px with every section and detail open: the
    document's width (``width``) and its rendered text (``text``)."""
    assert CHROMIUM is not None, "BIASAUDIT_REQUIRE_CHROMIUM=1 but chromium is not installed"
    opened = re.sub(r"<details(?! open)", "<details open", page)
    probe = folder / "probe.html"
    probe.write_text(opened.replace("</body>", WIDTH + "</body>"))
    dom = chromium("--dump-dom", probe.as_uri(), profile=folder / "profile")
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'<pre id="measure">(.*?)</pre>', dom.stdout, flags=re.DOTALL)
    assert found, dom.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


@needs_chromium
def test_a_10_kb_name_wraps_within_the_window_in_headless_chromium(spoofed, tmp_path):
    """Every section and detail open, a 10 KB name without a space (the reference group, so
    also in column headers and plot titles) keeps the page within Chromium's 1,400 px window,
    and the page still shows the whole name."""
    measure = laid_out_open(render_html(spoofed["frames"]), tmp_path)
    assert measure["width"] <= 1400, measure["width"]
    assert LONG in re.sub(r"\s", "", measure["text"])  # wrapped, not cut


@needs_compas
@needs_chromium
def test_compas_report_with_every_detail_open_fits_the_window(compas, tmp_path):
    """The details' tables (planning, smoothing, ...) wrap their text within 1,400 px."""
    assert laid_out_open(compas["page"], tmp_path)["width"] <= 1400


@pytest.mark.usefixtures("prefect_harness")
def test_flow_publishes_escaped_markdown_and_table_artifacts(hostile):
    """Inside a flow run: the first screen as a markdown artifact (escaped) and the comparisons
    as a table artifact, both keyed by audit."""
    from prefect.artifacts import Artifact

    result = audit_flow(
        "hostile", str(hostile["config"]), hostile["url"], pd.Timestamp("2026-02-15", tz="UTC")
    )
    markdown = Artifact.get("audit-hostile")
    table = Artifact.get("audit-hostile-comparisons")
    assert markdown is not None and markdown.type == "markdown"
    assert f"run {result['run_id']}" in markdown.data and "<script" not in markdown.data
    assert "&lt;script&gt;alert\\(1\\)&lt;/script&gt;" in markdown.data
    assert table is not None and table.type == "table"
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert any(r["group"] == HOSTILE[0] and r["flagged"] for r in rows)
    assert (
        Path(result["report"]).read_text()
        == build_report(hostile["engine"], result["run_id"], result["report"])[0]
    )


@needs_compas
def test_renders_untested_rows_with_their_reason(compas):
    """Detection rows of groups below min_group_size and repeats of a two-valued comparison carry
    a difference but no test: the same rates and ratio, 'not tested' with the reason, and no
    verdict from untested rows."""
    frames = report_frames(compas["engine"], compas["newer"])
    det = frames.detection.copy()
    small = det["group_name"].isin(["Native American", "Asian"])
    det.loc[small, "reason"] = "group size 18 < min_group_size 30"
    repeat = (det["attribute"] == "sex") & (det["group_name"] == "Male")
    det.loc[repeat, "reason"] = "same comparison as Female vs rest (two-valued attribute)"
    det.loc[small | repeat, ["p_value", "p_adjusted"]] = np.nan
    det.loc[small | repeat, "flagged"] = False
    changed = dataclasses.replace(frames, detection=det)
    page = Page(render_html(changed))
    row = page.row("race", "FPR", "African-American")
    assert row[6].startswith("44.8%") and row[8] == "1.91 outside" and row[9].startswith("flagged")
    assert page.row("race", "FPR", "Native American")[9].startswith("not tested")
    sex = comparisons(changed)
    sex = sex[sex["attribute"] == "sex"]
    assert set(sex["group_name"]) == {"Female"} and sex["tested"].all()


@needs_compas
def test_monitoring_rows_are_read_when_their_table_exists_and_drawn(compas, tmp_path):
    """The run's ``monitor_results`` rows (and no other run's) are read; their confidence
    sequences are drawn under the HDIs and listed with the e-process and alarm."""
    import sqlite3

    from biasaudit.db.store.models import MonitorResult

    copy = tmp_path / "monitored.db"
    source = sqlite3.connect(compas["url"].removeprefix("sqlite:///"))
    with sqlite3.connect(copy) as target:
        source.backup(target)  # the database may be in WAL mode: copy through SQLite
    source.close()
    table = MonitorResult.__table__
    zeros = {c.name: 0 for c in table.columns if not c.nullable}
    rows = [
        dict(
            zeros,
            run_id=compas["newer"],
            attribute="race",
            group_name="African-American",
            reference="Caucasian",
            metric="fpr",
            nights=12,
            difference=0.2139,
            cs_low=0.1234,
            cs_high=0.3012,
            e_process=5000.0,
            alarm=True,
        ),
        dict(
            zeros,
            run_id=compas["older"],
            attribute="race",
            group_name="Asian",
            reference="Caucasian",
            metric="fpr",
            nights=12,
            difference=-0.1,
            cs_low=-0.4,
            cs_high=0.2,
            e_process=0.5,
            alarm=False,
        ),  # another run's row: not read
    ]
    with make_engine(f"sqlite:///{copy}").begin() as connection:
        connection.execute(table.insert(), rows)
    frames = report_frames(make_engine(f"sqlite:///{copy}"), compas["newer"])
    assert len(frames.monitor) == 1
    page = render_html(frames)
    assert_self_contained(page)
    assert "anytime-valid confidence sequence [12.3, 30.1] pp" in page
    assert page.count('stroke="#7b1fa2"') == 1
    rows = [
        c
        for a, _, c in Page(page).rows
        if (a or "").startswith("Every monitored") and c[0] != "attribute"
    ]
    assert rows == [
        [
            "race",
            "African-American",
            "Caucasian",
            "fpr",
            "12",
            "+21.4 pp",
            "[12.3, 30.1]",
            "5,000",
            "alarm",
        ]
    ]


def test_trend_by_as_of_on_each_database(db_url, tmp_path):
    """SQLite (naive datetimes) and PostgreSQL (aware): a run's trend holds the runs up to its
    as-of, never a later one, whatever order the runs were made in."""
    load_predictions(make_engine(db_url), hostile_frame(400), ["team", "region", "sex"], "h")
    config = tmp_path / "trend.toml"
    config.write_text(
        '[[audits]]\nname = "trend"\nmodel = "m"\nattributes = ["sex"]\nmetrics = ["fpr"]\n'
    )
    late = run_audit("trend", str(config), db_url, pd.Timestamp("2026-02-01", tz="UTC"))
    early = run_audit("trend", str(config), db_url, pd.Timestamp("2026-01-10", tz="UTC"))
    engine = make_engine(db_url)
    newer, older = (report_frames(engine, r["run_id"]) for r in (late, early))
    assert sorted(newer.trend["run_id"].unique()) == sorted([late["run_id"], early["run_id"]])
    assert set(older.trend["run_id"]) == {early["run_id"]}
    page = render_html(newer)
    assert 0 < page.index("2026-01-10<br>v2") < page.index("2026-02-01<br>v1")  # by as-of
    assert "2026-02-01" not in render_html(older)
    engine.dispose()


@needs_compas
def test_label_completeness_by_decision_is_shown_when_groups_differ(compas):
    """With the unlabelled counts by decision, a group labelled unevenly shows its
    completeness among selected and rejected predictions."""
    frames = report_frames(compas["engine"], compas["newer"])
    counts = frames.counts.copy()
    counts["unlabelled_pos"] = 0
    counts["unlabelled_neg"] = 0
    black = (counts["group_name"] == "African-American") & (counts["subset"] == "group")
    rejected = int(counts.loc[black, ["fn", "tn"]].sum(axis=1).iloc[0])  # 1,522 labelled
    counts.loc[black, "unlabelled_neg"] = rejected  # as many rejections again, unlabelled
    counts.loc[black, "n_unlabelled"] = rejected
    page = render_html(dataclasses.replace(frames, counts=counts))
    n = int(counts.loc[black, ["tp", "fp", "fn", "tn"]].sum(axis=1).iloc[0]) + rejected
    labelled = 1 - rejected / n
    expected = (
        f"African-American <b>{n:,}</b> · {100 * labelled:.1f}% labelled "
        "(100% of selected, 50.0% of rejected)"
    )
    assert expected in page
    # labels depend on the decision beyond chance: Fisher's exact p by hand, the hypergeometric
    # probability of every table at most as likely as the observed one (all selections labelled)
    selected = int(counts.loc[black, ["tp", "fp"]].sum(axis=1).iloc[0])
    table = stats.hypergeom(n, selected + rejected, selected)  # draw the selected; count labelled
    support = np.arange(selected + 1)
    p = table.pmf(support)[table.pmf(support) <= table.pmf(selected) * (1 + 1e-7)].sum()
    assert p < 0.001
    warning = "⚠ labelled shares differ by decision in <span class=datum>African-American</span> "
    assert warning + "(Holm-adjusted Fisher p <0.001)" in page
    assert "by the decision: TPR, FPR, FNR and TNR are biased" in page and "by the outcome: PPV" in page
    assert "labelled shares differ by decision" not in compas["page"]  # COMPAS: every row labelled


@needs_compas
def test_completeness_warning_is_the_runs_own_decision(compas):
    """It warns only where the run itself does (tasks.counts.label_completeness): a gap that a
    large audit can see but that stays below 5 points is not a warning, in the page or the run."""
    frames = report_frames(compas["engine"], compas["newer"])
    counts = frames.counts.copy()
    counts["unlabelled_pos"] = 0
    counts["unlabelled_neg"] = 0
    black = (counts["group_name"] == "African-American") & (counts["subset"] == "group")
    rejected = int(counts.loc[black, ["fn", "tn"]].sum(axis=1).iloc[0])
    counts.loc[black, "unlabelled_neg"] = round(0.03 * rejected)  # 3% of rejections unlabelled
    counts.loc[black, "n_unlabelled"] = round(0.03 * rejected)
    race = label_completeness(counts[counts["attribute"] == "race"]).set_index("group_name")
    assert race.loc["African-American", "p_adjusted"] < 0.001  # seen,
    assert not race["uneven"].any()  # but small
    assert "labelled shares differ by decision" not in render_html(
        dataclasses.replace(frames, counts=counts)
    )


def test_an_audit_computes_label_completeness_once_for_its_summary_and_its_report(
    tmp_path, monkeypatch
):
    """The audit's core computes each group's label completeness once; its summary and the
    report it writes both read that table, and the page is byte for byte the one rendered later
    from the stored run alone (which computes it from the stored counts)."""
    import biasaudit.tasks.core
    import biasaudit.tasks.report.derive
    from biasaudit.flows.demo import GROUPS, synthetic_predictions

    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return label_completeness(*args, **kwargs)

    for module in (biasaudit.tasks.core, biasaudit.tasks.report.derive):
        monkeypatch.setattr(module, "label_completeness", counted)
    data = synthetic_predictions()
    data = data[data["model_id"] == "credit-scorer"].head(6000).copy()
    rejected = (data["race"] == "Black") & (data["y_pred"] == 0)
    data.loc[rejected & (np.arange(len(data)) % 2 == 0), "y_true"] = np.nan  # labels by decision
    url = f"sqlite:///{tmp_path / 'once.db'}"
    upgrade(url)
    load_predictions(make_engine(url), data, list(GROUPS), "test")
    config = tmp_path / "once.toml"
    config.write_text(
        '[[audits]]\nname = "once"\nmodel = "credit-scorer"\nattributes = ["race", "sex"]\n'
        'metrics = ["tpr", "fpr"]\n'
    )
    result = run_audit("once", str(config), url, pd.Timestamp("2026-11-01", tz="UTC"))
    assert len(calls) == 1
    page = Path(result["report"]).read_text()
    assert "labelled shares differ by decision in <span class=datum>Black</span>" in page
    summary = get_run(make_engine(url), result["run_id"]).summary
    warnings = summary["label_completeness_warnings"]
    assert any(
        w.startswith("labelled shares differ by decision in race groups Black") for w in warnings
    )
    assert page == build_report(make_engine(url), result["run_id"], result["report"])[0]
    assert len(calls) == 2  # the stored run alone: computed from its counts


def test_numbers_formatted_a_column_at_a_time_read_as_each_value_alone():
    """The detail tables format a column at once (sig3_cells, percent_cells, count_cells,
    p_text_cells): character for character what the function of one value writes, at zero, signs,
    infinities, NaN, every power of ten and its neighbours (where log10 rounds) and random values
    of every magnitude."""
    from biasaudit.tasks.report.text import (
        count,
        count_cells,
        p_text,
        p_text_cells,
        percent_cells,
        sig3,
        sig3_cells,
    )

    rng = np.random.default_rng(7)
    values = [0.0, -0.0, np.nan, np.inf, -np.inf, 5e-324, 1e308, 999.5, 0.00099999999, 999999.9999]
    for k in range(-12, 13):
        power = 10.0**k
        values += [power, -power, np.nextafter(power, 0), np.nextafter(power, np.inf)]
        values += [9.995 * power, 9.9949999 * power, 0.5 * power]
    values += list(rng.normal(size=4000) * 10.0 ** rng.integers(-8, 12, 4000))
    values += list(rng.random(2000)) + list(rng.integers(0, 10**10, 1000).astype(float))
    array = np.array(values)
    for one, cells in ((sig3, sig3_cells), (percent, percent_cells), (count, count_cells),
                       (p_text, p_text_cells)):
        assert list(cells(array)) == [one(float(v)) for v in array], cells.__name__


def test_detail_tables_formatted_by_column_read_as_cell_by_cell():
    """A detail table formatted column by column is the table formatted value by value (the
    ``_format`` of each cell, as before): numbers of each column's format, text with its missing
    values (NaN in a ``str`` column, <NA> in a ``string`` column, None in an object column),
    booleans, mixed object columns and timestamps."""
    from biasaudit.tasks.report.page import _format, _frame_table, _number_format, _table
    from biasaudit.tasks.report.text import esc

    frame = pd.DataFrame(
        {
            "attribute": pd.Series(["race", None, "race", "a<b"], dtype="str"),
            "group_name": pd.Series(["x\u202ey", pd.NA, "x\u202ey", "z"], dtype="string"),
            "value_group": [0.1234, np.nan, -1e-5, 12345.0],
            "size_group": [3, 1_500_000, 0, 7],
            "p_value": [0.0004, 0.5, np.nan, 1.0],
            "level": np.array([0.05, 2e-9, 1e3, -0.0], dtype="float32"),
            "tested": [True, False, True, False],
            "reason": [None, "too small", 0.5, True],
            "at": pd.to_datetime(["2026-01-01", None, "2026-02-01", "2026-03-01"], utc=True),
        }
    )
    columns = list(frame.columns)
    numbers = [_number_format(c) for c in columns]
    by_cell = _table(
        [esc(c) for c in columns],
        [[_format(v, f) for v, f in zip(r, numbers)] for r in _tuples(frame, index=False)],
        left=2,
    )
    assert _frame_table(frame) == by_cell
    assert _frame_table(frame, ["p_value", "absent", "attribute"]) == _frame_table(
        frame[["p_value", "attribute"]]
    )


def test_many_groups_stay_on_the_first_screen_and_bare_frames_render():
    """An attribute with 60 groups shows 16 chips (the small ones and the largest) and says how
    many more; a run with counts only (no stage results) renders."""
    sizes = np.arange(60) * 7 + 3  # 3 .. 416 predictions
    cells = np.stack([sizes // 4, sizes // 4, sizes // 4, sizes - 3 * (sizes // 4)], axis=1)
    counts = pd.DataFrame(cells, columns=["tp", "fp", "fn", "tn"]).assign(
        attribute="zip", group_name=[f"z{i:02d}" for i in range(60)], subset="group", n_unlabelled=0
    )
    frames = ReportFrames(
        run={"id": 1, "audit_name": "a", "status": "succeeded", "config": {}}, counts=counts
    )
    page = render_html(frames)
    first = page.split('<hr class="fold">')[0]
    small = np.sort(sizes[sizes < 30])
    large = np.sort(sizes[sizes >= 30])
    hidden = large[: len(large) - (16 - len(small))]  # the 16 shown: all small, then largest
    assert len(small) <= 8
    assert first.count('class="chip') == 16 and first.count('class="chip small"') == len(small)
    assert f"and {len(hidden)} more groups of {hidden.min()} to {hidden.max()} predictions" in first
    assert_self_contained(page)
    assert "too little data" in first


def test_rows_are_those_of_itertuples():
    """The report reads frames a column at a time (_tuples): the same rows, values and types as
    pandas' itertuples, for every dtype a stored run's frames hold."""
    frame = pd.DataFrame(
        {
            "group_name": pd.array(["a", None, "c"], dtype="string[pyarrow]"),
            "attribute": pd.Series(["race", "sex", None], dtype="str"),
            "n": pd.array([1, None, 3], dtype="Int64"),
            "value": [0.5, float("nan"), 1e-300],
            "flagged": [True, False, True],
            "at": pd.to_datetime(["2026-01-01", None, "2026-03-01"]),
            "zoned": pd.to_datetime(["2026-01-01", "2026-02-01", None], utc=True),
            "mixed": [1, "x", None],
            "1 bad name": [1, 2, 3],
        },
        index=[5, 7, 9],
    )
    for index in (True, False):
        ours = list(_tuples(frame, index=index))
        theirs = list(frame.itertuples(index=index))
        assert [r._fields for r in ours] == [r._fields for r in theirs]
        for mine, pandas_row in zip(ours, theirs, strict=True):
            assert [type(v) for v in mine] == [type(v) for v in pandas_row]
            assert all(
                a is b or (pd.isna(a) and pd.isna(b)) or a == b
                for a, b in zip(mine, pandas_row, strict=True)
            )
    no_columns = frame[[]]  # a row each, with no field (pandas 3.0's itertuples gives no row)
    assert [tuple(r) for r in _tuples(no_columns, index=False)] == [()] * len(frame)


def test_a_derived_table_is_computed_once_per_arguments_and_copied(compas):
    """per_frames computes a table once per frames and arguments (a default given or not), and
    each caller gets its own copy."""
    from biasaudit.tasks.report import per_frames

    calls = []

    @per_frames
    def table(frames, deduplicate: bool = True):
        calls.append(deduplicate)
        return pd.DataFrame({"a": [1]})

    frames = report_frames(compas["engine"], compas["newer"])
    first = table(frames)
    first.loc[0, "a"] = 99
    assert table(frames, deduplicate=True)["a"].tolist() == [1]
    table(frames, True)
    table(frames, False)
    assert calls == [True, False]


@needs_compas
def test_bayesian_words_only_on_tested_rows_at_the_joint_mass(compas):
    """The HDIs shown hold 1 − α/m each over the run's m tested comparisons, and the first screen
    and the markdown say so; a verdict cell says flagged, a decision with the row's adjusted p,
    or not tested; a run stored before migration 0019 (no hdi_mass: unadjusted decisions made on
    every row) shows no decision, 'not flagged' instead."""
    frames = report_frames(compas["engine"], compas["newer"])
    tested = int(frames.detection["p_value"].notna().sum())
    assert 50 <= tested <= 500  # 5/m percentage points short of 100: three decimals
    level = f"{100 - 5 / tested:.3f}".rstrip("0") + "%"
    first = compas["page"].split('<hr class="fold">')[0]
    assert f"difference [{level} HDI, pp]" in first and f"{level} each" in first
    assert f"difference \\[{level} HDI\\]" in render_markdown(frames)
    words = ("flagged", "biased", "fair", "undecided", "not tested", "not flagged")

    def verdicts(page: Page) -> list[str]:
        """The group tables' verdict cells (not the attributes' verdicts, which count rows)."""
        cells = (c for _, _, row in page.rows for c in row if c.startswith(words))
        return [c for c in cells if not re.search("comparisons|intervals", c)]

    shown = verdicts(Page(compas["page"]))
    assert shown and all(re.search(r" p [<\d]", v) or v.startswith("not tested") for v in shown)
    assert any(v.startswith("undecided") for v in shown)
    det = frames.detection.assign(hdi_mass=np.nan)
    old = verdicts(Page(render_html(dataclasses.replace(frames, detection=det))))
    assert not any(v.startswith(("biased", "fair", "undecided")) for v in old)
    assert any(v.startswith("not flagged") for v in old)
