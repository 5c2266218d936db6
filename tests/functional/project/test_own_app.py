"""The generated application passes the rehearsal (issue 27, 4): from a fresh `workerless init`, its
`make demo`, `make test` and `make rehearse` (build, package, transform, the stack created on a
loopback AWS, a local run through it) with three job types, one of them a handler with its own
dependency (a requirements.txt beside it); with one job type, `make demo` and `make test`, then
`make test` and `make rehearse` after an upgrade to a second locally built release (a version bump).

What the application installs is what a user would: the two distributions as wheels, built here
from this checkout (tests/functional/project/test_distributions.py), found through PIP_FIND_LINKS as if on
an index, with the wheelhouse (`make wheelhouse`) and a local wheel of the handler's dependency,
which therefore installs without the network. pytest and SAM CLI come as the checkout's do (the
index, or pip's cache); `make rehearse` shares this repository's .venv-sam (SAM_VENV=).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import workerless
from workerless_devkit import cli
from workerless_devkit.devtools.scaffold import stem

from tests.functional.project.test_distributions import WHEELHOUSE, _offline_pip_env, _run, build_distributions

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
MAKE_TIMEOUT = 900
DEPENDENCY = "greetkit"


def _dependency_wheel(where: Path) -> Path:
    """A wheel of a small package no index has (built offline: setuptools from the wheelhouse)."""
    project = where / DEPENDENCY
    (project / DEPENDENCY).mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=77"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{DEPENDENCY}"\nversion = "1.0"\n',
        encoding="utf-8",
    )
    (project / DEPENDENCY / "__init__.py").write_text(
        'def greet(name: str) -> str:\n    return f"hello {name}"\n', encoding="utf-8"
    )
    out = where / "wheels"
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, project], cwd=where, env=_offline_pip_env()
    )
    return out


@pytest.fixture(scope="module")
def find_links(tmp_path_factory: pytest.TempPathFactory) -> str:
    dist = build_distributions(tmp_path_factory.mktemp("source"))
    dependency = _dependency_wheel(tmp_path_factory.mktemp("dependency"))
    return " ".join(str(p) for p in (dist, WHEELHOUSE, dependency))


def _env(tmp_path: Path, find_links: str) -> dict[str, str]:
    """No make flags or virtualenv from outside; SAM CLI without telemetry or a version check."""
    config = tmp_path / "sam-cli-config"
    config.mkdir(exist_ok=True)
    (config / "metadata.json").write_text(json.dumps({"lastVersionCheck": time.time(), "telemetryEnabled": False}))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VIRTUAL_ENV", "PYTHONPATH") and not k.startswith("PIP_FIND")
    }
    env.update(
        PIP_FIND_LINKS=find_links,
        SAM_CLI_TELEMETRY="0",
        __SAM_CLI_APP_DIR=str(config),
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def _make(app: Path, env: dict[str, str], *targets: str) -> str:
    result = subprocess.run(
        ["make", "--no-print-directory", *targets],
        cwd=app,
        env=env,
        capture_output=True,
        text=True,
        timeout=MAKE_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, f"make {' '.join(targets)}:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout


def _zip_names(bundle: Path, logical_id: str) -> set[str]:
    """The names in the artifact the created stack's ``logical_id`` runs (its S3 object in the bundle)."""
    resources = json.loads((bundle / "transformed.json").read_text(encoding="utf-8"))["Resources"]
    # SAM names a layer version's logical ID after its content (WorkerlessLayer<hash>).
    (resource,) = [
        r
        for lid, r in resources.items()
        if lid == logical_id or (lid.startswith(logical_id) and r["Type"] == "AWS::Lambda::LayerVersion")
    ]
    props = resource["Properties"]
    location = props.get("Code") or props.get("Content")
    with zipfile.ZipFile(bundle / "artifacts" / location["S3Bucket"] / location["S3Key"]) as artifact:
        return set(artifact.namelist())


def _rehearse(app: Path, env: dict[str, str], *args: str) -> str:
    """`make rehearse` in ``app``, sharing this checkout's SAM CLI. SAM's builder packs a handler's
    requirements.txt with a python3.12 from PATH (and the layer's bytecode needs one): the one
    layers/workerless/Makefile finds."""
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
        pytest.skip(f"the rehearsal's sam build needs a CPython 3.12: {python312.stderr.strip()}")
    env = {**env, "PATH": f"{Path(python312.stdout.strip()).parent}{os.pathsep}{env['PATH']}"}
    out = _make(app, env, "rehearse", f"SAM_VENV={ROOT / '.venv-sam'}", *args)
    assert "rehearsal passed" in out and "demo: all 3 jobs completed" in out, out[-4000:]
    return out


