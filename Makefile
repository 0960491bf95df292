# recserve: `make run` serves, `make test` proves it. Both set everything up.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
TVENV := .venv-triton
KVENV := .venv-k8s
# Test files run in this many pytest-xdist workers (tests/conftest.py orders
# them). Three on 2 cores took 12 min against 14 (the cores were a quarter
# idle with two); two until three have run clean often enough.
TEST_WORKERS ?= 2
PYTEST_WORKERS = -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
PY := $(VENV)/bin/python
BUF := npx --yes @bufbuild/buf@1.75.0
DATA ?= data
# A dataset directory of your own (docs/data.md); empty: the MovieLens-100K demo.
DATASET ?=
# OVER_THE_GATE=1: publish it even when it loses to a baseline (recorded; docs/data.md).
OVER_THE_GATE ?=
# PROMOTE=1: serve the build now, where another model is served (docs/delivery.md).
PROMOTE ?=

.PHONY: help setup proto artifacts run test test-setup e2e-one-process test-fast lint bench clean debian-packages screenshots \
	compose-up compose-down compose-test k8s-check

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

# pip compiles every installed module as it installs (27 s of the 62 s, pyspark's
# most): where PYTHONDONTWRITEBYTECODE is set (this machine, CI) nothing is
# compiled later, and without it every process compiled its imports from
# source each start (a stack's start 16.3 s of CPU against 9.2).
$(VENV)/.installed: requirements/main.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements/main.txt
	touch $@

# Our packages live in the tree (libs/, apps/, services/, pipelines/) and gen/python.
$(VENV)/.paths: $(VENV)/.installed Makefile
	printf '%s\n' "$(CURDIR)" "$(CURDIR)/libs" "$(CURDIR)/apps" "$(CURDIR)/gen/python" \
		> "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/recserve-dev.pth"
	touch $@

# The Kubernetes manifests' checkers (kubernetes-validate, checkov): their own
# environment, so their pins cannot move requirements/main.txt's.
$(KVENV)/.installed: requirements/kubernetes.txt
	$(PYTHON) -m venv $(KVENV)
	$(KVENV)/bin/python -m pip install -q --upgrade pip
	$(KVENV)/bin/python -m pip install -q -r requirements/kubernetes.txt
	touch $@

$(TVENV)/.installed: requirements/triton.txt
	$(PYTHON) -m venv $(TVENV)
	$(TVENV)/bin/python -m pip install -q --upgrade pip
	$(TVENV)/bin/python -m pip install -q -r requirements/triton.txt
	touch $@

gen/.stamp: $(VENV)/.paths $(shell find protos third_party -name '*.proto') scripts/gen_protos.py
	$(PY) scripts/gen_protos.py
	touch $@

setup: $(VENV)/.paths $(TVENV)/.installed gen/.stamp $(VENV)/.client  ## environments, pinned packages, generated stubs

proto: gen/.stamp  ## Python stubs (.pyi too) and Envoy's descriptor set from protos/

artifacts: setup  ## data, models, indexes, Triton repository (skipped when up to date)
	$(PY) -m pipelines build --data-dir $(DATA)$(if $(DATASET), --dataset $(abspath $(DATASET)))$(if $(OVER_THE_GATE), --publish-over-the-gate)$(if $(PROMOTE), --promote)

run: artifacts  ## set everything up and serve the whole stack on 127.0.0.1 (DATASET=DIR DATA=DIR: yours)
	RECSERVE_STACK_DATA_DIR=$(abspath $(DATA)) $(PY) -m recserve_stack up$(if $(or $(DATASET),$(wildcard $(DATA)/dataset/dataset.yaml)),, --demo)

# redis-server for the Redis online-store tests, a Java runtime for Spark (the
# re-scoring job; these machines have Java 17), chromium for the explorer's
# browser test: the missing ones in one apt-get.
debian-packages:  ## Debian's redis-server, Java 17 and chromium, where missing
	@scripts/debian_packages.sh redis-server:redis-server java:openjdk-17-jre-headless:required \
		chromium:chromium

