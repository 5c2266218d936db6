"""The poller lock at the poller's entry point, on moto's SQS and DynamoDB with an in-memory engine:
an invocation that finds the lock held keeps the tick chain alive, finishes a dead poller's batch
and polls nothing; a busy invocation releases the lock (and hands on what it sent) before it relays.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from workerless import entrypoints
from workerless._core.deadline import MARGIN_SECONDS
from workerless._core.model import Demand
from workerless._poller import sendlog
from workerless._poller.intent import IntentLog
from workerless._poller.poller_lock import LOCK_KEY, PollerLock
from workerless.aws.dynamo import DynamoState
from workerless.aws.sqs import Queues
from workerless.testing import FakeEngine
from workerless.wiring import Wiring

from tests.functional.aws import Aws, FakeContext, moto_aws

MAX = 4


@pytest.fixture
def ticking(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    """The pipeline's queues and table with a 20 s tick chain and routes of MaxInFlight 4."""
    monkeypatch.setenv("WORKERLESS_LEASE_SECONDS", "60")
    with moto_aws(monkeypatch, max_in_flight=MAX, tick_seconds=20) as env:
        yield env


@pytest.fixture
def fake(ticking: Aws) -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def wired(ticking: Aws, fake: FakeEngine) -> Iterator[Wiring]:
    """The poller's wiring: the environment ``ticking`` set, around ``fake``; passed to each call."""
    wiring = Wiring(engine=fake)
    yield wiring
    wiring.close()


def state(wiring: Wiring) -> DynamoState:
    return DynamoState(wiring.store)


def tick_event(chain: str = "c1", seq: int = 0) -> dict[str, Any]:
    return {"Records": [{"messageId": "m1", "body": json.dumps({"chain": chain, "seq": seq})}]}


def leased(engine: FakeEngine) -> int:
    return sum(1 for job in engine.jobs.values() if job.state == "leased")


def test_an_invocation_that_finds_the_lock_held_continues_the_tick_and_polls_nothing(
    ticking: Aws, fake: FakeEngine, wired: Wiring
) -> None:
    """GIVEN another invocation holds the poller lock WHEN a tick arrives
    THEN the next tick is sent, the engine is not polled; once the lock is released, the next
    invocation polls."""
    for n in range(6):
        fake.add_job("charge-payment", {"orderId": str(n), "amount": 5})
    other = PollerLock(state(wired), seconds=30, window=2)
    assert other.acquire()

    report = entrypoints.poller(tick_event(), FakeContext(), wiring=wired)

    assert report["lock_held"] == 1
    assert report.get("polls", 0) == 0
    assert leased(fake) == 0, "nothing was taken from the engine"
    ticker = ticking.sqs.get_queue_attributes(QueueUrl=ticking.ticker_queue, AttributeNames=["All"])["Attributes"]
    assert int(ticker["ApproximateNumberOfMessagesDelayed"]) == 1, "the tick chain goes on"

    other.release()
    report = entrypoints.poller({}, FakeContext(), wiring=wired)
    assert "lock_held" not in report
    assert report["activated"] == MAX
    assert leased(fake) == MAX


def test_a_dead_pollers_batch_is_handed_back_even_while_its_lock_still_blocks_polling(
    ticking: Aws, fake: FakeEngine, wired: Wiring
) -> None:
    """GIVEN a poller that took the lock, activated jobs, wrote its intent and died
    WHEN a tick arrives before the lock expires THEN that tick hands the dead poller's jobs back."""
    for n in range(3):
        fake.add_job("charge-payment", {"orderId": str(n), "amount": 5})
    dead = PollerLock(state(wired), seconds=30, window=2)
    assert dead.acquire()
    jobs = fake.activate([Demand("charge-payment", 3)], 60)
    assert IntentLog(dead, lease_seconds=60, clock=lambda: time.time() - 60).write(jobs)
    dead_until = state(wired).get(LOCK_KEY)["until"]

    report = entrypoints.poller(tick_event(), FakeContext(), wiring=wired)

    assert report["lock_held"] == 1
    assert report["released"] == 3
    assert leased(fake) == 0
    current = state(wired).get(LOCK_KEY)
    assert current is not None and current["holder"] == dead.owner, "the dead holder's lock waits for its expiry"
    assert current["until"] == dead_until and not current.get("batches"), "only its batch was taken out"


