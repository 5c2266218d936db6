"""The heartbeat's failure paths (issue 10, items 2 and 9) on moto's SQS and DynamoDB with an
in-memory engine, one hop at a time:

- a report the engine refuses through an outage is marked owed by the handler, whose message stays
  in flight (the route still counts the job); the heartbeat re-reports the stored outcome on a
  backoff of seconds (1, 2, 4 ... capped at a third of the lease), skipping extends of jobs with
  plenty of lease left, then marks it reported and deletes the message — the handler never runs
  again and the message spends no further receives;
- a ticket whose processing fails is sent again at once on a backoff, and one that cannot be sent
  is made visible again in a third of a lease, instead of waiting out the queue's visibility;
- a heartbeat invocation starts no extend past its deadline and carries the rest on.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from workerless import entrypoints, testing
from workerless._core.model import ActivatedJob, Demand, JobRef, Outcome
from workerless._core.record import Status
from workerless._heartbeat.heartbeat import process_ticket
from workerless._heartbeat.ticket import Ticket, TicketEntry
from workerless.aws.sqs import QueueError
from workerless.errors import EngineUnavailableError, StoreError
from workerless.testing import FakeEngine
from workerless.wiring import Wiring

from tests.functional.aws import Aws, FakeContext
from tests.functional.pipeline import ROOT


@dataclass
class FlakyEngine(FakeEngine):
    """The in-memory engine, with an outage switch per call and an optional pause per extend."""

    reports_down: bool = False
    extends_down: bool = False
    extend_pause: float = 0.0
    #: Lease an extension grants, when set (instead of what was asked): long grants keep the
    #: "a third of the shortest lease" schedule out of a backoff test's way.
    grant: float | None = None

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        if self.reports_down:
            raise EngineUnavailableError("report answered 503", engine="fake", job_id=ref.job_id, status=503)
        super().report(ref, outcome)

    def extend(self, ref: JobRef, lease_seconds: int) -> float:
        if self.extend_pause:
            time.sleep(self.extend_pause)
        if self.extends_down:
            raise EngineUnavailableError("extend answered 503", engine="fake", job_id=ref.job_id, status=503)
        return super().extend(ref, int(self.grant) if self.grant is not None else lease_seconds)


@pytest.fixture
def wire(aws: Aws) -> Iterator[Callable[..., Wiring]]:
    """Builds the test's wirings (``Wiring(**kwargs)``) on the environment ``aws`` set, each closed
    after the test: the heartbeat, poller and handlers are given one; the container is left alone."""
    built: list[Wiring] = []

    def build(**kwargs: Any) -> Wiring:
        built.append(Wiring(**kwargs))
        return built[-1]

    yield build
    for wiring in built:
        wiring.close()


@pytest.fixture
def flaky(aws: Aws) -> FlakyEngine:
    return FlakyEngine()


@pytest.fixture
def wired(wire: Callable[..., Wiring], flaky: FlakyEngine) -> Wiring:
    """The pipeline's wiring around ``flaky`` (its settings read from the environment on first use)."""
    return wire(engine=flaky)


@pytest.fixture
def long_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    """The template's 60 s lease (the aws fixture's 5 s makes every backoff cap 1 s), in the
    environment the test's wirings read their settings from on first use."""
    monkeypatch.setenv("WORKERLESS_LEASE_SECONDS", "60")


