"""`workerless new-handler` on a scratch copy of the project: the files, a template that still passes
cfn-lint and `sam validate --lint`, a generated test that passes, `workerless invoke` on the new
handler, and local mode running the new route against the Sheptra emulator. The real repository is
never written: everything happens in tmp_path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from workerless_devkit import cli
from workerless_devkit.devtools.scaffold import stem, template_job_types
from workerless_devkit.devtools.status import topology_status
from workerless_devkit.emulators import RunningEmulator
from workerless_devkit.local import LocalTopology

#: Seconds per test (real commands, topologies or many generated cases): `make test` runs it,
#: `make test-fast` does not.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[4]
SUBPROCESS_TIMEOUT = 120
#: A name no user would pick: the project copy is the user's tree, which may have any type of its own
#: (the docs' ship-parcel among them).
TYPE = "zz-scaffold-probe"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """template.yaml, functions/ and events/ copied (they get written), samconfig.toml (SAM CLI expands
    the template's Fn::ForEach only with its language_extensions), the layer linked."""
    shutil.copy2(ROOT / "template.yaml", tmp_path / "template.yaml")
    shutil.copy2(ROOT / "samconfig.toml", tmp_path / "samconfig.toml")
    shutil.copytree(ROOT / "functions", tmp_path / "functions", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "events", tmp_path / "events")
    (tmp_path / "layers").symlink_to(ROOT / "layers")
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def offline_env(tmp_path: Path) -> dict[str, str]:
    """As tests/functional/project/test_template.py: no telemetry, no version check, no way off loopback."""
    app_dir = tmp_path / "sam-cli-config"
    app_dir.mkdir(exist_ok=True)
    (app_dir / "metadata.json").write_text(json.dumps({"lastVersionCheck": time.time(), "telemetryEnabled": False}))
    env = {
        k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
    }
    env.update(
        {
            "SAM_CLI_TELEMETRY": "0",
            "__SAM_CLI_APP_DIR": str(app_dir),
            "AWS_EC2_METADATA_DISABLED": "true",
            "HTTP_PROXY": "http://127.0.0.1:9",
            "HTTPS_PROXY": "http://127.0.0.1:9",
            "ALL_PROXY": "http://127.0.0.1:9",
            "NO_PROXY": "",
        }
    )
    return env


def test_new_handler_scaffolds_files_and_a_template_that_still_validates(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """GIVEN a copy of the project WHEN `new-handler TYPE` runs THEN the handler, its test and its event
    exist, the template gains the type (one line: its route, SSM parameter included, is generated),
    passes cfn-lint and `sam validate --lint`, and the generated test passes."""
    before = (project / "template.yaml").read_text(encoding="utf-8")
    code, out, err = run(capsys, "new-handler", TYPE, "--template", str(project / "template.yaml"))
    assert code == 0, err
    app = project / "functions" / stem(TYPE) / "app.py"
    test = project / "tests" / "unit" / f"test_handler_{TYPE.replace('-', '_')}.py"
    event = project / "events" / f"sqs-{TYPE}.json"
    for path in (app, test, event):
        assert path.is_file() and f"created {path}" in out
    assert "from workerless import Job, job_handler" in app.read_text()
    after = (project / "template.yaml").read_text(encoding="utf-8")
    assert template_job_types(after) == [*template_job_types(before), TYPE]
    assert len(after.splitlines()) == len(before.splitlines()) + 2  # its route, and the route's Type

    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    lint = subprocess.run(
        [str(cfn_lint), "--", str(project / "template.yaml")],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        check=False,
    )
    assert lint.returncode == 0 and lint.stdout.strip() == "", lint.stdout + lint.stderr

    sam = ROOT / ".venv-sam" / "bin" / "sam"
    if sam.is_file():
        # Both passes, as test_template.py runs them: cfn-lint's rules, then SAM's translator.
        for mode in (["--lint"], ["--region", "us-east-1"]):
            validated = subprocess.run(
                [str(sam), "validate", *mode, "--template-file", str(project / "template.yaml")],
                cwd=project,
                env=offline_env(project),
                capture_output=True,
                text=True,
                timeout=SUBPROCESS_TIMEOUT,
                check=False,
            )
            assert validated.returncode == 0, validated.stdout + validated.stderr
            assert "is a valid SAM Template" in validated.stdout

    generated = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        check=False,
    )
    assert generated.returncode == 0 and "1 passed" in generated.stdout, generated.stdout + generated.stderr


def test_new_handler_refuses_an_existing_type_and_leaves_everything_as_it_was(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = project / "template.yaml"
    before = template.read_text(encoding="utf-8")
    code, _, err = run(capsys, "new-handler", "charge-payment", "--template", str(template))
    assert code == 2
    assert err.startswith("workerless: error: job type 'charge-payment' already exists") and err.count("\n") == 1

    code, _, err = run(capsys, "new-handler", "Bad_Type", "--template", str(template))
    assert code == 2 and "is not valid" in err
    code, _, err = run(capsys, "new-handler", "poller", "--template", str(template))
    assert code == 2 and "reserved" in err

    # A directory left behind (no template entry): refused before anything is written.
    (project / "functions" / "halfdone").mkdir()
    code, _, err = run(capsys, "new-handler", "half-done", "--template", str(template))
    assert code == 2 and "functions/halfdone is there" in err
    assert template.read_text(encoding="utf-8") == before
    assert not (project / "events" / "sqs-half-done.json").exists()

    code, _, _ = run(capsys, "new-handler", TYPE, "--template", str(template))
    assert code == 0
    scaffolded = template.read_text(encoding="utf-8")
    code, _, err = run(capsys, "new-handler", TYPE, "--template", str(template))
    assert code == 2 and "already exists" in err
    assert template.read_text(encoding="utf-8") == scaffolded


def test_invoke_runs_the_scaffolded_handler(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "new-handler", TYPE, "--template", str(project / "template.yaml"))[0] == 0
    code, out, err = run(
        capsys,
        "invoke",
        TYPE,
        "--variables",
        '{"orderId": "9"}',
        "--functions-dir",
        str(project / "functions"),
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["outcome"] == {"kind": "complete", "variables": {"handled": True}}
    assert report["job"]["type"] == TYPE
    assert report["logs"] == [f"handling {TYPE} job {report['job']['id']}"]


@pytest.fixture
def emulator(sheptra_emulator: RunningEmulator) -> RunningEmulator:
    return sheptra_emulator


# As in test_cli.py's demo test: runtime.reset() leaves the adapter's httpx client to the collector.
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_local_mode_runs_the_new_route_against_the_sheptra_emulator(
    project: Path, emulator: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """GIVEN a scaffolded job type WHEN local mode runs the scaffolded template against the Sheptra
    emulator THEN a job of the new type completes with the handler's variables, and the topology's
    status lists the new route with an empty queue, an empty job dead-letter queue and a recent poll."""
    assert run(capsys, "new-handler", TYPE, "--template", str(project / "template.yaml"))[0] == 0
    env_file = emulator.write_env_file(project / "sheptra.env")
    job_id = emulator.create_job(TYPE, {"orderId": "p1"})
    topology = LocalTopology(
        project / "template.yaml",
        env_file,
        parameters={"LeaseSeconds": "5", "TickSeconds": "1", "LogLevel": "WARNING"},
        schedule_seconds=1,
    )
    started = time.time()
    with topology as topo:
        done = topo.run_until(lambda: emulator.job_state(job_id)["state"] == "completed", max_seconds=60)
        status = topology_status(topo)
        running_for = time.time() - started
    assert done, emulator.job_state(job_id)
    assert emulator.job_state(job_id)["output"] == {"handled": True}
    route = next(r for r in status.routes if r.job_type == TYPE)
    assert (route.waiting, status.dead_letters) == (0, 0)
    assert [r.job_type for r in status.routes] == template_job_types((project / "template.yaml").read_text())
    # A poll of this run (not a stale record): it happened after the topology started.
    assert status.last_poll_seconds_ago is not None and status.last_poll_seconds_ago <= running_for
    assert TYPE in status.table()


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_workerless_local_prints_the_status_while_it_runs_the_new_route(
    project: Path, emulator: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command-line path of the daily loop: scaffold, then `workerless local --status-every` against
    the emulator until idle; the job of the new type completes and the status lines name its route."""
    assert run(capsys, "new-handler", TYPE, "--template", str(project / "template.yaml"))[0] == 0
    env_file = emulator.write_env_file(project / "sheptra.env")
    job_id = emulator.create_job(TYPE, {"orderId": "p2"})
    code, out, err = run(
        capsys,
        "--log-level",
        "WARNING",
        "local",
        "--template",
        str(project / "template.yaml"),
        "--env-file",
        str(env_file),
        "--parameter-overrides",
        "TickSeconds=1",
        "LogLevel=WARNING",
        "--schedule-seconds",
        "0.5",
        "--until-idle",
        "1.5",
        "--max-seconds",
        "120",  # a bound to give up at on a busy machine, not a speed target
        "--status-every",
        "0.5",
    )
    assert code == 0, err[-2000:]
    assert emulator.job_state(job_id)["state"] == "completed"
    assert TYPE in out  # the summary table
    assert "job type" in err and "job dead-letter queue (every route's): 0" in err and "last poll:" in err
    status_rows = [line for line in err.splitlines() if line.startswith(f"{TYPE} ")]
    assert status_rows, err[-2000:]

    code, _, err = run(capsys, "local", "--template", str(project / "template.yaml"), "--status-every", "0")
    assert code == 2 and "--status-every must be positive" in err
