"""`workerless local --until-idle` tells the truth: an engine that never answered is a failure naming
the URL tried; a failed job's line carries its reason; each line names the function that wrote it,
readable on request (`--log-format text`) or as CloudWatch gets it (`json`); the poller's lines carry
the handler's correlation keys; `--parameter-overrides LogLevel=...` takes effect."""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from workerless import observability
from workerless_devkit import cli
from workerless_devkit.emulators import sheptra

ROOT = Path(__file__).resolve().parents[4]
TEMPLATE = str(ROOT / "template.yaml")
SECRET = "secret_never_printed_0123456789"

pytestmark = pytest.mark.slow


@pytest.fixture
def function_log() -> Iterator[io.StringIO]:
    """What the functions' log handler (Powertools', stdout in Lambda) writes during the test."""
    handler = observability.logger.registered_handler
    assert hasattr(handler, "setStream")
    buffer = io.StringIO()
    saved = handler.setStream(buffer)
    try:
        yield buffer
    finally:
        if saved is not None:
            handler.setStream(saved)


def _closed_port() -> int:
    # Bound, then closed: nothing listens there, and a connect is refused at once (loopback only).
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _run_with_secret(
    values: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], function_log: io.StringIO
) -> str:
    """Run local until idle with these connection values (the client secret set to SECRET); the last
    stderr line, once the run has failed and the secret is printed nowhere."""
    env_file = tmp_path / "engine.env"
    env_file.write_text(
        "".join(f"{k}={v}\n" for k, v in {**values, "SHEPTRA_CLIENT_SECRET": SECRET}.items()), encoding="utf-8"
    )
    code = _run("--env-file", str(env_file), "--log-format", "json", "--max-seconds", "300")
    _, err = capsys.readouterr()
    assert code == cli.EXIT_FAILED, err
    assert SECRET not in err and SECRET not in function_log.getvalue()
    return err.strip().splitlines()[-1]


def _run(*argv: str) -> int:
    return cli.main(["local", "--template", TEMPLATE, "--until-idle", "1", "--schedule-seconds", "0.5", *argv])


def test_an_engine_that_never_answered_fails_the_run_naming_the_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], function_log: io.StringIO
) -> None:
    # GIVEN valid connection values pointing at a loopback port nothing listens on
    port = _closed_port()
    lines = sheptra.create(auth=True).env_block(f"http://127.0.0.1:{port}").splitlines()
    values = dict(line.split("=", 1) for line in lines if line)
    # WHEN local runs until idle
    last = _run_with_secret(values, tmp_path, capsys, function_log)
    # THEN it fails (no secret anywhere), the last line naming the problem and the URL it tried
    assert last.startswith("workerless: the engine never answered:"), last
    assert f"http://127.0.0.1:{port}/" in last, last
    # ... and the poller's own lines name the engine
    polls = [json.loads(line) for line in function_log.getvalue().splitlines() if "poll failed" in line]
    assert polls and all(p["engine"] == "sheptra" and p["function_id"] == "PollerFunction" for p in polls)


def test_an_engine_that_refuses_the_credentials_fails_the_run_naming_the_url(
    sheptra_emulator: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], function_log: io.StringIO
) -> None:
    # GIVEN the emulator's connection values with a wrong client secret (every token mint is a 401)
    assert sheptra_emulator.values["SHEPTRA_CLIENT_SECRET"] != SECRET
    # WHEN local runs until idle
    last = _run_with_secret(dict(sheptra_emulator.values), tmp_path, capsys, function_log)
    # THEN it fails (no secret anywhere), naming the refusal and the URL refused
    assert last.startswith("workerless: the engine refused the credentials:"), last
    assert f"401 on POST {sheptra_emulator.url.rstrip('/')}/oauth2/token" in last, last


def _function_names() -> dict[str, str]:
    from workerless_devkit.local.template import load_template

    return {spec.logical_id: spec.function_name for spec in load_template(TEMPLATE).functions}


def test_json_lines_name_their_function_and_carry_the_reason_and_correlation_keys(
    sheptra_emulator: Any, capsys: pytest.CaptureFixture[str], function_log: io.StringIO
) -> None:
    # GIVEN a job that completes and one that fails for good (TerminalError)
    done = sheptra_emulator.create_job("charge-payment", {"orderId": "1", "amount": 5})
    declined = sheptra_emulator.create_job("charge-payment", {"orderId": "2", "amount": 0})
    # WHEN local runs them until idle, at the DEBUG level the override asks for
    code = _run(
        "--env-file",
        str(sheptra_emulator.env_file),
        "--log-format",
        "json",
        "--parameter-overrides",
        "TickSeconds=1",
        "LogLevel=DEBUG",
    )
    err = capsys.readouterr().err
    assert code == cli.EXIT_OK, err
    lines = [json.loads(line) for line in function_log.getvalue().splitlines()]
    names = _function_names()
    # THEN the failed job's outcome line carries the handler's reason, from the handler's function
    failed = [r for r in lines if r.get("lifecycle") == "failed" and r.get("job_id") == declined]
    assert failed, lines
    assert "amount must be a positive number, got 0" in failed[0]["reason"]
    assert failed[0]["terminal"] is True
    assert failed[0]["function_name"] == names["chargepaymentFunction"]
    completed = [r for r in lines if r.get("lifecycle") == "completed" and r.get("job_id") == done]
    assert completed and "reason" not in completed[0]
    # ... and the poller's activation lines (DEBUG: the override took effect) name the poller and
    # carry the same correlation keys as the handler's lines of that job
    activated = [r for r in lines if r.get("lifecycle") == "activated" and r.get("job_id") == declined]
    assert activated, "no DEBUG activation line: LogLevel=DEBUG did not take effect"
    assert activated[0]["function_name"] == names["PollerFunction"]
    handler_keys = {k: failed[0].get(k) for k in ("engine", "instance_id", "trace_id")}
    assert handler_keys["engine"] == "sheptra"
    assert {k: activated[0].get(k) for k in handler_keys} == handler_keys


def test_text_lines_are_one_readable_line_each_naming_the_function(
    sheptra_emulator: Any, capsys: pytest.CaptureFixture[str], function_log: io.StringIO
) -> None:
    # GIVEN a job that fails for good
    declined = sheptra_emulator.create_job("charge-payment", {"orderId": "2", "amount": -1})
    # WHEN local runs it with --log-format text
    code = _run(
        "--env-file", str(sheptra_emulator.env_file), "--log-format", "text", "--parameter-overrides", "TickSeconds=1"
    )
    err = capsys.readouterr().err
    assert code == cli.EXIT_OK, err
    out = function_log.getvalue().splitlines()
    # THEN no JSON, and the outcome line reads: time, function, job type and id, message, reason
    assert out and not any(line.startswith("{") for line in out), out
    failed = [line for line in out if f"charge-payment {declined}  job failed" in line]
    assert failed, out
    assert " chargepaymentFunction  " in failed[0]
    # charge-payment's input is typed: the reason is pydantic's report naming the field (issue 15).
    assert (
        "reason=invalid input for ChargeInput: amount: Value error, amount must be a positive number, got -1"
        in failed[0]
    )
