# pubmesh — the two commands: `make demo` and `make test`. Everything they need is installed here.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: all venv java chromium prometheus demo test figures lint bench compiled clean help

help:
	@echo "make demo   - build the environment, run the default experiment, write out/demo/report.html"
	@echo "make test   - build the environment and run the whole test suite (<= 15 min; its CPU in"
	@echo "              loop figures is printed at the end: README, the test suite's budget)"
	@echo "make figures - the papers' figure tests at every seed and size (the cases marked full)"
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

# The report tests open every kind of report in a real browser: Debian's headless Chromium.
chromium:
	@if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "make: installing Chromium (the report tests render in a real browser)"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	      { echo "make: could not install Chromium with apt-get (see above); the report tests need it"; exit 2; }; \
	  else echo "make: Chromium is required for the report tests (Debian: apt-get install chromium)"; exit 2; fi; \
	fi

# The metrics test scrapes a running cluster with a real Prometheus: Debian's package.
prometheus:
	@if ! command -v prometheus >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "make: installing Prometheus (the metrics test scrapes a cluster with it)"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; } || \
	      { echo "make: could not install Prometheus with apt-get (see above); the metrics test needs it"; exit 2; }; \
	  else echo "make: Prometheus is required for the metrics test (Debian: apt-get install prometheus)"; exit 2; fi; \
	fi

demo: venv java
	$(VENV)/bin/pubmesh demo --out out/demo

test: venv java chromium prometheus
	$(PY) tools/lint_sansio.py
	$(PY) -m pytest -q -p no:cacheprovider -n 3 --dist loadgroup --durations=30

# The full tier: the same figure tests at every seed and size the papers' figures use (~1 h).
figures: venv java chromium
	PUBMESH_FULL=1 $(PY) -m pytest -q -p no:cacheprovider -n 3 --dist loadgroup -m full

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
