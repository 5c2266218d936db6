"""Helpers for testing handlers and the pipeline without an engine or AWS.

For handler authors (see docs/handler-api.md, "Testing a handler")::

    from workerless.testing import assert_completed, make_job, run_handler
    from app import handler

    def test_charges_the_order() -> None:
        outcome = run_handler(handler, {"orderId": "1", "amount": 5})
        assert_completed(outcome, paymentOk=True)

:func:`run_handler` runs the decorated function through the same outcome mapping as the Lambda
wrapper (a dict completes, ``TerminalError`` fails with no retries, ``ThrowError`` throws, any other
exception fails with retries - 1), without SQS, DynamoDB or an engine. The emulators, a
:class:`FakeEngine` and local mode are pytest fixtures in the devkit (``workerless-devkit``, the
development tooling that never ships in the layer), registered when it is installed.

:class:`FakeEngine` is an in-memory :class:`~workerless.engines.base.Engine`: queue jobs with
:meth:`FakeEngine.add_job`, and read back every report, extension and release it received.

Example:
    >>> engine = FakeEngine()
    >>> job_id = engine.add_job("charge-payment", {"orderId": "1", "amount": 5})
    >>> jobs = engine.activate([Demand("charge-payment", 10)], lease_seconds=60)
    >>> engine.report(jobs[0].ref, Outcome.complete({"paymentOk": True}))
    >>> engine.reports[job_id][-1].kind
    'complete'
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from workerless._core.lease import ACTIVATION_LEASE, LeasePolicy
from workerless._core.model import ActivatedJob, Demand, JobRef, Outcome
from workerless.errors import LeaseLostError
from workerless.testing.kit import (
    StubLambdaContext,
    assert_completed,
    assert_failed,
    assert_thrown,
    load_handler,
    make_activated_job,
    make_job,
    run_handler,
)

__all__ = [
    "FakeEngine",
    "FakeJob",
    "StubLambdaContext",
    "assert_completed",
    "assert_failed",
    "assert_thrown",
    "load_handler",
    "make_activated_job",
    "make_job",
    "run_handler",
]


@dataclass
class FakeJob:
    id: str
    type: str
    variables: dict[str, Any]
    retries: int = 3
    leased_until: float = 0.0
    state: str = "ready"  # ready | leased | completed | failed | thrown


@dataclass
class FakeEngine:
    """An in-memory engine with Sheptra-like semantics (one id across retries, attempt = retries)."""

    name: ClassVar[str] = "fake"
    #: Leased at activation (:mod:`workerless._core.lease`).
    lease: ClassVar[LeasePolicy] = ACTIVATION_LEASE
    #: Optional capabilities (:class:`~workerless.engines.base.Engine`): leased at activation, no
    #: liveness report; its task log is :attr:`logs` (:attr:`task_logs`).
    lease_acquire: ClassVar[None] = None
    liveness: ClassVar[None] = None

    clock: Any = time.time
    jobs: dict[str, FakeJob] = field(default_factory=dict)
    reports: dict[str, list[Outcome]] = field(default_factory=dict)
    extensions: dict[str, int] = field(default_factory=dict)
    releases: dict[str, list[str]] = field(default_factory=dict)
    logs: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)
    activations: int = 0
    lost: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0

    def add_job(self, job_type: str, variables: dict[str, Any], *, retries: int = 3) -> str:
        with self._lock:
            self._next += 1
            job_id = f"job-{self._next}"
            self.jobs[job_id] = FakeJob(job_id, job_type, dict(variables), retries)
            return job_id

    def activate(self, demands: Sequence[Demand], lease_seconds: int) -> list[ActivatedJob]:
        now = self.clock()
        out: list[ActivatedJob] = []
        with self._lock:
            self.activations += 1
            for demand in demands:
                taken = 0
                for job in self.jobs.values():
                    if taken >= demand.capacity:
                        break
                    lapsed = job.state == "leased" and job.leased_until <= now
                    if job.type != demand.job_type or not (job.state == "ready" or lapsed):
                        continue
                    if lapsed:
                        job.retries -= 1
                    job.state, job.leased_until = "leased", now + lease_seconds
                    taken += 1
                    out.append(
                        ActivatedJob(
                            ref=JobRef("fake", job.id, job.type, attempt=f"r{job.retries}"),
                            variables=dict(job.variables),
                            lease_expires_at=job.leased_until,
                            activated_at=now,
                            retries=job.retries,
                        )
                    )
        return out

    def _held(self, ref: JobRef) -> FakeJob:
        job = self.jobs.get(ref.job_id)
        if job is None or job.state != "leased" or ref.attempt != f"r{job.retries}" or ref.job_id in self.lost:
            raise LeaseLostError("lease lost", engine="fake", job_id=ref.job_id, status=409)
        return job

    def extend(self, ref: JobRef, lease_seconds: int) -> float:
        with self._lock:
            job = self._held(ref)
            job.leased_until = self.clock() + lease_seconds
            self.extensions[ref.job_id] = self.extensions.get(ref.job_id, 0) + 1
            return job.leased_until

    def report(self, ref: JobRef, outcome: Outcome) -> None:
        with self._lock:
            job = self._held(ref)
            self.reports.setdefault(ref.job_id, []).append(outcome)
            if outcome.kind == "complete":
                job.state = "completed"
            elif outcome.kind == "throw":
                job.state = "thrown"
            elif outcome.retries:
                job.state, job.retries = "ready", outcome.retries
            else:
                job.state = "failed"

    def release(self, job: ActivatedJob, reason: str) -> None:
        with self._lock:
            held = self._held(job.ref)
            held.state = "ready"
            self.releases.setdefault(job.ref.job_id, []).append(reason)

    @property
    def task_logs(self) -> FakeEngine:
        """The handler's log lines land in :attr:`logs` (:meth:`send_logs`)."""
        return self

    def send_logs(self, ref: JobRef, lines: Sequence[Mapping[str, Any]]) -> None:
        with self._lock:
            self.logs.setdefault(ref.job_id, []).extend(lines)

    def close(self) -> None:
        return None
