"""Issue 26 item 2.2: the heartbeat keeps leases alive while a burst of handlers has the account's
concurrency. template.yaml reserves concurrency for the functions that hold leases (the poller, the
heartbeat); local mode holds every function to Lambda's concurrency
(workerless_devkit.local.concurrency), so a burst that uses up the unreserved pool throttles the
handlers (their batches stay in flight until the visibility timeout) and nothing else.
"""

from __future__ import annotations

from typing import Any

import pytest
from workerless_devkit.emulators import RunningEmulator
from workerless_devkit.local import LocalTopology

from tests.functional.pipeline import TEMPLATE, job_timings, wait_final

pytestmark = pytest.mark.slow

HANDLERS = ("chargepaymentFunction", "sendreceiptFunction", "generatereportFunction")


def extensions(job: dict[str, Any]) -> int:
    return sum(1 for event in job["history"] if event["event"] == "lease-extended")


def lapses(job: dict[str, Any]) -> int:
    return sum(1 for event in job["history"] if event["event"] == "lease-lapsed")


def test_a_burst_at_the_account_limit_throttles_the_handlers_not_the_heartbeat(
    sheptra_emulator: RunningEmulator,
) -> None:
    """GIVEN an account of 200 concurrent executions (100 + the template's reservations, the least
    that deploys them) whose whole unreserved pool a burst of other functions holds
    WHEN jobs are activated and dispatched
    THEN every handler invocation is throttled (the batch stays in flight until its visibility
    timeout, comes back and is throttled again), the poller and the heartbeat never are, and the
    heartbeat extends every job's lease three times over with none lapsing; once the burst ends the
    throttled messages come back and every job completes."""
    emulator = sheptra_emulator.emulator
    assert sheptra_emulator.env_file is not None
    ids = [emulator.create_job("charge-payment", {"orderId": f"o{i}", "amount": 10 + i}) for i in range(3)]
    topology = LocalTopology(
        TEMPLATE,
        sheptra_emulator.env_file,
        parameters={"LeaseSeconds": "5", "TickSeconds": "1", **job_timings(6)},
        schedule_seconds=1,
        account_concurrency=200,
    )
    assert topology.concurrency.reserved == {"PollerFunction": 3, "HeartbeatFunction": 5}
    topology.concurrency.occupy(topology.concurrency.unreserved)
    with topology as top:

        def held_through_two_throttles() -> bool:
            # The batch was throttled, came back after its visibility timeout and was throttled
            # again, while the heartbeat extended every lease at least three times.
            handler_throttles = sum(top.throttles.get(h, 0) for h in HANDLERS)
            return handler_throttles >= 2 and all(extensions(emulator.job_state(i)) >= 3 for i in ids)

        done = top.run_until(held_through_two_throttles, max_seconds=120)
        assert done, (top.throttles, [emulator.job_state(i)["history"] for i in ids])
        throttled = top.throttles
        during = [emulator.job_state(i) for i in ids]
        top.concurrency.occupy(0)
        wait_final(top, emulator.job_state, ids, 90)
        after = [emulator.job_state(i) for i in ids]

    assert sum(throttled.get(h, 0) for h in HANDLERS) >= 2, throttled
    assert throttled.get("HeartbeatFunction", 0) == 0 and throttled.get("PollerFunction", 0) == 0, throttled
    assert all(job["state"] != "completed" for job in during), "a handler ran while the burst held the account"
    assert [lapses(job) for job in during] == [0, 0, 0]
    assert [job["state"] for job in after] == ["completed"] * 3
    assert [lapses(job) for job in after] == [0, 0, 0]
