"""The handler wrapper: an SQS batch of jobs in, a partial batch response out.

Every record of the batch (one at a time, in order: :mod:`workerless._core.batch`) is parsed into the job
it carries and handed to a :class:`~workerless._handler.delivery.Delivery`, which runs the delivery protocol
(claim → decide → begin → run → store → report) and says whether the record is done (deleted) or
must stay (a batch item failure: another delivery holds the claim, or the report is still owed and
the heartbeat re-sends it).

A record that keeps failing at the AWS level (crash, timeout, bad message) goes to the job DLQ
(every route's) after maxReceiveCount, where the dead-letter function fails the job at the engine with the reason.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, assert_never

from workerless import observability
from workerless._core.model import ActivatedJob
from workerless._core.settings import Settings
from workerless._handler.delivery import Delivery
from workerless._handler.execution import HandlerFunction
from workerless._handler.startgate import HAND_BACK_VISIBILITY_SECONDS, RunTimes, StartGate, Watchdog
from workerless._handler.typed import spec_of
from workerless._handler.verdict import Ack, Redeliver
from workerless.errors import MessageFormatError
from workerless.observability import logger

if TYPE_CHECKING:
    from pydantic import BaseModel

    from workerless._core.ports import JobStore, LambdaContext, PayloadStore
    from workerless.engines.base import Engine
    from workerless.wiring import Wiring

__all__ = ["HandlerFunction", "JobProcessor", "LambdaHandler", "job_handler"]

#: The URL of the queue the record being handled came from (its eventSourceARN), stored with the
#: receipt handle when a report is left owed: the heartbeat deletes the message there without
#: knowing the routes. A context variable: local mode runs a function's batches on several threads.
_record_queue_url: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "workerless_record_queue_url", default=None
)
#: An async handler's default bound on the jobs of one batch run at once: SQS's largest batch.
DEFAULT_ASYNC_CONCURRENCY = 10


class JobProcessor:
    """Runs one job type's handler over SQS records. Built once per container by :func:`job_handler`."""

    def __init__(
        self,
        job_type: str,
        fn: HandlerFunction,
        *,
        backoff_seconds: int | None = None,
        input: type[BaseModel] | None = None,
        concurrency: int | None = None,
    ) -> None:
        self.job_type = job_type
        self.fn = fn
        self.backoff_seconds = backoff_seconds
        #: The input model and kind of ``fn``, read once per container.
        self.spec = spec_of(fn, input)
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        #: How many jobs of one batch run at once: an async handler's default is the largest SQS
        #: batch (10); a sync handler runs its batch one job after another unless told otherwise.
        self.concurrency = (
            concurrency if concurrency is not None else (DEFAULT_ASYNC_CONCURRENCY if self.spec.is_async else 1)
        )
        #: The longest run of this type's jobs in this container: a job starts only with that much time left.
        self.run_times = RunTimes()
        #: The watchdog thread of this type's batches in this container (started at the first batch of two or more).
        self.watchdog = Watchdog()

    # -- the Lambda entry point ---------------------------------------------------------------------
    def handle_batch(
        self, event: dict[str, Any], context: LambdaContext, wiring: Wiring | None = None
    ) -> dict[str, Any]:
        """Process one SQS batch of this job type; ``wiring``: the container's when None."""
        from workerless._core.batch import SqsRecord, process_batch
        from workerless.aws.sqs import queue_url_of_arn
        from workerless.runtime import current

        wired = wiring or current()

        # Every record of one batch comes from the function's one event source: its queue.
        sources = {
            r.get("messageId"): r.get("eventSourceARN") for r in event.get("Records") or [] if isinstance(r, dict)
        }

        receipts = {
            r.get("messageId"): r.get("receiptHandle") for r in event.get("Records") or [] if isinstance(r, dict)
        }

        def hand_back(message_id: str) -> None:
            queue_url = queue_url_of_arn(sources.get(message_id))
            receipt = receipts.get(message_id)
            if queue_url and isinstance(receipt, str):
                wired.queues.change_visibility(queue_url, receipt, HAND_BACK_VISIBILITY_SECONDS)

        # Jobs start only while they can finish; the rest are handed back at once (workerless._handler.startgate).
        gate = StartGate.of_context(
            context,
            runs=self.run_times,
            hand_back=hand_back,
            message_ids=[m for m in receipts if isinstance(m, str)],
            watchdog=self.watchdog,
        )

        def record_handler(record: SqsRecord) -> None:
            gate.admit(record.message_id)
            token = _record_queue_url.set(queue_url_of_arn(sources.get(record.message_id)))
            try:
                gate.run(
                    lambda: self.process(
                        record.body,
                        message_id=record.message_id,
                        receive_count=record.receive_count,
                        context=context,
                        receipt_handle=record.receipt_handle,
                        wiring=wired,
                    )
                )
            finally:
                _record_queue_url.reset(token)

        try:
            observability.configure_from_settings(wired.settings)  # its log level (cached settings)
        except Exception:
            logger.debug("settings not readable for observability", exc_info=True)
        # One invocation's metrics, written as EMF lines when the batch is done.
        with wired.observer.invocation(), gate:
            return dict(process_batch(event, record_handler, concurrency=self.concurrency))

    # -- one record ---------------------------------------------------------------------------------
    def process(
        self,
        body: str,
        *,
        message_id: str,
        receive_count: int,
        context: LambdaContext,
        receipt_handle: str | None = None,
        wiring: Wiring | None = None,
    ) -> None:
        """Handle one SQS record. Returns normally when nothing more is owed for it (delete it);
        raises when it must be redelivered, or kept in flight while its report is owed
        (``receipt_handle`` lets the heartbeat delete it then). ``wiring``: the container's when None."""
        from workerless.runtime import current

        wired = wiring or current()

        try:
            job = ActivatedJob.from_message(body)
        except MessageFormatError as exc:
            # Not ours to interpret: redelivery then the DLQ keeps it visible; never dropped.
            logger.error("message is not a workerless job", extra={"message_id": message_id, "problem": str(exc)})
            raise
        if job.ref.job_type != self.job_type:
            logger.error(
                "job delivered to the wrong handler",
                extra={"job_id": job.ref.job_id, "job_type": job.ref.job_type, "handler_type": self.job_type},
            )
            raise MessageFormatError(
                f"job of type {job.ref.job_type!r} reached the {self.job_type!r} handler", field="ref.job_type"
            )

        keys = {
            "job_id": job.ref.job_id,
            "job_type": job.ref.job_type,
            "engine": job.ref.engine,
            "instance_id": job.instance_id,
            "traceparent": job.traceparent,
            "trace_id": observability.trace_id_of(job.traceparent),
        }
        logger.thread_safe_append_keys(**keys)
        try:
            verdict = self.delivery(
                job,
                message_id=message_id,
                receive_count=receive_count,
                context=context,
                engine=wired.observed_engine,
                store=wired.store,
                receipt=receipt_handle,
                payloads=wired.payloads,
                settings=wired.settings,
            ).deliver()
        finally:
            logger.thread_safe_remove_keys(list(keys))
        match verdict:
            case Ack():
                return
            case Redeliver():
                raise verdict.error
            case _:
                assert_never(verdict)

    def delivery(
        self,
        job: ActivatedJob,
        *,
        message_id: str,
        receive_count: int,
        context: LambdaContext,
        engine: Engine,
        store: JobStore,
        receipt: str | None = None,
        payloads: PayloadStore | None = None,
        settings: Settings | None = None,
    ) -> Delivery:
        """The :class:`~workerless._handler.delivery.Delivery` of ``job`` to this processor's function, on
        ``settings`` (the wiring's: its backoff unless the handler names one, its payload limit, X-Ray)."""
        settings = settings if settings is not None else Settings()
        return Delivery(
            job,
            self.fn,
            engine=engine,
            store=store,
            message_id=message_id,
            receive_count=receive_count,
            context=context,
            receipt=receipt,
            queue_url=_record_queue_url.get() if receipt else None,
            backoff_seconds=self.backoff_seconds if self.backoff_seconds is not None else settings.fail_backoff_seconds,
            max_payload_bytes=settings.max_payload_bytes,
            payloads=payloads,
            spec=self.spec,
            xray=settings.xray_tracing,
        )