class SpyQueues:
    """The pipeline's queues, noting every ticket sent (body, delay) and every delete; ``refuse``
    makes SendMessage fail as SQS would."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent: list[tuple[dict[str, Any], int]] = []
        self.deleted: list[tuple[str, str]] = []
        self.visibility: list[tuple[str, str, int]] = []
        self.refuse = False

    def send(self, queue_url: str, body: Any, *, delay_seconds: int = 0) -> None:
        if self.refuse:
            raise QueueError("SQS send_message failed: InternalError")
        self.sent.append((json.loads(body), delay_seconds))
        self.inner.send(queue_url, body, delay_seconds=delay_seconds)

    def delete(self, queue_url: str, receipt_handle: str) -> None:
        self.deleted.append((queue_url, receipt_handle))
        self.inner.delete(queue_url, receipt_handle)

    def change_visibility(self, queue_url: str, receipt_handle: str, seconds: int) -> None:
        self.visibility.append((queue_url, receipt_handle, seconds))
        self.inner.change_visibility(queue_url, receipt_handle, seconds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _spied(wiring: Wiring, spy: SpyQueues) -> Wiring:
    """``wiring``'s settings, engine and store, and the spy for queues: the heartbeat's own wiring."""
    return Wiring(settings=wiring.settings, engine=wiring.engine, store=wiring.store, queues=spy)


def load_handler(job_type: str) -> Any:
    return testing.load_handler(ROOT / "functions" / job_type.replace("-", "") / "app.py")


def _queue_job(aws: Aws, job: ActivatedJob) -> dict[str, Any]:
    """Send ``job`` to its route queue and receive it back as the event source would."""
    aws.sqs.send_message(QueueUrl=aws.queues[job.ref.job_type], MessageBody=job.to_message())
    event = aws.receive_event(aws.queues[job.ref.job_type], max_messages=1)
    assert len(event["Records"]) == 1
    return event


def _ticket(*entries: tuple[ActivatedJob, float]) -> str:
    return Ticket("fake", tuple(TicketEntry(j.ref, expiry) for j, expiry in entries), first_seen=time.time()).to_json()


def _run(body: str, wiring: Wiring, queues: Any, *, seconds: float = 30.0) -> list[Ticket]:
    """One ticket processed with ``wiring``'s settings, engine and store, and ``queues``."""
    return process_ticket(
        body,
        settings=wiring.settings,
        engine=wiring.engine,
        store=wiring.store,
        queues=queues,
        deadline=time.monotonic() + seconds,
    )


def _receive_ticket(aws: Aws, *, seconds: float = 10.0) -> dict[str, Any]:
    """Wait for the delayed ticket (the 5 s lease puts it about 1 s out) and receive it, in flight."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        event = aws.receive_event(aws.heartbeat_queue)
        if event["Records"]:
            return event
        time.sleep(0.2)
    raise AssertionError("no ticket on the heartbeat queue")


# ------------------------------------------------------------------------------------------- owed


def test_an_owed_report_is_sent_by_the_heartbeat_and_its_message_deleted(
    aws: Aws, flaky: FlakyEngine, wired: Wiring
) -> None:
    """GIVEN a job whose report the engine refuses (503) past the handler's quick retries
    THEN the handler stores the result, marks the report owed and keeps the message in flight (a
    batch item failure: the route still counts the job), and once the engine is back the heartbeat
    reports the stored result, marks the record reported and deletes the message: the job is final
    without the handler running again and without waiting for the queue's visibility timeout."""
    job_id = flaky.add_job("charge-payment", {"orderId": "7", "amount": 12})
    entrypoints.poller({}, FakeContext(), wiring=wired)
    queue = aws.queues["charge-payment"]
    event = aws.receive_event(queue)
    flaky.reports_down = True

    response = load_handler("charge-payment")(event, FakeContext(), wired)
    aws.settle(queue, event, response)

    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == [event["Records"][0]["messageId"]]
    store = wired.store
    record = store.get(f"job#charge-payment#fake#{job_id}#r3")
    assert record is not None and record.status is Status.STORED and record.report_owed
    assert record.receipt == event["Records"][0]["receiptHandle"]
    assert record.receipt not in repr(record), "the receipt handle stays out of repr()"
    assert aws.depth(queue) == 1, "the job message stays in flight while its report is owed"

    flaky.reports_down = False
    entrypoints.heartbeat(_receive_ticket(aws), FakeContext(), wiring=wired)

    assert flaky.jobs[job_id].state == "completed"
    assert flaky.reports[job_id] == [Outcome.complete({"paymentOk": True, "chargeId": "ch_7"})]
    after = store.get(f"job#charge-payment#fake#{job_id}#r3")
    assert after is not None and after.status is Status.REPORTED and after.receipt is None
    assert aws.depth(queue) == 0, "the heartbeat deleted the job message: no redelivery, no receive spent"


