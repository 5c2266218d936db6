"""Lazily built, cached boto3 clients (one per service per container), and the deadline that
bounds their calls."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()


class DeadlineReachedError(Exception):
    """An AWS request was not sent: the :func:`call_deadline` of the code making it has passed.
    (Not a botocore error, so botocore's retry handler does not retry it; the store and queue
    wrappers translate it.)"""

    def __init__(self) -> None:
        super().__init__("the invocation's deadline for AWS calls has passed; the request was not sent")


#: Every runtime client's timeouts (seconds): how long an HTTP attempt may take to connect, then
#: how long it may wait for each read of the answer. One attempt of a call (a small request and
#: answer, as every call of the pipeline's but a claim-check upload is) takes at most their sum.
CONNECT_TIMEOUT_SECONDS = 3
READ_TIMEOUT_SECONDS = 10
ATTEMPT_SECONDS = CONNECT_TIMEOUT_SECONDS + READ_TIMEOUT_SECONDS

#: The time.monotonic() after which no AWS call (and no botocore retry of one) may start, for the
#: code running in this context; None: no deadline.
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("workerless_aws_deadline", default=None)


@contextlib.contextmanager
def call_deadline(deadline: float | None, *, attempt_seconds: float = 0.0) -> Iterator[None]:
    """Within the block, refuse to start any AWS request (first attempt or botocore retry) once
    ``time.monotonic()`` has reached ``deadline - attempt_seconds``: the call fails with
    :class:`DeadlineReachedError`.

    botocore's own retries (standard mode, 4 attempts, up to 20 s backoff) and a caller's retry loop
    would otherwise carry on past the Lambda's timeout, where Lambda kills the process mid-call. An
    attempt already started is bounded only by the client's connect and read timeouts: with
    ``attempt_seconds`` :data:`ATTEMPT_SECONDS` none still runs at ``deadline`` (the poller's calls);
    with 0 one may run up to that long past it.
    """
    token = _deadline.set(None if deadline is None else deadline - attempt_seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def current_deadline() -> float | None:
    """The ``time.monotonic()`` deadline of the :func:`call_deadline` block running (None: none),
    for the retry policies that loop over AWS calls (:mod:`workerless.retry`)."""
    return _deadline.get()


def _refuse_past_deadline(**_: Any) -> None:
    # "before-send" runs before every HTTP attempt of every call, botocore's retries included.
    deadline = _deadline.get()
    if deadline is not None and time.monotonic() >= deadline:
        raise DeadlineReachedError()


#: SDK loggers whose DEBUG records print every request's parameters and body. Ours carry credentials:
#: SQS job messages and heartbeat tickets hold node-flow lease tokens and StageNext ack tokens, and
#: the job table holds the engines' shared state (tokens, worker sessions).
_SDK_LOGGERS = ("botocore", "boto3", "s3transfer")


def quiet_sdk_debug_logs() -> None:
    """Keep the AWS SDK's loggers at INFO or above, whatever the root logger's level.

    Lambda's ApplicationLogLevel DEBUG (or a root logger set to DEBUG) would otherwise let botocore
    log each SendMessage / PutItem body, tokens included. Powertools' own DEBUG is unaffected.
    """
    import logging

    for name in _SDK_LOGGERS:
        sdk_logger = logging.getLogger(name)
        if sdk_logger.level < logging.INFO:  # NOTSET (inherits the root's level) or DEBUG
            sdk_logger.setLevel(logging.INFO)


@functools.cache
def _client(service: str, endpoint_url: str | None) -> Any:
    import boto3
    from botocore.config import Config

    quiet_sdk_debug_logs()

    config = Config(
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        read_timeout=READ_TIMEOUT_SECONDS,
        retries={"mode": "standard", "max_attempts": 4},
        tcp_keepalive=True,
    )
    # Sessions are not thread-safe; clients are. Build under a lock, share the client.
    with _lock:
        session: Any = boto3.session.Session()
        built = session.client(service, endpoint_url=endpoint_url, config=config)
    # First among the "before-send" handlers: ahead of any that answers in place of sending (moto's
    # in-process AWS, botocore's Stubber), so a refused request is not carried out by them either.
    built.meta.events.register_first("before-send", _refuse_past_deadline, unique_id="workerless-deadline")
    return built


def client(service: str) -> Any:
    """The cached client for ``service`` (endpoint from settings: None in Lambda)."""
    from workerless.settings import get_settings

    return _client(service, get_settings().aws_endpoint_url)


def clear_clients() -> None:
    """Forget cached clients (tests, local mode switching mocks)."""
    _client.cache_clear()
