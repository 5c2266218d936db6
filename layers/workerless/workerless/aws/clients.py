"""Lazily built, cached boto3 clients (one per service per container)."""

from __future__ import annotations

import functools
import threading
from typing import Any

_lock = threading.Lock()


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
        connect_timeout=3,
        read_timeout=10,
        retries={"mode": "standard", "max_attempts": 4},
        tcp_keepalive=True,
    )
    # Sessions are not thread-safe; clients are. Build under a lock, share the client.
    with _lock:
        session: Any = boto3.session.Session()
        return session.client(service, endpoint_url=endpoint_url, config=config)


def client(service: str) -> Any:
    """The cached client for ``service`` (endpoint from settings: None in Lambda)."""
    from workerless.settings import get_settings

    return _client(service, get_settings().aws_endpoint_url)


def clear_clients() -> None:
    """Forget cached clients (tests, local mode switching mocks)."""
    _client.cache_clear()