def job_handler(
    job_type: str,
    *,
    backoff_seconds: int | None = None,
    input: type[BaseModel] | None = None,
    concurrency: int | None = None,
) -> Callable[[HandlerFunction], LambdaHandler]:
    """Turn ``fn(job) -> dict`` into the Lambda entry point for one job type.

    ``fn(job: Job[Model])`` (or ``input=Model``) validates the variables against the pydantic
    ``Model`` before ``fn`` runs (``job.input``); invalid ones fail the job terminally, naming each
    field. ``fn`` may return a pydantic model, and may be ``async def``: then up to ``concurrency``
    jobs of one batch (default 10) run at once.

    Returning a dict completes the job with those variables; raising :class:`TerminalError` fails
    it with no retries left; raising :class:`ThrowError` throws a business error; any other
    exception fails it with ``retries - 1`` and a backoff (``backoff_seconds``, default
    WORKERLESS_FAIL_BACKOFF_SECONDS).

    Example:
        >>> from workerless import Job, TerminalError, job_handler
        >>> @job_handler("charge-payment")
        ... def handler(job: Job) -> dict:
        ...     return {"paymentOk": True}
    """

    def decorate(fn: HandlerFunction) -> LambdaHandler:
        return LambdaHandler(
            JobProcessor(job_type, fn, backoff_seconds=backoff_seconds, input=input, concurrency=concurrency)
        )

    return decorate


class LambdaHandler:
    """The Lambda entry point :func:`job_handler` makes of a function: Lambda calls it as
    ``handler(event, context)``; a test may pass a wiring of its own as ``wiring``. It carries the
    function's name and docstring, its ``job_type`` and the :class:`JobProcessor` that runs it.

    Example:
        >>> from workerless import Job, job_handler
        >>> @job_handler("send-receipt")
        ... def handler(job: Job) -> dict:
        ...     "Send the receipt."
        ...     return {}
        >>> handler.job_type, handler.__name__, handler.__doc__
        ('send-receipt', 'handler', 'Send the receipt.')
    """

    def __init__(self, processor: JobProcessor) -> None:
        self.processor = processor
        self.job_type = processor.job_type
        functools.update_wrapper(self, processor.fn)

    def __call__(self, event: dict[str, Any], context: LambdaContext, wiring: Wiring | None = None) -> dict[str, Any]:
        return self.processor.handle_batch(event, context, wiring)
