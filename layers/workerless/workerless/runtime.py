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
    from workerless._core.ports import JobStore, PayloadStore, Queues
    from workerless.engines.base import Engine


class _Container:
    """The one slot this Lambda container's wiring lives in (the composition root's; no other module
    keeps a dependency)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.wiring: Wiring | None = None


_container = _Container()


def current() -> Wiring:
    """This container's wiring (a default :class:`Wiring` on the environment's settings, built on
    first use, unless :func:`reset` installed another)."""
    wiring = _container.wiring
    if wiring is None:
        with _container.lock:
            if _container.wiring is None:
                _container.wiring = Wiring()
            wiring = _container.wiring
    return wiring


def reset(wiring: Wiring | None = None) -> None:
    """Close the container's wiring (its engine, if built) and forget it, with the settings, boto3
    clients and routes it held; ``wiring`` (when given) is the container's from now on."""
    with _container.lock:
        old, _container.wiring = _container.wiring, wiring
    if old is not None:
        old.close()


def engine_name() -> str:
    """The engine the container's settings name (or its connection values reveal)."""
    from workerless._core.settings import infer_engine

    wiring = current()
    return wiring.settings.engine or infer_engine(wiring.engine_values())


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
