"""`workerless demo` after the user types a job's input (issue 27, 5): the demo sends each type the
variables of its sample event (events/sqs-TYPE.json, which `init` and `new-handler` write and the
user edits with the handler), so a typed handler's demo completes instead of failing on the
example's made-up order id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: Seconds per demo run: `make test` runs it, `make test-fast` does not.
pytestmark = pytest.mark.slow

#: The CLI of the interpreter running the tests (this checkout's .venv).
WORKERLESS = Path(sys.executable).parent / "workerless"

TYPED_HANDLER = """\
from pydantic import BaseModel, Field
from workerless import Job, job_handler


class ShipInput(BaseModel):
    sku: str
    count: int = Field(strict=True, gt=0)


@job_handler("ship-parcel")
def handler(job: Job[ShipInput]) -> dict:
    return {"shipped": job.input.count}
"""


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKERLESS_", "SHEPTRA_", "NF_", "STAGENEXT_"))}
    return subprocess.run(
        [str(WORKERLESS), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_demo_sends_a_typed_job_type_the_input_of_its_sample_event(tmp_path: Path) -> None:
    app = tmp_path / "shop"
    assert _run("init", str(app), "--job-type", "ship-parcel", cwd=tmp_path).returncode == 0
    (app / "functions" / "shipparcel" / "app.py").write_text(TYPED_HANDLER, encoding="utf-8")
    assert _run("build", cwd=app).returncode == 0

    # The sample event still holds the example's input: the typed handler refuses it, and the demo
    # says so (the jobs fail for good, naming the missing fields).
    refused = _run("demo", "--jobs", "2", cwd=app)
    assert refused.returncode != 0, refused.stdout[-3000:]
    assert "demo: all 2 jobs completed" not in refused.stdout

    # The user gives the sample event the input the handler takes: the demo sends it.
    event_path = app / "events" / "sqs-ship-parcel.json"
    event = json.loads(event_path.read_text(encoding="utf-8"))
    body = json.loads(event["Records"][0]["body"])
    body["variables"] = {"sku": "A-1", "count": 2}
    event["Records"][0]["body"] = json.dumps(body)
    event_path.write_text(json.dumps(event, indent=2), encoding="utf-8")
    done = _run("demo", "--jobs", "2", cwd=app)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "demo: all 2 jobs completed" in done.stdout, done.stdout[-3000:]


def test_a_sample_event_without_a_jobs_variables_is_one_line_naming_it(tmp_path: Path) -> None:
    app = tmp_path / "shop"
    assert _run("init", str(app), "--job-type", "ship-parcel", cwd=tmp_path).returncode == 0
    assert _run("build", cwd=app).returncode == 0
    event_path = app / "events" / "sqs-ship-parcel.json"
    event_path.write_text('{"Records": []}', encoding="utf-8")
    result = _run("demo", "--jobs", "1", cwd=app)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "events/sqs-ship-parcel.json: not a sample SQS event" in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
