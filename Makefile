# Set-up and entry points. Every target installs what it needs first, idempotently:
# a second `make venv` is a no-op check of two stamp files (about a second).
.DEFAULT_GOAL := help
SHELL := /bin/bash
# A recipe's pipeline fails if any command in it does (the test suites pipe through sed).
.SHELLFLAGS := -o pipefail -c

# One uv version for the host's tools and the runtime's own set-up (runtime/install.sh).
UV_VERSION := $(shell sed -n 's/^UV_VERSION=//p' runtime/install.sh)
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
STAMP := $(VENV)/.synced
AF_VENV := .venv-airflow
AF_STAMP := $(AF_VENV)/.synced
# One DAG template per pipeline package (retrain new adds packages).
TEMPLATES := $(patsubst pipelines/%/config.yaml,dags/compiled/%.json,$(wildcard pipelines/*/config.yaml))
PIPELINE_SOURCES := $(shell find pipelines components -name '*.py' -o -name '*.yaml' 2>/dev/null)
WORKDIR ?= work
# The slowest tests are listed at the end of each suite, so the time budget stays visible in CI logs.
PYTEST_ARGS ?= --durations=15

# The TFX runtime (TFX 1.21, TensorFlow 2.21, Python 3.13) is a plain venv where the host's
# glibc is 2.39+ and a Python 3.13 runs, else the same venv inside a Debian 13 root made with
# debootstrap (runtime/kind.sh decides and says why; RETRAIN_RUNTIME=native|root overrides).
# Either way `.venv/bin/python` is the way in: in a root it is runtime/python.sh, which enters it.
RUNTIME_ROOT := .runtime/debian13
RUNTIME_FILES := $(wildcard runtime/*.sh) runtime/packages.txt

PHONY_RUNTIME := runtime-test-packages lock-tfx
.PHONY: $(PHONY_RUNTIME) help venv airflow-venv compile demo rollout-demo run-local test test-tfx test-e2e system-packages test-tfx-lane2 test-shuffled test-lane2 test-airflow airflow airflow-stop \
	airflow-cluster airflow-cluster-stop services services-stop lock clean docs docs-venv

help:
	@echo "make demo          set up what is missing, then run the taxi DAG once through Airflow on the embedded data"
	@echo "make test          set up what is missing, then run the whole test suite (TFX and Airflow sides)"
	@echo "make run-local     the same pipeline with the local runner: retrain run"
	@echo "make airflow       start Airflow 3 (UI on http://127.0.0.1:8080) in its own process group"
	@echo "make airflow-stop  stop it, every process it started"
	@echo "make airflow-cluster       Airflow as teams run it: PostgreSQL, CeleryExecutor + Redis, 2 workers, MLMD on MariaDB"
	@echo "make airflow-cluster-stop  stop every process it started, the database servers too"
	@echo "make compile       recompile the DAG templates dags/compiled/*.json from the pipeline code"
	@echo "make venv / airflow-venv   only set up the TFX runtime (.venv) / the Airflow control plane (.venv-airflow)"
	@echo "make lock          re-resolve requirements/*.lock from requirements/*.in"

# Bytecode for every installed module, at set-up: uv leaves it to the first import, which
# cannot cache it where PYTHONDONTWRITEBYTECODE is set (as on these machines) or
# site-packages is read-only, so every process compiled TensorFlow's, TFX's and Beam's
# sources again: 10.8 s of a steady taxi run, 15.4 -> 6.1 s to import the node runner.
compile_bytecode = $(1)/bin/python -m compileall -q -j 0 "$$($(1)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null

$(UV):
	python3 -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(STAMP): requirements/tfx.lock requirements/tfx-nodeps.txt setup.py $(RUNTIME_FILES) | $(UV)
	@mkdir -p .runtime; choice="$$(runtime/kind.sh)" || exit 1; read -r kind python <<< "$$choice"; \
	echo "$$kind" > .runtime/kind; \
	if [ "$$kind" = root ]; then \
	  runtime/root.sh $(RUNTIME_ROOT) && \
	  runtime/enter.sh $(RUNTIME_ROOT) env UV=$(abspath $(UV)) PYTHON=/usr/bin/python3.13 \
	    runtime/install.sh venv $(abspath $(VENV)) && \
	  ln -sfn /usr/bin/python3.13 $(VENV)/bin/python3.13 && ln -sfn python $(VENV)/bin/python3 && \
	  sed -e 's|@ENTER@|$(abspath runtime/enter.sh)|' -e 's|@ROOT@|$(abspath $(RUNTIME_ROOT))|' \
	    runtime/python.sh > $(VENV)/bin/python.new && chmod +x $(VENV)/bin/python.new && \
	  mv -f $(VENV)/bin/python.new $(VENV)/bin/python; \
	else \
	  { [ ! -e $(VENV)/bin/python ] || [ -L $(VENV)/bin/python ] || rm -rf $(VENV); } && \
	  UV=$(abspath $(UV)) PYTHON="$$python" runtime/install.sh venv $(abspath $(VENV)); \
	fi
	@$(VENV)/bin/python -c 'import sys, tfx, tensorflow as tf, apache_beam as beam; \
	  print(f"runtime: TFX {tfx.__version__}, TensorFlow {tf.__version__}, Beam {beam.__version__}, Python {sys.version.split()[0]} ready in $(VENV) ({sys.argv[1]})")' \
	  "$$(cat .runtime/kind)" 2>/dev/null
	@touch $(STAMP)

venv: $(STAMP)

# The Airflow control plane: the default python3 (3.11), its own lock; never shares
# packages with the TFX runtime. Our package goes in too, for airflow_tfx (no TFX imports).
$(AF_STAMP): requirements/airflow.lock setup.py | $(UV)
	@[ -x $(AF_VENV)/bin/python ] || $(UV) venv --quiet --python "$$(command -v python3)" $(AF_VENV)
	VIRTUAL_ENV=$(AF_VENV) $(UV) pip sync --quiet requirements/airflow.lock
	VIRTUAL_ENV=$(AF_VENV) $(UV) pip install --quiet --no-deps -e .
	$(call compile_bytecode,$(AF_VENV))
	@touch $(AF_STAMP)

airflow-venv: $(AF_STAMP)

# Recompiled whenever the pipeline code changes; DAG parsing refuses a stale template. A
# template newer in content than in time (a fresh clone's checkout order) whose fingerprint
# matches the code is only touched: a compile is a cold TFX process (~12 CPU-s each).
dags/compiled/%.json: $(PIPELINE_SOURCES) | $(STAMP)
	@if $(VENV)/bin/python -m airflow_tfx.compiled_dag --fresh $@; then \
	  touch $@; echo "$@ is current (its fingerprint matches the pipeline code)"; \
	else \
	  echo "$(VENV)/bin/retrain compile --config pipelines/$*/config.yaml --out $@"; \
	  $(VENV)/bin/retrain compile --config pipelines/$*/config.yaml --out $@; \
	fi

compile: $(TEMPLATES)

demo: venv airflow-venv $(TEMPLATES)
	RETRAIN_WORKDIR=$(abspath $(WORKDIR)) scripts/airflow.sh demo

# A good canary promoted and a bad one rolled back from delayed labels (docs/rollout.md),
# through Airflow (its grid), the governance report and MLMD, on the embedded taxi data.
rollout-demo: venv airflow-venv $(TEMPLATES)
	$(VENV)/bin/python -m runner.rollout_demo --workdir $(abspath $(WORKDIR))/rollout-demo --fresh

run-local: venv
	$(VENV)/bin/retrain run --workdir $(WORKDIR)

airflow: venv airflow-venv $(TEMPLATES)
	RETRAIN_WORKDIR=$(abspath $(WORKDIR)) scripts/airflow.sh start

airflow-stop:
	scripts/airflow.sh stop

airflow-cluster: venv airflow-venv $(TEMPLATES)
	RETRAIN_WORKDIR=$(abspath $(WORKDIR)) scripts/airflow.sh cluster-start

airflow-cluster-stop:
	scripts/airflow.sh cluster-stop

# MariaDB (ML Metadata), PostgreSQL (Airflow's DB), Redis (Celery broker): Debian's packages,
# own data dirs under .services/, loopback ports; installed on first use.
services:
	scripts/services.sh start

services-stop:
	scripts/services.sh stop

# Set-up first, in parallel: the three environments build while Debian's packages (chromium,
# the database servers) install in one apt-get call; then the DAG templates.
# The suites then run in three lanes (their lines prefixed [tfx], [e2e], [airflow] / [tfx-2]):
# the end-to-end pipeline runs; the other TFX tests; the Airflow suite followed by the TFX
# tests of the server and the span scaler. Measured (4f94cb2, vmstat): the two cores are
# ~95% busy throughout, so the lanes share the CPU rather than add to it; three lanes end
# closer together than two (40:25 wall vs 38:55 for two lanes at eabe423, same CPU work).
# The database servers (MariaDB for ML Metadata, PostgreSQL and Redis for the Airflow
# cluster) start first and stop after, whatever the result.
test:
	$(MAKE) --no-print-directory -j4 venv airflow-venv docs-venv system-packages runtime-test-packages
	$(MAKE) --no-print-directory -j2 $(TEMPLATES)
	scripts/services.sh start
	$(MAKE) --no-print-directory -j3 test-tfx test-e2e test-lane2; rc=$$?; scripts/services.sh stop; exit $$rc

system-packages:
	scripts/services.sh packages chromium /usr/bin/chromium

# The TFX-side tests render a report in Chromium and make MariaDB databases for ML Metadata
# (the host's server, through its socket in .services/): a runtime in a Debian 13 root needs
# its own Chromium and MariaDB client, and make (the docs test builds the site as `make docs` does).
runtime-test-packages: venv
	@if [ "$$(cat .runtime/kind)" = root ]; then \
	  runtime/enter.sh $(RUNTIME_ROOT) runtime/install.sh system chromium mariadb-client make; fi

# Lanes balanced on a clean clone's durations (783ede9: e2e 1,233 s; other TFX 1,352 s; Airflow
# 1,110 s then task hosting and serving 225 s; the portable runner's run 79 s and rollout 30 s
# moved from the last lane to e2e, which ended two minutes before the others). At a5e6bd5 the
# other TFX tests ended 140 s before Airflow + task hosting + serving (705 s against 727 + 118 s,
# 15.1 min wall): task hosting (its warm-vs-cold runs, 84 s) moved to them. At cca8139 the toolkit's
# jobs had become 86 s cheaper: e2e 877 s, other TFX 777 s, Airflow + serving 747 + 47 s; the
# portable runner (58 s) joined the other TFX tests and the span scaler (23 s) the last lane.
TFX_E2E := tests/e2e tests/governance tests/rollout
TFX_LANE2 := tests/serving tests/runner/test_scale_spans.py

test-tfx: venv /usr/bin/chromium
	$(VENV)/bin/python -m pytest tests --ignore=tests/airflow_tfx --ignore=tests/dags --ignore=tests/runtime \
	  $(addprefix --ignore=,$(TFX_E2E) $(TFX_LANE2)) $(PYTEST_ARGS) 2>&1 | sed -u 's/^/[tfx] /'

test-e2e: venv /usr/bin/chromium
	$(VENV)/bin/python -m pytest $(TFX_E2E) $(PYTEST_ARGS) 2>&1 | sed -u 's/^/[e2e] /'

# The quick tests (not slow, not e2e) in a random order, to prove none depends on another
# having run first: `make test-shuffled SEED=7` replays an order.
SEED ?= $(shell date +%s)
test-shuffled: venv
	$(VENV)/bin/python -m pytest tests --ignore=tests/airflow_tfx --ignore=tests/dags --ignore=tests/runtime -m "not slow and not e2e" \
	  --shuffle $(SEED) -q -p no:cacheprovider

test-tfx-lane2: venv
	$(VENV)/bin/python -m pytest $(TFX_LANE2) $(PYTEST_ARGS) 2>&1 | sed -u 's/^/[tfx-2] /'

test-lane2: venv airflow-venv $(TEMPLATES) /usr/bin/chromium
	rc=0; $(MAKE) --no-print-directory test-airflow || rc=$$?; \
	  $(MAKE) --no-print-directory test-tfx-lane2 || rc=$$?; exit $$rc


# Headless Chromium for the browser checks (Airflow UI, governance report): Debian's package; needs root, as CI has.
/usr/bin/chromium:
	@[ "$$(id -u)" = 0 ] || { echo "error: install Debian's chromium (apt-get install chromium) for the browser test" >&2; exit 1; }
	scripts/services.sh install chromium /usr/bin/chromium

test-airflow: venv airflow-venv $(TEMPLATES) /usr/bin/chromium
	AIRFLOW_HOME=$$(mktemp -d) $(AF_VENV)/bin/python -m pytest tests/airflow_tfx tests/dags tests/runtime $(PYTEST_ARGS) 2>&1 | sed -u 's/^/[airflow] /'


lock: lock-tfx | $(UV)
	$(UV) pip compile --quiet --python-version 3.11 requirements/airflow.in -o requirements/airflow.lock

# Only the TFX runtime's locks (the Airflow lock moves on its own schedule). Resolved for the
# runtime's Python and platform whatever the host is; --python names the host's interpreter for
# building an sdist's metadata (uv would otherwise pick .venv's, which may live in the root).
LOCK_TFX := $(UV) pip compile --quiet --custom-compile-command "make lock-tfx" --python "$$(command -v python3)" --python-version 3.13 --python-platform x86_64-manylinux_2_39
lock-tfx: | $(UV)
	$(LOCK_TFX) requirements/tfx.in -o requirements/tfx.lock
	$(LOCK_TFX) requirements/tfx-gpu.in -o requirements/tfx-gpu.lock

clean:
	rm -rf $(VENV) $(AF_VENV) $(TOOLS) $(WORKDIR) .runtime .airflow .pytest_cache

# The docs site (mkdocs, Material theme) in its own small environment: the reference pages
# are generated from the code first (scripts/docs_reference.py: the CLI's parser, the typed
# config), then the site is built in strict mode, so a broken link or page fails the build.
DOCS_VENV := .venv-docs
DOCS_STAMP := $(DOCS_VENV)/.synced

$(DOCS_STAMP): requirements/docs.lock | $(UV)
	@[ -x $(DOCS_VENV)/bin/python ] || $(UV) venv --quiet --python python3 $(DOCS_VENV)
	VIRTUAL_ENV=$(DOCS_VENV) $(UV) pip sync --quiet requirements/docs.lock
	@touch $(DOCS_STAMP)

docs-venv: $(DOCS_STAMP)

docs: venv docs-venv
	$(VENV)/bin/python scripts/docs_reference.py docs/reference
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict 2>&1 | { grep -v "^INFO" || true; }
	@echo "docs: site/index.html"
