# Cairn — the two commands a new user needs are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install -q -c constraints.txt
STAMP := $(VENV)/.installed

.PHONY: install proto test lint format demo clean postgres bench-install

install: $(STAMP) proto

$(STAMP): pyproject.toml clients/python/pyproject.toml constraints.txt examples/digits/requirements.txt
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) -e clients/python -e '.[dev]' -r examples/digits/requirements.txt
	touch $@

# Generated stubs are derived from proto/ and never edited by hand.
proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

# Starts a local PostgreSQL (where this machine can) so the suite runs on it as well as on SQLite.
postgres:
	@scripts/ensure_postgres.sh

test: install postgres
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The peers the benchmarks compare against (Ray Tune, Optuna) live in their own environment.
bench-install:
	test -d .venv-bench || $(PYTHON) -m venv .venv-bench
	.venv-bench/bin/pip install -q -r bench/requirements.txt

# The main job: a local cluster and a hyperparameter search with a live view (README).
demo: install
	scripts/demo.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache test-artifacts
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
	rm -rf clients/python/cairn/{api,agent,scheduler,searcher,checkpoint,gen}
