"""A flaky StageNext must not keep the pipeline busy after its work is done (issue 10, item 7).

Tried with 10% of StageNext's answers 429/503, or 5% mangled (a 200 with truncated JSON or an empty
body, a 502 HTML page, a connection closed without an answer): every job finished, but the run
never went idle. The cause: a handler that met a failure it did not retry (a garbled lease-acquire
answer taken as final, a skip ack answered 429) failed its SQS message, and a StageNext delivery's
message then sits in flight for the job queue's whole visibility timeout (720 s) to no purpose —
its ack token dies with the gateway's 60 s — holding a share of the route's capacity and keeping
``workerless local --until-idle`` from ever returning; and an ack lost after the result (not
retried) had the gateway deliver the stage a second time.

Here the template's topology runs against the emulator with exactly those faults, each where it
hurt: the run settles, goes idle, and every stage was delivered once."""

from __future__ import annotations

import httpx
from workerless_devkit.pytest_plugin import EmulatorFactory

from tests.functional.pipeline import topology, wait_final

HTML = "<html><body><h1>502 Bad Gateway</h1></body></html>"
ACQUIRE = "/stages/{stageId}/lease/acquire"


def test_under_a_flaky_stagenext_every_stage_is_delivered_once_and_the_run_goes_idle(
    workerless_emulator: EmulatorFactory,
) -> None:
    """GIVEN lease acquire answered with a truncated 200 and an empty 200 after taking effect, acks
    answered 502 (HTML) and 429, and an ack whose connection drops after it landed
    WHEN template.yaml's topology runs ten stages, with the job queues' visibility at 120 s (the
    handler timeout's maximum, which the visibility may not be under)
    THEN every stage completes on its one execution and one delivery (no gateway redelivery), every
    job queue drains, and the run goes idle — a message failed for nothing would hold it for 120 s."""
    # The gateway's visibility timeout: the seed's 60 s.
    running = workerless_emulator("stagenext", lease_seconds=10)
    emu, server = running.emulator, running.server
    env_file = running.env_file
    faults = [
        {"path": ACQUIRE, "status": 200, "raw": '{"acquired": tr', "after": True},
        {"path": ACQUIRE, "status": 200, "raw": "", "after": True},
        {"path": "/jobs/ack", "status": 502, "raw": HTML, "content_type": "text/html"},
        {"path": "/jobs/ack", "status": 429, "headers": {"Retry-After": "1"}},
        {"path": "/jobs/ack", "drop": True, "after": True},
    ]
    for fault in faults:
        httpx.post(f"{server.url}/_admin/faults", json={"method": "POST", "times": 1, **fault}).raise_for_status()
    kinds = ["charge-payment", "send-receipt"]
    ids = [emu.create_job(kinds[i % 2], {"orderId": f"o{i}", "amount": 5 + i}) for i in range(10)]

    with topology(env_file, job_visibility_seconds=120) as topo:
        wait_final(topo, emu.job_state, ids, 60)
        # Idle comes seconds after the last job. A message failed for nothing keeps its queue busy
        # for the 120 s visibility timeout from its failure, which came at most wait_final's 60 s
        # before this wait: at least 60 s more, past this limit.
        topo.run_until_idle(idle_seconds=3, max_seconds=45)
        depths = topo.queue_depths()

    for logical_id in ("chargepaymentQueue", "sendreceiptQueue"):
        depth = depths[logical_id]
        assert (depth.visible, depth.in_flight) == (0, 0), f"{logical_id}: {depth}"
    for stage_id in ids:
        state = emu.job_state(stage_id)
        assert state["state"] == "completed", state["history"]
        assert len(state["executions"]) == 1, f"{stage_id}: {state['history']}"
        assert state["deliveries"] == 1, f"{stage_id} was delivered again: {state['history']}"
        assert [r["applied"] for r in state["results"]] == [True]
        assert 200 in [a["status"] for a in state["acks"]]
    assert emu.inflight() == [0, 0]
    assert emu.router.pending_faults() == 0, "a fault never fired: the run did not meet it"
