"""Typed (pydantic) and async handlers: input validated once before the user code runs, a returned
model reported as variables, async handlers run to completion, and a batch's jobs run concurrently."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field
from workerless import Job, job_handler
from workerless._core.batch import SqsRecord, process_batch
from workerless._handler.typed import spec_of
from workerless.testing import assert_completed, assert_failed, run_handler

from tests.unit.runtime.core.test_batch import sqs_record


class Order(BaseModel):
    order_id: str = Field(alias="orderId")
    amount: float = Field(gt=0)


class Receipt(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    receipt_id: str = Field(alias="receiptId")
    total: float


@job_handler("typed")
def typed(job: Job[Order]) -> Receipt:
    return Receipt(receipt_id=f"r_{job.input.order_id}", total=job.input.amount)


def test_a_typed_handler_completes_with_its_model_dumped_by_alias() -> None:
    outcome = run_handler(typed, {"orderId": "7", "amount": 12.5})
    assert_completed(outcome, {"receiptId": "r_7", "total": 12.5})


def test_invalid_input_fails_terminally_naming_every_bad_field_before_the_handler_runs() -> None:
    ran: list[Job[Any]] = []

    @job_handler("strict")
    def handler(job: Job[Order]) -> None:
        ran.append(job)

    outcome = run_handler(handler, {"amount": -3, "extra": 1}, retries=5)
    assert_failed(outcome, retries=0, terminal=True)
    assert outcome.message == (
        "invalid input for Order: orderId: Field required; amount: Input should be greater than 0"
    )
    assert ran == [], "the handler never sees input that does not fit its model"


def test_the_explicit_input_argument_wins_and_plain_jobs_keep_dicts() -> None:
    @job_handler("explicit", input=Order)
    def explicit(job: Job) -> dict[str, Any]:  # type: ignore[type-arg]
        return {"type": type(job.input).__name__, "raw": job.variables}

    @job_handler("plain")
    def plain(job: Job) -> dict[str, Any]:  # type: ignore[type-arg]
        return {"input": job.input, "raw": job.variables}

    assert run_handler(explicit, {"orderId": "1", "amount": 2}).variables == {
        "type": "Order",
        "raw": {"orderId": "1", "amount": 2},
    }
    assert run_handler(plain, {"a": 1}).variables == {"input": None, "raw": {"a": 1}}
    with pytest.raises(TypeError, match="pydantic model"):
        job_handler("bad", input=dict)(plain)  # type: ignore[arg-type]


def test_the_input_model_is_read_once_per_function() -> None:
    def handler(job: Job[Order]) -> None:
        return None

    assert spec_of(handler) is spec_of(handler)
    assert spec_of(handler).input_model is Order
    assert spec_of(handler).is_async is False


def test_an_async_handler_runs_with_lease_checks_and_logs() -> None:
    @job_handler("async-typed")
    async def handler(job: Job[Order]) -> Receipt:
        await asyncio.sleep(0)
        if job.lease_lost():
            raise RuntimeError("lease lost")
        job.log(f"charged {job.input.order_id}")
        return Receipt(receipt_id=job.input.order_id, total=job.input.amount)

    logs: list[dict[str, Any]] = []
    outcome = run_handler(handler, {"orderId": "9", "amount": 1}, logs=logs)
    assert_completed(outcome, {"receiptId": "9", "total": 1.0})
    assert [line["message"] for line in logs] == ["charged 9"]
    lost = run_handler(handler, {"orderId": "9", "amount": 1}, lease_lost=True)
    assert_failed(lost, message="lease lost")


def test_an_async_route_defaults_to_a_concurrent_batch_and_a_sync_route_does_not() -> None:
    @job_handler("a")
    async def a(job: Job) -> None:  # type: ignore[type-arg]
        return None

    @job_handler("s")
    def s(job: Job) -> None:  # type: ignore[type-arg]
        return None

    @job_handler("b", concurrency=3)
    async def b(job: Job) -> None:  # type: ignore[type-arg]
        return None

    assert (a.processor.concurrency, s.processor.concurrency, b.processor.concurrency) == (10, 1, 3)
    with pytest.raises(ValueError, match="at least 1"):
        job_handler("c", concurrency=0)(a)


def test_a_concurrent_batch_overlaps_its_jobs_and_answers_exactly_the_failed_ones() -> None:
    """Concurrency proven by events, not time: every record must have started before any may end
    (a barrier of 4 that a one-at-a-time loop could never pass), and the failure list is exactly
    the record that raised, in batch order."""
    events: list[tuple[str, str]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def handle(record: SqsRecord) -> None:
        with lock:
            events.append(("start", record.message_id))
        barrier.wait(timeout=120)  # generous: only a broken (sequential) run waits it out
        with lock:
            events.append(("end", record.message_id))
        if record.message_id == "m2":
            raise RuntimeError("owed")

    event = {"Records": [sqs_record(f"m{i}") for i in range(1, 5)]}
    assert process_batch(event, handle, concurrency=4) == {"batchItemFailures": [{"itemIdentifier": "m2"}]}
    kinds = [kind for kind, _ in events]
    assert kinds == ["start"] * 4 + ["end"] * 4
    assert {m for _, m in events} == {"m1", "m2", "m3", "m4"}


def test_a_model_annotation_that_cannot_be_resolved_is_refused_when_decorated() -> None:
    """GIVEN a handler annotated with a model defined inside a function (not resolvable from the
    module, with postponed annotations) THEN decorating it fails at once, naming the annotation and
    the way out, instead of running untyped with job.input = None."""

    class LocalOrder(BaseModel):
        order_id: str

    def handler(job: Job[LocalOrder]) -> None:
        return None

    with pytest.raises(
        TypeError, match=r"cannot resolve .*handler's annotation 'Job\[LocalOrder\]' \(NameError.*input=Model"
    ):
        job_handler("local-order")(handler)
    # The way out the message names works.
    wrapped = job_handler("local-order", input=LocalOrder)(handler)
    assert_failed(run_handler(wrapped, {}), message="order_id: Field required", terminal=True)
