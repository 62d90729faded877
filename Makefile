# Cairn — the two commands a new user needs are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
# Python may keep the bytecode it compiles (__pycache__, ignored by git): with it unset, every test's
# master, agent and scheduler process compiles Cairn's modules from source again (~3 s of CPU each).
unexport PYTHONDONTWRITEBYTECODE
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install -q -c constraints.txt
STAMP := $(VENV)/.installed
# The task environment trials run in on a local cluster (requirements-task.txt): Cairn's client,
# Determined's package (its `det` CLI is the one the compatibility tests drive) and PyTorch, in a
# venv of its own so Determined's pins (e.g. requests<2.32) never constrain the services'.
TASK_VENV := .venv-task
TASK_STAMP := $(TASK_VENV)/.installed
# Its base interpreter: one the unprivileged task user can run too (scripts/task_python.sh says why).
TASK_PYTHON := $(shell scripts/task_python.sh $(PYTHON))
# Changes when TASK_PYTHON does, so that an existing task environment is moved onto it.
TASK_BASE := $(TASK_VENV)/.base-python

.PHONY: FORCE install proto test lint format demo clean postgres bench-install webui chromium envoy docker task-image images oidc-provider

install: $(STAMP) proto webui $(TASK_STAMP) oidc-provider

# The services, the CLI and the tools: no PyTorch here (trials get it from the task environment).
$(STAMP): pyproject.toml clients/python/pyproject.toml constraints.txt
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) -e clients/python -e '.[dev]'
	touch $@

$(TASK_STAMP): requirements-task.txt clients/python/pyproject.toml $(TASK_BASE)
	scripts/task_venv.sh $(TASK_VENV) $(TASK_PYTHON)
	$(TASK_VENV)/bin/pip install -q -r requirements-task.txt
	touch $@

$(TASK_BASE): FORCE
	@mkdir -p $(TASK_VENV)
	@readlink -f "$$(command -v $(TASK_PYTHON))" | cmp -s - $@ || readlink -f "$$(command -v $(TASK_PYTHON))" > $@

FORCE:

# Generated stubs are derived from proto/ and never edited by hand.
proto: $(STAMP)
	$(BIN)/python scripts/gen_proto.py

# The WebUI the master serves at / (webui/dist); skipped with a note where npm is missing.
WEBUI_SOURCES := $(shell find webui/src -type f 2>/dev/null) webui/index.html webui/package.json \
	webui/package-lock.json webui/tsconfig.json webui/vite.config.ts
webui: webui/dist/index.html
webui/dist/index.html: $(WEBUI_SOURCES)
	@if command -v npm >/dev/null 2>&1; then \
		cd webui && npm ci --no-audit --no-fund && npm run build; \
	else \
		echo "make: npm not found: the WebUI is not built (the master's / says how to build it)" >&2; \
	fi

# The OpenID provider single sign-on's tests start on loopback (tests/support/oidc.py): panva's
# oidc-provider from npm, as the lock file pins it.
OIDC_PROVIDER := tests/support/oidc_provider
oidc-provider: $(OIDC_PROVIDER)/node_modules/.installed
$(OIDC_PROVIDER)/node_modules/.installed: $(OIDC_PROVIDER)/package.json $(OIDC_PROVIDER)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		cd $(OIDC_PROVIDER) && npm ci --no-audit --no-fund && touch node_modules/.installed; \
	else \
		echo "make: npm not found: single sign-on's tests cannot start their OpenID provider" >&2; \
	fi

# The descriptor set Envoy's gRPC-JSON transcoder reads (deploy/envoy/README.md).
envoy: proto
	cp clients/python/cairn/gen/descriptor_set.binpb deploy/envoy/cairn_descriptor_set.binpb

# Debian's Chromium for the WebUI's browser tests (CAIRN_TEST_BROWSER=skip to do without).
chromium:
	@scripts/ensure_chromium.sh

# Starts a local PostgreSQL (where this machine can) so the suite runs on it as well as on SQLite.
postgres:
	@scripts/ensure_postgres.sh

# Debian's Docker (docker.io, debootstrap) and a running dockerd, for the Docker runtime and its
# tests; where dockerd cannot start, the Docker tests skip, saying why (CAIRN_TEST_DOCKER=skip to do without).
docker:
	@scripts/ensure_docker.sh

# The image trials run in under the Docker runtime (cairn/task_image.py names it): a debootstrap
# base, then requirements-task.txt and the Cairn client, each layer built once and reused by tag.
task-image: $(STAMP) proto docker
	@$(BIN)/python scripts/build_task_image.py

# The service image deploy/k8s runs (cairn/service_image.py names it): the services' dependencies
# from the package registries in a venv on the task image's base, then their source, each layer
# built once and reused by tag.
images: $(STAMP) proto webui docker
	@$(BIN)/python scripts/build_service_image.py

# Two workers (pytest-xdist), each taking whole test files: an end-to-end test spends about half
# its time waiting on its cluster (trials sleeping, polls), which the other worker's tests fill.
# Every test has its own cluster, database, ports and folders. TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 2

test: install postgres chromium docker
	@if [ "$${CAIRN_TEST_DOCKER:-}" != skip ] && timeout 20 docker info >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory task-image images; \
	fi
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --durations=30

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The peers the benchmarks compare against (Ray Tune, Optuna) live in their own environment.
bench-install:
	command -v wrk >/dev/null || apt-get install -y -q wrk
	test -d .venv-bench || $(PYTHON) -m venv .venv-bench
	.venv-bench/bin/pip install -q -r bench/requirements.txt -r examples/digits/requirements.txt

# The main job: a local cluster and a hyperparameter search with a live view (README).
demo: $(STAMP) proto webui $(TASK_STAMP)
	scripts/demo.sh

clean:
	rm -rf $(VENV) $(TASK_VENV) .venv-det .pytest_cache .mypy_cache .ruff_cache test-artifacts webui/dist webui/node_modules $(OIDC_PROVIDER)/node_modules
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
	rm -rf clients/python/cairn/{api,agent,scheduler,searcher,checkpoint,gen}
