# The two commands of the README. Each creates the virtual environment on first use.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test
demo: $(VENV)/.installed
	$(VENV)/bin/biasaudit demo

test: $(VENV)/.installed
	$(PY) -m pytest

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@
