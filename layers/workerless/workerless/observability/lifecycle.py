"""Lifecycle steps: one log line per step of one job, its count, and the listeners."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from workerless.observability.logs import logger
from workerless.observability.metrics import EVENT_METRICS, PER_TYPE, add_metric

#: The lifecycle steps one job can go through.
EVENTS = (
    "activated",
    "dispatched",
    "released",
    "started",
    "completed",
    "failed",
    "thrown",
    "rereported",
    "report_owed",
    "lease_lost",
    "skipped",
    "extended",
    "dead_lettered",
    "dead_letter_rejected",
)

#: The steps on the way to a job's outcome: DEBUG lines. Every other step ends the job's handling
#: (its outcome: one INFO line each).
STEPS = frozenset({"activated", "dispatched", "started", "extended"})
OUTCOMES = frozenset(EVENTS) - STEPS

Listener = Callable[[str, str, dict[str, Any]], None]
_listeners: list[Listener] = []
_lock = threading.Lock()


def add_listener(listener: Listener) -> None:
    """Call ``listener(job_type, event, fields)`` for every lifecycle event from now on."""
    with _lock:
        _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


def emit(job_type: str, event: str, **fields: Any) -> None:
    """Note one lifecycle step of one job: one log line (INFO for an outcome, DEBUG for a step on the
    way), one count where the step has a metric, every listener.

    Never raises: observers must not fail a job.
    """
    try:
        log = logger.info if event in OUTCOMES else logger.debug
        log(f"job {event.replace('_', ' ')}", extra={"lifecycle": event, "job_type": job_type, **fields})
        metric = EVENT_METRICS.get(event)
        if metric is not None:
            add_metric(metric, 1, "Count", job_type=job_type if metric in PER_TYPE else None)
    except Exception:  # an observer must never fail the step it observes
        logger.debug("lifecycle log or metric failed", exc_info=True)
    for listener in list(_listeners):
        try:
            listener(job_type, event, fields)
        except Exception:
            logger.exception("lifecycle listener failed", extra={"listener": repr(listener)})
