# Stockade — run `make` to list the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# buf (protobuf lint and breaking-change checks) ships as a binary inside its npm package.
BUF_VERSION := 1.75.0
BUF := $(VENV)/buf/node_modules/.bin/buf

.PHONY: help venv proto proto-check lint test demo bench render certs clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@echo "==> make: creating the virtual environment in $(VENV) (first run only, about a minute)"
	$(PYTHON) -m venv $(VENV)
	@echo "==> make: upgrading pip"
	$(BIN)/pip install --quiet --upgrade pip
	@echo "==> make: installing stockade and its dev tools (grpcio, opentelemetry, tree-sitter, pytest, mypy ...)"
	$(BIN)/pip install --quiet -e '.[dev]'
	@echo "==> make: $(VENV) is ready"
	@touch $(STAMP)

venv: $(STAMP) ## Create .venv and install stockade with its dev extra

$(BUF):
	@echo "==> make: installing buf $(BUF_VERSION) (npm package @bufbuild/buf) into $(VENV)/buf"
	npm install --silent --no-save --no-audit --no-fund --prefix $(VENV)/buf @bufbuild/buf@$(BUF_VERSION)

proto: $(STAMP) ## Regenerate clients/stockade/v1 from protos/
	$(BIN)/python -m stockade.protogen --out clients

proto-check: $(STAMP) ## Fail when `make proto` would change the committed generated code
	$(BIN)/python -m stockade.protogen --check

lint: $(STAMP) $(BUF) ## ruff, mypy strict, and buf lint on the protos
	$(BIN)/ruff check clients services tests
	$(BIN)/ruff format --check clients services tests
	$(BIN)/mypy clients/stockade services/stockade
	$(BUF) lint

test: $(STAMP) lint proto-check ## Lint, generated-code check and the whole test suite
	$(BIN)/pytest -q

demo: $(STAMP) ## Start all four services with embedded SQLite and run a scripted agent session
	$(BIN)/stockade demo

bench: $(STAMP) ## Run tests/bench and write bench-results.json (figures as ratios)
	$(BIN)/python -m tests.bench

certs: $(STAMP) ## Create a dev CA, per-service mTLS certificates and grant keys in .stockade/certs
	$(BIN)/python -m stockade.devcerts --out .stockade/certs --services decision,executor,audit,agent,papers

render: $(STAMP) ## Render the Kubernetes overlays with kubectl kustomize
	@for o in deploy/k8s/overlays/*/; do echo "--- $$o"; kubectl kustomize "$$o" >/dev/null && echo ok; done

clean: ## Remove the venv and local state
	rm -rf $(VENV) .stockade .pytest_cache .mypy_cache .ruff_cache bench-results.json
