"""Lambda entry points for the library's own functions (functions/<name>/app.py imports one).

Each builds nothing at import: settings, engine, table and queues are built on first use and kept
for the container's life (:func:`workerless.runtime.current`). Each takes a
:class:`~workerless.wiring.Wiring` of its own as ``wiring`` instead (tests, the benchmark).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from workerless._core.deadline import invocation_deadline as _deadline
from workerless.observability import logger

if TYPE_CHECKING:
    from workerless._core.batch import SqsRecord
    from workerless._core.ports import LambdaContext
    from workerless.engines.base import Engine
    from workerless.wiring import Wiring


def _wiring(wiring: Wiring | None) -> Wiring:
    if wiring is not None:
        return wiring
    from workerless.runtime import current

    return current()


@logger.inject_lambda_context(clear_state=True)
def poller(event: dict[str, Any], context: LambdaContext, wiring: Wiring | None = None) -> dict[str, Any]:
    """Scheduled (EventBridge) or ticked (ticker queue): poll, dispatch, keep the tick alive."""
    from workerless._poller.invocation import poll

    wired = _wiring(wiring)
    with wired.observer.invocation():
        return poll(event, context, wired)


def _batch(event: dict[str, Any], handle: Callable[[SqsRecord], object], wiring: Wiring) -> dict[str, Any]:
    from workerless._core.batch import process_batch

    with wiring.observer.invocation():
        return dict(process_batch(event, handle))


@logger.inject_lambda_context(clear_state=True)
def heartbeat(event: dict[str, Any], context: LambdaContext, wiring: Wiring | None = None) -> dict[str, Any]:
    """Extend the leases of the jobs in each ticket and send the ticket on while any is live."""
    from workerless._heartbeat.heartbeat import calls_deadline, lease_length, process_ticket
    from workerless.aws.clients import call_deadline
    from workerless.errors import MessageFormatError, TicketNotSentError

    wired = _wiring(wiring)
    settings, store, queues = wired.settings, wired.store, wired.queues
    # One deadline for the whole batch: no engine call starts after it; later tickets are carried on.
    deadline = calls_deadline(_deadline(context), http_timeout=settings.http_timeout_seconds, now=time.monotonic())
    # The engine (its secret read) is built inside the per-ticket handling, once per invocation: a
    # Secrets Manager error or throttle then fails each ticket with a short visibility below, not
    # the whole batch with the queue's visibility timeout (every lease in it would lapse).
    built: list[Engine] = []
    failed: list[Exception] = []

    def engine() -> Engine:
        if built:
            return built[0]
        if failed:
            raise failed[0]
        try:
            with call_deadline(deadline):
                built.append(wired.observed_engine)
        except Exception as exc:
            failed.append(exc)
            raise
        return built[0]

    def handle(record: SqsRecord) -> None:
        try:
            process_ticket(
                record.body, settings=settings, engine=engine(), store=store, queues=queues, deadline=deadline
            )
        except MessageFormatError:
            raise  # not a ticket: SQS's redelivery, then the dead-letter queue
        except Exception as exc:
            # The ticket could not be carried on: have SQS bring it back in a third of a lease, not
            # after the queue's visibility timeout, which would cost every lease in it.
            lease = lease_length(settings, built[0]) if built else float(settings.lease_seconds)
            retry_in = exc.retry_in if isinstance(exc, TicketNotSentError) else max(1, int(lease / 3))
            if settings.heartbeat_queue_url:
                try:
                    queues.change_visibility(settings.heartbeat_queue_url, record.receipt_handle, retry_in)
                except Exception:
                    logger.exception("could not shorten the failed ticket's visibility timeout")
            raise

    return _batch(event, handle, wired)


@logger.inject_lambda_context(clear_state=True)
def deadletter(event: dict[str, Any], context: LambdaContext, wiring: Wiring | None = None) -> dict[str, Any]:
    """Settle every dead-lettered job at the engine (fail it with the reason, or report its stored result).

    On its schedule (an EventBridge event): drain the job dead-letter queue
    (WORKERLESS_DEAD_LETTER_QUEUE_URL), and return the drain's counts. Given an SQS batch instead
    (an event source mapping: a stack updated from a template that had one keeps it until the update
    completes), settle that batch and return its partial batch response.
    """
    from workerless._deadletter.deadletter import process_dead_letter

    wired = _wiring(wiring)
    settings = wired.settings
    deadline = _deadline(context)

    def settle(record: SqsRecord) -> None:
        # The engine and the table are built for the first letter only: an empty drain, every
        # minute, calls nothing but SQS (no secret read, no DynamoDB call and its KMS request).
        process_dead_letter(
            record.body,
            message_id=record.message_id,
            receive_count=record.receive_count,
            engine=wired.observed_engine,
            store=wired.store,
            fail_backoff_seconds=settings.fail_backoff_seconds,
            deadline=deadline,
        )

    if "Records" in event:
        return _batch(event, settle, wired)
    from workerless._deadletter.deadletter import drain
    from workerless.errors import ConfigurationError

    url = settings.dead_letter_queue_url
    if not url:
        raise ConfigurationError(
            "WORKERLESS_DEAD_LETTER_QUEUE_URL is not set: the scheduled dead-letter function drains that queue",
            key="WORKERLESS_DEAD_LETTER_QUEUE_URL",
        )
    with wired.observer.invocation():
        report = drain(
            url,
            queues=wired.queues,
            settle=settle,
            deadline=deadline,
            # A letter may make a few engine calls, each up to one HTTP timeout.
            reserve_seconds=settings.http_timeout_seconds + 2.0,
        )
    # An empty drain (every minute, nearly always) logs at DEBUG: CloudWatch Logs bills each line.
    (logger.info if report.received else logger.debug)("dead-letter drain finished", extra={"report": report.counts()})
    return report.counts()
