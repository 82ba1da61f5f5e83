# The two commands of the README. Each creates the virtual environment on first use.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test lint typecheck
demo: $(VENV)/.installed
	$(VENV)/bin/biasaudit demo

test: $(VENV)/.installed lint typecheck
	$(PY) -m pytest

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

# mypy over the installed package: .typecheck/biasaudit points at the repository root.
typecheck: $(VENV)/.installed
	mkdir -p .typecheck && ln -sfn .. .typecheck/biasaudit
	$(VENV)/bin/mypy -p biasaudit.flows -p biasaudit.tasks -p biasaudit.schemas -p biasaudit.db

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@
