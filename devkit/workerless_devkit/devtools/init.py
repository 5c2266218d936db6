"""`workerless init DIR`: a new SAM application that uses workerless, in a directory of its own.

The application is this repository's shape cut down to one job type: template.yaml (this
repository's, with its own route in the job-type list and Mappings.Routes; the route loop makes its
SSM route parameter),
samconfig.toml, functions/ (the library's poller, heartbeat and dead-letter entry points and the
example handler), layers/workerless (the runtime, copied from the checkout ``init`` runs from: the
layer ``sam build`` ships and the package the application's venv installs), devkit/ (the CLI,
emulators and local mode, installed beside it for development), events/, tests/ for its handlers
only, a pyproject.toml (its test tools and settings), a Makefile (demo, test, build) and a README.
Nothing of this repository's framework test suite goes with it.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from workerless_devkit.devtools.scaffold import ScaffoldError, planned_files, stem, validate_job_type, with_job_types

#: The library's own functions, copied as they are.
LIBRARY_FUNCTIONS = ("poller", "heartbeat", "deadletter")
#: What of layers/workerless the application needs (no build output, no caches).
_LAYER_IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc", ".pytest_cache", ".mypy_cache")
_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")


@dataclass(frozen=True)
class Application:
    directory: Path
    job_type: str
    files: list[Path]


def source_checkout() -> Path:
    """The workerless checkout this library runs from: the directory holding template.yaml and
    layers/workerless. ``init`` copies from it, so it needs one (an editable install)."""
    import workerless

    root = Path(workerless.__file__).resolve().parents[3]
    if not (root / "template.yaml").is_file() or not (root / "layers" / "workerless" / "Makefile").is_file():
        raise ScaffoldError(
            f"workerless init copies from a workerless checkout, and {root} is not one "
            "(no template.yaml beside layers/workerless): run it from the repository's .venv",
            key="init",
        )
    return root


def application_template(text: str, job_type: str) -> str:
    """The checkout's template.yaml with ``job_type`` as its one route (the routes list, and its
    Mappings.Routes line: every per-route setting, MaxInFlight and EngineQueue included, lives there)."""
    text = with_job_types(text, [job_type])
    line = f"{stem(job_type)}: {{Type: {job_type}}}"
    if line not in text:
        raise ScaffoldError("the checkout's template.yaml has no Mappings.Routes line for the route", key="init")
    # The defaults written out, to show where a route's settings go.
    return text.replace(line, f"{stem(job_type)}: {{Type: {job_type}, MemorySize: 256}}", 1)


def _pyproject(name: str, checkout: Path) -> str:
    """The application's pyproject.toml: its test tools (the checkout's pytest pins) and settings.
    The runtime (layers/workerless) and the devkit (devkit/) bring their own."""
    groups = tomllib.loads((checkout / "pyproject.toml").read_text(encoding="utf-8"))["dependency-groups"]
    dev = [d for d in groups["dev"] if d.split(">")[0].split("[")[0] in ("pytest", "pytest-timeout")]
    items = "".join(f'  "{value}",\n' for value in dev)
    return f"""# {name}: a workerless application. `make venv` installs the runtime (layers/workerless, what the
# layer `sam build` ships), the devkit (devkit/: CLI, emulators, local mode) and the group below.
[dependency-groups]
dev = [
{items}]

[tool.pytest.ini_options]
testpaths = ["tests"]
addopts = "-ra --strict-markers"
filterwarnings = ["error"]
"""


MAKEFILE = """\
# Every target installs what it needs itself (a fresh machine needs only python3 and, for
# `make build`, a CPython 3.12 to compile the layer's bytecode).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# aws-sam-cli pins its own boto3, click and pydantic: it lives in an environment of its own. Point
# SAM_VENV at an existing one to share it.
SAM_VENV ?= .venv-sam
SAM := $(SAM_VENV)/bin/sam

# pip -q and no version banner: a first `make demo` prints its steps, not pip's log.
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: venv sam-venv demo test build validate

$(STAMP): pyproject.toml layers/workerless/pyproject.toml devkit/pyproject.toml layers/workerless/requirements.txt
\t$(PYTHON) -m venv $(VENV)
\t$(VENV)/bin/pip install -q --upgrade pip
\t$(VENV)/bin/pip install -q -c layers/workerless/requirements.txt -e ./layers/workerless -e ./devkit --group dev
\ttouch $@

