"""The documentation stays true to the repository: every test that docs/guarantees.md names exists,
every relative link in README.md and docs/ points to a file, and the README stays a first document."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
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
