"""The per-container singletons: settings, engine adapter, job store, queues.

Built lazily on first use (never at import) and kept for the life of the Lambda container, so a
warm invocation reuses the engine's token, HTTP connection and boto3 clients. Tests and local mode
call :func:`reset` to start over.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from workerless.settings import clear_settings, engine_values, get_settings, infer_engine

if TYPE_CHECKING:
    from workerless.aws.dynamo import JobStore
    from workerless.aws.payloads import Payloads
    from workerless.aws.sqs import Queues
    from workerless.engines.base import Engine

_lock = threading.RLock()
_built: dict[str, Any] = {}


def _get(name: str, build: Any) -> Any:
    value = _built.get(name)
    if value is None:
        with _lock:
            value = _built.get(name)
            if value is None:
                value = build()
                _built[name] = value
    return value


def engine_name() -> str:
    settings = get_settings()
    return settings.engine or infer_engine(engine_values())


def get_store() -> JobStore:
    def build() -> JobStore:
        from workerless.aws.dynamo import JobStore

        settings = get_settings()
        return JobStore(
            settings.table_name,
            ttl_seconds=settings.record_ttl_seconds,
            payloads=get_payloads(),
            max_outcome_bytes=settings.max_payload_bytes,
        )

    store: JobStore = _get("store", build)
    return store


def get_payloads() -> Payloads:
    """The claim check's bucket (WORKERLESS_PAYLOAD_BUCKET; disabled without one)."""

    def build() -> Payloads:
        from workerless.aws.payloads import Payloads

        return Payloads(get_settings().payload_bucket)

    payloads: Payloads = _get("payloads", build)
    return payloads


def get_queues() -> Queues:
    def build() -> Queues:
        from workerless.aws.sqs import Queues

        return Queues()

    queues: Queues = _get("queues", build)
    return queues


def get_engine() -> Engine:
    def build() -> Engine:
        from workerless.aws.dynamo import DynamoState
        from workerless.engines import build_engine, new_http_client

        settings = get_settings()
        values = engine_values()
        name = settings.engine or infer_engine(values)
        client = new_http_client(settings.http_timeout_seconds)
        _built["http"] = client  # owned here: closed by reset(), whatever the adapter does
        return build_engine(
            name,
            values,
            client,
            worker_id=settings.worker_id,
            state=DynamoState(get_store()),
        )

    engine: Engine = _get("engine", build)
    return engine


def set_engine(engine: Engine) -> None:
    """Use ``engine`` instead of building one (tests, benchmarks with fakes)."""
    with _lock:
        _built["engine"] = engine


def reset() -> None:
    """Close the engine (if built) and forget every singleton and cached setting."""
    from workerless.aws.clients import clear_clients

    with _lock:
        engine = _built.pop("engine", None)
        client = _built.pop("http", None)
        _built.clear()
    if engine is not None:
        try:
            engine.close()
        except Exception:  # noqa: BLE001 - closing is best effort (a session shutdown call)
            from workerless.observability import logger

            logger.warning("engine close failed", exc_info=True)
    if client is not None:
        client.close()
    clear_settings()
    clear_clients()
