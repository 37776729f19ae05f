# One entry point for people and CI. `make test` and `make demo` set themselves up.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo demo-compare test check lint typecheck bench clean

$(STAMP): pyproject.toml setup.py loadgen/stream/_sse_scan.c loadgen/http/_chunked.c
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,realserver]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/loadgen demo

demo-compare: $(STAMP)
	$(VENV)/bin/loadgen demo-compare

# The whole suite: lint, types (tests included) and pytest; CI runs this.
test: lint typecheck
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

check: test

bench: $(STAMP)
	$(PY) bench/client_ingest.py
	$(PY) bench/replay_schedule.py
	$(PY) bench/sim_engine.py
	$(PY) bench/prompts.py
	$(PY) bench/analyze.py --requests 200000
	$(PY) bench/hostile.py
	$(PY) bench/calibrate.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
