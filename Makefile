# Stepwise: every target bootstraps its own environment from the hash-locked requirements.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
SAM_VENV := .venv-sam
# checkov pins a dependency tree of its own (like the SAM CLI), so it gets its own venv too.
CHECKOV_VENV := .venv-checkov
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
STAMP := $(VENV)/.installed
# The approval page is tested in a real browser: Debian's chromium (no browser download at test time).
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SAM_STAMP := $(SAM_VENV)/.installed
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
# AWS SDKs need a region and credentials to build clients; locally everything is moto, so fake ones.
export AWS_DEFAULT_REGION ?= us-east-1
export LITELLM_LOCAL_MODEL_COST_MAP := True
# SAM CLI would try to send telemetry to AWS; nothing leaves this machine.
export SAM_CLI_TELEMETRY := 0

.PHONY: help run test unit integration e2e contract lint bench lock clean postgres mariadb nodejs conformance sdk-sync

help:
	@echo "make run    start the local stack on 127.0.0.1:$${PORT:-3000}"
	@echo "make test   lint, contract checks and all tests"
	@echo "make lint   ruff and mypy"
	@echo "make sdk-sync  regenerate the SDK's sync client from its async one"
	@echo "make conformance  the MCP conformance suite against Stepwise's MCP client"
	@echo "make bench  benchmarks (figures printed and saved under bench/results)"

# The SDK (sdk/python) is installed like the main package: editable, no deps (httpx and pydantic are in
# main.lock); the CLI is built on it. Installed packages are compiled to bytecode once, here: machines
# that set PYTHONDONTWRITEBYTECODE (ours do) would otherwise compile moto, botocore and litellm from
# source in every process the tests start (about 20 s of CPU each). The benches that measure imports as
# Lambda loads them copy sources without bytecode (bench/import_trees.py), so they are not warmed.
$(STAMP): requirements/main.lock requirements/bootstrap.lock pyproject.toml sdk/python/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements/bootstrap.lock
	$(UV) pip sync --quiet --python $(PY) --require-hashes --compile-bytecode requirements/main.lock
	$(UV) pip install --quiet --python $(PY) --no-deps --no-build-isolation -e .
	$(UV) pip install --quiet --python $(PY) --no-deps --no-build-isolation -e sdk/python
	@touch $@

