# Benchsite: `make demo` serves the site on embedded defaults; `make test` runs every check.
# Both create .venv and install the locked dependencies on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test lint lock clean-venv bench-api

$(STAMP): requirements/dev.lock.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements/dev.lock.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# The demo runs on SQLite and in-memory layers whatever the shell has set.
demo: $(STAMP)
	env -u DATABASE_URL -u REDIS_URL DEBUG=true $(BIN)/python manage.py migrate --noinput -v0
	env -u DATABASE_URL -u REDIS_URL DEBUG=true $(BIN)/python manage.py seed_demo
	env -u DATABASE_URL -u REDIS_URL DEBUG=true $(BIN)/python manage.py runserver 127.0.0.1:8000 --noreload

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# tests/service_env.py picks PostgreSQL and Redis on 127.0.0.1 when they answer; with CI=true
# it fails when they don't, otherwise it falls back to SQLite and skips the Redis tests.
test: lint
	eval "$$($(BIN)/python tests/service_env.py)" && $(BIN)/pytest $(PYTEST_ARGS)

bench-api: $(STAMP)
	eval "$$($(BIN)/python tests/service_env.py)" && $(BIN)/python benchmarks/api_latency.py

# Regenerate the lock files after changing pyproject.toml dependencies.
lock: $(STAMP)
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --python-version 3.11 --generate-hashes -q -o requirements/runtime.lock.txt
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 --generate-hashes -q -o requirements/dev.lock.txt

clean-venv:
	rm -rf $(VENV)