def test_an_owed_report_is_tried_again_on_a_backoff_of_seconds(
    aws: Aws, flaky: FlakyEngine, long_lease: None, wired: Wiring
) -> None:
    """GIVEN a 60 s lease and a ticket of three jobs: two still running, one whose report is owed
    through an outage
    THEN each round the ticket comes back after 1, 2, 4, 8, 16, 20, 20 s (a third of the lease at
    most) while the report is owed; the early rounds extend only a lease that is due (a third of
    it gone), not those with plenty left; once the engine is back the report lands, the job
    message is deleted and the ticket returns to the normal schedule."""
    for _ in range(3):
        flaky.add_job("charge-payment", {"orderId": "1", "amount": 1})
    running, aging, owed = flaky.activate([Demand("charge-payment", 3)], 60)
    flaky.grant = 600
    flaky.reports_down = True
    event = _queue_job(aws, owed)
    load_handler("charge-payment")(event, FakeContext(), wired)
    assert wired.store.get(owed.record_key).report_owed  # type: ignore[union-attr]

    spy = SpyQueues(wired.queues)
    now = time.time()
    body = _ticket((running, now + 60), (aging, now + 60), (owed, now + 600))
    delays = []
    for round_ in range(7):
        if round_ == 3:
            # Time passes for one job: its lease is now two thirds gone, so even an early round extends it.
            data = json.loads(body)
            data["jobs"][1]["lease_expires_at"] = time.time() + 15
            body = json.dumps(data)
        sent = _run(body, wired, spy)
        assert len(sent) == 1
        body = sent[0].to_json()
        delays.append(spy.sent[-1][1])
    assert delays == [1, 2, 4, 8, 16, 20, 20]
    assert flaky.extensions == {running.ref.job_id: 1, aging.ref.job_id: 2}, "early rounds skip fresh leases"
    assert owed.ref.job_id not in flaky.reports

    flaky.reports_down = False
    sent = _run(body, wired, spy)
    assert flaky.jobs[owed.ref.job_id].state == "completed"
    assert [e.ref.job_id for e in sent[0].entries] == [running.ref.job_id, aging.ref.job_id]
    assert sent[0].retry == 0 and spy.sent[-1][1] > 20, "nothing owed: back to a third of the shortest lease"
    assert spy.deleted == [(aws.queues["charge-payment"], event["Records"][0]["receiptHandle"])]


# ------------------------------------------------------------------------------------ failed tickets


