# Two entry points for a fresh machine (Python >= 3.11 and pip are all it needs):
#   make report   create .venv, install the project, run the whole workflow
#   make test     create .venv, install the project with its test extras, run pytest (the quick
#                 tests; `make test-slow` runs the real-model and kill -9 tests that CI adds)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CORES ?= all
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: report test test-slow lint clean-results

# .installed-core: the project; .installed-test: the project with its [test] extra.
$(VENV)/.installed-%: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.$(if $(filter core,$*),,[$*])'
	touch $@

report: $(VENV)/.installed-core
	$(BIN)/snakemake --cores $(CORES)

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -m "not slow"

test-slow: $(VENV)/.installed-test
	$(BIN)/python -m pytest -m slow

lint: $(VENV)/.installed-test
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile workflow
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean-results:
	rm -rf results logs .snakemake
