# Set-up and entry points. Every target installs what it needs first, idempotently:
# a second `make venv` is a no-op check of two stamp files (about a second).
.DEFAULT_GOAL := help
SHELL := /bin/bash

UV_VERSION := 0.13.9
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
STAMP := $(VENV)/.synced
WORKDIR ?= work
PYTEST_ARGS ?=

# Python 3.10 for the TFX runtime: on PATH if it really runs (a pyenv shim may not), else
# the usual pyenv and system locations. Override with `make PYTHON310=/path/to/python3.10`.
PYTHON310 ?= $(shell for p in python3.10 $$HOME/.pyenv/versions/3.10*/bin/python3.10 \
	/root/.pyenv/versions/3.10*/bin/python3.10 /usr/local/bin/python3.10 /usr/bin/python3.10; do \
	"$$p" -c 'import sys; assert sys.version_info[:2] == (3, 10)' >/dev/null 2>&1 && { echo "$$p"; break; }; done)

.PHONY: help venv demo test lock clean

help:
	@echo "make demo   set up the TFX runtime if missing, then run the taxi pipeline on the embedded data"
	@echo "make test   set up the TFX runtime if missing, then run the whole test suite"
	@echo "make venv   only set up the TFX runtime (.venv, Python 3.10, pinned by requirements/tfx.lock)"
	@echo "make lock   re-resolve requirements/tfx.lock from requirements/tfx.in"

$(UV):
	python3 -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(STAMP): requirements/tfx.lock setup.py | $(UV)
	@if [ -z "$(PYTHON310)" ]; then \
	  echo "error: Python 3.10 not found (TFX 1.16 needs it). Install it (e.g. 'pyenv install 3.10') or pass PYTHON310=/path/to/python3.10" >&2; \
	  exit 1; fi
	@[ -x $(VENV)/bin/python ] || $(UV) venv --quiet --python "$(PYTHON310)" $(VENV)
	VIRTUAL_ENV=$(VENV) $(UV) pip sync --quiet requirements/tfx.lock
	VIRTUAL_ENV=$(VENV) $(UV) pip install --quiet --no-deps -e .
	@touch $(STAMP)

venv: $(STAMP)

demo: venv
	$(VENV)/bin/retrain run --workdir $(WORKDIR)

test: venv
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

lock: | $(UV)
	$(UV) pip compile --quiet --python-version 3.10 requirements/tfx.in -o requirements/tfx.lock

clean:
	rm -rf $(VENV) $(TOOLS) $(WORKDIR) .pytest_cache
