"""End to end against a deployed stack: opt-in, never part of `make test`.

Run after `sam deploy`, with AWS credentials for the account:

    WORKERLESS_E2E_STACK=workerless .venv/bin/pytest tests/e2e -q

What it checks is what an operator asks first — is anyone listening? — through the same code as
`workerless status --stack-name`: every route's queue and the job dead-letter queue they share can
be read, nothing is dead-lettered, and the poller has ticked recently (needs TickSeconds > 0). With
WORKERLESS_E2E_EMULATOR_URL set to an emulator the stack's functions can reach (for example
`workerless emulate sheptra` on a host the Lambda functions can call, with the stack's secret
pointing at it), it also creates one job per example type through the emulator's admin API and
waits for each to complete.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

STACK = os.environ.get("WORKERLESS_E2E_STACK", "")
EMULATOR = os.environ.get("WORKERLESS_E2E_EMULATOR_URL", "")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not STACK, reason="set WORKERLESS_E2E_STACK to the name of a deployed stack"),
]


@pytest.fixture(scope="module")
def deployment() -> Any:
    import boto3
    from workerless_devkit.devtools.stack import resolve_stack

    return resolve_stack(boto3.client("cloudformation"), STACK)


def test_every_route_is_readable_and_nothing_is_dead_lettered(deployment: Any) -> None:
    import boto3
    from workerless_devkit.devtools.status import collect_status

    clients = {
        "sqs": boto3.client("sqs"),
        "dynamodb": boto3.client("dynamodb"),
        "cloudwatch": boto3.client("cloudwatch"),
    }
    started = time.time()
    status = collect_status(deployment, **clients)
    assert status.routes, "the stack has no routes"
    assert deployment.dead_letter_url, "the stack has no JobDeadLetterQueue"
    for route in status.routes:
        assert route.errors == [], f"{route.job_type}: {route.errors}"
    assert status.errors == [], status.errors
    assert status.dead_letters == 0, "the job dead-letter queue holds messages (workerless dlq show lists them)"
    # Someone is listening: a poll after this test started (the event), not a poll younger than a
    # fixed age when the status is read. The tick is 20 s and the watchdog schedule runs every
    # minute, so one comes within minutes; the wait is bounded in rounds and time.
    polled_since_start, asked = False, started
    for _ in range(20):
        ago = status.last_poll_seconds_ago
        # The poll was `ago` seconds before this status was read, which was after `asked`.
        if ago is not None and asked - ago > started:
            polled_since_start = True
            break
        time.sleep(15)
        asked = time.time()
        status = collect_status(deployment, **clients)
    assert status.last_poll_seconds_ago is not None, status.last_poll_note
    assert polled_since_start, "no poll ran in the five minutes after the test started"


@pytest.mark.skipif(not EMULATOR, reason="set WORKERLESS_E2E_EMULATOR_URL to an emulator the stack polls")
def test_jobs_created_at_the_engine_are_completed_by_the_stack() -> None:
    import httpx

    jobs = [
        {"type": "charge-payment", "variables": {"orderId": "e2e-1", "amount": 5}},
        {"type": "send-receipt", "variables": {"orderId": "e2e-1"}},
        {"type": "generate-report", "variables": {"seconds": 1}},
    ]
    with httpx.Client(base_url=EMULATOR, timeout=10) as admin:
        ids = [admin.post("/_admin/jobs", json=job).json()["id"] for job in jobs]
        deadline = time.monotonic() + 180
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = {i: admin.get(f"/_admin/jobs/{i}").json()["state"] for i in ids}
            if all(s == "completed" for s in states.values()):
                break
            time.sleep(5)
    assert all(s == "completed" for s in states.values()), states