def test_a_ticket_whose_records_cannot_be_read_is_sent_again_not_left_to_the_visibility_timeout(
    aws: Aws, flaky: FlakyEngine, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a ticket whose job records cannot be read (DynamoDB fails past botocore's retries)
    THEN the heartbeat sends the ticket again on the failure backoff, counting the failure, and
    the message it came from succeeds: it does not come back after the queue's visibility timeout
    (360 s in the template, while the leases in it are 60 s)."""
    flaky.add_job("generate-report", {"seconds": 0})
    entrypoints.poller({}, FakeContext(), wiring=wired)
    ticket_event = _receive_ticket(aws)
    original = json.loads(ticket_event["Records"][0]["body"])

    def unreadable(keys: Any) -> Any:
        raise StoreError("DynamoDB batch_get_item failed: InternalServerError")

    monkeypatch.setattr(wired.store, "get_many", unreadable)
    response = entrypoints.heartbeat(ticket_event, FakeContext(), wiring=wired)
    aws.settle(aws.heartbeat_queue, ticket_event, response)

    assert response == {"batchItemFailures": []}
    again = json.loads(_receive_ticket(aws)["Records"][0]["body"])
    assert again["jobs"] == original["jobs"]
    assert again["failures"] == 1


def test_a_ticket_that_cannot_be_sent_comes_back_in_a_third_of_a_lease(
    aws: Aws, flaky: FlakyEngine, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a ticket whose processing fails and whose re-send SQS refuses too
    THEN its message is a batch item failure made visible again in a third of the lease
    (ChangeMessageVisibility), not after the queue's visibility timeout."""
    flaky.add_job("generate-report", {"seconds": 0})
    entrypoints.poller({}, FakeContext(), wiring=wired)
    ticket_event = _receive_ticket(aws)  # received with a 30 s visibility timeout
    record = ticket_event["Records"][0]

    def unreadable(keys: Any) -> Any:
        raise StoreError("DynamoDB batch_get_item failed: InternalServerError")

    monkeypatch.setattr(wired.store, "get_many", unreadable)
    spy = SpyQueues(wired.queues)
    spy.refuse = True
    response = entrypoints.heartbeat(ticket_event, FakeContext(), wiring=_spied(wired, spy))

    assert response == {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
    [(queue_url, receipt, seconds)] = spy.visibility
    assert (queue_url, receipt) == (aws.heartbeat_queue, record["receiptHandle"])
    assert 1 <= seconds <= max(1, wired.settings.lease_seconds // 3), "back within a third of the lease"
    assert json.loads(_receive_ticket(aws)["Records"][0]["body"]) == json.loads(record["body"])


def test_no_extend_starts_past_the_invocations_deadline_and_the_rest_is_carried_on(
    aws: Aws, flaky: FlakyEngine, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a batch of 10 tickets of 30 jobs each and extends that take at least 250 ms, in an
    invocation with 20 s left: its engine calls must stop 8.5 s in, where at most 272 extends fit
    (8 at a time, WORKERLESS_EXTEND_CONCURRENCY's default) however slow the machine
    THEN the heartbeat stops starting extends at its deadline (before 300 of them) and sends every
    job it did not reach on in a ticket due in a second: each job is in exactly one ticket."""
    jobs = [flaky.add_job("generate-report", {}) for _ in range(300)]
    activated = flaky.activate([Demand("generate-report", 300)], 60)
    assert len(activated) == len(jobs)
    flaky.extend_pause = 0.25
    spy = SpyQueues(wired.queues)
    wiring = _spied(wired, spy)
    records = []
    for n in range(10):
        chunk = activated[n * 30 : (n + 1) * 30]
        body = _ticket(*((j, j.lease_expires_at) for j in chunk))
        records.append({"messageId": f"t{n}", "receiptHandle": f"r{n}", "body": body, "attributes": {}})

    response = entrypoints.heartbeat({"Records": records}, FakeContext(remaining_ms=20_000), wiring=wiring)

    assert response == {"batchItemFailures": []}
    extended = sum(flaky.extensions.values())
    assert 0 < extended < 300, f"{extended} extends: the heartbeat did not stop at its deadline"
    carried = [(job["ref"]["job_id"], delay) for body, delay in spy.sent for job in body["jobs"]]
    assert sorted(job_id for job_id, _ in carried) == sorted(j.ref.job_id for j in activated)
    unvisited = [job_id for job_id, delay in carried if job_id not in flaky.extensions]
    assert len(unvisited) == 300 - extended
    assert all(delay == 1 for job_id, delay in carried if job_id in unvisited)


def test_a_round_extends_its_leases_side_by_side(
    aws: Aws, wire: Callable[..., Wiring], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a ticket of 4 jobs and an engine whose extend returns only once 4 extends are in flight
    at once (a barrier; one after another, the first would wait out the barrier's bound and fail)
    THEN every lease is extended in the one round and the ticket goes on with all 4."""
    barrier = threading.Barrier(4, timeout=20)

    @dataclass
    class TogetherEngine(FakeEngine):
        def extend(self, ref: JobRef, lease_seconds: int) -> float:
            barrier.wait()  # BrokenBarrierError (not an engine error) fails the round loudly
            return super().extend(ref, lease_seconds)

    engine = TogetherEngine()
    for _ in range(4):
        engine.add_job("generate-report", {})
    activated = engine.activate([Demand("generate-report", 4)], 60)
    wiring = wire(engine=engine)
    spy = SpyQueues(wiring.queues)
    # Due now: expiring within two thirds of the lease.
    body = _ticket(*((j, time.time() + 1) for j in activated))

    sent = _run(body, wiring, spy)

    assert engine.extensions == {j.ref.job_id: 1 for j in activated}
    assert [sorted(e.ref.job_id for e in t.entries) for t in sent] == [sorted(j.ref.job_id for j in activated)]
    assert not barrier.broken


def test_one_extension_at_a_time_when_so_configured(
    aws: Aws, wire: Callable[..., Wiring], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN WORKERLESS_EXTEND_CONCURRENCY=1 (an engine that rate-limits concurrent calls)
    THEN no two extends of a round are ever in flight at once, and every lease is extended."""
    monkeypatch.setenv("WORKERLESS_EXTEND_CONCURRENCY", "1")
    in_flight = {"now": 0, "most": 0}
    lock = threading.Lock()

    @dataclass
    class CountingEngine(FakeEngine):
        def extend(self, ref: JobRef, lease_seconds: int) -> float:
            with lock:
                in_flight["now"] += 1
                in_flight["most"] = max(in_flight["most"], in_flight["now"])
            try:
                return super().extend(ref, lease_seconds)
            finally:
                with lock:
                    in_flight["now"] -= 1

    engine = CountingEngine()
    for _ in range(6):
        engine.add_job("generate-report", {})
    activated = engine.activate([Demand("generate-report", 6)], 60)
    body = _ticket(*((j, time.time() + 1) for j in activated))

    wiring = wire(engine=engine)  # its settings read from the environment above
    _run(body, wiring, SpyQueues(wiring.queues))

    assert engine.extensions == {j.ref.job_id: 1 for j in activated}
    assert in_flight["most"] == 1


# ------------------------------------------------------------------------- whole-invocation failures


def test_a_secret_read_that_fails_brings_every_ticket_back_in_a_third_of_a_lease(
    aws: Aws, flaky: FlakyEngine, long_lease: None, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a cold heartbeat container whose engine secret read fails (Secrets Manager throttles
    past botocore's retries) for a batch of two tickets
    THEN each ticket is a batch item failure made visible again in a third of the lease (not the
    queue's visibility timeout, by which every lease in it would have lapsed), and the secret is
    read once for the batch, not once per ticket."""
    from workerless.aws import secrets
    from workerless.errors import ConfigurationError

    reads = []

    def throttled(*args: Any, **kwargs: Any) -> dict[str, str]:
        reads.append(1)
        raise ConfigurationError(
            "cannot read the engine secret named by WORKERLESS_SECRET_ARN: ThrottlingException",
            key="WORKERLESS_SECRET_ARN",
        )

    monkeypatch.setattr(secrets, "load_engine_values", throttled)
    for _ in range(2):
        flaky.add_job("charge-payment", {"orderId": "1", "amount": 1})
    jobs = flaky.activate([Demand("charge-payment", 2)], 60)
    records = [
        {"messageId": f"t{n}", "receiptHandle": f"r{n}", "body": _ticket((job, job.lease_expires_at)), "attributes": {}}
        for n, job in enumerate(jobs)
    ]
    spy = SpyQueues(wired.queues)
    cold = Wiring(settings=wired.settings, store=wired.store, queues=spy)  # no engine yet

    response = entrypoints.heartbeat({"Records": records}, FakeContext(), wiring=cold)

    assert response == {"batchItemFailures": [{"itemIdentifier": "t0"}, {"itemIdentifier": "t1"}]}
    assert [(receipt, seconds) for _, receipt, seconds in spy.visibility] == [("r0", 20), ("r1", 20)]
    assert len(reads) == 1, "one secret read per invocation, not one per ticket"


def test_the_heartbeat_reads_its_records_without_their_stored_results(
    aws: Aws, flaky: FlakyEngine, wired: Wiring
) -> None:
    """GIVEN a job whose stored result (300 KB, inline in its record) is owed to the engine
    THEN the round's read of the ticket's records leaves the result out (a ticket of 100 such records
    would be 30 MB through a 256 MB function), knowing only that one is stored; and the heartbeat
    still re-reports exactly that result, read whole for the one job that owes it."""
    flaky.add_job("charge-payment", {"orderId": "1", "amount": 1})
    [job] = flaky.activate([Demand("charge-payment", 1)], 60)
    store = wired.store
    big = Outcome.complete({"blob": "y" * 300_000})
    assert store.claim(job.record_key, owner="o", claim_seconds=60, job_type="charge-payment") == (True, None)
    assert store.store_outcome(job.record_key, owner="o", outcome=big, job_type="charge-payment") is None
    assert store.mark_owed(job.record_key, receipt=None)

    [seen] = store.get_many([job.record_key]).values()
    assert seen.outcome is None and seen.outcome_ref is None, "the result's body is not read"
    assert seen.has_outcome and seen.report_owed and seen.status is Status.STORED
    whole = store.get(job.record_key)
    assert whole is not None and whole.outcome == big

    _run(_ticket((job, time.time() + 60)), wired, SpyQueues(wired.queues))

    assert flaky.reports[job.ref.job_id] == [big]
    after = store.get(job.record_key)
    assert after is not None and after.status is Status.REPORTED


# ------------------------------------------------------------------------------- lease_lost noise


@dataclass
class RefusingEngine(FakeEngine):
    """The in-memory engine refusing every extension 409, as an engine refuses the renewal of a job
    whose result it is just accepting (StageNext: a succeeded execution)."""

    def extend(self, ref: JobRef, lease_seconds: int) -> float:
        from workerless.errors import LeaseLostError

        raise LeaseLostError("extend answered 409", engine="fake", job_id=ref.job_id, status=409)


def test_a_refused_renewal_of_a_job_whose_result_is_stored_is_not_a_lost_lease(
    aws: Aws, wire: Callable[..., Wiring]
) -> None:
    """GIVEN two jobs whose renewal the engine refuses (409): one whose handler has stored its
    result (its report in flight), one still running
    THEN only the running one is marked LOST and counted as a lost lease; the finished one's
    record stays STORED and no ``lease_lost`` is emitted for it (against a slow StageNext the
    heartbeat emitted 19 of them for 18 completed jobs)."""
    from workerless import observability

    engine = RefusingEngine()
    wiring = wire(engine=engine)
    engine.add_job("charge-payment", {"orderId": "1", "amount": 1})
    engine.add_job("charge-payment", {"orderId": "2", "amount": 2})
    finished, running = engine.activate([Demand("charge-payment", 2)], 60)
    store = wiring.store
    for job in (finished, running):
        assert store.claim(job.record_key, owner="o", claim_seconds=60, job_type="charge-payment") == (True, None)
    assert (
        store.store_outcome(finished.record_key, owner="o", outcome=Outcome.complete({}), job_type="charge-payment")
        is None
    )
    lost: list[str] = []

    def listen(job_type: str, event: str, fields: Any) -> None:
        if event == "lease_lost":
            lost.append(str(fields.get("job_id")))

    # process_ticket called directly, outside an entry point: the listener for this context.
    with observability.listening([listen]):
        _run(_ticket((finished, time.time() + 1), (running, time.time() + 1)), wiring, SpyQueues(wiring.queues))

    assert lost == [running.ref.job_id], "a lost lease is counted only for the job still running"
    kept = store.get(finished.record_key)
    assert kept is not None and kept.status is Status.STORED
    marked = store.get(running.record_key)
    assert marked is not None and marked.status is Status.LOST
