"""Jobs larger than 256 KiB (issue 10, item 3): SQS takes a message up to the queue's
MaximumMessageSize (1 MiB, SQS's default and maximum since 2025), so a 300 KB job the engine hands
out is queued and runs; batches are sized to the queue's limit (at most 10 entries and the limit in
all); and a StageNext stage too large to carry at all is failed under its lease — never acknowledged
with a result the engine discards, which would lose it. (Jobs over the queue's limit go through the
claim check: tests/functional/runtime/core/test_claim_check.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from workerless._core.claimcheck import payload_limit
from workerless.aws.sqs import Queues
from workerless.engines import ENGINE_NAMES
from workerless_devkit.pytest_plugin import EmulatorFactory

from tests.functional.pipeline import topology, wait_final

#: Over the old 256 KiB cap, well under 1 MiB once wrapped in a job message.
BLOB = "x" * 300_000


class SpyClient:
    """An SQS client that notes every SendMessageBatch it forwards."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.batches: list[list[int]] = []

    def send_message_batch(self, **kwargs: Any) -> Any:
        self.batches.append([len(e["MessageBody"].encode()) for e in kwargs["Entries"]])
        return self.inner.send_message_batch(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def sqs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        yield boto3.client("sqs", region_name="us-east-1")


def drain(sqs: Any, url: str) -> list[str]:
    bodies: list[str] = []
    while True:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not messages:
            return bodies
        for message in messages:
            bodies.append(message["Body"])
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def test_batches_are_sized_to_the_queues_maximum_message_size(sqs: Any) -> None:
    """GIVEN a queue whose MaximumMessageSize is 1 MiB, read with the depth the poller asks for
    THEN five 300 KB messages are all sent, in batches of at most 1 MiB in all, and twelve small
    ones in batches of at most ten."""
    url = sqs.create_queue(QueueName="big", Attributes={"MaximumMessageSize": "1048576"})["QueueUrl"]
    spy = SpyClient(sqs)
    queues = Queues(spy)
    assert queues.in_flight(url) == 0

    bodies = [f"{i}{BLOB}" for i in range(5)]
    assert queues.send_batch(url, bodies) == []
    assert len(spy.batches) >= 2
    assert all(sum(sizes) <= 1_048_576 for sizes in spy.batches), spy.batches
    assert sorted(drain(sqs, url)) == sorted(bodies)

    spy.batches.clear()
    assert queues.send_batch(url, [str(i) for i in range(12)]) == []
    assert sorted(len(sizes) for sizes in spy.batches) == [2, 10]


def test_a_poll_too_big_for_one_call_sends_its_calls_side_by_side(sqs: Any) -> None:
    """GIVEN 25 job messages for one queue (three SendMessageBatch calls) and a client where the
    second call is refused as a whole THEN the calls overlap (a barrier of 3 only calls made at once
    pass; no wall time), every message of the two good calls is queued, and exactly the refused
    call's entries come back as failures, by their own index."""
    import threading

    url = sqs.create_queue(QueueName="wide")["QueueUrl"]
    barrier = threading.Barrier(3)

    class Overlapping(SpyClient):
        def send_message_batch(self, **kwargs: Any) -> Any:
            barrier.wait(120)  # generous: only calls made one after another would wait it out
            if kwargs["Entries"][0]["Id"] == "10":
                raise ClientError({"Error": {"Code": "InternalError", "Message": "no"}}, "SendMessageBatch")
            return super().send_message_batch(**kwargs)

    queues = Queues(Overlapping(sqs))
    assert queues.in_flight(url) == 0
    failures = queues.send_batch(url, [f"job-{i}" for i in range(25)])

    assert [f.index for f in failures] == list(range(10, 20))
    assert all("InternalError" in f.reason and not f.oversized for f in failures)
    assert sorted(drain(sqs, url)) == sorted(f"job-{i}" for i in [*range(10), *range(20, 25)])


def test_a_message_over_the_queues_own_limit_is_oversized_naming_it(sqs: Any) -> None:
    """A queue set to 256 KiB refuses a 300 KB job for good (the reason names the limit); the small
    job beside it is sent."""
    url = sqs.create_queue(QueueName="small", Attributes={"MaximumMessageSize": "262144"})["QueueUrl"]
    queues = Queues(sqs)
    [failure] = queues.send_batch(url, [BLOB, "small"])
    assert failure.index == 0 and failure.oversized
    assert "MaximumMessageSize is 262144" in failure.reason
    assert drain(sqs, url) == ["small"]


def test_an_unknown_limit_is_never_a_reason_to_fail_a_job_for_good(sqs: Any) -> None:
    """GIVEN the queue's MaximumMessageSize cannot be read THEN a message over the fallback is not
    sent but not called oversized either: the poller hands the job back instead of failing it."""
    from workerless.aws.sqs import FALLBACK_MESSAGE_BYTES

    url = sqs.create_queue(QueueName="unread")["QueueUrl"]

    class Unreadable(SpyClient):
        def get_queue_attributes(self, **kwargs: Any) -> Any:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "GetQueueAttributes")

    [failure] = Queues(Unreadable(sqs)).send_batch(url, ["y" * (FALLBACK_MESSAGE_BYTES + 1)])
    assert not failure.oversized
    assert "could not be read" in failure.reason