$(SAM_STAMP): requirements/sam.lock requirements/bootstrap.lock
	@test -x $(SAM_VENV)/bin/python || $(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements/bootstrap.lock
	$(SAM_VENV)/bin/uv pip sync --quiet --python $(SAM_VENV)/bin/python --require-hashes --compile-bytecode requirements/sam.lock
	@touch $@

$(CHECKOV_STAMP): requirements/checkov.lock requirements/bootstrap.lock
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements/bootstrap.lock
	$(CHECKOV_VENV)/bin/uv pip sync --quiet --python $(CHECKOV_VENV)/bin/python --require-hashes --compile-bytecode requirements/checkov.lock
	@touch $@

$(CHROMIUM):
	$(SUDO) apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null

# The database tools are tested against a real PostgreSQL that the tests start in a temporary directory
# (tests/fakes/postgres.py): initdb and pg_ctl on PATH, else Debian's postgresql, installed when missing.
postgres:
	@command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 \
		|| ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
		|| { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql >/dev/null; }

# The MySQL flavour of the database tools is tested against a real MariaDB (tests/fakes/mysql.py):
# mariadb-install-db and mariadbd, Debian's mariadb-server, installed when missing (about a minute).
mariadb:
	@command -v mariadb-install-db >/dev/null 2>&1 && { command -v mariadbd >/dev/null 2>&1 || test -x /usr/sbin/mariadbd; } \
		|| { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq mariadb-server >/dev/null; }

# JavaScript code tools are tested in a sandbox on loopback that runs them with node
# (tests/fakes/sandbox.py): node on PATH, else Debian's nodejs, installed when missing.
nodejs:
	@command -v node >/dev/null 2>&1 \
		|| { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq nodejs >/dev/null; }

# The official MCP conformance suite runs against Stepwise's MCP client (tests/conformance): pinned with
# its lockfile, installed from the npm registry when missing or stale. It needs Node 22, which the lock
# brings as an npm package too (Linux x64 and arm64), so the machine's node only has to run npm.
CONFORMANCE_STAMP := tests/conformance/node_modules/.installed
$(CONFORMANCE_STAMP): tests/conformance/package.json tests/conformance/package-lock.json
	npm ci --prefix tests/conformance --no-audit --no-fund --loglevel=error
	@touch $@

conformance: $(STAMP) $(CONFORMANCE_STAMP)
	$(PY) -m pytest tests/conformance

run: $(STAMP)
	$(PY) -m stepwise_local

# Every core runs tests (pytest-xdist); a module's tests stay on one worker (loadscope), so a module's
# fixtures (a served stack, a browser) start once. Lint and the contract checks run beside the tests,
# not before them: the integration tests spend much of their time waiting on the stack (executions,
# polls, fake servers), and the checks fill those idle cores instead of adding their own time. Each
# target's output is printed whole when it ends (--output-sync); any failure fails `make test`.
test: $(STAMP) $(SAM_STAMP) $(CHECKOV_STAMP) $(CHROMIUM) postgres mariadb nodejs $(CONFORMANCE_STAMP)
	@$(MAKE) --no-print-directory -j3 --output-sync=target lint contract pytest-all

# One worker more than cores: much of an integration test's time is spent waiting on the local stack
# (executions, polls, fake servers), and the extra worker fills it.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))

# Our own sources are compiled first for the same reason as the packages (a second or two, in parallel;
# __pycache__ is ignored by git, packaging and the import benches). A worker that dies (a segfault) ends
# the run at once, red, with its threads' stacks: xdist 3.8's loadscope scheduler re-queues a dead
# worker's finished modules as empty units and can then wait forever (pytest-xdist#1378, one CI run
# waited out its 90 minutes), and it would re-run the test the worker died on besides.
.PHONY: pytest-all
pytest-all: $(STAMP)
	$(PY) -m compileall -q -j0 shared dev sdk/python/src
	$(PY) -m pytest tests -n $(TEST_WORKERS) --dist loadscope --max-worker-restart 0

unit: $(STAMP)
	$(PY) -m pytest tests/unit

integration: $(STAMP) postgres mariadb nodejs $(CONFORMANCE_STAMP)
	$(PY) -m pytest tests/integration

e2e: $(STAMP) $(CHROMIUM) postgres
	$(PY) -m pytest tests/e2e

contract: $(STAMP) $(SAM_STAMP) $(CHECKOV_STAMP)
	$(VENV)/bin/cfn-lint template.yaml
	$(SAM_VENV)/bin/sam validate --lint --template-file template.yaml --region $(AWS_DEFAULT_REGION)
	$(SAM_VENV)/bin/python tests/contract/transformed_lint.py template.yaml
	# Accepted exceptions, each with its reason, are in .checkov.yaml; any other failed check fails here.
	$(CHECKOV_VENV)/bin/checkov --config-file .checkov.yaml -f template.yaml

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) -m bench

# The SDK's sync client is generated from the async one (standard library only, so no venv needed);
# tests/unit/test_sdk_generated.py fails when the committed file is stale.
sdk-sync:
	$(PYTHON) sdk/python/scripts/generate_sync.py

# Re-resolve the pins after editing requirements/*.in (needs the bootstrap venv).
lock: $(STAMP)
	$(UV) pip compile requirements/main.in --python-version 3.11 --generate-hashes -o requirements/main.lock
	$(UV) pip compile requirements/sam.in --python-version 3.11 --generate-hashes -o requirements/sam.lock
	$(UV) pip compile requirements/checkov.in --python-version 3.11 --generate-hashes -o requirements/checkov.lock
	$(UV) pip compile requirements/bootstrap.in --python-version 3.11 --generate-hashes -o requirements/bootstrap.lock

clean:
	rm -rf $(VENV) $(SAM_VENV) $(CHECKOV_VENV) .mypy_cache .ruff_cache .pytest_cache .aws-sam

# Lambda artifacts for python3.12 on arm64 in dist/, cross-installed from the lock's hashes, trimmed,
# checked and sized against the 250 MiB limit (packaging/README.md), with the 3.12 bytecode of what
# the functions load when a Python 3.12 is here (PYTHON312=/path/to/python3.12 names one). VERIFY=0
# skips re-checking the trim rules on an x86_64 copy (~55 s).
VERIFY ?= 1
.PHONY: package
package: $(STAMP) $(SAM_STAMP)
	$(PY) packaging/build.py $(if $(filter 1,$(VERIFY)),--verify)
	$(SAM_VENV)/bin/sam validate --lint --template-file dist/template.json --region $(AWS_DEFAULT_REGION)
	$(SAM_VENV)/bin/python packaging/sam_package_check.py dist/template.json
	@echo 'deploy: $(SAM_VENV)/bin/sam deploy --template-file dist/template.json --config-file "$$PWD/samconfig.toml"'
