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
# The SAM CLI that `make rehearse` qualifies (build, package, the transforms, the stack on loopback):
# a new version is taken by changing this line and passing the rehearsal, not by the index moving.
SAM_CLI_VERSION := 1.170.0
SAM_STAMP := $(SAM_VENV)/.installed-$(SAM_CLI_VERSION)

# A first `make demo` prints one line per install step, not pip's resolver log or its "a new release
# of pip is available" banner (pip -q keeps warnings and errors).
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: venv sam-venv wheelhouse dist demo test test-fast lint format bench chaos build validate rehearse clean

# The layer's pins constrain this environment too: what the tests run is what the layer ships (a newer
# release of a pinned dependency on the index changes nothing until requirements.txt says so).
LAYER_PINS := layers/workerless/requirements.txt

# Two distributions, both editable: the runtime (layers/workerless: workerless, what the layer ships)
# and the devkit (devkit: workerless-devkit, the CLI, emulators, local mode, chaos, the pytest plugin),
# and the root pyproject.toml's dev dependency group (pytest, ruff, mypy, cfn-lint, ...).
$(STAMP): pyproject.toml layers/workerless/pyproject.toml layers/workerless/workerless/_version.py \
		devkit/pyproject.toml devkit/setup.py $(LAYER_PINS)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	@echo "make: installing workerless, its devkit and the test tools into $(VENV) (first run only, about a minute)"
	$(VENV)/bin/pip install -q -c $(LAYER_PINS) -e ./layers/workerless -e ./devkit --group dev
	touch $@

$(SAM_STAMP):
	@echo "make: installing SAM CLI $(SAM_CLI_VERSION) into $(SAM_VENV) (first run only)"
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install -q --upgrade pip
	$(SAM_VENV)/bin/pip install -q 'aws-sam-cli==$(SAM_CLI_VERSION)'
	touch $@

venv: $(STAMP)
sam-venv: $(SAM_STAMP)

# The distributions, as a release publishes them: the runtime (workerless) and the devkit
# (workerless-devkit), each a wheel and an sdist, in dist/.
dist: venv
	rm -rf dist
	$(PY) -m build --outdir dist layers/workerless
	$(PY) -m build --outdir dist devkit
	rm -rf layers/workerless/build devkit/build

# Every dependency of the two distributions as a wheel, at the layer's pins, and setuptools (their
# build backend): tests/functional/project/test_distributions.py builds both wheels and installs them into
# a fresh venv from here with pip --no-index, so the test itself needs no network. This target does
# (pip's cache makes it quick after `make venv`). The two distributions' own wheels are not kept here:
# the test builds its own.
WHEELHOUSE := .cache/wheelhouse
WHEELHOUSE_STAMP := $(WHEELHOUSE)/.complete
$(WHEELHOUSE_STAMP): $(STAMP)
	rm -rf $(WHEELHOUSE)
	@echo "make: collecting the distributions' dependencies as wheels into $(WHEELHOUSE) (first run only)"
	$(VENV)/bin/pip wheel -q -c $(LAYER_PINS) -w $(WHEELHOUSE) 'setuptools>=77' ./layers/workerless ./devkit
	rm -f $(WHEELHOUSE)/workerless-*.whl $(WHEELHOUSE)/workerless_devkit-*.whl
	touch $@
wheelhouse: $(WHEELHOUSE_STAMP)

demo: venv
	$(VENV)/bin/workerless demo

# Everything, slow tests included (the layer build, the pipeline and chaos runs, the docs' commands):
# under 15 minutes on 2 cores. The layer test needs a CPython 3.12 (found as layers/workerless/Makefile
# finds it) and installs the Lambda runtime's boto3 for it into .cache/ on first use.
# The pipeline tests spend most of their time waiting (leases, visibility timeouts, emulator clocks),
# not computing: pytest-xdist runs them in TEST_WORKERS processes, a whole file per worker (loadfile:
# a module whose one expensive run serves all its tests stays on one worker; loadgroup would be
# finer, but pytest 9.2 no longer honours its groups, pytest-dev/pytest-xdist#1386).
# TEST_WORKERS=0 runs everything in this process.
TEST_WORKERS ?= 4
PYTEST_PARALLEL = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
test: venv sam-venv wheelhouse
	WORKERLESS_SAM=$(abspath $(SAM)) $(PY) -m pytest -q $(PYTEST_PARALLEL)

# The inner loop: every test not marked slow (@pytest.mark.slow), in under two minutes on an idle
# 2-core machine. Run `make test` before you submit.
test-fast: venv sam-venv
	WORKERLESS_SAM=$(abspath $(SAM)) $(PY) -m pytest -q -m "not slow" $(PYTEST_PARALLEL)

# A benchmark, not a test (nothing in `make test` asserts on a time): writes bench/results.json,
# bench/RESULTS.md and bench/results.png in under 10 minutes. The plot needs matplotlib.
bench: venv
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
# python (no Docker), then compiles the layer's bytecode with a CPython 3.12, which it finds
# (python3.12 on PATH, pyenv's 3.12) or is given as PYTHON312=; it says so if there is none.
build: sam-venv
	PYTHON=$(abspath $(SAM_VENV))/bin/python $(SAM) build

# The deploy rehearsal (issue 25), all on loopback: `sam build` (into .cache/rehearsal/build, not
# .aws-sam), moto's server on 127.0.0.1, `sam package`, `sam deploy --no-execute-changeset` tried,
# AWS::LanguageExtensions (SAM CLI's) then AWS::Serverless (samtranslator), cfn-lint at each
# stage, two stacks side by side on moto's CloudFormation, what moto skips checked from the
# transformed template, every artifact checked. Writes the bundle to .cache/rehearsal/bundle.
# `make test` runs it too (tests/functional/devkit/rehearsal/test_deploy_rehearsal.py). REHEARSE_ARGS: see --help.
REHEARSE_ARGS ?=
# Then the demo's jobs of every example type run through each stack (local mode creates it from its
# bundle on its embedded CloudFormation, in the stack's region, and runs the uploaded code) against a
# Sheptra emulator: the first stack, then the second beside it.
rehearse: venv sam-venv
	WORKERLESS_SAM=$(abspath $(SAM)) $(PY) -m workerless_devkit.rehearsal --root . $(REHEARSE_ARGS)
	$(VENV)/bin/workerless demo --bundle .cache/rehearsal/bundle --jobs 6
	$(VENV)/bin/workerless demo --bundle .cache/rehearsal/bundle/others/workerless-rehearsal-b --jobs 3

# The long mixed chaos run (every fault on at once, hundreds of jobs per engine) and its figures;
# docs/guarantees.md quotes them. `make test` runs a CI-sized pass (tests/functional/test_chaos_*.py).
CHAOS_ARGS ?= --engine all --jobs 300 --seed 1
chaos: venv
	$(PY) -m workerless_devkit.chaos $(CHAOS_ARGS)

# Known vulnerabilities in what the layer ships to Lambda (layers/workerless/requirements.txt and
# what those pins pull in). pip-audit fetches the PyPI/OSV advisory database, so this needs the
# network: it is not part of `make test`. Its own environment keeps it out of the application's.
AUDIT_VENV := .venv-audit
.PHONY: audit
audit:
	$(PYTHON) -m venv $(AUDIT_VENV)
	$(AUDIT_VENV)/bin/pip install -q --upgrade pip pip-audit
	$(AUDIT_VENV)/bin/pip-audit --strict --progress-spinner off -r layers/workerless/requirements.txt

clean:
	rm -rf $(VENV) $(SAM_VENV) .aws-sam .pytest_cache .mypy_cache .ruff_cache .cache dist