# ------------------------------------------------------------------------------------------------
# Through the local topology, on each engine


@pytest.fixture
def engine(request: pytest.FixtureRequest, workerless_emulator: EmulatorFactory) -> tuple[Path, Any]:
    """(env file, emulator) for the engine named by the test's parameter, served on loopback."""
    name = request.param
    running = workerless_emulator(name, lease_seconds=6) if name == "stagenext" else workerless_emulator(name)
    return running.env_file, running.emulator


@pytest.mark.parametrize("engine", ENGINE_NAMES, indirect=True)
def test_a_300_kb_job_completes_through_the_local_topology(engine: tuple[Path, Any]) -> None:
    """GIVEN a send-receipt job with 300 KB of variables (the engines take it: Sheptra's cap is 1 MB)
    WHEN template.yaml's topology runs it
    THEN it is queued, run once and completed — not failed for good at a 256 KiB cap (Sheptra,
    node-flow) or lost (StageNext)."""
    env_file, emu = engine
    job_id = emu.create_job("send-receipt", {"orderId": "big", "blob": BLOB})

    with topology(env_file, job_visibility_seconds=10) as topo:
        wait_final(topo, emu.job_state, [job_id], 40)

    state = emu.job_state(job_id)
    assert state["state"] == "completed", state.get("error_message")
    assert state["output"] == {"receiptSent": True}
    assert state["attempts"] == 1


def test_a_stagenext_stage_larger_than_workerless_carries_is_failed_under_its_lease_not_lost(
    workerless_emulator: EmulatorFactory,
) -> None:
    """GIVEN a StageNext stage whose input (34 MB) is over what workerless carries, even through its
    claim check (WORKERLESS_MAX_PAYLOAD_BYTES, 10 MiB at 256 MB; a 1.2 MB stage goes through the claim check)
    WHEN the poller pulls it
    THEN it acquires the stage's lease and fails it for good with the size and the limit in the
    reason: the emulator's consumer, which fences results by the Running execution, applies that
    result, and the delivery is acknowledged only after it. (Posted without the lease, the result was
    discarded and the acknowledged delivery never came back: the stage stayed dispatched for ever.)"""
    running = workerless_emulator("stagenext", lease_seconds=6)
    emu, env_file = running.emulator, running.env_file
    stage_id = emu.create_job("send-receipt", {"orderId": "huge", "blob": "z" * 34_000_000}, retries=3)

    with topology(env_file, job_visibility_seconds=10) as topo:
        wait_final(topo, emu.job_state, [stage_id], 40)

    state = emu.job_state(stage_id)
    assert state["state"] == "failed"
    assert f"workerless carries at most {payload_limit(256)} bytes" in (state["error_message"] or "")
    [result] = state["results"]
    assert result["applied"] and not result["discarded"] and result["retryable"] is False
    assert len(state["executions"]) == 1 and state["retries"] == 3, "failed for good, not retried"
    events = [h["event"] for h in state["history"]]
    assert events.index("lease_acquired") < events.index("result_accepted") < events.index("acked")
    assert [a["status"] for a in state["acks"]] == [200]
