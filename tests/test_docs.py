"""The documentation stays true to the repository: every test that docs/guarantees.md names exists,
every relative link in README.md and docs/ points to a file, and the README stays a first document."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "benchmarks" / "results").glob("*.md")),
]
TEST_REFERENCE = re.compile(r"(tests/[\w/]+\.py)::(\w+)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def defined_tests(path: Path) -> set[str]:
    """Names of the functions defined anywhere in the Python file ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def test_every_test_named_in_the_guarantees_exists():
    """Each `tests/FILE.py::NAME` of docs/guarantees.md names a file that defines NAME."""
    text = (ROOT / "docs" / "guarantees.md").read_text()
    references = TEST_REFERENCE.findall(text)
    assert len(references) >= 20, "docs/guarantees.md names too few tests"
    missing = []
    for file, name in references:
        path = ROOT / file
        if not path.is_file() or name not in defined_tests(path):
            missing.append(f"{file}::{name}")
    assert not missing, f"named in docs/guarantees.md but not defined: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file(page):
    """Every relative link of the page (anchors stripped) resolves to a file or folder."""
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL with a scheme, or an anchor in the page itself
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"{page.name}: links to nothing: {broken}"


def test_the_readme_is_short():
    """README.md is a first document of at most 220 lines; the reference lives in docs/."""
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 220, f"README.md has {lines} lines"


README_BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def readme_blocks(language: str) -> list[str]:
    return [
        body
        for kind, body in README_BLOCK.findall((ROOT / "README.md").read_text())
        if kind == language
    ]


def test_the_readme_toml_is_the_demos():
    """Each audit the README shows is the demo's (flows/demo_audits.toml), key for key."""
    import tomllib

    demo = {
        a["name"]: a
        for a in tomllib.loads((ROOT / "flows" / "demo_audits.toml").read_text())["audits"]
    }
    shown = [a for block in readme_blocks("toml") for a in tomllib.loads(block)["audits"]]
    assert shown, "the README shows no audit"
    for audit in shown:
        assert audit == demo.get(audit["name"]), f"README's {audit['name']!r} is not the demo's"


def readme_commands() -> list[list[str]]:
    """The README's `biasaudit ...` lines, comments left out, in order; `serve` (it runs until
    stopped) and `make demo` (built by the test) are not among them."""
    import shlex

    commands = []
    for block in readme_blocks("bash"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["biasaudit"] and words[1:2] != ["serve"]:
                commands.append(words[1:])
    return commands


@pytest.mark.slow  # the demo's four audits and three more runs: about 40 s of CPU
def test_the_readme_commands_run_after_the_demo(tmp_path, monkeypatch):
    """Every `biasaudit` command of the README runs as written, in its order, after the demo
    (`make demo`: its store and ./biasaudit.toml in the working folder), exit 0, no error line.
    The flows run as plain calls (flows.pipeline.run_audit), so no Prefect server starts; the
    demo's audits in their file's order."""
    from contextlib import redirect_stdout
    from io import StringIO

    from typer.testing import CliRunner

    from biasaudit.flows import audit, nightly, pipeline
    from biasaudit.flows.cli import app, runs
    from biasaudit.flows.config_files import configured_names

    def nightly_flow(config, db_url, as_of):
        return [
            pipeline.run_audit(name, config, db_url, as_of) for name in configured_names(config)
        ]

    monkeypatch.chdir(tmp_path)
    for name in ("BIASAUDIT_DATABASE_URL", "BIASAUDIT_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("BIASAUDIT_REPORTS_DIR", str(tmp_path / "reports"))
    monkeypatch.setattr(runs, "_prefect_environment", lambda logs=False: None)
    monkeypatch.setattr(audit, "audit_flow", pipeline.run_audit)
    monkeypatch.setattr(nightly, "nightly_flow", nightly_flow)
    runner = CliRunner()
    commands = readme_commands()
    assert ["compare", "7"] in commands, commands
    with redirect_stdout(StringIO()):
        built = runner.invoke(app, ["demo"])
    assert built.exit_code == 0, built.output
    for command in commands:
        with redirect_stdout(StringIO()):
            done = runner.invoke(app, command)
        assert done.exit_code == 0 and "error:" not in done.output, (command, done.output)


def test_the_module_map_names_every_module():
    """docs/design.md's module map names every module of flows/, tasks/, schemas/ and db/ (by its
    file name, or its folder for a package listed as one), migrations' revisions apart."""
    import re

    doc = (ROOT / "docs" / "design.md").read_text()
    named = set(re.findall(r"`([\w/]+(?:\.py|/))`", doc))
    unnamed = [
        str(path.relative_to(ROOT))
        for package in ("flows", "tasks", "schemas", "db")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "__init__.py"
        and "versions" not in path.parts
        and path.name not in named
        and not (path.parent != ROOT / package and f"{path.parent.name}/" in named)
    ]
    assert not unnamed, f"docs/design.md's module map lacks {unnamed}"


def test_the_api_page_names_every_parameter_and_result_frame_of_audit_frame():
    """docs/python-api.md gives `audit_frame`'s signature as the function has it, and names every
    field of its result."""
    import inspect
    import re
    from dataclasses import fields

    from biasaudit.tasks.api import audit_frame
    from biasaudit.tasks.core import AuditResult

    page = (ROOT / "docs" / "python-api.md").read_text()
    (shown,) = re.findall(r"`audit_frame\((.*?)\)`", page)
    signature = inspect.signature(audit_frame)
    bare = signature.replace(
        parameters=[p.replace(annotation=p.empty) for p in signature.parameters.values()],
        return_annotation=signature.empty,
    )
    assert f"({shown})" == str(bare)
    unnamed = [f.name for f in fields(AuditResult) if f"`{f.name}`" not in page]
    assert not unnamed, f"docs/python-api.md names no {unnamed}"


def test_the_benchmarks_index_is_a_table_of_every_page_and_script():
    """benchmarks/README.md lists every page of benchmarks/results/ once, and every script of
    benchmarks/ on some page's row; no measured figure sits in the index itself."""
    index = (ROOT / "benchmarks" / "README.md").read_text()
    rows = [line for line in index.splitlines() if line.startswith("| [")]
    pages = re.findall(r"\]\(results/(\w+)\.md\)", "\n".join(rows))
    on_disk = sorted(p.stem for p in (ROOT / "benchmarks" / "results").glob("*.md"))
    assert sorted(pages) == on_disk and len(set(pages)) == len(pages)
    scripts = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py"))
    listed = set(re.findall(r"`(\w+)\.py`", "\n".join(rows)))
    assert [s for s in scripts if s not in listed] == []
    assert len(index.split()) < 600, "the index holds figures: move them to their page"
