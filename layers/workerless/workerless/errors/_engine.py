"""What an engine call raises: the engine adapters translate every failure into one of these, once,
at the boundary (see :mod:`workerless.errors` for the tree). :class:`RetryableEngineError`: the same
call may succeed later; :class:`FinalEngineError`: it never will."""

from __future__ import annotations

from typing import Any

from workerless.errors._base import WorkerlessError


class EngineError(WorkerlessError):
    """An engine call failed. ``problem`` is the parsed RFC 9457 body when the engine sent one."""

    def __init__(
        self,
        message: str,
        *,
        engine: str,
        job_id: str | None = None,
        status: int | None = None,
        problem: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.engine = engine
        self.job_id = job_id
        self.status = status
        self.problem = problem or {}

    def __str__(self) -> str:
        parts = [super().__str__(), f"engine={self.engine}"]
        if self.job_id is not None:
            parts.append(f"job_id={self.job_id}")
        if self.status is not None:
            parts.append(f"status={self.status}")
        return " ".join(parts)


class RetryableEngineError(EngineError):
    """The same call may succeed later; wait ``retry_after`` seconds (None: use the policy's backoff)."""

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        engine: str,
        job_id: str | None = None,
        status: int | None = None,
        problem: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, engine=engine, job_id=job_id, status=status, problem=problem)
        self.retry_after = retry_after


class RateLimitedError(RetryableEngineError):
    """429, or 503 with Retry-After: the engine asked us to slow down."""


class EngineUnavailableError(RetryableEngineError):
    """5xx, a timeout, or a refused/dropped connection."""


class GarbledResponseError(EngineUnavailableError):
    """The answer could not be read at all: a truncated or empty body where JSON was due, as a proxy
    or a dropped connection leaves it. Unlike :class:`ResponseShapeError` (a readable answer of the
    wrong shape: the engine speaks another contract, final), this says nothing about the engine, so
    the same call may be made again where the engine's contract allows it. ``field`` names what was
    unreadable (``"body"``). The request may have taken effect: the caller treats the outcome as
    unknown."""

    def __init__(
        self,
        message: str,
        *,
        engine: str,
        field: str = "body",
        job_id: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message, engine=engine, job_id=job_id, status=status)
        self.field = field


class AuthExpiredError(RetryableEngineError):
    """401: the credential was refused. Drop it, mint a new one, retry once."""


class MisdirectedError(RetryableEngineError):
    """421 Misdirected Request: the environment moved. Re-resolve the engine address, retry."""


class FinalEngineError(EngineError):
    """The same call will never succeed; do not retry it."""


class LeaseLostError(FinalEngineError):
    """The lease is gone: another worker holds the job, or it is already finished.

    On extend: stop working on the job. On report: treat as "someone else finished this".
    """


class PayloadTooLargeError(FinalEngineError):
    """The request was over the engine's cap (413, or checked before sending)."""

    def __init__(
        self,
        message: str,
        *,
        engine: str,
        cap: int,
        job_id: str | None = None,
        status: int | None = None,
        problem: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, engine=engine, job_id=job_id, status=status, problem=problem)
        self.cap = cap


class RejectedError(FinalEngineError):
    """Any other 4xx: the request is wrong and resending it will not help."""


class ResponseShapeError(FinalEngineError):
    """The engine answered something that is not the documented shape; ``field`` names what."""

    def __init__(
        self,
        message: str,
        *,
        engine: str,
        field: str,
        job_id: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message, engine=engine, job_id=job_id, status=status)
        self.field = field
