"""Poller shards at the poller's entry point, on moto's SQS and DynamoDB with an in-memory engine:
each shard's routes are polled under the shard's own lock and tick chain, never by another shard.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from workerless import entrypoints, observability
from workerless._poller.poller_lock import LOCK_KEY, PollerLock
from workerless.aws.dynamo import DynamoState
from workerless.aws.sqs import Queues
from workerless.testing import FakeEngine
from workerless.wiring import Wiring

from tests.functional.aws import Aws, FakeContext, moto_aws

MAX = 4
#: charge-payment in the main shard, the other two in shard "reports".
SHARDS = {"charge-payment": "", "send-receipt": "reports", "generate-report": "reports"}


@pytest.fixture
def sharded(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    """The pipeline's queues and table, a 20 s tick chain, routes of MaxInFlight 4 in two shards."""
    monkeypatch.setenv("WORKERLESS_LEASE_SECONDS", "60")
    with moto_aws(monkeypatch, max_in_flight=MAX, tick_seconds=20) as env:
        routes = [{"type": t, "queue": env.queues[t], "max": MAX, "shard": s} for t, s in SHARDS.items()]
        monkeypatch.setenv("WORKERLESS_ROUTES", json.dumps(routes))
        yield env


@pytest.fixture
def fake(sharded: Aws) -> FakeEngine:
    engine = FakeEngine()
    for job_type in SHARDS:
        for n in range(3):
            engine.add_job(job_type, {"orderId": f"{job_type}-{n}", "amount": 5})
    return engine


@pytest.fixture
def wired(sharded: Aws, fake: FakeEngine) -> Iterator[Wiring]:
    """The poller's wiring: the environment ``sharded`` set, around ``fake``; passed to each call."""
    wiring = Wiring(engine=fake)
    yield wiring
    wiring.close()


def state(wiring: Wiring) -> DynamoState:
    return DynamoState(wiring.store)


def leased(engine: FakeEngine, job_type: str) -> int:
    return sum(1 for job in engine.jobs.values() if job.state == "leased" and job.type == job_type)


def tick(shard: str = "", chain: str = "c1") -> dict[str, Any]:
    body: dict[str, Any] = {"chain": chain, "seq": 0}
    if shard:
        body["shard"] = shard
    return {"messageId": f"tick-{shard or 'main'}", "body": json.dumps(body)}


def sent_types(lock_item: dict[str, Any] | None) -> set[str]:
    assert lock_item is not None
    return {t for t in (lock_item.get("sent") or {}) if not t.startswith("#")}  # "#live": the tracked jobs


def test_the_watchdog_starts_every_shards_chain_and_polls_each_under_its_own_lock(
    sharded: Aws, fake: FakeEngine, wired: Wiring
) -> None:
    """GIVEN routes in two shards WHEN the watchdog runs THEN each shard's tick chain is started,
    every route is polled, each shard's lock item counts only its own routes' sends, and the
    invocation's metrics count both shards' jobs (each shard polls on a thread of its own)."""
    documents: list[dict[str, Any]] = []
    observability.configure(metrics=True, sink=lambda line: documents.append(json.loads(line)))
    try:
        report = entrypoints.poller({}, FakeContext(), wiring=wired)
    finally:
        observability.configure(metrics=None, sink=None)

    assert report["activated"] == 9, "both shards polled: every job of every type taken"
    assert sum(v for doc in documents for v in doc.get("JobsActivated", [])) == 9, documents
    assert state(wired).get("ticker") is not None and state(wired).get("ticker#reports") is not None
    ticker = sharded.sqs.get_queue_attributes(QueueUrl=sharded.ticker_queue, AttributeNames=["All"])["Attributes"]
    assert int(ticker["ApproximateNumberOfMessagesDelayed"]) >= 2, "a tick per shard (relays may follow)"
    assert sent_types(state(wired).get(LOCK_KEY)) == {"charge-payment"}
    assert sent_types(state(wired).get("poller-lock#reports")) == {"send-receipt", "generate-report"}


def test_a_tick_polls_only_its_shards_routes(sharded: Aws, fake: FakeEngine, wired: Wiring) -> None:
    """GIVEN jobs of every type WHEN a tick of shard "reports" arrives THEN only that shard's types are
    taken; the main shard's jobs wait for the main shard's own tick."""
    report = entrypoints.poller({"Records": [tick("reports")]}, FakeContext(), wiring=wired)

    assert report["activated"] == 6
    assert leased(fake, "charge-payment") == 0
    assert leased(fake, "send-receipt") == 3 and leased(fake, "generate-report") == 3
    assert state(wired).get("ticker#reports") is not None and state(wired).get("ticker") is None, "only its chain moved"

    report = entrypoints.poller({"Records": [tick("")]}, FakeContext(), wiring=wired)
    assert report["activated"] == 3 and leased(fake, "charge-payment") == 3


def test_a_shard_whose_lock_is_held_does_not_hold_up_another(sharded: Aws, fake: FakeEngine, wired: Wiring) -> None:
    """GIVEN another invocation holds shard "reports"' lock WHEN one batch holds a tick of each shard
    THEN the main shard polls its route and "reports" polls nothing (its lock is held)."""
    other = PollerLock(state(wired), seconds=30, window=2, key="poller-lock#reports")
    assert other.acquire()

    report = entrypoints.poller({"Records": [tick("reports"), tick("")]}, FakeContext(), wiring=wired)

    assert report["lock_held"] == 1, "one shard found its lock held"
    assert report["activated"] == 3
    assert leased(fake, "charge-payment") == 3
    assert leased(fake, "send-receipt") == 0 and leased(fake, "generate-report") == 0


def test_a_tick_of_a_shard_no_route_names_ends_its_chain_and_polls_nothing(
    sharded: Aws, fake: FakeEngine, wired: Wiring
) -> None:
    """GIVEN a tick of a shard that no route names any more (routes moved in a stack update)
    WHEN it arrives THEN its chain is not continued and nothing is polled."""
    report = entrypoints.poller({"Records": [tick("gone")]}, FakeContext(), wiring=wired)

    assert report == {}
    assert state(wired).get("ticker#gone") is None
    assert sum(leased(fake, t) for t in SHARDS) == 0


def test_a_busy_shard_relays_to_itself(
    sharded: Aws, fake: FakeEngine, wired: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GIVEN a shard whose routes fill while work flows WHEN it relays THEN the relay names the shard,
    and the relayed invocation takes that shard's lock over."""
    relays: list[dict[str, Any]] = []
    original = Queues.send

    def send(self: Queues, queue_url: str, body: Any, *, delay_seconds: int = 0) -> None:
        if isinstance(body, dict) and "relay" in body:
            relays.append(body)
        original(self, queue_url, body, delay_seconds=delay_seconds)

    monkeypatch.setattr(Queues, "send", send)
    for n in range(3, 8):
        fake.add_job("send-receipt", {"orderId": f"more-{n}", "amount": 5})

    entrypoints.poller({"Records": [tick("reports")]}, FakeContext(), wiring=wired)

    assert relays and all(r.get("shard") == "reports" for r in relays)
    relayed = entrypoints.poller(
        {"Records": [{"messageId": "r1", "body": json.dumps(relays[-1])}]}, FakeContext(), wiring=wired
    )
    assert "lock_held" not in relayed, "the relay hands the shard's own lock on"
    assert leased(fake, "charge-payment") == 0, "the main shard was never polled"
