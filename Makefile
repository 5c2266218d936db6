# workerless — every target installs what it needs itself (a fresh clone needs only python3).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# aws-sam-cli pins boto3[crt], click and pydantic: it lives in its own environment so the
# application's environment stays the one Lambda will have.
SAM_VENV := .venv-sam
SAM := $(SAM_VENV)/bin/sam
SAM_STAMP := $(SAM_VENV)/.installed

.PHONY: venv sam-venv demo test lint format bench chaos build validate clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[local,dev]'
	touch $@

$(SAM_STAMP):
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install -q --upgrade pip
	$(SAM_VENV)/bin/pip install -q 'aws-sam-cli>=1.120'
	touch $@

venv: $(STAMP)
sam-venv: $(SAM_STAMP)

demo: venv
	$(VENV)/bin/workerless demo

test: venv sam-venv
	WORKERLESS_SAM=$(abspath $(SAM)) $(PY) -m pytest -q

# A benchmark, not a test (nothing in `make test` asserts on a time): writes bench/results.json,
# bench/RESULTS.md and bench/results.png in under 10 minutes. The plot needs matplotlib.
bench: venv
	$(PY) -c 'import matplotlib' 2>/dev/null || $(VENV)/bin/pip install -q matplotlib
	$(PY) -m bench.run

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

validate: sam-venv
	$(SAM) validate --lint
	$(SAM) validate --region us-east-1

# The layer's Makefile runs pip for the Lambda platform (arm64, CPython 3.12) under .venv-sam's
# python: no Docker and no python3.12 needed on this machine.
build: sam-venv
	PYTHON=$(abspath $(SAM_VENV))/bin/python $(SAM) build

clean:
	rm -rf $(VENV) $(SAM_VENV) .aws-sam .pytest_cache .mypy_cache .ruff_cache