# The client libraries: the Python wheel (stubs generated from protos/ as it
# builds), installed into $(VENV) for the tests and the explorer; the
# TypeScript client from its locked npm packages; Playwright for the
# explorer's browser test (Debian's chromium: debian-packages).
CLIENT_WHEEL := build/clients/recserve_client-0.1.0-py3-none-any.whl
CLIENT_API := protos/recserve/recommend/v1/recommend.proto protos/recserve/recommend/v1/events.proto
.PHONY: clients explorer
$(CLIENT_WHEEL): $(VENV)/.paths $(CLIENT_API) $(shell find clients/python -name '*.py' -not -path '*/build/*') clients/python/pyproject.toml
	rm -rf build/clients clients/python/build
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w build/clients clients/python
$(VENV)/.client: $(CLIENT_WHEEL) $(VENV)/.installed
	$(PY) -m pip install -q --no-deps --force-reinstall $(CLIENT_WHEEL)
	touch $@
# After the client's install (order only): two pip installs into one
# environment at once can break it.
$(VENV)/.browser-test: $(VENV)/.installed clients/explorer/requirements-test.txt | $(VENV)/.client
	$(PY) -m pip install -q -r clients/explorer/requirements-test.txt -c requirements/main.txt
	touch $@
clients/typescript/dist/.stamp: $(CLIENT_API) clients/typescript/package-lock.json clients/typescript/buf.gen.yaml $(shell find clients/typescript/src clients/typescript/test -name '*.ts' -not -path '*/gen/*')
	cd clients/typescript && rm -rf dist src/gen && npm ci --no-audit --no-fund --loglevel=error && npm run -s build
	touch $@
clients: $(VENV)/.client $(VENV)/.browser-test clients/typescript/dist/.stamp  ## the Python wheel, the TypeScript client, Playwright for the explorer's test
explorer: artifacts $(VENV)/.client  ## the recommendation explorer on 127.0.0.1:8090, for the stack `make run` serves
	$(PY) clients/explorer/serve.py --data-dir $(DATA)

# The setup's independent parts at once (the environments, Debian's and npm's
# packages; the build once its environment is there), each part's output
# together: on a fresh machine the setup took 3.4 min one part at a time.
test:  ## set everything up and run every test
	$(MAKE) --no-print-directory -j4 --output-sync=target test-setup
	$(PY) -m pytest $(PYTEST_WORKERS) --durations=25 tests

test-setup: artifacts debian-packages $(KVENV)/.installed clients

# make test runs the e2e suite with each service its own process (as Compose
# and Kubernetes run them); this runs it against the request path in one
# process (the local runner's default on a small host). CI runs both.
e2e-one-process: artifacts  ## the e2e suite against the request path in one process
	RECSERVE_E2E_ONE_PROCESS=true $(PY) -m pytest $(PYTEST_WORKERS) tests/e2e

screenshots: artifacts clients debian-packages  ## refresh docs/img/explorer*.png from the explorer's browser test
	RECSERVE_SCREENSHOTS=$(CURDIR)/docs/img $(PY) -m pytest -q tests/clients/test_explorer_browser.py

test-fast: setup  ## unit tests only
	$(PY) -m pytest -q tests/unit

lint: setup  ## ruff, buf lint and breaking check, the layer contracts, mypy on libraries and services
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(BUF) lint
	@if git rev-parse -q --verify main >/dev/null && git cat-file -e main:buf.yaml 2>/dev/null; then \
		$(BUF) breaking --against '.git#branch=main'; fi
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy libs/recserve_kit libs/recserve_model libs/recserve_delivery libs/recserve_feast \
		libs/recserve_cli libs/recserve_data apps/recserve_stack services

k8s-check: setup $(KVENV)/.installed  ## render each Kubernetes overlay, validate it (1.30, 1.33), checkov, hold it to the code
	$(PY) -m pytest -q tests/kubernetes

compose-up: setup  ## the Compose stack here: Docker engine, stand-in bases, build, start, wait healthy (DATASET=DIR: yours)
	$(if $(DATASET),DATASET=$(abspath $(DATASET)) )infra/local/compose.sh up

compose-down:  ## remove the Compose stack (containers, network, volumes) and the engine it started
	infra/local/compose.sh down

compose-test: setup  ## compose-up, the e2e suite against it through Envoy on :8080, compose-down
	infra/local/compose.sh test

bench: artifacts  ## benchmarks; results go to docs/benchmarks.md by hand, with the command
	$(PY) -m bench --help

clean:  ## remove environments, generated code and data
	rm -rf $(VENV) $(TVENV) gen build $(DATA)
