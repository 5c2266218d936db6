"""The Lambda container's wiring: one :class:`~workerless.wiring.Wiring`, built on first use and
kept for the life of the container.

The entry points use :func:`current` when they are not given a wiring of their own. Tests, the
benchmark, chaos and local mode start over with :func:`reset`, optionally installing a wiring
they built (``reset(Wiring(store=..., queues=..., engine=...))``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from workerless.wiring import Wiring

if TYPE_CHECKING:
    from workerless.engines.base import Engine
    from workerless.ports import JobStore, PayloadStore, Queues

_lock = threading.Lock()
_current: Wiring | None = None


def current() -> Wiring:
    """This container's wiring (a default :class:`Wiring` on the environment's settings, built on
    first use, unless :func:`reset` installed another)."""
    global _current
    wiring = _current
    if wiring is None:
        with _lock:
            if _current is None:
                _current = Wiring()
            wiring = _current
    return wiring


def reset(wiring: Wiring | None = None) -> None:
    """Close the container's wiring (its engine, if built) and forget it, every cached setting
    and boto3 client; ``wiring`` (when given) is the container's from now on."""
    global _current
    from workerless.aws.clients import clear_clients
    from workerless.settings import clear_settings

    with _lock:
        old, _current = _current, wiring
    if old is not None:
        old.close()
    clear_settings()
    clear_clients()


def engine_name() -> str:
    """The engine the container's settings name (or its connection values reveal)."""
    from workerless.settings import engine_values, infer_engine

    return current().settings.engine or infer_engine(engine_values())


def get_engine() -> Engine:
    """The container's engine adapter (:attr:`Wiring.engine`)."""
    return current().engine


def set_engine(engine: Engine) -> None:
    """Use ``engine`` instead of building one (tests, benchmarks with fakes)."""
    current().set_engine(engine)


def get_store() -> JobStore:
    """The container's job store (:attr:`Wiring.store`)."""
    return current().store


def get_queues() -> Queues:
    """The container's queues (:attr:`Wiring.queues`)."""
    return current().queues


def get_payloads() -> PayloadStore:
    """The claim check's bucket (:attr:`Wiring.payloads`; disabled without WORKERLESS_PAYLOAD_BUCKET)."""
    return current().payloads
