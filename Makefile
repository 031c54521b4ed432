# pubmesh — the two commands: `make demo` and `make test`. Everything they need is installed here.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: all venv java demo test lint bench compiled clean help

help:
	@echo "make demo   - build the environment, run the default experiment, write out/demo/report.html"
	@echo "make test   - build the environment and run the whole test suite"
	@echo "make lint   - ruff, mypy --strict and the sans-IO rule"
	@echo "make bench  - benchmarks (figures go into BENCHMARKS.md)"
	@echo "make compiled - the optional mypyc build of the simulator's hot modules in build/compiled"
	@echo "                (run it with PYTHONPATH=build/compiled; same traces, see BENCHMARKS.md)"

venv: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "make: python3 (>= 3.11) is required"; exit 2; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || \
	  { echo "make: Python >= 3.11 is required, found $$($(PYTHON) --version)"; exit 2; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Spark needs Java 17 or newer. Install OpenJDK from Debian if it is missing and we are root.
java:
	@if ! command -v java >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "make: installing OpenJDK 17 (Spark needs Java >= 17)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	  else echo "make: Java >= 17 is required for Spark (install openjdk-17-jre-headless)"; exit 2; fi; \
	fi
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then echo "make: Java >= 17 is required for Spark, found $$v"; exit 2; fi

demo: venv java
	$(VENV)/bin/pubmesh demo --out out/demo

test: venv java
	$(PY) tools/lint_sansio.py
	$(PY) -m pytest -q -p no:cacheprovider -n 3

lint: venv
	$(PY) tools/lint_sansio.py
	$(VENV)/bin/ruff check src tests tools bench
	$(VENV)/bin/ruff format --check src tests tools bench
	$(VENV)/bin/mypy

bench: venv java
	$(PY) bench/run_all.py

compiled: venv
	$(PY) tools/build_compiled.py --out build/compiled

clean:
	rm -rf $(VENV) out runs .pytest_cache .mypy_cache .ruff_cache .hypothesis
