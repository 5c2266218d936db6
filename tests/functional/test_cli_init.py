"""`workerless init DIR`: a new application of its own, whose `make demo`, `make test` and `make build`
pass in its directory, as a new user on a fresh machine would run them.

Cost: the application's .venv is installed by its own Makefile (pip, from the shared pip cache once it
is warm); `make build` shares this repository's .venv-sam (SAM_VENV=) rather than installing SAM CLI a
second time, and is skipped, saying so, when the machine has no CPython 3.12 for the layer's bytecode."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from workerless_devkit import cli
from workerless_devkit.devtools.scaffold import stem, template_job_types
from workerless_devkit.local.template import load_template

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TYPE = "example-job"
#: Per make target: a venv install with a cold pip cache is the longest.
MAKE_TIMEOUT = 600


def make_env(tmp_path: Path) -> dict[str, str]:
    """No make flags from an outer make, no SAM CLI telemetry or version check."""
    app_dir = tmp_path / "sam-cli-config"
    app_dir.mkdir(exist_ok=True)
    (app_dir / "metadata.json").write_text(json.dumps({"lastVersionCheck": time.time(), "telemetryEnabled": False}))
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VIRTUAL_ENV")}
    env.update({"SAM_CLI_TELEMETRY": "0", "__SAM_CLI_APP_DIR": str(app_dir), "AWS_EC2_METADATA_DISABLED": "true"})
    return env


def make(app: Path, env: dict[str, str], *targets: str) -> subprocess.CompletedProcess[str]:
    return command(app, env, "make", "--no-print-directory", *targets)


def command(app: Path, env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` run in ``app``; it must succeed."""
    result = subprocess.run(
        argv,
        cwd=app,
        env=env,
        capture_output=True,
        text=True,
        timeout=MAKE_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, f"{' '.join(argv)}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


# A cold pip cache makes the venv install the longest step; the suite's 300 s default is per test.
@pytest.mark.timeout(3 * MAKE_TIMEOUT)
def test_init_creates_an_application_whose_demo_tests_and_build_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = tmp_path / "orders-app"
    assert cli.main(["init", str(app)]) == 0
    out = capsys.readouterr().out
    assert f"created {app} (job type {TYPE})" in out

    # Its own template: this repository's, with one route.
    text = (app / "template.yaml").read_text(encoding="utf-8")
    assert template_job_types(text) == [TYPE]
    # Its route is generated (its SSM parameter among the route's resources); no route list is written out.
    local = load_template(app / "template.yaml")
    assert [p.logical_id for p in local.ssm_parameters] == [f"{stem(TYPE)}Route"]
    assert f'"type":"{TYPE}"' in local.ssm_parameters[0].value and "WORKERLESS_ROUTES:" not in text
    assert 'stack_name = "orders-app"' in (app / "samconfig.toml").read_text(encoding="utf-8")
    # The engine's connection values (the docs put them in .env) are never committed: git ignores them.
    subprocess.run(["git", "init", "-q", str(app)], check=True, timeout=60)
    ignored = subprocess.run(
        ["git", "-C", str(app), "check-ignore", ".env", "emulator.env", "prod.env", "functions/x/app.py"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ignored.stdout.split() == [".env", "emulator.env", "prod.env"], ignored
    assert sorted(p.name for p in (app / "functions").iterdir()) == sorted(
        ["deadletter", "heartbeat", "poller", stem(TYPE)]
    )
    # Tests for its handlers only: none of the framework's suite.
    assert [p.relative_to(app).as_posix() for p in (app / "tests").rglob("*.py")] == [
        f"tests/unit/test_handler_{TYPE.replace('-', '_')}.py"
    ]
    assert (app / "layers" / "workerless" / "workerless" / "poller.py").is_file()
    assert not list((app / "layers").rglob("__pycache__"))

    # A second init into it is refused, and writes nothing.
    assert cli.main(["init", str(app)]) == 2
    assert "exists and is not an empty directory" in capsys.readouterr().err

    env = make_env(tmp_path)
    demo = make(app, env, "demo")
    assert "completed" in demo.stdout and TYPE in demo.stdout
    tested = make(app, env, "test")
    assert "1 passed" in tested.stdout

    # A type added in the new application is tested there too.
    command(app, env, str(app / ".venv" / "bin" / "workerless"), "new-handler", "ship-parcel")
    assert "2 passed" in make(app, env, "test").stdout

    python312 = subprocess.run(
        ["make", "-s", "--no-print-directory", "print-python312"],
        cwd=ROOT / "layers" / "workerless",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if python312.returncode != 0:
        pytest.skip(f"make build needs a CPython 3.12 for the layer's bytecode: {python312.stderr.strip()}")
    make(app, env, "build", f"SAM_VENV={ROOT / '.venv-sam'}")
    built = app / ".aws-sam" / "build"
    assert (built / "template.yaml").is_file()
    assert (built / f"{stem(TYPE)}Function" / "app.py").is_file()
    assert (built / "shipparcelFunction" / "app.py").is_file()