def test_a_busy_invocation_hands_its_lock_and_sends_on_with_its_relay(
    ticking: Aws, fake: FakeEngine, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN work that keeps the poller busy (the route fills up while jobs keep flowing)
    WHEN it relays THEN the lock is not released: the relay carries its version and what was
    dispatched, the relayed invocation takes the lock over (and counts those sends), a second
    delivery of the same relay does not poll, and a tick meanwhile finds the lock held."""
    for n in range(10):
        fake.add_job("charge-payment", {"orderId": str(n), "amount": 5})
    relays: list[dict[str, Any]] = []
    seen_at_relay: list[dict[str, Any] | None] = []
    original = Queues.send

    def send(self: Queues, queue_url: str, body: Any, *, delay_seconds: int = 0) -> None:
        if isinstance(body, dict) and "relay" in body:
            seen_at_relay.append(state(wired).get(LOCK_KEY))
            relays.append({"body": body, "delay": delay_seconds})
        original(self, queue_url, body, delay_seconds=delay_seconds)

    monkeypatch.setattr(Queues, "send", send)

    first = entrypoints.poller({}, FakeContext(), wiring=wired)

    assert first["dispatched"] == MAX
    assert len(relays) == 1, "the route filled while work was flowing: one relay"
    lock_then = seen_at_relay[0]
    assert lock_then is not None and lock_then["holder"] is not None, "not released: the relay carries it"
    token = relays[0]["body"]["lock"]
    assert token["version"] == lock_then["version"]
    assert sum(n for _, n in sendlog.entries(token["sent"]["charge-payment"])) == MAX, "the sends are handed on"
    assert relays[0]["delay"] >= 1, "a relay after an empty or full poll waits instead of the Lambda sleeping"

    record = {"messageId": "r1", "body": json.dumps(relays[0]["body"])}
    relayed = entrypoints.poller({"Records": [record]}, FakeContext(), wiring=wired)
    assert "lock_held" not in relayed
    duplicate = entrypoints.poller({"Records": [{**record, "messageId": "r2"}]}, FakeContext(), wiring=wired)
    assert duplicate.get("lock_held") == 1, "a second delivery of the relay finds the version moved"
    assert leased(fake) == MAX, "the route is full: the relayed invocation takes nothing more"


def test_an_engine_that_cannot_be_built_does_not_keep_the_lock(
    ticking: Aws, fake: FakeEngine, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN the engine secret unreadable for one invocation (Secrets Manager throttling: the engine
    cannot be built) WHEN it has taken the poller lock THEN it fails, and releases the lock: the
    next invocation polls at once, not after the lock's 30 s expiry."""
    from workerless.errors import SecretReadError

    fake.add_job("charge-payment", {"orderId": "1", "amount": 5})
    working = Wiring.observed_engine

    def unreadable(self: Wiring) -> Any:
        raise SecretReadError("Secrets Manager could not read the engine secret now: ThrottlingException")

    monkeypatch.setattr(Wiring, "observed_engine", property(unreadable))
    with pytest.raises(SecretReadError):
        entrypoints.poller({}, FakeContext(), wiring=wired)
    monkeypatch.setattr(Wiring, "observed_engine", working)

    report = entrypoints.poller({}, FakeContext(), wiring=wired)
    assert "lock_held" not in report, "the failed invocation left the lock held"
    assert report["activated"] == 1


def test_no_aws_call_of_the_poller_starts_past_its_invocations_deadline(
    ticking: Aws, fake: FakeEngine, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a poller invocation whose engine answers after the invocation's deadline (its remaining
    time less the margin) THEN none of its AWS calls starts past that deadline (botocore's retries
    included): the jobs it took are not queued by a process Lambda is about to stop, but handed back
    or left to the next invocation's recovery (issue 26 item 5: the poller's AWS calls had no deadline)."""
    from tests.functional.aws import FakeContext as Context

    for n in range(3):
        fake.add_job("charge-payment", {"orderId": str(n), "amount": 5})
    slow_activate = fake.activate

    def late(*args: Any, **kwargs: Any) -> Any:
        time.sleep(1.5)  # the deadline below is 1 s away (a lower bound: the point is being past it)
        return slow_activate(*args, **kwargs)

    monkeypatch.setattr(fake, "activate", late)
    try:
        entrypoints.poller({}, Context(remaining_ms=int((MARGIN_SECONDS + 1.0) * 1000)), wiring=wired)
    except Exception as exc:  # noqa: BLE001 - failing the invocation is one acceptable end; queuing is not
        print(f"the invocation failed: {type(exc).__name__}: {exc}")
    queue = ticking.sqs.get_queue_attributes(QueueUrl=ticking.queues["charge-payment"], AttributeNames=["All"])
    attributes = queue["Attributes"]
    queued = int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])
    assert queued == 0, f"{queued} jobs were queued past the invocation's deadline"
    assert leased(fake) == 0, "the jobs it took went back to the engine"
