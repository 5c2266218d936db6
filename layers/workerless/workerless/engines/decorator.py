"""A base for engine decorators: an :class:`~workerless.engines.base.Engine` that forwards every
call of the Protocol to an inner engine through one hook, :meth:`EngineDecorator.around`: the core
calls, and those of each optional capability the inner engine has (a capability it lacks is None
here too).

The runtime's observer (:class:`workerless._core.observer.ObservedEngine`: failed calls counted) and the
devkit's chaos engine (faults injected before calls) are both decorators. Each used to spell out the
forwarding methods; here they are written once and typed against the Protocol, so a call the
Protocol gains is forwarded by every decorator, and one a decorator forgets cannot exist.

Example:
    >>> from workerless.testing import FakeEngine
    >>> class Tally(EngineDecorator):
    ...     calls: list[str] = []
    ...     def around(self, operation, job_ids, call):
    ...         self.calls.append(operation)
    ...         return call()
    >>> engine = Tally(FakeEngine())
    >>> engine.activate([], 60)
    []
    >>> engine.calls, engine.name == engine.inner.name
    (['activate'], True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from workerless._core.lease import LeasePolicy
    from workerless._core.model import ActivatedJob, Demand, JobRef, Outcome
    from workerless.engines.base import Engine, LeaseAcquire, Liveness, TaskLogs

T = TypeVar("T")


class EngineDecorator:
    """Forwards every Engine call to ``inner`` through :meth:`around`; subclasses override it (and,
    for bookkeeping around one call, that call, calling ``super()``)."""

    def __init__(self, inner: Engine) -> None:
        self._inner = inner

    @property
    def inner(self) -> Engine:
        """The engine this one decorates."""
        return self._inner

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def lease(self) -> LeasePolicy:
        return self._inner.lease

    def around(self, operation: str, job_ids: Sequence[str], call: Callable[[], T]) -> T:
        """Make one call of the inner engine: ``operation`` is the Protocol method's name,
        ``job_ids`` the jobs it concerns (none for activate, after_cycle, close)."""
        return call()

    def activate(self, demands: Sequence[Demand], lease_seconds: int) -> list[ActivatedJob]:
        return self.around("activate", (), lambda: self._inner.activate(demands, lease_seconds))

    def extend(self, ref: JobRef, lease_seconds: int) -> float:
        return self.around("extend", (ref.job_id,), lambda: self._inner.extend(ref, lease_seconds))

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        self.around("report", (ref.job_id,), lambda: self._inner.report(ref, outcome))

    def release(self, job: ActivatedJob, reason: str) -> None:
        self.around("release", (job.ref.job_id,), lambda: self._inner.release(job, reason))

    @property
    def lease_acquire(self) -> LeaseAcquire | None:
        inner = self._inner.lease_acquire
        return None if inner is None else _Acquire(self, inner)

    @property
    def task_logs(self) -> TaskLogs | None:
        inner = self._inner.task_logs
        return None if inner is None else _Logs(self, inner)

    @property
    def liveness(self) -> Liveness | None:
        inner = self._inner.liveness
        return None if inner is None else _Liveness(self, inner)

    def close(self) -> None:
        self.around("close", (), self._inner.close)


class _Acquire:
    """The inner engine's lease acquire, through the decorator's :meth:`~EngineDecorator.around`."""

    def __init__(self, outer: EngineDecorator, inner: LeaseAcquire) -> None:
        self._outer, self._inner = outer, inner

    def begin(self, job: ActivatedJob) -> bool:
        return self._outer.around("begin", (job.ref.job_id,), lambda: self._inner.begin(job))

    def skip(self, ref: JobRef) -> None:
        self._outer.around("skip", (ref.job_id,), lambda: self._inner.skip(ref))


class _Logs:
    """The inner engine's task logs, through the decorator's :meth:`~EngineDecorator.around`."""

    def __init__(self, outer: EngineDecorator, inner: TaskLogs) -> None:
        self._outer, self._inner = outer, inner

    def send_logs(self, ref: JobRef, lines: Sequence[Mapping[str, Any]]) -> None:
        self._outer.around("send_logs", (ref.job_id,), lambda: self._inner.send_logs(ref, lines))


class _Liveness:
    """The inner engine's liveness report, through the decorator's :meth:`~EngineDecorator.around`."""

    def __init__(self, outer: EngineDecorator, inner: Liveness) -> None:
        self._outer, self._inner = outer, inner

    def after_cycle(self, counters: Mapping[str, int]) -> None:
        self._outer.around("after_cycle", (), lambda: self._inner.after_cycle(counters))
