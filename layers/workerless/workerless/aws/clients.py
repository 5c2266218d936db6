"""Lazily built, cached boto3 clients (one per service per container)."""

from __future__ import annotations

import functools
import threading
from typing import Any

_lock = threading.Lock()


@functools.cache
def _client(service: str, endpoint_url: str | None) -> Any:
    import boto3
    from botocore.config import Config

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
