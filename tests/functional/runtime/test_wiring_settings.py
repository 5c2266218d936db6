"""A wiring uses the settings it was given, not the process environment's (issue 28): its engine is
built from those settings' engine values, and a failing handler's backoff is theirs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from workerless import entrypoints, job_handler
from workerless._core.job import Job
from workerless._core.settings import Route, Settings
from workerless.testing import FakeEngine
from workerless.wiring import Wiring

from tests.functional.aws import Aws, FakeContext


def test_the_engine_is_built_from_the_given_settings_env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GIVEN settings naming an env file of node-flow values, and a process environment naming
    neither an env file nor an engine WHEN the wiring builds its engine THEN it is node-flow, from
    that file (before: the values were the process settings', and no engine could be told)."""
    env_file = tmp_path / "nodeflow.env"
    env_file.write_text("NF_URL=https://nf.example\nNF_API_KEY=nf_key\n", encoding="utf-8")
    monkeypatch.delenv("WORKERLESS_ENV_FILE", raising=False)
    wiring = Wiring(settings=Settings(env_file=str(env_file), fail_backoff_seconds=7), state=object())  # type: ignore[arg-type]
    try:
        assert wiring.engine.name == "nodeflow"
        assert wiring.engine_values()["NF_API_KEY"] == "nf_key"
    finally:
        wiring.close()


def test_a_failing_handler_backs_off_as_the_given_settings_say(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    """GIVEN a wiring whose settings say WORKERLESS_FAIL_BACKOFF_SECONDS 7, in a process whose
    environment says 30 WHEN a handler that names no backoff raises THEN the failure is reported
    with a backoff of 7 (before: 30, read from the process settings)."""
    monkeypatch.setenv("WORKERLESS_FAIL_BACKOFF_SECONDS", "30")
    queue = aws.queues["charge-payment"]
    settings = Settings(
        table_name=aws.table,
        routes=(Route(type="charge-payment", queue_url=queue, max_in_flight=4),),
        heartbeat_queue_url=aws.heartbeat_queue,
        ticker_queue_url=aws.ticker_queue,
        fail_backoff_seconds=7,
    )
    engine = FakeEngine()
    wiring = Wiring(settings=settings, engine=engine)

    @job_handler("charge-payment")
    def failing(job: Job[Any]) -> dict[str, Any]:
        raise RuntimeError("gateway down")

    job_id = engine.add_job("charge-payment", {"orderId": "1", "amount": 5})
    try:
        assert entrypoints.poller({}, FakeContext(), wiring=wiring)["activated"] == 1
        event = aws.receive_event(queue)
        aws.settle(queue, event, failing(event, FakeContext(), wiring))
    finally:
        wiring.close()

    outcome = engine.reports[job_id][-1]
    assert outcome.kind == "fail" and outcome.message == "RuntimeError: gateway down"
    assert outcome.backoff_seconds == 7
