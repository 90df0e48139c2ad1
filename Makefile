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

.PHONY: help venv native native-clean lock chromium postgresql proto proto-check lint test demo demo-ha bench render certs clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

# pip runs as `python -m pip`: a venv left half-made (an interrupted first run) has pip in
# site-packages but no bin/pip, and `python -m venv` over it does not put the script back.
$(STAMP): pyproject.toml requirements-dev.lock
	@echo "==> make: creating the virtual environment in $(VENV) (first run only, a minute or two)"
	$(PYTHON) -m venv $(VENV)
	@echo "==> make: upgrading pip"
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "==> make: installing the locked dependencies from requirements-dev.lock (hashes checked: grpcio, opentelemetry, tree-sitter, pytest, mypy ...)"
	$(BIN)/python -m pip install --quiet -r requirements-dev.lock
	@echo "==> make: installing stockade itself (editable)"
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@echo "==> make: $(VENV) is ready"
	@touch $(STAMP)

venv: $(STAMP) ## Create .venv from the lock files and install stockade (editable)

# The bash analysis and path sandbox compiled to C by mypyc (PERF-4a; gcc and the Python
# headers are needed). Rebuilt whenever one of the executor's sources changes; the test
# suite refuses to start on extension modules older than their source.
# `make native-clean` returns to plain Python. The list is NATIVE_MODULES in native.py.
NATIVE_STAMP := build/native/.built
NATIVE_SOURCES := services/stockade/executor/native.py $(wildcard services/stockade/executor/*.c) $(addprefix services/,$(shell sed -n 's/^ *"\(stockade\/[a-z_/]*\.py\)",$$/\1/p' services/stockade/executor/native.py))
$(NATIVE_STAMP): $(STAMP) $(NATIVE_SOURCES) scripts/build_native.py
	@echo "==> make: compiling the bash analysis with mypyc (a minute or two; make native-clean undoes it)"
	$(BIN)/python scripts/build_native.py
	@touch $@

native: $(NATIVE_STAMP) ## Compile the bash analysis and path sandbox with mypyc (PERF-4a)

native-clean: ## Remove the compiled modules: the analysis runs as plain Python
	$(BIN)/python scripts/build_native.py --clean
	rm -f $(NATIVE_STAMP)

lock: $(STAMP) ## Re-resolve pyproject.toml into requirements*.lock, and the image's build tools into requirements-build.lock (with hashes)
	@echo "==> make: resolving the runtime dependencies into requirements.lock"
	$(BIN)/pip-compile --quiet --strip-extras --generate-hashes --allow-unsafe --no-emit-index-url --no-emit-find-links --output-file requirements.lock pyproject.toml
	@echo "==> make: resolving the runtime and dev dependencies into requirements-dev.lock"
	$(BIN)/pip-compile --quiet --strip-extras --generate-hashes --allow-unsafe --no-emit-index-url --no-emit-find-links --extra dev --output-file requirements-dev.lock pyproject.toml
	@echo "==> make: resolving the runtime dependencies and the ha-demo extra into requirements-ha-demo.lock"
	$(BIN)/pip-compile --quiet --strip-extras --generate-hashes --allow-unsafe --no-emit-index-url --no-emit-find-links --extra ha-demo --output-file requirements-ha-demo.lock pyproject.toml
	@echo "==> make: resolving the image builder's tools (hatchling, mypy, setuptools) into requirements-build.lock, at the dev lock's versions"
	$(BIN)/pip-compile --quiet --strip-extras --generate-hashes --allow-unsafe --no-emit-index-url --no-emit-find-links --output-file requirements-build.lock requirements-build.in

$(BUF):
	@echo "==> make: installing buf $(BUF_VERSION) (npm package @bufbuild/buf) into $(VENV)/buf"
	npm install --silent --no-save --no-audit --no-fund --prefix $(VENV)/buf @bufbuild/buf@$(BUF_VERSION)

CHROMIUM ?= /usr/bin/chromium
chromium: ## Install Debian's chromium (the console's browser tests drive it) when missing
	@test -x $(CHROMIUM) || { echo "installing Debian's chromium for the console's browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	  || { echo "could not install chromium: run 'apt-get install -y chromium' as root" >&2; exit 1; }

# Debian's PostgreSQL server: the stores' TLS tests run it (tests/pg_tls.py; pgserver's
# wheel has no SSL). Installed without a cluster (the tests make their own, throwaway).
PG_SERVER_GLOB ?= /usr/lib/postgresql/*/bin/postgres
PG_CREATECLUSTER_DIR ?= /etc/postgresql-common/createcluster.d
APT_GET ?= apt-get
postgresql: ## Install Debian's PostgreSQL server (the stores' TLS tests run it) when missing
	@ls $(PG_SERVER_GLOB) >/dev/null 2>&1 || { echo "installing Debian's postgresql for the stores' TLS tests (no cluster is created)"; \
	  mkdir -p $(PG_CREATECLUSTER_DIR) && echo "create_main_cluster = false" > $(PG_CREATECLUSTER_DIR)/stockade-tests.conf \
	  && $(APT_GET) update -qq && DEBIAN_FRONTEND=noninteractive $(APT_GET) install -y -qq postgresql >/dev/null; } \
	  || { echo "could not install postgresql: run 'apt-get install -y postgresql' as root" >&2; exit 1; }

proto: $(STAMP) ## Regenerate clients/stockade/v1 from protos/
	$(BIN)/python -m stockade.protogen --out clients

proto-check: $(STAMP) ## Fail when `make proto` would change the committed generated code
	$(BIN)/python -m stockade.protogen --check

lint: $(STAMP) $(BUF) ## ruff, mypy strict, import-linter contracts, buf lint and buf breaking (against main)
	$(BIN)/ruff check clients services tests scripts
	$(BIN)/ruff format --check clients services tests scripts
	$(BIN)/mypy clients/stockade services/stockade
	$(BIN)/lint-imports --no-cache
	$(BIN)/python scripts/check_lock.py
	$(BUF) lint
	@# Breaking-change check of the contract (FILE level: generated code of every language
	@# keeps compiling) against where this branch left main (its merge base), so a branch
	@# behind main is not blamed for main's newer changes. On main it is a no-op.
	@if base=$$(git merge-base HEAD main 2>/dev/null); then \
	  echo "$(BUF) breaking --against $$base (merge base with main)"; \
	  $(BUF) breaking --against "$$(git rev-parse --git-common-dir)#ref=$$base,subdir=protos"; \
	else echo "buf breaking: no local main branch to compare with, skipped"; fi

test: $(STAMP) $(NATIVE_STAMP) chromium postgresql lint proto-check ## Lint, generated-code check and the whole test suite
	$(BIN)/pytest -q

demo: $(STAMP) $(NATIVE_STAMP) ## Start all four services with embedded SQLite and run a scripted agent session
	$(BIN)/stockade demo

demo-ha: $(STAMP) ## The demo on two replicas of each stateful service sharing a throwaway PostgreSQL (installs the ha-demo extra)
	$(BIN)/python -m pip install --quiet -r requirements-ha-demo.lock
	$(BIN)/stockade demo --replicas 2 --state-dir .stockade/demo-ha

bench: $(STAMP) $(NATIVE_STAMP) ## Run tests/bench and write bench-results.json (figures as ratios)
	$(BIN)/python -m tests.bench

certs: $(STAMP) ## Create a dev CA, per-service mTLS certificates and grant keys in .stockade/certs
	$(BIN)/python -m stockade.devcerts --out .stockade/certs --services decision,executor,audit,agent,papers,console,postgres

render: $(STAMP) ## Render the Kubernetes overlays (and prod + each opt-in component) with kubectl kustomize
	@set -e; for o in deploy/k8s/overlays/*/; do echo "--- $$o"; kubectl kustomize "$$o" >/dev/null && echo ok; done
	@set -e; for c in postgres console executor-telemetry; do \
	  d=.stockade/render/$$c; mkdir -p $$d; echo "--- overlays/prod + components/$$c"; \
	  printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../../deploy/k8s/overlays/prod]\ncomponents: [../../../deploy/k8s/components/%s]\n' $$c > $$d/kustomization.yaml; \
	  kubectl kustomize $$d >/dev/null && echo ok; done

clean: ## Remove the venv and local state
	-$(BIN)/python scripts/build_native.py --clean
	rm -rf $(VENV) build/native .stockade .pytest_cache .mypy_cache .ruff_cache bench-results.json
