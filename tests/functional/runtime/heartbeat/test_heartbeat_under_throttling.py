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


def uncovered_seconds(job: dict[str, Any]) -> float:
    """The longest the job went without a lease: from a lease's expiry to the next extension or
    completion. Sheptra records "lease-lapsed" only when another activation takes the job (its
    holder may still complete a lapsed lease nobody took over), so this reads the expiries."""
    worst, expires = 0.0, None
    for event in sorted(job["history"], key=lambda e: float(e["at"])):
        if expires is not None and event["event"] in ("lease-extended", "completed"):
            worst = max(worst, float(event["at"]) - expires)
        if "lock_expires_at" in event:
            expires = float(event["lock_expires_at"])
    return worst


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


def test_without_reserved_concurrency_the_same_burst_throttles_the_heartbeat_and_leases_run_out(
    sheptra_emulator: RunningEmulator,
) -> None:
    """The contrast: ReserveConcurrency false (what an account under 100 + the reservations must
    deploy). GIVEN a report job running past its 5 s lease, its lease extended by the heartbeat
    WHEN a burst takes the whole account
    THEN the heartbeat is throttled too (its tickets wait out their visibility timeout) and the
    job's lease runs out with no extension: what the reservations above prevent."""
    emulator = sheptra_emulator.emulator
    assert sheptra_emulator.env_file is not None
    job_id = emulator.create_job("generate-report", {"seconds": 20})
    topology = LocalTopology(
        TEMPLATE,
        sheptra_emulator.env_file,
        parameters={"LeaseSeconds": "5", "TickSeconds": "1", "ReserveConcurrency": "false", **job_timings(30)},
        schedule_seconds=1,
        account_concurrency=200,
    )
    assert topology.concurrency.reserved == {}
    with topology as top:
        assert top.run_until(lambda: extensions(emulator.job_state(job_id)) >= 1, max_seconds=60)
        top.concurrency.occupy(top.concurrency.unreserved)
        assert top.run_until(lambda: top.throttles.get("HeartbeatFunction", 0) >= 1, max_seconds=60), top.throttles
        final = top.run_until(lambda: emulator.job_state(job_id)["state"] == "completed", max_seconds=90)
        top.concurrency.occupy(0)
        job = emulator.job_state(job_id)

    assert final, job["history"]
    # The report ran on past lease expiries nobody extended (Sheptra accepted its result only
    # because no other activation took the job in the meantime).
    assert uncovered_seconds(job) > 0.0, job["history"]
