"""A 20-second engine outage in the middle of a run (issue 10, item 9): every job is final within a
minute of the engine's return, on each engine.

template.yaml's topology runs as written — the template's lease (60 s), its visibility timeouts
(job queues 720 s, heartbeat queue 30 s) — with only the tick and schedule shortened (1 s) so
pickup is quick. From 4 s into a 40-job run, every job-loop call the engine serves is answered 503
without Retry-After for 20 s (an outage window on the emulator's own clock), but the take-work call
(pull, activate, lease) only from 8 s in: eight jobs created as the outage begins are taken while
the calls that start, keep and finish them are refused (issue 26, 2.8: StageNext deliveries pulled
just before an outage were abandoned when their lease acquire was refused). The run's eight
generate-report jobs take 6 s each, so their reports meet the outage whatever the machine's speed
(the window opens once they are all leased, 4 s in at the earliest). A report that fails past the
handler's quick retries must then be re-sent on a backoff of seconds, not wait out its queue's
visibility timeout (720 s; 5400 s for generate-report).

"Within a minute" is read from the emulator's own timestamps: the outage's end and each job's final
event in its history. The run itself is only bounded (it stops once the emulator's clock is well
past the target), never timed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from workerless.engines import ENGINE_NAMES
from workerless_devkit.local import LocalTopology
from workerless_devkit.pytest_plugin import EmulatorFactory

from tests.functional.pipeline import TEMPLATE

START_SECONDS = 4.0
OUTAGE_SECONDS = 20.0
#: How long into the outage work can still be taken (the take-work call is refused from then on).
TAKE_SECONDS = 8.0
#: How long each generate-report job runs: it reports inside the outage.
REPORT_SECONDS = 6
#: The target: every job final within this long after the engine is back.
TARGET_SECONDS = 60.0
#: Events in an emulator's history that make a job final.
FINAL_EVENTS = {"completed", "failed", "failed_terminal", "thrown", "incident"}

#: Every job-loop route of each emulator: take work, keep it, finish it (token mint and discovery
#: stay up: a worker holding a token does not need them).
JOB_LOOP = {
    "sheptra": [
        "/cells/{cell}/v1/jobs/activate",
        "/cells/{cell}/v1/jobs/{id}/extend-lease",
        "/cells/{cell}/v1/jobs/{id}/complete",
        "/cells/{cell}/v1/jobs/{id}/fail",
        "/cells/{cell}/v1/jobs/{id}/throw-error",
    ],
    "nodeflow": [
        "/v1/ns/{ns}/queues/{queue}/lease",
        "/v1/ns/{ns}/tasks/{task_id}/heartbeat",
        "/v1/ns/{ns}/tasks/{task_id}/logs",
        "/v1/ns/{ns}/tasks/{task_id}/report",
    ],
    "stagenext": [
        "/jobs/pull",
        "/jobs/ack",
        "/stages/{stageId}/lease/acquire",
        "/stages/{stageId}/lease/renew",
        "/stages/{stageId}/result",
    ],
}
#: The history event each emulator records when a job's lease expired: the engine then hands the
#: job out again as a new attempt (Sheptra records it when another activation takes the job).
LEASE_EXPIRED = {"sheptra": "lease-lapsed", "nodeflow": "lease_expired", "stagenext": "lease_expired"}
#: StageNext's lease acquire: a pulled delivery's start.
ACQUIRE = "/stages/{stageId}/lease/acquire"
#: Routes whose answers decide whether a finished job's report landed.
REPORT_ROUTES = {
    "sheptra": "/cells/{cell}/v1/jobs/{id}/complete",
    "nodeflow": "/v1/ns/{ns}/tasks/{task_id}/report",
    "stagenext": "/stages/{stageId}/result",
}


@pytest.fixture(params=sorted(ENGINE_NAMES))
def served(request: pytest.FixtureRequest, workerless_emulator: EmulatorFactory) -> tuple[str, Any, Path]:
    engine = str(request.param)
    running = workerless_emulator(engine)
    assert running.env_file is not None
    return engine, running.emulator, running.env_file


def _final_at(state: dict[str, Any]) -> float | None:
    times = [float(e["at"]) for e in state.get("history", []) if e.get("event") in FINAL_EVENTS]
    return min(times) if times else None


@pytest.mark.slow
def test_every_job_is_final_within_a_minute_of_a_20_second_outage(served: tuple[str, Any, Path]) -> None:
    """GIVEN a 40-job run at the template's lease and visibility timeouts
    WHEN every job-loop call is answered 503 (no Retry-After) for 20 s from 4 s in (the take-work
    call from 8 s into the outage), and eight more jobs are created as it begins
    THEN every job is final (by the emulator's clock) within a minute of the outage's end, each
    on its first engine attempt (no lease expired at the engine; StageNext: each stage delivered
    once, no delivery left to the gateway's visibility sweep), and the outage did refuse reports
    (the test is not vacuous)."""
    engine, emulator, env_file = served
    ids = [emulator.create_job("charge-payment", {"orderId": f"o{i}", "amount": 10 + i}) for i in range(16)]
    ids += [emulator.create_job("send-receipt", {"orderId": f"r{i}"}) for i in range(16)]
    reports = [emulator.create_job("generate-report", {"seconds": REPORT_SECONDS}) for _ in range(8)]
    ids += reports

    topo = LocalTopology(TEMPLATE, env_file, parameters={"TickSeconds": "1"}, schedule_seconds=1)
    with topo:
        begun = emulator.now()
        # An event wait, not a timing: the long jobs are running when the outage begins.
        assert topo.run_until(lambda: all(emulator.job_state(r)["state"] == "leased" for r in reports), 120)
        outage_start = max(begun + START_SECONDS, emulator.now())
        outage_end = outage_start + OUTAGE_SECONDS
        take, *rest = JOB_LOOP[engine]
        emulator.router.add_outage(rest, start=outage_start, end=outage_end)
        emulator.router.add_outage([take], start=outage_start + TAKE_SECONDS, end=outage_end)
        # Jobs the poller can take only once their start is refused (an event wait on the clock).
        assert topo.run_until(lambda: emulator.now() >= outage_start, 120)
        ids += [emulator.create_job("charge-payment", {"orderId": f"late{i}", "amount": 10 + i}) for i in range(4)]
        ids += [emulator.create_job("send-receipt", {"orderId": f"late-r{i}"}) for i in range(4)]

        def settled() -> bool:
            # Stop once every job is final, or once the emulator's clock is past the target with
            # room to spare (the assertion below reads the timestamps, not this bound).
            if emulator.now() > outage_end + TARGET_SECONDS + 30:
                return True
            return all(emulator.job_state(i)["state"] in ("completed", "failed") for i in ids)

        topo.run_until(settled, max_seconds=START_SECONDS + OUTAGE_SECONDS + TARGET_SECONDS + 120)

    states = {i: emulator.job_state(i) for i in ids}
    late = {}
    for job_id, state in states.items():
        final = _final_at(state)
        if final is None or final - outage_end > TARGET_SECONDS:
            late[job_id] = (state["state"], None if final is None else round(final - outage_end, 1))
    assert not late, f"{len(late)} of {len(ids)} jobs not final within {TARGET_SECONDS:g} s of the outage's end: {late}"
    failed = {i: [h["event"] for h in s["history"]] for i, s in states.items() if s["state"] != "completed"}
    assert not failed, f"jobs final but not completed: {failed}"
    # The template's 60 s lease outlives the 20 s outage: the heartbeat extends it once the engine is
    # back, so no job needs a second attempt. Before issue 26's 2.8, StageNext deliveries whose lease
    # acquire was refused through the outage were abandoned (no ack, no requeue): the gateway put
    # them back after its 60 s visibility timeout and delivered them again, still inside the minute.
    expired = {
        i: s["state"] for i, s in states.items() if any(h["event"] == LEASE_EXPIRED[engine] for h in s["history"])
    }
    assert not expired, f"leases expired at the engine (a second attempt): {expired}"
    if engine == "stagenext":
        abandoned = [i for i, s in states.items() if any(h["event"] == "visibility_requeue" for h in s["history"])]
        assert not abandoned, f"{len(abandoned)} deliveries abandoned to the gateway's visibility sweep: {abandoned}"
        again = {i: s["deliveries"] for i, s in states.items() if s["deliveries"] != 1}
        assert not again, f"stages delivered more than once: {again}"
    assert emulator.router.outage_hits[REPORT_ROUTES[engine]] > 0, "the outage refused no report"
    if engine == "stagenext":
        assert emulator.router.outage_hits[ACQUIRE] > 0, "no delivery pulled in the outage met a refused acquire"
    finished_after = [i for i, s in states.items() if (_final_at(s) or 0) >= outage_end]
    assert finished_after, "no job was held up by the outage"
    worst = max((_final_at(s) or 0) - outage_end for s in states.values())
    print(f"{engine}: {len(finished_after)} jobs final after the outage, the last {worst:.1f} s after it")