@pytest.mark.timeout(4 * MAKE_TIMEOUT)
def test_three_job_types_one_with_its_own_dependency_pass_demo_test_and_the_rehearsal(
    find_links: str, tmp_path: Path
) -> None:
    app = tmp_path / "shop"
    assert cli.main(["init", str(app), "--job-type", "charge-card"]) == 0
    for job_type in ("send-mail", "build-report"):
        assert cli.main(["new-handler", job_type, "--template", str(app / "template.yaml")]) == 0
    # send-mail's own dependency: a requirements.txt beside its handler (what `sam build` packs into
    # its function), also installed into the development venv for its test and the demo.
    function = app / "functions" / stem("send-mail")
    (function / "requirements.txt").write_text(f"{DEPENDENCY}==1.0\n", encoding="utf-8")
    (function / "app.py").write_text(
        "from greetkit import greet\nfrom workerless import Job, job_handler\n\n\n"
        '@job_handler("send-mail")\ndef handler(job: Job) -> dict:\n'
        '    return {"handled": True, "greeting": greet("mail")}\n',
        encoding="utf-8",
    )
    with (app / "requirements-dev.txt").open("a", encoding="utf-8") as dev:
        dev.write(f"-r functions/{stem('send-mail')}/requirements.txt\n")
    # The long route's own timings on its own line.
    routes = app / "routes.yaml"
    routes.write_text(
        routes.read_text(encoding="utf-8").replace(
            "buildreport: {Type: build-report}",
            "buildreport: {Type: build-report, Timeout: 300, VisibilityTimeout: 1800}",
        ),
        encoding="utf-8",
    )

    env = _env(tmp_path, find_links)
    demo = _make(app, env, "demo")
    assert "demo: all 9 jobs completed" in demo, demo[-3000:]
    for job_type in ("charge-card", "send-mail", "build-report"):
        assert job_type in demo
    assert "3 passed" in _make(app, env, "test")
    installed = subprocess.run(
        [app / ".venv/bin/pip", "show", "workerless", "workerless-devkit", DEPENDENCY],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert installed.count(f"Version: {workerless.__version__}") == 2 and "Editable project location" not in installed

    _rehearse(app, env)
    bundle = app / ".cache" / "rehearsal" / "bundle"
    # The handler's dependency is in its function's artifact; the others' hold their app.py only.
    assert {"app.py", f"{DEPENDENCY}/__init__.py"} <= _zip_names(bundle, "sendmailFunction")
    assert not [n for n in _zip_names(bundle, "chargecardFunction") if n.startswith(DEPENDENCY)]
    # The layer is the pinned runtime wheel as installed (its dist-info), not a copy of source.
    layer = _zip_names(bundle, "WorkerlessLayer")
    assert f"python/workerless-{workerless.__version__}.dist-info/METADATA" in layer
    assert "python/workerless/_poller/poller.py" in layer


def _bumped(version: str) -> str:
    major, minor, patch = (int(part) for part in version.split("."))
    return f"{major}.{minor}.{patch + 1}"


def _tracked(app: Path) -> dict[str, bytes]:
    """The application's files git would track (the generated ones are ignored)."""
    subprocess.run(["git", "init", "-q", str(app)], check=True, timeout=60)
    names = subprocess.run(
        ["git", "-C", str(app), "ls-files", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    return {name: (app / name).read_bytes() for name in names}


@pytest.mark.timeout(3 * MAKE_TIMEOUT)
def test_one_job_type_passes_demo_and_test_and_upgrades_by_a_version_bump(
    find_links: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """One job type's demo and tests; then a newer release (a second pair of wheels, built here at the
    next version) taken by the version in the two requirements files and the render every make
    target runs first: its tests and the rehearsal pass on it (the layer is the new wheel's), and no
    other file the user owns has changed."""
    app = tmp_path / "single"
    assert cli.main(["init", str(app), "--engine", "nodeflow"]) == 0
    env = _env(tmp_path, find_links)
    out = _make(app, env, "demo", "test")
    assert "nodeflow emulator" in out and "demo: all 9 jobs completed" in out, out[-3000:]
    assert "1 passed" in out
    before = _tracked(app)

    old, new = workerless.__version__, _bumped(workerless.__version__)
    newer = build_distributions(tmp_path_factory.mktemp("release"), version=new)
    env["PIP_FIND_LINKS"] = f"{newer} {env['PIP_FIND_LINKS']}"
    for name in ("requirements.txt", "requirements-dev.txt"):
        path = app / name
        path.write_text(path.read_text(encoding="utf-8").replace(f"=={old}", f"=={new}"), encoding="utf-8")
    # The upgraded app's tests, and the rehearsal (its render, sam build of the new layer, the stack,
    # jobs run through it): one job type's rehearsal and the upgrade's in one run.
    assert "1 passed" in _make(app, env, "test")
    # One stack, no `sam deploy` try: the three-type test runs the whole rehearsal (time: CI's budget).
    _rehearse(app, env, "REHEARSE_ARGS=--stack workerless-rehearsal@us-east-1 --no-deploy")
    layer = _zip_names(app / ".cache" / "rehearsal" / "bundle", "WorkerlessLayer")
    assert f"python/workerless-{new}.dist-info/METADATA" in layer
    version = subprocess.run(
        [app / ".venv/bin/workerless", "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert version.stdout.strip() == f"workerless {new}"
    assert f"workerless-devkit {new}" in (app / "template.yaml").read_text(encoding="utf-8").splitlines()[0]
    assert f"workerless=={new}" in (app / ".workerless/layer/requirements.txt").read_text(encoding="utf-8")
    after = _tracked(app)
    changed = sorted(name for name in before if after.get(name) != before[name])
    assert changed == ["requirements-dev.txt", "requirements.txt"], changed
    assert sorted(after) == sorted(before)
