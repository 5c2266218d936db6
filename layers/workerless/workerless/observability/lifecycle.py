"""Lifecycle steps: one log line per step of one job, its count, and the listeners."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import Any

from workerless.observability.logs import logger
from workerless.observability.metrics import EVENT_METRICS, PER_TYPE, add_metric


class Lifecycle(StrEnum):
    """The lifecycle steps one job can go through (each a string: a listener or a log reader
    compares them with plain names)."""

    ACTIVATED = "activated"
    DISPATCHED = "dispatched"
    #: Its variables went to the claim check's bucket (the message would have been over its queue's limit).
    OFFLOADED = "offloaded"
    RELEASED = "released"
    STARTED = "started"
    COMPLETED = "completed"
    FAILED = "failed"
    THROWN = "thrown"
    REREPORTED = "rereported"
    REPORT_OWED = "report_owed"
    LEASE_LOST = "lease_lost"
    SKIPPED = "skipped"
    EXTENDED = "extended"
    DEAD_LETTERED = "dead_lettered"
    DEAD_LETTER_REJECTED = "dead_letter_rejected"


#: Every step, in the order above.
EVENTS: tuple[Lifecycle, ...] = tuple(Lifecycle)

#: The steps on the way to a job's outcome: DEBUG lines. Every other step ends the job's handling
#: (its outcome: one INFO line each). Offloading is on the way, but it is logged at INFO as it was
#: before it was a member here (a job large enough to go through S3 is worth a line).
STEPS = frozenset({Lifecycle.ACTIVATED, Lifecycle.DISPATCHED, Lifecycle.STARTED, Lifecycle.EXTENDED})
OUTCOMES = frozenset(EVENTS) - STEPS - {Lifecycle.OFFLOADED}
_INFO = OUTCOMES | {Lifecycle.OFFLOADED}

Listener = Callable[[str, str, dict[str, Any]], None]
#: The listeners of the invocation running in this context: its wiring's (a context variable, as
#: the metrics buffer is, so local mode's functions running in threads of one process each reach
#: their own wiring's; the pipeline's thread pools copy the context).
_LISTENING: contextvars.ContextVar[tuple[Listener, ...]] = contextvars.ContextVar(
    "workerless_lifecycle_listeners", default=()
)


@contextmanager
def listening(listeners: Sequence[Listener]) -> Iterator[None]:
    """Call each of ``listeners(job_type, event, fields)`` for every lifecycle step emitted in this
    context until it ends, instead of any listeners an enclosing context had (each invocation hears
    only its own wiring's). The wiring's observer opens one per invocation with its hooks' listeners.

    Example:
        >>> heard = []
        >>> with listening([lambda job_type, event, fields: heard.append(str(event))]):
        ...     emit("charge", Lifecycle.STARTED)
        >>> emit("charge", Lifecycle.EXTENDED)
        >>> heard
        ['started']
    """
    token = _LISTENING.set(tuple(listeners))
    try:
        yield
    finally:
        _LISTENING.reset(token)


def emit(job_type: str, event: Lifecycle, **fields: Any) -> None:
    """Note one lifecycle step of one job: one log line (INFO for an outcome, DEBUG for a step on the
    way), one count where the step has a metric, every listener of this context (:func:`listening`).

    Never raises: observers must not fail a job.
    """
    try:
        log = logger.info if event in _INFO else logger.debug
        log(f"job {event.replace('_', ' ')}", extra={"lifecycle": event, "job_type": job_type, **fields})
        metric = EVENT_METRICS.get(event)
        if metric is not None:
            add_metric(metric, 1, "Count", job_type=job_type if metric in PER_TYPE else None)
    except Exception:  # an observer must never fail the step it observes
        logger.debug("lifecycle log or metric failed", exc_info=True)
    for listener in _LISTENING.get():
        try:
            listener(job_type, event, fields)
        except Exception:
            logger.exception("lifecycle listener failed", extra={"listener": repr(listener)})