$(SAM_VENV)/.installed:
\t$(PYTHON) -m venv $(SAM_VENV)
\t$(SAM_VENV)/bin/pip install -q --upgrade pip
\t$(SAM_VENV)/bin/pip install -q 'aws-sam-cli>=1.160'
\ttouch $@

venv: $(STAMP)
sam-venv: $(SAM_VENV)/.installed

# The whole pipeline on this machine: an engine emulator, the template's topology, a few jobs of
# each job type.
demo: venv
\t$(VENV)/bin/workerless demo

test: venv
\t$(PY) -m pytest -q

# The layer's Makefile runs pip for the Lambda platform (arm64, CPython 3.12) without Docker.
build: sam-venv
\tPYTHON=$(abspath $(SAM_VENV))/bin/python $(SAM) build

validate: sam-venv
\t$(SAM) validate --lint
"""


#: The application's .gitignore: the engine's connection values (.env, and the emulator's
#: emulator.env: `workerless emulate --env-out`) are secrets, as are any other env files.
_GITIGNORE = """.venv/
.venv-sam/
.aws-sam/
.cache/
__pycache__/
*.egg-info/
# engine connection values (the docs put a real engine's in .env): never committed
.env
*.env
"""


def _readme(name: str, job_type: str) -> str:
    return f"""# {name}

A workerless application: workflow-engine jobs (Sheptra, node-flow, StageNext) run by AWS Lambda
functions. Created by `workerless init`.

```
template.yaml           the SAM application: one route (queues, role, function) per job type
functions/{stem(job_type)}/   the example handler ({job_type} jobs); poller, heartbeat, deadletter are the library's
layers/workerless/      the workerless runtime (the Lambda layer ships it and nothing else)
devkit/                 the workerless devkit: the CLI, engine emulators, local mode, pytest fixtures
events/                 sample Lambda events
tests/unit/             your handlers' tests
```

```bash
make demo    # the pipeline on this machine against an engine emulator
make test    # your handlers' tests
make build   # sam build (needs a CPython 3.12 for the layer's bytecode)
```

Add a job type: `.venv/bin/workerless new-handler ship-parcel` writes `functions/shipparcel/app.py`,
its test and its event, and adds its route to `template.yaml` (the routes list and a Mappings.Routes
line naming the engine's job type).
Deploy with `.venv-sam/bin/sam deploy --guided` (it asks for the engine secret's ARN).
"""


def init_application(directory: str | Path, *, job_type: str = "example-job") -> Application:
    """Write a new workerless application into ``directory`` (which must be absent or empty)."""
    validate_job_type(job_type)
    target = Path(directory).absolute()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ScaffoldError(f"{target} exists and is not an empty directory", key="DIR")
    name = re.sub(r"[^A-Za-z0-9-]", "-", target.name)
    if not _STACK_NAME.match(name):
        raise ScaffoldError(
            f"{target.name!r} cannot name the stack (letters, digits and hyphens, starting with a letter)", key="DIR"
        )
    checkout = source_checkout()
    template = application_template((checkout / "template.yaml").read_text(encoding="utf-8"), job_type)
    samconfig = (checkout / "samconfig.toml").read_text(encoding="utf-8")
    samconfig, count = re.subn(r'(?m)^stack_name = ".*"$', f'stack_name = "{name}"', samconfig)
    if count != 1:
        raise ScaffoldError("the checkout's samconfig.toml has no stack_name to set")

    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        # An unwritable place, or a path through a file: one line, not a traceback.
        raise ScaffoldError(f"cannot create {target}: {exc.strerror}", key="DIR") from None
    files: dict[Path, str] = {
        target / "template.yaml": template,
        target / "samconfig.toml": samconfig,
        target / "pyproject.toml": _pyproject(name, checkout),
        target / "Makefile": MAKEFILE,
        target / "README.md": _readme(name, job_type),
        target / ".gitignore": _GITIGNORE,
        **planned_files(target, job_type),
    }
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    for function in LIBRARY_FUNCTIONS:
        shutil.copytree(checkout / "functions" / function, target / "functions" / function, ignore=_LAYER_IGNORE)
    shutil.copytree(checkout / "layers" / "workerless", target / "layers" / "workerless", ignore=_LAYER_IGNORE)
    shutil.copytree(checkout / "devkit", target / "devkit", ignore=_LAYER_IGNORE)
    return Application(target, job_type, sorted(files))
