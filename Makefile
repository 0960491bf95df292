# recserve: `make run` serves, `make test` proves it. Both set everything up.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
TVENV := .venv-triton
PY := $(VENV)/bin/python
BUF := npx --yes @bufbuild/buf@1.75.0
DATA ?= data

.PHONY: help setup proto artifacts run test test-fast lint bench clean redis-server java \
	compose-up compose-down compose-test

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

$(VENV)/.installed: requirements/main.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements/main.txt
	# Our packages live in the tree (libs/, services/, pipelines/) and gen/python.
	printf '%s\n' "$(CURDIR)" "$(CURDIR)/libs" "$(CURDIR)/gen/python" \
		> "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/recserve-dev.pth"
	touch $@

$(TVENV)/.installed: requirements/triton.txt
	$(PYTHON) -m venv $(TVENV)
	$(TVENV)/bin/python -m pip install -q --upgrade pip
	$(TVENV)/bin/python -m pip install -q -r requirements/triton.txt
	touch $@

gen/.stamp: $(VENV)/.installed $(shell find protos third_party -name '*.proto') scripts/gen_protos.py
	$(PY) scripts/gen_protos.py
	touch $@

setup: $(VENV)/.installed $(TVENV)/.installed gen/.stamp  ## environments, pinned packages, generated stubs

proto: gen/.stamp  ## Python stubs (.pyi too) and Envoy's descriptor set from protos/

artifacts: setup  ## data, models, indexes, Triton repository (skipped when up to date)
	$(PY) -m pipelines build --data-dir $(DATA)

run: artifacts  ## set everything up and serve the whole stack on 127.0.0.1
	RECSERVE_STACK_DATA_DIR=$(abspath $(DATA)) $(PY) -m recserve_stack up --demo

redis-server:  ## Debian's redis-server, for the Redis online-store tests
	@command -v redis-server >/dev/null || { (apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null 2>&1 \
		|| echo "redis-server could not be installed; the Redis tests will be skipped"; }

java:  ## a Java runtime for Spark (the re-scoring job); these machines have Java 17
	@command -v java >/dev/null || { (apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless) >/dev/null 2>&1 \
		|| { echo "no Java runtime and none could be installed; Spark needs Java 17"; exit 1; }; }

test: artifacts redis-server java  ## set everything up and run every test
	$(PY) -m pytest -q tests

test-fast: setup  ## unit tests only
	$(PY) -m pytest -q tests/unit

lint: setup  ## ruff, buf lint and breaking check, mypy on the kit
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(BUF) lint
	@if git rev-parse -q --verify main >/dev/null && git cat-file -e main:buf.yaml 2>/dev/null; then \
		$(BUF) breaking --against '.git#branch=main'; fi
	$(VENV)/bin/mypy libs/recserve_kit libs/recserve_stack

compose-up: setup  ## the Compose stack here: Docker engine, stand-in bases, build, start, wait healthy
	infra/local/compose.sh up

compose-down:  ## remove the Compose stack (containers, network, volumes) and the engine it started
	infra/local/compose.sh down

compose-test: setup  ## compose-up, the e2e suite against it through Envoy on :8080, compose-down
	infra/local/compose.sh test

bench: artifacts  ## benchmarks; results go to docs/benchmarks.md by hand, with the command
	$(PY) -m bench --help

clean:  ## remove environments, generated code and data
	rm -rf $(VENV) $(TVENV) gen build $(DATA)
