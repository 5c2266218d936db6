"""The observer in the wiring: the engine as the pipeline calls it (failed calls counted) and an
invocation's metrics.

:class:`ObservedEngine` is a typed decorator (:class:`~workerless.engines.decorator.EngineDecorator`):
it implements :class:`~workerless.engines.base.Engine` and forwards each call explicitly, so mypy
checks what it forwards and a call the Protocol lacks fails at type-check time instead of being
forwarded blindly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from workerless import observability
from workerless.engines.decorator import EngineDecorator
from workerless.errors import EngineError

if TYPE_CHECKING:
    from workerless._poller.poller import PollReport
    from workerless.engines.base import Engine

T = TypeVar("T")


class ObservedEngine(EngineDecorator):
    """An engine whose failing calls are counted in ``EngineErrors`` by status.

    Calls that raise an :class:`~workerless.errors.EngineError` are counted and the error re-raised
    unchanged; everything else is the adapter's own answer.
    """

    def around(self, operation: str, job_ids: Sequence[str], call: Callable[[], T]) -> T:
        try:
            return call()
        except EngineError as exc:
            observability.engine_error(exc, operation=operation)
            raise


def observe_engine(engine: Engine) -> Engine:
    """``engine`` wrapped in :class:`ObservedEngine` (once)."""
    return engine if isinstance(engine, ObservedEngine) else ObservedEngine(engine)


class Observer:
    """What the wiring's entry points observe through: the engine they call, one invocation's
    metrics and lifecycle listeners, a poller invocation's counts. The lifecycle steps themselves go
    through :func:`workerless.observability.emit` wherever they happen; it calls the ``listeners``
    given here (the wiring's hooks') for the steps of an invocation opened by :meth:`invocation`."""

    def __init__(self, listeners: Sequence[observability.Listener] = (), *, metrics: bool = True) -> None:
        self.listeners = tuple(listeners)
        self.metrics = metrics  # False: its invocations write no metrics (local mode's wirings)

    def engine(self, engine: Engine) -> Engine:
        """``engine`` as the pipeline calls it (:class:`ObservedEngine`, once)."""
        return observe_engine(engine)

    @contextmanager
    def invocation(self) -> Iterator[observability.MetricsBuffer | None]:
        """Collect one invocation's metrics (written as EMF lines when it ends) and call the listeners
        for its lifecycle steps."""
        with observability.listening(self.listeners), observability.invocation_metrics(self.metrics) as buffer:
            yield buffer

    def poll_report(self, report: PollReport) -> None:
        """Count one poller invocation's report (nothing for an idle one)."""
        observability.poll_report(report)
