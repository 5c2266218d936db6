"""The pipeline's seams: what the poller, handler wrapper, heartbeat and dead-letter settler need
from the job store, the queues, the claim check, the shared state and the intent log.

The AWS adapters (:mod:`workerless.aws`) implement them on DynamoDB, SQS and S3; tests and the
benchmark pass their own (fakes, spies, adapters on other clients) through
:class:`~workerless.wiring.Wiring`. Structural Protocols, so an adapter never imports this module
and a fake needs no base class; mypy checks every call the pipeline makes against them.

The engine seam is :class:`~workerless.engines.base.Engine`; :class:`SharedState` lives beside it
(engine adapters keep their cross-container state there) and is re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from workerless.engines.base import Engine, SharedState

if TYPE_CHECKING:
    from workerless._core.batch import SqsRecord
    from workerless._core.claimcheck import PayloadRef
    from workerless._core.model import ActivatedJob, Outcome
    from workerless._core.record import JobRecord, Status
    from workerless.aws.sqs import SendFailure

__all__ = ["Clock", "Engine", "Intents", "JobStore", "PayloadStore", "Queues", "SharedState", "Sleep"]

#: A monotonic clock (``time.monotonic``): the pipeline's deadlines and pauses are on it.
Clock = Callable[[], float]
#: How the pipeline pauses (``time.sleep``); a virtual clock advances instead.
Sleep = Callable[[float], None]


class LambdaContext(Protocol):
    """What workerless reads of Lambda's context object: Lambda's own (Powertools' ``LambdaContext``
    describes it), local mode's, a test's stub."""

    @property
    def aws_request_id(self) -> str: ...

    @property
    def function_name(self) -> str: ...

    def get_remaining_time_in_millis(self) -> int: ...


class JobStore(Protocol):
    """Conditional reads and writes of job records (:class:`workerless.aws.dynamo.JobStore`)."""

    def get(self, key: str) -> JobRecord | None: ...

    def get_many(self, keys: Sequence[str]) -> dict[str, JobRecord]: ...

    def load_outcome(self, record: JobRecord) -> Outcome | None: ...

    def claim(
        self, key: str, *, owner: str, claim_seconds: float, job_type: str, lease: str = ""
    ) -> tuple[bool, JobRecord | None]: ...

    def fence(self, key: str, *, reason: str, job_type: str, lease: str) -> bool: ...

    def mark_begun(self, key: str, *, owner: str) -> bool: ...

    def release(self, key: str, *, owner: str) -> bool: ...

    def store_outcome(self, key: str, *, owner: str, outcome: Outcome, job_type: str = "job") -> JobRecord | None: ...

    def replace_outcome(self, key: str, outcome: Outcome, *, job_type: str = "job") -> None: ...

    def mark_reported(self, key: str, *, note: str | None = None, lease: str = "") -> None: ...

    def mark_owed(self, key: str, *, receipt: str | None, queue_url: str | None = None) -> bool: ...

    def clear_owed(self, key: str) -> None: ...

    def mark(self, key: str, status: Status, *, reason: str, job_type: str, lease: str = "") -> bool: ...


class Queues(Protocol):
    """The SQS calls the pipeline makes (:class:`workerless.aws.sqs.Queues`)."""

    def in_flight(self, queue_url: str) -> int: ...

    def max_message_bytes(self, queue_url: str) -> int | None: ...

    def send_batch(self, queue_url: str, bodies: Sequence[str]) -> list[SendFailure]: ...

    def send(self, queue_url: str, body: Mapping[str, object] | str, *, delay_seconds: int = 0) -> None: ...

    def receive(self, queue_url: str, *, max_messages: int = 10) -> list[SqsRecord]: ...

    def delete(self, queue_url: str, receipt_handle: str) -> None: ...

    def change_visibility(self, queue_url: str, receipt_handle: str, seconds: int) -> None: ...


class PayloadStore(Protocol):
    """The claim check's bucket (:class:`workerless.aws.payloads.Payloads`)."""

    @property
    def enabled(self) -> bool: ...

    def put(self, key: str, data: bytes) -> PayloadRef: ...

    def get(self, ref: PayloadRef) -> bytes: ...


class Intents(Protocol):
    """The poller's intent log (:class:`workerless._poller.intent.IntentLog`): a batch written down before
    dispatch, so the next invocation finishes what a dead poller left."""

    def write(self, jobs: Sequence[ActivatedJob]) -> str | None: ...

    def dispatched(self, intent_id: str | None, jobs: Sequence[ActivatedJob]) -> None: ...

    def clear(self, intent_id: str | None) -> None: ...

    def put_back_dispatched(self, jobs: Sequence[ActivatedJob]) -> bool: ...

    def take_stale(self) -> list[tuple[str, list[ActivatedJob]]]: ...

    def finished(self) -> None: ...
