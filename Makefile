# The commands of the README. Each creates the virtual environment on first use.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-slow test-all test-lines lint typecheck spark
demo: $(VENV)/.installed
	$(VENV)/bin/biasaudit demo

# In parallel, a worker per core. `make test` leaves out the tests marked `slow` (long simulations,
# real Prefect servers, killed processes); `make test-slow` runs only those; CI runs both.
test: $(VENV)/.installed lint typecheck
	$(PY) -m pytest -n auto --dist worksteal -m "not slow"

test-slow: $(VENV)/.installed
	$(PY) -m pytest -n auto --dist worksteal -m slow

test-all: test test-slow

# The release line pyproject.toml allows beside the main environment's: a project on Prefect 3.9.1
# and SQLAlchemy 2.1 (the main environment holds 2.0 for clickhouse-sqlalchemy, the `clickhouse`
# extra), installed in one resolve with biasaudit, so pip fails if they cannot stand together. In
# it: the fast tests (every engine but ClickHouse required), and the scheduled-run, serve,
# trigger, work-pool and event tests on a real Prefect server.
LINES := .venv-lines
LINES_PINS := "prefect==3.9.1" "sqlalchemy==2.1.9"
LINES_SLOW := tests/test_server.py tests/test_work_pool.py tests/test_events.py
test-lines: $(LINES)/.installed
	$(LINES)/bin/python -m pytest -n auto --dist worksteal -p no:cacheprovider -m "not slow"
	$(LINES)/bin/python -m pytest -n auto --dist worksteal -p no:cacheprovider -m slow $(LINES_SLOW)

$(LINES)/.installed: pyproject.toml Makefile
	python3 -m venv $(LINES)
	$(LINES)/bin/python -m pip install --quiet --upgrade pip
	$(LINES)/bin/python -m pip install --quiet -e ".[test]" $(LINES_PINS)
	touch $@

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
	$(PY) -m pip install --quiet -e ".[test,clickhouse]"
	touch $@

# Spark for the Spark SQL tests, from the pyspark package (4.3: Java 17, the Thrift server and the
# standalone master and workers in one download, 456 MB), installed beside the virtual
# environment, not in it: with pyspark importable, pandera imports pyspark.pandas at every start,
# which warns on pandas 3. tests/clusters.py finds it here (or at BIASAUDIT_SPARK_HOME).
spark: .spark/.installed
.spark/.installed: $(VENV)/.installed
	$(PY) -m pip install --quiet --target .spark "pyspark>=4.3,<4.4"
	touch $@
