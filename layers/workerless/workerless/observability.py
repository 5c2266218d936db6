"""Logging and lifecycle events.

One Powertools Logger for the library (JSON, with job id / type / engine / instance id and the
engine's traceparent appended as correlation keys while a job is being handled), and one
:func:`record` call per job lifecycle step. Listeners (local mode's summary, tests, metrics)
subscribe with :func:`add_listener`; in Lambda with no listener a record costs a loop over an
empty list.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger

logger = Logger(service="workerless", child=False)

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
    "lease_lost",
    "skipped",
    "extended",
    "dead_lettered",
)

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


def record(job_type: str, event: str, **fields: Any) -> None:
    """Note one lifecycle step of one job (never raises: observers must not fail a job)."""
    for listener in list(_listeners):
        try:
            listener(job_type, event, fields)
        except Exception:
            logger.exception("lifecycle listener failed", extra={"listener": repr(listener)})
